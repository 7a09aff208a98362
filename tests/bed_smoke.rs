//! Smoke tests of the test bed itself (tests/bed, tests/support): every fault injection really
//! produces its symptom, seen with the real tools (busctl, systemctl, docker, wget, journalctl),
//! not with pleg-guard. If one of these fails, the pleg-guard integration tests prove nothing.
//!
//! Run: `cargo test --test bed_smoke -- --test-threads=2` (as root; under CI=true a missing bed
//! is a failure, elsewhere the tests print SKIPPED and pass).

mod support;

use std::time::{Duration, Instant};
use support::*;

const LIST_SESSIONS: &str = "busctl --timeout=2 call org.freedesktop.login1 /org/freedesktop/login1 \
                             org.freedesktop.login1.Manager ListSessions";
const DBUS_GETID: &str =
    "busctl --timeout=2 call org.freedesktop.DBus / org.freedesktop.DBus GetId";

fn boot() -> Option<Bed> {
    let env = require_bed()?;
    Some(Bed::boot(&env, BedOptions::default()))
}

fn assert_times_out(bed: &Bed, script: &str) {
    let start = Instant::now();
    let o = bed.sh(&format!("timeout 10 {script}"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "`{script}` should have failed: {}",
        show(&o)
    );
    assert!(
        stderr.contains("timed out") || o.status.code() == Some(124),
        "`{script}` failed but not by timing out: {}",
        show(&o)
    );
    assert!(
        start.elapsed() >= Duration::from_millis(1500),
        "`{script}` failed too fast to be a hang"
    );
}

#[test]
fn boots_quickly_and_fully() {
    let Some(bed) = boot() else { return };
    eprintln!("BOOT TIME: {:?} ({})", bed.boot_time, bed.boot_state);
    assert_eq!(
        bed.boot_state,
        "running",
        "failed units: {}",
        bed.sh_ok("systemctl --failed --no-pager --plain")
    );
    assert!(bed.boot_time < secs(30));
    assert_eq!(
        bed.unit_property("systemd-logind.service", "ActiveState"),
        "active"
    );
    assert_eq!(bed.unit_property("dbus.service", "ActiveState"), "active");
    assert_eq!(
        bed.unit_property("kubelet.service", "ActiveState"),
        "active"
    );
    assert_eq!(
        bed.unit_property("systemd-logind.service", "WatchdogUSec"),
        "0"
    );
    assert!(
        bed.unit_property("systemd-logind.service", "MainPID")
            .parse::<u32>()
            .unwrap()
            > 0
    );
    // private network: only lo
    let links = bed.sh_ok("ls /sys/class/net");
    assert_eq!(
        links.split_whitespace().collect::<Vec<_>>(),
        ["lo"],
        "{links}"
    );
}

#[test]
fn logind_stop_makes_login1_calls_time_out() {
    let Some(bed) = boot() else { return };
    bed.sh_ok(LIST_SESSIONS);
    let pid = bed.stop_logind();
    assert_eq!(bed.proc_state(pid), Some('T'));
    assert_times_out(&bed, LIST_SESSIONS);
    bed.cont_logind();
    bed.sh_ok(LIST_SESSIONS);
}

#[test]
fn dbus_stop_hangs_the_bus_but_not_systemds_private_socket() {
    let Some(bed) = boot() else { return };
    bed.sh_ok(DBUS_GETID);
    bed.stop_dbus();
    assert_times_out(&bed, DBUS_GETID);
    // root's systemctl talks to PID 1 over /run/systemd/private: still answers
    let v = bed.sh_ok("timeout 5 systemctl show -p Version --value");
    assert!(v.starts_with("252"), "systemd version {v:?}");
    bed.cont_dbus();
    bed.sh_ok(DBUS_GETID);
}

#[test]
fn daemon_reexec_resumes_a_stopped_logind_via_helper() {
    let Some(bed) = boot() else { return };
    let before = bed.reexec_count();
    bed.resume_logind_on_reexec();
    assert_eq!(
        bed.unit_property("resume-logind-on-reexec.service", "ActiveState"),
        "active"
    );
    let pid = bed.stop_logind();
    assert_times_out(&bed, LIST_SESSIONS);
    // the helper must not resume logind on its own
    std::thread::sleep(secs(1));
    assert_eq!(
        bed.proc_state(pid),
        Some('T'),
        "logind resumed without a reexec"
    );
    bed.sh_ok("systemctl daemon-reexec");
    wait_until("a new `Reexecuting.` line", secs(10), || {
        bed.reexec_count() == before + 1
    });
    wait_until("logind to be resumed", secs(15), || {
        bed.proc_state(pid) != Some('T')
    });
    bed.sh_ok(LIST_SESSIONS);
    let log = bed.sh_ok("journalctl -u resume-logind-on-reexec -o cat --no-pager");
    assert!(log.contains("resuming systemd-logind"), "{log}");
}

#[test]
fn standin_kubelet_healthz_and_healthz_down() {
    let Some(bed) = boot() else { return };
    wait_until("kubelet /healthz", secs(10), || {
        bed.kubelet_healthz().is_some()
    });
    assert_eq!(bed.kubelet_healthz().as_deref(), Some("ok"));
    bed.kubelet_healthz_down();
    wait_until("/healthz to fail", secs(5), || {
        bed.kubelet_healthz().is_none()
    });
    let o = bed.sh("busybox wget -qO- http://127.0.0.1:10248/healthz");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("404"),
        "{}",
        show(&o)
    );
    bed.sh_ok("systemctl restart kubelet");
    wait_until("/healthz back after a restart", secs(10), || {
        bed.kubelet_healthz().as_deref() == Some("ok")
    });
}

#[test]
fn standin_kubelet_wedge_logs_pleg_lines_until_restart() {
    let Some(bed) = boot() else { return };
    let startup = bed.sh_ok("journalctl -u kubelet -o cat --no-pager");
    assert!(startup.contains("\"Started kubelet\""), "{startup}");
    bed.kubelet_wedge();
    let structured = bed.wait_journal(
        &["-u", "kubelet"],
        |e| {
            field(e, "MESSAGE").is_some_and(|m| {
                m.contains("\"Skipping pod synchronization\" err=\"[PLEG is not healthy")
            })
        },
        secs(10),
    );
    let legacy = bed.wait_journal(
        &["-u", "kubelet"],
        |e| field(e, "MESSAGE").is_some_and(|m| m.contains("] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active ")),
        secs(10),
    );
    let re_ok = |m: &str| {
        // I1105 09:50:27.583544     123 kubelet.go:2412] ...
        let b = m.as_bytes();
        b[0] == b'I'
            && b[1..5].iter().all(u8::is_ascii_digit)
            && m[6..21].chars().nth(2) == Some(':')
            && m.contains(" kubelet.go:")
            && m.contains("; threshold is 3m0s]")
    };
    for e in [&structured, &legacy] {
        let m = field(e, "MESSAGE").unwrap();
        assert!(re_ok(m), "not klog-shaped: {m}");
        assert!(
            m.contains("last seen active 3m"),
            "ago should start at 3m: {m}"
        );
    }
    // "ago" grows
    std::thread::sleep(secs(5));
    let agos: Vec<f64> = bed
        .journal(&["-u", "kubelet"])
        .iter()
        .filter_map(|e| field(e, "MESSAGE"))
        .filter_map(|m| {
            m.split("last seen active 3m")
                .nth(1)?
                .split('s')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        agos.len() >= 3 && agos.last() > agos.first(),
        "ago does not grow: {agos:?}"
    );
    // a restart is the cure
    bed.sh_ok("systemctl restart kubelet");
    std::thread::sleep(secs(1));
    let cursor = bed.journal_cursor();
    std::thread::sleep(secs(5));
    let after = bed.journal_after(&cursor, &["-u", "kubelet"]);
    assert!(
        !after
            .iter()
            .any(|e| field(e, "MESSAGE").is_some_and(|m| m.contains("PLEG is not healthy"))),
        "PLEG lines after restart"
    );
}

#[test]
fn install_pleg_guard_writes_unit_and_config() {
    let Some(bed) = boot() else { return };
    bed.install_pleg_guard("mode = \"observe\"\n");
    assert_eq!(bed.unit_property("pleg-guard.service", "Type"), "notify");
    assert_eq!(
        bed.unit_property("pleg-guard.service", "LoadState"),
        "loaded"
    );
    assert_eq!(
        bed.read_file("/etc/pleg-guard/config.toml").as_deref(),
        Some("mode = \"observe\"\n")
    );
    let j = bed.journal(&["-u", "kubelet", "-n", "3"]);
    assert!(!j.is_empty() && j.iter().all(|e| field(e, "MESSAGE").is_some()));
}

#[test]
fn bed_teardown_leaves_nothing_even_on_panic() {
    let Some(env) = require_bed() else { return };
    let (tx, rx) = std::sync::mpsc::channel();
    let r = std::thread::spawn(move || {
        let bed = Bed::boot(&env, BedOptions::default());
        bed.stop_logind();
        bed.stop_dbus();
        tx.send((
            bed.host_pid1(),
            bed.nspawn_pid().unwrap(),
            bed.console_log().to_path_buf(),
        ))
        .unwrap();
        panic!("deliberate panic to exercise Drop");
    })
    .join();
    assert!(r.is_err());
    let (pid1, nspawn, console) = rx.recv().unwrap();
    assert!(console.exists(), "console log should be kept after a panic");
    let _ = std::fs::remove_file(console);
    assert_eq!(host_proc_state(pid1), None, "container PID 1 still there");
    assert_eq!(host_proc_state(nspawn), None, "systemd-nspawn still there");
}

/// Two beds booting at once used to share one cgroup (`/payload`), and then raced on their units'
/// cgroups (`status=219/CGROUP`): each bed's PID 1 now sits in its own, removed with the bed.
#[test]
fn beds_booting_together_each_have_their_own_cgroup() {
    let Some(env) = require_bed() else { return };
    let other = {
        let env = env.clone();
        std::thread::spawn(move || Bed::boot(&env, BedOptions::default()))
    };
    let bed = Bed::boot(&env, BedOptions::default());
    let other = other.join().expect("the second bed booted");
    let systemd_cgroup = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .expect("PID 1's cgroups")
            .lines()
            .find_map(|l| l.split_once(":name=systemd:").map(|(_, p)| p))
            .map(str::to_string)
    };
    let (a, b) = (
        systemd_cgroup(bed.host_pid1()),
        systemd_cgroup(other.host_pid1()),
    );
    eprintln!("PID 1 cgroups: {a:?} and {b:?}");
    assert_ne!(a, b, "two beds' PID 1 in one cgroup");
    for (bed, cg) in [(&bed, &a), (&other, &b)] {
        if let Some(cg) = cg {
            assert!(
                cg.contains(&bed.name),
                "{}: PID 1 in {cg}, not in the bed's own cgroup",
                bed.name
            );
        }
        assert!(
            bed.boot_state == "running",
            "{} booted {}",
            bed.name,
            bed.boot_state
        );
    }
    let dirs: Vec<_> = [bed.host_cgroup_dirs(), other.host_cgroup_dirs()].concat();
    drop(bed);
    drop(other);
    for d in dirs {
        assert!(!d.exists(), "bed cgroup {} left behind", d.display());
    }
}

#[test]
fn docker_socket_is_bound_into_the_bed() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(
        &env,
        BedOptions {
            docker: true,
            ..Default::default()
        },
    );
    bed.sh_ok("test -S /var/run/docker.sock");
}

#[test]
fn dockerd_stop_hangs_docker_clients() {
    if require_bed().is_none() {
        return;
    }
    let _lock = docker_lock();
    host_ok("timeout", &["10", "docker", "ps"]);
    let stopped = stop_dockerd();
    let start = Instant::now();
    let o = host("timeout", &["5", "docker", "ps"]);
    assert_eq!(
        o.status.code(),
        Some(124),
        "docker ps should hang: {}",
        show(&o)
    );
    assert!(start.elapsed() >= secs(4));
    stopped.cont();
    host_ok("timeout", &["10", "docker", "ps"]);
}

#[test]
fn dead_container_is_dead_until_released() {
    if require_bed().is_none() {
        return;
    }
    let _lock = docker_lock();
    let name = unique_name("dead");
    let dc = DeadContainer::create(&name);
    assert_eq!(docker_state(&name).as_deref(), Some("dead"));
    let o = docker(&["rm", &name]);
    assert!(
        !o.status.success(),
        "docker rm of a dead, unreleased container succeeded"
    );
    dc.release();
    docker_ok(&["rm", &name]);
    assert_eq!(docker_state(&name), None);
}

#[test]
fn container_helpers_make_the_states_they_say() {
    if require_bed().is_none() {
        return;
    }
    let _lock = docker_lock();
    let r = TestContainer::running(&unique_name("run"));
    let e = TestContainer::exited(&unique_name("exit"));
    let c = TestContainer::created(&unique_name("new"));
    assert_eq!(docker_state(&r.name).as_deref(), Some("running"));
    assert_eq!(docker_state(&e.name).as_deref(), Some("exited"));
    assert_eq!(docker_state(&c.name).as_deref(), Some("created"));
    let names = [r.name.clone(), e.name.clone(), c.name.clone()];
    drop((r, e, c));
    for n in names {
        assert_eq!(docker_state(&n), None, "{n} not removed by Drop");
    }
}

#[test]
fn scenario_config_merges_a_tests_changes_over_the_fast_rounds() {
    let merged: toml::Table =
        fast_config("mode = \"observe\"\n[probe]\ntimeout = \"2s\"\n[docker]\nenabled = false\n")
            .parse()
            .expect("the merged config parses");
    assert_eq!(merged["mode"].as_str(), Some("observe"));
    assert_eq!(merged["interval"].as_str(), Some("1s"));
    assert_eq!(merged["probe"]["timeout"].as_str(), Some("2s"));
    assert_eq!(merged["probe"]["unhealthy_after"].as_integer(), Some(2));
    assert_eq!(merged["docker"]["enabled"].as_bool(), Some(false));
    assert_eq!(
        merged["actions"]["restart_kubelet"]["settle"].as_str(),
        Some("5s")
    );
}
