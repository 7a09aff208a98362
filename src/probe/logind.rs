//! The `logind` target: systemd-logind's `ListSessions` over the system bus. A hung logind is
//! what makes ssh logins stall at `pledge: network`.

use std::time::Duration;

use tokio::time::Instant;
use zbus::Connection;
use zbus_systemd::login1::ManagerProxy;

use super::{observation, timed};
use crate::target::{Observation, Target};

/// Probe logind over `conn`.
pub async fn probe(conn: &Connection, deadline: Instant, slow_after: Duration) -> Observation {
    let path = timed(deadline, slow_after, async {
        let proxy = ManagerProxy::builder(conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        let sessions = proxy.list_sessions().await?;
        Ok::<_, zbus::Error>(format!("{} session(s)", sessions.len()))
    })
    .await;
    let mut obs = observation(Target::Logind, path);
    if obs.detail.contains("ServiceUnknown") || obs.detail.contains("was not provided by any") {
        obs = Observation::absent(Target::Logind, "org.freedesktop.login1 is not on the bus");
    }
    obs
}
