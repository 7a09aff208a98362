//! node-problem-detector's custom-plugin verdict: a condition read off the daemon's
//! status.json (never probed again), as an exit code and a message of at most 80 bytes.
//!
//! NPD runs the rule every `invoke_interval`: exit 0 means the condition is false, 1 true, and
//! any other exit unknown; the first line of standard output becomes the condition's message.
//! A status no daemon keeps fresh is unknown, never a false OK.

pub mod events;

use std::time::{Duration, SystemTime};

use crate::diagnosis::FindingId;
use crate::report::status_file::Snapshot;

/// The longest message NPD is handed (its default `max_output_length` is 80).
pub const MAX_MESSAGE: usize = 80;

/// A permanent NPD condition pleg-guard answers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// `systemd-bus-wedge`.
    SystemdBusWedged,
    /// `systemd-serial-exhaustion`.
    SystemdSerialExhaustion,
    /// `docker-unresponsive` or `containerd-unresponsive`.
    ContainerRuntimeUnresponsive,
    /// `logind-unresponsive`.
    LogindUnresponsive,
    /// `kubelet-pleg-unhealthy`.
    PlegUnhealthy,
}

impl Condition {
    /// Every condition, with its NPD name.
    pub const ALL: [(Condition, &'static str); 5] = [
        (Condition::SystemdBusWedged, "SystemdBusWedged"),
        (
            Condition::SystemdSerialExhaustion,
            "SystemdSerialExhaustion",
        ),
        (
            Condition::ContainerRuntimeUnresponsive,
            "ContainerRuntimeUnresponsive",
        ),
        (Condition::LogindUnresponsive, "LogindUnresponsive"),
        (Condition::PlegUnhealthy, "PLEGUnhealthy"),
    ];

    /// The condition NPD names `name`, if pleg-guard knows it.
    pub fn from_name(name: &str) -> Option<Condition> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(c, _)| *c)
    }

    /// The findings that make it true.
    pub fn findings(self) -> &'static [FindingId] {
        match self {
            Condition::SystemdBusWedged => &[FindingId::SystemdBusWedge],
            Condition::SystemdSerialExhaustion => &[FindingId::SystemdSerialExhaustion],
            Condition::ContainerRuntimeUnresponsive => &[
                FindingId::DockerUnresponsive,
                FindingId::ContainerdUnresponsive,
            ],
            Condition::LogindUnresponsive => &[FindingId::LogindUnresponsive],
            Condition::PlegUnhealthy => &[FindingId::KubeletPlegUnhealthy],
        }
    }
}

/// NPD's reading of a rule's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// 0 false (OK), 1 true (problem), 2 unknown.
    pub exit: u8,
    /// The first line NPD shows, at most [`MAX_MESSAGE`] bytes.
    pub message: String,
}

impl Verdict {
    /// An unknown verdict saying why.
    pub fn unknown(why: impl Into<String>) -> Verdict {
        Verdict {
            exit: 2,
            message: cut(&why.into()),
        }
    }
}

/// How long a status stays fresh: three intervals, at least 30 s (as `pleg-guard status`).
pub fn stale_after(snapshot: &Snapshot) -> Duration {
    Duration::from_millis(snapshot.interval_ms.saturating_mul(3)).max(Duration::from_secs(30))
}

/// The verdict on `condition` from a status taken by a daemon whose process is `alive`.
pub fn verdict(condition: Condition, snapshot: &Snapshot, now: SystemTime, alive: bool) -> Verdict {
    if !alive {
        return Verdict::unknown("pleg-guard is not running (its status.json has no live daemon)");
    }
    let age = now.duration_since(snapshot.updated_at).unwrap_or_default();
    if age > stale_after(snapshot) {
        return Verdict::unknown(format!(
            "pleg-guard status is stale: updated {}s ago",
            age.as_secs()
        ));
    }
    let standing = snapshot
        .findings
        .iter()
        .find(|f| condition.findings().contains(&f.id));
    let Some(f) = standing else {
        return Verdict {
            exit: 0,
            message: cut(&format!("pleg-guard: ok at {}", clock(snapshot.updated_at))),
        };
    };
    let mut message = format!("{} since {}: {}", f.id, clock(f.since), f.detail);
    if condition == Condition::SystemdSerialExhaustion {
        if let Some(eta) = snapshot.systemd.bus_serial_eta_s {
            // Whole minutes once it is an hour or more away; seconds when it is close.
            let shown = if eta >= 3600 { eta - eta % 60 } else { eta };
            message = format!(
                "PID 1 runs out of bus serials in ~{} (since {})",
                humantime::format_duration(Duration::from_secs(shown)),
                clock(f.since)
            );
        }
    }
    Verdict {
        exit: 1,
        message: cut(&message),
    }
}

/// `HH:MM:SS` UTC of a time.
pub(crate) fn clock(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.get(11..19).map_or(s.clone(), |c| format!("{c}Z"))
}

/// One line of at most [`MAX_MESSAGE`] bytes, cut at a character boundary: NPD cuts its
/// plugins' output at `max_output_length` *bytes*, so a line measured in characters lost half
/// a character on the real Node (`...;\u{FFFD}`, tests/real_node.rs).
pub(crate) fn cut(s: &str) -> String {
    let line = s.lines().next().unwrap_or_default();
    if line.len() <= MAX_MESSAGE {
        return line.to_owned();
    }
    format!("{}…", prefix_within(line, MAX_MESSAGE - '…'.len_utf8()))
}

/// The longest prefix of `s` of at most `bytes` bytes that ends on a character boundary.
pub(crate) fn prefix_within(s: &str, bytes: usize) -> &str {
    let mut end = bytes.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips() {
        for (c, n) in Condition::ALL {
            assert_eq!(Condition::from_name(n), Some(c));
        }
        assert_eq!(Condition::from_name("NoSuch"), None);
    }

    #[test]
    fn messages_are_one_line_of_at_most_80_bytes() {
        let long = "é".repeat(200) + "\nsecond line";
        let c = cut(&long);
        assert!(c.len() <= MAX_MESSAGE && c.len() >= MAX_MESSAGE - 4, "{c}");
        assert!(c.ends_with('…'));
        assert!(!c.contains('\n'));
        assert_eq!(cut("short\nmore"), "short");
        let ascii = "x".repeat(200);
        assert_eq!(cut(&ascii).len(), MAX_MESSAGE);
        assert_eq!(prefix_within("aé", 2), "a");
    }

    /// A status.json written by the daemon (observe mode, this project's machine).
    fn snapshot() -> Snapshot {
        let text = include_str!("status_fixture.json");
        serde_json::from_str(text).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    fn with_finding(id: &str, detail: &str) -> Snapshot {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("status_fixture.json")).unwrap_or_default();
        v["findings"] = serde_json::json!([{
            "id": id, "since": "2026-12-03T14:02:00Z", "severity": "problem",
            "detail": detail, "target": "systemd"
        }]);
        v["systemd"]["bus_serial_eta_s"] = serde_json::json!(93_784);
        serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn a_fresh_healthy_status_is_ok_for_every_condition() {
        let s = snapshot();
        for (c, _) in Condition::ALL {
            let v = verdict(c, &s, s.updated_at, true);
            assert_eq!(v.exit, 0, "{c:?}: {v:?}");
        }
    }

    #[test]
    fn a_standing_finding_makes_its_condition_true_and_no_other() {
        let s = with_finding(
            "systemd-bus-wedge",
            "PID 1 silent on the bus; private socket answers",
        );
        let v = verdict(Condition::SystemdBusWedged, &s, s.updated_at, true);
        assert_eq!(v.exit, 1);
        assert!(
            v.message
                .starts_with("systemd-bus-wedge since 14:02:00Z: PID 1 silent"),
            "{}",
            v.message
        );
        assert!(v.message.len() <= MAX_MESSAGE);
        assert_eq!(
            verdict(Condition::PlegUnhealthy, &s, s.updated_at, true).exit,
            0
        );
        let s = with_finding(
            "containerd-unresponsive",
            "CRI Version: no answer within 5s",
        );
        let v = verdict(
            Condition::ContainerRuntimeUnresponsive,
            &s,
            s.updated_at,
            true,
        );
        assert_eq!(v.exit, 1);
    }

    #[test]
    fn serial_exhaustion_names_the_time_left() {
        let s = with_finding("systemd-serial-exhaustion", "serial 4.2e9");
        let v = verdict(Condition::SystemdSerialExhaustion, &s, s.updated_at, true);
        assert_eq!(v.exit, 1);
        assert_eq!(
            v.message,
            "PID 1 runs out of bus serials in ~1day 2h 3m (since 14:02:00Z)"
        );
    }

    #[test]
    fn stale_or_orphaned_status_is_unknown_never_ok() {
        let s = snapshot();
        let late = s.updated_at + Duration::from_secs(31);
        let v = verdict(Condition::PlegUnhealthy, &s, late, true);
        assert_eq!(v.exit, 2, "{v:?}");
        assert!(v.message.contains("stale"), "{}", v.message);
        let v = verdict(Condition::PlegUnhealthy, &s, s.updated_at, false);
        assert_eq!(v.exit, 2);
    }

    #[test]
    fn clock_is_utc_hours_minutes_seconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(14 * 3600 + 2 * 60 + 17);
        assert_eq!(clock(t), "14:02:17Z");
    }
}
