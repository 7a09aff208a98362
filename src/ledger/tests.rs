//! The ledger's unit tests.

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
    let ids: Vec<(ActionKind, SystemTime)> = l.entries().iter().map(|e| (e.action, e.at)).collect();
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
