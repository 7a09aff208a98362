//! `restart-docker`: dockerd hung while PID 1 answers, restarted in place
//! ([`super::restart_unit`]). Its goroutine stacks are kept first (SIGUSR1: dockerd writes
//! them to a file it names in its log, and keeps running). The ladder starts it only where
//! `live-restore` keeps the containers across the restart (or the configuration says to
//! anyway): without it, dockerd stops every container when it stops.

use super::restart_unit::{self, UnitRestart};
use super::stacks::Dumper;
use super::{ActionContext, ActionReport};

/// Restart docker's unit.
pub async fn run(ctx: &ActionContext) -> ActionReport {
    let stacks = super::stacks::directory(&ctx.state_directory);
    restart_unit::restart(&UnitRestart {
        unit: &ctx.docker_unit,
        dumper: Some(Dumper::FileOnUsr1),
        stacks_directory: &stacks,
        private_socket: &ctx.private_socket,
        bus_socket: &ctx.bus_socket,
        timeout: ctx.timeout,
    })
    .await
}
