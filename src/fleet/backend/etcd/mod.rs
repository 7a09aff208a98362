//! The etcd backend: the budget in keys of an etcd the operator runs for pleg-guard (issue 21).
//!
//! - [`group`]: a group's keys, their values, a read of them and the grant and release
//!   transactions, as data (pure);
//! - [`member_cache`]: the member keys read once, then kept by a watch (pure);
//! - [`tls`]: the TLS material and the pre-flight handshake;
//! - [`wire`]: etcd-client's types to the fleet's (errors by kind, transactions, answers);
//! - [`connection`]: the connection and the calls the fleet makes;
//! - [`actor`]: the task that serves the handle's commands ([`crate::fleet::backend`]).

pub mod actor;
pub mod connection;
pub mod group;
pub mod member_cache;
pub mod tls;
pub mod wire;

use tokio::sync::{mpsc, watch};

use super::{Command, Shared};
use crate::fleet::{FleetError, FleetSettings, FleetView, storm};

pub use connection::{Connection, Me, Released, TURN};
pub use tls::TlsMaterial;

/// Check the settings (the TLS files are read at once) and start the task; never waits for
/// etcd.
pub(crate) fn start(
    settings: FleetSettings,
    tx: watch::Sender<Shared>,
    rx: mpsc::UnboundedReceiver<Command>,
) -> Result<tokio::task::JoinHandle<()>, FleetError> {
    let tls = TlsMaterial::load(settings.tls.as_ref())?;
    if settings.endpoints.is_empty() {
        return Err(FleetError::Config("no etcd endpoints".to_owned()));
    }
    Ok(tokio::spawn(actor::Actor::new(settings, tls, tx).run(rx)))
}

/// Connect once and read the group, as `check-config --connect` does.
pub(crate) async fn check(settings: &FleetSettings) -> Result<FleetView, FleetError> {
    let tls = TlsMaterial::load(settings.tls.as_ref())?;
    let mut conn = Connection::open(settings, &tls).await?;
    let keys = group::Keys::new(&settings.group_prefix());
    let snap = conn
        .snapshot(
            &keys,
            &settings.node,
            None,
            settings.max_disruptive.slots(0),
        )
        .await?;
    let mut view = actor::view_of(settings, &snap, true, None, 0);
    if settings.max_unhealthy != storm::MaxUnhealthy::Off {
        let (_, members) = conn.members(&keys).await?;
        view.health = Some(actor::health_of(
            settings,
            members.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        ));
    }
    Ok(view)
}
