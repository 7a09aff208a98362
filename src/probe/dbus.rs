//! The `dbus` target: the system bus daemon itself, asked for its id
//! (`org.freedesktop.DBus.GetId`), which only the bus daemon answers. The connection and the
//! call are the bus client's ([`crate::client::bus`]).

use std::path::PathBuf;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use zbus::Connection;

use super::{BusState, Probe, RoundContext, observation, timed};
pub use crate::client::bus::SystemBus;
use crate::client::{self, bus};
use crate::target::{Observation, Target};

/// Probes the bus daemon over the round's shared connection.
pub struct DbusProbe {
    enabled: bool,
    socket: PathBuf,
}

impl DbusProbe {
    /// A probe of the bus at `socket`.
    pub fn new(enabled: bool, socket: PathBuf) -> Self {
        DbusProbe { enabled, socket }
    }
}

impl Probe for DbusProbe {
    fn target(&self) -> Target {
        Target::Dbus
    }

    fn uses_bus(&self) -> bool {
        true
    }

    fn observe<'a>(&'a mut self, round: &'a RoundContext<'_>) -> BoxFuture<'a, Observation> {
        async move {
            if !self.enabled {
                return Observation::absent(Target::Dbus, "disabled in config");
            }
            if !self.socket.exists() {
                return Observation::absent(
                    Target::Dbus,
                    format!("no system bus at {}", self.socket.display()),
                );
            }
            match round.bus.clone().await {
                BusState::Up(conn) => observation(
                    Target::Dbus,
                    timed(round.deadline, round.slow_after, get_id(&conn)).await,
                ),
                BusState::Failed(f) => observation(
                    Target::Dbus,
                    f.into_path(round.start, "connecting to the system bus"),
                ),
                BusState::Absent => Observation::absent(Target::Dbus, "no system bus"),
            }
        }
        .boxed()
    }
}

/// Ask the bus daemon for its id; the detail names its first 8 characters.
pub async fn get_id(conn: &Connection) -> Result<String, client::Error> {
    let id = bus::get_id(conn).await?;
    Ok(format!(
        "bus id {}",
        id.as_str().get(..8).unwrap_or(id.as_str())
    ))
}
