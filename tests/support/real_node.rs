//! The real Kubernetes node bed (`tests/k8s/node-up.sh`, docs/real-node.md) for
//! tests/real_node.rs, which asserts what the scenarios show, and benches/real_node.rs, which
//! times them: booting and removing the node, the API server (the Node, its conditions and
//! Lease, pods, Events, a watch on the Node), kubelet's journal and metrics, and the steps the
//! scenarios share (freeze a process, wedge PID 1 on the bus, switch pleg-guard to observe
//! mode and back, wait for a finding or an action).
//!
//! One node bed at a time (node-up.sh holds a lock for the bed's life).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};

use super::{
    Bed, SERIAL_MAX, field, host, require_affected_bed, require_bed, run_with_timeout, secs, show,
};

/// A Node's conditions by type: (status, reason, message).
pub type Conditions = BTreeMap<String, (String, String, String)>;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ------------------------------------------------------------------------------------------------
// the node
// ------------------------------------------------------------------------------------------------

/// A node bed booted by `tests/k8s/node-up.sh`; Drop runs `node-down.sh`.
pub struct Node {
    pub name: String,
    pub server: String,
    pub token: String,
    pub pod_image: String,
    pub bed: Bed,
    /// One node bed at a time in this process (they share the host's cgroup tree and one
    /// lock): the next test waits here, not on node-up.sh's lock, whose 15 min bound a queue
    /// of these tests (up to 10 min each) would outlast. Dropped after `Drop::drop` has taken
    /// the bed down.
    _one_at_a_time: MutexGuard<'static, ()>,
}

static ONE_NODE: Mutex<()> = Mutex::new(());

/// Boots the node bed (affected PID 1 with `affected`). None (SKIPPED) where no bed can run off
/// CI, like every bed test; a node-up.sh that fails is a failure.
pub fn require_node(affected: bool) -> Option<Node> {
    boot_node("node-up.sh", affected, &[])
}

/// The node bed with node-up.sh's environment `env` (`PLEG_GUARD_NODE_KUBELET=1.37`, ...).
pub fn require_node_with(env: &[(&str, &str)]) -> Option<Node> {
    boot_node("node-up.sh", false, env)
}

/// The seeds' era: kubelet v1.23.17 with dockershim against dockerd in the bed
/// (`tests/k8s/node-up-dockershim.sh`); Drop runs the same `node-down.sh`.
pub fn require_dockershim_node() -> Option<Node> {
    boot_node("node-up-dockershim.sh", false, &[])
}

fn boot_node(script: &str, affected: bool, env: &[(&str, &str)]) -> Option<Node> {
    if affected {
        require_affected_bed()?;
    } else {
        require_bed()?;
    }
    let one_at_a_time = ONE_NODE.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("tests/k8s").join(script));
    if affected {
        cmd.arg("--affected");
    }
    cmd.envs(env.iter().copied());
    let start = Instant::now();
    // generous: a cold build of the components (tests/k8s/build.sh) may happen here
    let o = run_with_timeout(&mut cmd, None, Duration::from_secs(3600))
        .unwrap_or_else(|e| panic!("tests/k8s/node-up.sh: {e}"));
    assert!(
        o.status.success(),
        "tests/k8s/{script} failed: {}",
        show(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let value = |key: &str| -> String {
        out.lines()
            .rev()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("node-up.sh printed no {key}=:\n{}", show(&o)))
            .to_string()
    };
    let kubeconfig = std::fs::read_to_string(value("KUBECONFIG")).expect("read KUBECONFIG");
    let yaml = |key: &str| -> String {
        kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("no {key} in the kubeconfig:\n{kubeconfig}"))
            .to_string()
    };
    let name = value("NODE");
    let bed_pid: u32 = value("BED_PID").parse().expect("BED_PID is a pid");
    let node = Node {
        server: yaml("server"),
        token: yaml("token"),
        pod_image: value("POD_IMAGE"),
        bed: Bed::attach(&name, bed_pid, affected),
        name,
        _one_at_a_time: one_at_a_time,
    };
    eprintln!(
        "MEASURE {script}{}: {:?} to a Ready node with two Running pods",
        if affected { " --affected" } else { "" },
        start.elapsed()
    );
    Some(node)
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let o = self.bed.try_sh(
                "journalctl -u kubelet -n 40 --no-pager; journalctl -u pleg-guard -n 40 --no-pager",
                secs(20),
            );
            if let Ok(o) = o {
                eprintln!("--- node journal at failure ---\n{}", show(&o));
            }
        }
        let _ = run_with_timeout(
            Command::new("bash").arg(repo().join("tests/k8s/node-down.sh")),
            None,
            secs(120),
        );
    }
}

impl Node {
    pub fn curl(&self, method: &str, path: &str) -> Command {
        let mut c = Command::new("curl");
        c.args(["-sSk", "--max-time", "15", "-X", method])
            .arg("-H")
            .arg(format!("Authorization: Bearer {}", self.token))
            .args(["-H", "Content-Type: application/json"])
            .arg(format!("{}{path}", self.server));
        c
    }

    /// One API request; the answer parsed. Panics on a transport error or non-JSON.
    pub fn api(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let mut c = self.curl(method, path);
        let input = body.map(|b| b.to_string().into_bytes());
        if input.is_some() {
            c.args(["--data-binary", "@-"]);
        }
        let o = run_with_timeout(&mut c, input.as_deref(), secs(30))
            .unwrap_or_else(|e| panic!("API {method} {path}: {e}"));
        assert!(o.status.success(), "API {method} {path}: {}", show(&o));
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("API {method} {path}: not JSON ({e}): {}", show(&o)))
    }

    pub fn node_object(&self) -> Value {
        self.api("GET", &format!("/api/v1/nodes/{}", self.name), None)
    }

    /// The Node's conditions by type: (status, reason, message).
    pub fn conditions(&self) -> Conditions {
        conditions_of(&self.node_object())
    }

    /// Polls the Node until `pred` holds on its conditions; returns them.
    pub fn wait_conditions(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Conditions) -> bool,
    ) -> Conditions {
        let start = Instant::now();
        loop {
            let c = self.conditions();
            if pred(&c) {
                return c;
            }
            if start.elapsed() > timeout {
                panic!("{what}: not within {timeout:?}; the Node's conditions: {c:#?}");
            }
            std::thread::sleep(secs(2));
        }
    }

    /// Events about the Node (any namespace).
    pub fn node_events(&self) -> Vec<Value> {
        let v = self.api(
            "GET",
            &format!(
                "/api/v1/events?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3D{}",
                self.name
            ),
            None,
        );
        v["items"].as_array().cloned().unwrap_or_default()
    }

    /// A pod bound to the node (no scheduler in this cluster), `sleep` in [`Node::pod_image`].
    pub fn create_pod(&self, name: &str) {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": self.name,
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "sleep", "image": self.pod_image, "imagePullPolicy": "Never",
                    "command": ["/bin/sleep", "2147483647"]
                }]
            }
        });
        let r = self.api("POST", "/api/v1/namespaces/default/pods", Some(&pod));
        assert_eq!(r["kind"], "Pod", "create pod {name}: {r:#}");
    }

    pub fn pod_phase(&self, name: &str) -> String {
        let p = self.api(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{name}"),
            None,
        );
        p["status"]["phase"].as_str().unwrap_or("").to_string()
    }

    pub fn wait_pod_running(&self, name: &str, timeout: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let phase = self.pod_phase(name);
            if phase == "Running" {
                return start.elapsed();
            }
            if start.elapsed() > timeout {
                panic!(
                    "pod {name} is {phase:?}, not Running, after {timeout:?}:\n{:#}\n{}",
                    self.api(
                        "GET",
                        &format!("/api/v1/namespaces/default/pods/{name}"),
                        None
                    )["status"],
                    self.kubelet_journal_tail(30)
                );
            }
            std::thread::sleep(secs(1));
        }
    }

    /// kubelet's own journal lines (MESSAGE) since `since` (a journalctl --since value).
    pub fn kubelet_lines(&self, since: &str) -> Vec<String> {
        self.bed
            .journal(&["-u", "kubelet", "--since", since])
            .iter()
            .filter(|e| {
                field(e, "_COMM") != Some("systemd")
                    && field(e, "SYSLOG_IDENTIFIER") != Some("systemd")
            })
            .filter_map(|e| field(e, "MESSAGE").map(str::to_string))
            .collect()
    }

    pub fn kubelet_journal_tail(&self, n: usize) -> String {
        let o = self.bed.sh(&format!(
            "journalctl -u kubelet -n {n} --no-pager -o short-precise"
        ));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A counter of kubelet's /metrics (served on 10250, anonymous), read from the host in the
    /// bed's network namespace.
    pub fn kubelet_metric(&self, name: &str) -> f64 {
        let o = host(
            "nsenter",
            &[
                "-t",
                &self.bed.host_pid1().to_string(),
                "-n",
                "--",
                "curl",
                "-sSk",
                "--max-time",
                "10",
                "https://127.0.0.1:10250/metrics",
            ],
        );
        assert!(o.status.success(), "kubelet /metrics: {}", show(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub fn unit_main_pid(&self, unit: &str) -> u32 {
        self.bed.unit_property(unit, "MainPID").parse().unwrap_or(0)
    }

    /// The bed's clock as journalctl's `--since` takes it.
    pub fn bed_now(&self) -> String {
        self.bed.sh_ok("date '+%Y-%m-%d %H:%M:%S'")
    }

    /// Watches the Node from the API server (a `watch` stream) until dropped.
    pub fn watch(&self) -> NodeWatch {
        NodeWatch::start(self)
    }
}

pub fn conditions_of(node: &Value) -> Conditions {
    node["status"]["conditions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
                    (s("type"), (s("status"), s("reason"), s("message")))
                })
                .collect()
        })
        .unwrap_or_default()
}

// ------------------------------------------------------------------------------------------------
// a watch on the Node
// ------------------------------------------------------------------------------------------------

/// Every version of the Node the API server sends on a watch: (when, condition type → status).
pub type Seen = Arc<Mutex<Vec<(Instant, BTreeMap<String, String>)>>>;

/// `GET /api/v1/nodes?watch=1` for the one node, read line by line in a thread; re-opened when
/// the server ends it. Drop stops it.
pub struct NodeWatch {
    seen: Seen,
    child: Arc<Mutex<Option<Child>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl NodeWatch {
    pub fn start(node: &Node) -> NodeWatch {
        let seen: Seen = Arc::default();
        let child: Arc<Mutex<Option<Child>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let path = format!(
            "/api/v1/nodes?watch=1&fieldSelector=metadata.name%3D{}",
            node.name
        );
        let mut cmd = node.curl("GET", &path);
        // curl's --max-time would end the stream: none, the Drop kills it
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .filter(|a| a != "--max-time" && a != "15")
            .collect();
        cmd = Command::new("curl");
        cmd.args(["-N"]).args(&args);
        let (seen2, child2, stop2) = (seen.clone(), child.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
                let Ok(mut c) = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn() else {
                    return;
                };
                let out = c.stdout.take();
                *child2.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
                let Some(out) = out else { return };
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let Ok(ev) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    let conds = conditions_of(&ev["object"])
                        .into_iter()
                        .map(|(t, (s, _, _))| (t, s))
                        .collect();
                    seen2
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), conds));
                }
                if let Some(mut c) = child2.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        });
        NodeWatch { seen, child, stop }
    }

    /// Every (when, status) of condition `ty` seen so far.
    pub fn statuses(&self, ty: &str) -> Vec<(Instant, String)> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|(t, c)| c.get(ty).map(|s| (*t, s.clone())))
            .collect()
    }

    pub fn updates(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The first time `ty` was seen with `status`.
    pub fn first(&self, ty: &str, status: &str) -> Option<Instant> {
        self.statuses(ty)
            .into_iter()
            .find(|(_, s)| s == status)
            .map(|(t, _)| t)
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// When a pleg-guard journal entry was written, as an Instant of this process (journal
/// timestamps are the shared realtime clock).
pub fn entry_instant(e: &serde_json::Map<String, Value>) -> Instant {
    let us: u64 = field(e, "__REALTIME_TIMESTAMP")
        .and_then(|s| s.parse().ok())
        .expect("__REALTIME_TIMESTAMP");
    let at = SystemTime::UNIX_EPOCH + Duration::from_micros(us);
    let ago = SystemTime::now().duration_since(at).unwrap_or_default();
    Instant::now() - ago
}

// ------------------------------------------------------------------------------------------------
// steps the scenarios share
// ------------------------------------------------------------------------------------------------

/// The drop-in that puts pleg-guard into observe mode (the control runs).
pub const OBSERVE_DROP_IN: &str = "/etc/pleg-guard/config.d/50-observe.toml";

impl Node {
    /// pleg-guard in `mode = "observe"` (a drop-in), restarted: it finds, and acts on nothing.
    pub fn pleg_guard_observe(&self) {
        self.bed.write_file(OBSERVE_DROP_IN, "mode = \"observe\"\n");
        self.bed.sh_ok("systemctl restart pleg-guard");
    }

    /// Wait until pleg-guard has been up longer than its shipped `startup_grace` (30 s), as on
    /// a node in steady state: a fault that starts inside the grace waits for its end, and
    /// node-up.sh installs pleg-guard moments before a scenario begins.
    pub fn wait_pleg_guard_past_startup_grace(&self) {
        let up = self.bed.sh_ok(
            "echo $(( $(date +%s) - $(date -d \"$(systemctl show -p ActiveEnterTimestamp --value pleg-guard)\" +%s) ))",
        );
        let up: u64 = up
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("pleg-guard's uptime {up:?}: {e}"));
        let grace = 30 + 2;
        if up < grace {
            std::thread::sleep(Duration::from_secs(grace - up));
        }
    }

    /// The observe drop-in removed and pleg-guard restarted: the shipped defaults again (with
    /// their `startup_grace`).
    pub fn pleg_guard_defaults(&self) {
        self.bed.sh_ok(&format!(
            "rm {OBSERVE_DROP_IN} && systemctl restart pleg-guard"
        ));
    }

    /// The first pleg-guard `finding` entry after `cursor` whose finding id satisfies `id`;
    /// panics after `timeout`.
    pub fn wait_finding(
        &self,
        cursor: &str,
        id: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Map<String, Value> {
        let from = format!("--cursor={cursor}");
        self.bed.wait_journal(
            &["-u", "pleg-guard", "PLEG_GUARD_EVENT=finding", &from],
            |e| {
                field(e, "PLEG_GUARD_EVENT") == Some("finding")
                    && field(e, "__CURSOR") != Some(cursor)
                    && field(e, "PLEG_GUARD_FINDING").is_some_and(&id)
            },
            timeout,
        )
    }

    /// pleg-guard's first `action-succeeded` entry of `action` (`restart-kubelet`,
    /// `daemon-reexec`, ...) after `cursor`; panics after `timeout`.
    pub fn wait_action_succeeded(
        &self,
        cursor: &str,
        action: &str,
        timeout: Duration,
    ) -> Map<String, Value> {
        self.bed.wait_event_after(
            Some(cursor),
            "action-succeeded",
            &[("PLEG_GUARD_ACTION", action)],
            timeout,
        )
    }

    /// pleg-guard's `action-started` entries after `cursor` (any action).
    pub fn actions_started_after(&self, cursor: &str) -> Vec<Map<String, Value>> {
        self.bed.journal_after(
            cursor,
            &["-u", "pleg-guard", "PLEG_GUARD_EVENT=action-started"],
        )
    }

    /// Polls the Node until Ready is `True` and its Lease was renewed after `epoch_s` (seconds
    /// since the epoch, e.g. a kubelet restart): kubelet's heartbeat since 1.17; the Node's own
    /// status is rewritten only on a change or every 5 min. The time it took.
    pub fn wait_ready_with_lease_after(&self, epoch_s: u64, timeout: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let renew = self.lease_renew_time();
            let fresh = !renew.is_empty()
                && self
                    .bed
                    .sh(&format!("test $(date -d '{renew}' +%s) -gt {epoch_s}"))
                    .status
                    .success();
            let ready = self.conditions().get("Ready").map(|c| c.0.clone());
            if fresh && ready.as_deref() == Some("True") {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < timeout,
                "{timeout:?} after the restart: Ready {ready:?}, Lease renewed {renew:?}"
            );
            std::thread::sleep(secs(1));
        }
    }

    /// The Node's Lease `spec.renewTime` as the API server has it ("" when none).
    pub fn lease_renew_time(&self) -> String {
        let lease = self.api(
            "GET",
            &format!(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}",
                self.name
            ),
            None,
        );
        lease["spec"]["renewTime"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Why pod `name`'s first container is not running, as the API server has it
    /// (`ContainerCreating`, ...), else its phase.
    pub fn pod_waiting_reason(&self, name: &str) -> String {
        let p = self.api(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{name}"),
            None,
        );
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            .as_str()
            .or_else(|| p["status"]["phase"].as_str())
            .unwrap_or("")
            .to_string()
    }

    /// Sends SIGSTOP to `pid` (in the bed's PID namespace); the guard sends SIGCONT when
    /// dropped (also on a panic), unless [`Frozen::keep`] says the process is gone anyway.
    pub fn freeze(&self, pid: u32) -> Frozen<'_> {
        self.bed.sh_ok(&format!("kill -STOP {pid}"));
        Frozen {
            bed: &self.bed,
            pid,
        }
    }

    /// Fast-forwards the affected PID 1's bus serial to 2^32−9 and waits (up to `timeout`) until
    /// an ordinary bus call to PID 1 goes unanswered: the seed's wedge, made by the node's own
    /// traffic. PID 1 must answer when this is called (its sd_bus object is found first).
    pub fn wedge_pid1(&self, timeout: Duration) -> Wedge {
        self.bed.pid1_bus_object();
        let fast_forwarded = Instant::now();
        self.bed.fast_forward_pid1_serial(SERIAL_MAX - 8);
        let mut last_answered = fast_forwarded;
        loop {
            let asked = Instant::now();
            if self.bed.try_pid1_call(secs(2)).is_err() {
                return Wedge {
                    fast_forwarded,
                    last_answered,
                    first_unanswered: asked,
                    seen: Instant::now(),
                };
            }
            last_answered = asked;
            assert!(
                fast_forwarded.elapsed() < timeout,
                "PID 1 still answers {timeout:?} after the fast-forward (serial {:#x})",
                self.bed.pid1_bus_serial()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// A process stopped by [`Node::freeze`]; SIGCONT on drop.
pub struct Frozen<'a> {
    bed: &'a Bed,
    pid: u32,
}

impl Frozen<'_> {
    /// Drops the guard without SIGCONT (the process was replaced, e.g. restarted by pleg-guard).
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self
            .bed
            .try_sh(&format!("kill -CONT {}", self.pid), secs(10));
    }
}

/// When PID 1 stopped answering after [`Node::wedge_pid1`]: the wedge began between
/// `last_answered` (the start of the last call it answered) and `first_unanswered` (the start
/// of the first it did not), `seen` when that call gave up (2 s later).
pub struct Wedge {
    pub fast_forwarded: Instant,
    pub last_answered: Instant,
    pub first_unanswered: Instant,
    pub seen: Instant,
}

/// kubelet's own lines since `since` that are warnings or errors (klog `W`/`E`), each once.
pub fn kubelet_trouble(node: &Node, since: &str) -> Vec<String> {
    let key = |l: &str| l.split_once("] ").map_or(l, |(_, m)| m).to_string();
    let mut seen = Vec::<String>::new();
    for l in node.kubelet_lines(since) {
        if (l.starts_with('E') || l.starts_with('W')) && !seen.iter().any(|s| key(s) == key(&l)) {
            seen.push(l);
        }
    }
    seen
}

/// Seconds since the epoch of a journal entry (`__REALTIME_TIMESTAMP`).
pub fn entry_epoch_s(e: &Map<String, Value>) -> u64 {
    field(e, "__REALTIME_TIMESTAMP")
        .and_then(|s| s.parse::<u64>().ok())
        .expect("__REALTIME_TIMESTAMP")
        / 1_000_000
}
