//! The .deb on other Debian releases than the bookworm bed: Debian 11 (bullseye: systemd 247,
//! glibc 2.31) and Debian 13 (trixie: systemd 257), booted from their own cached root
//! filesystems (`tests/bed/prepare.sh bullseye trixie`). The package from
//! `packaging/build-deb.sh` (glibc 2.17 binary) is installed with `dpkg -i` inside each bed and
//! a smoke set runs against the packaged daemon under the packaged unit: a healthy node (every
//! target ok, READY=1, `pleg-guard status` exit 0), a stopped dockerd (`docker-unresponsive`),
//! a stopped logind (`logind-unresponsive`) cured by `daemon-reexec` (the bed's stand-in:
//! logind resumes when PID 1 re-executes).
//!
//! One bed per release, the phases in sequence (docker's fault holds `docker_lock()` only while
//! dockerd is stopped). Like every bed test: SKIPPED locally without root or the bed, a failure
//! under CI=true. `PLEG_GUARD_DEB` names a ready-made .deb instead of building one.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use support::*;

const UNIT: &str = "pleg-guard.service";

/// Fast rounds; `when = "always"`: neither 247 nor 257 is affected by the bus bug, the bed's
/// stand-in makes a reexec the cure.
const CONFIG: &str = r#"interval = "2s"
startup_grace = "0s"

[probe]
# generous: the host's dockerd answers slowly when the machine is busy
timeout = "2s"
slow_after = "1s"
unhealthy_after = 2

[actions.daemon_reexec]
when = "always"
settle = "3s"

# the host's /run, bound at /hostrun, not its docker.sock: a bind of the socket file would keep
# a dead socket's inode when another test (faults.rs) restarts the host's dockerd meanwhile
[docker]
socket = "/hostrun/docker.sock"
"#;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The .deb (built once per process with packaging/build-deb.sh into target/packaging-test/).
fn deb() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    static BUILD: Mutex<()> = Mutex::new(());
    DEB.get_or_init(|| {
        let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = std::env::var_os("PLEG_GUARD_DEB") {
            return PathBuf::from(p);
        }
        let out = repo().join("target/packaging-test/deb");
        std::fs::create_dir_all(&out).unwrap();
        let started = Instant::now();
        let o = run_with_timeout(
            Command::new("bash")
                .arg(repo().join("packaging/build-deb.sh"))
                .arg("--output")
                .arg(&out)
                .current_dir(repo()),
            None,
            Duration::from_secs(1800),
        )
        .unwrap_or_else(|e| panic!("packaging/build-deb.sh: {e}"));
        assert!(o.status.success(), "build-deb.sh failed: {}", show(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        let path = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| repo().join(l.trim()))
            .unwrap_or_else(|| panic!("build-deb.sh printed no path: {}", show(&o)));
        assert!(path.is_file(), "{} is no file", path.display());
        eprintln!("built {} in {:?}", path.display(), started.elapsed());
        path
    })
}

/// pleg-guard's journal entries of this event with these fields.
fn events(bed: &Bed, event: &str, extra: &[(&str, &str)]) -> usize {
    bed.pleg_guard_events(event, extra).len()
}

/// Waits for one more such entry than `before`. A count, not a cursor: in the bullseye bed
/// `Bed::journal_cursor()` gave a cursor (from `journalctl -n 1`) whose `--after-cursor` query
/// missed the entries written after it.
fn wait_new_event(bed: &Bed, before: usize, event: &str, extra: &[(&str, &str)], t: Duration) {
    let start = Instant::now();
    while events(bed, event, extra) <= before {
        assert!(
            start.elapsed() < t,
            "no new {event} {extra:?} within {t:?}\n{}",
            bed.pleg_guard_diagnostics()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls `cond` every 500 ms until it holds or `timeout` passes; whether it held.
fn wait_until_ok(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// The smoke set on one Debian release; `systemd` is the major version its bed must run.
fn smoke(suite: &str, systemd: u32) {
    let Some(env) = require_bed_suite(suite) else {
        return;
    };
    let deb = deb().to_path_buf();
    let bed = Bed::boot(
        &env,
        BedOptions {
            pleg_guard_binary: None,
            extra_binds: vec![
                (deb.parent().unwrap().to_path_buf(), "/pkg".to_string()),
                ("/run".into(), "/hostrun".to_owned()),
            ],
            ..Default::default()
        },
    );
    let version = bed.sh_ok("systemctl --version | head -n 1");
    eprintln!(
        "{suite}: {version}, glibc {}",
        bed.sh_ok("ldd --version | head -n 1")
    );
    assert!(
        version.starts_with(&format!("systemd {systemd} ")),
        "{suite} bed runs {version:?}, not systemd {systemd}"
    );

    // --- install: the packaged binary, unit and drop-in, started by the package ----------------
    bed.write_file("/etc/pleg-guard/config.d/90-test.toml", CONFIG);
    let name = deb.file_name().unwrap().to_str().unwrap();
    let out = bed.sh_ok(&format!(
        "DEBIAN_FRONTEND=noninteractive dpkg -i /pkg/{name} </dev/null 2>&1"
    ));
    eprintln!("dpkg -i on {suite}:\n{out}");
    assert!(
        out.contains(&format!("systemd {systemd}: system-call allow-list linked")),
        "{out}"
    );
    // Type=notify: active means READY=1 arrived
    bed.wait_active(UNIT, "active", secs(60));
    assert_eq!(bed.unit_property(UNIT, "Type"), "notify");
    assert_eq!(bed.unit_property(UNIT, "NRestarts"), "0");
    bed.sh_ok("test -d /var/lib/pleg-guard");
    assert_eq!(
        bed.sh_ok("readlink /etc/systemd/system/pleg-guard.service.d/50-syscall-allowlist.conf"),
        "/usr/lib/pleg-guard/syscall-allowlist.conf"
    );
    // the allow-list is in force: SystemCallFilter is an allow-list holding read(2) and kill(2)
    let filter = bed.unit_property(UNIT, "SystemCallFilter");
    let words: Vec<&str> = filter.split_whitespace().collect();
    assert!(
        !filter.starts_with('~') && words.contains(&"read") && words.contains(&"kill"),
        "SystemCallFilter on {suite}: {filter}"
    );
    assert!(
        !words.contains(&"reboot"),
        "@privileged not denied: {filter}"
    );
    assert_eq!(bed.unit_property(UNIT, "ProtectSystem"), "strict");

    // --- healthy ------------------------------------------------------------------------------
    // dockerd is the host's, shared with every bed (and other test processes): hold the docker
    // lock while docker must answer and while it is stopped
    let docker = docker_lock();
    // A round taken before the lock was ours may have met a dockerd another test had stopped:
    // wait for a round with every target answering (the assertions below say which did not).
    let answering = |s: &serde_json::Value| {
        ["dbus", "systemd", "logind", "docker", "kubelet"]
            .iter()
            .all(|t| matches!(s["targets"][*t]["state"].as_str(), Some("ok" | "slow")))
    };
    let _ = wait_until_ok(secs(30), || {
        bed.sh("pleg-guard status >/dev/null").status.code() == Some(0)
            && answering(&bed.status_json())
    });
    let status = bed.status_json();
    assert_eq!(status["state"], "healthy", "{status:#}");
    for t in ["dbus", "systemd", "logind", "docker", "kubelet"] {
        let st = status["targets"][t]["state"].as_str().unwrap_or("?");
        assert!(
            matches!(st, "ok" | "slow"),
            "{suite}: {t} is {st}: {status:#}"
        );
    }
    if let Some(targets) = status["targets"].as_object() {
        for (t, v) in targets {
            let st = v["state"].as_str().unwrap_or("?");
            assert!(
                matches!(st, "ok" | "slow" | "absent"),
                "{suite}: {t} is {st}: {status:#}"
            );
        }
    }

    // --- docker fault -------------------------------------------------------------------------
    {
        // from a healthy node (another bed's docker fault may just have ended: dockerd is
        // shared), so the fault makes a new finding
        wait_until("a healthy node before the docker fault", secs(30), || {
            bed.sh("pleg-guard status >/dev/null").status.code() == Some(0)
        });
        let findings = events(
            &bed,
            "finding",
            &[("PLEG_GUARD_FINDING", "docker-unresponsive")],
        );
        let recovered = events(&bed, "target-recovered", &[("PLEG_GUARD_TARGET", "docker")]);
        let stopped = stop_dockerd();
        wait_new_event(
            &bed,
            findings,
            "finding",
            &[("PLEG_GUARD_FINDING", "docker-unresponsive")],
            secs(30),
        );
        stopped.cont();
        wait_new_event(
            &bed,
            recovered,
            "target-recovered",
            &[("PLEG_GUARD_TARGET", "docker")],
            secs(30),
        );
    }
    drop(docker);

    // --- logind fault, cured by a reexec -------------------------------------------------------
    let findings = events(
        &bed,
        "finding",
        &[("PLEG_GUARD_FINDING", "logind-unresponsive")],
    );
    let reexec = [("PLEG_GUARD_ACTION", "daemon-reexec")];
    let (succeeded, cleared) = (
        events(&bed, "action-succeeded", &reexec),
        events(&bed, "symptom-cleared", &reexec),
    );
    let reexecs = bed.reexec_count();
    bed.resume_logind_on_reexec();
    bed.stop_logind();
    wait_new_event(
        &bed,
        findings,
        "finding",
        &[("PLEG_GUARD_FINDING", "logind-unresponsive")],
        secs(30),
    );
    wait_new_event(&bed, succeeded, "action-succeeded", &reexec, secs(40));
    wait_new_event(&bed, cleared, "symptom-cleared", &reexec, secs(30));
    assert_eq!(bed.reexec_count(), reexecs + 1, "exactly one reexec");
    // (not the overall state: another test may hold dockerd stopped by now)
    wait_until("logind ok again", secs(20), || {
        bed.status_json()["targets"]["logind"]["state"] == "ok"
    });
    // the daemon survived all of it under the hardened unit
    assert_eq!(bed.unit_property(UNIT, "NRestarts"), "0");
    assert_eq!(bed.sh_ok(&format!("systemctl is-active {UNIT}")), "active");
}

#[test]
fn bullseye_deb_installs_and_passes_the_smoke_set() {
    smoke("bullseye", 247);
}

#[test]
fn trixie_deb_installs_and_passes_the_smoke_set() {
    smoke("trixie", 257);
}
