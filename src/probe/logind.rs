//! The `logind` target: systemd-logind's `ListSessions` over the system bus. A hung logind is
//! what makes ssh logins stall at `pledge: network`.

use std::time::Duration;

use tokio::time::Instant;
use zbus::Connection;
use zbus_systemd::login1::ManagerProxy;

use super::{observation, timed_with_error};
use crate::target::{Observation, Target};

/// Probe logind over `conn`.
pub async fn probe(conn: &Connection, deadline: Instant, slow_after: Duration) -> Observation {
    let (path, error) = timed_with_error(deadline, slow_after, async {
        let proxy = ManagerProxy::builder(conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        let sessions = proxy.list_sessions().await?;
        Ok::<_, zbus::Error>(format!("{} session(s)", sessions.len()))
    })
    .await;
    if error.as_ref().is_some_and(is_not_on_the_bus) {
        return Observation::absent(Target::Logind, "org.freedesktop.login1 is not on the bus");
    }
    observation(Target::Logind, path)
}

/// The bus says no one owns (or can activate) the name: logind is not installed or not
/// running, which is not a problem.
fn is_not_on_the_bus(e: &zbus::Error) -> bool {
    const NOT_THERE: [&str; 2] = [
        "org.freedesktop.DBus.Error.ServiceUnknown",
        "org.freedesktop.DBus.Error.NameHasNoOwner",
    ];
    match e {
        zbus::Error::MethodError(name, _, _) => NOT_THERE.contains(&name.as_str()),
        zbus::Error::FDO(fdo) => matches!(
            **fdo,
            zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_unknown_means_not_on_the_bus_by_its_type() {
        let fdo = zbus::Error::FDO(Box::new(zbus::fdo::Error::ServiceUnknown(
            "The name is not activatable".into(),
        )));
        assert!(is_not_on_the_bus(&fdo));
        let other = zbus::Error::FDO(Box::new(zbus::fdo::Error::AccessDenied(
            "ServiceUnknown in the text is not enough".into(),
        )));
        assert!(!is_not_on_the_bus(&other));
        assert!(!is_not_on_the_bus(&zbus::Error::InvalidReply));
    }
}
