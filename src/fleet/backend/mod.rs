//! The backends that keep a group's budget, and what the handle and a backend say to each other.
//!
//! A backend is one task, started by [`start`], that takes the handle's [`Command`]s and
//! publishes its [`Shared`] state; the handle ([`super::Fleet`]) never waits for it. What a
//! backend must keep, whatever its store: never more holders than the budget, emergencies
//! first, a dead holder's slot free within `lease_ttl`, a grant whose answer was lost found
//! again, `Granted` only right after the store confirmed the slot.
//!
//! - [`etcd`]: keys and transactions on an etcd of pleg-guard's own;
//! - [`kubernetes`]: `coordination.k8s.io/v1` Leases on the cluster's API server.

pub mod etcd;
pub mod kubernetes;

use tokio::sync::{mpsc, oneshot, watch};

use super::{Backend, FleetError, FleetSettings, FleetView, SlotState, Urgency};
use crate::target::ActionKind;

/// What a backend publishes.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub(crate) state: SlotState,
    pub(crate) view: FleetView,
}

impl Shared {
    /// Publish `state` and `view` to the handle, waking its watchers only on a change.
    pub(crate) fn publish(tx: &watch::Sender<Shared>, state: SlotState, view: FleetView) {
        tx.send_if_modified(|shared| {
            if shared.state == state && shared.view == view {
                return false;
            }
            shared.state = state;
            shared.view = view;
            true
        });
    }
}

/// What the handle asks a backend.
#[derive(Debug)]
pub(crate) enum Command {
    Request(ActionKind, Urgency),
    Release,
    Findings(Vec<String>),
    ReadHealth,
    Shutdown(oneshot::Sender<()>),
}

/// Start the backend the settings name (its files are checked at once; it never waits for
/// its store).
pub(crate) fn start(
    settings: FleetSettings,
    tx: watch::Sender<Shared>,
    rx: mpsc::UnboundedReceiver<Command>,
) -> Result<tokio::task::JoinHandle<()>, FleetError> {
    match settings.backend() {
        Backend::Etcd => etcd::start(settings, tx, rx),
        Backend::Kubernetes => kubernetes::start(settings, tx, rx),
    }
}

/// Reach the store once and read the group, as `check-config --connect` does.
pub(crate) async fn check(settings: &FleetSettings) -> Result<FleetView, FleetError> {
    match settings.backend() {
        Backend::Etcd => etcd::check(settings).await,
        Backend::Kubernetes => kubernetes::check(settings).await,
    }
}
