//! The action runner and its state directory (issue 13): a reload that moves
//! `state_directory` while an action runs records the action's end on its own entry in the new
//! ledger, keeps the new directory's runs and loses none; a state directory that cannot be
//! written stops every action (no action without a ledger record), says so once, and holds
//! nothing back once it can be written again.

use super::*;
use crate::action::Running;
use crate::config::Config;
use crate::testing::tempdir;

/// Answers every action with a success.
struct Succeeds;

impl Executor for Succeeds {
    fn execute(&self, _kind: ActionKind, _ctx: ActionContext) -> Running {
        Box::pin(async { ActionReport::ok("removed 1 dead container") })
    }
}

fn ctx() -> ActionContext {
    ActionContext::of(&Config::default())
}

#[tokio::test]
async fn moving_the_state_directory_mid_action_loses_and_overwrites_nothing() {
    let root = tempdir("move");
    let (a, b) = (root.join("a"), root.join("b"));
    // b already holds a run of its own, with the id the running action gets in a.
    let mut theirs = Ledger::default();
    let their_id =
        theirs.record_start(ActionKind::RestartKubelet, &crate::clock::boot::Now::read());
    theirs.record_end(their_id, RunOutcome::Failed, "b's own run");
    LedgerFile::new(&b).save(&theirs).unwrap();

    let mut r = ActionRunner::open(&a, Arc::new(Succeeds));
    r.start(
        ActionKind::PurgeDeadContainers,
        vec![FindingId::DeadContainers],
        "",
        ctx(),
    )
    .unwrap();
    assert_eq!(r.in_flight.as_ref().map(|f| f.id), Some(their_id));
    r.move_to(&b);
    let report = r.next_report().await;
    r.finish(report, Duration::ZERO);

    let in_b = LedgerFile::new(&b).load(&crate::clock::boot::Now::read());
    assert!(in_b.problem.is_none());
    let outcomes: Vec<(ActionKind, RunOutcome, &str)> = in_b
        .ledger
        .entries()
        .iter()
        .map(|e| (e.action, e.outcome, e.detail.as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [
            (
                ActionKind::RestartKubelet,
                RunOutcome::Failed,
                "b's own run"
            ),
            (
                ActionKind::PurgeDeadContainers,
                RunOutcome::Succeeded,
                "removed 1 dead container"
            ),
        ]
    );
    // The budget spent before the move is still spent.
    let purge = &Config::default().actions.purge_dead_containers;
    assert!(
        in_b.ledger
            .check(
                ActionKind::PurgeDeadContainers,
                purge,
                &crate::clock::boot::Now::read()
            )
            .is_err()
    );
    // The settle verdict lands on the same entry.
    r.check_settled(|_| false);
    let in_b = LedgerFile::new(&b)
        .load(&crate::clock::boot::Now::read())
        .ledger;
    let purge_entry = in_b
        .entries()
        .iter()
        .find(|e| e.action == ActionKind::PurgeDeadContainers);
    assert_eq!(
        purge_entry.and_then(|e| e.symptom),
        Some(Symptom::Cleared),
        "{purge_entry:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn no_action_without_a_ledger_record_and_recovery_when_writable() {
    let root = tempdir("unwritable");
    // A regular file where the state directory's parent should be: every save fails.
    let blocker = root.join("state");
    std::fs::write(&blocker, "not a directory").unwrap();
    let state = blocker.join("pleg-guard");
    let mut r = ActionRunner::open(&state, Arc::new(Succeeds));
    for _ in 0..3 {
        let e = r.start(
            ActionKind::PurgeDeadContainers,
            vec![FindingId::DeadContainers],
            "",
            ctx(),
        );
        assert!(matches!(e, Err(StartError::Ledger(_))), "{e:?}");
        assert!(!r.busy(), "acted without a ledger record");
    }
    // Said once (a note), and the run that never happened is not in the ledger (only the
    // fail-safe placeholders of the unreadable ledger are).
    assert_eq!(r.notes.len(), 1);
    assert!(
        r.notes
            .get(&ActionKind::PurgeDeadContainers)
            .is_some_and(|m| m.contains("the ledger could not be saved"))
    );
    assert!(
        r.ledger
            .entries()
            .iter()
            .all(|e| e.outcome == RunOutcome::Unknown),
        "{:?}",
        r.ledger.entries()
    );
    // Space returns: the next try acts, its record on disk first.
    std::fs::remove_file(&blocker).unwrap();
    r.start(
        ActionKind::PurgeDeadContainers,
        vec![FindingId::DeadContainers],
        "",
        ctx(),
    )
    .unwrap();
    assert!(r.running());
    let on_disk = LedgerFile::new(&state)
        .load(&crate::clock::boot::Now::read())
        .ledger;
    let started = on_disk
        .entries()
        .iter()
        .filter(|e| e.outcome == RunOutcome::Started)
        .count();
    assert_eq!(started, 1, "{:?}", on_disk.entries());
    let _ = std::fs::remove_dir_all(&root);
}
