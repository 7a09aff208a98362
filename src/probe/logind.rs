//! The `logind` target: systemd-logind's `ListSessions` over the system bus (the call is the
//! logind client's, [`crate::client::logind`]). A hung logind is what makes ssh logins stall at
//! `pledge: network`.

use std::time::Duration;

use tokio::time::Instant;
use zbus::Connection;

use super::{observation, timed_with_error};
use crate::client::{ErrorKind, logind};
use crate::target::{Observation, Target};

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
