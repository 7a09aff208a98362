//! The action runner: the life of an action from the ladder's `Act` to its settle check.
//!
//! It owns the ledger and keeps its one rule: **ledger before act** — an action is recorded
//! as started and the ledger saved durably before the action is spawned, so a crash, a
//! `kill -9` or a reboot never resets a budget; without a durable record nothing runs. One
//! action runs at a time, as a task, through an [`Executor`] (the real one, or a fake in the
//! tests below). Its end is recorded, then the settle time runs, then the runner tells
//! whether the symptom cleared or persisted. Every step is one journal event.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::action::{ActionContext, ActionReport, Executor};
use crate::assessment::Activity;
use crate::clock::boot::Now;
use crate::config::ActionsConfig;
use crate::diagnosis::FindingId;
use crate::ledger::{self, Ledger, LedgerFile, RunOutcome, Symptom};
use crate::report::event::EventKind;
use crate::report::journal::{Event, emit};
use crate::report::status_file::{ActionRecord, BudgetStatus};
use crate::target::ActionKind;

/// An action running as a task.
struct InFlight {
    id: u64,
    action: ActionKind,
    aimed_at: Vec<FindingId>,
    handle: JoinHandle<ActionReport>,
}

/// An action that ended well, waiting for its settle time.
struct Settling {
    id: u64,
    action: ActionKind,
    aimed_at: Vec<FindingId>,
    until: Instant,
}

/// How a finished action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Which action.
    pub action: ActionKind,
    /// Whether it did what it was asked.
    pub succeeded: bool,
}

/// What a settle check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Which action settled.
    pub action: ActionKind,
    /// Whether every finding it aimed at cleared.
    pub cured: bool,
}

/// Why an action was not started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another action is running or settling.
    #[error("another action is running or settling")]
    Busy,
    /// The ledger could not be saved: acting without a durable record could lose a budget.
    #[error("the ledger could not be saved: {0}")]
    Ledger(#[from] ledger::LedgerError),
}

/// The ledger, the running action, the settling one, and the notes logged once per episode.
pub struct ActionRunner {
    ledger: Ledger,
    ledger_file: LedgerFile,
    executor: Arc<dyn Executor>,
    in_flight: Option<InFlight>,
    settling: Option<Settling>,
    /// The last suppressed/skipped note logged per action, so each is logged once.
    notes: HashMap<ActionKind, String>,
}

impl ActionRunner {
    /// Open the ledger in `state_directory` (logging a problem with it).
    pub fn open(state_directory: &Path, executor: Arc<dyn Executor>) -> Self {
        let ledger_file = LedgerFile::new(state_directory);
        ActionRunner {
            ledger: load_logged(&ledger_file),
            ledger_file,
            executor,
            in_flight: None,
            settling: None,
            notes: HashMap::new(),
        }
    }

    /// Use the ledger in another state directory (a reload changed `state_directory`). The
    /// runs recorded so far come along, merged with what that directory holds (see
    /// [`Ledger::absorb`]), and an action running or settling keeps its own entry, so its end
    /// is neither lost nor written over another run's, and no spent budget is forgotten.
    pub fn move_to(&mut self, state_directory: &Path) {
        let file = LedgerFile::new(state_directory);
        let mut ledger = load_logged(&file);
        let ids = ledger.absorb(&self.ledger);
        let remap = |id: u64| ids.iter().find(|(o, _)| *o == id).map_or(id, |(_, n)| *n);
        if let Some(f) = &mut self.in_flight {
            f.id = remap(f.id);
        }
        if let Some(s) = &mut self.settling {
            s.id = remap(s.id);
        }
        self.ledger = ledger;
        self.ledger_file = file;
        self.save();
    }

    /// The ledger, for the ladder.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// An action is running or settling.
    pub fn busy(&self) -> bool {
        self.in_flight.is_some() || self.settling.is_some()
    }

    /// An action is running.
    pub fn running(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The running action, if any.
    pub fn running_action(&self) -> Option<ActionKind> {
        self.in_flight.as_ref().map(|f| f.action)
    }

    /// What the runner is doing, for the status line.
    pub fn activity(&self) -> Option<Activity> {
        if let Some(f) = &self.in_flight {
            Some(Activity::Running(f.action))
        } else {
            self.settling.as_ref().map(|s| Activity::Settling {
                action: s.action,
                left: s.until.saturating_duration_since(Instant::now()),
            })
        }
    }

    /// Record and start an action as a task. `why` is appended to the journal entry (e.g. the
    /// numbers behind a planned reexec).
    pub fn start(
        &mut self,
        action: ActionKind,
        aimed_at: Vec<FindingId>,
        why: &str,
        ctx: ActionContext,
    ) -> Result<(), StartError> {
        if self.busy() {
            return Err(StartError::Busy);
        }
        let id = self.ledger.record_start(action, &Now::read());
        if let Err(e) = self.ledger_file.save(&self.ledger) {
            // The run did not happen: it must not hold the action back once the state
            // directory is writable again. The failure is logged once per cause and episode,
            // not every round.
            self.ledger.forget(id);
            let message = format!("{action} not started: the ledger could not be saved: {e}");
            self.note(EventKind::ActionFailed, action, &aimed_at, message);
            return Err(StartError::Ledger(e));
        }
        let message = format!("{action} started for {}{why}", join(&aimed_at));
        emit(&Event {
            kind: EventKind::ActionStarted,
            target: None,
            action: Some(action),
            finding: aimed_at.first().copied(),
            message: &message,
        });
        self.notes.remove(&action);
        let handle = tokio::spawn(self.executor.execute(action, ctx));
        self.in_flight = Some(InFlight {
            id,
            action,
            aimed_at,
            handle,
        });
        Ok(())
    }

    /// The running action's report, when it ends; never resolves while none runs (for a
    /// `select!` arm).
    pub async fn next_report(&mut self) -> ActionReport {
        match self.in_flight.as_mut() {
            Some(f) => (&mut f.handle).await.unwrap_or_else(|e| {
                ActionReport::failed(format!("action task ended abnormally: {e}"))
            }),
            None => std::future::pending().await,
        }
    }

    /// Record the end of the running action; a success starts its settle time.
    pub fn finish(&mut self, report: ActionReport, settle: Duration) -> Option<Finished> {
        let f = self.in_flight.take()?;
        let outcome = if report.succeeded {
            RunOutcome::Succeeded
        } else {
            RunOutcome::Failed
        };
        self.ledger.record_end(f.id, outcome, &report.detail);
        self.save();
        let (kind, word) = if report.succeeded {
            (EventKind::ActionSucceeded, "succeeded")
        } else {
            (EventKind::ActionFailed, "failed")
        };
        let message = format!("{} {word}: {}", f.action, report.detail);
        emit(&Event {
            kind,
            target: None,
            action: Some(f.action),
            finding: f.aimed_at.first().copied(),
            message: &message,
        });
        if report.succeeded {
            self.settling = Some(Settling {
                id: f.id,
                action: f.action,
                aimed_at: f.aimed_at,
                until: crate::clock::deadline_in(settle),
            });
        }
        Some(Finished {
            action: f.action,
            succeeded: report.succeeded,
        })
    }

    /// After the settle time, tell whether the action's symptom cleared (`stands` says which
    /// findings still stand); None while none settles or its time has not come.
    pub fn check_settled(&mut self, stands: impl Fn(FindingId) -> bool) -> Option<Settled> {
        let s = self.settling.as_ref()?;
        if Instant::now() < s.until {
            return None;
        }
        let still: Vec<FindingId> = s
            .aimed_at
            .iter()
            .copied()
            .filter(|id| stands(*id))
            .collect();
        let (kind, symptom, message) = if still.is_empty() {
            (
                EventKind::SymptomCleared,
                Symptom::Cleared,
                format!("{} cleared {}", s.action, join(&s.aimed_at)),
            )
        } else {
            (
                EventKind::SymptomPersisted,
                Symptom::Persisted,
                format!(
                    "{} did not clear {}; the next tier may follow",
                    s.action,
                    join(&still)
                ),
            )
        };
        emit(&Event {
            kind,
            target: None,
            action: Some(s.action),
            finding: s.aimed_at.first().copied(),
            message: &message,
        });
        self.ledger.record_symptom(s.id, symptom);
        let settled = Settled {
            action: s.action,
            cured: still.is_empty(),
        };
        self.settling = None;
        self.save();
        Some(settled)
    }

    /// Log a suppressed/skipped note once per episode.
    pub fn note(
        &mut self,
        kind: EventKind,
        action: ActionKind,
        aimed_at: &[FindingId],
        message: String,
    ) {
        if self.notes.get(&action) == Some(&message) {
            return;
        }
        if let Some(outcome) = kind.counts_as() {
            self.ledger.count(action, outcome); // pleg_guard_actions_total
            self.save();
        }
        emit(&Event {
            kind,
            target: None,
            action: Some(action),
            finding: aimed_at.first().copied(),
            message: &message,
        });
        self.notes.insert(action, message);
    }

    /// Forget the notes of actions none of whose findings stand, so a new episode logs again.
    pub fn forget_notes(&mut self, findings: &[FindingId]) {
        self.notes.retain(|a, _| {
            crate::ladder::aims(*a)
                .iter()
                .any(|id| findings.contains(id))
        });
    }

    /// The latest `n` runs, newest last, for status.json.
    pub fn recent(&self, n: usize) -> Vec<ActionRecord> {
        let entries = self.ledger.entries();
        entries[entries.len().saturating_sub(n)..]
            .iter()
            .map(|e| ActionRecord {
                action: e.action.name().to_owned(),
                at: e.at,
                outcome: serde_json::to_value(e.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                symptom: e.symptom.map(|s| match s {
                    Symptom::Cleared => "cleared".to_owned(),
                    Symptom::Persisted => "persisted".to_owned(),
                }),
                detail: e.detail.clone(),
            })
            .collect()
    }

    /// Each action's remaining budget, by name.
    pub fn budgets(&self, actions: &ActionsConfig, now: &Now) -> BTreeMap<String, BudgetStatus> {
        ActionKind::ALL
            .iter()
            .map(|a| {
                let cfg = actions.of(*a);
                (
                    a.name().to_owned(),
                    BudgetStatus {
                        enabled: cfg.enabled,
                        budget: self.ledger.budget(*a, cfg, now),
                    },
                )
            })
            .collect()
    }

    fn save(&mut self) {
        self.ledger
            .prune(&Now::read(), ledger::DAY + Duration::from_secs(24 * 3600));
        if let Err(e) = self.ledger_file.save(&self.ledger) {
            tracing::error!("action ledger: {e}");
        }
    }
}

/// The ledger in `file`, logging a problem with it (a corrupt file is kept aside by
/// [`LedgerFile::load`], which then holds every action back for one `min_interval`).
fn load_logged(file: &LedgerFile) -> Ledger {
    let loaded = file.load(&Now::read());
    if let Some(problem) = &loaded.problem {
        tracing::error!("action ledger: {problem}");
    }
    loaded.ledger
}

/// `a, b`: finding ids for messages.
pub fn join(ids: &[FindingId]) -> String {
    ids.iter().map(|i| i.name()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Mutex;

    use super::*;
    use crate::action::Running;
    use crate::config::Config;
    use crate::testing::tempdir;

    /// Records what it was asked, checks the ledger on disk already holds the start, and
    /// answers with a canned report.
    struct FakeExecutor {
        ledger_dir: PathBuf,
        report: ActionReport,
        calls: Mutex<Vec<(ActionKind, usize)>>,
    }

    impl Executor for FakeExecutor {
        fn execute(&self, kind: ActionKind, _ctx: ActionContext) -> Running {
            let on_disk = LedgerFile::new(&self.ledger_dir)
                .load(&Now::read())
                .ledger
                .entries()
                .len();
            if let Ok(mut c) = self.calls.lock() {
                c.push((kind, on_disk));
            }
            let report = self.report.clone();
            Box::pin(async move { report })
        }
    }

    fn runner(tag: &str, report: ActionReport) -> (ActionRunner, Arc<FakeExecutor>, PathBuf) {
        let d = tempdir(tag);
        let fake = Arc::new(FakeExecutor {
            ledger_dir: d.clone(),
            report,
            calls: Mutex::new(Vec::new()),
        });
        (ActionRunner::open(&d, fake.clone()), fake, d)
    }

    fn ctx() -> ActionContext {
        ActionContext::of(&Config::default())
    }

    #[tokio::test]
    async fn the_ledger_is_on_disk_before_the_action_runs_and_settles_to_cleared() {
        let (mut r, fake, d) = runner("ok", ActionReport::ok("done"));
        r.start(
            ActionKind::DaemonReexec,
            vec![FindingId::SystemdBusWedge],
            "",
            ctx(),
        )
        .unwrap();
        assert!(r.busy() && r.running());
        assert!(matches!(
            r.activity(),
            Some(Activity::Running(ActionKind::DaemonReexec))
        ));
        let report = r.next_report().await;
        assert_eq!(
            fake.calls.lock().unwrap().as_slice(),
            &[(ActionKind::DaemonReexec, 1)],
            "the start was saved before the executor was called"
        );
        let f = r.finish(report, Duration::ZERO).unwrap();
        assert!(f.succeeded);
        assert!(r.busy() && !r.running(), "settling");
        assert!(matches!(
            r.start(ActionKind::RestartKubelet, vec![], "", ctx()),
            Err(StartError::Busy)
        ));
        assert_eq!(
            r.check_settled(|_| false),
            Some(Settled {
                action: ActionKind::DaemonReexec,
                cured: true
            })
        );
        assert_eq!(r.check_settled(|_| false), None, "settled once");
        assert!(!r.busy());
        let recent = r.recent(10);
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].outcome, "succeeded");
        assert_eq!(recent[0].symptom.as_deref(), Some("cleared"));
        let reread = LedgerFile::new(&d).load(&Now::read()).ledger;
        assert_eq!(reread.entries()[0].symptom, Some(Symptom::Cleared));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_failed_action_is_recorded_and_does_not_settle() {
        let (mut r, _fake, d) = runner("fail", ActionReport::failed("no answer"));
        r.start(
            ActionKind::PurgeDeadContainers,
            vec![FindingId::DeadContainers],
            "",
            ctx(),
        )
        .unwrap();
        let report = r.next_report().await;
        let f = r.finish(report, Duration::from_secs(3600)).unwrap();
        assert!(!f.succeeded);
        assert!(!r.busy(), "nothing to settle after a failure");
        assert_eq!(r.recent(10)[0].outcome, "failed");
        let budgets = r.budgets(&Config::default().actions, &Now::read());
        assert_eq!(budgets["purge-dead-containers"].budget.remaining, 23);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_persisting_symptom_is_recorded() {
        let (mut r, _fake, d) = runner("persist", ActionReport::ok("done"));
        r.start(
            ActionKind::DaemonReexec,
            vec![FindingId::LogindUnresponsive],
            "",
            ctx(),
        )
        .unwrap();
        let report = r.next_report().await;
        r.finish(report, Duration::ZERO);
        let settled = r.check_settled(|id| id == FindingId::LogindUnresponsive);
        assert_eq!(
            settled.map(|s| s.cured),
            Some(false),
            "what keeps the fleet slot"
        );
        assert_eq!(r.recent(1)[0].symptom.as_deref(), Some("persisted"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn no_durable_record_no_action() {
        // a state directory that cannot be created: a file stands where it should be
        let d = tempdir("nodisk").join("state");
        std::fs::write(&d, b"not a directory").unwrap();
        let fake = Arc::new(FakeExecutor {
            ledger_dir: d.clone(),
            report: ActionReport::ok("done"),
            calls: Mutex::new(Vec::new()),
        });
        let mut r = ActionRunner::open(&d, fake.clone());
        let e = r
            .start(
                ActionKind::DaemonReexec,
                vec![FindingId::SystemdBusWedge],
                "",
                ctx(),
            )
            .unwrap_err();
        assert!(matches!(e, StartError::Ledger(_)), "{e}");
        assert!(
            fake.calls.lock().unwrap().is_empty(),
            "the executor was never called"
        );
        assert!(!r.busy());
        let _ = std::fs::remove_file(&d);
    }

    #[tokio::test]
    async fn notes_are_logged_once_per_episode() {
        let (mut r, _fake, d) = runner("notes", ActionReport::ok("done"));
        let msg = || "daemon-reexec not run: observe mode".to_owned();
        r.note(
            EventKind::ActionSkipped,
            ActionKind::DaemonReexec,
            &[],
            msg(),
        );
        assert_eq!(r.notes.len(), 1);
        r.forget_notes(&[FindingId::SystemdBusWedge]);
        assert_eq!(r.notes.len(), 1, "its finding still stands");
        r.forget_notes(&[]);
        assert!(r.notes.is_empty(), "episode over");
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[cfg(test)]
#[path = "runner_state_tests.rs"]
mod state_tests;
