//! The assessment: one place that turns what pleg-guard knows — the latest round, the
//! findings, systemd's status, the action under way — into the overall state, the `STATUS=`
//! line and the status snapshot (status.json, `status --json`, `diagnose --json`). `run` and
//! `diagnose` both use it, so they say the same thing the same way. Pure.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::config::Mode;
use crate::diagnosis::{Finding, FindingId, Severity};
use crate::report::status_file::{
    ActionRecord, BudgetStatus, FleetStatus, Overall, Snapshot, SystemdStatus,
};
use crate::target::ActionKind;
use crate::target::Round;
use crate::target::TargetState;

/// What the action runner is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// An action runs.
    Running(ActionKind),
    /// An action ended well; its symptom is checked after `left`.
    Settling {
        /// Which action.
        action: ActionKind,
        /// Time left until the check.
        left: Duration,
    },
}

/// Everything the status is made of, borrowed from its owners.
#[derive(Debug, Clone, Copy)]
pub struct Assessment<'a> {
    /// `repair` or `observe`.
    pub mode: Mode,
    /// The latest probe round, if one ran.
    pub round: Option<&'a Round>,
    /// The current findings.
    pub findings: &'a [Finding],
    /// The diagnosis says the node is degraded (a problem finding, or an unhealthy target).
    pub degraded: bool,
    /// What is known of systemd.
    pub systemd: &'a SystemdStatus,
    /// The action under way.
    pub activity: Option<Activity>,
    /// What the ladder decided last, in words (`daemon-reexec suppressed until ...`).
    pub next_step: Option<&'a str>,
}

/// The parts of a snapshot that only the caller knows.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The daemon's pid (None for `diagnose`).
    pub pid: Option<u32>,
    /// The probe interval.
    pub interval: Duration,
    /// When the snapshot is taken.
    pub at: Option<SystemTime>,
    /// The latest action runs, newest last.
    pub actions: Vec<ActionRecord>,
    /// Each action's remaining budget.
    pub budget: BTreeMap<String, BudgetStatus>,
    /// The fleet budget, when configured.
    pub fleet: Option<FleetStatus>,
}

impl Assessment<'_> {
    /// The overall state.
    pub fn overall(&self) -> Overall {
        if self.activity.is_some() {
            Overall::Repairing
        } else if self.degraded {
            Overall::Degraded
        } else {
            Overall::Healthy
        }
    }

    /// The summary a person reads at a glance (the `STATUS=` line after the state word).
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        match self.activity {
            Some(Activity::Running(action)) => parts.push(format!("{action} running")),
            Some(Activity::Settling { action, left }) => {
                parts.push(format!("{action} done, checking in {}s", left.as_secs()))
            }
            None => {}
        }
        let problems: Vec<&str> = self
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Problem)
            .map(|f| f.id.name())
            .collect();
        if !problems.is_empty() {
            parts.push(problems.join(", "));
        }
        if let Some(round) = self.round {
            let bad = round.failing();
            if problems.is_empty() && !bad.is_empty() {
                parts.push(bad.join(", "));
            }
            if parts.is_empty() {
                let absent = round
                    .observations
                    .iter()
                    .filter(|o| o.state == TargetState::Absent)
                    .count();
                let ok = round
                    .observations
                    .iter()
                    .filter(|o| !o.state.is_failure() && o.state != TargetState::Absent)
                    .count();
                parts.push(format!("{ok} targets ok, {absent} absent"));
            }
        }
        if self
            .findings
            .iter()
            .any(|f| f.id == FindingId::SystemdSerialExhaustion)
        {
            parts.push(format!(
                "systemd-serial-exhaustion: {}",
                self.systemd.bus_serial_summary.as_deref().unwrap_or("?")
            ));
        }
        if let Some(next) = self.next_step {
            parts.push(next.to_owned());
        }
        if self.systemd.affected && self.systemd.version.is_some() {
            parts.push(format!(
                "systemd {} affected by the bus bug",
                self.systemd.version.as_deref().unwrap_or("?")
            ));
        }
        if self.mode == Mode::Observe {
            parts.push("observe mode".into());
        }
        parts.join("; ")
    }

    /// The `STATUS=` line: the state word, then the summary.
    pub fn status_line(&self) -> String {
        format!("{}: {}", self.overall().name(), self.summary())
    }

    /// The snapshot behind status.json and the `--json` outputs.
    pub fn snapshot(&self, ctx: Context) -> Snapshot {
        let overall = self.overall();
        Snapshot {
            pleg_guard_version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: ctx.pid,
            mode: self.mode,
            healthy: overall == Overall::Healthy,
            state: overall,
            summary: self.summary(),
            updated_at: ctx
                .at
                .or(self.round.map(|r| r.at))
                .unwrap_or_else(SystemTime::now),
            interval_ms: u64::try_from(ctx.interval.as_millis()).unwrap_or(u64::MAX),
            systemd: self.systemd.clone(),
            targets: self.round.map(Round::by_name).unwrap_or_default(),
            findings: self.findings.to_vec(),
            actions: ctx.actions,
            budget: ctx.budget,
            fleet: ctx.fleet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Facts, Observation, Target};

    fn round(states: &[(Target, TargetState)]) -> Round {
        Round {
            at: SystemTime::UNIX_EPOCH,
            observations: states
                .iter()
                .map(|(t, s)| Observation {
                    target: *t,
                    state: *s,
                    latency: Duration::from_millis(3),
                    detail: String::new(),
                    facts: Facts::default(),
                })
                .collect(),
        }
    }

    fn finding(id: FindingId) -> Finding {
        Finding {
            id,
            since: SystemTime::UNIX_EPOCH,
            severity: id.severity(),
            detail: String::new(),
            target: Target::Systemd,
        }
    }

    fn assess<'a>(
        round: &'a Round,
        findings: &'a [Finding],
        systemd: &'a SystemdStatus,
    ) -> Assessment<'a> {
        Assessment {
            mode: Mode::Repair,
            round: Some(round),
            findings,
            degraded: findings.iter().any(|f| f.severity == Severity::Problem),
            systemd,
            activity: None,
            next_step: None,
        }
    }

    #[test]
    fn a_healthy_node_counts_its_targets() {
        let r = round(&[
            (Target::Dbus, TargetState::Ok),
            (Target::Systemd, TargetState::Slow),
            (Target::Kubelet, TargetState::Absent),
        ]);
        let s = SystemdStatus::default();
        let a = assess(&r, &[], &s);
        assert_eq!(a.status_line(), "healthy: 2 targets ok, 1 absent");
        let snap = a.snapshot(Context::default());
        assert!(snap.healthy);
        assert_eq!(snap.summary, "2 targets ok, 1 absent");
        assert_eq!(snap.targets.len(), 3);
    }

    #[test]
    fn problems_activity_warnings_and_mode_are_all_said() {
        let r = round(&[(Target::Systemd, TargetState::Unresponsive)]);
        let systemd = SystemdStatus {
            version: Some("219-30.el7".into()),
            affected: true,
            bus_serial_summary: Some("serial 4.29e9 (100%), +330/s, runs out in ~8 h".into()),
            ..SystemdStatus::default()
        };
        let findings = [
            finding(FindingId::SystemdBusWedge),
            finding(FindingId::SystemdSerialExhaustion),
        ];
        let mut a = assess(&r, &findings, &systemd);
        a.activity = Some(Activity::Running(ActionKind::DaemonReexec));
        a.mode = Mode::Observe;
        assert_eq!(
            a.status_line(),
            "repairing: daemon-reexec running; systemd-bus-wedge; systemd-serial-exhaustion: serial 4.29e9 (100%), +330/s, runs out in ~8 h; systemd 219-30.el7 affected by the bus bug; observe mode"
        );
        a.activity = None;
        a.next_step = Some("daemon-reexec suppressed until 2026-12-03T10:00:00Z");
        let line = a.status_line();
        assert!(line.starts_with("degraded: systemd-bus-wedge; "), "{line}");
        assert!(line.contains("suppressed until"), "{line}");
        assert!(!a.snapshot(Context::default()).healthy);
    }

    #[test]
    fn failing_targets_without_a_finding_are_named() {
        let r = round(&[(Target::Docker, TargetState::Unresponsive)]);
        let s = SystemdStatus::default();
        let mut a = assess(&r, &[], &s);
        a.degraded = true;
        assert!(
            a.status_line().starts_with("degraded: docker"),
            "{}",
            a.status_line()
        );
    }
}
