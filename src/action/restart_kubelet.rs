//! Tier 3, the last resort, `restart-kubelet`: `RestartUnit` of the configured unit (over
//! PID 1's private socket, then the bus), or a restart of the `kubelet` container for
//! container-run kubelets. Succeeds once the unit is active again.

use std::path::Path;
use std::time::Duration;

use super::{ActionReport, within};
use crate::client::docker;
use crate::client::pid1::{Pid1, Route};

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
    for route in [Route::Private, Route::Bus] {
        let name = route.name();
        let connect = Pid1::connect(route, private_socket, bus_socket);
        let mut pid1 = match within(timeout, &format!("{name}: connect"), connect).await {
            Ok(c) => c,
            Err(e) => {
                notes.push(e);
                continue;
            }
        };
        if let Err(e) = within(
            timeout,
            &format!("{name}: RestartUnit"),
            pid1.restart_unit(unit),
        )
        .await
        {
            notes.push(e);
            continue;
        }
        // The job is queued: wait for the unit to be active again.
        let deadline = tokio::time::Instant::now() + ACTIVE_WITHIN;
        let mut state = String::from("unknown");
        loop {
            if let Ok(Ok(s)) = tokio::time::timeout(timeout, pid1.active_state(unit)).await {
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
        let docker = docker::connect(socket).await?;
        docker::restart(&docker, name, 10).await
    };
    match tokio::time::timeout(timeout.saturating_add(Duration::from_secs(15)), run).await {
        Ok(Ok(())) => ActionReport::ok(format!("restarted container {name}")),
        Ok(Err(e)) => ActionReport::failed(format!("restart of container {name}: {e}")),
        Err(_) => ActionReport::failed(format!("restart of container {name}: no answer")),
    }
}
