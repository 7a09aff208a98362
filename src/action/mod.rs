//! The repairs, lowest tier first: `purge-dead-containers`, `daemon-reexec`,
//! `restart-kubelet`. Each lives in its own file; this module names them and runs them with
//! an overall bound.

pub mod purge_dead;
pub mod reexec;
pub mod restart_kubelet;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::config::{ActionConfig, ActionsConfig};

/// A repair pleg-guard can apply (the contract's `PLEG_GUARD_ACTION` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionKind {
    /// Tier 1: force-remove containers in state `dead`, and only those.
    PurgeDeadContainers,
    /// Tier 2: re-execute PID 1 (`systemctl daemon-reexec`).
    DaemonReexec,
    /// Tier 3, last resort: restart kubelet.
    RestartKubelet,
}

impl ActionKind {
    /// Every action, lowest tier first.
    pub const ALL: [ActionKind; 3] = [
        ActionKind::PurgeDeadContainers,
        ActionKind::DaemonReexec,
        ActionKind::RestartKubelet,
    ];

    /// The contract's name.
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::PurgeDeadContainers => "purge-dead-containers",
            ActionKind::DaemonReexec => "daemon-reexec",
            ActionKind::RestartKubelet => "restart-kubelet",
        }
    }

    /// This action's settings.
    pub fn config(self, actions: &ActionsConfig) -> &ActionConfig {
        match self {
            ActionKind::PurgeDeadContainers => &actions.purge_dead_containers,
            ActionKind::DaemonReexec => &actions.daemon_reexec,
            ActionKind::RestartKubelet => &actions.restart_kubelet,
        }
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
