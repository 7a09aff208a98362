//! `pleg-guard npd-check` as node-problem-detector runs it, in one booted bed with the real
//! daemon: every condition 0 on a healthy node, 1 with a message under its fault, a repair's
//! Event reported once, unknown (2) when the daemon is gone, stopped (stale status) or its
//! status.json corrupt or truncated; and its cost with the system bus out of reach.

mod support;

use std::time::{Duration, Instant};

use support::*;

const CONDITIONS: [&str; 5] = [
    "SystemdBusWedged",
    "SystemdSerialExhaustion",
    "ContainerRuntimeUnresponsive",
    "LogindUnresponsive",
    "PLEGUnhealthy",
];
const EVENTS: [&str; 3] = [
    "PlegGuardRepaired",
    "PlegGuardRepairFailed",
    "PlegGuardRepairSuppressed",
];

/// Repair mode, the scenario's fast rounds ([`FAST_ROUNDS`]) without docker; `when = "always"`
/// so the bed's systemd 252 is reexecuted for a stuck logind (see tests/daemon_scenarios.rs).
const CHANGES: &str = r#"
[docker]
enabled = false

[actions.daemon_reexec]
when = "always"
settle = "3s"
min_interval = "1s"

[actions.restart_kubelet]
min_interval = "1s"
"#;

/// `pleg-guard npd-check NAME` in the bed: (exit code, first line of output).
fn npd_check(bed: &Bed, name: &str) -> (i32, String) {
    let o = bed.sh(&format!("pleg-guard npd-check {name}"));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().next().unwrap_or_default().to_owned();
    assert!(
        line.chars().count() <= 80,
        "{name}: message over 80: {line}"
    );
    (o.status.code().unwrap_or(-1), line)
}

/// Polls `npd-check NAME` every 100 ms until it exits `want`; returns the message.
fn wait_exit(bed: &Bed, name: &str, want: i32, timeout: Duration) -> String {
    let start = Instant::now();
    let mut last = (0, String::new());
    while start.elapsed() < timeout {
        last = npd_check(bed, name);
        if last.0 == want {
            return last.1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "npd-check {name}: {last:?}, not exit {want}, after {timeout:?}\n{}",
        bed.pleg_guard_diagnostics()
    );
}

#[test]
fn npd_check_against_a_real_daemon_and_its_faults() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.run_pleg_guard(&fast_config(CHANGES));

    // ---- a healthy node: every condition false, no Event --------------------------------
    for c in CONDITIONS {
        let (code, msg) = npd_check(&bed, c);
        assert_eq!(code, 0, "{c}: {msg}");
        assert!(msg.starts_with("pleg-guard: ok at "), "{c}: {msg}");
    }
    for e in EVENTS {
        assert_eq!(npd_check(&bed, e).0, 0, "{e}");
    }
    assert_eq!(npd_check(&bed, "NoSuchCondition").0, 2);

    // ---- cost: 100 runs with the system bus (and PID 1's private socket) out of reach ----
    // Each run is timed with two `date` calls; the same loop around `true` gives what the
    // fork, exec and timing alone cost on this (shared, loaded) machine, subtracted from the
    // median so the figure is npd-check's own.
    let timed = |cmd: &str| -> Vec<u64> {
        let o = bed.sh_ok(&format!(
            "unshare -m sh -c '\
               for s in /run/dbus/system_bus_socket /run/systemd/private; do \
                 [ -e $s ] && mount --bind /dev/null $s; done; \
               for i in $(seq 100); do \
                 a=$(date +%s%N); {cmd} >/dev/null; r=$?; \
                 b=$(date +%s%N); echo $r $(( (b - a) / 1000 )); done'"
        ));
        let mut us: Vec<u64> = Vec::new();
        for l in o.lines() {
            let mut it = l.split_whitespace();
            let code = it.next().unwrap_or_default();
            assert_eq!(code, "0", "{cmd} without the bus: {l}");
            us.push(it.next().and_then(|t| t.parse().ok()).unwrap_or(u64::MAX));
        }
        assert_eq!(us.len(), 100, "{o}");
        us.sort_unstable();
        us
    };
    let base = timed("true");
    let us = timed("pleg-guard npd-check SystemdBusWedged");
    let ms = |u: u64| u as f64 / 1000.0;
    let median = ms((us[49] + us[50]) / 2);
    let overhead = ms((base[49] + base[50]) / 2);
    let own = median - overhead;
    eprintln!(
        "npd-check without the bus, 100 runs: min {:.2} ms, median {median:.2} ms, max {:.2} ms \
         (the timing loop alone: median {overhead:.2} ms; npd-check's own median {own:.2} ms)",
        ms(us[0]),
        ms(us[99])
    );
    assert!(own < 10.0, "npd-check's own median {own:.2} ms");

    // ---- logind stuck: LogindUnresponsive, then a reexec: one PlegGuardRepaired Event ----
    bed.resume_logind_on_reexec();
    bed.stop_logind();
    let msg = wait_exit(&bed, "LogindUnresponsive", 1, secs(30));
    assert!(msg.starts_with("logind-unresponsive since "), "{msg}");
    assert_eq!(npd_check(&bed, "PLEGUnhealthy").0, 0);
    bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(40),
    );
    bed.cont_logind();
    wait_exit(&bed, "LogindUnresponsive", 0, secs(30));

    // ---- kubelet's PLEG wedged: PLEGUnhealthy until restart-kubelet cures it ------------
    bed.kubelet_wedge();
    let msg = wait_exit(&bed, "PLEGUnhealthy", 1, secs(30));
    assert!(msg.starts_with("kubelet-pleg-unhealthy since "), "{msg}");
    bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(40),
    );

    // ---- the Events: each succeeded run once, then nothing (daemon stopped: no new ones) --
    bed.sh_ok("systemctl stop pleg-guard");
    let ledger: serde_json::Value =
        serde_json::from_str(&bed.read_file("/var/lib/pleg-guard/ledger.json").unwrap()).unwrap();
    let succeeded = ledger["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "succeeded")
        .count();
    assert!(succeeded >= 2, "{ledger}");
    let mut reported = Vec::new();
    loop {
        let (code, msg) = npd_check(&bed, "PlegGuardRepaired");
        if code == 0 {
            break;
        }
        assert_eq!(code, 1, "{msg}");
        assert!(!reported.contains(&msg), "reported twice: {msg}");
        reported.push(msg);
        assert!(reported.len() <= succeeded, "{reported:?}");
    }
    assert_eq!(reported.len(), succeeded, "{reported:?}");
    assert!(
        reported.iter().any(|m| m.starts_with("reexec ")),
        "{reported:?}"
    );
    assert!(
        reported.iter().any(|m| m.starts_with("kubelet restart ")),
        "{reported:?}"
    );
    assert_eq!(npd_check(&bed, "PlegGuardRepaired").0, 0, "once only");
    // A corrupt cursor is unknown, never a re-report nor a skip.
    bed.write_file(
        "/var/lib/pleg-guard-npd/PlegGuardRepaired.json",
        "{\"reported\": [[",
    );
    let (code, msg) = npd_check(&bed, "PlegGuardRepaired");
    assert_eq!(code, 2, "{msg}");
    assert!(msg.contains("corrupt"), "{msg}");

    // ---- no daemon, corrupt or truncated status: unknown -------------------------------
    for c in CONDITIONS {
        let (code, msg) = npd_check(&bed, c);
        assert_eq!(code, 2, "daemon stopped, {c}: {msg}");
    }
    let status = bed
        .read_file("/run/pleg-guard/status.json")
        .unwrap_or_default();
    bed.write_file("/run/pleg-guard/status.json", &status[..status.len() / 2]);
    let (code, msg) = npd_check(&bed, "SystemdBusWedged");
    assert_eq!(code, 2, "truncated: {msg}");
    bed.write_file("/run/pleg-guard/status.json", "\u{0}garbage");
    let (code, msg) = npd_check(&bed, "SystemdBusWedged");
    assert_eq!(code, 2, "corrupt: {msg}");

    // ---- a daemon alive but frozen: its status goes stale, unknown after 30 s ------------
    bed.start_pleg_guard();
    wait_exit(&bed, "LogindUnresponsive", 0, secs(20));
    bed.stop_unit("pleg-guard.service");
    let msg = wait_exit(&bed, "LogindUnresponsive", 2, secs(45));
    assert!(msg.contains("stale"), "{msg}");
    bed.cont_unit("pleg-guard.service");
}

/// The real systemd bus wedge (an affected PID 1 out of serials, tests/real_bug.rs), in observe
/// mode so it stands: `SystemdBusWedged` true, and `npd-check` answers at once although PID 1
/// no longer answers on the bus.
#[test]
fn npd_check_reports_the_real_bus_wedge() {
    let Some(env) = require_affected_bed() else {
        return;
    };
    let bed = Bed::boot(&env, BedOptions::affected_with_pleg_guard());
    bed.install_pleg_guard(
        "mode = \"observe\"\ninterval = \"2s\"\nstartup_grace = \"0s\"\n[probe]\ntimeout = \"2s\"\n",
    );
    bed.start_pleg_guard();
    assert_eq!(npd_check(&bed, "SystemdBusWedged").0, 0);
    bed.pid1_bus_object();
    bed.fast_forward_pid1_serial(0xFFFF_FFF9);
    let msg = wait_exit(&bed, "SystemdBusWedged", 1, secs(60));
    assert!(msg.starts_with("systemd-bus-wedge since "), "{msg}");
    let t = Instant::now();
    let (code, _) = npd_check(&bed, "SystemdBusWedged");
    eprintln!(
        "npd-check on the wedged node: {:?} (through nsenter)",
        t.elapsed()
    );
    assert_eq!(code, 1);
    assert_eq!(
        npd_check(&bed, "PlegGuardRepaired").0,
        0,
        "observe mode repairs nothing"
    );
}

/// A container runtime socket that accepts and never answers (systemd listens on it for a
/// service that never reads): `ContainerRuntimeUnresponsive` true with the finding's message.
#[test]
fn npd_check_reports_an_unresponsive_container_runtime() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.sh_ok(
        "systemd-run --quiet --unit=hung-runtime \
         --socket-property=ListenStream=/run/hung-runtime.sock sleep infinity",
    );
    bed.run_pleg_guard(&fast_config(
        "mode = \"observe\"\n[docker]\nsocket = \"/run/hung-runtime.sock\"\n",
    ));
    let msg = wait_exit(&bed, "ContainerRuntimeUnresponsive", 1, secs(30));
    assert!(msg.starts_with("docker-unresponsive since "), "{msg}");
    for c in ["SystemdBusWedged", "LogindUnresponsive", "PLEGUnhealthy"] {
        assert_eq!(npd_check(&bed, c).0, 0, "{c}");
    }
}

/// The host's real dockerd SIGSTOPped (the bed talks to it through its socket):
/// `ContainerRuntimeUnresponsive` true with the finding's message while the other conditions
/// stay false, and false again once dockerd runs.
#[test]
fn npd_check_reports_a_stopped_dockerd() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    bed.run_pleg_guard(&fast_config("mode = \"observe\"\n"));
    wait_exit(&bed, "ContainerRuntimeUnresponsive", 0, secs(20));
    let stopped = stop_dockerd();
    let msg = wait_exit(&bed, "ContainerRuntimeUnresponsive", 1, secs(30));
    assert!(msg.starts_with("docker-unresponsive since "), "{msg}");
    for c in ["SystemdBusWedged", "LogindUnresponsive"] {
        assert_eq!(npd_check(&bed, c).0, 0, "{c}");
    }
    stopped.cont();
    wait_exit(&bed, "ContainerRuntimeUnresponsive", 0, secs(30));
}
