//! The pleg-guard integration test bed, for integration tests: `mod support;`.
//!
//! A bed is a throw-away Debian 12 system container (systemd 252, dbus, logind, a stand-in
//! kubelet) booted with `systemd-nspawn --volatile=overlay` from a cached root filesystem that
//! `tests/bed/prepare.sh` builds once. Tests break it on purpose (SIGSTOP logind, dbus-daemon,
//! the host's dockerd; wedge the stand-in kubelet; make a Dead docker container) and watch what
//! pleg-guard does through the bed's journal. See `tests/bed/README.md`.
//!
//! ```ignore
//! mod support;
//! use support::*;
//! #[test]
//! fn reexec_cures_a_stuck_logind() {
//!     let Some(env) = require_bed() else { return }; // SKIPPED locally, a failure under CI=true
//!     let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
//!     bed.install_pleg_guard("interval = \"1s\"\n");
//!     bed.start_pleg_guard();
//!     bed.stop_logind();
//!     bed.wait_event("target-unhealthy", &[("PLEG_GUARD_TARGET", "logind")], secs(30));
//! }
//! ```
//!
//! Only std, `serde_json`, `toml` and `nix` (signals, flock) are used. Every external command runs with a timeout, so a hung
//! bed fails a test instead of hanging it, and every guard (`Bed`, `DeadContainer`,
//! `DockerdStopped`, ...) undoes its fault in `Drop`, also when the test panics.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::{Map, Value};

mod affected_bed;
mod bus_client;
pub mod etcd;
pub mod fleet_bed;
pub use etcd::under_ci;
mod pid1_serial;
pub mod real_node;
mod scenario;
#[allow(unused_imports)]
pub use affected_bed::*;
#[allow(unused_imports)]
pub use bus_client::*;
#[allow(unused_imports)]
pub use pid1_serial::*;
#[allow(unused_imports)]
pub use scenario::*;

/// The busybox image that prepare.sh imports into the host's docker.
pub const IMAGE: &str = "pleg-guard-test/busybox:latest";
/// Lock file that serialises docker-touching tests across test binaries.
pub const DOCKER_LOCK_FILE: &str = "/run/pleg-guard-test-docker.lock";
/// PATH used for commands inside a bed.
const BED_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Default limit for one command (inside a bed or on the host).
const CMD_TIMEOUT: Duration = Duration::from_secs(120);

/// `kill(pid, sig)` through nix's safe wrapper; Err when the process is gone.
fn signal(pid: u32, sig: Signal) -> nix::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| nix::errno::Errno::ESRCH)?;
    nix::sys::signal::kill(Pid::from_raw(pid), sig)
}

/// `Duration::from_secs`, short.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ------------------------------------------------------------------------------------------------
// running commands with a time limit
// ------------------------------------------------------------------------------------------------

/// Runs `cmd` to completion (stdin from `input`, or /dev/null), killing it after `timeout`.
/// `Err` carries a description including whatever it printed before the limit.
pub fn run_with_timeout(
    cmd: &mut Command,
    input: Option<&[u8]>,
    timeout: Duration,
) -> Result<Output, String> {
    let desc = format!("{cmd:?}");
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {desc}: {e}"))?;
    if let Some(data) = input {
        let mut stdin = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for {desc}: {e}")),
        }
    };
    // A grandchild may still hold the pipes (e.g. a daemon it started): don't wait for ever.
    let stdout = join_for(t_out, Duration::from_secs(5));
    let stderr = join_for(t_err, Duration::from_secs(5));
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "{desc} timed out after {timeout:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )),
    }
}

fn join_for(h: std::thread::JoinHandle<Vec<u8>>, limit: Duration) -> Vec<u8> {
    let start = Instant::now();
    while !h.is_finished() && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    if h.is_finished() {
        h.join().unwrap_or_default()
    } else {
        b"<output still open>".to_vec()
    }
}

/// Renders an Output for panic messages.
pub fn show(o: &Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs a host command with the default time limit; panics if it cannot run or times out.
pub fn host(program: &str, args: &[&str]) -> Output {
    run_with_timeout(Command::new(program).args(args), None, CMD_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`host`] but panics unless it exits 0; returns trimmed stdout.
pub fn host_ok(program: &str, args: &[&str]) -> String {
    let o = host(program, args);
    assert!(
        o.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        show(&o)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Host process state letter from /proc/PID/stat (`T` = stopped), None when gone.
pub fn host_proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

// ------------------------------------------------------------------------------------------------
// preparation
// ------------------------------------------------------------------------------------------------

/// What `tests/bed/prepare.sh` prepared on this host.
#[derive(Clone, Debug)]
pub struct BedEnv {
    /// The cached, read-only bed root filesystem (booted with `--volatile=overlay`).
    pub rootfs: PathBuf,
    /// Everything prepare.sh printed.
    pub prepare_log: String,
    /// How long prepare.sh took in this process.
    pub prepare_time: Duration,
    /// The affected copy of libsystemd-shared-252.so (pre-v242 sd-bus, systemd#11809) that
    /// prepare.sh made (`AFFECTED_LIBSYSTEMD=`); None when it could not (never under CI=true).
    pub affected_libsystemd: Option<PathBuf>,
}

static PREPARED: OnceLock<Result<BedEnv, String>> = OnceLock::new();

/// Prepares the bed (once per process) and returns it. When it cannot be had (not root,
/// preparation failed): under `CI=true` this PANICS with the reason — a test that needs the bed
/// must fail in CI, never skip; elsewhere it prints `SKIPPED: <reason>` and returns None.
pub fn require_bed() -> Option<BedEnv> {
    match PREPARED.get_or_init(prepare) {
        Ok(env) => Some(env.clone()),
        Err(reason) if under_ci() => panic!("the test bed is required under CI=true: {reason}"),
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            None
        }
    }
}

/// Debian suites a bed can be booted from besides the default bookworm (systemd 252):
/// bullseye (Debian 11, systemd 247, glibc 2.31) and trixie (Debian 13, systemd 257).
pub const OTHER_SUITES: &[&str] = &["bullseye", "trixie"];

/// [`require_bed`] for a bed of another Debian suite (one of [`OTHER_SUITES`], or `bookworm`):
/// `tests/bed/prepare.sh SUITE` builds (once, cached per suite) and names its rootfs; boot it
/// with `Bed::boot(&env, ...)` as usual. Same rules: SKIPPED locally, a failure under CI=true.
pub fn require_bed_suite(suite: &str) -> Option<BedEnv> {
    static SUITES: Mutex<Vec<(String, Result<BedEnv, String>)>> = Mutex::new(Vec::new());
    let result = {
        let mut done = SUITES.lock().unwrap_or_else(|e| e.into_inner());
        match done.iter().find(|(s, _)| s == suite) {
            Some((_, r)) => r.clone(),
            None => {
                let r = prepare_suites(&[suite]);
                done.push((suite.to_string(), r.clone()));
                r
            }
        }
    };
    match result {
        Ok(env) => Some(env),
        Err(reason) if under_ci() => {
            panic!("the {suite} test bed is required under CI=true: {reason}")
        }
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            None
        }
    }
}

fn prepare() -> Result<BedEnv, String> {
    prepare_suites(&[])
}

/// Runs `tests/bed/prepare.sh [SUITE...]`; the rootfs is the one of the first suite (bookworm
/// when none is given).
fn prepare_suites(suites: &[&str]) -> Result<BedEnv, String> {
    if !is_root() {
        return Err("the pleg-guard test bed needs root (systemd-nspawn, docker, chattr)".into());
    }
    let script = repo_root().join("tests/bed/prepare.sh");
    let start = Instant::now();
    let o = run_with_timeout(
        Command::new("bash")
            .arg(&script)
            .args(suites)
            .current_dir(repo_root()),
        None,
        Duration::from_secs(900),
    )
    .map_err(|e| format!("tests/bed/prepare.sh: {e}"))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    if !o.status.success() {
        return Err(format!(
            "tests/bed/prepare.sh failed ({}):\n{log}",
            o.status
        ));
    }
    let rootfs = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("ROOTFS="))
        .map(PathBuf::from)
        .ok_or_else(|| format!("tests/bed/prepare.sh printed no final ROOTFS= line:\n{log}"))?;
    if !rootfs.join("lib/systemd/systemd").exists() {
        return Err(format!(
            "prepared rootfs {} has no systemd",
            rootfs.display()
        ));
    }
    let affected_libsystemd = String::from_utf8_lossy(&o.stdout)
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("AFFECTED_LIBSYSTEMD="))
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    eprintln!("{log}");
    Ok(BedEnv {
        rootfs,
        prepare_log: log,
        prepare_time: start.elapsed(),
        affected_libsystemd,
    })
}

// ------------------------------------------------------------------------------------------------
// names
// ------------------------------------------------------------------------------------------------

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A name unique to this process and call: `pgt-<pid>-<n>`, or `pgt-<pid>-<n>-<tag>`.
/// prepare.sh and [`cleanup_leftover_containers`] remove `pgt-<pid>-*` whose process is gone.
pub fn unique_name(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let tag: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(24)
        .collect();
    if tag.is_empty() {
        format!("pgt-{}-{n}", std::process::id())
    } else {
        format!("pgt-{}-{n}-{tag}", std::process::id())
    }
}

fn name_is_stale(name: &str) -> bool {
    name.strip_prefix("pgt-")
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

// ------------------------------------------------------------------------------------------------
// the bed
// ------------------------------------------------------------------------------------------------

/// How to boot a bed.
#[derive(Clone, Debug, Default)]
pub struct BedOptions {
    /// Bind the host's /var/run/docker.sock into the bed.
    pub docker: bool,
    /// Bind this binary read-only onto /usr/bin/pleg-guard.
    pub pleg_guard_binary: Option<PathBuf>,
    /// Further `--bind=HOST:BED` mounts.
    pub extra_binds: Vec<(PathBuf, String)>,
    /// PID 1 runs the affected (pre-v242) sd-bus: `env.affected_libsystemd` bound read-only over
    /// libsystemd-shared-252.so, checked at boot (see `affected_bed.rs`).
    pub affected_systemd: bool,
}

impl BedOptions {
    /// The pleg-guard binary cargo built for this test run, bound onto /usr/bin/pleg-guard.
    pub fn with_pleg_guard() -> Self {
        BedOptions {
            pleg_guard_binary: Some(built_pleg_guard()),
            ..Default::default()
        }
    }
    /// [`with_pleg_guard`](Self::with_pleg_guard) plus the host's docker socket.
    pub fn with_pleg_guard_and_docker() -> Self {
        BedOptions {
            docker: true,
            ..Self::with_pleg_guard()
        }
    }
}

/// The binary cargo built for this integration test (`CARGO_BIN_EXE_pleg-guard`).
pub fn built_pleg_guard() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pleg-guard"))
}

/// A booted bed. Dropping it resumes whatever was stopped and kills the container.
pub struct Bed {
    /// Machine name (also the bed's hostname), `pgt-<pid>-<n>-bed`.
    pub name: String,
    /// From spawning systemd-nspawn to `systemctl is-system-running` answering running/degraded.
    pub boot_time: Duration,
    /// What `systemctl is-system-running` said when boot finished.
    pub boot_state: String,
    /// PID 1 runs the affected sd-bus (proved at boot).
    pub affected_systemd: bool,
    nspawn: Mutex<Option<Child>>,
    pid1: u32,
    console_log: PathBuf,
    /// (what, pid inside the bed) of processes we SIGSTOPped and not yet resumed.
    stopped: Mutex<Vec<(String, u32)>>,
    /// Booted by this process ([`Bed::boot`]): Drop kills it. An [`attach`](Bed::attach)ed bed
    /// belongs to whoever started it: Drop only resumes what was stopped through this handle.
    owned: bool,
    /// The cgroup this bed's nspawn was started in (removed once nspawn has exited).
    cgroup: Option<BedCgroup>,
}

/// A bed's own cgroup, `pleg-guard-test/<bed name>`, in the systemd hierarchies of a cgroup v1 or
/// hybrid host (`/sys/fs/cgroup/unified` and `/sys/fs/cgroup/systemd`).
///
/// Why: `systemd-nspawn --keep-unit` puts the container's PID 1 in `<its own cgroup>/payload`.
/// Started from the host's root cgroup, every bed got the same `/payload`, so two beds' PID 1s
/// managed one `system.slice`: one removed a unit's cgroup while the other was moving that unit's
/// process into it (`status=219/CGROUP`, a bed booting `degraded` about 2 runs in 5). nspawn takes
/// its cgroup from the unified hierarchy and attaches the payload to the same path under
/// name=systemd, so the bed's cgroup is made in both, with `payload` ready under name=systemd.
/// On a pure cgroup v2 host neither directory exists and nothing is moved.
struct BedCgroup {
    dirs: Vec<PathBuf>,
}

impl BedCgroup {
    const HIERARCHIES: [&'static str; 2] = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"];

    fn create(name: &str) -> BedCgroup {
        let mut dirs = Vec::new();
        for h in Self::HIERARCHIES {
            if !Path::new(h).join("cgroup.procs").exists() {
                continue;
            }
            let dir = Path::new(h).join("pleg-guard-test").join(name);
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("create the bed's cgroup {}: {e}", dir.display()));
            dirs.push(dir);
        }
        if let Some(named) = dirs
            .iter()
            .find(|d| d.starts_with("/sys/fs/cgroup/systemd"))
        {
            let payload = named.join("payload");
            std::fs::create_dir_all(&payload)
                .unwrap_or_else(|e| panic!("create the bed's cgroup {}: {e}", payload.display()));
        }
        BedCgroup { dirs }
    }

    /// The `cgroup.procs` files to write the spawning shell's pid to, space-separated.
    fn procs_files(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.join("cgroup.procs").display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Removes the bed's cgroups, children first. A cgroup still holding a process stays (and
    /// is named), which also leaves its parents.
    fn remove(&self) {
        fn remove_tree(dir: &Path) -> std::io::Result<()> {
            for ent in std::fs::read_dir(dir)?.flatten() {
                if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    remove_tree(&ent.path())?;
                }
            }
            std::fs::remove_dir(dir)
        }
        // the kernel may take a moment to empty the cgroups of a pid namespace it just killed
        let start = Instant::now();
        for dir in &self.dirs {
            loop {
                match remove_tree(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) if start.elapsed() < secs(5) => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => {
                        eprintln!("bed cgroup {} not removed: {e}", dir.display());
                        break;
                    }
                }
            }
        }
    }
}

impl Bed {
    /// Boots a bed from `env.rootfs`; panics (with the journal) if it is not up within 30 s.
    pub fn boot(env: &BedEnv, opts: BedOptions) -> Bed {
        let name = unique_name("bed");
        let console_log = std::env::temp_dir().join(format!("{name}.console.log"));
        let log = File::create(&console_log).expect("create console log");
        // systemd-nspawn runs from this bed's own cgroup (see [`BedCgroup`]): a shell moves
        // itself there and execs nspawn, so the child's pid is nspawn's
        let cgroup = BedCgroup::create(&name);
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            r#"for p in $PGT_CGROUP_PROCS; do echo $$ >"$p" || exit 125; done; exec systemd-nspawn "$@""#,
            "sh",
        ])
        .env("PGT_CGROUP_PROCS", cgroup.procs_files())
        .arg("-D")
            .arg(&env.rootfs)
            .args([
                "--volatile=overlay",
                "--boot",
                "--register=no",
                "--keep-unit",
            ])
            .arg("--private-network")
            .arg(format!("--machine={name}"));
        if opts.docker {
            assert!(
                Path::new("/var/run/docker.sock").exists(),
                "BedOptions.docker: /var/run/docker.sock does not exist on the host"
            );
            cmd.arg("--bind=/var/run/docker.sock");
        }
        if let Some(bin) = &opts.pleg_guard_binary {
            assert!(
                bin.exists(),
                "pleg-guard binary {} does not exist",
                bin.display()
            );
            cmd.arg(format!("--bind-ro={}:/usr/bin/pleg-guard", bin.display()));
        }
        for (h, b) in &opts.extra_binds {
            cmd.arg(format!("--bind={}:{b}", h.display()));
        }
        let affected_lib = opts.affected_systemd.then(|| {
            env.affected_libsystemd.clone().unwrap_or_else(|| {
                panic!("BedOptions.affected_systemd without an affected library: use require_affected_bed()")
            })
        });
        if let Some(lib) = &affected_lib {
            cmd.arg(format!("--bind-ro={}:{LIBSYSTEMD_SHARED}", lib.display()));
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .env("SYSTEMD_LOG_COLOR", "0")
            .process_group(0);
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start systemd-nspawn: {e}"));
        let nspawn_pid = child.id();

        // container PID 1: the nspawn process's child whose pid in its own namespace is 1
        let pid1 = loop {
            if let Some(p) = find_container_pid1(nspawn_pid) {
                break p;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "systemd-nspawn exited ({st}) before the bed booted:\n{}",
                    std::fs::read_to_string(&console_log).unwrap_or_default()
                );
            }
            if start.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "no container PID 1 under systemd-nspawn after 15 s:\n{}",
                    std::fs::read_to_string(&console_log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut bed = Bed {
            name,
            boot_time: Duration::ZERO,
            boot_state: String::new(),
            affected_systemd: affected_lib.is_some(),
            nspawn: Mutex::new(Some(child)),
            pid1,
            console_log,
            stopped: Mutex::new(Vec::new()),
            owned: true,
            cgroup: Some(cgroup),
        };
        // From here on a panic drops `bed`, which tears the container down.
        let mut last = String::new();
        loop {
            if let Ok(o) = bed.try_sh("systemctl is-system-running", Duration::from_secs(5)) {
                last = String::from_utf8_lossy(&o.stdout).trim().to_string();
                if last == "running" || last == "degraded" {
                    break;
                }
            }
            if start.elapsed() > Duration::from_secs(30) {
                panic!(
                    "bed {} not up after 30 s (is-system-running: {last:?})\n--- jobs ---\n{}\n--- journal ---\n{}\n--- console ---\n{}",
                    bed.name,
                    bed.try_sh("systemctl list-jobs --no-pager", secs(5))
                        .map(|o| show(&o))
                        .unwrap_or_default(),
                    bed.try_sh("journalctl -b --no-pager | tail -n 80", secs(10))
                        .map(|o| show(&o))
                        .unwrap_or_default(),
                    std::fs::read_to_string(&bed.console_log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bed.boot_time = start.elapsed();
        bed.boot_state = last;
        if let Some(lib) = &affected_lib {
            match verify_pid1_maps(bed.pid1, lib) {
                Ok(summary) => eprintln!("bed {}: {summary}", bed.name),
                Err(e) => panic!("bed {}: not an affected bed: {e}", bed.name),
            }
        }
        if bed.boot_state == "degraded" {
            // the failed units and their own lines, so a degraded boot says why
            eprintln!(
                "bed {}: booted degraded:\n{}\n{}",
                bed.name,
                bed.sh_ok("systemctl --failed --no-pager --plain"),
                bed.try_sh(
                    "for u in $(systemctl --failed --no-legend --plain | cut -d' ' -f1); do \
                     journalctl -b -u \"$u\" --no-pager -o short-monotonic | tail -n 20; done",
                    secs(10)
                )
                .map(|o| show(&o))
                .unwrap_or_default()
            );
        }
        eprintln!(
            "bed {}: {} after {:?}",
            bed.name, bed.boot_state, bed.boot_time
        );
        bed
    }

    /// A handle on a bed some other process booted (e.g. `tests/k8s/node-up.sh`), given the host
    /// pid of its PID 1: every helper works on it, and dropping it leaves the bed running.
    pub fn attach(name: &str, pid1: u32, affected_systemd: bool) -> Bed {
        Bed {
            name: name.to_string(),
            boot_time: Duration::ZERO,
            boot_state: String::new(),
            affected_systemd,
            nspawn: Mutex::new(None),
            pid1,
            console_log: PathBuf::new(),
            stopped: Mutex::new(Vec::new()),
            owned: false,
            cgroup: None,
        }
    }

    /// The host cgroup directories this bed was started in (one per systemd hierarchy; empty for
    /// an attached bed, or on a pure cgroup v2 host). Removed when the bed is dropped.
    pub fn host_cgroup_dirs(&self) -> Vec<PathBuf> {
        self.cgroup
            .as_ref()
            .map(|c| c.dirs.clone())
            .unwrap_or_default()
    }

    /// Host pid of the container's PID 1 (killing it ends the bed).
    pub fn host_pid1(&self) -> u32 {
        self.pid1
    }

    /// The host file that holds systemd-nspawn's console output (kept when a test panics).
    pub fn console_log(&self) -> &Path {
        &self.console_log
    }

    /// Host pid of the systemd-nspawn process.
    pub fn nspawn_pid(&self) -> Option<u32> {
        self.nspawn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.id())
    }

    fn nsenter(&self) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &self.pid1.to_string(), "-a", "--"])
            .env_clear()
            .env("PATH", BED_PATH)
            .env("LANG", "C.UTF-8")
            .env("SYSTEMD_PAGER", "")
            .env("SYSTEMD_COLORS", "0");
        c
    }

    /// Runs `sh -c script` inside the bed (as root, cwd /) with a time limit.
    pub fn try_sh(&self, script: &str, timeout: Duration) -> Result<Output, String> {
        run_with_timeout(
            self.nsenter()
                .args(["/bin/sh", "-c", &format!("cd /\n{script}")]),
            None,
            timeout,
        )
    }

    /// Runs `sh -c script` inside the bed; panics only if it hangs for 120 s.
    pub fn sh(&self, script: &str) -> Output {
        self.try_sh(script, CMD_TIMEOUT)
            .unwrap_or_else(|e| panic!("in bed {}: {e}", self.name))
    }

    /// Runs `sh -c script` inside the bed, panics unless it exits 0; returns trimmed stdout.
    pub fn sh_ok(&self, script: &str) -> String {
        let o = self.sh(script);
        assert!(
            o.status.success(),
            "in bed {}: `{script}` failed: {}",
            self.name,
            show(&o)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Runs a program inside the bed without a shell (arguments passed as they are).
    pub fn exec(&self, argv: &[&str], timeout: Duration) -> Output {
        run_with_timeout(self.nsenter().args(argv), None, timeout)
            .unwrap_or_else(|e| panic!("in bed {}: {e}", self.name))
    }

    /// Writes `contents` to `path` inside the bed (parent directories created).
    pub fn write_file(&self, path: &str, contents: impl AsRef<[u8]>) {
        let o = run_with_timeout(
            self.nsenter().args([
                "/bin/sh",
                "-c",
                "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"",
                "sh",
                path,
            ]),
            Some(contents.as_ref()),
            CMD_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("in bed {}: {e}", self.name));
        assert!(
            o.status.success(),
            "write {path} in bed {}: {}",
            self.name,
            show(&o)
        );
    }

    /// Reads a file inside the bed; None if it cannot be read.
    pub fn read_file(&self, path: &str) -> Option<String> {
        let o = self.exec(&["cat", "--", path], CMD_TIMEOUT);
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    // --- pleg-guard ------------------------------------------------------------------------------

    /// Installs the unit (`systemd/pleg-guard.service`, or a minimal fallback while that file
    /// does not exist), the catalog (when `systemd/pleg-guard.catalog` exists) and
    /// /etc/pleg-guard/config.toml, then `systemctl daemon-reload`.
    pub fn install_pleg_guard(&self, config_toml: &str) {
        let root = repo_root();
        let unit = std::fs::read_to_string(root.join("systemd/pleg-guard.service"))
            .unwrap_or_else(|_| FALLBACK_UNIT.to_string());
        self.write_file("/etc/systemd/system/pleg-guard.service", unit);
        // the system-call allow-list drop-in the packages link on systemd >= 239
        if let Ok(dropin) = std::fs::read_to_string(root.join("systemd/syscall-allowlist.conf")) {
            self.write_file(
                "/etc/systemd/system/pleg-guard.service.d/50-syscall-allowlist.conf",
                dropin,
            );
        }
        if let Ok(cat) = std::fs::read(root.join("systemd/pleg-guard.catalog")) {
            self.write_file("/usr/lib/systemd/catalog/pleg-guard.catalog", cat);
            self.sh_ok("journalctl --update-catalog");
        }
        self.write_file("/etc/pleg-guard/config.toml", config_toml);
        self.sh_ok("systemctl daemon-reload");
    }

    /// Polls until `systemctl is-active UNIT` says `want`; panics with the diagnostics
    /// otherwise.
    pub fn wait_active(&self, unit: &str, want: &str, timeout: Duration) {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < timeout {
            let o = self.sh(&format!("systemctl is-active {unit}"));
            last = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if last == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "{unit} is {last:?}, not {want:?}, after {timeout:?}\n{}",
            self.pleg_guard_diagnostics()
        );
    }

    /// `systemctl start pleg-guard` (returns after READY=1); panics with status and journal.
    pub fn start_pleg_guard(&self) {
        let o = self.sh("timeout 90 systemctl start pleg-guard");
        assert!(
            o.status.success(),
            "systemctl start pleg-guard failed: {}\n{}",
            show(&o),
            self.pleg_guard_diagnostics()
        );
    }

    /// `systemctl status` and the last journal lines of pleg-guard, for failure messages.
    pub fn pleg_guard_diagnostics(&self) -> String {
        let o = self.sh(
            "systemctl status --no-pager -l pleg-guard 2>&1; echo '--- journal ---'; \
             journalctl -u pleg-guard --no-pager -o short-precise -n 60 2>&1",
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// /run/pleg-guard/status.json, parsed; panics if missing or not JSON.
    pub fn status_json(&self) -> Value {
        let text = self
            .read_file("/run/pleg-guard/status.json")
            .unwrap_or_else(|| {
                panic!(
                    "no /run/pleg-guard/status.json\n{}",
                    self.pleg_guard_diagnostics()
                )
            });
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("status.json is not JSON ({e}):\n{text}"))
    }

    /// `systemctl show -p PROP --value UNIT`.
    pub fn unit_property(&self, unit: &str, prop: &str) -> String {
        let o = self.exec(
            &["systemctl", "show", "-p", prop, "--value", unit],
            CMD_TIMEOUT,
        );
        assert!(
            o.status.success(),
            "systemctl show {unit} {prop}: {}",
            show(&o)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    // --- journal -----------------------------------------------------------------------------------

    /// `journalctl -o json --no-pager ARGS`, one map per entry. Fields journald stores as byte
    /// arrays (non-UTF-8 or control characters) are turned into (lossy) strings.
    pub fn journal(&self, args: &[&str]) -> Vec<Map<String, Value>> {
        let mut argv = vec!["journalctl", "-o", "json", "--no-pager"];
        argv.extend_from_slice(args);
        let o = self.exec(&argv, CMD_TIMEOUT);
        assert!(
            o.status.success(),
            "journalctl {args:?} failed: {}",
            show(&o)
        );
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: Value = serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("journalctl printed non-JSON ({e}): {l}"));
                let Value::Object(mut m) = v else {
                    panic!("journal entry is not an object: {l}")
                };
                for (_, val) in m.iter_mut() {
                    if let Some(s) = bytes_to_string(val) {
                        *val = Value::String(s);
                    }
                }
                m
            })
            .collect()
    }

    /// The cursor of the newest journal entry. Beware `--after-cursor=` with matches: the
    /// journalctl of the bed (252) skips the first *matching* entry after a cursor whose own
    /// entry does not match. Use `--cursor=` and drop the cursor's entry, as
    /// [`wait_event_after`](Self::wait_event_after) does.
    pub fn journal_cursor(&self) -> String {
        let o = self.exec(
            &["journalctl", "-n", "1", "-o", "json", "--no-pager"],
            CMD_TIMEOUT,
        );
        let line = String::from_utf8_lossy(&o.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .to_string();
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("journal cursor ({e}): {line}"));
        v["__CURSOR"]
            .as_str()
            .expect("entry without __CURSOR")
            .to_string()
    }

    /// Journal entries matching `args` written after the entry at `cursor`. Uses `--cursor=`
    /// and drops the cursor's own entry: `--after-cursor=` combined with filters skips the
    /// first match when the cursor's entry itself does not match (journalctl 252).
    pub fn journal_after(&self, cursor: &str, args: &[&str]) -> Vec<Map<String, Value>> {
        let from = format!("--cursor={cursor}");
        let mut all: Vec<&str> = args.to_vec();
        all.push(&from);
        self.journal(&all)
            .into_iter()
            .filter(|e| field(e, "__CURSOR") != Some(cursor))
            .collect()
    }

    /// Polls `journal(args)` every 200 ms until an entry satisfies `pred`; returns it. On
    /// timeout panics with the last entries matched and pleg-guard's status and journal.
    pub fn wait_journal(
        &self,
        args: &[&str],
        pred: impl Fn(&Map<String, Value>) -> bool,
        timeout: Duration,
    ) -> Map<String, Value> {
        let start = Instant::now();
        loop {
            let entries = self.journal(args);
            if let Some(e) = entries.iter().find(|e| pred(e)) {
                return e.clone();
            }
            if start.elapsed() >= timeout {
                let tail: Vec<String> = entries
                    .iter()
                    .rev()
                    .take(15)
                    .rev()
                    .map(|e| field(e, "MESSAGE").unwrap_or("").to_string())
                    .collect();
                panic!(
                    "no journal entry of `journalctl {}` matched within {timeout:?}; last of them:\n{}\n--- pleg-guard ---\n{}",
                    args.join(" "),
                    tail.join("\n"),
                    self.pleg_guard_diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for a pleg-guard entry with `PLEG_GUARD_EVENT=event` and every `extra` field equal.
    pub fn wait_event(
        &self,
        event: &str,
        extra: &[(&str, &str)],
        timeout: Duration,
    ) -> Map<String, Value> {
        self.wait_event_after(None, event, extra, timeout)
    }

    /// [`wait_event`](Self::wait_event) counting only entries after `cursor` (see
    /// [`journal_cursor`](Self::journal_cursor)).
    pub fn wait_event_after(
        &self,
        cursor: Option<&str>,
        event: &str,
        extra: &[(&str, &str)],
        timeout: Duration,
    ) -> Map<String, Value> {
        let mut owned = vec![
            "-u".to_string(),
            "pleg-guard".to_string(),
            format!("PLEG_GUARD_EVENT={event}"),
        ];
        owned.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        // `--cursor=` (from the cursor's entry on), not `--after-cursor=`, which skips the first
        // match when the cursor's own entry does not match; the cursor's entry is dropped below.
        if let Some(c) = cursor {
            owned.push(format!("--cursor={c}"));
        }
        let args: Vec<&str> = owned.iter().map(String::as_str).collect();
        // journalctl's matching is checked again here, so a surprise in its semantics cannot
        // produce a false pass.
        self.wait_journal(
            &args,
            |e| {
                field(e, "PLEG_GUARD_EVENT") == Some(event)
                    && extra.iter().all(|(k, v)| field(e, k) == Some(*v))
                    && cursor.is_none_or(|c| field(e, "__CURSOR") != Some(c))
            },
            timeout,
        )
    }

    /// pleg-guard's journal entries with `PLEG_GUARD_EVENT=event` and every `extra` field equal
    /// (journalctl's matching checked again here, as in [`wait_event`](Self::wait_event)).
    pub fn pleg_guard_events(
        &self,
        event: &str,
        extra: &[(&str, &str)],
    ) -> Vec<Map<String, Value>> {
        let mut owned = vec![
            "-u".to_string(),
            "pleg-guard".to_string(),
            format!("PLEG_GUARD_EVENT={event}"),
        ];
        owned.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let args: Vec<&str> = owned.iter().map(String::as_str).collect();
        self.journal(&args)
            .into_iter()
            .filter(|e| {
                field(e, "PLEG_GUARD_EVENT") == Some(event)
                    && extra.iter().all(|(k, v)| field(e, k) == Some(*v))
            })
            .collect()
    }

    /// `pleg-guard diagnose --json` in the bed with `config` as its config file: (exit code,
    /// report, wall time).
    pub fn diagnose_json(&self, config: &str) -> (i32, Value, Duration) {
        self.write_file("/etc/pleg-guard/config.toml", config);
        let start = Instant::now();
        let o = self.exec(&["pleg-guard", "diagnose", "--json"], secs(30));
        let took = start.elapsed();
        let report: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("diagnose --json printed no JSON ({e}): {}", show(&o)));
        (o.status.code().unwrap_or(-1), report, took)
    }

    // --- fault injection ---------------------------------------------------------------------------

    /// MainPID of a unit inside the bed (pid in the bed's namespace); panics if it has none.
    pub fn main_pid(&self, unit: &str) -> u32 {
        let p = self.unit_property(unit, "MainPID");
        match p.parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{unit} has no MainPID ({p:?}) in bed {}", self.name),
        }
    }

    /// Process state letter inside the bed (`T` stopped, `S` sleeping, ...).
    pub fn proc_state(&self, pid: u32) -> Option<char> {
        let s = self.read_file(&format!("/proc/{pid}/stat"))?;
        s.rsplit_once(')')?.1.trim_start().chars().next()
    }

    /// SIGSTOPs a unit's MainPID, remembering it so Drop resumes it. Returns the bed pid.
    pub fn stop_unit(&self, unit: &str) -> u32 {
        let pid = self.main_pid(unit);
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((unit.to_string(), pid));
        self.sh_ok(&format!("kill -STOP {pid}"));
        let start = Instant::now();
        while self.proc_state(pid) != Some('T') {
            assert!(start.elapsed() < secs(5), "{unit} (pid {pid}) did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        pid
    }

    /// SIGCONTs what [`stop_unit`](Self::stop_unit) stopped for `unit`.
    pub fn cont_unit(&self, unit: &str) {
        let pids: Vec<u32> = {
            let mut s = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
            let pids = s
                .iter()
                .filter(|(u, _)| u == unit)
                .map(|(_, p)| *p)
                .collect();
            s.retain(|(u, _)| u != unit);
            pids
        };
        for pid in pids {
            self.sh_ok(&format!("kill -CONT {pid}"));
        }
    }

    pub fn stop_logind(&self) -> u32 {
        self.stop_unit("systemd-logind.service")
    }
    pub fn cont_logind(&self) {
        self.cont_unit("systemd-logind.service")
    }
    pub fn stop_dbus(&self) -> u32 {
        self.stop_unit("dbus.service")
    }
    pub fn cont_dbus(&self) {
        self.cont_unit("dbus.service")
    }

    /// Number of `Reexecuting.` lines PID 1 has logged in this bed.
    pub fn reexec_count(&self) -> usize {
        self.sh_ok("journalctl --no-pager _PID=1 -o cat | grep -c '^Reexecuting\\.$' || true")
            .parse()
            .expect("count")
    }

    /// Stand-in for the systemd bus bug that `daemon-reexec` cures: starts the transient unit
    /// `resume-logind-on-reexec`, which SIGCONTs systemd-logind once PID 1 reexecutes (after
    /// this call). Combine with [`stop_logind`](Self::stop_logind).
    pub fn resume_logind_on_reexec(&self) {
        let base = self.reexec_count();
        self.sh_ok(&format!(
            "systemctl stop resume-logind-on-reexec.service 2>/dev/null; \
             systemctl reset-failed resume-logind-on-reexec.service 2>/dev/null; \
             systemd-run --quiet --collect --unit=resume-logind-on-reexec \
             /usr/local/lib/pleg-guard-bed/resume-logind-on-reexec.sh {base}"
        ));
    }

    /// Wedges the stand-in kubelet: it logs "PLEG is not healthy" every 2 s until restarted.
    pub fn kubelet_wedge(&self) {
        self.sh_ok("touch /run/standin-kubelet/wedged");
    }
    /// Makes the stand-in kubelet's /healthz answer 404 (within 2 s) until restarted.
    pub fn kubelet_healthz_down(&self) {
        self.sh_ok("touch /run/standin-kubelet/healthz-down");
    }
    /// Undoes both kubelet faults without a restart.
    pub fn kubelet_heal(&self) {
        self.sh_ok("rm -f /run/standin-kubelet/wedged /run/standin-kubelet/healthz-down");
    }
    /// GET /healthz inside the bed: Some(body) on 200, None otherwise.
    pub fn kubelet_healthz(&self) -> Option<String> {
        let o = self.sh("timeout 5 busybox wget -qO- http://127.0.0.1:10248/healthz");
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
    }
}

const FALLBACK_UNIT: &str = "\
# fallback written by tests/support while systemd/pleg-guard.service does not exist
[Unit]
Description=pleg-guard (test bed fallback unit)

[Service]
Type=notify
ExecStart=/usr/bin/pleg-guard run
ExecReload=/bin/kill -HUP $MAINPID
StateDirectory=pleg-guard
RuntimeDirectory=pleg-guard

[Install]
WantedBy=multi-user.target
";

/// A JSON journal field as &str (None when absent or not a string).
pub fn field<'a>(e: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    e.get(key).and_then(Value::as_str)
}

/// A target's state in a status or diagnose report.
pub fn report_state<'a>(report: &'a Value, target: &str) -> &'a str {
    report["targets"][target]["state"].as_str().unwrap_or("?")
}

/// The finding ids of a status or diagnose report, in order.
pub fn finding_ids(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn bytes_to_string(v: &Value) -> Option<String> {
    let arr = v.as_array()?;
    let bytes: Option<Vec<u8>> = arr
        .iter()
        .map(|x| x.as_u64().and_then(|n| u8::try_from(n).ok()))
        .collect();
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn find_container_pid1(nspawn: u32) -> Option<u32> {
    for ent in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = ent.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .map(str::trim);
        let nspid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|s| s.split_whitespace().last());
        if ppid == Some(&nspawn.to_string()) && nspid == Some(Some("1")) {
            return Some(pid);
        }
    }
    None
}

impl Drop for Bed {
    fn drop(&mut self) {
        // 1. resume what we stopped (courtesy: SIGKILL below works on stopped processes too)
        let stopped: Vec<(String, u32)> =
            std::mem::take(&mut *self.stopped.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, pid) in &stopped {
            let _ = self.try_sh(&format!("kill -CONT {pid}"), secs(5));
        }
        if !self.owned {
            return;
        }
        // 2. kill the container's PID 1: the kernel then kills its whole pid namespace
        let _ = signal(self.pid1, Signal::SIGKILL);
        // 3. wait for nspawn to notice and clean up its mounts
        let mut guard = self.nspawn.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = guard.take() {
            let start = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if start.elapsed() > secs(15) => {
                        eprintln!(
                            "bed {}: systemd-nspawn did not exit 15 s after SIGKILL of PID 1; killing it",
                            self.name
                        );
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                    Err(_) => break,
                }
            }
        }
        drop(guard);
        if let Some(cgroup) = &self.cgroup {
            cgroup.remove();
        }
        if std::thread::panicking() {
            eprintln!(
                "bed {}: console log kept at {}",
                self.name,
                self.console_log.display()
            );
        } else {
            let _ = std::fs::remove_file(&self.console_log);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// host docker
// ------------------------------------------------------------------------------------------------

static DOCKER_MUTEX: Mutex<()> = Mutex::new(());

/// Serialises docker-touching tests: within this process (a Mutex) and across test binaries
/// (`flock` on /run/pleg-guard-test-docker.lock). Hold it for the whole test.
pub struct DockerLock {
    _file: nix::fcntl::Flock<File>, // dropped first: releases the flock
    _guard: MutexGuard<'static, ()>,
}

pub fn docker_lock() -> DockerLock {
    let guard = DOCKER_MUTEX.lock().unwrap_or_else(|e| e.into_inner());
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(DOCKER_LOCK_FILE)
        .unwrap_or_else(|e| panic!("open {DOCKER_LOCK_FILE}: {e}"));
    let file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("flock {DOCKER_LOCK_FILE}: {e}"));
    DockerLock {
        _file: file,
        _guard: guard,
    }
}

/// Runs the host's `docker ARGS` (60 s limit).
pub fn docker(args: &[&str]) -> Output {
    run_with_timeout(Command::new("docker").args(args), None, secs(60))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `docker ARGS`, panics unless it succeeds; trimmed stdout.
pub fn docker_ok(args: &[&str]) -> String {
    let o = docker(args);
    assert!(
        o.status.success(),
        "docker {} failed: {}",
        args.join(" "),
        show(&o)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A container's `State.Status` (`created`, `running`, `exited`, `dead`, ...), None when gone.
pub fn docker_state(name: &str) -> Option<String> {
    let o = docker(&["inspect", "-f", "{{.State.Status}}", name]);
    if o.status.success() {
        return Some(String::from_utf8_lossy(&o.stdout).trim().to_string());
    }
    let err = String::from_utf8_lossy(&o.stderr).to_lowercase();
    assert!(
        err.contains("no such"),
        "docker inspect {name} failed: {}",
        show(&o)
    );
    None
}

fn upper_dir(name: &str) -> PathBuf {
    let d = docker_ok(&["inspect", "-f", "{{.GraphDriver.Data.UpperDir}}", name]);
    assert!(
        d.starts_with('/') && Path::new(&d).is_dir(),
        "container {name} has no overlay UpperDir ({d:?}); the Dead-container trick needs the overlay2 driver"
    );
    PathBuf::from(d)
}

/// A container left in docker's `dead` state: a file in its upper layer is made immutable
/// (`chattr +i`) so `docker rm` fails half-way. Drop releases it and force-removes it.
pub struct DeadContainer {
    pub name: String,
    immutable: PathBuf,
}

impl DeadContainer {
    /// Makes `name` dead; panics unless docker then reports it `dead` and `docker rm` fails.
    pub fn create(name: &str) -> DeadContainer {
        docker_ok(&["run", "--name", name, IMAGE, "sh", "-c", "echo > /f"]);
        let immutable = upper_dir(name).join("f");
        let dc = DeadContainer {
            name: name.to_string(),
            immutable,
        };
        host_ok("chattr", &["+i", &dc.immutable.to_string_lossy()]);
        let o = docker(&["rm", name]);
        assert!(
            !o.status.success(),
            "docker rm {name} succeeded despite chattr +i: the trick failed"
        );
        assert_eq!(
            docker_state(name).as_deref(),
            Some("dead"),
            "container {name} is not dead"
        );
        dc
    }

    /// `chattr -i` so that a later removal (pleg-guard's purge, or ours) can succeed.
    pub fn release(&self) {
        if self.immutable.exists() {
            host_ok("chattr", &["-i", &self.immutable.to_string_lossy()]);
        }
    }
}

impl Drop for DeadContainer {
    fn drop(&mut self) {
        let _ = run_with_timeout(
            Command::new("chattr").arg("-i").arg(&self.immutable),
            None,
            secs(10),
        );
        let _ = run_with_timeout(
            Command::new("docker").args(["rm", "-f", &self.name]),
            None,
            secs(60),
        );
    }
}

/// A container made from [`IMAGE`]; Drop force-removes it (fine if it is already gone).
pub struct TestContainer {
    pub name: String,
}

impl TestContainer {
    /// A running container (`sleep 3600`).
    pub fn running(name: &str) -> TestContainer {
        docker_ok(&["run", "-d", "--name", name, IMAGE, "sleep", "3600"]);
        TestContainer {
            name: name.to_string(),
        }
    }
    /// An exited container (ran `true`).
    pub fn exited(name: &str) -> TestContainer {
        docker_ok(&["run", "--name", name, IMAGE, "true"]);
        TestContainer {
            name: name.to_string(),
        }
    }
    /// A created, never started container.
    pub fn created(name: &str) -> TestContainer {
        docker_ok(&["create", "--name", name, IMAGE, "true"]);
        TestContainer {
            name: name.to_string(),
        }
    }
}

impl Drop for TestContainer {
    fn drop(&mut self) {
        let _ = run_with_timeout(
            Command::new("docker").args(["rm", "-f", &self.name]),
            None,
            secs(60),
        );
    }
}

/// The host's dockerd, SIGSTOPped; Drop always SIGCONTs it. Hold a [`DockerLock`] meanwhile.
pub struct DockerdStopped {
    pub pid: u32,
}

/// The pids of the host's own dockerd: those in this process's pid namespace. A dockerd inside
/// a booted bed (a dockershim node's) is a process of the host too, and `pgrep -x dockerd`
/// alone finds it ("expected exactly one dockerd, found [14271, 31533]").
pub fn host_dockerd_pids() -> Vec<u32> {
    let me = std::process::id().to_string();
    let o = host("pgrep", &["--ns", &me, "--nslist", "pid", "-x", "dockerd"]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGSTOPs the host's dockerd (exactly one must run).
pub fn stop_dockerd() -> DockerdStopped {
    let pids = host_dockerd_pids();
    assert_eq!(
        pids.len(),
        1,
        "expected exactly one dockerd, found {pids:?}"
    );
    let pid = pids[0];
    let guard = DockerdStopped { pid };
    if let Err(e) = signal(pid, Signal::SIGSTOP) {
        panic!("kill -STOP dockerd: {e}");
    }
    let start = Instant::now();
    while host_proc_state(pid) != Some('T') {
        assert!(
            start.elapsed() < secs(5),
            "dockerd (pid {pid}) did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    guard
}

impl DockerdStopped {
    /// Resumes dockerd now (Drop would too).
    pub fn cont(self) {}
}

impl Drop for DockerdStopped {
    fn drop(&mut self) {
        let _ = signal(self.pid, Signal::SIGCONT);
    }
}

/// Removes `pgt-<pid>-*` containers whose test process is gone (`chattr -i` first).
/// Take [`docker_lock`] before calling it.
pub fn cleanup_leftover_containers() {
    let names = docker_ok(&[
        "ps",
        "-a",
        "--filter",
        "name=pgt-",
        "--format",
        "{{.Names}}",
    ]);
    for name in names
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with("pgt-") && name_is_stale(n))
    {
        let o = docker(&["inspect", "-f", "{{.GraphDriver.Data.UpperDir}}", name]);
        let upper = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && upper.starts_with('/') {
            let _ = run_with_timeout(
                Command::new("chattr").args(["-R", "-i", &upper]),
                None,
                secs(30),
            );
        }
        let o = docker(&["rm", "-f", name]);
        if !o.status.success() {
            eprintln!("could not remove leftover container {name}: {}", show(&o));
        }
    }
}

/// Waits until `cond` holds, polling every 100 ms; panics with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// "Nothing more happens within `within`": `look` is read every 250 ms for `within`; once it
/// reads `expected` it must keep reading it (the test fails at once, naming `what` and the new
/// value, when it changes), and it must read `expected` at the end. A value that reaches
/// `expected` only after a moment (a journal line on its way) is no failure.
pub fn stays<T: PartialEq + std::fmt::Debug>(
    what: &str,
    expected: T,
    within: Duration,
    mut look: impl FnMut() -> T,
) {
    let end = Instant::now() + within;
    let mut reached = false;
    loop {
        let now = look();
        if now == expected {
            reached = true;
        } else {
            assert!(
                !reached,
                "{what}: was {expected:?}, then {now:?} within {within:?}"
            );
        }
        if Instant::now() >= end {
            assert_eq!(now, expected, "{what} after {within:?}");
            return;
        }
        std::thread::sleep(
            Duration::from_millis(250).min(end.saturating_duration_since(Instant::now())),
        );
    }
}

// unused-import guard for ExitStatus helpers some tests want
/// True if `o` ended because of the given signal.
pub fn killed_by(status: &ExitStatus, sig: i32) -> bool {
    status.signal() == Some(sig)
}
