//! The `logind` target: systemd-logind's `ListSessions` over the system bus (the call is the
//! logind client's, [`crate::client::logind`]). A hung logind is what makes ssh logins stall at
//! `pledge: network`.

use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::time::Instant;
use zbus::Connection;

use super::{BusState, Probe, RoundContext, observation, timed_with_error};
use crate::client::{ErrorKind, logind};
use crate::target::{Observation, Target};

/// Probes logind over the round's shared bus connection.
pub struct LogindProbe {
    enabled: bool,
}

impl LogindProbe {
    /// A probe of logind (`enabled`: `[logind]` and `[dbus]` both are).
    pub fn new(enabled: bool) -> Self {
        LogindProbe { enabled }
    }
}

impl Probe for LogindProbe {
    fn target(&self) -> Target {
        Target::Logind
    }

    fn uses_bus(&self) -> bool {
        true
    }

    fn observe<'a>(&'a mut self, round: &'a RoundContext<'_>) -> BoxFuture<'a, Observation> {
        async move {
            if !self.enabled {
                return Observation::absent(Target::Logind, "disabled in config");
            }
            match round.bus.clone().await {
                BusState::Up(conn) => probe(&conn, round.deadline, round.slow_after).await,
                BusState::Failed(f) => {
                    observation(Target::Logind, f.into_path(round.start, "the system bus"))
                }
                BusState::Absent => Observation::absent(Target::Logind, "no system bus"),
            }
        }
        .boxed()
    }
}

/// Probe logind over `conn`.
pub async fn probe(conn: &Connection, deadline: Instant, slow_after: Duration) -> Observation {
    let (path, error) = timed_with_error(deadline, slow_after, async {
        let sessions = logind::session_count(conn).await?;
        Ok::<_, crate::client::Error>(format!("{sessions} session(s)"))
    })
    .await;
    // Nobody owns (or can activate) the name: logind is not installed or not running, which
    // is not a problem.
    if error
        .as_ref()
        .is_some_and(|e| e.kind() == ErrorKind::NotInstalled)
    {
        return Observation::absent(Target::Logind, "org.freedesktop.login1 is not on the bus");
    }
    observation(Target::Logind, path)
}
