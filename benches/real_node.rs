//! Real-node benchmark (issue 29): on the real Kubernetes node bed (`tests/k8s/node-up.sh`: the
//! upstream kubelet v1.34 and kube-apiserver, containerd + runc, node-problem-detector, and
//! pleg-guard from the project's .deb at its defaults), for each fault, how long from the fault to
//! pleg-guard's finding, to its cure, and what the node shows without the cure: a control run
//! with pleg-guard in `mode = "observe"` (the Node's Ready as the API server has it, or a pod
//! that stays stuck). Not part of the pass/fail suite; tests/real_node.rs asserts the same
//! scenarios (the steps are shared: tests/support/real_node.rs).
//!
//! ```text
//! sudo cargo bench --bench real_node                        # 3 reps of each fault, ~55 min
//! sudo PLEG_BENCH_REPS=1 PLEG_BENCH_FAULTS=containerd-freeze cargo bench --bench real_node
//! ```
//!
//! Env knobs (defaults in brackets):
//! - `PLEG_BENCH_REPS` [3]: runs of each fault, each on a freshly booted node bed;
//! - `PLEG_BENCH_FAULTS` [kubelet-stop,bus-wedge,containerd-freeze];
//! - `PLEG_BENCH_CONTROL_SECS` [360]: how long a control run watches the faulty node;
//! - `PLEG_BENCH_BUDGET_MIN` [0: none]: no run starts after this many minutes (the runs go
//!   rep by rep, each fault once per rep, so a cut leaves the faults with even samples);
//! - `PLEG_BENCH_OUT` [bench-results/real_node.json];
//! - `PLEG_BENCH_QUEUE` [0]: 1 = no wait of its own for a free node bed before a run: node-up.sh
//!   queues on the bed's lock with everyone else (and gives up after 15 min). By default a run
//!   starts only once no other node bed is up, which on a machine where others queue for the bed
//!   may be never (a 5-s poll does not win against blocked waiters);
//! - `PLEG_GUARD_DEB`: the .deb node-up.sh installs (else its own choice, see docs/real-node.md).
//!
//! The faults, and what one run measures (seconds from the fault; every time from the API
//! server, a watch on the Node, or the bed's journal — pleg-guard's entries only date its
//! findings and actions):
//! - `kubelet-stop`: kubelet SIGSTOPped. At the defaults: its first `kubelet-*` finding, the
//!   `restart-kubelet` that succeeded, the Node Ready with a Lease renewed by the new kubelet.
//!   Control (observe mode, kubelet stopped again): the first version of the Node on the watch
//!   whose Ready is not `True`, within the bound; else Ready's status at the end and how old
//!   the Lease then is. (The bed's kube-controller-manager runs the node lifecycle controller,
//!   which marks the Node `Unknown` 50 s after kubelet's last Lease renewal in 1.34.)
//! - `bus-wedge`: the seed's incident: the affected PID 1's bus serial fast-forwarded to 2^32−9,
//!   wedged by the node's own traffic; the fault is the start of the first bus call PID 1 left
//!   unanswered. At the defaults: `systemd-bus-wedge`, the `daemon-reexec` that succeeded, a pod
//!   created right after the wedge Running. Control (observe mode, PID 1 wedged again after the
//!   cure): how long a pod created after the wedge stayed not Running (the whole bound if it
//!   did), its waiting reason, Ready on the watch; then a manual `systemctl daemon-reexec`.
//! - `containerd-freeze`: containerd SIGSTOPped (shims left running), pleg-guard at its defaults
//!   (it acts on nothing here, by design, so this run is its own control): `containerd-unresponsive`,
//!   NPD's `ContainerRuntimeUnresponsive` on the Node, the Node's Ready `False` (the real
//!   kubelet's runtime check), kubelet's first `PLEG is not healthy` line and pleg-guard's
//!   `kubelet-pleg-unhealthy` from it; the actions pleg-guard started during the freeze and in
//!   the 30 s after the Node is Ready again (containerd resumed after the PLEG finding).
//!
//! Output: one `real-node-bench fault=… rep=… key=value…` line per run (a key with `none` did
//! not happen within its bound), then a table (min / median / max over the runs), and the JSON
//! report. The load average (`/proc/loadavg`) is recorded at the start of every run.

#[path = "support/stats.rs"]
mod bench_stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bench_stats::{panic_message, stats};
use serde_json::{Map, Value, json};
use support::real_node::*;
use support::*;

// ---------------------------------------------------------------------------------------------
// knobs and small helpers
// ---------------------------------------------------------------------------------------------

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fault {
    KubeletStop,
    BusWedge,
    ContainerdFreeze,
}

const ALL_FAULTS: [Fault; 3] = [Fault::KubeletStop, Fault::BusWedge, Fault::ContainerdFreeze];

impl Fault {
    fn key(self) -> &'static str {
        match self {
            Fault::KubeletStop => "kubelet-stop",
            Fault::BusWedge => "bus-wedge",
            Fault::ContainerdFreeze => "containerd-freeze",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Fault::KubeletStop => "kubelet wedged (SIGSTOP)",
            Fault::BusWedge => "seed's bus wedge (affected PID 1 at 2^32-9)",
            Fault::ContainerdFreeze => "containerd frozen (SIGSTOP)",
        }
    }
}

struct Knobs {
    reps: usize,
    faults: Vec<Fault>,
    control_secs: u64,
    budget_min: u64,
    queue: bool,
    out: PathBuf,
}

fn knobs() -> Knobs {
    let wanted = std::env::var("PLEG_BENCH_FAULTS")
        .unwrap_or_else(|_| "kubelet-stop,bus-wedge,containerd-freeze".into());
    let wanted: Vec<String> = wanted
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for w in &wanted {
        assert!(
            ALL_FAULTS.iter().any(|f| f.key() == w),
            "PLEG_BENCH_FAULTS: unknown fault {w:?} (known: kubelet-stop, bus-wedge, containerd-freeze)"
        );
    }
    Knobs {
        reps: env_num("PLEG_BENCH_REPS", 3).max(1) as usize,
        faults: ALL_FAULTS
            .into_iter()
            .filter(|f| wanted.iter().any(|w| w == f.key()))
            .collect(),
        control_secs: env_num("PLEG_BENCH_CONTROL_SECS", 360).max(30),
        budget_min: env_num("PLEG_BENCH_BUDGET_MIN", 0),
        queue: env_num("PLEG_BENCH_QUEUE", 0) == 1,
        out: std::env::var("PLEG_BENCH_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench-results/real_node.json")
            }),
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

/// The 1-, 5- and 15-minute load averages.
fn loadavg() -> [f64; 3] {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = s.split_whitespace().map(|x| x.parse().unwrap_or(f64::NAN));
    [
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
    ]
}

/// Seconds from `from` to `to` (negative when `to` is earlier).
fn secs_between(from: Instant, to: Instant) -> f64 {
    if to >= from {
        (to - from).as_secs_f64()
    } else {
        -(from - to).as_secs_f64()
    }
}

/// Calls `f` every `every` until it gives Some or `timeout` passed since `start`.
fn poll<T>(
    start: Instant,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// The first version of the Node on the watch, from `after` on, whose condition `ty` has a
/// status `bad` accepts.
fn first_on_watch(
    watch: &NodeWatch,
    ty: &str,
    after: Instant,
    bad: impl Fn(&str) -> bool,
) -> Option<Instant> {
    watch
        .statuses(ty)
        .into_iter()
        .find(|(t, s)| *t >= after && bad(s))
        .map(|(t, _)| t)
}

/// Seconds from `since` to the first version of the Node on the watch, from `since` on, whose
/// condition `ty` has a status `bad` accepts.
fn first_on_watch_s(
    watch: &NodeWatch,
    ty: &str,
    since: Instant,
    bad: impl Fn(&str) -> bool,
) -> Option<f64> {
    first_on_watch(watch, ty, since, bad).map(|t| secs_between(since, t))
}

/// Seconds from `since` to the first version of the Node on the watch whose Ready is not
/// `True`.
fn ready_not_true_s(watch: &NodeWatch, since: Instant) -> Option<f64> {
    first_on_watch_s(watch, "Ready", since, |s| s != "True")
}

/// pleg-guard in observe mode for a control run, settled for 5 s.
fn control_mode(node: &Node) {
    node.pleg_guard_observe();
    std::thread::sleep(secs(5));
}

/// pleg-guard's first `finding` entry after `cursor` whose id `id` accepts (no waiting).
fn finding_now(node: &Node, cursor: &str, id: impl Fn(&str) -> bool) -> Option<Map<String, Value>> {
    node.bed
        .journal_after(cursor, &["-u", "pleg-guard", "PLEG_GUARD_EVENT=finding"])
        .into_iter()
        .find(|e| {
            field(e, "PLEG_GUARD_EVENT") == Some("finding")
                && field(e, "PLEG_GUARD_FINDING").is_some_and(&id)
        })
}

/// How many pleg-guard entries with `PLEG_GUARD_EVENT=event` came after `cursor`.
fn events_after(node: &Node, cursor: &str, event: &str) -> usize {
    node.bed
        .journal_after(
            cursor,
            &["-u", "pleg-guard", &format!("PLEG_GUARD_EVENT={event}")],
        )
        .iter()
        .filter(|e| field(e, "PLEG_GUARD_EVENT") == Some(event))
        .count()
}

/// How old the Node's Lease is (now − its renewTime, by the bed's clock), in seconds.
fn lease_age_s(node: &Node) -> Option<f64> {
    let renew = node.lease_renew_time();
    if renew.is_empty() {
        return None;
    }
    let o = node
        .bed
        .try_sh(
            &format!("echo $(( $(date +%s) - $(date -d '{renew}' +%s) ))"),
            secs(10),
        )
        .ok()?;
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
}

/// Waits until no other node bed is up or being removed (its lock free and node-down.sh done
/// with its files), so that node-up.sh's own 15-min wait for the lock does not fail a run when
/// someone else uses the node bed for a while; the seconds waited (not part of any
/// measurement). Gives up at the time budget, or after an hour without one.
fn wait_for_free_node_bed(k: &Knobs, started: Instant) -> f64 {
    let t = Instant::now();
    if k.queue {
        return 0.0;
    }
    let limit = if k.budget_min > 0 {
        secs(k.budget_min * 60).saturating_sub(started.elapsed())
    } else {
        secs(3600)
    };
    let mut said = false;
    loop {
        let free = std::process::Command::new("flock")
            .args(["-n", "/run/pleg-guard-test-node.lock", "true"])
            .status()
            .is_ok_and(|s| s.success())
            && !std::path::Path::new("/run/pleg-guard-test-node/nspawn.pid").exists();
        if free || t.elapsed() >= limit {
            return t.elapsed().as_secs_f64();
        }
        if !said {
            eprintln!("   another node bed is up: waiting for it (not timed)");
            said = true;
        }
        std::thread::sleep(secs(5));
    }
}

/// One run of one fault: measurements (seconds; None: not within the bound) and notes.
#[derive(Default)]
struct Run {
    values: Vec<(&'static str, Option<f64>)>,
    notes: Vec<(&'static str, String)>,
}

impl Run {
    fn val(&mut self, key: &'static str, v: Option<f64>) {
        self.values.push((key, v));
    }
    fn note(&mut self, key: &'static str, v: impl ToString) {
        self.notes.push((key, v.to_string()));
    }
    fn get(&self, key: &str) -> Option<f64> {
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|x| x.1)
    }
    fn note_of(&self, key: &str) -> Option<&str> {
        self.notes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|x| x.1.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// the faults
// ---------------------------------------------------------------------------------------------

fn kubelet_stop(control_secs: u64) -> Run {
    let mut run = Run::default();
    let node = require_node(false).expect("no node bed (run as root, see docs/real-node.md)");
    let watch = node.watch();

    // at the defaults
    let old_pid = node.unit_main_pid("kubelet.service");
    assert!(old_pid > 0, "kubelet has no MainPID");
    let cursor = node.bed.journal_cursor();
    let t0 = Instant::now();
    let frozen = node.freeze(old_pid);
    let finding = node.wait_finding(&cursor, |id| id.starts_with("kubelet-"), secs(300));
    run.val("finding_s", Some(secs_between(t0, entry_instant(&finding))));
    run.note(
        "finding",
        field(&finding, "PLEG_GUARD_FINDING").unwrap_or(""),
    );
    let restarted = node.wait_action_succeeded(&cursor, "restart-kubelet", secs(300));
    // the stopped process is gone (PID 1 killed it): no SIGCONT to a pid that may be reused
    frozen.keep();
    run.val("cure_s", Some(secs_between(t0, entry_instant(&restarted))));
    node.wait_ready_with_lease_after(entry_epoch_s(&restarted), secs(180));
    run.val("ready_again_s", Some(t0.elapsed().as_secs_f64()));
    run.val("ready_not_true_s", ready_not_true_s(&watch, t0));
    run.note("restarts", events_after(&node, &cursor, "action-started"));

    // control: observe mode, kubelet stopped again
    control_mode(&node);
    let pid = node.unit_main_pid("kubelet.service");
    assert!(pid > 0, "kubelet has no MainPID for the control run");
    let cursor = node.bed.journal_cursor();
    let t1 = Instant::now();
    let frozen = node.freeze(pid);
    let mut control_finding = None;
    // the watch, and a GET of the Node every 5 s in case the watch missed a version
    let not_true = poll(t1, secs(control_secs), secs(5), || {
        if control_finding.is_none() {
            control_finding = finding_now(&node, &cursor, |id| id.starts_with("kubelet-"))
                .map(|e| secs_between(t1, entry_instant(&e)));
        }
        if let Some(t) = first_on_watch(&watch, "Ready", t1, |s| s != "True") {
            return Some(t);
        }
        let ready = node.conditions().get("Ready").map(|c| c.0.clone());
        (ready.as_deref() != Some("True")).then(Instant::now)
    });
    run.val("control_finding_s", control_finding);
    run.val(
        "control_ready_not_true_s",
        not_true.map(|t| secs_between(t1, t)),
    );
    let ready = node.conditions().get("Ready").cloned();
    run.note(
        "control_ready_end",
        ready.map_or("-".to_string(), |(s, r, _)| format!("{s}/{r}")),
    );
    run.val("control_lease_age_end_s", lease_age_s(&node));
    // nothing else on the machine resumed it (another checkout's prepare.sh once did that)
    run.note(
        "control_kubelet_still_stopped",
        node.bed.proc_state(pid) == Some('T'),
    );
    run.val("control_bound_s", Some(control_secs as f64));
    run.note(
        "control_actions",
        events_after(&node, &cursor, "action-started"),
    );
    // what pleg-guard held back: observe mode logs `action-skipped`, but after the cure the
    // rate limit holds restart-kubelet back first and logs `action-suppressed` (src/daemon)
    run.note(
        "control_skipped",
        events_after(&node, &cursor, "action-skipped")
            + events_after(&node, &cursor, "action-suppressed"),
    );
    drop(frozen);
    run
}

fn bus_wedge(control_secs: u64) -> Run {
    let mut run = Run::default();
    let node = require_node(true).expect("no affected node bed (see docs/real-node.md)");
    let watch = node.watch();
    let bed = &node.bed;

    // at the defaults
    let cursor = bed.journal_cursor();
    let wedge = node.wedge_pid1(secs(120));
    let t0 = wedge.first_unanswered;
    node.create_pod("after-wedge");
    run.val(
        "wedge_after_fast_forward_s",
        Some(secs_between(wedge.fast_forwarded, t0)),
    );
    run.val(
        "wedge_uncertainty_s",
        Some(secs_between(wedge.last_answered, t0)),
    );
    // a reply of PID 1 near 2^32 before it wedges may make `systemd-serial-exhaustion` (and a
    // planned reexec) first: either is pleg-guard's finding of this fault, the id is noted
    let finding = node.wait_finding(
        &cursor,
        |id| id == "systemd-bus-wedge" || id == "systemd-serial-exhaustion",
        secs(180),
    );
    run.val("finding_s", Some(secs_between(t0, entry_instant(&finding))));
    run.note(
        "finding",
        field(&finding, "PLEG_GUARD_FINDING").unwrap_or(""),
    );
    let cured = node.wait_action_succeeded(&cursor, "daemon-reexec", secs(240));
    let t_cured = entry_instant(&cured);
    run.val("cure_s", Some(secs_between(t0, t_cured)));
    node.wait_pod_running("after-wedge", secs(180));
    run.val("pod_running_s", Some(t0.elapsed().as_secs_f64()));
    run.val(
        "pod_running_after_cure_s",
        Some(t_cured.elapsed().as_secs_f64()),
    );
    run.val("ready_not_true_s", ready_not_true_s(&watch, t0));
    run.note("reexecs", events_after(&node, &cursor, "action-started"));

    // control: observe mode, PID 1 wedged again
    control_mode(&node);
    let cursor = bed.journal_cursor();
    let wedge = node.wedge_pid1(secs(120));
    let t1 = wedge.first_unanswered;
    node.create_pod("control-wedge");
    let t_created = Instant::now();
    let mut control_finding = None;
    let mut reason = String::new();
    let running = poll(t_created, secs(control_secs), secs(5), || {
        if control_finding.is_none() {
            control_finding = finding_now(&node, &cursor, |id| id == "systemd-bus-wedge")
                .map(|e| secs_between(t1, entry_instant(&e)));
        }
        if node.pod_phase("control-wedge") == "Running" {
            return Some(Instant::now());
        }
        reason = node.pod_waiting_reason("control-wedge");
        None
    });
    run.val("control_finding_s", control_finding);
    run.val(
        "control_pod_stuck_s",
        Some(secs_between(
            t_created,
            running.unwrap_or_else(Instant::now),
        )),
    );
    run.note(
        "control_pod",
        if running.is_some() {
            "Running".to_string()
        } else {
            format!("stuck:{reason}")
        },
    );
    run.val("control_ready_not_true_s", ready_not_true_s(&watch, t1));
    run.val(
        "control_npd_wedged_s",
        first_on_watch_s(&watch, "SystemdBusWedged", t1, |s| s == "True"),
    );
    run.note(
        "control_ready_end",
        node.conditions()
            .get("Ready")
            .map_or("-".to_string(), |(s, r, _)| format!("{s}/{r}")),
    );
    run.val("control_bound_s", Some(control_secs as f64));
    run.note(
        "control_actions",
        events_after(&node, &cursor, "action-started"),
    );
    // the cure by hand (PID 1's private socket, as pleg-guard does it)
    let t_manual = Instant::now();
    let reexec = bed.try_sh("systemctl daemon-reexec", secs(60));
    run.note(
        "manual_reexec",
        match reexec {
            Ok(o) if o.status.success() => "ok".to_string(),
            Ok(o) => format!("failed:{}", o.status),
            Err(e) => format!("error:{}", e.lines().next().unwrap_or("")),
        },
    );
    let after = poll(t_manual, secs(120), secs(1), || {
        (node.pod_phase("control-wedge") == "Running").then(Instant::now)
    });
    run.val(
        "control_pod_running_after_manual_reexec_s",
        after.map(|t| secs_between(t_manual, t)),
    );
    run
}

fn containerd_freeze() -> Run {
    let mut run = Run::default();
    let node = require_node(false).expect("no node bed (run as root, see docs/real-node.md)");
    let watch = node.watch();
    let bed = &node.bed;
    let since = node.bed_now();
    let cursor = bed.journal_cursor();
    let containerd = node.unit_main_pid("containerd.service");
    let kubelet = node.unit_main_pid("kubelet.service");
    assert!(
        containerd > 0 && kubelet > 0,
        "containerd or kubelet has no MainPID"
    );
    let t0 = Instant::now();
    let frozen = node.freeze(containerd);
    let finding = node.wait_finding(&cursor, |id| id == "containerd-unresponsive", secs(120));
    run.val("finding_s", Some(secs_between(t0, entry_instant(&finding))));
    // kubelet's runtime check (2 min) makes the Node NotReady before its PLEG threshold (3 min)
    let ready_false = poll(t0, secs(300), secs(1), || {
        first_on_watch(&watch, "Ready", t0, |s| s != "True")
    });
    run.val("ready_false_s", ready_false.map(|t| secs_between(t0, t)));
    let pleg_line = bed.wait_journal(
        &["-u", "kubelet", "--since", &since],
        |e| field(e, "MESSAGE").is_some_and(|m| m.contains("PLEG is not healthy")),
        secs(300),
    );
    run.val(
        "pleg_line_s",
        Some(secs_between(t0, entry_instant(&pleg_line))),
    );
    let pleg_finding = poll(Instant::now(), secs(60), secs(1), || {
        finding_now(&node, &cursor, |id| id == "kubelet-pleg-unhealthy")
    });
    run.val(
        "pleg_finding_s",
        pleg_finding.map(|e| secs_between(t0, entry_instant(&e))),
    );
    run.val(
        "npd_condition_s",
        first_on_watch_s(&watch, "ContainerRuntimeUnresponsive", t0, |s| s == "True"),
    );
    run.note(
        "containerd_still_stopped",
        bed.proc_state(containerd) == Some('T'),
    );
    let during = events_after(&node, &cursor, "action-started");
    run.note("actions_during", during);
    run.note(
        "kubelet_restarted",
        node.unit_main_pid("kubelet.service") != kubelet,
    );
    drop(frozen);
    let t_resumed = Instant::now();
    run.val("resumed_s", Some(secs_between(t0, t_resumed)));
    let ready = poll(t_resumed, secs(240), secs(1), || {
        node.conditions()
            .get("Ready")
            .is_some_and(|c| c.0 == "True")
            .then(Instant::now)
    });
    run.val(
        "ready_again_after_resume_s",
        ready.map(|t| secs_between(t_resumed, t)),
    );
    std::thread::sleep(secs(30));
    run.note(
        "actions_after_resume",
        events_after(&node, &cursor, "action-started").saturating_sub(during),
    );
    run
}

// ---------------------------------------------------------------------------------------------
// statistics and the table
// ---------------------------------------------------------------------------------------------

/// The samples of `key` over `runs` (those that happened) and how many did not.
fn samples(runs: &[Run], key: &str) -> (Vec<f64>, usize) {
    let v: Vec<f64> = runs.iter().filter_map(|r| r.get(key)).collect();
    let missing = runs
        .iter()
        .filter(|r| r.values.iter().any(|(k, x)| *k == key && x.is_none()))
        .count();
    (v, missing)
}

/// `min / median / max s`, and "(k of n: none)" for the runs where it did not happen.
fn cell(runs: &[Run], key: &str) -> String {
    let (v, missing) = samples(runs, key);
    let mut s = match stats(&v) {
        Some(s) if s.n == 1 => format!("{:.1} s", s.min),
        Some(s) => format!("{:.1} / {:.1} / {:.1} s", s.min, s.median, s.max),
        None => "none".to_string(),
    };
    if missing > 0 && !v.is_empty() {
        s.push_str(&format!(" ({missing} of {}: none)", runs.len()));
    }
    s
}

/// The distinct values of note `key` over `runs`, with counts.
fn notes(runs: &[Run], key: &str) -> String {
    let mut m: BTreeMap<&str, usize> = BTreeMap::new();
    for r in runs {
        if let Some(n) = r.note_of(key) {
            *m.entry(n).or_default() += 1;
        }
    }
    m.iter()
        .map(|(k, c)| {
            if *c == runs.len() {
                k.to_string()
            } else {
                format!("{k} ({c}×)")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn table_row(fault: Fault, runs: &[Run], control_secs: u64) -> String {
    let n = runs.len();
    let (finding, cure, after, control) = match fault {
        Fault::KubeletStop => {
            let not_true = samples(runs, "control_ready_not_true_s").0;
            let control = if not_true.is_empty() {
                format!(
                    "Ready not False within {control_secs} s (Ready {} at the end; Lease {} old); \
                     pleg-guard's finding {}, actions {}",
                    notes(runs, "control_ready_end"),
                    cell(runs, "control_lease_age_end_s"),
                    cell(runs, "control_finding_s"),
                    notes(runs, "control_actions"),
                )
            } else {
                format!(
                    "Ready not True {}; pleg-guard's finding {}",
                    cell(runs, "control_ready_not_true_s"),
                    cell(runs, "control_finding_s")
                )
            };
            (
                format!("`{}` {}", notes(runs, "finding"), cell(runs, "finding_s")),
                format!("`restart-kubelet` {}", cell(runs, "cure_s")),
                format!("Ready with a renewed Lease {}", cell(runs, "ready_again_s")),
                control,
            )
        }
        Fault::BusWedge => {
            let stuck_whole = runs
                .iter()
                .filter(|r| {
                    r.note_of("control_pod")
                        .is_some_and(|p| p.starts_with("stuck"))
                })
                .count();
            (
                format!("`{}` {}", notes(runs, "finding"), cell(runs, "finding_s")),
                format!("`daemon-reexec` {}", cell(runs, "cure_s")),
                format!(
                    "pod created after the wedge Running {}",
                    cell(runs, "pod_running_s")
                ),
                format!(
                    "pod not Running {} ({stuck_whole} of {n} the whole {control_secs} s: {}); \
                     Ready not True: {}; pleg-guard's finding {}; NPD SystemdBusWedged {}",
                    cell(runs, "control_pod_stuck_s"),
                    notes(runs, "control_pod"),
                    cell(runs, "control_ready_not_true_s"),
                    cell(runs, "control_finding_s"),
                    cell(runs, "control_npd_wedged_s"),
                ),
            )
        }
        Fault::ContainerdFreeze => (
            format!("`containerd-unresponsive` {}", cell(runs, "finding_s")),
            format!(
                "none by design: actions while frozen {}, after the resume {}",
                notes(runs, "actions_during"),
                notes(runs, "actions_after_resume")
            ),
            format!(
                "kubelet's PLEG line {}, `kubelet-pleg-unhealthy` {}; Ready again {} after the resume",
                cell(runs, "pleg_line_s"),
                cell(runs, "pleg_finding_s"),
                cell(runs, "ready_again_after_resume_s"),
            ),
            format!(
                "(the run itself) Ready False {}; NPD ContainerRuntimeUnresponsive {}",
                cell(runs, "ready_false_s"),
                cell(runs, "npd_condition_s")
            ),
        ),
    };
    format!(
        "| {} | {n} | {finding} | {cure} | {after} | {control} |",
        fault.name()
    )
}

fn run_json(r: &Run) -> Value {
    let mut m = Map::new();
    for (k, v) in &r.values {
        m.insert((*k).into(), json!(v));
    }
    for (k, v) in &r.notes {
        m.insert((*k).into(), json!(v));
    }
    Value::Object(m)
}

fn fmt_line(fault: Fault, rep: usize, load: [f64; 3], r: &Run) -> String {
    let mut line = format!(
        "real-node-bench fault={} rep={rep} load1={:.1}",
        fault.key(),
        load[0]
    );
    for (k, v) in &r.values {
        match v {
            Some(x) => line.push_str(&format!(" {k}={x:.1}")),
            None => line.push_str(&format!(" {k}=none")),
        }
    }
    for (k, v) in &r.notes {
        line.push_str(&format!(" {k}={}", v.replace(' ', "_")));
    }
    line
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported (use the env knobs).
    let k = knobs();
    if require_bed().is_none() {
        eprintln!("real-node benchmark skipped: no bed (run as root)");
        return;
    }
    let started = Instant::now();
    let load_start = loadavg();
    let mut errors: Vec<String> = Vec::new();
    let mut rows: Vec<String> = Vec::new();
    let mut results = Map::new();
    let mut loads: Vec<f64> = Vec::new();
    let mut runs: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
    let mut per_run: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut not_started = 0;
    // rep by rep, each fault once per rep: a run cut short by the budget leaves every fault
    // with about as many samples
    for rep in 1..=k.reps {
        for &fault in &k.faults {
            if k.budget_min > 0 && started.elapsed() >= secs(k.budget_min * 60) {
                not_started += 1;
                continue;
            }
            let waited = wait_for_free_node_bed(&k, started);
            if k.budget_min > 0 && started.elapsed() >= secs(k.budget_min * 60) {
                not_started += 1;
                continue;
            }
            let load = loadavg();
            loads.push(load[0]);
            eprintln!(
                "== {} run {rep} of {} (load average {:.1} {:.1} {:.1}, {:?} since the start)",
                fault.key(),
                k.reps,
                load[0],
                load[1],
                load[2],
                started.elapsed()
            );
            let t = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| match fault {
                Fault::KubeletStop => kubelet_stop(k.control_secs),
                Fault::BusWedge => bus_wedge(k.control_secs),
                Fault::ContainerdFreeze => containerd_freeze(),
            }));
            match result {
                Ok(r) => {
                    println!("{}", fmt_line(fault, rep, load, &r));
                    let mut j = run_json(&r);
                    j["rep"] = json!(rep);
                    j["load_avg"] = json!(load);
                    j["wall_s"] = json!(t.elapsed().as_secs_f64());
                    j["waited_for_the_node_bed_s"] = json!(waited);
                    per_run.entry(fault.key()).or_default().push(j);
                    runs.entry(fault.key()).or_default().push(r);
                }
                Err(e) => {
                    let short = panic_message(&*e, 800);
                    println!(
                        "real-node-bench fault={} rep={rep} load1={:.1} error={:?}",
                        fault.key(),
                        load[0],
                        short.lines().next().unwrap_or("")
                    );
                    errors.push(format!("{} run {rep}: {short}", fault.key()));
                }
            }
        }
    }
    for &fault in &k.faults {
        let runs = runs.remove(fault.key()).unwrap_or_default();
        let per_run = per_run.remove(fault.key()).unwrap_or_default();
        if !runs.is_empty() {
            rows.push(table_row(fault, &runs, k.control_secs));
        }
        let mut summary = Map::new();
        let mut keys: Vec<&str> = Vec::new();
        for r in &runs {
            for (key, _) in &r.values {
                if !keys.contains(key) {
                    keys.push(key);
                }
            }
        }
        for key in keys {
            let (v, missing) = samples(&runs, key);
            summary.insert(
                key.into(),
                match stats(&v) {
                    Some(s) => json!({"n": s.n, "none": missing, "min": s.min, "median": s.median, "max": s.max, "samples": v}),
                    None => json!({"n": 0, "none": missing, "samples": []}),
                },
            );
        }
        results.insert(
            fault.key().into(),
            json!({"name": fault.name(), "runs": per_run, "summary": summary}),
        );
    }
    let load_end = loadavg();

    println!(
        "\nreal-node benchmark: {} run(s) of each fault planned, control runs (observe mode) bounded at {} s; \
         seconds from the fault, min / median / max; load average (1 min) {:.1}–{:.1} over the runs, \
         {:.1} {:.1} {:.1} at the start, {:.1} {:.1} {:.1} at the end; {:.0} min in all",
        k.reps,
        k.control_secs,
        loads.iter().copied().fold(f64::INFINITY, f64::min),
        loads.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        load_start[0],
        load_start[1],
        load_start[2],
        load_end[0],
        load_end[1],
        load_end[2],
        started.elapsed().as_secs_f64() / 60.0
    );
    println!(
        "\n| fault | n | pleg-guard's finding | cure | after the cure | control: pleg-guard in observe mode |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        println!("{r}");
    }
    if not_started > 0 {
        println!(
            "\n{not_started} run(s) not started: PLEG_BENCH_BUDGET_MIN={} spent",
            k.budget_min
        );
    }
    if !errors.is_empty() {
        println!("\nFAILED RUNS ({}):", errors.len());
        for e in &errors {
            println!("  {e}");
        }
    }

    let report = json!({
        "meta": {
            "reps": k.reps,
            "faults": k.faults.iter().map(|f| f.key()).collect::<Vec<_>>(),
            "control_secs": k.control_secs,
            "budget_min": k.budget_min,
            "runs_not_started": not_started,
            "deb": std::env::var("PLEG_GUARD_DEB").ok(),
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "started_at_us": now_us().saturating_sub(started.elapsed().as_micros() as u64),
            "wall_s": started.elapsed().as_secs_f64(),
            "load_avg_start": load_start,
            "load_avg_end": load_end,
            "load1_per_run": loads,
        },
        "results": results,
        "table": rows,
        "errors": errors,
    });
    if let Some(dir) = k.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match serde_json::to_string_pretty(&report) {
        Ok(text) => match std::fs::write(&k.out, text + "\n") {
            Ok(()) => println!("\nresults: {}", k.out.display()),
            Err(e) => eprintln!("cannot write {}: {e}", k.out.display()),
        },
        Err(e) => eprintln!("cannot serialise the report: {e}"),
    }
}
