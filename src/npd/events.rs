//! node-problem-detector's temporary rules (Events): the repairs pleg-guard made that NPD has
//! not been told of yet, read off the action ledger against a cursor of what was reported.
//!
//! The cursor remembers each reported run by `(id, at)` rather than "everything up to id N":
//! a run still going when a later one ended, or a ledger replaced (ids start again), is never
//! skipped. Keys of runs the ledger has pruned are dropped with them. Suppressed runs have no
//! ledger entry of their own, only a cumulative count per action ([`crate::ledger::Totals`]),
//! so the cursor keeps the count last reported per action. One call reports one repair (the
//! oldest unreported); NPD's next call reports the next.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::ledger::{Entry, Ledger, Outcome, RunOutcome, Symptom};
use crate::npd::{Verdict, clock, cut};
use crate::target::ActionKind;

/// A temporary NPD rule pleg-guard answers for (an Event, no condition of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Temporary {
    /// An action succeeded.
    Repaired,
    /// An action failed.
    RepairFailed,
    /// A rate limit held an action back.
    RepairSuppressed,
}

impl Temporary {
    /// Every temporary rule, with its NPD reason.
    pub const ALL: [(Temporary, &'static str); 3] = [
        (Temporary::Repaired, "PlegGuardRepaired"),
        (Temporary::RepairFailed, "PlegGuardRepairFailed"),
        (Temporary::RepairSuppressed, "PlegGuardRepairSuppressed"),
    ];

    /// The rule NPD names `name`, if pleg-guard knows it.
    pub fn from_name(name: &str) -> Option<Temporary> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(t, _)| *t)
    }

    /// Its NPD name (also the cursor file's stem).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(t, _)| *t == self)
            .map_or("", |(_, n)| n)
    }
}

/// What has been reported to NPD for one temporary rule (unknown fields, from a newer
/// pleg-guard, are ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Runs reported, as `[id, at in ms since the epoch]`.
    #[serde(default)]
    pub reported: Vec<(u64, u64)>,
    /// Suppressions reported so far, by action name.
    #[serde(default)]
    pub suppressed: BTreeMap<String, u64>,
}

/// One call's result: the verdict, and the cursor to save before it is printed (None: keep).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Exit 1 with the Event's message, or 0.
    pub verdict: Verdict,
    /// The cursor after this report.
    pub cursor: Option<Cursor>,
}

fn key(e: &Entry) -> (u64, u64) {
    let ms =
        e.at.duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis();
    (e.id, u64::try_from(ms).unwrap_or(u64::MAX))
}

/// The short action name of a message.
fn short(action: ActionKind) -> &'static str {
    match action {
        ActionKind::PurgeDeadContainers => "purge",
        ActionKind::DaemonReexec => "reexec",
        ActionKind::RestartContainerd => "containerd restart",
        ActionKind::RestartDocker => "docker restart",
        ActionKind::RestartKubelet => "kubelet restart",
    }
}

/// What rule `rule` reports now, given the `ledger` (None: no ledger yet) and the `cursor`.
pub fn report(rule: Temporary, ledger: Option<&Ledger>, cursor: &Cursor) -> Report {
    let empty = Ledger::default();
    let ledger = ledger.unwrap_or(&empty);
    match rule {
        Temporary::Repaired => runs(ledger, cursor, RunOutcome::Succeeded),
        Temporary::RepairFailed => runs(ledger, cursor, RunOutcome::Failed),
        Temporary::RepairSuppressed => suppressed(ledger, cursor),
    }
}

fn runs(ledger: &Ledger, cursor: &Cursor, want: RunOutcome) -> Report {
    // Forget what the ledger no longer holds (pruned, or a replaced ledger).
    let present: Vec<(u64, u64)> = ledger.entries().iter().map(key).collect();
    let mut next = cursor.clone();
    next.reported.retain(|k| present.contains(k));
    let mut pending: Vec<&Entry> = ledger
        .entries()
        .iter()
        .filter(|e| e.outcome == want && !next.reported.contains(&key(e)))
        .collect();
    pending.sort_by_key(|e| (e.at, e.id));
    let Some(e) = pending.first() else {
        let changed = next != *cursor;
        return Report {
            verdict: Verdict {
                exit: 0,
                message: "pleg-guard: no unreported action".to_owned(),
            },
            cursor: changed.then_some(next),
        };
    };
    next.reported.push(key(e));
    let word = if want == RunOutcome::Succeeded {
        match e.symptom {
            Some(Symptom::Cleared) => "cured",
            Some(Symptom::Persisted) => "ran, symptom persisted:",
            None => "ok:",
        }
    } else {
        "failed:"
    };
    let more = if pending.len() > 1 {
        format!(" (+{} more)", pending.len() - 1)
    } else {
        String::new()
    };
    let message = format!(
        "{} {} {word} {}{more}",
        short(e.action),
        clock(e.at),
        e.detail
    );
    Report {
        verdict: Verdict {
            exit: 1,
            message: cut_keeping_tail(&message, &more),
        },
        cursor: Some(next),
    }
}

fn suppressed(ledger: &Ledger, cursor: &Cursor) -> Report {
    let totals = ledger.totals();
    let mut next = cursor.clone();
    let mut news: Vec<String> = Vec::new();
    for action in ActionKind::ALL {
        let now = totals.get(action, Outcome::Suppressed);
        let seen = next.suppressed.get(action.name()).copied().unwrap_or(0);
        // Fewer than seen: the ledger was replaced; count afresh from here.
        if now > seen {
            let n = now - seen;
            news.push(if n == 1 {
                format!("{} held back by its rate limit", short(action))
            } else {
                format!("{} held back by its rate limit {n} times", short(action))
            });
        }
        if now != seen {
            next.suppressed.insert(action.name().to_owned(), now);
        }
    }
    let changed = next != *cursor;
    let verdict = if news.is_empty() {
        Verdict {
            exit: 0,
            message: "pleg-guard: no unreported suppression".to_owned(),
        }
    } else {
        Verdict {
            exit: 1,
            message: cut(&news.join("; ")),
        }
    };
    Report {
        verdict,
        cursor: changed.then_some(next),
    }
}

/// `message` cut to the limit, keeping `tail` (the count of more Events) readable.
fn cut_keeping_tail(message: &str, tail: &str) -> String {
    let full = cut(message);
    if tail.is_empty() || full == message {
        return full;
    }
    let head = super::prefix_within(
        message,
        super::MAX_MESSAGE.saturating_sub(tail.len() + '…'.len_utf8()),
    );
    format!("{head}…{tail}")
}

/// Parse a cursor file; an error is reported, never guessed past.
pub fn parse_cursor(bytes: &[u8]) -> Result<Cursor, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Parse the ledger file as the daemon wrote it (read-only: never moved aside from here).
pub fn parse_ledger(bytes: &[u8]) -> Result<Ledger, serde_json::Error> {
    serde_json::from_slice(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::SystemTime;

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_796_306_400 + s) // 2026-12-03T14:00:00Z
    }

    fn ledger(runs: &[(ActionKind, u64, RunOutcome, &str)]) -> Ledger {
        let mut l = Ledger::default();
        for (a, t, o, d) in runs {
            let id = l.record_start(*a, &crate::clock::boot::Now::wall_only(at(*t)));
            if *o != RunOutcome::Started {
                l.record_end(id, *o, d);
            }
        }
        l
    }

    /// Call `rule` as NPD would, saving the cursor each time.
    fn call(rule: Temporary, l: &Ledger, c: &mut Cursor) -> Verdict {
        let r = report(rule, Some(l), c);
        if let Some(n) = r.cursor {
            *c = n;
        }
        r.verdict
    }

    #[test]
    fn names_round_trip() {
        for (t, n) in Temporary::ALL {
            assert_eq!(Temporary::from_name(n), Some(t));
            assert_eq!(t.name(), n);
        }
        assert_eq!(Temporary::from_name("PLEGUnhealthy"), None);
    }

    #[test]
    fn each_repair_is_reported_once_oldest_first() {
        let mut l = ledger(&[
            (
                ActionKind::DaemonReexec,
                137,
                RunOutcome::Succeeded,
                "daemon-reexec done",
            ),
            (
                ActionKind::RestartKubelet,
                300,
                RunOutcome::Failed,
                "unit failed",
            ),
            (
                ActionKind::PurgeDeadContainers,
                400,
                RunOutcome::Succeeded,
                "removed 2: a, b",
            ),
        ]);
        l.record_symptom(1, Symptom::Cleared);
        let mut c = Cursor::default();
        let v = call(Temporary::Repaired, &l, &mut c);
        assert_eq!(v.exit, 1);
        assert_eq!(
            v.message,
            "reexec 14:02:17Z cured daemon-reexec done (+1 more)"
        );
        let v = call(Temporary::Repaired, &l, &mut c);
        assert_eq!(
            (v.exit, v.message.as_str()),
            (1, "purge 14:06:40Z ok: removed 2: a, b")
        );
        assert_eq!(call(Temporary::Repaired, &l, &mut c).exit, 0);
        assert_eq!(call(Temporary::Repaired, &l, &mut c).exit, 0);
        // The failure has its own cursor.
        let mut f = Cursor::default();
        let v = call(Temporary::RepairFailed, &l, &mut f);
        assert_eq!(v.message, "kubelet restart 14:05:00Z failed: unit failed");
        assert_eq!(call(Temporary::RepairFailed, &l, &mut f).exit, 0);
    }

    #[test]
    fn a_run_still_going_is_not_skipped_when_a_later_one_is_reported() {
        let mut l = ledger(&[
            (ActionKind::DaemonReexec, 10, RunOutcome::Started, ""),
            (
                ActionKind::PurgeDeadContainers,
                20,
                RunOutcome::Succeeded,
                "removed 1: a",
            ),
        ]);
        let mut c = Cursor::default();
        assert!(
            call(Temporary::Repaired, &l, &mut c)
                .message
                .starts_with("purge")
        );
        assert_eq!(call(Temporary::Repaired, &l, &mut c).exit, 0);
        l.record_end(1, RunOutcome::Succeeded, "reexec done");
        let v = call(Temporary::Repaired, &l, &mut c);
        assert!(
            v.message.starts_with("reexec 14:00:10Z ok:"),
            "{}",
            v.message
        );
        assert_eq!(call(Temporary::Repaired, &l, &mut c).exit, 0);
    }

    #[test]
    fn a_replaced_ledger_reusing_ids_is_reported_afresh() {
        let old = ledger(&[(ActionKind::DaemonReexec, 10, RunOutcome::Succeeded, "a")]);
        let mut c = Cursor::default();
        assert_eq!(call(Temporary::Repaired, &old, &mut c).exit, 1);
        let new = ledger(&[(ActionKind::DaemonReexec, 99, RunOutcome::Succeeded, "b")]);
        let v = call(Temporary::Repaired, &new, &mut c);
        assert_eq!(v.exit, 1, "{v:?}");
        assert!(v.message.ends_with("ok: b"));
        assert_eq!(c.reported.len(), 1, "the pruned key is forgotten");
    }

    #[test]
    fn no_ledger_is_nothing_to_report_and_the_cursor_is_left_alone() {
        let r = report(Temporary::Repaired, None, &Cursor::default());
        assert_eq!(r.verdict.exit, 0);
        assert_eq!(r.cursor, None);
    }

    #[test]
    fn suppressions_are_counted_per_action_and_reported_once() {
        let mut l = Ledger::default();
        l.count(ActionKind::RestartKubelet, Outcome::Suppressed);
        let mut c = Cursor::default();
        let v = call(Temporary::RepairSuppressed, &l, &mut c);
        assert_eq!(
            (v.exit, v.message.as_str()),
            (1, "kubelet restart held back by its rate limit")
        );
        assert_eq!(call(Temporary::RepairSuppressed, &l, &mut c).exit, 0);
        l.count(ActionKind::RestartKubelet, Outcome::Suppressed);
        l.count(ActionKind::RestartKubelet, Outcome::Suppressed);
        l.count(ActionKind::DaemonReexec, Outcome::Suppressed);
        let v = call(Temporary::RepairSuppressed, &l, &mut c);
        assert_eq!(
            v.message,
            // 77 bytes and the 3 of the ellipsis: NPD keeps 80 bytes
            "reexec held back by its rate limit; kubelet restart held back by its rate limit 2 times"
                [..77]
                .to_owned()
                + "…"
        );
        assert_eq!(call(Temporary::RepairSuppressed, &l, &mut c).exit, 0);
        // A replaced ledger (fewer than seen) counts afresh, reporting nothing.
        let fresh = Ledger::default();
        assert_eq!(call(Temporary::RepairSuppressed, &fresh, &mut c).exit, 0);
        assert_eq!(c.suppressed.get("restart-kubelet"), Some(&0));
    }

    #[test]
    fn long_details_keep_the_more_count() {
        let long = "x".repeat(200);
        let l = ledger(&[
            (
                ActionKind::DaemonReexec,
                1,
                RunOutcome::Succeeded,
                long.as_str(),
            ),
            (ActionKind::DaemonReexec, 2, RunOutcome::Succeeded, "b"),
        ]);
        let v = call(Temporary::Repaired, &l, &mut Cursor::default());
        assert!(v.message.ends_with("… (+1 more)"), "{}", v.message);
        assert!(v.message.len() <= super::super::MAX_MESSAGE);
    }

    #[test]
    fn corrupt_cursors_and_ledgers_are_errors() {
        assert!(parse_cursor(b"{\"reported\": [[1,").is_err());
        assert!(parse_cursor(b"{\"reported\": \"x\"}").is_err());
        assert!(parse_cursor(b"{}").is_ok());
        assert!(parse_ledger(b"{\"entries\": [ {\"id\": 1").is_err());
    }
}
