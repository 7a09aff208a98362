//! The repairs, lowest tier first: `purge-dead-containers`, `daemon-reexec`,
//! `restart-containerd`, `restart-docker`, `restart-kubelet`. Each lives in its own file (the
//! three restarts share [`restart_unit`], and keep the stuck daemon's goroutine stacks first:
//! [`stacks`]); this module names them, says what each needs ([`ActionContext`], built once
//! from the configuration) and dispatches them ([`run`]). The daemon runs them through an [`Executor`], so its action runner can be tested
//! with a fake one.

pub mod purge_dead;
pub mod reexec;
pub mod restart_containerd;
pub mod restart_docker;
pub mod restart_kubelet;
pub mod restart_unit;
pub mod stacks;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use crate::config::Config;
use crate::target::ActionKind;

/// What the actions need to know of the node, taken from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionContext {
    /// Bounds each call an action makes.
    pub timeout: Duration,
    /// The docker engine's socket (purge, container-run kubelet).
    pub docker_socket: PathBuf,
    /// PID 1's private socket.
    pub private_socket: PathBuf,
    /// The system bus socket.
    pub bus_socket: PathBuf,
    /// kubelet's unit.
    pub kubelet_unit: String,
    /// kubelet's container, when it runs as one.
    pub kubelet_container: Option<String>,
    /// containerd's unit.
    pub containerd_unit: String,
    /// docker's unit.
    pub docker_unit: String,
    /// pleg-guard's state directory (goroutine dumps go under it).
    pub state_directory: PathBuf,
}

impl ActionContext {
    /// From the configuration.
    pub fn of(config: &Config) -> Self {
        ActionContext {
            timeout: config.probe.timeout,
            docker_socket: config.docker.socket.clone(),
            private_socket: config.systemd.private_socket.clone(),
            bus_socket: config.dbus.socket.clone(),
            kubelet_unit: config.kubelet.unit.clone(),
            kubelet_container: config.kubelet.container.clone(),
            containerd_unit: config.containerd.unit.clone(),
            docker_unit: config.docker.unit.clone(),
            state_directory: config.state_directory.clone(),
        }
    }
}

/// Run one action to its end.
pub async fn run(kind: ActionKind, ctx: &ActionContext) -> ActionReport {
    match kind {
        ActionKind::PurgeDeadContainers => purge_dead::run(&ctx.docker_socket, ctx.timeout).await,
        ActionKind::DaemonReexec => {
            reexec::run(&ctx.private_socket, &ctx.bus_socket, ctx.timeout).await
        }
        ActionKind::RestartKubelet => match &ctx.kubelet_container {
            Some(name) => {
                restart_kubelet::restart_container(name, &ctx.docker_socket, ctx.timeout).await
            }
            None => restart_kubelet::restart_unit(ctx).await,
        },
        ActionKind::RestartContainerd => restart_containerd::run(ctx).await,
        ActionKind::RestartDocker => restart_docker::run(ctx).await,
    }
}

/// A running action: a future the daemon spawns as a task.
pub type Running = Pin<Box<dyn Future<Output = ActionReport> + Send>>;

/// Carries out actions: [`RealExecutor`] on a node, a fake in tests.
pub trait Executor: Send + Sync {
    /// Start `kind` with `ctx`; the future ends with its report.
    fn execute(&self, kind: ActionKind, ctx: ActionContext) -> Running;
}

/// The executor that really acts: [`run`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RealExecutor;

impl Executor for RealExecutor {
    fn execute(&self, kind: ActionKind, ctx: ActionContext) -> Running {
        Box::pin(async move { run(kind, &ctx).await })
    }
}

/// Run one call of an action within `timeout`. The error names the step (`what`) and says
/// whether the call failed or did not answer, so every action reports failures the same way.
pub async fn within<T, E: std::fmt::Display>(
    timeout: std::time::Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

/// What an action reports when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionReport {
    /// Whether it did what it was asked.
    pub succeeded: bool,
    /// What it did, for the journal (ids, names, the path that worked, the error).
    pub detail: String,
}

impl ActionReport {
    /// A success.
    pub fn ok(detail: impl Into<String>) -> Self {
        ActionReport {
            succeeded: true,
            detail: detail.into(),
        }
    }

    /// A failure.
    pub fn failed(detail: impl Into<String>) -> Self {
        ActionReport {
            succeeded: false,
            detail: detail.into(),
        }
    }
}
