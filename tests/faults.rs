//! The node under faults (issue 13): pleg-guard runs as the real service in a bed while a part
//! of the node it depends on goes away and comes back. Each test asserts that the daemon
//! keeps running (same MainPID, no restart), sees the fault and the recovery, and takes no
//! action it should not — or, for the state directory, no action without a ledger record.
//!
//! Chosen outage lengths: dockerd ~5 s (from SIGTERM to a new dockerd answering, usually
//! 5–10 s in all), dbus-daemon 20 s (20 probe rounds at `interval = "1s"`, enough to see the
//! daemon ride it out; a full minute would only make CI slower).

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// Entries of pleg-guard with this event (and action, when given).
fn events(bed: &Bed, event: &str, action: Option<&str>) -> Vec<String> {
    let fields: Vec<(&str, &str)> = action
        .map(|a| ("PLEG_GUARD_ACTION", a))
        .into_iter()
        .collect();
    bed.pleg_guard_events(event, &fields)
        .iter()
        .map(|e| field(e, "MESSAGE").unwrap_or("").to_owned())
        .collect()
}

fn target_state(bed: &Bed, target: &str) -> String {
    match bed.read_file("/run/pleg-guard/status.json") {
        Some(text) => serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["targets"][target]["state"].as_str().map(str::to_owned))
            .unwrap_or_default(),
        None => String::new(),
    }
}

fn has_finding(bed: &Bed, id: &str) -> bool {
    bed.read_file("/run/pleg-guard/status.json")
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["findings"].as_array().cloned())
        .is_some_and(|f| f.iter().any(|f| f["id"] == id))
}

fn healthy(bed: &Bed) -> bool {
    bed.read_file("/run/pleg-guard/status.json")
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|v| v["healthy"] == Value::Bool(true))
}

/// The daemon is the one that was started: same MainPID, never restarted by systemd.
fn assert_same_daemon(bed: &Bed, pid: u32) {
    assert_eq!(
        bed.main_pid("pleg-guard.service"),
        pid,
        "pleg-guard was restarted\n{}",
        bed.pleg_guard_diagnostics()
    );
    assert_eq!(bed.unit_property("pleg-guard.service", "NRestarts"), "0");
}

#[test]
fn status_run_by_a_non_root_operator_reports_the_daemon() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.run_pleg_guard(&fast_config("[docker]\nenabled = false\n"));
    wait_until("pleg-guard reports healthy", secs(20), || healthy(&bed));
    for cmd in [
        "setpriv --reuid=nobody --regid=nogroup --clear-groups pleg-guard status",
        "runuser -u nobody -- pleg-guard status",
        "runuser -u nobody -- pleg-guard status --json",
    ] {
        let o = bed.sh(cmd);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("healthy"),
            "`{cmd}` as nobody: {}",
            show(&o)
        );
    }
    // A stopped daemon is still told apart (exit 3), also for nobody.
    bed.sh_ok("systemctl stop pleg-guard");
    let o = bed.sh("runuser -u nobody -- pleg-guard status");
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
}

/// Starts the host's dockerd again exactly as tests/bed/prepare.sh does, if it does not
/// answer, and waits until it does: on Drop too, so a failing test leaves docker running.
struct DockerdBack;

impl DockerdBack {
    fn answering() -> bool {
        run_with_timeout(Command::new("docker").arg("info"), None, secs(5))
            .is_ok_and(|o| o.status.success())
    }

    fn ensure(&self) {
        if Self::answering() {
            return;
        }
        let running = !host_dockerd_pids().is_empty();
        if !running {
            let o = host(
                "sh",
                &[
                    "-c",
                    "setsid dockerd >>/var/log/pleg-guard-test-dockerd.log 2>&1 </dev/null 9>&- &",
                ],
            );
            assert!(o.status.success(), "start dockerd: {}", show(&o));
        }
        let start = Instant::now();
        while !Self::answering() {
            assert!(
                start.elapsed() < secs(60),
                "dockerd does not answer 60 s after its restart (log: /var/log/pleg-guard-test-dockerd.log)"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for DockerdBack {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Best effort: never panic in a panic.
            let _ = std::panic::catch_unwind(|| self.ensure());
        } else {
            self.ensure();
        }
    }
}

#[test]
fn dockerd_killed_and_restarted() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    // The host's /run, not its docker.sock: a bind of the socket file itself would keep the
    // dead socket's inode, and the bed would never see the new dockerd's.
    let bed = Bed::boot(
        &env,
        BedOptions {
            extra_binds: vec![("/run".into(), "/hostrun".to_owned())],
            ..BedOptions::with_pleg_guard()
        },
    );
    bed.run_pleg_guard(&fast_config(
        "[docker]\nsocket = \"/hostrun/docker.sock\"\n",
    ));
    wait_until("docker ok", secs(20), || {
        target_state(&bed, "docker") == "ok"
    });
    let daemon = bed.main_pid("pleg-guard.service");

    let pids = host_dockerd_pids();
    assert_eq!(pids.len(), 1, "expected one dockerd: {pids:?}");
    let pid = pids[0].to_string();
    let back = DockerdBack;
    host_ok("kill", &["-TERM", &pid]);
    wait_until("dockerd gone", secs(60), || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
    let gone = Instant::now();
    wait_until("pleg-guard sees docker gone", secs(15), || {
        matches!(
            target_state(&bed, "docker").as_str(),
            "absent" | "error" | "unresponsive"
        )
    });
    let seen_as = target_state(&bed, "docker");
    std::thread::sleep(secs(5).saturating_sub(gone.elapsed()));
    back.ensure();
    wait_until("docker ok again", secs(30), || {
        target_state(&bed, "docker") == "ok"
    });
    eprintln!("dockerd outage seen as `{seen_as}`, then ok again");
    assert_same_daemon(&bed, daemon);
    assert_eq!(events(&bed, "action-started", None), Vec::<String>::new());
    drop(back);
}

#[test]
fn journald_restarted_rotated_and_vacuumed_while_following_kubelet() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.run_pleg_guard(&fast_config(
        "mode = \"observe\"\n[docker]\nenabled = false\n",
    ));
    wait_until("pleg-guard reports healthy", secs(20), || healthy(&bed));
    let daemon = bed.main_pid("pleg-guard.service");

    // 1. journald restarted while the follower runs.
    let journald = bed.main_pid("systemd-journald.service");
    bed.sh_ok("systemctl restart systemd-journald");
    assert_ne!(bed.main_pid("systemd-journald.service"), journald);
    bed.kubelet_wedge();
    wait_until(
        "the PLEG finding after journald's restart",
        secs(30),
        || has_finding(&bed, "kubelet-pleg-unhealthy"),
    );
    // ... and logged as a finding with the contract's fields, into the restarted journald.
    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "kubelet-pleg-unhealthy")],
        secs(10),
    );
    bed.kubelet_heal();
    wait_until("kubelet recovered", secs(40), || {
        !has_finding(&bed, "kubelet-pleg-unhealthy")
    });

    // 2. The journal rotated and every archived file vacuumed away.
    bed.sh_ok("journalctl --rotate && journalctl --vacuum-files=1 --vacuum-time=1s");
    bed.kubelet_wedge();
    wait_until(
        "the PLEG finding after rotation and vacuum",
        secs(30),
        || has_finding(&bed, "kubelet-pleg-unhealthy"),
    );
    bed.kubelet_heal();
    // The second episode's finding is in the journal (the first one's went with the vacuum).
    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "kubelet-pleg-unhealthy")],
        secs(10),
    );
    assert_same_daemon(&bed, daemon);
    // Observe mode: the wedge was reported, never acted on.
    assert_eq!(events(&bed, "action-started", None), Vec::<String>::new());
}

#[test]
fn state_directory_read_only_then_full_then_back() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    // A tiny tmpfs over the state directory, mounted before the service starts.
    bed.sh_ok("mkdir -p /var/lib/pleg-guard && mount -t tmpfs -o size=64k,mode=0755 pgt-state /var/lib/pleg-guard");
    bed.run_pleg_guard(&fast_config("[docker]\nenabled = false\n"));
    wait_until("pleg-guard reports healthy", secs(20), || healthy(&bed));
    let daemon = bed.main_pid("pleg-guard.service");
    let kubelet = bed.main_pid("kubelet.service");

    // 1. Read-only: the restart is not started, and this is said once.
    bed.sh_ok("mount -o remount,ro /var/lib/pleg-guard");
    bed.kubelet_wedge();
    let failed = bed.wait_event(
        "action-failed",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(30),
    );
    let msg = field(&failed, "MESSAGE").unwrap_or("").to_owned();
    assert!(msg.contains("ledger could not be saved"), "{msg}");
    std::thread::sleep(secs(4));
    assert_eq!(
        bed.main_pid("kubelet.service"),
        kubelet,
        "acted without a ledger record"
    );
    assert_eq!(events(&bed, "action-started", None), Vec::<String>::new());
    assert_eq!(
        events(&bed, "action-failed", Some("restart-kubelet")).len(),
        1,
        "the failure is logged once, not every round"
    );

    // 2. Writable but full.
    bed.sh_ok("mount -o remount,rw /var/lib/pleg-guard; dd if=/dev/zero of=/var/lib/pleg-guard/filler bs=4k 2>/dev/null; df -k /var/lib/pleg-guard | tail -1");
    wait_until("the ENOSPC failure is reported", secs(15), || {
        events(&bed, "action-failed", Some("restart-kubelet"))
            .iter()
            .any(|m| m.contains("No space left"))
    });
    std::thread::sleep(secs(3));
    assert_eq!(
        bed.main_pid("kubelet.service"),
        kubelet,
        "acted without a ledger record"
    );
    assert_eq!(events(&bed, "action-started", None), Vec::<String>::new());

    // 3. Space returns: the repair runs, recorded first.
    bed.sh_ok("rm -f /var/lib/pleg-guard/filler");
    bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(30),
    );
    assert_ne!(bed.main_pid("kubelet.service"), kubelet);
    let ledger = bed
        .read_file("/var/lib/pleg-guard/ledger.json")
        .unwrap_or_default();
    assert!(ledger.contains("restart-kubelet"), "{ledger}");
    assert_eq!(
        events(&bed, "action-started", Some("restart-kubelet")).len(),
        1
    );
    assert_same_daemon(&bed, daemon);
}

#[test]
fn dbus_daemon_gone_for_twenty_seconds_and_back() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    // Default `when = "affected"`: the bed's systemd 252 is not, so no reexec may follow.
    bed.run_pleg_guard(&fast_config("[docker]\nenabled = false\n"));
    wait_until("pleg-guard reports healthy", secs(20), || healthy(&bed));
    let daemon = bed.main_pid("pleg-guard.service");

    // (Also checks tests/support's wait_event_after: the first match after a cursor counts.)
    let cursor = bed.journal_cursor();
    let gone = Instant::now();
    bed.sh_ok("systemctl stop dbus.socket dbus.service");
    bed.wait_event_after(
        Some(&cursor),
        "target-unhealthy",
        &[("PLEG_GUARD_TARGET", "dbus")],
        secs(15),
    );
    std::thread::sleep(secs(20).saturating_sub(gone.elapsed()));
    assert_same_daemon(&bed, daemon);
    bed.sh_ok("systemctl start dbus.socket dbus.service");
    bed.wait_event_after(
        Some(&cursor),
        "target-recovered",
        &[("PLEG_GUARD_TARGET", "dbus")],
        secs(30),
    );
    wait_until("pleg-guard healthy again", secs(60), || healthy(&bed));
    assert_same_daemon(&bed, daemon);
    assert_eq!(events(&bed, "action-started", None), Vec::<String>::new());
}

/// The release-profile failure mode of a huge duration was an abort: the binary itself must
/// refuse such a config with the key named, for `check-config`, `diagnose` and `run` alike.
#[test]
fn huge_durations_are_refused_by_the_binary_not_aborted_on() {
    let dir = std::env::temp_dir().join(format!("pleg-guard-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_default();
    for (text, key) in [
        ("interval = \"300000000000y\"\n", "`interval`"),
        ("interval = \"500000000y\"\n", "`interval`"),
        ("startup_grace = \"100000y\"\n", "`startup_grace`"),
        ("[probe]\ntimeout = \"100000y\"\n", "`probe.timeout`"),
        (
            "[actions.daemon_reexec]\nmin_interval = \"100000y\"\n",
            "`actions.daemon_reexec.min_interval`",
        ),
        (
            "[actions.restart_kubelet]\nsettle = \"100000y\"\n",
            "`actions.restart_kubelet.settle`",
        ),
    ] {
        let path = dir.join("config.toml");
        std::fs::write(&path, text).unwrap_or_default();
        let path = path.to_string_lossy().into_owned();
        for args in [
            vec!["check-config", path.as_str()],
            vec!["diagnose", "--config", path.as_str()],
            vec!["run", "--config", path.as_str(), "--dry-run"],
        ] {
            let o = run_with_timeout(Command::new(built_pleg_guard()).args(&args), None, secs(20))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?} {text:?}: {}", show(&o));
            assert!(
                err.contains(key) && err.contains("at most"),
                "{args:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
