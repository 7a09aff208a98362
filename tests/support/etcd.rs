//! A real etcd cluster for the fleet tests and bench: `EtcdCluster::start(3)`.
//!
//! Debian's `etcd-server` (3.4, `/usr/bin/etcd`) runs as N members on loopback ports found by
//! binding port 0, with TLS everywhere: a CA, one server/peer certificate (SAN IP:127.0.0.1,
//! DNS:localhost) and a client certificate, all made with the `openssl` CLI in the cluster's
//! temporary directory; clients must present a certificate (`--client-cert-auth`), and so must
//! peers. Each member also serves plain-HTTP `/metrics` on its own port for the bench.
//!
//! ```ignore
//! let Some(etcd) = require_etcd(3) else { return }; // SKIPPED locally, a failure under CI=true
//! etcd.etcdctl(&["put", "/k", "v"]).unwrap();
//! etcd.kill_member(0);        // SIGKILL
//! etcd.start_member(0).unwrap(); // same data dir: it rejoins
//! ```
//!
//! For bad-TLS tests it also makes a second CA ([`EtcdCluster::wrong_ca`]) with a client
//! certificate of its own ([`EtcdCluster::foreign_client_cert`]), and a self-signed client
//! certificate. [`EtcdCluster::history`] reads etcd's own revision history of a prefix
//! (`etcdctl watch --rev=1`), the judge of what really happened. Drop kills every member and
//! removes the directory, also when the test panics. Only std and `serde_json` are used (the
//! bench includes this file with `#[path]`), and every command runs with a time limit.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The etcd binary Debian's etcd-server installs.
pub const ETCD: &str = "/usr/bin/etcd";
/// etcdctl from Debian's etcd-client.
pub const ETCDCTL: &str = "/usr/bin/etcdctl";
/// How long a cluster (or one member) may take to become healthy.
const HEALTH_DEADLINE: Duration = Duration::from_secs(60);
/// Time limit for one openssl or etcdctl call.
const CMD_LIMIT: Duration = Duration::from_secs(30);

static CLUSTERS: AtomicUsize = AtomicUsize::new(0);

/// Whether this runs under CI=true (a missing cluster or bed is then a failure, never a skip).
pub fn under_ci() -> bool {
    matches!(
        std::env::var("CI")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .as_str(),
        "true" | "1" | "yes"
    )
}

/// Starts an `n`-member cluster, or: `None` (SKIPPED, printed) when etcd is not installed or
/// cannot start locally; under CI=true that panics instead, so the test FAILS, never skips.
pub fn require_etcd(n: usize) -> Option<EtcdCluster> {
    match EtcdCluster::start(n) {
        Ok(c) => Some(c),
        Err(reason) if under_ci() => panic!("an etcd cluster is required under CI=true: {reason}"),
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            None
        }
    }
}

/// One member's fixed identity (its ports and data dir stay the same across restarts).
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    metrics_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// Starts processes from one thread that lives as long as the cluster: a member started with
/// `setpriv --pdeathsig KILL` dies when the thread that spawned it ends, so it must not be
/// whichever thread (a tokio blocking thread, say) happens to call `start_member`.
struct Spawner {
    tx: Option<mpsc::Sender<(Command, mpsc::Sender<std::io::Result<Child>>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spawner {
    fn new() -> Spawner {
        let (tx, rx) = mpsc::channel::<(Command, mpsc::Sender<std::io::Result<Child>>)>();
        let thread = std::thread::spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        });
        Spawner {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
        let (reply, rx) = mpsc::channel();
        let gone = || std::io::Error::other("the spawner thread is gone");
        self.tx
            .as_ref()
            .ok_or_else(gone)?
            .send((cmd, reply))
            .map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A running TLS etcd cluster on loopback; see the module doc.
pub struct EtcdCluster {
    spawner: Spawner,
    dir: PathBuf,
    token: String,
    members: Vec<Member>,
    /// Set by [`EtcdCluster::enable_auth`]: etcdctl then authenticates as root.
    root_password: Option<String>,
}

impl EtcdCluster {
    /// Makes the certificates, starts `n` members and waits until every one is healthy.
    /// A port taken between finding it and etcd binding it is retried with fresh ports.
    pub fn start(n: usize) -> Result<EtcdCluster, String> {
        if n == 0 {
            return Err("an etcd cluster needs at least one member".into());
        }
        for bin in [ETCD, ETCDCTL] {
            if !Path::new(bin).exists() {
                return Err(format!(
                    "{bin} is missing (apt-get install etcd-server etcd-client)"
                ));
            }
        }
        let mut last = String::new();
        let t0 = Instant::now();
        for _attempt in 0..3 {
            let seq = CLUSTERS.fetch_add(1, Ordering::SeqCst);
            let dir = std::env::temp_dir().join(format!("pgt-etcd-{}-{seq}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            make_certs(&dir)?;
            let ports = free_ports(3 * n)?;
            let members = (0..n)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: ports[3 * i],
                    peer_port: ports[3 * i + 1],
                    metrics_port: ports[3 * i + 2],
                    data_dir: dir.join(format!("m{i}.etcd")),
                    log: dir.join(format!("m{i}.log")),
                    child: None,
                })
                .collect();
            let mut cluster = EtcdCluster {
                spawner: Spawner::new(),
                token: format!("pgt-{}-{seq}", std::process::id()),
                dir,
                members,
                root_password: None,
            };
            let started = (0..n).try_for_each(|i| cluster.spawn_member(i));
            match started.and_then(|()| cluster.wait_healthy(&(0..n).collect::<Vec<_>>())) {
                Ok(()) => {
                    eprintln!(
                        "etcd: {n} members healthy in {:?} ({})",
                        t0.elapsed(),
                        cluster.endpoints().join(" ")
                    );
                    return Ok(cluster);
                }
                Err(e) => {
                    let in_use = cluster.logs().contains("address already in use");
                    last = format!("{e}\n{}", cluster.logs());
                    drop(cluster);
                    if !in_use {
                        break;
                    }
                }
            }
        }
        Err(format!("the etcd cluster did not start: {last}"))
    }

    /// Number of members (live or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The https client URLs of all members (also the killed ones: a client must cope).
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| endpoint(m.client_port))
            .collect()
    }

    /// The https client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        endpoint(self.members[i].client_port)
    }

    /// Client URLs of the members running now.
    pub fn live_endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| endpoint(m.client_port))
            .collect()
    }

    /// The CA that signed the servers' and the client's certificates.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    /// A client certificate the cluster accepts (CN pleg-guard-test-client, not an etcd user).
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.crt")
    }
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }
    /// Another CA: a client trusting only it rejects the servers' certificates.
    pub fn wrong_ca(&self) -> PathBuf {
        self.dir.join("other-ca.crt")
    }
    /// A client certificate signed by [`Self::wrong_ca`]: the servers reject it.
    pub fn foreign_client_cert(&self) -> PathBuf {
        self.dir.join("foreign-client.crt")
    }
    pub fn foreign_client_key(&self) -> PathBuf {
        self.dir.join("foreign-client.key")
    }
    /// A self-signed client certificate: the servers reject it.
    pub fn self_signed_cert(&self) -> PathBuf {
        self.dir.join("selfsigned-client.crt")
    }
    pub fn self_signed_key(&self) -> PathBuf {
        self.dir.join("selfsigned-client.key")
    }
    /// The cluster's temporary directory (certificates, data dirs, member logs).
    /// Settings of the fleet module for `node` in `group` against the whole cluster, with
    /// the cluster's good TLS files and the key prefix the tests read.
    pub fn fleet_settings(
        &self,
        group: &str,
        node: &str,
        max: &str,
        lease_ttl: Duration,
        request_timeout: Duration,
    ) -> pleg_guard::fleet::FleetSettings {
        pleg_guard::fleet::FleetSettings {
            endpoints: self.endpoints(),
            group: group.to_string(),
            prefix: "/pleg-guard".to_string(),
            node: node.to_string(),
            max_disruptive: max
                .parse()
                .unwrap_or_else(|e| panic!("max_disruptive {max}: {e}")),
            lease_ttl,
            request_timeout,
            tls: Some(pleg_guard::fleet::TlsFiles {
                ca_file: Some(self.ca()),
                cert_file: Some(self.client_cert()),
                key_file: Some(self.client_key()),
            }),
            auth: None,
            max_unhealthy: pleg_guard::fleet::storm::MaxUnhealthy::default(),
            storm_exempt: vec!["systemd-bus-wedge".to_string()],
            kubernetes: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Plain-HTTP metrics URL of member `i` (`--listen-metrics-urls`).
    pub fn metrics_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}/metrics", self.members[i].metrics_port)
    }

    /// The Prometheus text of member `i`'s `/metrics`.
    pub fn metrics(&self, i: usize) -> Result<String, String> {
        let addr = format!("127.0.0.1:{}", self.members[i].metrics_port);
        let mut s = TcpStream::connect(&addr).map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .map_err(|e| format!("GET {addr}/metrics: {e}"))?;
        let mut body = String::new();
        s.read_to_string(&mut body)
            .map_err(|e| format!("GET {addr}/metrics: {e}"))?;
        match body.split_once("\r\n\r\n") {
            Some((head, rest)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
                Ok(rest.to_string())
            }
            _ => Err(format!(
                "GET {addr}/metrics: unexpected reply {:?}",
                body.chars().take(200).collect::<String>()
            )),
        }
    }

    /// True if member `i` is running (not killed).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// The pid of member `i`, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    /// SIGKILLs member `i` and reaps it (a no-op if it is not running).
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its old data dir and ports (it rejoins the cluster) and waits
    /// until it answers `endpoint health` (which needs quorum, so start enough members first,
    /// or use [`Self::start_members`]).
    pub fn start_member(&mut self, i: usize) -> Result<(), String> {
        self.start_members(&[i])
    }

    /// Starts several members at once, then waits until each is healthy.
    pub fn start_members(&mut self, which: &[usize]) -> Result<(), String> {
        for &i in which {
            if self.members[i].child.is_none() {
                self.spawn_member(i)?;
            }
        }
        self.wait_healthy(which)
    }

    /// Runs etcdctl against the live members with the client certificate (and as root once
    /// auth is enabled); returns stdout, or an error with everything it printed.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, String> {
        self.etcdctl_at(&self.live_endpoints(), args)
    }

    /// [`Self::etcdctl`] against the given endpoints.
    pub fn etcdctl_at(&self, endpoints: &[String], args: &[&str]) -> Result<String, String> {
        let o = run_limited(self.etcdctl_cmd(endpoints).args(args), CMD_LIMIT)?;
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        } else {
            Err(format!("etcdctl {}: {}", args.join(" "), show(&o)))
        }
    }

    fn etcdctl_cmd(&self, endpoints: &[String]) -> Command {
        let mut cmd = Command::new(ETCDCTL);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", endpoints.join(",")))
            .arg(format!("--cacert={}", self.ca().display()))
            .arg(format!("--cert={}", self.client_cert().display()))
            .arg(format!("--key={}", self.client_key().display()))
            .arg("--dial-timeout=3s")
            .arg("--command-timeout=5s");
        if let Some(pw) = &self.root_password {
            cmd.arg(format!("--user=root:{pw}"));
        }
        cmd
    }

    /// Puts `key` = `value` (a convenience over [`Self::etcdctl`]).
    pub fn put(&self, key: &str, value: &str) -> Result<(), String> {
        self.etcdctl(&["put", key, value]).map(|_| ())
    }

    /// Retries a put of `key` until one succeeds (a member loss may cost a leader election and
    /// a timed-out proposal first); returns how long it took, or the last error after `within`.
    pub fn put_within(&self, key: &str, value: &str, within: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            match self.put(key, value) {
                Ok(()) => return Ok(start.elapsed()),
                Err(e) if start.elapsed() >= within => {
                    return Err(format!("not writable within {within:?}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// The value of `key`, None if absent.
    pub fn get(&self, key: &str) -> Result<Option<String>, String> {
        let out = self.etcdctl(&["get", key, "--print-value-only"])?;
        let v = out.strip_suffix('\n').unwrap_or(&out);
        Ok(if out.is_empty() {
            None
        } else {
            Some(v.to_string())
        })
    }

    /// The cluster's current revision (from a read's response header).
    pub fn revision(&self) -> Result<i64, String> {
        let out = self.etcdctl(&["get", "/", "-w", "json"])?;
        let v: Value =
            serde_json::from_str(out.trim()).map_err(|e| format!("etcdctl get -w json: {e}"))?;
        v["header"]["revision"]
            .as_i64()
            .ok_or_else(|| format!("no header.revision in {out}"))
    }

    /// Keys under `prefix` with their values, read now.
    pub fn get_prefix(&self, prefix: &str) -> Result<Vec<(String, String)>, String> {
        let out = self.etcdctl(&["get", "--prefix", prefix, "-w", "json"])?;
        let v: Value =
            serde_json::from_str(out.trim()).map_err(|e| format!("etcdctl get -w json: {e}"))?;
        let mut kvs = Vec::new();
        for kv in v["kvs"].as_array().into_iter().flatten() {
            kvs.push((b64_field(kv, "key")?, b64_field(kv, "value")?));
        }
        Ok(kvs)
    }

    /// Enables etcd's auth: a root user (with the root role), and `user`:`password` with a role
    /// that may read and write keys under `prefix` (if `user` is "root", root's password is
    /// `password`). From then on this harness's etcdctl authenticates as root.
    pub fn enable_auth(&mut self, user: &str, password: &str, prefix: &str) -> Result<(), String> {
        let root_pw = if user == "root" {
            password.to_string()
        } else {
            "harness-root-pw".to_string()
        };
        self.etcdctl(&["user", "add", &format!("root:{root_pw}")])?;
        // "root" may exist as a role already in some versions: only the grant must work
        let _ = self.etcdctl(&["role", "add", "root"]);
        self.etcdctl(&["user", "grant-role", "root", "root"])?;
        if user != "root" {
            let role = format!("{user}-rw");
            self.etcdctl(&["user", "add", &format!("{user}:{password}")])?;
            self.etcdctl(&["role", "add", &role])?;
            self.etcdctl(&[
                "role",
                "grant-permission",
                &role,
                "readwrite",
                "--prefix=true",
                prefix,
            ])?;
            self.etcdctl(&["user", "grant-role", user, &role])?;
        }
        self.etcdctl(&["auth", "enable"])?;
        self.root_password = Some(root_pw);
        Ok(())
    }

    /// etcd's own history of every key under `prefix`, from revision 1 up to now: each
    /// put and delete in revision order (a Txn's events share a revision). Read by a watch
    /// from revision 1 (this cluster never compacts) that ends at a sentinel key put after
    /// the call started, so nothing committed before the call is missed; the sentinel
    /// (`<prefix>~history-end-N`) is deleted again and left out of the result.
    pub fn history(&self, prefix: &str) -> Result<Vec<KvEvent>, String> {
        static SENTINELS: AtomicUsize = AtomicUsize::new(0);
        let sentinel = format!(
            "{prefix}~history-end-{}",
            SENTINELS.fetch_add(1, Ordering::SeqCst)
        );
        let mut cmd = self.etcdctl_cmd(&self.live_endpoints());
        cmd.args(["watch", "--prefix", prefix, "--rev=1", "-w", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start etcdctl watch: {e}"))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("etcdctl watch: no stdout".into());
        };
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let put = self.put(&sentinel, "end");
        let mut events = Vec::new();
        let mut done = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        let result = (|| {
            put?;
            while !done {
                let left = deadline.saturating_duration_since(Instant::now());
                let line = rx
                    .recv_timeout(left)
                    .map_err(|_| format!("etcdctl watch: no sentinel {sentinel} within 60 s"))?;
                let Ok(resp) = serde_json::from_str::<Value>(&line) else {
                    continue; // etcdctl's own chatter
                };
                for ev in resp["Events"].as_array().into_iter().flatten() {
                    let kv = &ev["kv"];
                    let key = b64_field(kv, "key")?;
                    if key == sentinel {
                        done = true;
                        break;
                    }
                    let delete = ev["type"].as_i64() == Some(1) || ev["type"] == "DELETE";
                    events.push(KvEvent {
                        revision: kv["mod_revision"].as_i64().unwrap_or(0),
                        delete,
                        value: if delete {
                            String::new()
                        } else {
                            b64_field(kv, "value")?
                        },
                        lease: kv["lease"].as_i64().unwrap_or(0),
                        key,
                    });
                }
            }
            Ok(events)
        })();
        let _ = child.kill();
        let _ = child.wait();
        let _ = self.etcdctl(&["del", &sentinel]);
        result
    }

    /// Every member's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for m in &self.members {
            let text = std::fs::read_to_string(&m.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s.push_str(&format!("--- {} log (last lines) ---\n", m.name));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=https://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn_member(&mut self, i: usize) -> Result<(), String> {
        let initial = self.initial_cluster();
        let (ca, cert, key) = (
            self.dir.join("ca.crt"),
            self.dir.join("server.crt"),
            self.dir.join("server.key"),
        );
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|e| format!("open {}: {e}", m.log.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        // setpriv --pdeathsig: the member dies with the test even if the test is SIGKILLed
        let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", "--", ETCD]);
            c
        } else {
            Command::new(ETCD)
        };
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD") {
                cmd.env_remove(k);
            }
        }
        let client = endpoint(m.client_port);
        let peer = format!("https://127.0.0.1:{}", m.peer_port);
        cmd.arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", m.data_dir.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!(
                "--listen-metrics-urls=http://127.0.0.1:{}",
                m.metrics_port
            ))
            .arg(format!("--initial-cluster={initial}"))
            .arg(format!("--initial-cluster-token={}", self.token))
            .arg("--initial-cluster-state=new")
            .arg(format!("--cert-file={}", cert.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--trusted-ca-file={}", ca.display()))
            .arg("--client-cert-auth")
            .arg(format!("--peer-cert-file={}", cert.display()))
            .arg(format!("--peer-key-file={}", key.display()))
            .arg(format!("--peer-trusted-ca-file={}", ca.display()))
            .arg("--peer-client-cert-auth")
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .args(
                std::env::var("PLEG_ETCD_PPROF")
                    .is_ok()
                    .then_some("--enable-pprof"),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let child = self
            .spawner
            .spawn(cmd)
            .map_err(|e| format!("cannot start {ETCD}: {e}"))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Waits until each of `which` answers `endpoint health`, or a member exits, or the deadline.
    fn wait_healthy(&mut self, which: &[usize]) -> Result<(), String> {
        let start = Instant::now();
        let mut pending: Vec<usize> = which.to_vec();
        let mut last = String::new();
        while !pending.is_empty() {
            for &i in which {
                if let Some(child) = self.members[i].child.as_mut() {
                    if let Ok(Some(st)) = child.try_wait() {
                        self.members[i].child = None;
                        return Err(format!("etcd member m{i} exited: {st}"));
                    }
                }
            }
            let mut still = Vec::new();
            for &i in &pending {
                let ep = [self.endpoint(i)];
                match self.etcdctl_at(&ep, &["endpoint", "health", "--command-timeout=2s"]) {
                    Ok(_) => {}
                    Err(e) => {
                        last = e;
                        still.push(i);
                    }
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if start.elapsed() > HEALTH_DEADLINE {
                return Err(format!(
                    "members {pending:?} not healthy after {HEALTH_DEADLINE:?}: {last}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
        if std::env::var_os("PLEG_KEEP_ETCD").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One event of etcd's revision history ([`EtcdCluster::history`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KvEvent {
    pub revision: i64,
    pub key: String,
    /// Empty for a delete.
    pub value: String,
    pub delete: bool,
    pub lease: i64,
}

fn endpoint(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

/// `n` distinct free loopback ports (all bound at once, then released for etcd).
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1:0: {e}")))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string()))
        .collect()
}

/// The CA, server/peer and client certificates, and the bad ones, in `dir`.
fn make_certs(dir: &Path) -> Result<(), String> {
    let ossl = |args: &[&str]| -> Result<(), String> {
        let o = run_limited(
            Command::new("openssl").args(args).current_dir(dir),
            CMD_LIMIT,
        )?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!("openssl {}: {}", args.join(" "), show(&o)))
        }
    };
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("write {name}: {e}"))
    };
    write(
        "server.ext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
         basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth,clientAuth\n",
    )?;
    write(
        "client.ext",
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=clientAuth\n",
    )?;
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    for (ca, cn) in [("ca", "pleg-guard test CA"), ("other-ca", "some other CA")] {
        let (key, crt, subj) = (
            format!("{ca}.key"),
            format!("{ca}.crt"),
            format!("/CN={cn}"),
        );
        let mut a = vec!["req", "-x509", "-nodes", "-days", "7"];
        a.extend(ec);
        a.extend(["-keyout", &key, "-out", &crt, "-subj", &subj]);
        a.extend([
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        ossl(&a)?;
    }
    for (name, ca, cn, ext) in [
        ("server", "ca", "etcd-server", "server.ext"),
        ("client", "ca", "pleg-guard-test-client", "client.ext"),
        (
            "foreign-client",
            "other-ca",
            "pleg-guard-test-client",
            "client.ext",
        ),
    ] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let subj = format!("/CN={cn}");
        let mut a = vec!["req", "-new", "-nodes"];
        a.extend(ec);
        a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        ossl(&a)?;
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        ossl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "7",
            "-out",
            &crt,
            "-extfile",
            ext,
        ])?;
    }
    let mut a = vec!["req", "-x509", "-nodes", "-days", "7"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "selfsigned-client.key",
        "-out",
        "selfsigned-client.crt",
        "-subj",
        "/CN=pleg-guard-test-client",
        "-addext",
        "extendedKeyUsage=clientAuth",
    ]);
    ossl(&a)
}

/// A base64 field of etcdctl's JSON (keys and values are bytes there).
fn b64_field(v: &Value, field: &str) -> Result<String, String> {
    let Some(s) = v[field].as_str() else {
        return Ok(String::new()); // an empty value is left out
    };
    let bytes = b64_decode(s).ok_or_else(|| format!("bad base64 in {field}: {s:?}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{field} is not UTF-8"))
}

/// Standard base64 (with padding) to bytes.
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s {
        acc = (acc << 6) | val(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Runs `cmd` to completion with output captured, killing it after `limit`.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let desc = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {desc}: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(o)) => Ok(o),
        Ok(Err(e)) => Err(format!("{desc}: {e}")),
        Err(_) => {
            // the waiting thread owns the child: kill by pid (it is still our unreaped child)
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            Err(format!("{desc}: no exit within {limit:?}"))
        }
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Adds each `grpc_server_msg_received_total` sample of one member's Prometheus text to
/// `into`, by its `grpc_method` label: what etcd itself counts its clients sent (the fleet
/// tests' idle check, the fleet bench's messages per grant).
pub fn add_received_by_method(text: &str, into: &mut std::collections::BTreeMap<String, f64>) {
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("grpc_server_msg_received_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let method = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("grpc_method=\""))
            .map(|m| m.trim_end_matches('"').to_string())
            .unwrap_or_default();
        *into.entry(method).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
}
