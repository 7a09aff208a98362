//! The daemon and its state directory (issue 13): a reload that moves `state_directory` while
//! an action runs records the action's end on its own entry in the new ledger, keeps the new
//! directory's runs and loses none; a state directory that cannot be written stops every
//! action (no action without a ledger record) and holds nothing back once it can again.

use std::time::Duration;

use super::*;
use crate::action::ActionReport;

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pleg-guard-reload-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_default();
    d
}

fn config_text(state: &std::path::Path, runtime: &std::path::Path) -> String {
    format!(
        "state_directory = \"{}\"\nruntime_directory = \"{}\"\n",
        state.display(),
        runtime.display()
    )
}

#[tokio::test]
async fn moving_the_state_directory_mid_action_loses_and_overwrites_nothing() {
    let root = tempdir("move");
    let (a, b, run) = (root.join("a"), root.join("b"), root.join("run"));
    let config_path = root.join("config.toml");
    std::fs::write(&config_path, config_text(&a, &run)).unwrap();
    let config = config::load(Some(&config_path)).unwrap().config;

    // b already holds a run of its own (id 1, as the running action's will be in a).
    let mut theirs = Ledger::default();
    let their_id = theirs.record_start(ActionKind::RestartKubelet, SystemTime::now());
    theirs.record_end(their_id, RunOutcome::Failed, "b's own run");
    LedgerFile::new(&b).save(&theirs).unwrap();

    let mut daemon = Daemon::new(config, Some(config_path.clone()), false);
    daemon.start(
        ActionKind::PurgeDeadContainers,
        vec![FindingId::DeadContainers],
    );
    let Some(f) = daemon.in_flight.as_mut() else {
        panic!("the action did not start");
    };
    // The real action talks to docker; this one's end is the report below.
    f.handle.abort();
    assert_eq!(f.id, 1);

    std::fs::write(&config_path, config_text(&b, &run)).unwrap();
    daemon.reload();
    daemon
        .action_done(ActionReport {
            succeeded: true,
            detail: "removed 1 dead container".into(),
        })
        .await;

    let in_b = LedgerFile::new(&b).load(SystemTime::now());
    assert!(in_b.problem.is_none());
    let entries = in_b.ledger.entries();
    let outcomes: Vec<(ActionKind, RunOutcome, &str)> = entries
        .iter()
        .map(|e| (e.action, e.outcome, e.detail.as_str()))
        .collect();
    assert!(
        outcomes.contains(&(
            ActionKind::PurgeDeadContainers,
            RunOutcome::Succeeded,
            "removed 1 dead container"
        )),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&(
            ActionKind::RestartKubelet,
            RunOutcome::Failed,
            "b's own run"
        )),
        "{outcomes:?}"
    );
    assert_eq!(entries.len(), 2, "{outcomes:?}");
    // The budget spent in a is still spent in b.
    let purge = &daemon.config.actions.purge_dead_containers;
    assert!(
        in_b.ledger
            .check(ActionKind::PurgeDeadContainers, purge, SystemTime::now())
            .is_err()
    );
    // The settle check records its verdict on the same entry.
    if let Some(s) = daemon.settling.as_mut() {
        s.until = Instant::now() - Duration::from_millis(1);
    }
    daemon.check_settled();
    let in_b = LedgerFile::new(&b).load(SystemTime::now());
    let purge_entry = in_b
        .ledger
        .entries()
        .iter()
        .find(|e| e.action == ActionKind::PurgeDeadContainers);
    assert!(
        purge_entry.is_some_and(|e| e.symptom.is_some()),
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
    let config = Config {
        state_directory: blocker.join("pleg-guard"),
        runtime_directory: root.join("run"),
        ..Config::default()
    };
    let mut daemon = Daemon::new(config, None, false);
    for _ in 0..3 {
        daemon.start(
            ActionKind::PurgeDeadContainers,
            vec![FindingId::DeadContainers],
        );
        assert!(daemon.in_flight.is_none(), "acted without a ledger record");
    }
    // (The unreadable ledger was replaced by the fail-safe one: placeholders only.)
    assert!(
        daemon
            .ledger
            .entries()
            .iter()
            .all(|e| e.outcome == RunOutcome::Unknown),
        "{:?}",
        daemon.ledger.entries()
    );
    assert!(
        daemon
            .notes
            .get(&ActionKind::PurgeDeadContainers)
            .is_some_and(|m| m.contains("the ledger could not be saved")),
        "{:?}",
        daemon.notes
    );
    // Space returns: the next try acts, and its record is on disk first.
    std::fs::remove_file(&blocker).unwrap();
    daemon.start(
        ActionKind::PurgeDeadContainers,
        vec![FindingId::DeadContainers],
    );
    let Some(f) = daemon.in_flight.as_mut() else {
        panic!("no action once the ledger could be written");
    };
    f.handle.abort();
    let on_disk = LedgerFile::new(&blocker.join("pleg-guard")).load(SystemTime::now());
    let started: Vec<_> = on_disk
        .ledger
        .entries()
        .iter()
        .filter(|e| e.outcome == RunOutcome::Started)
        .collect();
    assert_eq!(started.len(), 1, "{:?}", on_disk.ledger.entries());
    let _ = std::fs::remove_dir_all(&root);
}
