//! Tier 3, the last resort, `restart-kubelet`: `RestartUnit` of the configured unit (over
//! PID 1's private socket, then the bus), or a restart of the `kubelet` container for
//! container-run kubelets. Succeeds once the unit is active again.

use std::path::Path;
use std::time::Duration;

use zbus_systemd::systemd1::UnitProxy;

use super::ActionReport;
use crate::probe::systemd::{connect_private, manager};

/// How long kubelet may take to be active again.
const ACTIVE_WITHIN: Duration = Duration::from_secs(60);

/// Restart the kubelet unit `unit`.
pub async fn restart_unit(
    unit: &str,
    private_socket: &Path,
    bus_socket: &Path,
    timeout: Duration,
) -> ActionReport {
    let mut notes = Vec::new();
    for (name, private) in [("private socket", true), ("system bus", false)] {
        let connect = async {
            if private {
                connect_private(private_socket).await
            } else {
                crate::probe::dbus::connect(bus_socket).await
            }
        };
        let conn = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                notes.push(format!("{name}: connect: {e}"));
                continue;
            }
            Err(_) => {
                notes.push(format!("{name}: connect: no answer"));
                continue;
            }
        };
        let call = async {
            let m = manager(&conn).await?;
            m.restart_unit(unit.to_owned(), "replace".to_owned())
                .await?;
            m.get_unit(unit.to_owned()).await
        };
        let unit_path = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                notes.push(format!("{name}: RestartUnit: {e}"));
                continue;
            }
            Err(_) => {
                notes.push(format!("{name}: RestartUnit: no answer"));
                continue;
            }
        };
        // Wait for the unit to be active again.
        let deadline = tokio::time::Instant::now() + ACTIVE_WITHIN;
        let mut state = String::from("unknown");
        loop {
            let read = async {
                let p = UnitProxy::builder(&conn)
                    .path(unit_path.clone())
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await?;
                p.active_state().await
            };
            if let Ok(Ok(s)) = tokio::time::timeout(timeout, read).await {
                state = s;
            }
            if state == "active" {
                return ActionReport::ok(format!(
                    "restarted {unit} via {name}; it is active again"
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return ActionReport::failed(format!(
                    "restarted {unit} via {name}, but it is {state} after {}s",
                    ACTIVE_WITHIN.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    ActionReport::failed(format!("could not restart {unit}: {}", notes.join("; ")))
}

/// Restart the kubelet container `name` through the docker engine at `socket`.
pub async fn restart_container(name: &str, socket: &Path, timeout: Duration) -> ActionReport {
    let run = async {
        let docker = crate::probe::docker::connect(socket).await?;
        docker
            .restart_container(
                name,
                Some(bollard::query_parameters::RestartContainerOptions {
                    t: Some(10),
                    ..Default::default()
                }),
            )
            .await?;
        Ok::<_, anyhow::Error>(())
    };
    match tokio::time::timeout(timeout + Duration::from_secs(15), run).await {
        Ok(Ok(())) => ActionReport::ok(format!("restarted container {name}")),
        Ok(Err(e)) => ActionReport::failed(format!("restart of container {name}: {e}")),
        Err(_) => ActionReport::failed(format!("restart of container {name}: no answer")),
    }
}
