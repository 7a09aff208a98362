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
//!
//! Which clock counts: every entry holds its wall time and, since clock jumps were handled,
//! its boot's id and `CLOCK_BOOTTIME` ([`BootClock`]). An entry of the current boot ages on
//! the boot clock, so a wall clock stepped a day forward frees nothing and one stepped back
//! holds nothing longer than its real interval; an entry of an earlier boot (or of an older
//! ledger, without a boot clock) ages on the wall clock, a future one counting as now. Every
//! function here takes the present as a [`Now`] and reads no clock itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::clock::boot::{BootClock, Now};
use crate::config::ActionConfig;
use crate::target::ActionKind;

/// The rolling window of `max_per_day`.
pub const DAY: Duration = Duration::from_secs(24 * 3600);
/// The ledger's file name in the state directory.
pub const LEDGER_FILE: &str = "ledger.json";
/// The format version written into the file.
const FORMAT: u32 = 1;
/// How far the wall clock and the boot clock may disagree about a run's age before the wall
/// clock counts as having jumped: more than two clock reads apart, and than NTP's slewing
/// (at most 0.5 ms/s, ordinary drift well under 0.05 ms/s) adds up to within hours.
pub const CLOCKS_AGREE: Duration = Duration::from_secs(5);

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
    #[serde(with = "crate::clock::time_format")]
    pub at: SystemTime,
    /// How it ended.
    pub outcome: RunOutcome,
    /// What it did.
    #[serde(default)]
    pub detail: String,
    /// The settle-time verdict, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symptom: Option<Symptom>,
    /// When it started on its boot's clock (None in a ledger written before boot clocks were
    /// kept, or where the boot clock could not be read: then the wall time counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootClock>,
}

impl Entry {
    /// How long ago it started (see [`Now::elapsed_since`]).
    pub fn age(&self, now: &Now) -> Duration {
        now.elapsed_since(self.at, self.boot.as_ref())
    }

    /// When it started, by the wall clock as it reads now: its own stamp while the wall clock
    /// agrees with [`age`](Self::age) within [`CLOCKS_AGREE`], else its stamp moved by the
    /// jump (the wall clock's age minus the real one, in whole seconds). Either way a time shown
    /// from it stays the same round after round, so a suppression is logged once, not again
    /// whenever the few microseconds between reading the two clocks cross a second.
    pub fn wall_start(&self, now: &Now) -> SystemTime {
        let age = self.age(now);
        let moved = match now.wall.duration_since(self.at) {
            Ok(on_wall) if on_wall.abs_diff(age) <= CLOCKS_AGREE => return self.at,
            Ok(on_wall) if on_wall > age => Ok(on_wall - age),
            Ok(on_wall) => Err(age - on_wall),
            // The wall clock reads before the stamp: it went back by that and the age.
            Err(e) => Err(e.duration().saturating_add(age)),
        };
        match moved {
            Ok(ahead) => self.at.checked_add(whole_seconds(ahead)),
            Err(behind) => self.at.checked_sub(whole_seconds(behind)),
        }
        .unwrap_or(now.wall)
    }
}

/// `d` rounded to the nearest second.
fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(
        d.as_secs()
            .saturating_add(u64::from(d.subsec_millis() >= 500)),
    )
}

/// What is left of an action's budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Runs left in the rolling 24 h.
    pub remaining: u32,
    /// The daily maximum.
    pub max_per_day: u32,
    /// When the next run is allowed (None: now).
    #[serde(with = "crate::clock::time_format::option")]
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
    pub fn fail_safe(now: &Now) -> Self {
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

    /// Record that `action` starts `now`; returns the entry's id.
    pub fn record_start(&mut self, action: ActionKind, now: &Now) -> u64 {
        self.next_id += 1;
        self.entries.push(Entry {
            id: self.next_id,
            action,
            at: now.wall,
            outcome: RunOutcome::Started,
            detail: String::new(),
            symptom: None,
            boot: now.boot.clone(),
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
    /// `min_interval` is (`"3d"` must not silently become `keep`). Ages are measured as the
    /// limits measure them, so a wall clock stepped forward drops no run of this boot.
    pub fn prune(&mut self, now: &Now, keep: Duration) {
        let newest: Vec<u64> = ActionKind::ALL
            .iter()
            .filter_map(|a| self.newest(*a, now).map(|e| e.id))
            .collect();
        self.entries
            .retain(|e| newest.contains(&e.id) || e.age(now) <= keep);
    }

    /// The run of `action` that started last (the youngest; of equal ages the later id).
    fn newest(&self, action: ActionKind, now: &Now) -> Option<&Entry> {
        self.entries
            .iter()
            .filter(|e| e.action == action)
            .min_by_key(|e| (e.age(now), std::cmp::Reverse(e.id)))
    }

    /// The budget of `action` at `now`. `next_allowed_at` is a wall time for people: the
    /// wait is measured as [`Entry::age`] measures it, so after a clock jump it is the jumped
    /// clock's reading when the wait is over (see [`Entry::wall_start`]).
    pub fn budget(&self, action: ActionKind, cfg: &ActionConfig, now: &Now) -> Budget {
        let (remaining, next_allowed_at) = self.limits(action, cfg, now);
        Budget {
            remaining,
            max_per_day: cfg.max_per_day.get(),
            next_allowed_at,
        }
    }

    /// Whether `action` may run at `now`: `Err(next_allowed_at)` when a limit holds it back.
    pub fn check(
        &self,
        action: ActionKind,
        cfg: &ActionConfig,
        now: &Now,
    ) -> Result<(), SystemTime> {
        match self.limits(action, cfg, now) {
            (_, Some(next)) => Err(next),
            (_, None) => Ok(()),
        }
    }

    /// Runs left in the rolling day, and when the next run is allowed (None: now).
    fn limits(
        &self,
        action: ActionKind,
        cfg: &ActionConfig,
        now: &Now,
    ) -> (u32, Option<SystemTime>) {
        let max = cfg.max_per_day.get();
        // Each limit holding the action back: the run it counts from, and for how long.
        let mut holds: Vec<(&Entry, Duration)> = Vec::new();
        // min_interval: from the newest run of any outcome (the fail-safe placeholder too).
        if let Some(e) = self.newest(action, now) {
            holds.push((e, cfg.min_interval));
        }
        // max_per_day: the runs (placeholders aside) younger than a day, oldest first.
        let mut counted: Vec<(Duration, &Entry)> = self
            .entries
            .iter()
            .filter(|e| e.action == action && e.outcome != RunOutcome::Unknown)
            .map(|e| (e.age(now), e))
            .filter(|(age, _)| *age < DAY)
            .collect();
        counted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
        let used = u32::try_from(counted.len()).unwrap_or(u32::MAX);
        let remaining = max.saturating_sub(used);
        if remaining == 0 {
            // The run that must age out of the window before another is allowed.
            let idx = usize::try_from(used - max).unwrap_or(usize::MAX);
            if let Some((_, e)) = counted.get(idx) {
                holds.push((e, DAY));
            }
        }
        // Held back: the wall time when the longest hold ends, never shown in the past (the
        // clocks may disagree by up to CLOCKS_AGREE).
        let next = holds
            .into_iter()
            .filter(|(e, hold)| e.age(now) < *hold)
            .map(|(e, hold)| crate::clock::later(e.wall_start(now), hold))
            .max()
            .map(|t| t.max(now.wall));
        (remaining, next)
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
    pub fn load(&self, now: &Now) -> Loaded {
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
            .wall
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

    /// Write the ledger atomically ([`crate::state_file`]: temp file, fsync, rename, fsync the
    /// directory).
    pub fn save(&self, ledger: &Ledger) -> Result<(), LedgerError> {
        let mut ledger = ledger.clone();
        ledger.format = FORMAT;
        let json = serde_json::to_vec_pretty(&ledger).map_err(|e| LedgerError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        crate::state_file::write(&self.path, &json, crate::state_file::KEPT).map_err(|source| {
            LedgerError::Io {
                path: self.path.clone(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::testing::tempdir;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    /// A present known by the wall clock alone.
    fn at(t: SystemTime) -> Now {
        Now::wall_only(t)
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
        assert_eq!(l.check(A, &cfg(3600, 3), &at(t(0))), Ok(()));
        let b = l.budget(A, &cfg(3600, 3), &at(t(0)));
        assert_eq!((b.remaining, b.next_allowed_at), (3, None));
    }

    #[test]
    fn min_interval_holds_back_and_counts_from_start() {
        let mut l = Ledger::default();
        let id = l.record_start(A, &at(t(0)));
        assert_eq!(l.check(A, &cfg(3600, 3), &at(t(10))), Err(t(3600)));
        l.record_end(id, RunOutcome::Failed, "x");
        assert_eq!(l.check(A, &cfg(3600, 3), &at(t(3599))), Err(t(3600)));
        assert_eq!(l.check(A, &cfg(3600, 3), &at(t(3600))), Ok(()));
        // other actions are not affected
        assert_eq!(
            l.check(ActionKind::RestartKubelet, &cfg(3600, 3), &at(t(10))),
            Ok(())
        );
    }

    #[test]
    fn max_per_day_is_a_rolling_window() {
        let mut l = Ledger::default();
        for s in [0, 100, 200] {
            l.record_start(A, &at(t(s)));
        }
        let c = cfg(10, 3);
        let b = l.budget(A, &c, &at(t(300)));
        assert_eq!(b.remaining, 0);
        // the oldest run ages out 24 h after it started
        assert_eq!(b.next_allowed_at, Some(t(0) + DAY));
        assert_eq!(l.check(A, &c, &at(t(0) + DAY)), Ok(()));
        assert_eq!(l.budget(A, &c, &at(t(0) + DAY)).remaining, 1);
    }

    #[test]
    fn future_entries_count_as_now() {
        let mut l = Ledger::default();
        l.record_start(A, &at(t(10_000)));
        assert_eq!(l.check(A, &cfg(60, 3), &at(t(0))), Err(t(60)));
    }

    #[test]
    fn fail_safe_holds_every_action_for_one_min_interval_but_spends_no_day_budget() {
        let l = Ledger::fail_safe(&at(t(0)));
        for a in ActionKind::ALL {
            assert_eq!(l.check(a, &cfg(300, 3), &at(t(1))), Err(t(300)));
            assert_eq!(l.budget(a, &cfg(300, 3), &at(t(1))).remaining, 3);
            assert_eq!(l.check(a, &cfg(300, 3), &at(t(300))), Ok(()));
        }
    }

    #[test]
    fn totals_count_outcomes_and_survive_prune_and_reload() {
        let d = tempdir("totals");
        let f = LedgerFile::new(&d);
        let mut l = f.load(&at(t(0))).ledger;
        let id = l.record_start(A, &at(t(0)));
        assert_eq!(l.totals().get(A, Outcome::Succeeded), 0);
        l.record_end(id, RunOutcome::Succeeded, "ok");
        l.record_symptom(id, Symptom::Persisted);
        let id2 = l.record_start(A, &at(t(10)));
        l.record_end(id2, RunOutcome::Failed, "no");
        l.count(A, Outcome::Suppressed);
        l.count(ActionKind::RestartKubelet, Outcome::Skipped);
        l.prune(&at(t(0) + DAY * 3), DAY);
        assert_eq!(
            l.entries().len(),
            1,
            "only each action's newest run is kept"
        );
        f.save(&l).unwrap();
        let back = f.load(&at(t(0) + DAY * 3)).ledger;
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
        assert_eq!(
            Ledger::fail_safe(&at(t(0)))
                .totals()
                .get(A, Outcome::Failed),
            0
        );
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
        l.record_start(A, &at(t(0)));
        l.record_start(A, &at(t(0) + DAY + Duration::from_secs(10)));
        l.prune(&at(t(0) + DAY + Duration::from_secs(20)), DAY);
        assert_eq!(l.entries().len(), 1);
    }

    /// `min_interval = "3d"` with the daemon's 48 h history: the last run is kept past 48 h,
    /// so the action is still held back on day 3 and allowed after it.
    #[test]
    fn min_interval_longer_than_the_history_still_holds() {
        let keep = DAY * 2; // what the daemon prunes at
        let three_days = cfg(3 * 86_400, 3);
        let mut l = Ledger::default();
        let id = l.record_start(A, &at(t(0)));
        l.record_end(id, RunOutcome::Succeeded, "x");
        l.record_start(ActionKind::RestartKubelet, &at(t(10)));
        l.record_start(ActionKind::RestartKubelet, &at(t(20)));
        let day_2_5 = t(0) + DAY * 5 / 2;
        l.prune(&at(day_2_5), keep);
        // Only the newest run of each action survives.
        let ids: Vec<(ActionKind, SystemTime)> =
            l.entries().iter().map(|e| (e.action, e.at)).collect();
        assert_eq!(ids, [(A, t(0)), (ActionKind::RestartKubelet, t(20))]);
        assert_eq!(l.check(A, &three_days, &at(day_2_5)), Err(t(3 * 86_400)));
        // ... through a save and a load, and further prunes.
        let d = tempdir("long-min-interval");
        let f = LedgerFile::new(&d);
        f.save(&l).unwrap();
        let mut back = f.load(&at(day_2_5)).ledger;
        back.prune(&at(t(3 * 86_400 - 1)), keep);
        assert_eq!(
            back.check(A, &three_days, &at(t(3 * 86_400 - 1))),
            Err(t(3 * 86_400))
        );
        assert_eq!(back.check(A, &three_days, &at(t(3 * 86_400))), Ok(()));
        // The kept run no longer counts against max_per_day.
        assert_eq!(back.budget(A, &three_days, &at(t(3 * 86_400))).remaining, 3);
        // A year-long min_interval holds for the year.
        let year = cfg(365 * 86_400, 3);
        back.prune(&at(t(364 * 86_400)), keep);
        assert!(back.check(A, &year, &at(t(364 * 86_400))).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A min_interval or a ledger time so large that `last + min_interval` would not fit, or
    /// not print, saturates at 9999-12-31 instead of panicking.
    #[test]
    fn huge_sums_saturate() {
        let mut l = Ledger::default();
        l.record_start(A, &at(t(0)));
        let mut huge = cfg(0, 1);
        huge.min_interval = Duration::MAX;
        let b = l.budget(A, &huge, &at(t(1)));
        assert_eq!(b.next_allowed_at, Some(crate::clock::last_printable()));
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.contains("9999-12-31T23:59:59Z"), "{json}");
    }

    /// A reload moves the ledger to another state directory that has runs of its own: both
    /// sets survive, ids stay unique, and the running action's end lands on its own entry.
    #[test]
    fn absorbing_the_old_ledger_keeps_both_and_remaps_ids() {
        let mut old = Ledger::default();
        let done = old.record_start(ActionKind::RestartKubelet, &at(t(0)));
        old.record_end(done, RunOutcome::Succeeded, "restarted");
        let running = old.record_start(A, &at(t(100))); // id 2, still running
        let mut new = Ledger::default();
        let theirs = new.record_start(ActionKind::PurgeDeadContainers, &at(t(50))); // also id 1
        let other = new.record_start(ActionKind::PurgeDeadContainers, &at(t(60))); // also id 2
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
        assert!(new.check(A, &cfg(3600, 3), &at(t(200))).is_err());
        // Moving back absorbs nothing twice.
        let before = new.entries().len();
        let mut back = new.clone();
        back.absorb(&new);
        assert_eq!(back.entries().len(), before);
        // A fresh id after the move does not collide.
        let next = new.record_start(A, &at(t(300)));
        assert!(new.entries().iter().filter(|e| e.id == next).count() == 1);
    }

    #[test]
    fn file_round_trip_and_missing_is_fresh() {
        let d = tempdir("rt");
        let f = LedgerFile::new(&d);
        let loaded = f.load(&at(t(0)));
        assert!(loaded.problem.is_none());
        assert!(loaded.ledger.entries().is_empty());
        let mut l = loaded.ledger;
        let id = l.record_start(A, &at(t(5)));
        l.record_end(id, RunOutcome::Succeeded, "private socket");
        l.record_symptom(id, Symptom::Cleared);
        f.save(&l).unwrap();
        let back = f.load(&at(t(6)));
        assert!(back.problem.is_none());
        assert_eq!(back.ledger.entries(), l.entries());
        // a new run gets a new id after reload
        let mut l2 = back.ledger;
        assert!(l2.record_start(A, &at(t(7))) > id);
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
        let loaded = f.load(&at(t(0)));
        let problem = loaded.problem.unwrap();
        assert!(problem.contains("corrupt"), "{problem}");
        assert!(problem.contains("kept aside"), "{problem}");
        assert_eq!(loaded.ledger.check(A, &cfg(60, 3), &at(t(1))), Err(t(60)));
        let aside: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1);
        // the fail-safe ledger was saved, so a crash right now still holds the actions back
        let again = f.load(&at(t(2)));
        assert!(again.problem.is_none());
        assert_eq!(again.ledger.check(A, &cfg(60, 3), &at(t(2))), Err(t(60)));
        let _ = std::fs::remove_dir_all(&d);
    }

    const BOOT: &str = "11111111-2222-3333-4444-555555555555";
    const EARLIER_BOOT: &str = "66666666-7777-8888-9999-000000000000";

    /// The present at wall time `wall`, `since_boot` seconds into boot `id`.
    fn booted(wall: SystemTime, id: &str, since_boot: u64) -> Now {
        Now {
            wall,
            boot: Some(BootClock {
                boot_id: id.to_owned(),
                since_boot: Duration::from_secs(since_boot),
            }),
        }
    }

    /// One run, then NTP (or `date -s`) steps the wall clock a day forward 10 s later: neither
    /// `max_per_day` nor `min_interval` is freed, `next_allowed_at` is the jumped clock plus
    /// the real wait, and pruning keeps the run.
    #[test]
    fn a_wall_clock_a_day_ahead_frees_nothing_within_a_boot() {
        let mut l = Ledger::default();
        let id = l.record_start(A, &booted(t(0), BOOT, 100));
        l.record_end(id, RunOutcome::Succeeded, "x");
        let jumped = booted(t(0) + DAY + Duration::from_secs(10), BOOT, 110);
        // max_per_day = 1: held until the run is a real day old.
        let b = l.budget(A, &cfg(60, 1), &jumped);
        assert_eq!(b.remaining, 0);
        assert_eq!(
            b.next_allowed_at,
            Some(jumped.wall + DAY - Duration::from_secs(10))
        );
        assert_eq!(
            l.check(A, &cfg(60, 1), &jumped),
            Err(t(0) + DAY * 2),
            "the jumped wall clock will read this when a real day has passed"
        );
        // The same a round later, read with 300 ms between the two clocks: the same time.
        let jitter = Now {
            wall: t(0) + DAY + Duration::from_millis(11_300),
            boot: Some(BootClock {
                boot_id: BOOT.to_owned(),
                since_boot: Duration::from_secs(111),
            }),
        };
        assert_eq!(l.check(A, &cfg(60, 1), &jitter), Err(t(0) + DAY * 2));
        // min_interval = 1 h, budget left: held for the real 3590 s still to go.
        assert_eq!(
            l.check(A, &cfg(3600, 3), &jumped),
            Err(jumped.wall + Duration::from_secs(3590))
        );
        assert_eq!(l.budget(A, &cfg(3600, 3), &jumped).remaining, 2);
        // Both free on the boot clock's schedule, whatever the wall clock says.
        let later = booted(t(0) + DAY + Duration::from_secs(3600), BOOT, 3700);
        assert_eq!(l.check(A, &cfg(3600, 3), &later), Ok(()));
        let day_on = booted(t(0) + DAY * 2, BOOT, 100 + 86_400);
        assert_eq!(l.check(A, &cfg(60, 1), &day_on), Ok(()));
        assert_eq!(l.budget(A, &cfg(60, 1), &day_on).remaining, 1);
        // Pruning two "days" later by the wall clock keeps it: it is 20 s old.
        l.record_start(A, &booted(t(0) + DAY + Duration::from_secs(15), BOOT, 115));
        l.prune(&booted(t(0) + DAY * 3, BOOT, 120), DAY * 2);
        assert_eq!(l.entries().len(), 2);
        assert_eq!(
            l.budget(A, &cfg(1, 2), &booted(t(0) + DAY * 3, BOOT, 120))
                .remaining,
            0
        );
    }

    /// The wall clock stepped a day back after a run: the run is not "in the future" for a
    /// day; it holds the action for its real `min_interval` and its real day, no longer.
    #[test]
    fn a_wall_clock_a_day_behind_holds_nothing_longer_than_its_interval() {
        let mut l = Ledger::default();
        l.record_start(A, &booted(t(0) + DAY, BOOT, 100));
        let back = |s: u64| booted(t(s), BOOT, 100 + s);
        // 10 s later by the boot clock, a day minus 10 s earlier by the wall clock.
        assert_eq!(l.check(A, &cfg(3600, 3), &back(10)), Err(t(3600)));
        assert_eq!(
            l.budget(A, &cfg(3600, 3), &back(10)).next_allowed_at,
            Some(t(3600))
        );
        assert_eq!(l.check(A, &cfg(3600, 3), &back(3599)), Err(t(3600)));
        assert_eq!(l.check(A, &cfg(3600, 3), &back(3600)), Ok(()));
        // The day budget: one run spent until it is a real day old.
        assert_eq!(l.budget(A, &cfg(60, 1), &back(86_399)).remaining, 0);
        assert_eq!(l.check(A, &cfg(60, 1), &back(86_399)), Err(t(86_400)));
        assert_eq!(l.budget(A, &cfg(60, 1), &back(86_400)).remaining, 1);
        // Old code's view, for contrast: the same entry without its boot clock stands in
        // the future and holds the action back until the wall clock catches up.
        let mut wall_only = l.clone();
        wall_only.entries[0].boot = None;
        assert!(wall_only.check(A, &cfg(3600, 3), &back(3600)).is_err());
    }

    /// After a reboot the boot clock of the last boot means nothing: its runs age on the wall
    /// clock, and one stamped in the future (a clock now behind) counts as now.
    #[test]
    fn runs_of_an_earlier_boot_age_on_the_wall_clock() {
        let mut l = Ledger::default();
        // Late in the earlier boot: 5000 s of boot clock, far more than this boot's 60 s.
        l.record_start(A, &booted(t(0), EARLIER_BOOT, 5000));
        let this = |wall: SystemTime, s: u64| booted(wall, BOOT, s);
        assert_eq!(l.check(A, &cfg(3600, 3), &this(t(600), 60)), Err(t(3600)));
        assert_eq!(l.check(A, &cfg(3600, 3), &this(t(3600), 3060)), Ok(()));
        assert_eq!(l.budget(A, &cfg(60, 1), &this(t(3600), 3060)).remaining, 0);
        assert_eq!(
            l.budget(A, &cfg(60, 1), &this(t(0) + DAY, 80_000))
                .remaining,
            1
        );
        // Booted with a clock a day behind the run: held one min_interval from "now" (and
        // that stays so until the clock catches up: across boots nothing better is known).
        let mut ahead = Ledger::default();
        ahead.record_start(A, &booted(t(0) + DAY, EARLIER_BOOT, 5000));
        assert_eq!(
            ahead.check(A, &cfg(3600, 3), &this(t(10), 30)),
            Err(t(10) + Duration::from_secs(3600))
        );
        // A ledger of this boot and the last one: each run on its own clock.
        l.record_start(A, &this(t(700), 160));
        let now = this(t(0) + DAY + Duration::from_secs(1), 260); // wall jumped
        assert_eq!(
            l.budget(A, &cfg(60, 2), &now).remaining,
            1,
            "the earlier boot's run is a day old, this boot's 100 s"
        );
        l.prune(&now, Duration::from_secs(3600));
        assert_eq!(l.entries().len(), 1, "only this boot's run is kept");
    }

    /// The fail-safe placeholders of a corrupt ledger hold on the boot clock too.
    #[test]
    fn fail_safe_holds_on_the_boot_clock() {
        let l = Ledger::fail_safe(&booted(t(0), BOOT, 100));
        let jumped = booted(t(0) + DAY, BOOT, 101);
        assert_eq!(
            l.check(A, &cfg(300, 3), &jumped),
            Err(jumped.wall + Duration::from_secs(299))
        );
        assert_eq!(
            l.check(A, &cfg(300, 3), &booted(t(0) + DAY, BOOT, 400)),
            Ok(())
        );
    }

    /// A ledger written before boot clocks were kept loads, its runs age on the wall clock,
    /// and the next save keeps both kinds; the boot clock survives the round trip.
    #[test]
    fn an_old_format_ledger_still_loads() {
        let d = tempdir("old-format");
        let f = LedgerFile::new(&d);
        let old = r#"{"format": 1, "next_id": 1, "entries": [
            {"id": 1, "action": "daemon-reexec", "at": "2023-11-14T22:13:20Z", "outcome": "succeeded"}]}"#;
        std::fs::write(f.path(), old).unwrap();
        let loaded = f.load(&booted(t(10), BOOT, 10));
        assert!(loaded.problem.is_none(), "{:?}", loaded.problem);
        let mut l = loaded.ledger;
        assert_eq!(l.entries()[0].at, t(0));
        assert_eq!(l.entries()[0].boot, None);
        assert_eq!(
            l.check(A, &cfg(60, 3), &booted(t(10), BOOT, 10)),
            Err(t(60))
        );
        let id = l.record_start(A, &booted(t(100), BOOT, 100));
        f.save(&l).unwrap();
        let text = std::fs::read_to_string(f.path()).unwrap();
        assert!(text.contains(r#""since_boot_ns": 100000000000"#), "{text}");
        let back = f.load(&booted(t(101), BOOT, 101)).ledger;
        assert_eq!(back.entries(), l.entries());
        assert_eq!(back.entries()[1].id, id);
        assert_eq!(
            back.entries()[1].boot.as_ref().map(|b| b.boot_id.as_str()),
            Some(BOOT)
        );
        // What node-problem-detector's rules read (read-only) parses too.
        let npd = crate::npd::events::parse_ledger(text.as_bytes()).unwrap();
        assert_eq!(npd.entries(), l.entries());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// While the clocks agree, the time shown is the run's own wall time plus the limit, the
    /// same every round (a suppression is logged once, with it), whatever jitter lies between
    /// reading the wall clock and the boot clock.
    #[test]
    fn next_allowed_at_is_stable_while_the_clocks_agree() {
        let mut l = Ledger::default();
        l.record_start(A, &booted(t(0), BOOT, 100));
        for (wall_ms, boot_ms) in [
            (10_000, 10_000),
            (10_300, 10_000),
            (20_000, 20_700),
            (3_000_000, 2_996_000),
        ] {
            let now = Now {
                wall: t(0) + Duration::from_millis(wall_ms),
                boot: Some(BootClock {
                    boot_id: BOOT.to_owned(),
                    since_boot: Duration::from_secs(100) + Duration::from_millis(boot_ms),
                }),
            };
            assert_eq!(
                l.check(A, &cfg(3600, 3), &now),
                Err(t(3600)),
                "{wall_ms} {boot_ms}"
            );
        }
        // Held 2 s more by the boot clock while the wall clock, 3 s ahead, says the hour is
        // over: held, and the time shown is not in the past.
        let now = booted(t(3601), BOOT, 100 + 3598);
        assert_eq!(l.check(A, &cfg(3600, 3), &now), Err(t(3601)));
    }
}
