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
mod tests;
