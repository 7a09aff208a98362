//! The things pleg-guard watches (targets), the states a probe can find them in, one probe's
//! observation of a target, a whole round of them ([`Round`]) and the repairs it can apply
//! ([`ActionKind`]). These are plain data, the vocabulary every floor above speaks: probes
//! produce rounds, diagnosis, the ladder, the ledger, status.json and `diagnose` consume them.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// A component of the node whose health pleg-guard probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// The D-Bus system bus daemon itself.
    Dbus,
    /// PID 1, over the system bus and over its private socket.
    Systemd,
    /// systemd-logind (`org.freedesktop.login1`), which blocks ssh logins when it hangs.
    Logind,
    /// The docker engine API: what kubelet's PLEG relist calls.
    Docker,
    /// containerd's CRI v1 service: what kubelet's PLEG relists through on a containerd node.
    Containerd,
    /// kubelet: its healthz endpoint and its own `PLEG is not healthy` log lines.
    Kubelet,
}

impl Target {
    /// Every target, in the order reports list them.
    pub const ALL: [Target; 6] = [
        Target::Dbus,
        Target::Systemd,
        Target::Logind,
        Target::Docker,
        Target::Containerd,
        Target::Kubelet,
    ];

    /// The contract's name of the target (`dbus`, `systemd`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Target::Dbus => "dbus",
            Target::Systemd => "systemd",
            Target::Logind => "logind",
            Target::Docker => "docker",
            Target::Containerd => "containerd",
            Target::Kubelet => "kubelet",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one probe call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetState {
    /// Answered correctly within `probe.slow_after`.
    Ok,
    /// Answered correctly, but slower than `probe.slow_after`. Not a failure.
    Slow,
    /// Did not answer within `probe.timeout`; the call was abandoned.
    Unresponsive,
    /// Answered, but with an error (or reported a problem of its own, such as PLEG lines).
    Error,
    /// Not installed, not configured or disabled: not a problem.
    Absent,
}

impl TargetState {
    /// The contract's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            TargetState::Ok => "ok",
            TargetState::Slow => "slow",
            TargetState::Unresponsive => "unresponsive",
            TargetState::Error => "error",
            TargetState::Absent => "absent",
        }
    }

    /// Whether this observation counts as a failed round for the target.
    pub fn is_failure(self) -> bool {
        matches!(self, TargetState::Unresponsive | TargetState::Error)
    }
}

impl fmt::Display for TargetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The answer of one path to a target (a target may be reached more than one way:
/// PID 1 over the bus and over its private socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathResult {
    /// What the call found.
    pub state: TargetState,
    /// How long the call took (up to the timeout, for an abandoned call).
    #[serde(rename = "latency_ms", with = "duration_ms")]
    pub latency: Duration,
    /// A short human-readable explanation.
    pub detail: String,
}

/// One probe's observation of one target in one round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Which target.
    pub target: Target,
    /// The state that counts for the target's health.
    pub state: TargetState,
    /// Latency of the call that decided `state`.
    #[serde(rename = "latency_ms", with = "duration_ms")]
    pub latency: Duration,
    /// A short human-readable explanation.
    pub detail: String,
    /// Facts specific to the target that diagnosis needs.
    #[serde(skip_serializing_if = "Facts::is_empty", default)]
    pub facts: Facts,
}

/// Target-specific facts an observation carries beyond its state. Every field is left out of
/// JSON when empty, so every field defaults when read back (`pleg-guard status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Facts {
    /// `systemd`: PID 1 over the system bus.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<PathResult>,
    /// `systemd`: PID 1 over its private socket `/run/systemd/private`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private: Option<PathResult>,
    /// `systemd`: PID 1's `Version` property, as read by whichever path answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd_version: Option<String>,
    /// `systemd`: the serial of PID 1's reply on the system bus (its sd-bus message counter,
    /// which an affected build cannot take past 2^32).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus_serial: Option<u32>,
    /// `docker`: containers in state `dead` (short id and name).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dead_containers: Vec<ContainerRef>,
    /// `docker`: how many containers `docker ps -a` listed; `containerd`: how many
    /// containers CRI's `ListContainers` listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containers: Option<usize>,
    /// `containerd`: how many pod sandboxes CRI's `ListPodSandbox` listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandboxes: Option<usize>,
    /// `containerd`: the runtime as CRI's `Version` names it (`containerd 1.6.20~ds1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    /// `containerd`: containers CRI reports in `CONTAINER_UNKNOWN` (or a state value outside
    /// the CRI enum): short id and name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_containers: Vec<ContainerRef>,
    /// `containerd`: pod sandboxes CRI reports in a state value outside the CRI enum (short
    /// id and `namespace/name`). CRI v1 has no unknown sandbox state: containerd reports a
    /// sandbox it lost track of as `SANDBOX_NOTREADY`, which is also every stopped pod's state.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_sandboxes: Vec<ContainerRef>,
    /// `kubelet`: the latest `PLEG is not healthy` line seen in the log window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pleg_line: Option<String>,
    /// `kubelet`: whether `/healthz` answered `ok` (None: not asked or unreachable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthz_ok: Option<bool>,
    /// `kubelet`: the uid owning the socket that answered a failing `/healthz`, when it is
    /// not root (not kubelet's: the failure is reported, never acted on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthz_foreign_uid: Option<u32>,
}

impl Facts {
    /// True when no fact is set (keeps JSON small).
    pub fn is_empty(&self) -> bool {
        *self == Facts::default()
    }
}

/// A container named in a report: short id and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRef {
    /// The first 12 characters of the container id.
    pub id: String,
    /// The container's name, without docker's leading `/`.
    pub name: String,
}

impl Observation {
    /// An observation of a target that is not there (or disabled): not a problem.
    pub fn absent(target: Target, detail: impl Into<String>) -> Self {
        Observation {
            target,
            state: TargetState::Absent,
            latency: Duration::ZERO,
            detail: detail.into(),
            facts: Facts::default(),
        }
    }
}

/// Serialise a `Duration` as whole milliseconds (the contract's `latency_ms`).
pub mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialise as milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// Deserialise from milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// One round's observations, one per target in [`Target::ALL`] order.
#[derive(Debug, Clone)]
pub struct Round {
    /// When the round started (wall clock, for reports).
    pub at: SystemTime,
    /// The observations.
    pub observations: Vec<Observation>,
}

impl Round {
    /// The observations keyed by target name (status.json's `targets`).
    pub fn by_name(&self) -> std::collections::BTreeMap<String, Observation> {
        self.observations
            .iter()
            .map(|o| (o.target.name().to_owned(), o.clone()))
            .collect()
    }

    /// The failing targets as `"<target> <state>"`, for summaries.
    pub fn failing(&self) -> Vec<String> {
        self.observations
            .iter()
            .filter(|o| o.state.is_failure())
            .map(|o| format!("{} {}", o.target, o.state))
            .collect()
    }

    /// The observation of one target.
    pub fn get(&self, target: Target) -> Option<&Observation> {
        self.observations.iter().find(|o| o.target == target)
    }

    /// The latest view: `older`'s observations with `newer`'s taking their targets' place
    /// (a round that skipped targets, or a re-ask that asked a few, leaves the others as last
    /// seen), in [`Target::ALL`] order, at `newer`'s time.
    pub fn merged(older: Option<&Round>, newer: &Round) -> Round {
        let observations = Target::ALL
            .iter()
            .filter_map(|t| newer.get(*t).or_else(|| older.and_then(|o| o.get(*t))))
            .cloned()
            .collect();
        Round {
            at: newer.at,
            observations,
        }
    }
}

/// A repair pleg-guard can apply (the contract's `PLEG_GUARD_ACTION` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionKind {
    /// Tier 1: force-remove containers in state `dead`, and only those.
    PurgeDeadContainers,
    /// Tier 2: re-execute PID 1 (`systemctl daemon-reexec`).
    DaemonReexec,
    /// Tier 3: restart a hung containerd in place (its shims and containers keep running).
    RestartContainerd,
    /// Tier 3: restart a hung dockerd in place (only with `live-restore`, unless told).
    RestartDocker,
    /// Tier 4, last resort: restart kubelet.
    RestartKubelet,
}

impl ActionKind {
    /// Every action, lowest tier first.
    pub const ALL: [ActionKind; 5] = [
        ActionKind::PurgeDeadContainers,
        ActionKind::DaemonReexec,
        ActionKind::RestartContainerd,
        ActionKind::RestartDocker,
        ActionKind::RestartKubelet,
    ];

    /// The contract's name.
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::PurgeDeadContainers => "purge-dead-containers",
            ActionKind::DaemonReexec => "daemon-reexec",
            ActionKind::RestartContainerd => "restart-containerd",
            ActionKind::RestartDocker => "restart-docker",
            ActionKind::RestartKubelet => "restart-kubelet",
        }
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observation_with_some_facts_reads_back() {
        // status.json leaves empty facts out; `pleg-guard status` must still read it.
        let mut o = Observation::absent(Target::Systemd, "x");
        o.facts.systemd_version = Some("252.38-1~deb12u1".into());
        let json = serde_json::to_string(&o).unwrap();
        assert!(!json.contains("dead_containers"), "{json}");
        let back: Observation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, o);
    }
}
