//! Diagnosis: probe rounds over time → target health → findings. Pure: no I/O, no clock of
//! its own (every call is given `now`), so it is tested with made-up rounds.
//!
//! A target becomes *unhealthy* after `probe.unhealthy_after` consecutive failed calls and
//! *recovers* after one good answer. A round may hold only some targets (the re-ask's steps,
//! [`crate::probe::reask`], and a round that skipped the targets a step holds): only its
//! observations are counted, and findings are read off the unhealthy targets and the latest
//! observation of every target; each keeps the time it was first seen (`since`) while it
//! persists.

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::systemd::version::Verdict;
use crate::target::Round;
use crate::target::{Observation, Target, TargetState};

/// Whether a container runtime (docker, containerd) answers again after being unhealthy.
pub fn runtime_recovered(transitions: &[Transition]) -> bool {
    transitions.iter().any(|t| {
        matches!(
            t,
            Transition::Recovered(Target::Docker | Target::Containerd)
        )
    })
}

/// A diagnosis pleg-guard can make. The ids are part of the journal interface
/// (`PLEG_GUARD_FINDING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingId {
    /// The D-Bus system bus daemon does not answer. Nothing local cures it safely.
    BusUnresponsive,
    /// The systemd bus bug: the bus answers, PID 1 on the bus does not, PID 1 on its private
    /// socket does. Cure: `daemon-reexec`.
    SystemdBusWedge,
    /// PID 1 answers neither on the bus nor on its private socket.
    SystemdUnresponsive,
    /// logind does not answer while the bus does (ssh logins hang). Cure: `daemon-reexec`.
    LogindUnresponsive,
    /// The docker API does not answer (`docker ps` hangs): PLEG's relist hangs with it.
    DockerUnresponsive,
    /// Containers in state `dead` are present. Cure: `purge-dead-containers`.
    DeadContainers,
    /// containerd's CRI service does not answer (or answers only errors): PLEG's relist hangs
    /// with it on a containerd node.
    ContainerdUnresponsive,
    /// CRI reports containers in `CONTAINER_UNKNOWN` (or sandboxes/containers in a state
    /// outside the CRI enum). Reported only: kubelet itself kills and recreates them.
    CriUnknownContainers,
    /// kubelet logs `PLEG is not healthy`, or its healthz fails. Cure, last: `restart-kubelet`.
    KubeletPlegUnhealthy,
    /// The running systemd carries the bus bug (a standing warning: upgrade it).
    SystemdAffected,
    /// An affected PID 1 runs out of bus serials soon (the forecast): a warning, and, once
    /// close enough, the reason for a planned `daemon-reexec`.
    SystemdSerialExhaustion,
}

impl FindingId {
    /// Every finding, in report order (also the metric `pleg_guard_finding_active`'s series).
    pub const ALL: [FindingId; 11] = [
        FindingId::BusUnresponsive,
        FindingId::SystemdBusWedge,
        FindingId::SystemdUnresponsive,
        FindingId::LogindUnresponsive,
        FindingId::DockerUnresponsive,
        FindingId::DeadContainers,
        FindingId::ContainerdUnresponsive,
        FindingId::CriUnknownContainers,
        FindingId::KubeletPlegUnhealthy,
        FindingId::SystemdAffected,
        FindingId::SystemdSerialExhaustion,
    ];

    /// The kebab-case id.
    pub fn name(self) -> &'static str {
        match self {
            FindingId::BusUnresponsive => "bus-unresponsive",
            FindingId::SystemdBusWedge => "systemd-bus-wedge",
            FindingId::SystemdUnresponsive => "systemd-unresponsive",
            FindingId::LogindUnresponsive => "logind-unresponsive",
            FindingId::DockerUnresponsive => "docker-unresponsive",
            FindingId::DeadContainers => "dead-containers",
            FindingId::ContainerdUnresponsive => "containerd-unresponsive",
            FindingId::CriUnknownContainers => "cri-unknown-containers",
            FindingId::KubeletPlegUnhealthy => "kubelet-pleg-unhealthy",
            FindingId::SystemdAffected => "systemd-affected",
            FindingId::SystemdSerialExhaustion => "systemd-serial-exhaustion",
        }
    }

    /// Whether the finding makes the node degraded (a warning does not).
    pub fn severity(self) -> Severity {
        match self {
            FindingId::SystemdAffected | FindingId::SystemdSerialExhaustion => Severity::Warning,
            _ => Severity::Problem,
        }
    }

    /// One line on what the finding means.
    pub fn explanation(self) -> &'static str {
        match self {
            FindingId::BusUnresponsive => {
                "the D-Bus system bus daemon does not answer; everything that talks to the bus hangs"
            }
            FindingId::SystemdBusWedge => {
                "PID 1 answers on its private socket but not on the system bus: the systemd bus bug (systemd#11809); runc/dockerd calls to systemd hang, PLEG stalls"
            }
            FindingId::SystemdUnresponsive => {
                "PID 1 answers neither on the bus nor on /run/systemd/private"
            }
            FindingId::LogindUnresponsive => {
                "systemd-logind does not answer while the bus does; ssh logins stall at `pledge: network`"
            }
            FindingId::DockerUnresponsive => {
                "the docker API does not answer (`docker ps` hangs); kubelet's PLEG relist hangs with it"
            }
            FindingId::DeadContainers => {
                "containers in state `dead` (failed removals, often pause containers) stall the runtime and PLEG"
            }
            FindingId::ContainerdUnresponsive => {
                "containerd's CRI service does not answer (`crictl ps` hangs or fails); kubelet's PLEG relist hangs with it"
            }
            FindingId::CriUnknownContainers => {
                "CRI reports containers whose state containerd lost track of (CONTAINER_UNKNOWN: their shim hung or died); kubelet kills and recreates them, and cannot while their shim hangs"
            }
            FindingId::KubeletPlegUnhealthy => {
                "kubelet reports `PLEG is not healthy` (or its healthz fails); after 3m the node goes NotReady"
            }
            FindingId::SystemdAffected => {
                "this systemd build carries the bus bug (systemd#11809, fixed in 242)"
            }
            FindingId::SystemdSerialExhaustion => {
                "PID 1 on an affected build runs out of bus message serials (2^32) soon; then it stops answering on the bus and the node wedges"
            }
        }
    }

    /// What a person would do by hand.
    pub fn remedy(self) -> &'static str {
        match self {
            FindingId::BusUnresponsive => {
                "check dbus-daemon (`systemctl status dbus`); a bus restart is disruptive: plan a reboot"
            }
            FindingId::SystemdBusWedge => {
                "`systemctl daemon-reexec` now; upgrade systemd (>= 242, or RHEL 7 >= 219-62.el7_6.8) for good"
            }
            FindingId::SystemdUnresponsive => {
                "PID 1 is stuck: collect `/proc/1/stack`, plan a reboot"
            }
            FindingId::LogindUnresponsive => {
                "`systemctl daemon-reexec`; if that does not help, `systemctl restart systemd-logind`"
            }
            FindingId::DockerUnresponsive => {
                "check dockerd/containerd (`journalctl -u docker`); look for the systemd bus wedge first"
            }
            FindingId::DeadContainers => "`docker rm -f $(docker ps -aq --filter status=dead)`",
            FindingId::ContainerdUnresponsive => {
                "check containerd (`journalctl -u containerd`, `crictl version`); look for the systemd bus wedge and hung shims first"
            }
            FindingId::CriUnknownContainers => {
                "look at the named containers (`crictl inspect ID`) and their `containerd-shim-runc-v2` processes; a hung shim: kill it, containerd then reports the container exited"
            }
            FindingId::KubeletPlegUnhealthy => {
                "cure the runtime first (dead containers, docker, systemd); then `systemctl restart kubelet`"
            }
            FindingId::SystemdAffected => {
                "upgrade systemd to 242 or later (RHEL 7: 219-62.el7_6.8 / 219-65 or later) and reboot"
            }
            FindingId::SystemdSerialExhaustion => {
                "`systemctl daemon-reexec` before it runs out (pleg-guard plans one); upgrade systemd for good"
            }
        }
    }
}

impl fmt::Display for FindingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// The node is degraded.
    Problem,
    /// A standing risk; the node works.
    Warning,
}

/// One finding as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Which diagnosis.
    pub id: FindingId,
    /// When it was first seen in this episode.
    #[serde(with = "crate::clock::time_format")]
    pub since: SystemTime,
    /// Problem or warning.
    pub severity: Severity,
    /// What was observed, specifically.
    pub detail: String,
    /// The target it is about.
    pub target: Target,
}

/// One target's health over rounds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetHealth {
    /// Consecutive failed calls up to now.
    pub failures: u32,
    /// Whether the target is unhealthy (failures reached the threshold).
    pub unhealthy: bool,
    /// When the first of the failed calls started (its round's time), while failing.
    pub failing_since: Option<SystemTime>,
}

/// A change of a target's health, to be logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The target failed `unhealthy_after` rounds in a row.
    Unhealthy(Target),
    /// The target answered well after being unhealthy.
    Recovered(Target),
}

/// Health of every target, and the findings, carried from round to round.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    unhealthy_after: u32,
    health: BTreeMap<Target, TargetHealth>,
    findings: Vec<Finding>,
    /// The latest observation of every target (rounds merged, [`Round::merged`]).
    view: Option<Round>,
    /// The serial forecast's warning, an input of the next [`Diagnosis::update`].
    serial_exhaustion: Option<String>,
}

impl Diagnosis {
    /// A fresh diagnosis; `unhealthy_after` of 1 makes a single failed round count.
    pub fn new(unhealthy_after: u32) -> Self {
        Diagnosis {
            unhealthy_after: unhealthy_after.max(1),
            health: Target::ALL
                .iter()
                .map(|t| (*t, TargetHealth::default()))
                .collect(),
            findings: Vec::new(),
            view: None,
            serial_exhaustion: None,
        }
    }

    /// Set what the serial forecast says for the next [`Diagnosis::update`]: `Some(detail)`
    /// when an affected PID 1 runs out of bus serials within the warning time
    /// (see [`crate::systemd::forecast::Outlook`]), `None` otherwise.
    pub fn set_serial_exhaustion(&mut self, detail: Option<String>) {
        self.serial_exhaustion = detail;
    }

    /// Change the threshold (after a configuration reload); counts carry over.
    pub fn set_unhealthy_after(&mut self, n: u32) {
        self.unhealthy_after = n.max(1);
    }

    /// The current findings.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// A target's consecutive failed calls up to now.
    pub fn failures(&self, target: Target) -> u32 {
        self.health.get(&target).map_or(0, |h| h.failures)
    }

    /// When a failing target's first failed call (of those in a row) started.
    pub fn failing_since(&self, target: Target) -> Option<SystemTime> {
        self.health.get(&target).and_then(|h| h.failing_since)
    }

    /// Whether a target is currently unhealthy.
    pub fn is_unhealthy(&self, target: Target) -> bool {
        self.health.get(&target).is_some_and(|h| h.unhealthy)
    }

    /// Whether a finding is currently present.
    pub fn has(&self, id: FindingId) -> bool {
        self.findings.iter().any(|f| f.id == id)
    }

    /// Whether any finding makes the node degraded.
    pub fn degraded(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == Severity::Problem)
            || self.health.values().any(|h| h.unhealthy)
    }

    /// Take in one round (all targets, or only some: the others keep their latest
    /// observation and their count): update health, recompute findings. Returns the health
    /// transitions and the findings that are new in this round.
    pub fn update(
        &mut self,
        round: &Round,
        verdict: Option<&Verdict>,
        now: SystemTime,
    ) -> (Vec<Transition>, Vec<Finding>) {
        let mut transitions = Vec::new();
        for obs in &round.observations {
            let h = self.health.entry(obs.target).or_default();
            if obs.state.is_failure() {
                h.failures = h.failures.saturating_add(1);
                if h.failures == 1 {
                    h.failing_since = Some(round.at);
                }
                if !h.unhealthy && h.failures >= self.unhealthy_after {
                    h.unhealthy = true;
                    transitions.push(Transition::Unhealthy(obs.target));
                }
            } else {
                h.failures = 0;
                h.failing_since = None;
                if h.unhealthy {
                    h.unhealthy = false;
                    transitions.push(Transition::Recovered(obs.target));
                }
            }
        }

        let view = Round::merged(self.view.as_ref(), round);
        let mut current = self.read_findings(&view, verdict);
        self.view = Some(view);
        // The runtime answers again this round: kubelet's PLEG complaints in its log window were
        // logged while it was down, and say nothing about kubelet now (a real kubelet 1.34 heals
        // within a relist, and was restarted needlessly on them). The daemon drops those lines
        // (`Prober::ignore_kubelet_logs_before`); until then no kubelet finding stands.
        if runtime_recovered(&transitions) {
            current.retain(|(id, _, _)| *id != FindingId::KubeletPlegUnhealthy);
        }
        let mut next = Vec::new();
        let mut new = Vec::new();
        for (id, target, detail) in current {
            let since = self.findings.iter().find(|f| f.id == id).map(|f| f.since);
            let finding = Finding {
                id,
                since: since.unwrap_or(now),
                severity: id.severity(),
                detail,
                target,
            };
            if since.is_none() {
                new.push(finding.clone());
            }
            next.push(finding);
        }
        self.findings = next;
        (transitions, new)
    }

    /// The findings the latest round and the health support.
    fn read_findings(
        &self,
        round: &Round,
        verdict: Option<&Verdict>,
    ) -> Vec<(FindingId, Target, String)> {
        let mut out = Vec::new();
        let obs = |t: Target| round.get(t);
        let bad = |t: Target| self.is_unhealthy(t);
        let detail = |t: Target| obs(t).map(|o| o.detail.clone()).unwrap_or_default();

        if bad(Target::Dbus) {
            out.push((
                FindingId::BusUnresponsive,
                Target::Dbus,
                detail(Target::Dbus),
            ));
        } else {
            // The bus daemon failing its latest call but not (yet) unhealthy: the bus is
            // suspect, so neither "PID 1 does not answer on the bus" nor "logind does not
            // answer while the bus does" can be told yet (PID 1 failing its private socket
            // too is told: the bus does not explain that).
            let bus_suspect = obs(Target::Dbus).is_some_and(|o| o.state.is_failure());
            if bad(Target::Systemd) {
                let facts = obs(Target::Systemd).map(|o| &o.facts);
                let answers = |p: Option<&crate::target::PathResult>| {
                    p.is_some_and(|p| !p.state.is_failure())
                };
                let bus_ok = answers(facts.and_then(|f| f.bus.as_ref()));
                let private_ok = answers(facts.and_then(|f| f.private.as_ref()));
                // PID 1 failing only on its private socket is reported as the target's state;
                // it is neither the bus bug nor a frozen PID 1.
                let id = match (bus_ok, private_ok) {
                    (false, true) if bus_suspect => None,
                    (false, true) => Some(FindingId::SystemdBusWedge),
                    (false, false) => Some(FindingId::SystemdUnresponsive),
                    (true, _) => None,
                };
                if let Some(id) = id {
                    out.push((id, Target::Systemd, detail(Target::Systemd)));
                }
            }
            if bad(Target::Logind) && !bus_suspect {
                out.push((
                    FindingId::LogindUnresponsive,
                    Target::Logind,
                    detail(Target::Logind),
                ));
            }
        }
        if bad(Target::Docker) {
            out.push((
                FindingId::DockerUnresponsive,
                Target::Docker,
                detail(Target::Docker),
            ));
        }
        if let Some(o) = obs(Target::Docker).filter(|o| !o.facts.dead_containers.is_empty()) {
            out.push((FindingId::DeadContainers, Target::Docker, dead_detail(o)));
        }
        if bad(Target::Containerd) {
            out.push((
                FindingId::ContainerdUnresponsive,
                Target::Containerd,
                detail(Target::Containerd),
            ));
        }
        if let Some(o) = obs(Target::Containerd).filter(|o| {
            !(o.facts.unknown_containers.is_empty() && o.facts.unknown_sandboxes.is_empty())
        }) {
            out.push((
                FindingId::CriUnknownContainers,
                Target::Containerd,
                unknown_detail(o),
            ));
        }
        // A failing healthz answered by a socket that is not root's is not kubelet's (any user
        // may bind the port while kubelet is down): no finding, no restart, on it alone.
        let foreign_healthz = obs(Target::Kubelet)
            .is_some_and(|o| o.facts.pleg_line.is_none() && o.facts.healthz_foreign_uid.is_some());
        if bad(Target::Kubelet) && !foreign_healthz {
            out.push((
                FindingId::KubeletPlegUnhealthy,
                Target::Kubelet,
                detail(Target::Kubelet),
            ));
        }
        let present = obs(Target::Systemd).is_some_and(|o| o.state != TargetState::Absent);
        let wedged = out
            .iter()
            .any(|(id, _, _)| *id == FindingId::SystemdBusWedge);
        match verdict {
            Some(Verdict::Affected { reason }) if present => {
                out.push((FindingId::SystemdAffected, Target::Systemd, reason.clone()));
            }
            // The wedge is the bug's own signature: it proves the build affected whatever
            // its version string says.
            _ if present && wedged => out.push((
                FindingId::SystemdAffected,
                Target::Systemd,
                format!(
                    "the systemd-bus-wedge signature proves it{}",
                    verdict.map_or(String::new(), |v| format!(
                        " (the version policy alone says: {})",
                        v.reason()
                    ))
                ),
            )),
            _ => {}
        }
        if let Some(detail) = &self.serial_exhaustion {
            if present {
                out.push((
                    FindingId::SystemdSerialExhaustion,
                    Target::Systemd,
                    detail.clone(),
                ));
            }
        }
        out
    }
}

fn dead_detail(o: &Observation) -> String {
    let list: Vec<String> = o
        .facts
        .dead_containers
        .iter()
        .map(|c| format!("{} ({})", c.name, c.id))
        .collect();
    format!("{} dead: {}", list.len(), list.join(", "))
}

fn unknown_detail(o: &Observation) -> String {
    let list: Vec<String> = o
        .facts
        .unknown_containers
        .iter()
        .map(|c| format!("{} ({})", c.name, c.id))
        .chain(
            o.facts
                .unknown_sandboxes
                .iter()
                .map(|s| format!("pod sandbox {} ({})", s.name, s.id)),
        )
        .collect();
    format!("{} in an unknown state: {}", list.len(), list.join(", "))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::target::{ContainerRef, Facts, PathResult};

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn obs(target: Target, state: TargetState) -> Observation {
        Observation {
            target,
            state,
            latency: Duration::from_millis(2),
            detail: format!("{target} {state}"),
            facts: Facts::default(),
        }
    }

    fn path(state: TargetState) -> Option<PathResult> {
        Some(PathResult {
            state,
            latency: Duration::from_millis(1),
            detail: String::new(),
        })
    }

    /// A round where everything is ok except the given overrides.
    fn round(at: u64, overrides: Vec<Observation>) -> Round {
        let observations = Target::ALL
            .iter()
            .map(|t| {
                overrides
                    .iter()
                    .find(|o| o.target == *t)
                    .cloned()
                    .unwrap_or_else(|| obs(*t, TargetState::Ok))
            })
            .collect();
        Round {
            at: t(at),
            observations,
        }
    }

    fn ids(d: &Diagnosis) -> Vec<FindingId> {
        d.findings().iter().map(|f| f.id).collect()
    }

    fn wedge() -> Observation {
        let mut o = obs(Target::Systemd, TargetState::Unresponsive);
        o.facts.bus = path(TargetState::Unresponsive);
        o.facts.private = path(TargetState::Ok);
        o
    }

    #[test]
    fn unhealthy_after_n_rounds_and_recovered_after_one() {
        let mut d = Diagnosis::new(3);
        let bad = || round(0, vec![obs(Target::Logind, TargetState::Unresponsive)]);
        assert!(d.update(&bad(), None, t(0)).0.is_empty());
        assert!(d.update(&bad(), None, t(10)).0.is_empty());
        let (tr, new) = d.update(&bad(), None, t(20));
        assert_eq!(tr, vec![Transition::Unhealthy(Target::Logind)]);
        assert_eq!(new.len(), 1);
        assert_eq!(new[0].id, FindingId::LogindUnresponsive);
        assert_eq!(new[0].since, t(20));
        // persists: since stays, not new again
        let (tr, new) = d.update(&bad(), None, t(30));
        assert!(tr.is_empty() && new.is_empty());
        assert_eq!(d.findings()[0].since, t(20));
        assert!(d.degraded());
        let (tr, _) = d.update(&round(40, vec![]), None, t(40));
        assert_eq!(tr, vec![Transition::Recovered(Target::Logind)]);
        assert!(ids(&d).is_empty());
        assert!(!d.degraded());
    }

    #[test]
    fn a_good_round_resets_the_count() {
        let mut d = Diagnosis::new(2);
        let bad = round(0, vec![obs(Target::Docker, TargetState::Unresponsive)]);
        d.update(&bad, None, t(0));
        d.update(&round(1, vec![]), None, t(1));
        let (tr, _) = d.update(&bad, None, t(2));
        assert!(tr.is_empty());
        let (tr, _) = d.update(&bad, None, t(3));
        assert_eq!(tr, vec![Transition::Unhealthy(Target::Docker)]);
        assert_eq!(ids(&d), vec![FindingId::DockerUnresponsive]);
    }

    #[test]
    fn slow_and_absent_are_not_failures() {
        let mut d = Diagnosis::new(1);
        d.update(
            &round(
                0,
                vec![
                    obs(Target::Docker, TargetState::Slow),
                    obs(Target::Kubelet, TargetState::Absent),
                ],
            ),
            None,
            t(0),
        );
        assert!(ids(&d).is_empty());
        assert!(!d.degraded());
    }

    #[test]
    fn bus_bug_signature_is_a_wedge() {
        let mut d = Diagnosis::new(1);
        d.update(&round(0, vec![wedge()]), None, t(0));
        assert_eq!(
            ids(&d),
            vec![FindingId::SystemdBusWedge, FindingId::SystemdAffected]
        );
    }

    #[test]
    fn a_partial_round_counts_its_targets_only_and_the_others_keep_their_latest() {
        let mut d = Diagnosis::new(2);
        let dead = Observation {
            facts: Facts {
                dead_containers: vec![ContainerRef {
                    id: "0123456789ab".into(),
                    name: "pause".into(),
                }],
                ..Facts::default()
            },
            ..obs(Target::Docker, TargetState::Ok)
        };
        d.update(
            &round(
                0,
                vec![obs(Target::Logind, TargetState::Unresponsive), dead],
            ),
            None,
            t(0),
        );
        // a re-ask of logind alone: docker's dead container still stands, kubelet is not
        // counted again
        let reask = Round {
            at: t(5),
            observations: vec![obs(Target::Logind, TargetState::Unresponsive)],
        };
        let (transitions, _) = d.update(&reask, None, t(5));
        assert_eq!(transitions, vec![Transition::Unhealthy(Target::Logind)]);
        assert_eq!(
            ids(&d),
            vec![FindingId::LogindUnresponsive, FindingId::DeadContainers]
        );
        assert_eq!(d.failures(Target::Logind), 2);
        assert_eq!(d.failures(Target::Kubelet), 0);
    }

    #[test]
    fn no_wedge_and_no_logind_finding_while_the_bus_itself_fails() {
        let mut d = Diagnosis::new(2);
        let bus_bad = obs(Target::Dbus, TargetState::Unresponsive);
        let logind_bad = obs(Target::Logind, TargetState::Unresponsive);
        d.update(&round(0, vec![wedge(), logind_bad.clone()]), None, t(0));
        // PID 1 and logind confirmed, but the bus daemon has just failed too: not told yet
        d.update(
            &round(5, vec![wedge(), logind_bad.clone(), bus_bad.clone()]),
            None,
            t(5),
        );
        assert!(d.is_unhealthy(Target::Systemd) && d.is_unhealthy(Target::Logind));
        assert!(ids(&d).is_empty(), "{:?}", ids(&d));
        // the bus confirmed: the dead bus explains everything
        d.update(&round(10, vec![wedge(), logind_bad, bus_bad]), None, t(10));
        assert_eq!(ids(&d), vec![FindingId::BusUnresponsive]);
    }

    #[test]
    fn pid1_silent_on_both_paths_is_not_a_wedge() {
        let mut d = Diagnosis::new(1);
        let mut o = wedge();
        o.facts.private = path(TargetState::Unresponsive);
        d.update(&round(0, vec![o]), None, t(0));
        assert_eq!(ids(&d), vec![FindingId::SystemdUnresponsive]);
    }

    #[test]
    fn private_socket_failing_alone_is_no_bus_wedge() {
        let mut d = Diagnosis::new(1);
        let mut o = obs(Target::Systemd, TargetState::Error);
        o.facts.bus = path(TargetState::Ok);
        o.facts.private = path(TargetState::Error);
        d.update(&round(0, vec![o]), None, t(0));
        assert!(ids(&d).is_empty());
        assert!(d.degraded(), "the target itself is still unhealthy");
    }

    #[test]
    fn a_dead_bus_explains_everything_behind_it() {
        let mut d = Diagnosis::new(1);
        d.update(
            &round(
                0,
                vec![
                    obs(Target::Dbus, TargetState::Unresponsive),
                    wedge(),
                    obs(Target::Logind, TargetState::Error),
                ],
            ),
            None,
            t(0),
        );
        assert_eq!(ids(&d), vec![FindingId::BusUnresponsive]);
    }

    #[test]
    fn dead_containers_are_found_at_once_and_named() {
        let mut d = Diagnosis::new(3);
        let mut o = obs(Target::Docker, TargetState::Ok);
        o.facts.dead_containers = vec![ContainerRef {
            id: "3780e5f912ab".into(),
            name: "k8s_POD_pangu".into(),
        }];
        let (_, new) = d.update(&round(0, vec![o]), None, t(0));
        assert_eq!(new[0].id, FindingId::DeadContainers);
        assert_eq!(new[0].detail, "1 dead: k8s_POD_pangu (3780e5f912ab)");
    }

    #[test]
    fn containerd_unresponsive_after_threshold_unknown_containers_at_once() {
        let mut d = Diagnosis::new(2);
        let bad = round(0, vec![obs(Target::Containerd, TargetState::Unresponsive)]);
        d.update(&bad, None, t(0));
        assert!(ids(&d).is_empty());
        let (tr, _) = d.update(&bad, None, t(1));
        assert_eq!(tr, vec![Transition::Unhealthy(Target::Containerd)]);
        assert_eq!(ids(&d), vec![FindingId::ContainerdUnresponsive]);

        let mut d = Diagnosis::new(3);
        let mut o = obs(Target::Containerd, TargetState::Ok);
        o.facts.unknown_containers = vec![ContainerRef {
            id: "0123456789ab".into(),
            name: "app".into(),
        }];
        o.facts.unknown_sandboxes = vec![ContainerRef {
            id: "ba9876543210".into(),
            name: "prod/web".into(),
        }];
        let (_, new) = d.update(&round(0, vec![o]), None, t(0));
        assert_eq!(new[0].id, FindingId::CriUnknownContainers);
        assert_eq!(new[0].target, Target::Containerd);
        assert_eq!(
            new[0].detail,
            "2 in an unknown state: app (0123456789ab), pod sandbox prod/web (ba9876543210)"
        );
        // a containerd node without docker is a normal node
        let mut d = Diagnosis::new(1);
        d.update(
            &round(0, vec![obs(Target::Docker, TargetState::Absent)]),
            None,
            t(0),
        );
        assert!(ids(&d).is_empty());
        assert!(!d.degraded());
    }

    #[test]
    fn kubelet_pleg_and_affected_warning() {
        let mut d = Diagnosis::new(1);
        let affected = Verdict::Affected {
            reason: "systemd 219 predates the fix".into(),
        };
        d.update(
            &round(0, vec![obs(Target::Kubelet, TargetState::Error)]),
            Some(&affected),
            t(0),
        );
        assert_eq!(
            ids(&d),
            vec![FindingId::KubeletPlegUnhealthy, FindingId::SystemdAffected]
        );
        // the warning alone does not degrade the node
        d.update(&round(1, vec![]), Some(&affected), t(1));
        assert_eq!(ids(&d), vec![FindingId::SystemdAffected]);
        assert!(!d.degraded());
    }

    /// The round in which the runtime answers again, kubelet's PLEG complaints (logged while it
    /// was down) make no finding: the real kubelet 1.34 of tests/real_node.rs healed within a
    /// relist and was restarted needlessly on them. A complaint that goes on afterwards does.
    #[test]
    fn kubelets_complaints_from_a_runtime_outage_make_no_finding_when_it_returns() {
        let mut d = Diagnosis::new(1);
        let kubelet = || obs(Target::Kubelet, TargetState::Error);
        let down = obs(Target::Containerd, TargetState::Unresponsive);
        d.update(&round(0, vec![down, kubelet()]), None, t(0));
        assert_eq!(
            ids(&d),
            vec![
                FindingId::ContainerdUnresponsive,
                FindingId::KubeletPlegUnhealthy
            ]
        );
        let (tr, _) = d.update(&round(10, vec![kubelet()]), None, t(10));
        assert!(runtime_recovered(&tr), "{tr:?}");
        assert_eq!(ids(&d), Vec::<FindingId>::new());
        // kubelet still complaining a round later (the daemon dropped the old lines): it counts
        d.update(&round(20, vec![kubelet()]), None, t(20));
        assert_eq!(ids(&d), vec![FindingId::KubeletPlegUnhealthy]);
    }

    /// A failing healthz whose listener is another user's makes no finding (no restart on
    /// it alone); the same failure from a root listener does.
    #[test]
    fn a_foreign_healthz_listener_makes_no_kubelet_finding() {
        let mut d = Diagnosis::new(1);
        let mut foreign = obs(Target::Kubelet, TargetState::Error);
        foreign.facts.healthz_ok = Some(false);
        foreign.facts.healthz_foreign_uid = Some(1000);
        d.update(&round(0, vec![foreign.clone()]), None, t(0));
        d.update(&round(1, vec![foreign]), None, t(1));
        assert!(ids(&d).is_empty(), "{:?}", ids(&d));
        let mut own = obs(Target::Kubelet, TargetState::Error);
        own.facts.healthz_ok = Some(false);
        d.update(&round(2, vec![own]), None, t(2));
        assert_eq!(ids(&d), vec![FindingId::KubeletPlegUnhealthy]);
    }

    #[test]
    fn the_catalog_the_readme_and_the_findings_page_document_every_finding() {
        let root = env!("CARGO_MANIFEST_DIR");
        for file in [
            "systemd/pleg-guard.catalog",
            "README.md",
            "docs/findings.md",
        ] {
            let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
            for id in FindingId::ALL {
                assert!(
                    text.contains(&format!("{}:", id.name()))
                        || text.contains(&format!("`{}`", id.name())),
                    "{file} does not document {id}"
                );
            }
        }
    }

    #[test]
    fn a_wedge_on_a_build_the_policy_calls_fixed_proves_it_affected() {
        let mut d = Diagnosis::new(1);
        let fixed = Verdict::NotAffected {
            reason: "252.39-1~deb12u2 >= 242".into(),
        };
        d.update(&round(0, vec![wedge()]), Some(&fixed), t(0));
        assert_eq!(
            ids(&d),
            vec![FindingId::SystemdBusWedge, FindingId::SystemdAffected]
        );
        let affected = &d.findings()[1];
        assert!(affected.detail.contains("proves"), "{}", affected.detail);
        assert!(affected.detail.contains(">= 242"), "{}", affected.detail);
        // a hung logind alone proves nothing
        let mut d = Diagnosis::new(1);
        d.update(
            &round(0, vec![obs(Target::Logind, TargetState::Unresponsive)]),
            Some(&fixed),
            t(0),
        );
        assert_eq!(ids(&d), vec![FindingId::LogindUnresponsive]);
    }

    #[test]
    fn serial_exhaustion_comes_from_the_forecast_and_is_a_warning() {
        let mut d = Diagnosis::new(3);
        d.set_serial_exhaustion(Some(
            "serial 4.29e9 (100%), +330/s, runs out in ~3 min".into(),
        ));
        d.update(&round(0, vec![]), None, t(0));
        assert_eq!(ids(&d), vec![FindingId::SystemdSerialExhaustion]);
        assert!(d.findings()[0].detail.contains("runs out"));
        assert!(!d.degraded(), "a warning: the node still works");
        // not without PID 1
        d.update(
            &round(1, vec![obs(Target::Systemd, TargetState::Absent)]),
            None,
            t(1),
        );
        assert!(ids(&d).is_empty());
        d.set_serial_exhaustion(None);
        d.update(&round(2, vec![]), None, t(2));
        assert!(ids(&d).is_empty());
    }

    #[test]
    fn finding_ids_are_kebab_case_and_unique() {
        let mut names: Vec<&str> = FindingId::ALL.iter().map(|f| f.name()).collect();
        for n in &names {
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{n}");
            let json =
                serde_json::to_string(&FindingId::ALL[names.iter().position(|x| x == n).unwrap()])
                    .unwrap();
            assert_eq!(json, format!("\"{n}\""));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FindingId::ALL.len());
    }
}
