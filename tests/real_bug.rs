//! The real bug, not a stand-in: smoke tests proving that the affected bed's PID 1 really runs
//! out of D-Bus serials (systemd#11809) and that the normal bed's does not; then pleg-guard,
//! at its default settings (short intervals aside), against that real wedge.
//!
//! The affected bed boots PID 1 with the pre-v242 sd-bus (tests/bed/affected-libsystemd.sh);
//! the fast-forward (tests/support/pid1_serial.rs) sets PID 1's cookie close to 2^32 so that
//! months of unit churn take a moment. Everything else is the real mechanism, watched with the
//! real tools: busctl, systemctl over the private socket, systemd-run, PID 1's journal.
//!
//! Run: `cargo test --test real_bug -- --test-threads=2` (as root; under CI=true a missing bed
//! or affected library is a failure, elsewhere the tests print SKIPPED and pass).

mod support;

use serde_json::Value;
use std::time::{Duration, Instant};
use support::*;

const GET_UNIT: &str = "busctl --timeout=3 call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
                        org.freedesktop.systemd1.Manager GetUnit s init.scope";
/// `systemd-run` as a runtime with the systemd cgroup driver uses it (bus, not private socket);
/// SYSTEMD_BUS_TIMEOUT shortens sd-bus's 25 s default method timeout.
const SYSTEMD_RUN: &str = "SYSTEMD_BUS_TIMEOUT=4 systemd-run --wait --quiet --collect true";
const BUS_DISCONNECT: &str = "Got disconnect on API bus.";

/// Serials PID 1 replied with on one connection, ordinary calls one after another, until the
/// first call that gets no reply within `timeout` (or `max` replies).
fn replies_until_silence(bed: &Bed, max: usize, timeout: Duration) -> (Vec<u32>, bool) {
    let mut conn = bed.bus_conn();
    let mut serials = Vec::new();
    for _ in 0..max {
        match conn.get_unit_init_scope(timeout) {
            Ok(r) => serials.push(r.serial),
            Err(CallError::TimedOut(_)) => return (serials, true),
            Err(e) => panic!("GetUnit on PID 1 failed otherwise than by timing out: {e}"),
        }
    }
    (serials, false)
}

fn pid1_disconnects(bed: &Bed, cursor: &str) -> usize {
    bed.journal_after(cursor, &["_PID=1"])
        .iter()
        .filter(|e| field(e, "MESSAGE") == Some(BUS_DISCONNECT))
        .count()
}

#[test]
fn affected_pid1_runs_out_of_serials_and_reexec_cures_it() {
    let t0 = Instant::now();
    let Some(env) = require_affected_bed() else {
        return;
    };
    let bed = Bed::boot(&env, BedOptions::affected());
    assert!(bed.affected_systemd);
    assert_eq!(bed.boot_state, "running");
    eprintln!("MEASURE affected bed boot: {:?}", bed.boot_time);

    let obj = bed.pid1_bus_object();
    eprintln!(
        "MEASURE find PID 1's sd_bus: {:?} ({} candidate(s), {} KiB scanned, at {:#x}, {})",
        obj.found_in,
        obj.candidates,
        obj.scanned_bytes >> 10,
        obj.address,
        obj.unique_name
    );
    // K ordinary calls with the real tool raise the serial by exactly K (other traffic aside)
    let k = 5;
    wait_until_true(
        "5 busctl calls raise PID 1's serial by exactly 5",
        5,
        || {
            let before = bed.pid1_bus_serial();
            for _ in 0..k {
                bed.sh_ok(GET_UNIT);
            }
            bed.pid1_bus_serial() == before + k
        },
    );

    let cursor = bed.journal_cursor();
    bed.fast_forward_pid1_serial(0xFFFF_FFF0);
    let t_wedge = Instant::now();
    let (serials, silent) = replies_until_silence(&bed, 40, secs(3));
    eprintln!("after the fast-forward PID 1 replied with {serials:x?}, then silence={silent}");
    assert!(silent, "PID 1 kept answering past 2^32: {serials:x?}");
    assert!(
        !serials.is_empty() && serials.len() <= 15,
        "expected at most 15 replies (0xfffffff1..=0xffffffff): {serials:x?}"
    );
    assert_eq!(serials.last().copied(), Some(u32::MAX), "{serials:x?}");
    assert!(serials.windows(2).all(|w| w[0] < w[1]), "{serials:x?}");
    assert!(
        bed.pid1_bus_serial() > SERIAL_MAX,
        "cookie did not pass 2^32-1"
    );

    // an ordinary call with the real tool times out (the connection stays)
    let o = bed.sh(GET_UNIT);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("timed out"),
        "busctl GetUnit should time out on the wedged PID 1: {}",
        show(&o)
    );
    // the private socket answers (root's systemctl uses /run/systemd/private)
    assert_eq!(bed.sh_ok("systemctl is-system-running"), "running");
    assert!(
        bed.sh_ok("systemctl show -p Version --value")
            .starts_with("252")
    );
    // starting a unit over the bus fails: what runc and dockerd with the systemd cgroup driver hit
    let t_run = Instant::now();
    let o = bed.sh(SYSTEMD_RUN);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("timed out"),
        "systemd-run should fail with a timeout on the wedged PID 1: {}",
        show(&o)
    );
    eprintln!(
        "systemd-run failed after {:?}: {}",
        t_run.elapsed(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    // the load generator sees it too: its calls stay unanswered
    let load = bed.bus_load(20.0);
    std::thread::sleep(secs(2));
    assert!(load.unanswered_older_than(secs(1)) > 0 && load.replies() == 0);
    load.stop();
    // ordinary calls never knocked PID 1 off the bus
    assert_eq!(pid1_disconnects(&bed, &cursor), 0);
    // still wedged a while later (no self-healing)
    assert!(
        bed.try_pid1_call(secs(2)).is_err(),
        "PID 1 answered again by itself"
    );
    eprintln!("MEASURE wedge shown in {:?}", t_wedge.elapsed());

    // daemon-reexec over the private socket cures it: a new PID 1 image starts at serial ~0
    let t_reexec = Instant::now();
    bed.sh_ok("systemctl daemon-reexec");
    wait_until(
        "PID 1 answers on the bus after daemon-reexec",
        secs(20),
        || bed.try_pid1_call(secs(2)).is_ok(),
    );
    eprintln!("MEASURE reexec cure: {:?}", t_reexec.elapsed());
    let serial = bed.pid1_reply_serial();
    assert!(serial < 10_000, "serial after reexec: {serial}");
    bed.sh_ok(SYSTEMD_RUN);
    let obj2 = bed.pid1_bus_object();
    assert!(bed.pid1_bus_serial() < 10_000);
    eprintln!(
        "after reexec: reply serial {serial}, sd_bus found again in {:?}",
        obj2.found_in
    );
    assert_eq!(bed.reexec_count(), 1);
    eprintln!("MEASURE affected smoke test total: {:?}", t0.elapsed());
}

#[test]
fn properties_get_knocks_a_wedged_pid1_off_the_bus() {
    // The trap a watchdog must avoid (and the reason pleg-guard probes PID 1 with GetUnit): on a
    // wedged PID 1, Properties.Get fails inside PID 1's I/O callback and PID 1 drops its bus
    // connection. This also proves the "no disconnect" check of the other tests can fail.
    let Some(env) = require_affected_bed() else {
        return;
    };
    let bed = Bed::boot(&env, BedOptions::affected());
    bed.pid1_bus_object();
    let cursor = bed.journal_cursor();
    bed.fast_forward_pid1_serial(0xFFFF_FFFF);
    let (serials, silent) = replies_until_silence(&bed, 5, secs(3));
    assert!(silent && serials.is_empty(), "{serials:x?}");
    assert_eq!(pid1_disconnects(&bed, &cursor), 0);
    let _ = bed.sh(
        "busctl --timeout=3 get-property org.freedesktop.systemd1 /org/freedesktop/systemd1 \
         org.freedesktop.systemd1.Manager Version",
    );
    wait_until("PID 1 logs a disconnect from the API bus", secs(10), || {
        pid1_disconnects(&bed, &cursor) > 0
    });
    // back on the bus with a fresh connection (serial from 1) at a later unit state change
    bed.sh_ok("systemctl restart kubelet.service");
    let back = Instant::now();
    wait_until("PID 1 back on the bus", secs(30), || {
        bed.try_pid1_call(secs(2)).is_ok()
    });
    let serial = bed.pid1_reply_serial();
    eprintln!(
        "PID 1 back on the bus after {:?}, reply serial {serial}",
        back.elapsed()
    );
    assert!(serial < 10_000, "{serial}");
    assert_eq!(bed.reexec_count(), 0);
}

#[test]
fn normal_pid1_wraps_its_serial_harmlessly() {
    let t0 = Instant::now();
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::default());
    assert!(!bed.affected_systemd);
    // the boot-time proof of an affected bed tells the two apart
    if let Some(lib) = &env.affected_libsystemd {
        let e = verify_pid1_maps(bed.host_pid1(), lib).expect_err("normal bed passed as affected");
        eprintln!("normal bed is not affected: {e}");
    }
    let obj = bed.pid1_bus_object();
    eprintln!(
        "MEASURE find PID 1's sd_bus (normal bed): {:?} ({} candidate(s))",
        obj.found_in, obj.candidates
    );
    let cursor = bed.journal_cursor();
    bed.fast_forward_pid1_serial(0xFFFF_FFF0);
    let (serials, silent) = replies_until_silence(&bed, 30, secs(3));
    eprintln!("after the fast-forward PID 1 replied with {serials:x?}");
    assert!(!silent, "the fixed PID 1 stopped answering: {serials:x?}");
    // 252 (v242+): the cookie goes up to 0xffffffff, then continues at COOKIE_CYCLED = 2^31
    let wrap = serials
        .windows(2)
        .position(|w| w[1] < w[0])
        .unwrap_or_else(|| panic!("no wrap in {serials:x?}"));
    assert_eq!(serials[wrap], u32::MAX, "{serials:x?}");
    let after = u64::from(serials[wrap + 1]);
    assert!(
        (COOKIE_CYCLED..COOKIE_CYCLED + 100).contains(&after),
        "after 0xffffffff came {after:#x}, expected just above 2^31"
    );
    assert!(serials[wrap + 1..].windows(2).all(|w| w[0] < w[1]));
    let now = bed.pid1_bus_serial();
    assert!(
        (COOKIE_CYCLED..COOKIE_CYCLED + 1000).contains(&now),
        "{now:#x}"
    );
    bed.sh_ok(GET_UNIT);
    bed.sh_ok(SYSTEMD_RUN);
    assert_eq!(pid1_disconnects(&bed, &cursor), 0);
    assert_eq!(bed.reexec_count(), 0);
    eprintln!("MEASURE normal smoke test total: {:?}", t0.elapsed());
}

#[test]
fn serial_helpers_read_fast_forward_and_load() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::default());
    // reading agrees with what clients see
    let s = bed.pid1_reply_serial();
    let mem = bed.pid1_bus_serial();
    assert!(
        mem >= u64::from(s) && mem - u64::from(s) < 50,
        "{s} vs {mem}"
    );
    // fast-forward: the next reply carries to + 1
    bed.fast_forward_pid1_serial(3_000_000_000);
    let next = bed.pid1_reply_serial();
    assert!(
        (3_000_000_001..3_000_000_050).contains(&next),
        "reply serial after fast-forward: {next}"
    );
    // the load generator: a known rate of replies
    let before = bed.pid1_bus_serial();
    let load = bed.bus_load(200.0);
    std::thread::sleep(secs(3));
    let (sent, replies, ran) = (load.sent(), load.replies(), load.running_for());
    let last = load.last_serial();
    assert_eq!(load.unanswered_older_than(secs(1)), 0);
    assert!(load.max_latency() < secs(1), "{:?}", load.max_latency());
    load.stop();
    let rose = bed.pid1_bus_serial() - before;
    let expected = 200.0 * ran.as_secs_f64();
    eprintln!(
        "MEASURE load 200/s for {ran:?}: sent {sent}, replies {replies}, serial +{rose}, last reply {last}"
    );
    assert!(
        (sent as f64) > expected * 0.9 && (sent as f64) < expected * 1.1 + 5.0,
        "sent {sent}, expected ~{expected}"
    );
    assert!(replies + 5 >= sent, "replies {replies} of {sent}");
    assert!(
        rose >= replies && rose < replies + 100,
        "serial rose {rose} for {replies} replies"
    );
    assert!(u64::from(last) > before);

    // under steady load and after a reexec (new address space): found again, load resumes
    let load = bed.bus_load(200.0);
    std::thread::sleep(secs(1));
    bed.sh_ok("systemctl daemon-reexec");
    wait_until("PID 1 answers after the reexec", secs(20), || {
        bed.try_pid1_call(secs(2)).is_ok()
    });
    let obj = bed.pid1_bus_object();
    let serial = bed.pid1_bus_serial();
    let replies = load.replies();
    std::thread::sleep(secs(1));
    assert!(
        load.replies() > replies + 100,
        "load did not resume after the reexec"
    );
    eprintln!(
        "MEASURE found again under 200/s load after reexec in {:?}: serial {serial}, load {} sent / {} replies / {} errors",
        obj.found_in,
        load.sent(),
        load.replies(),
        load.errors()
    );
    assert!(
        obj.found_in > Duration::ZERO,
        "not searched afresh after the reexec"
    );
    assert!(serial < 10_000, "{serial}");
    assert!(load.failure().is_none(), "{:?}", load.failure());
}

/// Retries `cond` up to `tries` times (other traffic can interleave); panics with `what`.
fn wait_until_true(what: &str, tries: usize, mut cond: impl FnMut() -> bool) {
    for _ in 0..tries {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not once in {tries} tries");
}

// ------------------------------------------------------------------------------------------------
// pleg-guard against the real wedge
// ------------------------------------------------------------------------------------------------

/// Defaults, only faster: `when = "affected"`, `mode = "repair"`, the budgets and the ladder as
/// shipped. The affected bed's PID 1 says 252.39-1~deb12u2, which the version policy calls
/// fixed: only the wedge's own signature can prove it affected.
const FAST_DEFAULTS: &str = r#"interval = "2s"
startup_grace = "0s"

[probe]
timeout = "2s"

[actions.daemon_reexec]
settle = "3s"
"#;

fn pleg_guard_events(bed: &Bed, event: &str, action: &str) -> usize {
    bed.pleg_guard_events(event, &[("PLEG_GUARD_ACTION", action)])
        .len()
}

/// An affected bed with pleg-guard installed (not started), PID 1 wedged for good.
fn wedged_affected_bed() -> Option<Bed> {
    let env = require_affected_bed()?;
    let bed = Bed::boot(&env, BedOptions::affected_with_pleg_guard());
    bed.install_pleg_guard(FAST_DEFAULTS);
    bed.pid1_bus_object();
    bed.fast_forward_pid1_serial(0xFFFF_FFFF);
    assert!(
        matches!(bed.try_pid1_call(secs(2)), Err(CallError::TimedOut(_))),
        "PID 1 still answers after the fast-forward"
    );
    Some(bed)
}

#[test]
fn diagnose_reports_the_real_bus_wedge() {
    let Some(bed) = wedged_affected_bed() else {
        return;
    };
    let cursor = bed.journal_cursor();
    let start = Instant::now();
    let o = bed.exec(&["pleg-guard", "diagnose", "--json"], secs(30));
    let took = start.elapsed();
    let r: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("diagnose --json printed no JSON ({e}): {}", show(&o)));
    eprintln!("MEASURE diagnose on the wedged bed: {took:?}");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        finding_ids(&r).contains(&"systemd-bus-wedge".to_string()),
        "{r:#}"
    );
    assert_eq!(r["targets"]["dbus"]["state"], "ok", "{r:#}");
    let facts = &r["targets"]["systemd"]["facts"];
    assert_eq!(facts["private"]["state"], "ok", "{r:#}");
    assert_eq!(facts["bus"]["state"], "unresponsive", "{r:#}");
    // the signature itself proves the build affected, whatever its version says
    assert_eq!(r["systemd"]["affected"], true, "{r:#}");
    assert_eq!(r["systemd"]["evidence"], "bus-wedge-seen", "{r:#}");
    // diagnose acts on nothing, and its probes never knock PID 1 off the bus
    assert_eq!(bed.reexec_count(), 0);
    assert_eq!(pid1_disconnects(&bed, &cursor), 0);
    assert!(bed.try_pid1_call(secs(2)).is_err(), "still wedged");
    // the human form says it too
    let o = bed.exec(&["pleg-guard", "diagnose"], secs(30));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("systemd-bus-wedge"), "{}", show(&o));
}

#[test]
fn daemon_reexecs_the_real_wedge_once_and_units_start_again() {
    let Some(env) = require_affected_bed() else {
        return;
    };
    let t0 = Instant::now();
    let bed = Bed::boot(&env, BedOptions::affected_with_pleg_guard());
    bed.install_pleg_guard(FAST_DEFAULTS);
    bed.start_pleg_guard();
    bed.pid1_bus_object();
    let cursor = bed.journal_cursor();
    // 6 serials left: pleg-guard's own probes (one GetUnit a round) use them up, as a node's
    // traffic would
    bed.fast_forward_pid1_serial(0xFFFF_FFF9);
    let wedge = bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "systemd-bus-wedge")],
        secs(40),
    );
    let t_found = t0.elapsed();
    bed.wait_reexec_cured(secs(30), secs(30));
    let t_cleared = t0.elapsed();
    eprintln!(
        "MEASURE daemon: wedge found at {t_found:?}, symptom cleared at {t_cleared:?}; finding: {}",
        field(&wedge, "MESSAGE").unwrap_or("")
    );
    // the node can start units again, PID 1 answers with a fresh serial
    bed.sh_ok(SYSTEMD_RUN);
    assert!(bed.pid1_reply_serial() < 10_000);
    // exactly once: a few more rounds change nothing
    stays(
        "exactly one reexec (count, action-started)",
        (1, 1),
        secs(5),
        || {
            (
                bed.reexec_count(),
                pleg_guard_events(&bed, "action-started", "daemon-reexec"),
            )
        },
    );
    // pleg-guard's probes never knocked PID 1 off the bus
    assert_eq!(
        pid1_disconnects(&bed, &cursor),
        0,
        "PID 1 logged '{BUS_DISCONNECT}' while pleg-guard probed"
    );
    let st = bed.status_json();
    assert_eq!(st["systemd"]["affected"], true, "{st:#}");
    assert_eq!(st["systemd"]["evidence"], "bus-wedge-seen", "{st:#}");
    assert!(st["systemd"]["bus_wedge_seen_at"].is_string(), "{st:#}");
    assert_eq!(st["state"], "healthy", "{st:#}");
    eprintln!("MEASURE daemon test total: {:?}", t0.elapsed());
}

/// Defaults, except a 1 s interval and timeout, `unhealthy_after = 2` and no startup grace.
const SHARP_DEFAULTS: &str = r#"interval = "1s"
startup_grace = "0s"

[probe]
timeout = "1s"
unhealthy_after = 2
"#;

/// Which call meets PID 1's last good serial depends on how many serials are left and on the
/// other traffic: at every fast-forward value from 2^32 − 20 to 2^32 − 1, without and with a
/// load of ordinary calls, pleg-guard must cure the wedge with one reexec and never make PID 1
/// drop its bus connection (`Got disconnect on API bus.`). The values are swept by two tests,
/// one for each parity of the serials left, on a bed each (they run side by side). One bed
/// serves all of its values: the reexec starts PID 1's serial afresh, and pleg-guard restarts
/// with an empty state directory, so every value meets a daemon at its defaults (no ledger, no
/// wedge proof).
#[test]
fn no_fast_forward_value_with_an_even_number_left_knocks_pid1_off_the_bus() {
    sweep_fast_forward_values(0);
}

/// The odd half of the sweep above.
#[test]
fn no_fast_forward_value_with_an_odd_number_left_knocks_pid1_off_the_bus() {
    sweep_fast_forward_values(1);
}

/// Every fast-forward value 2^32 − 1 − `left` for `left` in 0..20 of this parity, without and
/// with a load of 50 ordinary calls a second, on one affected bed.
fn sweep_fast_forward_values(parity: u64) {
    let Some(env) = require_affected_bed() else {
        return;
    };
    let t0 = Instant::now();
    let bed = Bed::boot(&env, BedOptions::affected_with_pleg_guard());
    bed.install_pleg_guard(SHARP_DEFAULTS);
    let mut runs = Vec::new();
    for load_rate in [None, Some(50.0)] {
        for left in (0..20u64).rev().filter(|l| l % 2 == parity) {
            let t = Instant::now();
            let _ = bed.sh("systemctl stop pleg-guard; rm -rf /var/lib/pleg-guard");
            bed.start_pleg_guard();
            bed.pid1_bus_object();
            let reexecs = bed.reexec_count();
            let cursor = bed.journal_cursor();
            bed.fast_forward_pid1_serial(SERIAL_MAX - left);
            let load = load_rate.map(|r| bed.bus_load(r));
            bed.wait_event_after(
                Some(&cursor),
                "action-succeeded",
                &[("PLEG_GUARD_ACTION", "daemon-reexec")],
                secs(60),
            );
            wait_until("PID 1 answers on the bus again", secs(20), || {
                bed.try_pid1_call(secs(2)).is_ok()
            });
            if let Some(l) = load {
                l.stop();
            }
            let started = bed
                .journal_after(
                    &cursor,
                    &[
                        "-u",
                        "pleg-guard",
                        "PLEG_GUARD_EVENT=action-started",
                        "PLEG_GUARD_ACTION=daemon-reexec",
                    ],
                )
                .len();
            let disconnects = pid1_disconnects(&bed, &cursor);
            let what = format!(
                "fast-forward to 2^32-1-{left}, load {load_rate:?}: {} reexec(s), {started} action(s) started, {disconnects} disconnect(s), {:?}",
                bed.reexec_count() - reexecs,
                t.elapsed()
            );
            eprintln!("{what}");
            assert_eq!(disconnects, 0, "PID 1 dropped its bus connection: {what}");
            assert_eq!(bed.reexec_count(), reexecs + 1, "{what}");
            assert_eq!(started, 1, "{what}");
            runs.push(t.elapsed());
        }
    }
    eprintln!(
        "MEASURE {} fast-forward values on one bed: {:?} (longest value {:?})",
        runs.len(),
        t0.elapsed(),
        runs.iter().max()
    );
}
