//! systemd-logind on the system bus: `ListSessions`, the call a hung logind never answers
//! (what makes ssh logins stall at `pledge: network`). Nobody owning `org.freedesktop.login1`
//! is [`super::ErrorKind::NotInstalled`].

use zbus::Connection;
use zbus_systemd::login1::ManagerProxy;

use super::Error;

/// How many sessions logind lists.
pub async fn session_count(conn: &Connection) -> Result<usize, Error> {
    let proxy = ManagerProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    Ok(proxy.list_sessions().await?.len())
}
