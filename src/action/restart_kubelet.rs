//! The last resort, `restart-kubelet`: the configured unit restarted in place
//! ([`super::restart_unit`]: its goroutine stacks kept first, PID 1 over its private socket,
//! then the bus, verified by a new main process), or a restart of the `kubelet` container
//! for container-run kubelets.

use std::path::Path;
use std::time::Duration;

use super::ActionReport;
use super::restart_unit::{self, UnitRestart};
use super::stacks::Dumper;
use crate::client::docker;

/// Restart the kubelet unit in place, its goroutine stacks kept first (SIGQUIT: kubelet
/// dumps them as it exits; the seed's "where was relist stuck" answered before the restart
/// destroys it).
pub async fn restart_unit(ctx: &super::ActionContext) -> ActionReport {
    let stacks = super::stacks::directory(&ctx.state_directory);
    restart_unit::restart(&UnitRestart {
        unit: &ctx.kubelet_unit,
        dumper: Some(Dumper::StderrOnQuit),
        stacks_directory: &stacks,
        private_socket: &ctx.private_socket,
        bus_socket: &ctx.bus_socket,
        timeout: ctx.timeout,
    })
    .await
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
