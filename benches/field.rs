//! Field benchmark: how fast pleg-guard sees and cures each fault on the real test bed, and
//! what it costs the node. Not part of the pass/fail suite.
//!
//! ```text
//! cargo bench --bench field                      # everything (needs root, like the bed tests)
//! PLEG_BENCH_REPEAT=1 PLEG_BENCH_HANG_SECS=60 PLEG_BENCH_FOOTPRINT_SECS=60 cargo bench --bench field
//! ```
//!
//! Env knobs (defaults in brackets):
//! - `PLEG_BENCH_REPEAT` [3]: runs per detection / repair scenario (a fresh bed each run);
//! - `PLEG_BENCH_ONLY` [detect,repair,footprint,hang,startup,forecast]: sections to run;
//! - `PLEG_BENCH_SERIAL_RATE` [300]: replies/s PID 1 sends in the forecast section (a busy node);
//! - `PLEG_BENCH_SERIAL_SECS` [120]: the window in which pleg-guard's own serials are counted;
//! - `PLEG_BENCH_PROFILES` [default,fast]: setting profiles for detection and repair;
//! - `PLEG_BENCH_FAULTS` [logind,dbus,dockerd,pid1-wedged,dead-containers,kubelet-wedged]: the
//!   faults the detection section injects (e.g. `logind,dbus,dockerd,pid1-wedged`: the hangs
//!   only; `pid1-wedged` needs the affected bed);
//! - `PLEG_BENCH_HANG_SECS` [600]: how long logind stays stopped in the long-hang section;
//! - `PLEG_BENCH_FOOTPRINT_SECS` [120]: the CPU measuring window (extrapolated to an hour) of
//!   the footprint section, which measures two settings: defaults (no `[fleet]`) and defaults
//!   plus a `[fleet]` on a real 3-member TLS etcd cluster (tests/support/etcd.rs);
//! - `PLEG_BENCH_STARTS` [5]: `systemctl start` samples per repeat in the start-up section;
//! - `PLEG_BENCH_OUT` [bench-results/field.json];
//! - `PLEG_BENCH_BINARY` [the bench build's]: the pleg-guard in the detection, repair and
//!   footprint beds, e.g. the
//!   packaged one (`target/x86_64-unknown-linux-gnu/release/pleg-guard` after
//!   packaging/build-deb.sh).
//!
//! The daemon under test is the binary cargo builds for this bench (`CARGO_BIN_EXE_pleg-guard`,
//! the bench profile = release settings: `target/release/pleg-guard`), bound into each bed.
//! Times are wall-clock microseconds: the journal's `__REALTIME_TIMESTAMP` against the
//! injection time read with `date +%s%6N` inside the bed in the same shell that injects the
//! fault (beds share the host clock, so host-side injections — dockerd, docker rm — use the
//! host clock taken right before the call). Faults are injected at a random phase of the probe
//! interval, as on a real node.

#[path = "support/stats.rs"]
mod bench_stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bench_stats::{panic_message, stats};
use serde_json::{Map, Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// settings
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Profile {
    name: &'static str,
    interval: &'static str,
    interval_s: f64,
    unhealthy_after: u32,
    timeout: &'static str,
    timeout_s: f64,
    /// Settle times of purge, reexec, restart-kubelet (None: built-in defaults 30 s/20 s/90 s).
    settle: Option<(&'static str, &'static str, &'static str)>,
}

const DEFAULT: Profile = Profile {
    name: "default",
    interval: "10s",
    interval_s: 10.0,
    unhealthy_after: 3,
    timeout: "5s",
    timeout_s: 5.0,
    settle: None,
};
const FAST: Profile = Profile {
    name: "fast",
    interval: "1s",
    interval_s: 1.0,
    unhealthy_after: 2,
    timeout: "1s",
    timeout_s: 1.0,
    settle: Some(("2s", "3s", "5s")),
};

impl Profile {
    /// The detection target: unhealthy_after x interval + timeout + 1 s.
    fn target_s(&self) -> f64 {
        f64::from(self.unhealthy_after) * self.interval_s + self.timeout_s + 1.0
    }

    /// The confirmation target of a hang (the re-ask): unhealthy_after x timeout + 1 s from the
    /// start of the first failed call.
    fn confirm_target_s(&self) -> f64 {
        f64::from(self.unhealthy_after) * self.timeout_s + 1.0
    }

    fn config(&self, mode: &str, extra_reexec: &str) -> String {
        let mut s = format!(
            "mode = \"{mode}\"\ninterval = \"{}\"\nstartup_grace = \"0s\"\n\n[probe]\ntimeout = \"{}\"\nunhealthy_after = {}\n",
            self.interval, self.timeout, self.unhealthy_after
        );
        if self.timeout_s < 1.0 + f64::EPSILON {
            s.push_str("slow_after = \"500ms\"\n");
        }
        let (p, r, k) = self.settle.unwrap_or(("30s", "20s", "90s"));
        s.push_str(&format!(
            "\n[actions.purge_dead_containers]\nsettle = \"{p}\"\n\n[actions.daemon_reexec]\nsettle = \"{r}\"\n{extra_reexec}\n[actions.restart_kubelet]\nsettle = \"{k}\"\n"
        ));
        s
    }
}

struct Knobs {
    repeat: usize,
    only: Vec<String>,
    profiles: Vec<Profile>,
    faults: Vec<String>,
    hang_secs: u64,
    footprint_secs: u64,
    starts: usize,
    serial_rate: u64,
    serial_secs: u64,
    out: PathBuf,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn knobs() -> Knobs {
    let list = |name: &str, default: &str| -> Vec<String> {
        std::env::var(name)
            .unwrap_or_else(|_| default.to_string())
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let profiles = list("PLEG_BENCH_PROFILES", "default,fast")
        .iter()
        .filter_map(|p| match p.as_str() {
            "default" => Some(DEFAULT),
            "fast" => Some(FAST),
            other => {
                eprintln!("PLEG_BENCH_PROFILES: unknown profile {other:?} ignored");
                None
            }
        })
        .collect();
    Knobs {
        repeat: env_num("PLEG_BENCH_REPEAT", 3).max(1) as usize,
        only: list(
            "PLEG_BENCH_ONLY",
            "detect,repair,footprint,hang,startup,forecast",
        ),
        profiles,
        faults: list(
            "PLEG_BENCH_FAULTS",
            "logind,dbus,dockerd,pid1-wedged,dead-containers,kubelet-wedged",
        ),
        hang_secs: env_num("PLEG_BENCH_HANG_SECS", 600),
        footprint_secs: env_num("PLEG_BENCH_FOOTPRINT_SECS", 120).max(10),
        starts: env_num("PLEG_BENCH_STARTS", 5).max(1) as usize,
        serial_rate: env_num("PLEG_BENCH_SERIAL_RATE", 300).clamp(10, 5000),
        serial_secs: env_num("PLEG_BENCH_SERIAL_SECS", 120).max(20),
        out: std::env::var("PLEG_BENCH_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench-results/field.json")
            }),
    }
}

// ---------------------------------------------------------------------------------------------
// small helpers
// ---------------------------------------------------------------------------------------------

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

/// A pseudo-random fraction in [0, 1) (sub-second clock bits; good enough for a phase).
fn random_fraction() -> f64 {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let x =
        (u64::from(n) ^ (u64::from(std::process::id()) << 17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Sleeps a random part of one interval, so the fault lands at a random phase of the rounds.
fn random_phase(p: &Profile) {
    std::thread::sleep(Duration::from_secs_f64(p.interval_s * random_fraction()));
}

fn ts(e: &Map<String, Value>) -> Option<u64> {
    field(e, "__REALTIME_TIMESTAMP").and_then(|s| s.parse().ok())
}

fn mono(e: &Map<String, Value>) -> Option<u64> {
    field(e, "__MONOTONIC_TIMESTAMP").and_then(|s| s.parse().ok())
}

/// Runs `script` in the bed; its first output line must be `date +%s%6N`. Returns that time.
fn bed_stamp(bed: &Bed, script: &str) -> u64 {
    let out = bed.sh_ok(&format!("date +%s%6N\n{script}"));
    out.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no timestamp from the bed: {out:?}"))
}

/// Polls pleg-guard's journal after `cursor` until an entry matches; None after `timeout`.
fn poll_event(
    bed: &Bed,
    cursor: &str,
    timeout: Duration,
    pred: impl Fn(&Map<String, Value>) -> bool,
) -> Option<Map<String, Value>> {
    let after = format!("--after-cursor={cursor}");
    let start = Instant::now();
    loop {
        if let Some(e) = bed
            .journal(&["-u", "pleg-guard", &after])
            .into_iter()
            .find(|e| pred(e))
        {
            return Some(e);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn is_event(e: &Map<String, Value>, events: &[&str]) -> bool {
    field(e, "PLEG_GUARD_EVENT").is_some_and(|v| events.contains(&v))
}

fn secs_since(t0_us: u64, t_us: u64) -> f64 {
    (t_us as f64 - t0_us as f64) / 1e6
}

/// Fails unless no dead container exists on the host (a leftover would make the finding
/// appear before the injection). Tries to clean up stale test leftovers first.
fn ensure_no_dead_containers() {
    cleanup_leftover_containers();
    let dead = docker_ok(&["ps", "-aq", "--filter", "status=dead"]);
    assert!(
        dead.is_empty(),
        "the host has dead containers that are not ours ({dead}); remove them first"
    );
}

/// Like support's DeadContainer, but the time the container turned dead is taken right before
/// the `docker rm` that leaves it dead.
struct TimedDead {
    name: String,
    immutable: PathBuf,
    at_us: u64,
}

impl TimedDead {
    fn create() -> TimedDead {
        let name = unique_name("bench-dead");
        docker_ok(&["run", "--name", &name, IMAGE, "sh", "-c", "echo > /f"]);
        let upper = docker_ok(&["inspect", "-f", "{{.GraphDriver.Data.UpperDir}}", &name]);
        let immutable = PathBuf::from(upper).join("f");
        let mut d = TimedDead {
            name,
            immutable,
            at_us: 0,
        };
        host_ok("chattr", &["+i", &d.immutable.to_string_lossy()]);
        d.at_us = now_us();
        let o = docker(&["rm", &d.name]);
        assert!(!o.status.success(), "docker rm succeeded despite chattr +i");
        assert_eq!(docker_state(&d.name).as_deref(), Some("dead"));
        d
    }
    fn release(&self) {
        host_ok("chattr", &["-i", &self.immutable.to_string_lossy()]);
    }
}

impl Drop for TimedDead {
    fn drop(&mut self) {
        // quiet: the file is gone once pleg-guard's purge removed the container
        let _ = Command::new("chattr")
            .arg("-i")
            .arg(&self.immutable)
            .stderr(std::process::Stdio::null())
            .status();
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.name])
            .output();
    }
}

// ---------------------------------------------------------------------------------------------
// statistics
// ---------------------------------------------------------------------------------------------

fn stats_json(v: &[f64]) -> Value {
    match stats(v) {
        Some(s) => json!({"n": s.n, "min": s.min, "median": s.median, "max": s.max, "samples": v}),
        None => json!({"n": 0, "samples": []}),
    }
}

fn fmt_stats(v: &[f64], unit: &str, prec: usize) -> String {
    match stats(v) {
        Some(s) => format!(
            "{:.p$} / {:.p$} / {:.p$} {unit} (n={})",
            s.min,
            s.median,
            s.max,
            s.n,
            p = prec
        ),
        None => "no sample".to_string(),
    }
}

/// Runs one sample; a panic (bed trouble, timeout) becomes an error string.
fn attempt<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
        let short = panic_message(&*e, 600);
        eprintln!("!! {what}: {short}");
        format!("{what}: {short}")
    })
}

// ---------------------------------------------------------------------------------------------
// faults
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Logind,
    Dbus,
    Dockerd,
    Dead,
    Kubelet,
    /// PID 1 on the affected bed, its bus serial fast-forwarded to the last one: the real
    /// systemd#11809 wedge (the bus answers, PID 1 on the bus does not).
    Pid1Wedge,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Logind => "logind stopped",
            Fault::Dbus => "dbus-daemon stopped",
            Fault::Dockerd => "dockerd stopped",
            Fault::Dead => "Dead container",
            Fault::Kubelet => "kubelet wedged (PLEG)",
            Fault::Pid1Wedge => "PID 1 wedged on the bus",
        }
    }
    fn key(self) -> &'static str {
        match self {
            Fault::Logind => "logind",
            Fault::Dbus => "dbus",
            Fault::Dockerd => "dockerd",
            Fault::Dead => "dead-containers",
            Fault::Kubelet => "kubelet-wedged",
            Fault::Pid1Wedge => "pid1-wedged",
        }
    }
    /// A hang (a call that gets no answer): what the re-ask confirms.
    fn is_hang(self) -> bool {
        matches!(
            self,
            Fault::Logind | Fault::Dbus | Fault::Dockerd | Fault::Pid1Wedge
        )
    }
    fn needs_docker(self) -> bool {
        matches!(self, Fault::Dockerd | Fault::Dead)
    }
    /// Does this journal entry report the fault?
    fn detected_by(self, e: &Map<String, Value>) -> bool {
        if !is_event(e, &["target-unhealthy", "finding"]) {
            return false;
        }
        let target = field(e, "PLEG_GUARD_TARGET");
        let finding = field(e, "PLEG_GUARD_FINDING");
        match self {
            Fault::Logind => target == Some("logind") || finding == Some("logind-unresponsive"),
            Fault::Dbus => target == Some("dbus") || finding == Some("bus-unresponsive"),
            Fault::Dockerd => target == Some("docker") && finding != Some("dead-containers"),
            Fault::Dead => finding == Some("dead-containers"),
            Fault::Kubelet => {
                target == Some("kubelet") || finding == Some("kubelet-pleg-unhealthy")
            }
            Fault::Pid1Wedge => target == Some("systemd") || finding == Some("systemd-bus-wedge"),
        }
    }
}

/// What a fault leaves for the end of the run (its Drop undoes the fault).
#[allow(dead_code)]
enum Injected {
    Nothing,
    Dockerd(DockerdStopped),
    Dead(TimedDead),
}

/// Injects `f` in `bed`; returns the injection time (µs since the epoch) and the guard.
fn inject(bed: &Bed, f: Fault, released: bool) -> (u64, Injected) {
    match f {
        Fault::Logind => {
            let pid = bed.main_pid("systemd-logind.service");
            (
                bed_stamp(bed, &format!("kill -STOP {pid}")),
                Injected::Nothing,
            )
        }
        Fault::Dbus => {
            let pid = bed.main_pid("dbus.service");
            (
                bed_stamp(bed, &format!("kill -STOP {pid}")),
                Injected::Nothing,
            )
        }
        Fault::Kubelet => (
            bed_stamp(bed, "touch /run/standin-kubelet/wedged"),
            Injected::Nothing,
        ),
        Fault::Dockerd => {
            let t = now_us();
            (t, Injected::Dockerd(stop_dockerd()))
        }
        Fault::Pid1Wedge => {
            let t = now_us();
            bed.fast_forward_pid1_serial(0xFFFF_FFFF);
            (t, Injected::Nothing)
        }
        Fault::Dead => {
            let d = TimedDead::create();
            if released {
                d.release();
            }
            (d.at_us, Injected::Dead(d))
        }
    }
}

fn boot(env: &BedEnv, docker: bool) -> Bed {
    Bed::boot(
        env,
        BedOptions {
            docker,
            pleg_guard_binary: Some(daemon_under_test()),
            ..Default::default()
        },
    )
}

/// `PLEG_BENCH_BINARY` (e.g. the packaged build, target/<triple>/release/pleg-guard), else the
/// binary cargo built for this bench.
fn daemon_under_test() -> PathBuf {
    std::env::var_os("PLEG_BENCH_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(built_pleg_guard)
}

// ---------------------------------------------------------------------------------------------
// sections
// ---------------------------------------------------------------------------------------------

const ALL_FAULTS: [Fault; 6] = [
    Fault::Logind,
    Fault::Dbus,
    Fault::Dockerd,
    Fault::Pid1Wedge,
    Fault::Dead,
    Fault::Kubelet,
];

struct Detection {
    latency_s: f64,
    event: String,
    /// target-unhealthy's "N s since the first one started": from the start of the first
    /// failed call to the confirmation.
    confirmed_s: Option<f64>,
}

/// The seconds in target-unhealthy's "…, 15.0 s since the first one started: …".
fn since_first_call(e: &Map<String, Value>) -> Option<f64> {
    let m = field(e, "MESSAGE")?;
    let (head, _) = m.split_once(" s since the first one started")?;
    head.rsplit(' ').next()?.parse().ok()
}

fn detect_once(env: &BedEnv, p: &Profile, f: Fault) -> Option<Detection> {
    let _docker = f.needs_docker().then(docker_lock);
    if f == Fault::Dead {
        ensure_no_dead_containers();
    }
    let bed = if f == Fault::Pid1Wedge {
        let affected = require_affected_bed().expect("no affected bed");
        Bed::boot(&affected, BedOptions::affected_with_pleg_guard())
    } else {
        boot(env, f.needs_docker())
    };
    // observe: detection only, nothing repaired behind our back
    bed.install_pleg_guard(&p.config("observe", ""));
    bed.start_pleg_guard();
    if f == Fault::Pid1Wedge {
        bed.pid1_bus_object();
    }
    random_phase(p);
    let cursor = bed.journal_cursor();
    let (t0, guard) = inject(&bed, f, false);
    let limit = Duration::from_secs_f64(p.target_s() * 3.0 + 30.0);
    let e = poll_event(&bed, &cursor, limit, |e| f.detected_by(e));
    let unhealthy = poll_event(&bed, &cursor, Duration::from_secs(2), |e| {
        is_event(e, &["target-unhealthy"]) && f.detected_by(e)
    });
    drop(guard);
    let e = e?;
    Some(Detection {
        confirmed_s: unhealthy.as_ref().and_then(since_first_call),
        latency_s: secs_since(t0, ts(&e)?),
        event: format!(
            "{} {}",
            field(&e, "PLEG_GUARD_EVENT").unwrap_or(""),
            field(&e, "PLEG_GUARD_FINDING")
                .or(field(&e, "PLEG_GUARD_TARGET"))
                .unwrap_or("")
        ),
    })
}

struct Repair {
    detect_s: f64,
    acted_s: f64,
    cleared_s: f64,
}

fn repair_once(env: &BedEnv, p: &Profile, f: Fault) -> Option<Repair> {
    let _docker = f.needs_docker().then(docker_lock);
    if f == Fault::Dead {
        ensure_no_dead_containers();
    }
    let bed = boot(env, f.needs_docker());
    bed.install_pleg_guard(&p.config("repair", "when = \"always\"\n"));
    bed.start_pleg_guard();
    if f == Fault::Logind {
        bed.resume_logind_on_reexec();
    }
    random_phase(p);
    let cursor = bed.journal_cursor();
    let (t0, _guard) = inject(&bed, f, true);
    let action = match f {
        Fault::Dead => "purge-dead-containers",
        Fault::Logind => "daemon-reexec",
        Fault::Kubelet => "restart-kubelet",
        _ => unreachable!("no cure benchmarked for {}", f.name()),
    };
    let settle = match (p.settle, f) {
        (Some((s, _, _)), Fault::Dead) | (Some((_, s, _)), Fault::Logind) => humantime_secs(s),
        (Some((_, _, s)), _) => humantime_secs(s),
        (None, Fault::Dead) => 30.0,
        (None, Fault::Logind) => 20.0,
        (None, _) => 90.0,
    };
    let limit = Duration::from_secs_f64(p.target_s() * 3.0 + settle + 60.0);
    let detected = poll_event(&bed, &cursor, limit, |e| f.detected_by(e))?;
    let acted = poll_event(&bed, &cursor, limit, |e| {
        is_event(e, &["action-succeeded"]) && field(e, "PLEG_GUARD_ACTION") == Some(action)
    })?;
    let cleared = poll_event(&bed, &cursor, limit, |e| {
        is_event(e, &["symptom-cleared", "symptom-persisted"])
            && field(e, "PLEG_GUARD_ACTION") == Some(action)
    })?;
    if field(&cleared, "PLEG_GUARD_EVENT") != Some("symptom-cleared") {
        eprintln!("!! {}: symptom persisted", f.name());
        return None;
    }
    Some(Repair {
        detect_s: secs_since(t0, ts(&detected)?),
        acted_s: secs_since(t0, ts(&acted)?),
        cleared_s: secs_since(t0, ts(&cleared)?),
    })
}

fn humantime_secs(s: &str) -> f64 {
    s.trim_end_matches('s').parse().unwrap_or(0.0)
}

/// One sample of the daemon's footprint from /proc inside the bed.
#[derive(Clone, Copy, Default)]
struct ProcSample {
    at: f64,
    rss_kib: u64,
    hwm_kib: u64,
    threads: u64,
    fds: u64,
    /// utime + stime, clock ticks (coarse: 10 ms)
    own_ticks: u64,
    /// cutime + cstime (waited-for children: journalctl, dpkg-query ...), clock ticks
    child_ticks: u64,
    /// on-CPU time of the daemon from /proc/PID/schedstat, ns (precise)
    own_ns: u64,
    /// on-CPU time of every process in the unit's cgroup (the daemon and its long-running
    /// `journalctl --follow`), ns
    unit_ns: u64,
}

fn sample(bed: &Bed, pid: u32, start: Instant) -> ProcSample {
    let out = bed.sh_ok(&format!(
        "echo \"STAT $(cat /proc/{pid}/stat)\"; echo \"SCHED $(cat /proc/{pid}/schedstat)\"; \
         grep -E '^(VmRSS|VmHWM|Threads):' /proc/{pid}/status; echo \"FDS $(ls /proc/{pid}/fd | wc -l)\"; \
         for p in $(cat /sys/fs/cgroup/systemd/system.slice/pleg-guard.service/cgroup.procs \
                        /sys/fs/cgroup/system.slice/pleg-guard.service/cgroup.procs 2>/dev/null); do \
           cut -d' ' -f1 /proc/$p/schedstat 2>/dev/null; done | awk '{{s+=$1}} END {{print \"UNIT\", s+0}}'"
    ));
    let mut s = ProcSample {
        at: start.elapsed().as_secs_f64(),
        ..ProcSample::default()
    };
    let num = |l: &str, i: usize| {
        l.split_whitespace()
            .nth(i)
            .and_then(|v| v.parse::<u64>().ok())
    };
    for l in out.lines() {
        if let Some(stat) = l.strip_prefix("STAT ") {
            let rest: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().collect())
                .unwrap_or_default();
            // after ")": state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
            let n = |i: usize| rest.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            s.own_ticks = n(11) + n(12);
            s.child_ticks = n(13) + n(14);
        } else if let Some(v) = l.strip_prefix("UNIT ") {
            s.unit_ns = num(v, 0).unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("SCHED ") {
            s.own_ns = num(v, 0).unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("FDS ") {
            s.fds = num(v, 0).unwrap_or(0);
        } else if l.starts_with("VmRSS:") {
            s.rss_kib = num(l, 1).unwrap_or(0);
        } else if l.starts_with("VmHWM:") {
            s.hwm_kib = num(l, 1).unwrap_or(0);
        } else if l.starts_with("Threads:") {
            s.threads = num(l, 1).unwrap_or(0);
        }
    }
    s
}

struct Footprint {
    samples: Vec<ProcSample>,
    window_s: f64,
    clk_tck: f64,
    /// Where the resident memory is at the end of the window: KiB per kind of mapping.
    rss_by_mapping: Vec<(String, u64)>,
}

/// The daemon's resident memory by kind of mapping, from /proc/PID/smaps: its own code and
/// read-only data (file pages it touched), its relocated and writable data, the heap, other
/// anonymous memory (allocator arenas of other threads, thread stacks), shared libraries,
/// the main stack.
fn rss_by_mapping(bed: &Bed, pid: u32) -> Vec<(String, u64)> {
    const AWK: &str = r#"/^[0-9a-f]+-[0-9a-f]+ / {
        name = $6
        if (name ~ /pleg-guard$/) kind = ($2 ~ /x/) ? "binary code" : "binary data"
        else if (name == "[heap]") kind = "heap"
        else if (name == "[stack]") kind = "stack"
        else if (name == "") kind = "other anonymous"
        else if (name ~ /\.so/) kind = "libraries"
        else kind = "other"
        next
    }
    /^Rss:/ { kib[kind] += $2 }
    END { for (k in kib) print k ": " kib[k] }"#;
    let out = bed.sh_ok(&format!("awk '{AWK}' /proc/{pid}/smaps"));
    let mut kinds: Vec<(String, u64)> = out
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(": ")?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    kinds
}

fn fmt_mapping(kinds: &[(String, u64)]) -> String {
    kinds
        .iter()
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / 1024.0))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Footprint {
    /// The daemon's own CPU (schedstat, ns precision), extrapolated to seconds per hour.
    fn own_cpu_per_hour(&self) -> f64 {
        let (a, b) = (self.samples[0], self.samples[self.samples.len() - 1]);
        (b.own_ns - a.own_ns) as f64 / 1e9 * 3600.0 / self.window_s
    }
    /// Every process of the unit (schedstat: the daemon and its `journalctl --follow`) plus
    /// the children it ran and reaped (cutime + cstime: clock ticks, 10 ms resolution),
    /// extrapolated to seconds per hour.
    fn total_cpu_per_hour(&self) -> f64 {
        let (a, b) = (self.samples[0], self.samples[self.samples.len() - 1]);
        b.unit_ns.saturating_sub(a.unit_ns) as f64 / 1e9 * 3600.0 / self.window_s
            + (b.child_ticks - a.child_ticks) as f64 / self.clk_tck * 3600.0 / self.window_s
    }
}

/// The daemon's footprint on a healthy bed with docker over `window` seconds: at default
/// settings, or with a `[fleet]` on `etcd` (a real 3-member TLS cluster, bridged into the bed).
fn footprint_once(
    env: &BedEnv,
    window: u64,
    fleet: Option<&support::etcd::EtcdCluster>,
) -> Footprint {
    let _docker = docker_lock();
    let bed = boot(env, true);
    let _bridge = fleet.map(|etcd| {
        support::fleet_bed::give_certificates(&bed, etcd);
        support::fleet_bed::bridge(&bed, etcd)
    });
    let fleet_table = fleet
        .map(|etcd| support::fleet_bed::fleet_toml(etcd, "footprint", &bed.name))
        .unwrap_or_default();
    bed.install_pleg_guard(&format!("{}\n{fleet_table}", DEFAULT.config("repair", "")));
    bed.start_pleg_guard();
    let pid = bed.main_pid("pleg-guard.service");
    let clk_tck: f64 = bed.sh_ok("getconf CLK_TCK").parse().unwrap_or(100.0);
    // settle in: a few rounds first
    std::thread::sleep(Duration::from_secs(15));
    let start = Instant::now();
    let mut samples = vec![sample(&bed, pid, start)];
    while start.elapsed().as_secs() < window {
        std::thread::sleep(Duration::from_secs(10).min(Duration::from_secs(
            window.saturating_sub(start.elapsed().as_secs()).max(1),
        )));
        samples.push(sample(&bed, pid, start));
    }
    let window_s = samples[samples.len() - 1].at - samples[0].at;
    assert_eq!(bed.main_pid("pleg-guard.service"), pid, "daemon restarted");
    let rss_by_mapping = rss_by_mapping(&bed, pid);
    Footprint {
        samples,
        window_s,
        clk_tck,
        rss_by_mapping,
    }
}

/// One planned reexec before the overflow on the affected bed.
struct Lead {
    /// Serials PID 1 had left when pleg-guard started the reexec.
    serials_left: u64,
    /// The same at the load's rate: how long before the overflow the cure came.
    lead_s: f64,
    /// From crossing the rule's threshold to `action-started`.
    reaction_s: f64,
}

/// Default settings but for startup_grace, PID 1 on the affected sd-bus at `rate` replies/s,
/// its serial fast-forwarded to 30 s before the rule in `preempt` fires. The threshold crossing
/// is computed from the load's rate; the lead time is what is left at the reexec.
fn lead_once(env: &BedEnv, rate: u64, headroom: u64, before_s: u64) -> Option<Lead> {
    let bed = Bed::boot(env, BedOptions::affected_with_pleg_guard());
    bed.install_pleg_guard(&format!(
        "startup_grace = \"0s\"\n[actions.daemon_reexec]\nwhen = \"always\"\npreempt_headroom = {headroom}\npreempt_before = \"{before_s}s\"\n"
    ));
    // the rule fires at max(headroom, rate * before) serials left; start 30 s before that
    let threshold = headroom.max(rate * before_s);
    let start_left = threshold + rate * 30;
    bed.fast_forward_pid1_serial(SERIAL_MAX - start_left);
    let load = bed.bus_load(rate as f64);
    let t0 = Instant::now();
    bed.start_pleg_guard();
    // Poll the load's latest reply serial while waiting: after the reexec PID 1 starts again
    // near 0, so the highest serial seen is the one at the reexec.
    let mut last = 0u64;
    let (started, at) = loop {
        last = last.max(u64::from(load.last_serial()));
        let found = bed
            .pleg_guard_events("action-started", &[("PLEG_GUARD_ACTION", "daemon-reexec")])
            .into_iter()
            .next();
        if let Some(e) = found {
            break (e, t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > Duration::from_secs(180) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let message = field(&started, "MESSAGE").unwrap_or("").to_owned();
    load.stop();
    let serials_left = SERIAL_MAX.saturating_sub(last);
    eprintln!("   {message}");
    Some(Lead {
        serials_left,
        lead_s: serials_left as f64 / rate as f64,
        reaction_s: at - 30.0,
    })
}

/// Serials PID 1 sends per hour on a quiet bed, without and with pleg-guard (default settings).
fn own_serials(env: &BedEnv, window_s: u64) -> (f64, f64) {
    let bed = Bed::boot(env, BedOptions::with_pleg_guard());
    bed.install_pleg_guard("");
    std::thread::sleep(Duration::from_secs(3));
    let per_hour = |bed: &Bed| {
        let a = bed.pid1_reply_serial();
        std::thread::sleep(Duration::from_secs(window_s));
        let b = bed.pid1_reply_serial();
        // minus our own second call
        (b.saturating_sub(a).saturating_sub(1)) as f64 * 3600.0 / window_s as f64
    };
    let quiet = per_hour(&bed);
    bed.start_pleg_guard();
    std::thread::sleep(Duration::from_secs(12));
    let with = per_hour(&bed);
    (quiet, with)
}

struct Hang {
    samples: Vec<ProcSample>,
    secs: u64,
    clk_tck: f64,
}

fn hang(env: &BedEnv, secs_total: u64) -> Hang {
    // no docker: a 10-minute bed must not hold the docker lock other test runs need
    let bed = boot(env, false);
    bed.install_pleg_guard(&FAST.config("repair", "enabled = false\n"));
    bed.start_pleg_guard();
    let pid = bed.main_pid("pleg-guard.service");
    let clk_tck: f64 = bed.sh_ok("getconf CLK_TCK").parse().unwrap_or(100.0);
    let cursor = bed.journal_cursor();
    bed.stop_logind();
    let start = Instant::now();
    let mut samples = vec![sample(&bed, pid, start)];
    while start.elapsed().as_secs() < secs_total {
        std::thread::sleep(Duration::from_secs(5));
        samples.push(sample(&bed, pid, start));
        if samples.len() % 12 == 0 {
            let s = samples[samples.len() - 1];
            eprintln!(
                "   hang {:>4.0} s: rss {} KiB, threads {}, fds {}",
                s.at, s.rss_kib, s.threads, s.fds
            );
        }
    }
    assert_eq!(
        bed.main_pid("pleg-guard.service"),
        pid,
        "the daemon restarted during the hang (watchdog?)"
    );
    assert!(
        poll_event(&bed, &cursor, Duration::from_secs(1), |e| Fault::Logind
            .detected_by(e))
        .is_some(),
        "logind was never reported during the hang"
    );
    Hang {
        samples,
        secs: secs_total,
        clk_tck,
    }
}

struct Startup {
    systemctl_ms: f64,
    exec_to_ready_ms: f64,
    exec_to_log_ms: Option<f64>,
    log_to_ready_ms: Option<f64>,
}

fn startup(env: &BedEnv, n: usize) -> Vec<Startup> {
    let _docker = docker_lock();
    let bed = boot(env, true);
    bed.install_pleg_guard(&DEFAULT.config("repair", ""));
    let mut out = Vec::new();
    for i in 0..n {
        if i > 0 {
            bed.sh_ok("systemctl stop pleg-guard");
            // stay clear of the unit's start rate limit (5 starts in 10 s)
            std::thread::sleep(Duration::from_millis(2500));
        }
        let cursor = bed.journal_cursor();
        let o =
            bed.sh_ok("a=$(date +%s%6N); systemctl start pleg-guard; b=$(date +%s%6N); echo $a $b");
        let v: Vec<u64> = o
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let systemctl_ms = (v[1] - v[0]) as f64 / 1000.0;
        let props = bed.sh_ok(
            "systemctl show -p ExecMainStartTimestampMonotonic -p ActiveEnterTimestampMonotonic --value pleg-guard",
        );
        let m: Vec<u64> = props
            .lines()
            .filter_map(|x| x.trim().parse().ok())
            .collect();
        // `--value` prints in the unit's property order; take the smaller as exec
        let (exec, active) = (m[0].min(m[1]), m[0].max(m[1]));
        let starting = bed
            .journal(&["-u", "pleg-guard", &format!("--after-cursor={cursor}")])
            .into_iter()
            .find(|e| {
                field(e, "SYSLOG_IDENTIFIER") == Some("pleg-guard")
                    && field(e, "MESSAGE").is_some_and(|m| m.contains("starting"))
            });
        let log_mono = starting.as_ref().and_then(mono);
        out.push(Startup {
            systemctl_ms,
            exec_to_ready_ms: (active - exec) as f64 / 1000.0,
            exec_to_log_ms: log_mono.map(|l| (l as f64 - exec as f64) / 1000.0),
            log_to_ready_ms: log_mono.map(|l| (active as f64 - l as f64) / 1000.0),
        });
    }
    out
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported (use the env knobs).
    let k = knobs();
    let Some(env) = require_bed() else {
        eprintln!("field benchmark skipped: no bed (run as root)");
        return;
    };
    let wants = |s: &str| k.only.iter().any(|o| o == s);
    let mut report = Map::new();
    let mut table: Vec<String> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let mut verdicts: Vec<(String, bool)> = Vec::new();
    let started = Instant::now();

    report.insert(
        "meta".into(),
        json!({
            "binary": built_pleg_guard(),
            "repeat": k.repeat,
            "hang_secs": k.hang_secs,
            "footprint_secs": k.footprint_secs,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "started_at_us": now_us(),
        }),
    );
    table.push("reference points: kubelet PLEG threshold 180 s (node NotReady after 3 min); \
                node-problem-detector health check every 10 s, `docker ps` timeout 60 s, 2 min cooldown"
        .into());

    // --- detection --------------------------------------------------------------------------
    if wants("detect") {
        let mut det = Map::new();
        for p in &k.profiles {
            table.push(format!(
                "\nDETECTION (fault -> target-unhealthy/finding), profile {} (interval {}, unhealthy_after {}, timeout {}): target {:.0} s; min / median / max",
                p.name, p.interval, p.unhealthy_after, p.timeout, p.target_s()
            ));
            let mut per = Map::new();
            for f in ALL_FAULTS {
                if !k.faults.iter().any(|x| x == f.key()) {
                    continue;
                }
                let mut lat = Vec::new();
                let mut confirmed = Vec::new();
                let mut evs = BTreeMap::new();
                for r in 0..k.repeat {
                    eprintln!("== detect {} / {} / run {}", p.name, f.name(), r + 1);
                    match attempt(&format!("detect {} {}", p.name, f.name()), || {
                        detect_once(&env, p, f)
                    }) {
                        Ok(Some(d)) => {
                            eprintln!(
                                "   {:.2} s ({}; confirmed {:?} s after the first failed call started)",
                                d.latency_s, d.event, d.confirmed_s
                            );
                            lat.push(d.latency_s);
                            confirmed.extend(d.confirmed_s);
                            *evs.entry(d.event).or_insert(0) += 1;
                        }
                        Ok(None) => errors.push(format!(
                            "detect {} {}: not detected within the limit",
                            p.name,
                            f.name()
                        )),
                        Err(e) => errors.push(e),
                    }
                }
                let ok =
                    stats(&lat).is_some_and(|s| s.max <= p.target_s()) && lat.len() == k.repeat;
                verdicts.push((
                    format!("detect {} {} <= {:.0} s", p.name, f.name(), p.target_s()),
                    ok,
                ));
                table.push(format!(
                    "  {:<24} {:<36} {}  first event: {}",
                    f.name(),
                    fmt_stats(&lat, "s", 2),
                    if ok { "OK" } else { "MISS" },
                    evs.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
                if f.is_hang() {
                    let c_ok = stats(&confirmed).is_some_and(|s| s.max <= p.confirm_target_s())
                        && confirmed.len() == k.repeat;
                    verdicts.push((
                        format!(
                            "confirm {} {} <= {:.0} s after the first failed call",
                            p.name,
                            f.name(),
                            p.confirm_target_s()
                        ),
                        c_ok,
                    ));
                    table.push(format!(
                        "  {:<24} confirmed {:<26} {}  (first failed call -> target-unhealthy)",
                        "",
                        fmt_stats(&confirmed, "s", 2),
                        if c_ok { "OK" } else { "MISS" },
                    ));
                }
                let mut j = stats_json(&lat);
                j["confirmed_s"] = stats_json(&confirmed);
                j["target_s"] = json!(p.target_s());
                j["within_target"] = json!(ok);
                j["events"] = json!(evs);
                per.insert(f.key().into(), j);
            }
            det.insert(p.name.into(), Value::Object(per));
        }
        report.insert("detection".into(), Value::Object(det));
    }

    // --- repair -----------------------------------------------------------------------------
    if wants("repair") {
        let mut rep = Map::new();
        for p in &k.profiles {
            let (sp, sr, sk) = p.settle.unwrap_or(("30s", "20s", "90s"));
            table.push(format!(
                "\nREPAIR (fault -> action-succeeded -> symptom-cleared), profile {}; cleared includes the settle time (purge {sp}, reexec {sr}, restart-kubelet {sk}); min / median / max",
                p.name
            ));
            let mut per = Map::new();
            for f in [Fault::Dead, Fault::Logind, Fault::Kubelet] {
                let (mut d, mut a, mut c) = (Vec::new(), Vec::new(), Vec::new());
                for r in 0..k.repeat {
                    eprintln!("== repair {} / {} / run {}", p.name, f.name(), r + 1);
                    match attempt(&format!("repair {} {}", p.name, f.name()), || {
                        repair_once(&env, p, f)
                    }) {
                        Ok(Some(x)) => {
                            eprintln!(
                                "   detected {:.2} s, acted {:.2} s, cleared {:.2} s",
                                x.detect_s, x.acted_s, x.cleared_s
                            );
                            d.push(x.detect_s);
                            a.push(x.acted_s);
                            c.push(x.cleared_s);
                        }
                        Ok(None) => errors.push(format!(
                            "repair {} {}: no cure within the limit",
                            p.name,
                            f.name()
                        )),
                        Err(e) => errors.push(e),
                    }
                }
                let label = match f {
                    Fault::Logind => "logind stopped (reexec)",
                    Fault::Dead => "Dead container (purge)",
                    _ => "kubelet wedged (restart)",
                };
                table.push(format!(
                    "  {label:<24} action done {}   cleared {}",
                    fmt_stats(&a, "s", 1),
                    fmt_stats(&c, "s", 1)
                ));
                per.insert(
                    f.key().into(),
                    json!({"detected_s": stats_json(&d), "action_succeeded_s": stats_json(&a), "symptom_cleared_s": stats_json(&c)}),
                );
            }
            rep.insert(p.name.into(), Value::Object(per));
        }
        report.insert("repair".into(), Value::Object(rep));
    }

    // --- footprint --------------------------------------------------------------------------
    if wants("footprint") {
        // the fleet setting needs a real etcd cluster; without one it is reported as an error
        let etcd = support::etcd::EtcdCluster::start(3)
            .map_err(|e| errors.push(format!("footprint with [fleet]: etcd cluster: {e}")))
            .ok();
        let settings: [(&str, &str, Option<&support::etcd::EtcdCluster>, f64); 2] = [
            ("default", "default settings, no [fleet]", None, 8.0),
            (
                "fleet",
                "default settings + [fleet] (3-member TLS etcd)",
                etcd.as_ref(),
                10.0,
            ),
        ];
        let mut per_setting = Map::new();
        table.push(format!(
            "\nFOOTPRINT, healthy bed with docker (interval 10s); CPU measured over {} s and extrapolated to 1 h; min / median / max",
            k.footprint_secs
        ));
        for (key, label, fleet, rss_goal_mib) in settings {
            if key == "fleet" && fleet.is_none() {
                continue;
            }
            let mut rss = Vec::new();
            let mut hwm = Vec::new();
            let mut thr = Vec::new();
            let mut fds = Vec::new();
            let mut own = Vec::new();
            let mut total = Vec::new();
            let mut mappings = Vec::new();
            for r in 0..k.repeat {
                eprintln!(
                    "== footprint {key} run {} ({} s window)",
                    r + 1,
                    k.footprint_secs
                );
                match attempt("footprint", || {
                    footprint_once(&env, k.footprint_secs, fleet)
                }) {
                    Ok(fp) => {
                        let max = |g: fn(&ProcSample) -> u64| {
                            fp.samples.iter().map(g).max().unwrap_or(0) as f64
                        };
                        rss.push(max(|s| s.rss_kib) / 1024.0);
                        hwm.push(max(|s| s.hwm_kib) / 1024.0);
                        thr.push(max(|s| s.threads));
                        fds.push(max(|s| s.fds));
                        own.push(fp.own_cpu_per_hour());
                        total.push(fp.total_cpu_per_hour());
                        eprintln!(
                            "   rss {:.2} MiB, threads {}, fds {}, cpu {:.2} s/h own + {:.2} s/h children over {:.0} s",
                            rss[rss.len() - 1],
                            thr[thr.len() - 1],
                            fds[fds.len() - 1],
                            fp.own_cpu_per_hour(),
                            fp.total_cpu_per_hour() - fp.own_cpu_per_hour(),
                            fp.window_s
                        );
                        eprintln!(
                            "   RSS by mapping, MiB: {}",
                            fmt_mapping(&fp.rss_by_mapping)
                        );
                        mappings.push(fp.rss_by_mapping);
                    }
                    Err(e) => errors.push(e),
                }
            }
            table.push(format!("  {label}"));
            table.push(format!(
                "    RSS (VmRSS, max in window)   {}",
                fmt_stats(&rss, "MiB", 2)
            ));
            table.push(format!(
                "    peak RSS (VmHWM)             {}",
                fmt_stats(&hwm, "MiB", 2)
            ));
            table.push(format!(
                "    CPU, daemon (utime+stime)    {}",
                fmt_stats(&own, "s/h", 2)
            ));
            table.push(format!(
                "    CPU, incl. children          {}",
                fmt_stats(&total, "s/h", 2)
            ));
            table.push(format!(
                "    threads                      {}",
                fmt_stats(&thr, "", 0)
            ));
            table.push(format!(
                "    open fds                     {}",
                fmt_stats(&fds, "", 0)
            ));
            for (i, m) in mappings.iter().enumerate() {
                table.push(format!(
                    "    RSS by mapping, run {}, MiB  {}",
                    i + 1,
                    fmt_mapping(m)
                ));
            }
            let rss_ok = stats(&rss).is_some_and(|s| s.max < rss_goal_mib);
            verdicts.push((format!("RSS < {rss_goal_mib:.0} MiB ({key})"), rss_ok));
            // the CPU goal is the default setting's; the fleet's lease keep-alives are extra
            if fleet.is_none() {
                let cpu_ok = stats(&total).is_some_and(|s| s.max < 1.0);
                let own_ok = stats(&own).is_some_and(|s| s.max < 1.0);
                verdicts.push(("CPU < 1 s/h (daemon + its children)".into(), cpu_ok));
                verdicts.push(("CPU < 1 s/h (daemon alone)".into(), own_ok));
            }
            per_setting.insert(
                key.into(),
                json!({
                    "rss_mib": stats_json(&rss),
                    "hwm_mib": stats_json(&hwm),
                    "cpu_s_per_hour_own": stats_json(&own),
                    "cpu_s_per_hour_with_children": stats_json(&total),
                    "threads": stats_json(&thr),
                    "fds": stats_json(&fds),
                    "rss_kib_by_mapping": mappings
                        .iter()
                        .map(|m| m.iter().cloned().collect::<BTreeMap<String, u64>>())
                        .collect::<Vec<_>>(),
                }),
            );
        }
        report.insert(
            "footprint".into(),
            json!({
                "window_s": k.footprint_secs,
                "extrapolated_to_hour": true,
                "settings": Value::Object(per_setting),
            }),
        );
    }

    // --- long hang --------------------------------------------------------------------------
    if wants("hang") {
        eprintln!(
            "== hang: logind stopped for {} s at interval 1s",
            k.hang_secs
        );
        match attempt("hang", || hang(&env, k.hang_secs)) {
            Ok(h) => {
                let first = h.samples[0];
                let last = h.samples[h.samples.len() - 1];
                let max = |g: fn(&ProcSample) -> u64| h.samples.iter().map(g).max().unwrap_or(0);
                // daemon (schedstat, ns) + reaped children (cutime + cstime, ticks)
                let cpu = (last.own_ns - first.own_ns) as f64 / 1e9
                    + (last.child_ticks - first.child_ticks) as f64 / h.clk_tck;
                table.push(format!(
                    "\nLONG HANG: logind SIGSTOPped {} s, interval 1s, timeout 1s, reexec disabled; {} samples every 5 s: first / last / max",
                    h.secs,
                    h.samples.len()
                ));
                table.push(format!(
                    "  RSS      {} / {} / {} KiB",
                    first.rss_kib,
                    last.rss_kib,
                    max(|s| s.rss_kib)
                ));
                table.push(format!(
                    "  threads  {} / {} / {}",
                    first.threads,
                    last.threads,
                    max(|s| s.threads)
                ));
                table.push(format!(
                    "  fds      {} / {} / {}",
                    first.fds,
                    last.fds,
                    max(|s| s.fds)
                ));
                table.push(format!(
                    "  CPU during the hang: {cpu:.2} s ({:.1} s/h)",
                    cpu * 3600.0 / last.at.max(1.0)
                ));
                // "flat": nothing grew after the first minute of the hang (the first samples
                // include the bus connection being replaced once)
                let settled: Vec<&ProcSample> = h.samples.iter().filter(|s| s.at >= 60.0).collect();
                let base = settled.first().copied().copied().unwrap_or(first);
                let threads_flat = max(|s| s.threads) <= first.threads.max(base.threads)
                    && last.threads <= base.threads;
                let fds_flat = last.fds <= base.fds && max(|s| s.fds) <= base.fds + 2;
                verdicts.push(("hang: no thread growth".into(), threads_flat));
                verdicts.push(("hang: no fd growth".into(), fds_flat));
                report.insert(
                    "hang".into(),
                    json!({
                        "secs": h.secs,
                        "samples": h.samples.iter().map(|s| json!({"t": s.at, "rss_kib": s.rss_kib, "threads": s.threads, "fds": s.fds, "cpu_own_ns": s.own_ns, "child_ticks": s.child_ticks})).collect::<Vec<_>>(),
                        "rss_kib": {"first": first.rss_kib, "last": last.rss_kib, "max": max(|s| s.rss_kib)},
                        "threads": {"first": first.threads, "last": last.threads, "max": max(|s| s.threads)},
                        "fds": {"first": first.fds, "last": last.fds, "max": max(|s| s.fds)},
                        "cpu_s": cpu,
                    }),
                );
            }
            Err(e) => errors.push(e),
        }
    }

    // --- start-up ---------------------------------------------------------------------------
    if wants("startup") {
        let (mut sc, mut er, mut el, mut lr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..k.repeat {
            eprintln!("== startup run {}", r + 1);
            match attempt("startup", || startup(&env, k.starts)) {
                Ok(v) => {
                    for s in v {
                        eprintln!(
                            "   systemctl start {:.0} ms, exec->READY {:.0} ms",
                            s.systemctl_ms, s.exec_to_ready_ms
                        );
                        sc.push(s.systemctl_ms);
                        er.push(s.exec_to_ready_ms);
                        el.extend(s.exec_to_log_ms);
                        lr.extend(s.log_to_ready_ms);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        table.push(
            "\nSTART-UP on a healthy bed (default settings, docker bound); min / median / max"
                .into(),
        );
        table.push(format!(
            "  `systemctl start` returns      {}",
            fmt_stats(&sc, "ms", 0)
        ));
        table.push(format!(
            "  exec -> READY=1 (PID 1's view) {}",
            fmt_stats(&er, "ms", 0)
        ));
        table.push(format!(
            "    exec -> 'starting' log line  {}",
            fmt_stats(&el, "ms", 0)
        ));
        table.push(format!(
            "    'starting' -> READY=1        {}",
            fmt_stats(&lr, "ms", 0)
        ));
        verdicts.push((
            "READY < 200 ms after exec (median)".into(),
            stats(&er).is_some_and(|s| s.median < 200.0),
        ));
        verdicts.push((
            "READY < 200 ms after exec (max)".into(),
            stats(&er).is_some_and(|s| s.max < 200.0),
        ));
        report.insert(
            "startup".into(),
            json!({
                "systemctl_start_ms": stats_json(&sc),
                "exec_to_ready_ms": stats_json(&er),
                "exec_to_starting_log_ms": stats_json(&el),
                "starting_log_to_ready_ms": stats_json(&lr),
            }),
        );
    }

    // --- forecast ---------------------------------------------------------------------------
    let affected_env = if wants("forecast") {
        require_affected_bed()
    } else {
        None
    };
    if wants("forecast") && affected_env.is_none() {
        errors.push("forecast: no affected bed".into());
    }
    if let Some(aff) = affected_env {
        let rate = k.serial_rate;
        let mut per = Map::new();
        table.push(format!(
            "\nFORECAST on the affected bed (pre-v242 sd-bus in PID 1), load {rate} replies/s, interval 10s; min / median / max"
        ));
        for (name, headroom, before) in [
            (
                "defaults (headroom 2e7, before 6h)",
                20_000_000u64,
                6 * 3600u64,
            ),
            ("ETA rule only (headroom 1000, before 60s)", 1000, 60),
        ] {
            let (mut left, mut lead, mut react) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..k.repeat {
                eprintln!("== forecast lead {name} / run {}", r + 1);
                match attempt(&format!("forecast lead {name}"), || {
                    lead_once(&aff, rate, headroom, before)
                }) {
                    Ok(Some(l)) => {
                        eprintln!(
                            "   {} serials left = {:.0} s before the overflow; reacted {:.1} s after the threshold",
                            l.serials_left, l.lead_s, l.reaction_s
                        );
                        left.push(l.serials_left as f64);
                        lead.push(l.lead_s);
                        react.push(l.reaction_s);
                    }
                    Ok(None) => errors.push(format!("forecast lead {name}: no reexec")),
                    Err(e) => errors.push(e),
                }
            }
            table.push(format!(
                "  {name:<42} lead before overflow {}  (threshold -> reexec {})",
                fmt_stats(&lead, "s", 0),
                fmt_stats(&react, "s", 1)
            ));
            verdicts.push((
                format!("forecast {name}: reexec before the overflow"),
                lead.len() == k.repeat && stats(&lead).is_some_and(|s| s.min > 0.0),
            ));
            per.insert(
                name.into(),
                json!({"serials_left": stats_json(&left), "lead_s": stats_json(&lead), "threshold_to_reexec_s": stats_json(&react)}),
            );
        }
        let (mut quiet, mut with) = (Vec::new(), Vec::new());
        for r in 0..k.repeat {
            eprintln!("== forecast own serials / run {}", r + 1);
            match attempt("forecast own serials", || own_serials(&env, k.serial_secs)) {
                Ok((q, w)) => {
                    eprintln!("   quiet bed {q:.0}/h, with pleg-guard {w:.0}/h");
                    quiet.push(q);
                    with.push(w);
                }
                Err(e) => errors.push(e),
            }
        }
        let own: Vec<f64> = with.iter().zip(&quiet).map(|(w, q)| w - q).collect();
        table.push(format!(
            "  PID 1 serials/h, quiet bed {}; with pleg-guard {}; pleg-guard's own {}  (2^32 lasts {:.0} years at that)",
            fmt_stats(&quiet, "", 0),
            fmt_stats(&with, "", 0),
            fmt_stats(&own, "", 0),
            stats(&own).map_or(0.0, |s| SERIAL_MAX as f64 / s.median.max(1.0) / 24.0 / 365.0)
        ));
        per.insert(
            "serials_per_hour".into(),
            json!({"quiet": stats_json(&quiet), "with_pleg_guard": stats_json(&with), "own": stats_json(&own)}),
        );
        report.insert("forecast".into(), Value::Object(per));
    }

    // --- output -----------------------------------------------------------------------------
    table.push("\nTARGETS".into());
    for (what, ok) in &verdicts {
        table.push(format!("  [{}] {what}", if *ok { "ok  " } else { "MISS" }));
    }
    if !errors.is_empty() {
        table.push("\nERRORS".into());
        table.extend(errors.iter().map(|e| format!("  {e}")));
    }
    table.push(format!(
        "\n(total {:.0} s)",
        started.elapsed().as_secs_f64()
    ));
    report.insert(
        "targets".into(),
        json!(
            verdicts
                .iter()
                .map(|(w, ok)| json!({"target": w, "met": ok}))
                .collect::<Vec<_>>()
        ),
    );
    report.insert("errors".into(), json!(errors));
    println!("{}", table.join("\n"));
    if let Some(dir) = k.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(
        &k.out,
        serde_json::to_string_pretty(&Value::Object(report)).unwrap_or_default(),
    ) {
        Ok(()) => println!("written: {}", k.out.display()),
        Err(e) => eprintln!("cannot write {}: {e}", k.out.display()),
    }
}
