//! Rate limits across wall-clock jumps, in the bed (issue 23): the daemon's wall clock is moved
//! a day forward, then a day back, while it holds a spent `restart-kubelet` budget, and no
//! budget is freed by either jump.
//!
//! Only the daemon's clock moves: the beds share the host's kernel clock with every other test
//! (etcd leases, certificates, the journal), so Debian's libfaketime is preloaded into the
//! pleg-guard unit (a drop-in) and reads its offset from a file the test rewrites while the
//! daemon runs. `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves `CLOCK_MONOTONIC` and `CLOCK_BOOTTIME`
//! alone (checked by hand with libfaketime 0.9.10: without it both jump with the wall clock),
//! which is what an NTP step or `date -s` does to a real node. The library is copied into the
//! bed's volatile overlay (the host and the bookworm bed share glibc 2.36), so neither the
//! host's file nor the cached root filesystem can be changed by the bed.
//!
//! The fault is the stand-in kubelet's `/healthz` answering 404 (a `kubelet-pleg-unhealthy`
//! finding that needs no clock), not its PLEG log lines: the bed's journald stamps lines with
//! the real clock, which a daemon a day ahead would read as a day old.

mod support;

use std::time::{Duration, SystemTime};

use support::*;

/// Where Debian's package puts the library on the host (x86-64).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// Where it is copied to in the bed.
const LIBFAKETIME_IN_BED: &str = "/usr/local/lib/pleg-guard-test/libfaketime.so.1";
/// The offset libfaketime applies to the daemon's wall clock (`+0`, `+1d`, `-1d`).
const OFFSET_FILE: &str = "/run/pleg-guard-test-faketime";

const DAY: u64 = 86_400;

/// The scenario's fast rounds ([`FAST_ROUNDS`]) with one kubelet restart a day, 2 s apart:
/// after the first restart only `max_per_day` holds the action back.
const CHANGES: &str = r#"
[actions.restart_kubelet]
min_interval = "2s"
max_per_day = 1
settle = "3s"
"#;

/// libfaketime on the host, or None (SKIPPED off CI; a failure under CI=true, where
/// tests/run-all.sh installs it).
fn require_libfaketime() -> Option<Vec<u8>> {
    match std::fs::read(LIBFAKETIME) {
        Ok(bytes) => Some(bytes),
        Err(e) if under_ci() => {
            panic!("{LIBFAKETIME} is required under CI=true (apt-get install libfaketime): {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: {LIBFAKETIME}: {e} (apt-get install libfaketime)");
            None
        }
    }
}

/// Move the daemon's wall clock to `offset` from the real one (atomically: libfaketime reads
/// the file at every clock read and must never see it half written).
fn set_offset(bed: &Bed, offset: &str) {
    bed.sh_ok(&format!(
        "printf '%s\\n' '{offset}' > {OFFSET_FILE}.tmp && mv {OFFSET_FILE}.tmp {OFFSET_FILE}"
    ));
}

fn wall(v: &serde_json::Value) -> Option<SystemTime> {
    humantime::parse_rfc3339(v.as_str()?).ok()
}

/// The daemon's wall clock minus the real one, in seconds, from status.json's `updated_at` (written
/// every round).
fn daemon_offset(bed: &Bed) -> Option<i64> {
    let at = wall(&bed.status_json()["updated_at"])?;
    let now = SystemTime::now();
    Some(match at.duration_since(now) {
        Ok(ahead) => i64::try_from(ahead.as_secs()).ok()?,
        Err(behind) => -i64::try_from(behind.duration().as_secs()).ok()?,
    })
}

/// Wait until status.json says the daemon's clock is `want` seconds off the real one (± 30 s).
fn wait_offset(bed: &Bed, want: i64) {
    wait_until(
        &format!("the daemon's wall clock {want:+} s off the real one"),
        secs(20),
        || daemon_offset(bed).is_some_and(|o| (o - want).abs() <= 30),
    );
}

fn started(bed: &Bed) -> usize {
    bed.pleg_guard_events(
        "action-started",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
    )
    .len()
}

fn suppressed(bed: &Bed) -> Vec<String> {
    bed.pleg_guard_events(
        "action-suppressed",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
    )
    .iter()
    .map(|e| field(e, "MESSAGE").unwrap_or_default().to_owned())
    .collect()
}

/// The kubelet budget in status.json: (remaining, next_allowed_at − updated_at in seconds).
fn budget(bed: &Bed) -> (u64, Option<u64>) {
    let s = bed.status_json();
    let b = &s["budget"]["restart-kubelet"];
    let wait = match (wall(&b["next_allowed_at"]), wall(&s["updated_at"])) {
        (Some(next), Some(at)) => next.duration_since(at).ok().map(|d| d.as_secs()),
        _ => None,
    };
    (b["remaining"].as_u64().unwrap_or(u64::MAX), wait)
}

#[test]
fn a_spent_budget_holds_across_wall_clock_jumps_both_ways() {
    let Some(env) = require_bed() else { return };
    let Some(lib) = require_libfaketime() else {
        return;
    };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    // (phase, runs left, next_allowed_at − updated_at in s), printed at the end.
    let mut measured: Vec<(&str, u64, Option<u64>)> = Vec::new();
    bed.write_file(LIBFAKETIME_IN_BED, lib);
    bed.sh_ok(&format!("chmod 0644 {LIBFAKETIME_IN_BED}"));
    set_offset(&bed, "+0");
    bed.install_pleg_guard(&fast_config(CHANGES));
    bed.write_file(
        "/etc/systemd/system/pleg-guard.service.d/90-faketime.conf",
        format!(
            "[Service]\nEnvironment=LD_PRELOAD={LIBFAKETIME_IN_BED} \
             FAKETIME_TIMESTAMP_FILE={OFFSET_FILE} FAKETIME_NO_CACHE=1 \
             FAKETIME_DONT_FAKE_MONOTONIC=1\n"
        ),
    );
    bed.sh_ok("systemctl daemon-reload");
    bed.start_pleg_guard();
    // Under the unit's hardening the library is loaded and the daemon reads the file.
    let maps = bed.sh_ok(
        "cat /proc/$(systemctl show -p MainPID --value pleg-guard)/maps | grep -c libfaketime || true",
    );
    assert_ne!(maps, "0", "libfaketime is not mapped into pleg-guard");
    wait_offset(&bed, 0);

    // One restart spends the day's budget.
    bed.kubelet_healthz_down();
    bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(30),
    );
    bed.wait_event(
        "symptom-cleared",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(20),
    );
    // The same fault again: held back by max_per_day (min_interval is long over).
    std::thread::sleep(secs(3));
    bed.kubelet_healthz_down();
    let held = bed.wait_event(
        "action-suppressed",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(30),
    );
    eprintln!("before the jump: {}", field(&held, "MESSAGE").unwrap_or(""));
    let (left, wait) = budget(&bed);
    measured.push(("before the jump", left, wait));
    assert_eq!(left, 0);
    let wait = wait.expect("next_allowed_at while the budget is spent");
    assert!(
        (DAY - 120..=DAY).contains(&wait),
        "next run in {wait} s, not a day after the restart"
    );

    // The wall clock jumps a day forward: nothing is freed.
    set_offset(&bed, "+1d");
    wait_offset(&bed, DAY as i64);
    let jumped_at = std::time::Instant::now();
    // A new suppression note, with the jumped clock's next_allowed_at (the message changed),
    // and no second start (which is what a ledger on the wall clock alone did here).
    wait_until(
        "a suppression, or a start, logged after the jump",
        secs(15),
        || suppressed(&bed).len() >= 2 || started(&bed) > 1,
    );
    assert_eq!(
        started(&bed),
        1,
        "a wall clock a day ahead freed the budget ({:.1} s after the jump)",
        jumped_at.elapsed().as_secs_f64()
    );
    std::thread::sleep(secs(8)); // 8 more rounds
    let notes = suppressed(&bed);
    eprintln!(
        "after +1d ({:.1} s): {notes:#?}",
        jumped_at.elapsed().as_secs_f64()
    );
    assert_eq!(
        started(&bed),
        1,
        "a wall clock a day ahead freed the budget"
    );
    let (left, wait) = budget(&bed);
    measured.push(("after +1d", left, wait));
    assert_eq!(left, 0, "{:#}", bed.status_json());
    let wait = wait.expect("next_allowed_at after the jump");
    assert!(
        (DAY - 180..DAY).contains(&wait),
        "next_allowed_at is {wait} s after the (jumped) now; the real wait is a day minus the time since the restart"
    );
    let next_fwd = wall(&bed.status_json()["budget"]["restart-kubelet"]["next_allowed_at"]);

    // A day back (to the real clock minus a day): still nothing, and no panic.
    set_offset(&bed, "-1d");
    wait_offset(&bed, -(DAY as i64));
    wait_until(
        "a suppression, or a start, logged after the jump back",
        secs(15),
        || suppressed(&bed).len() >= 3 || started(&bed) > 1,
    );
    std::thread::sleep(secs(8));
    eprintln!("after -1d: {:#?}", suppressed(&bed));
    assert_eq!(started(&bed), 1, "an action ran after the clock went back");
    let (left, wait) = budget(&bed);
    measured.push(("after -1d", left, wait));
    assert_eq!(left, 0, "{:#}", bed.status_json());
    let wait = wait.expect("next_allowed_at after the jump back");
    assert!((DAY - 240..DAY).contains(&wait), "{wait} s");
    let next_back = wall(&bed.status_json()["budget"]["restart-kubelet"]["next_allowed_at"]);
    // The shown time moved with the clock: two days apart (± a minute of rounds).
    if let (Some(f), Some(b)) = (next_fwd, next_back) {
        let moved = f.duration_since(b).unwrap_or(Duration::ZERO).as_secs();
        assert!(
            (2 * DAY - 60..=2 * DAY + 60).contains(&moved),
            "next_allowed_at moved {moved} s"
        );
    }
    eprintln!(
        "MEASURED: restart-kubelet starts {}, suppression notes {}; budget (phase, left, next_allowed_at - updated_at s): {measured:?}",
        started(&bed),
        suppressed(&bed).len()
    );
    assert_eq!(
        suppressed(&bed).len(),
        3,
        "one suppression note per clock, not one every round"
    );
    assert_eq!(bed.unit_property("pleg-guard", "NRestarts"), "0");
    assert_eq!(bed.unit_property("pleg-guard", "ActiveState"), "active");
    assert_eq!(
        bed.pleg_guard_events("action-started", &[]).len(),
        1,
        "nothing else was done"
    );
}
