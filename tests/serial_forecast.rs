//! The bus-serial forecast against real PID 1s (issue: see it coming). On the affected bed
//! (pre-v242 sd-bus in PID 1) with PID 1's serial fast-forwarded close to 2^32 and a known
//! load of replies, pleg-guard must learn the rate, warn, and reexec exactly once *before* the
//! overflow, with PID 1 answering throughout. On the normal bed the same fast-forward wraps:
//! no finding, no reexec, and the status shows the wrap.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// Replies per second the load generator asks of PID 1.
const RATE: f64 = 200.0;

fn config(extra: &str) -> String {
    format!(
        r#"interval = "1s"
startup_grace = "0s"

[probe]
timeout = "1s"

[kubelet]
enabled = false

[docker]
enabled = false
{extra}
"#
    )
}

/// pleg-guard's entries with this event (and finding, when given).
fn events(bed: &Bed, event: &str, finding: Option<&str>) -> Vec<serde_json::Map<String, Value>> {
    let fields: Vec<(&str, &str)> = finding
        .map(|f| ("PLEG_GUARD_FINDING", f))
        .into_iter()
        .collect();
    bed.pleg_guard_events(event, &fields)
}

/// `pleg-guard npd-check NAME` in the bed, as node-problem-detector runs it: (exit code, first
/// line).
fn npd_check(bed: &Bed, name: &str) -> (i32, String) {
    let o = bed.sh(&format!("pleg-guard npd-check {name}"));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().next().unwrap_or_default().to_owned();
    (o.status.code().unwrap_or(-1), line)
}

/// A one-hour `preempt_window` that opens 12 h from now in the bed's local time.
fn window_in_12h(bed: &Bed) -> String {
    let now = bed.sh_ok("date +%H:%M");
    let (h, m) = now
        .trim()
        .split_once(':')
        .and_then(|(h, m)| Some((h.parse::<u32>().ok()?, m.parse::<u32>().ok()?)))
        .unwrap_or_else(|| panic!("the bed's date: {now:?}"));
    let start = (h + 12) % 24;
    format!("{start:02}:{m:02}-{:02}:{m:02}", (start + 1) % 24)
}

fn wait_status(bed: &Bed, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let s = bed.status_json();
        if pred(&s) {
            return s;
        }
        if start.elapsed() > timeout {
            panic!(
                "status never showed {what} within {timeout:?}:\n{s:#}\n{}",
                bed.pleg_guard_diagnostics()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn planned_reexec_comes_before_the_overflow_and_pid1_never_stops_answering() {
    let Some(env) = require_affected_bed() else {
        return;
    };
    let bed = Bed::boot(&env, BedOptions::affected_with_pleg_guard());
    // The bed's PID 1 says 252.39, which the version policy calls fixed, and no wedge was seen
    // on this boot: `when = "always"` stands for an operator who knows the build is affected.
    // A small headroom so that the forecast rule (not the headroom) times the reexec. A
    // maintenance window that opens only in 12 h (the bed's local time): the serials run out
    // long before (within the 20 s margin, half of preempt_before), so the planned reexec does
    // not wait for it, and says so.
    let window = window_in_12h(&bed);
    bed.install_pleg_guard(&config(&format!(
        "[actions.daemon_reexec]\nwhen = \"always\"\npreempt_headroom = 1000\npreempt_before = \"40s\"\nsettle = \"3s\"\npreempt_window = \"{window}\"\n",
    )));
    let left_at_start = (RATE * 100.0) as u64; // 100 s of load
    bed.fast_forward_pid1_serial(SERIAL_MAX - left_at_start);
    let load = bed.bus_load(RATE);
    let t0 = Instant::now();
    bed.start_pleg_guard();

    // The serial, the rate and the ETA show up within a few rounds, and the warning with them.
    let s = wait_status(&bed, "a rate and an ETA", secs(30), |s| {
        s["systemd"]["bus_serial_eta_s"].is_u64()
    });
    let rate = s["systemd"]["bus_serial_rate"].as_f64().unwrap_or(0.0);
    assert!(
        (RATE * 0.7..RATE * 1.5).contains(&rate),
        "rate {rate}/s, load {RATE}/s: {s:#}"
    );
    let serial = s["systemd"]["bus_serial"].as_u64().unwrap_or(0);
    assert!(serial > SERIAL_MAX - left_at_start, "{s:#}");
    let eta = s["systemd"]["bus_serial_eta_s"].as_u64().unwrap_or(0);
    assert!((30..110).contains(&eta), "eta {eta}s: {s:#}");
    wait_status(&bed, "systemd-serial-exhaustion", secs(5), |s| {
        s["findings"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["id"] == "systemd-serial-exhaustion"))
    });
    eprintln!(
        "forecast after {:?}: {rate:.0}/s, eta {eta} s",
        t0.elapsed()
    );
    // node-problem-detector's rule sees it too: the condition is true, with the ETA.
    let (code, message) = npd_check(&bed, "SystemdSerialExhaustion");
    assert_eq!(code, 1, "{message}");
    assert!(
        message.starts_with("PID 1 runs out of bus serials in ~") && message.chars().count() <= 80,
        "{message}"
    );
    eprintln!("npd-check SystemdSerialExhaustion: exit {code}, {message:?}");
    assert_eq!(
        bed.reexec_count(),
        0,
        "no reexec while the ETA is above 40 s"
    );

    // Exactly one planned reexec, before the overflow.
    let started = bed.wait_event(
        "action-started",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(120),
    );
    let message = field(&started, "MESSAGE").unwrap_or("").to_owned();
    assert!(
        message.contains("systemd-serial-exhaustion") && message.contains("planned"),
        "{message}"
    );
    assert!(
        message.contains("runs out within preempt_before"),
        "{message}"
    );
    assert!(
        message.contains(&format!(", before preempt_window {window} opens (in 1"))
            && message.contains(") plus 20s margin: not waiting"),
        "{message}"
    );
    eprintln!("planned reexec started: {message}");
    bed.wait_cured("daemon-reexec", secs(30), secs(30));
    let after = bed.pid1_reply_serial();
    assert!(
        after < 10_000_000,
        "the serial starts again near 0: {after}"
    );
    std::thread::sleep(secs(3));
    assert_eq!(bed.reexec_count(), 1, "exactly one reexec");
    assert_eq!(events(&bed, "action-started", None).len(), 1);
    // The cure shows on the Node: the condition turns false once the serial starts again.
    wait_status(&bed, "the forecast finding cleared", secs(30), |s| {
        s["findings"]
            .as_array()
            .is_some_and(|f| f.iter().all(|f| f["id"] != "systemd-serial-exhaustion"))
    });
    let (code, message) = npd_check(&bed, "SystemdSerialExhaustion");
    assert_eq!(code, 0, "after the planned reexec: {message}");

    // PID 1 never stopped answering: the load's calls were all answered (a reexec drops the
    // name for a moment: those calls get an error reply, never silence), none was left
    // hanging, and an ordinary call answers now.
    let (sent, replies, errors) = (load.sent(), load.replies(), load.errors());
    assert!(load.failure().is_none(), "{:?}", load.failure());
    assert_eq!(
        load.unanswered_older_than(secs(1)),
        0,
        "calls left unanswered: sent {sent}, replies {replies}, errors {errors}"
    );
    let slowest = load.max_latency();
    assert!(
        slowest < secs(5),
        "a call to PID 1 waited {slowest:?}: it stopped answering"
    );
    assert!(load.last_serial() > 0);
    load.stop();
    bed.try_pid1_call(secs(5))
        .unwrap_or_else(|e| panic!("PID 1 does not answer after the planned reexec: {e}"));
    let s = bed.status_json();
    assert!(
        !s["findings"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["id"] == "systemd-serial-exhaustion")),
        "{s:#}"
    );
    eprintln!(
        "planned reexec: {message}; load sent {sent}, replies {replies}, errors {errors}, slowest {slowest:?}; took {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_fixed_pid1_wraps_without_finding_or_reexec() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.install_pleg_guard(&config(""));
    bed.fast_forward_pid1_serial(SERIAL_MAX - 1500);
    let load = bed.bus_load(RATE);
    bed.start_pleg_guard();
    let s = wait_status(&bed, "the wrap", secs(40), |s| {
        s["systemd"]["bus_serial_wraps"] == true
    });
    let serial = s["systemd"]["bus_serial"].as_u64().unwrap_or(0);
    assert!(
        (1 << 31..SERIAL_MAX - 1500).contains(&serial),
        "a fixed sd-bus continues at 2^31: {s:#}"
    );
    assert_eq!(s["systemd"]["evidence"], "serial-wrapped", "{s:#}");
    assert_eq!(s["systemd"]["affected"], false, "{s:#}");
    assert!(s["systemd"]["bus_serial_eta_s"].is_null(), "{s:#}");
    std::thread::sleep(secs(3));
    assert!(load.failure().is_none(), "{:?}", load.failure());
    load.stop();
    assert!(
        events(&bed, "finding", Some("systemd-serial-exhaustion")).is_empty(),
        "no warning on a build that wraps"
    );
    assert!(events(&bed, "action-started", None).is_empty());
    assert_eq!(bed.reexec_count(), 0);
    let text = bed.sh_ok("pleg-guard status");
    assert!(text.contains("wraps (fixed sd-bus)"), "{text}");
}
