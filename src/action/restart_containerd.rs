//! `restart-containerd`: containerd hung while PID 1 answers, restarted in place
//! ([`super::restart_unit`]). Its goroutine stacks are kept first (SIGUSR1: containerd logs
//! them and keeps running). The running containers are left alone: each runs under its own
//! shim, which a unit with `KillMode=process` (containerd's own unit file) does not stop.

use super::restart_unit::{self, UnitRestart};
use super::stacks::Dumper;
use super::{ActionContext, ActionReport};

/// Restart containerd's unit.
pub async fn run(ctx: &ActionContext) -> ActionReport {
    let stacks = super::stacks::directory(&ctx.state_directory);
    restart_unit::restart(&UnitRestart {
        unit: &ctx.containerd_unit,
        dumper: Some(Dumper::LogOnUsr1),
        stacks_directory: &stacks,
        private_socket: &ctx.private_socket,
        bus_socket: &ctx.bus_socket,
        timeout: ctx.timeout,
    })
    .await
}
