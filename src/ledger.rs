//! The action ledger: every action run, kept in `/var/lib/pleg-guard/ledger.json`, and the
//! rate limits computed from it (`min_interval`, `max_per_day` over a rolling 24 h).
//!
//! The ledger is written (temp file, fsync, rename, fsync of the directory) *before* an action
//! starts and again after it ends, so `kill -9` at any moment, a crash loop or a reboot never
//! resets a budget. A missing ledger is a fresh start. A corrupt or unreadable one is moved
//! aside and replaced by one that holds every action back for one `min_interval` (fail safe:
//! a daemon that cannot remember must not act as if it had never acted).
//!
//! Pruning forgets runs after 48 h, so the ledger also keeps cumulative [`Totals`] per action
//! and outcome (the metric `pleg_guard_actions_total`): never pruned, counted as each outcome
//! is recorded, and seeded from the entries when a ledger written before they existed is read.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::action::ActionKind;
use crate::config::ActionConfig;

/// The rolling window of `max_per_day`.
pub const DAY: Duration = Duration::from_secs(24 * 3600);
/// The ledger's file name in the state directory.
pub const LEDGER_FILE: &str = "ledger.json";
/// The format version written into the file.
const FORMAT: u32 = 1;

/// How an action run ended, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunOutcome {
    /// Recorded before the run; still so if the daemon died during it.
    Started,
    /// It did what it was asked.
    Succeeded,
    /// It failed.
    Failed,
    /// A placeholder written when the ledger was unreadable (holds the action back).
    Unknown,
}

/// Whether the symptom an action aimed at was gone after the settle time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Symptom {
    /// Gone.
    Cleared,
    /// Still there.
    Persisted,
}

/// One action run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Unique within the ledger, increasing.
    pub id: u64,
    /// Which action.
    pub action: ActionKind,
    /// When it started.
    #[serde(with = "crate::report::time_format")]
    pub at: SystemTime,
    /// How it ended.
    pub outcome: RunOutcome,
    /// What it did.
    #[serde(default)]
    pub detail: String,
    /// The settle-time verdict, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symptom: Option<Symptom>,
}

/// What is left of an action's budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Runs left in the rolling 24 h.
    pub remaining: u32,
    /// The daily maximum.
    pub max_per_day: u32,
    /// When the next run is allowed (None: now).
    #[serde(with = "crate::report::time_format::option")]
    pub next_allowed_at: Option<SystemTime>,
}

/// An outcome the action counters count (the contract's outcomes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// The action did what it was asked.
    Succeeded,
    /// It failed.
    Failed,
    /// A rate limit held it back (counted once per episode, like the journal entry).
    Suppressed,
    /// Observe mode or disabled (once per episode).
    Skipped,
    /// After the settle time the symptom was gone.
    Cleared,
    /// After the settle time the symptom was still there.
    Persisted,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 6] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Suppressed,
        Outcome::Skipped,
        Outcome::Cleared,
        Outcome::Persisted,
    ];

    /// The outcome a suppressed/skipped journal note counts as.
    pub fn of_note(kind: crate::report::event::EventKind) -> Option<Outcome> {
        use crate::report::event::EventKind;
        match kind {
            EventKind::ActionSuppressed => Some(Outcome::Suppressed),
            EventKind::ActionSkipped => Some(Outcome::Skipped),
            _ => None,
        }
    }

    /// The contract's name.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Suppressed => "suppressed",
            Outcome::Skipped => "skipped",
            Outcome::Cleared => "cleared",
            Outcome::Persisted => "persisted",
        }
    }
}

/// Cumulative counts by action name, then outcome name. Names (not enums) as keys, so a ledger
/// written by a newer pleg-guard with more of either still reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals(BTreeMap<String, BTreeMap<String, u64>>);

impl Totals {
    /// How many times `action` ended with `outcome`.
    pub fn get(&self, action: ActionKind, outcome: Outcome) -> u64 {
        self.0
            .get(action.name())
            .and_then(|m| m.get(outcome.name()))
            .copied()
            .unwrap_or(0)
    }

    fn add(&mut self, action: ActionKind, outcome: Outcome) {
        let n = self
            .0
            .entry(action.name().to_owned())
            .or_default()
            .entry(outcome.name().to_owned())
            .or_default();
        *n = n.saturating_add(1);
    }

    /// What the entries alone tell (a ledger written before totals were kept).
    fn from_entries(entries: &[Entry]) -> Self {
        let mut t = Totals::default();
        for e in entries {
            match e.outcome {
                RunOutcome::Succeeded => t.add(e.action, Outcome::Succeeded),
                RunOutcome::Failed => t.add(e.action, Outcome::Failed),
                RunOutcome::Started | RunOutcome::Unknown => {}
            }
            match e.symptom {
                Some(Symptom::Cleared) => t.add(e.action, Outcome::Cleared),
                Some(Symptom::Persisted) => t.add(e.action, Outcome::Persisted),
                None => {}
            }
        }
        t
    }
}

/// The ledger's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    format: u32,
    #[serde(default)]
    next_id: u64,
    #[serde(default)]
    entries: Vec<Entry>,
    /// Cumulative counts; None in a ledger written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    totals: Option<Totals>,
}

impl Ledger {
    /// A ledger that holds every action back for one `min_interval` from `now`: what an
    /// unreadable ledger is replaced with.
    pub fn fail_safe(now: SystemTime) -> Self {
        let mut l = Ledger::default();
        for action in ActionKind::ALL {
            let id = l.record_start(action, now);
            l.record_end(
                id,
                RunOutcome::Unknown,
                "ledger was unreadable; held back one min_interval",
            );
        }
        l
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Record that `action` starts at `now`; returns the entry's id.
    pub fn record_start(&mut self, action: ActionKind, now: SystemTime) -> u64 {
        self.next_id += 1;
        self.entries.push(Entry {
            id: self.next_id,
            action,
            at: now,
            outcome: RunOutcome::Started,
            detail: String::new(),
            symptom: None,
        });
        self.next_id
    }

    /// Drop run `id`: it was recorded but never started (its record could not be saved), so
    /// it must not hold the action back once the ledger can be written again.
    pub fn forget(&mut self, id: u64) {
        self.entries.retain(|e| e.id != id);
    }

    /// Record how run `id` ended.
    pub fn record_end(&mut self, id: u64, outcome: RunOutcome, detail: &str) {
        self.seed_totals();
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.outcome = outcome;
            e.detail = detail.to_owned();
            let action = e.action;
            match outcome {
                RunOutcome::Succeeded => self.count(action, Outcome::Succeeded),
                RunOutcome::Failed => self.count(action, Outcome::Failed),
                RunOutcome::Started | RunOutcome::Unknown => {}
            }
        }
    }

    /// Record the settle-time verdict of run `id`.
    pub fn record_symptom(&mut self, id: u64, symptom: Symptom) {
        self.seed_totals();
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.symptom = Some(symptom);
            let action = e.action;
            self.count(
                action,
                match symptom {
                    Symptom::Cleared => Outcome::Cleared,
                    Symptom::Persisted => Outcome::Persisted,
                },
            );
        }
    }

    /// Count one `outcome` of `action` (suppressed and skipped have no entry of their own).
    pub fn count(&mut self, action: ActionKind, outcome: Outcome) {
        self.seed_totals();
        if let Some(t) = self.totals.as_mut() {
            t.add(action, outcome);
        }
    }

    /// The cumulative counts.
    pub fn totals(&self) -> std::borrow::Cow<'_, Totals> {
        match &self.totals {
            Some(t) => std::borrow::Cow::Borrowed(t),
            None => std::borrow::Cow::Owned(Totals::from_entries(&self.entries)),
        }
    }

    fn seed_totals(&mut self) {
        if self.totals.is_none() {
            self.totals = Some(Totals::from_entries(&self.entries));
        }
    }

    /// Take over the runs of `old` (the ledger of the previous `state_directory`, on a reload
    /// that moves it) that this ledger lacks, under new ids: neither ledger's entries are
    /// lost, none overwrites another, and a budget spent before the move stays spent.
    /// Returns `(old id, id here)` for every entry of `old`, so that an action still running
    /// records its end in the entry that now stands for it.
    pub fn absorb(&mut self, old: &Ledger) -> Vec<(u64, u64)> {
        let mut ids = Vec::with_capacity(old.entries.len());
        for e in &old.entries {
            // The same run, already here (a move back to a directory used before).
            let same = self
                .entries
                .iter()
                .find(|h| h.action == e.action && h.at == e.at && h.detail == e.detail);
            let id = match same {
                Some(h) => {
                    let id = h.id;
                    if let Some(h) = self.entries.iter_mut().find(|h| h.id == id) {
                        // The old ledger saw more of this run (its end, its verdict).
                        if h.outcome == RunOutcome::Started {
                            h.outcome = e.outcome;
                        }
                        h.symptom = h.symptom.or(e.symptom);
                    }
                    id
                }
                None => {
                    self.next_id = self
                        .next_id
                        .max(self.entries.iter().map(|h| h.id).max().unwrap_or(0))
                        + 1;
                    self.entries.push(Entry {
                        id: self.next_id,
                        ..e.clone()
                    });
                    self.next_id
                }
            };
            ids.push((e.id, id));
        }
        self.entries.sort_by_key(|e| (e.at, e.id));
        ids
    }

    /// Forget runs older than `keep` (they no longer count against `max_per_day`), except
    /// the newest run of each action: `min_interval` is measured from it, however long
    /// `min_interval` is (`"3d"` must not silently become `keep`).
    pub fn prune(&mut self, now: SystemTime, keep: Duration) {
        let newest: Vec<u64> = ActionKind::ALL
            .iter()
            .filter_map(|a| {
                self.entries
                    .iter()
                    .filter(|e| e.action == *a)
                    .max_by_key(|e| (e.at, e.id))
                    .map(|e| e.id)
            })
            .collect();
        self.entries.retain(|e| {
            newest.contains(&e.id) || now.duration_since(e.at).map_or(true, |age| age <= keep)
        });
    }

    /// The budget of `action` at `now`.
    pub fn budget(&self, action: ActionKind, cfg: &ActionConfig, now: SystemTime) -> Budget {
        let max = cfg.max_per_day.get();
        // A run stamped in the future (the clock went back) counts as happening now.
        let runs: Vec<SystemTime> = self
            .entries
            .iter()
            .filter(|e| e.action == action)
            .map(|e| e.at.min(now))
            .collect();
        let counted: Vec<SystemTime> = self
            .entries
            .iter()
            .filter(|e| e.action == action && e.outcome != RunOutcome::Unknown)
            .map(|e| e.at.min(now))
            .filter(|at| now.duration_since(*at).map_or(true, |age| age < DAY))
            .collect();
        let used = u32::try_from(counted.len()).unwrap_or(u32::MAX);
        let remaining = max.saturating_sub(used);

        let mut next: Option<SystemTime> = None;
        if let Some(last) = runs.iter().max() {
            let t = crate::clock::later(*last, cfg.min_interval);
            if t > now {
                next = Some(t);
            }
        }
        if remaining == 0 {
            // The run that must age out of the window before another is allowed.
            let mut sorted = counted.clone();
            sorted.sort();
            let idx = (used - max) as usize;
            if let Some(t) = sorted.get(idx) {
                let t = crate::clock::later(*t, DAY);
                next = Some(next.map_or(t, |n| n.max(t)));
            }
        }
        Budget {
            remaining,
            max_per_day: max,
            next_allowed_at: next,
        }
    }

    /// Whether `action` may run at `now`: `Err(next_allowed_at)` when a limit holds it back.
    pub fn check(
        &self,
        action: ActionKind,
        cfg: &ActionConfig,
        now: SystemTime,
    ) -> Result<(), SystemTime> {
        match self.budget(action, cfg, now).next_allowed_at {
            Some(t) if t > now => Err(t),
            _ => Ok(()),
        }
    }
}

/// Why the ledger file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The ledger's file.
#[derive(Debug, Clone)]
pub struct LedgerFile {
    path: PathBuf,
}

/// What loading found.
#[derive(Debug)]
pub struct Loaded {
    /// The ledger to use.
    pub ledger: Ledger,
    /// Set when the file was unreadable: what was wrong and where it was moved.
    pub problem: Option<String>,
}

impl LedgerFile {
    /// The ledger in `state_directory`.
    pub fn new(state_directory: &Path) -> Self {
        LedgerFile {
            path: state_directory.join(LEDGER_FILE),
        }
    }

    /// Its path.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Load the ledger. Missing: empty. Unreadable or corrupt: moved aside, fail-safe ledger
    /// (saved at once), and the problem reported.
    pub fn load(&self, now: SystemTime) -> Loaded {
        let problem = match std::fs::read(&self.path) {
            Ok(bytes) => match serde_json::from_slice::<Ledger>(&bytes) {
                Ok(ledger) if ledger.format <= FORMAT => {
                    return Loaded {
                        ledger,
                        problem: None,
                    };
                }
                Ok(ledger) => format!("unknown ledger format {}", ledger.format),
                Err(e) => format!("corrupt: {e}"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Loaded {
                    ledger: Ledger::default(),
                    problem: None,
                };
            }
            Err(e) => format!("unreadable: {e}"),
        };
        let stamp = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = self.path.with_extension(format!("json.corrupt-{stamp}"));
        let moved = match std::fs::rename(&self.path, &aside) {
            Ok(()) => format!("kept aside as {}", aside.display()),
            Err(e) => format!("could not be moved aside: {e}"),
        };
        let ledger = Ledger::fail_safe(now);
        let saved = match self.save(&ledger) {
            Ok(()) => String::new(),
            Err(e) => format!("; the fresh ledger could not be saved: {e}"),
        };
        Loaded {
            ledger,
            problem: Some(format!(
                "{}: {problem}; {moved}; every action is held back for one min_interval{saved}",
                self.path.display()
            )),
        }
    }

    /// Write the ledger atomically: temp file, fsync, rename, fsync the directory.
    pub fn save(&self, ledger: &Ledger) -> Result<(), LedgerError> {
        let mut ledger = ledger.clone();
        ledger.format = FORMAT;
        let json = serde_json::to_vec_pretty(&ledger).map_err(|e| LedgerError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        write_atomically(&self.path, &json).map_err(|source| LedgerError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// Write `bytes` to `path` so that a reader (or a crash) sees either the old file or the new
/// one, never a mix: temp file in the same directory, fsync, rename, fsync the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn cfg(min_interval: u64, max: u32) -> ActionConfig {
        ActionConfig {
            enabled: true,
            min_interval: Duration::from_secs(min_interval),
            max_per_day: NonZeroU32::new(max).unwrap(),
            settle: Duration::from_secs(10),
            fleet: false,
        }
    }

    const A: ActionKind = ActionKind::DaemonReexec;

    #[test]
    fn fresh_ledger_allows() {
        let l = Ledger::default();
        assert_eq!(l.check(A, &cfg(3600, 3), t(0)), Ok(()));
        let b = l.budget(A, &cfg(3600, 3), t(0));
        assert_eq!((b.remaining, b.next_allowed_at), (3, None));
    }

    #[test]
    fn min_interval_holds_back_and_counts_from_start() {
        let mut l = Ledger::default();
        let id = l.record_start(A, t(0));
        assert_eq!(l.check(A, &cfg(3600, 3), t(10)), Err(t(3600)));
        l.record_end(id, RunOutcome::Failed, "x");
        assert_eq!(l.check(A, &cfg(3600, 3), t(3599)), Err(t(3600)));
        assert_eq!(l.check(A, &cfg(3600, 3), t(3600)), Ok(()));
        // other actions are not affected
        assert_eq!(
            l.check(ActionKind::RestartKubelet, &cfg(3600, 3), t(10)),
            Ok(())
        );
    }

    #[test]
    fn max_per_day_is_a_rolling_window() {
        let mut l = Ledger::default();
        for s in [0, 100, 200] {
            l.record_start(A, t(s));
        }
        let c = cfg(10, 3);
        let b = l.budget(A, &c, t(300));
        assert_eq!(b.remaining, 0);
        // the oldest run ages out 24 h after it started
        assert_eq!(b.next_allowed_at, Some(t(0) + DAY));
        assert_eq!(l.check(A, &c, t(0) + DAY), Ok(()));
        assert_eq!(l.budget(A, &c, t(0) + DAY).remaining, 1);
    }

    #[test]
    fn future_entries_count_as_now() {
        let mut l = Ledger::default();
        l.record_start(A, t(10_000));
        assert_eq!(l.check(A, &cfg(60, 3), t(0)), Err(t(60)));
    }

    #[test]
    fn fail_safe_holds_every_action_for_one_min_interval_but_spends_no_day_budget() {
        let l = Ledger::fail_safe(t(0));
        for a in ActionKind::ALL {
            assert_eq!(l.check(a, &cfg(300, 3), t(1)), Err(t(300)));
            assert_eq!(l.budget(a, &cfg(300, 3), t(1)).remaining, 3);
            assert_eq!(l.check(a, &cfg(300, 3), t(300)), Ok(()));
        }
    }

    #[test]
    fn totals_count_outcomes_and_survive_prune_and_reload() {
        let d = tempdir("totals");
        let f = LedgerFile::new(&d);
        let mut l = f.load(t(0)).ledger;
        let id = l.record_start(A, t(0));
        assert_eq!(l.totals().get(A, Outcome::Succeeded), 0);
        l.record_end(id, RunOutcome::Succeeded, "ok");
        l.record_symptom(id, Symptom::Persisted);
        let id2 = l.record_start(A, t(10));
        l.record_end(id2, RunOutcome::Failed, "no");
        l.count(A, Outcome::Suppressed);
        l.count(ActionKind::RestartKubelet, Outcome::Skipped);
        l.prune(t(0) + DAY * 3, DAY);
        assert_eq!(
            l.entries().len(),
            1,
            "only each action's newest run is kept"
        );
        f.save(&l).unwrap();
        let back = f.load(t(0) + DAY * 3).ledger;
        let got: Vec<u64> = Outcome::ALL
            .iter()
            .map(|o| back.totals().get(A, *o))
            .collect();
        assert_eq!(got, [1, 1, 1, 0, 0, 1]);
        assert_eq!(
            back.totals()
                .get(ActionKind::RestartKubelet, Outcome::Skipped),
            1
        );
        // the fail-safe ledger's placeholders count as nothing
        assert_eq!(Ledger::fail_safe(t(0)).totals().get(A, Outcome::Failed), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn totals_are_seeded_from_a_ledger_written_before_them() {
        let old = r#"{"format": 1, "next_id": 2, "entries": [
            {"id": 1, "action": "daemon-reexec", "at": "2026-01-01T00:00:00Z", "outcome": "succeeded", "symptom": "cleared"},
            {"id": 2, "action": "daemon-reexec", "at": "2026-01-01T01:00:00Z", "outcome": "started"}]}"#;
        let mut l: Ledger = serde_json::from_str(old).unwrap();
        assert_eq!(l.totals().get(A, Outcome::Succeeded), 1);
        assert_eq!(l.totals().get(A, Outcome::Cleared), 1);
        // the run that was in flight counts once it ends, not twice
        l.record_end(2, RunOutcome::Succeeded, "");
        assert_eq!(l.totals().get(A, Outcome::Succeeded), 2);
        assert_eq!(l.totals().get(A, Outcome::Cleared), 1);
    }

    #[test]
    fn prune_drops_old_runs() {
        let mut l = Ledger::default();
        l.record_start(A, t(0));
        l.record_start(A, t(0) + DAY + Duration::from_secs(10));
        l.prune(t(0) + DAY + Duration::from_secs(20), DAY);
        assert_eq!(l.entries().len(), 1);
    }

    /// `min_interval = "3d"` with the daemon's 48 h history: the last run is kept past 48 h,
    /// so the action is still held back on day 3 and allowed after it.
    #[test]
    fn min_interval_longer_than_the_history_still_holds() {
        let keep = DAY * 2; // what the daemon prunes at
        let three_days = cfg(3 * 86_400, 3);
        let mut l = Ledger::default();
        let id = l.record_start(A, t(0));
        l.record_end(id, RunOutcome::Succeeded, "x");
        l.record_start(ActionKind::RestartKubelet, t(10));
        l.record_start(ActionKind::RestartKubelet, t(20));
        let day_2_5 = t(0) + DAY * 5 / 2;
        l.prune(day_2_5, keep);
        // Only the newest run of each action survives.
        let ids: Vec<(ActionKind, SystemTime)> =
            l.entries().iter().map(|e| (e.action, e.at)).collect();
        assert_eq!(ids, [(A, t(0)), (ActionKind::RestartKubelet, t(20))]);
        assert_eq!(l.check(A, &three_days, day_2_5), Err(t(3 * 86_400)));
        // ... through a save and a load, and further prunes.
        let d = tempdir("long-min-interval");
        let f = LedgerFile::new(&d);
        f.save(&l).unwrap();
        let mut back = f.load(day_2_5).ledger;
        back.prune(t(3 * 86_400 - 1), keep);
        assert_eq!(
            back.check(A, &three_days, t(3 * 86_400 - 1)),
            Err(t(3 * 86_400))
        );
        assert_eq!(back.check(A, &three_days, t(3 * 86_400)), Ok(()));
        // The kept run no longer counts against max_per_day.
        assert_eq!(back.budget(A, &three_days, t(3 * 86_400)).remaining, 3);
        // A year-long min_interval holds for the year.
        let year = cfg(365 * 86_400, 3);
        back.prune(t(364 * 86_400), keep);
        assert!(back.check(A, &year, t(364 * 86_400)).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A min_interval or a ledger time so large that `last + min_interval` would not fit, or
    /// not print, saturates at 9999-12-31 instead of panicking.
    #[test]
    fn huge_sums_saturate() {
        let mut l = Ledger::default();
        l.record_start(A, t(0));
        let mut huge = cfg(0, 1);
        huge.min_interval = Duration::MAX;
        let b = l.budget(A, &huge, t(1));
        assert_eq!(b.next_allowed_at, Some(crate::clock::last_printable()));
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.contains("9999-12-31T23:59:59Z"), "{json}");
    }

    /// A reload moves the ledger to another state directory that has runs of its own: both
    /// sets survive, ids stay unique, and the running action's end lands on its own entry.
    #[test]
    fn absorbing_the_old_ledger_keeps_both_and_remaps_ids() {
        let mut old = Ledger::default();
        let done = old.record_start(ActionKind::RestartKubelet, t(0));
        old.record_end(done, RunOutcome::Succeeded, "restarted");
        let running = old.record_start(A, t(100)); // id 2, still running
        let mut new = Ledger::default();
        let theirs = new.record_start(ActionKind::PurgeDeadContainers, t(50)); // also id 1
        let other = new.record_start(ActionKind::PurgeDeadContainers, t(60)); // also id 2
        assert_eq!((done, running, theirs, other), (1, 2, 1, 2));
        let ids = new.absorb(&old);
        assert_eq!(new.entries().len(), 4);
        let mut seen: Vec<u64> = new.entries().iter().map(|e| e.id).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 4, "ids unique");
        let running_here = ids.iter().find(|(o, _)| *o == running).unwrap().1;
        new.record_end(running_here, RunOutcome::Succeeded, "reexec");
        let by_action = |a: ActionKind| {
            new.entries()
                .iter()
                .filter(|e| e.action == a)
                .map(|e| (e.at, e.outcome))
                .collect::<Vec<_>>()
        };
        assert_eq!(by_action(A), [(t(100), RunOutcome::Succeeded)]);
        // The other directory's runs were not overwritten.
        assert_eq!(
            by_action(ActionKind::PurgeDeadContainers),
            [(t(50), RunOutcome::Started), (t(60), RunOutcome::Started)]
        );
        // The moved budget still holds.
        assert!(new.check(A, &cfg(3600, 3), t(200)).is_err());
        // Moving back absorbs nothing twice.
        let before = new.entries().len();
        let mut back = new.clone();
        back.absorb(&new);
        assert_eq!(back.entries().len(), before);
        // A fresh id after the move does not collide.
        let next = new.record_start(A, t(300));
        assert!(new.entries().iter().filter(|e| e.id == next).count() == 1);
    }

    fn tempdir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("pleg-guard-ledger-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn file_round_trip_and_missing_is_fresh() {
        let d = tempdir("rt");
        let f = LedgerFile::new(&d);
        let loaded = f.load(t(0));
        assert!(loaded.problem.is_none());
        assert!(loaded.ledger.entries().is_empty());
        let mut l = loaded.ledger;
        let id = l.record_start(A, t(5));
        l.record_end(id, RunOutcome::Succeeded, "private socket");
        l.record_symptom(id, Symptom::Cleared);
        f.save(&l).unwrap();
        let back = f.load(t(6));
        assert!(back.problem.is_none());
        assert_eq!(back.ledger.entries(), l.entries());
        // a new run gets a new id after reload
        let mut l2 = back.ledger;
        assert!(l2.record_start(A, t(7)) > id);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn corrupt_file_is_kept_aside_and_fails_safe() {
        let d = tempdir("corrupt");
        let f = LedgerFile::new(&d);
        std::fs::write(
            f.path(),
            b"{\"entries\": [ {\"id\": 1, \"action\": \"nuke\"",
        )
        .unwrap();
        let loaded = f.load(t(0));
        let problem = loaded.problem.unwrap();
        assert!(problem.contains("corrupt"), "{problem}");
        assert!(problem.contains("kept aside"), "{problem}");
        assert_eq!(loaded.ledger.check(A, &cfg(60, 3), t(1)), Err(t(60)));
        let aside: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1);
        // the fail-safe ledger was saved, so a crash right now still holds the actions back
        let again = f.load(t(2));
        assert!(again.problem.is_none());
        assert_eq!(again.ledger.check(A, &cfg(60, 3), t(2)), Err(t(60)));
        let _ = std::fs::remove_dir_all(&d);
    }
}
