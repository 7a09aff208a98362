//! Backend kubernetes (issue 43) against a real kube-apiserver on a real etcd, both on
//! loopback (the binaries tests/k8s/ builds into /var/cache/pleg-guard-test/k8s-*/bin, or
//! `PLEG_K8S_BIN`), with RBAC on and the garbage collector of kube-controller-manager: the
//! manifests of packaging/kubernetes/ applied as shipped, pleg-guard's identity a token of
//! the shipped ServiceAccount (TokenRequest) read from a tokenFile; `admin` (system:masters)
//! and `nobody` (no RBAC) are token-file users. No mock server.
//!
//! Skipped (printed) when the binaries, openssl or curl are missing; under CI=true that is a
//! failure instead.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pleg_guard::fleet::{Fleet, FleetError, FleetSettings, KubeTarget, SlotState, Urgency};
use pleg_guard::target::ActionKind;

const NS: &str = "pleg-guard";

fn under_ci() -> bool {
    matches!(
        std::env::var("CI")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .as_str(),
        "true" | "1" | "yes"
    )
}

/// The folder holding `etcd` and `kube-apiserver`.
fn k8s_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("PLEG_K8S_BIN") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/var/cache/pleg-guard-test")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| {
            p.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n.to_string_lossy().starts_with("k8s-"))
                && p.join("etcd").is_file()
                && p.join("kube-apiserver").is_file()
        })
        .collect();
    dirs.sort();
    dirs.pop()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// etcd and kube-apiserver, killed on drop.
struct Api {
    dir: PathBuf,
    port: u16,
    children: Vec<Child>,
    /// The garbage collector runs (kube-controller-manager was found).
    gc: bool,
    /// kube-apiserver and its arguments (to start it again).
    apiserver: (PathBuf, Vec<String>),
    /// The running kube-apiserver.
    apiserver_child: Option<Child>,
}

impl Drop for Api {
    fn drop(&mut self) {
        for c in self
            .children
            .iter_mut()
            .chain(self.apiserver_child.as_mut())
        {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn(dir: &Path, log: &str, program: &Path, args: &[String]) -> Result<Child, String> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(log))
        .map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{}: {e}", program.display()))
}

impl Api {
    fn start() -> Result<Api, String> {
        let bin = k8s_bin().ok_or("no kube-apiserver and etcd (tests/k8s/build-v134.sh)")?;
        for tool in ["openssl", "curl"] {
            if Command::new(tool).arg("--version").output().is_err() {
                return Err(format!("no {tool}"));
            }
        }
        let dir = std::env::temp_dir().join(format!(
            "pleg-guard-kapi-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut api = Api {
            dir: dir.clone(),
            port: free_port(),
            children: Vec::new(),
            gc: false,
            apiserver: (PathBuf::new(), Vec::new()),
            apiserver_child: None,
        };
        let o = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(dir.join("sa.key"))
            .arg("2048")
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err("openssl genrsa failed".to_owned());
        }
        std::fs::write(
            dir.join("tokens.csv"),
            "admintoken,admin,admin,system:masters\nnobodytoken,nobody,nobody\nreadertoken,reader,reader\n",
        )
        .map_err(|e| e.to_string())?;
        let (client, peer) = (free_port(), free_port());
        let d = |p: &str| dir.join(p).display().to_string();
        api.children.push(spawn(
            &dir,
            "etcd.log",
            &bin.join("etcd"),
            &[
                format!("--data-dir={}", d("etcd")),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
                "--log-level=warn".to_owned(),
            ],
        )?);
        api.apiserver = (
            bin.join("kube-apiserver"),
            vec![
                format!("--etcd-servers=http://127.0.0.1:{client}"),
                "--bind-address=127.0.0.1".to_owned(),
                "--advertise-address=127.0.0.1".to_owned(),
                format!("--secure-port={}", api.port),
                format!("--cert-dir={}", d("certs")),
                format!("--token-auth-file={}", d("tokens.csv")),
                "--authorization-mode=RBAC".to_owned(),
                "--disable-admission-plugins=ServiceAccount".to_owned(),
                "--service-cluster-ip-range=10.96.0.0/24".to_owned(),
                "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
                format!("--service-account-key-file={}", d("sa.key")),
                format!("--service-account-signing-key-file={}", d("sa.key")),
            ],
        );
        api.start_apiserver()?;
        api.setup()?;
        let kcm = bin.join("kube-controller-manager");
        if kcm.is_file() {
            let admin = dir.join("admin.kubeconfig");
            std::fs::write(
                &admin,
                format!(
                    "apiVersion: v1\nkind: Config\ncurrent-context: t\ncontexts:\n- name: t\n  context: {{cluster: t, user: u}}\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: certs/apiserver.crt\nusers:\n- name: u\n  user:\n    token: admintoken\n",
                    api.port
                ),
            )
            .map_err(|e| e.to_string())?;
            api.children.push(spawn(
                &dir,
                "controller-manager.log",
                &kcm,
                &[
                    format!("--kubeconfig={}", admin.display()),
                    "--controllers=garbage-collector-controller".to_owned(),
                    "--leader-elect=false".to_owned(),
                    "--secure-port=0".to_owned(),
                ],
            )?);
            api.gc = true;
        }
        Ok(api)
    }

    /// Start kube-apiserver (on the same etcd) and wait until it is ready.
    fn start_apiserver(&mut self) -> Result<(), String> {
        let (program, args) = self.apiserver.clone();
        self.apiserver_child = Some(spawn(&self.dir, "apiserver.log", &program, &args)?);
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.curl("GET", "/readyz", None).as_deref() != Ok("ok") {
            if Instant::now() > deadline {
                let mut log = String::new();
                let _ = std::fs::File::open(self.dir.join("apiserver.log"))
                    .and_then(|mut f| f.read_to_string(&mut log));
                return Err(format!("kube-apiserver not ready: {log}"));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(())
    }

    /// SIGKILL kube-apiserver.
    fn kill_apiserver(&mut self) {
        if let Some(mut c) = self.apiserver_child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `curl` as admin: the body of the answer (`body` JSON, or YAML when `yaml`).
    fn curl_as(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        yaml: bool,
    ) -> Result<String, String> {
        let mut c = Command::new("curl");
        let kind = if yaml { "yaml" } else { "json" };
        c.args(["-sSk", "--max-time", "10", "-X", method])
            .args(["-H", "Authorization: Bearer admintoken"])
            .arg("-H")
            .arg(format!("Content-Type: application/{kind}"))
            .arg(format!("https://127.0.0.1:{}{path}", self.port));
        if let Some(b) = body {
            c.args(["--data-binary", b]);
        }
        let o = c.output().map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    fn curl(&self, method: &str, path: &str, body: Option<&str>) -> Result<String, String> {
        self.curl_as(method, path, body, false)
    }

    fn post(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let answer = self.curl("POST", path, Some(&body.to_string())).unwrap();
        assert!(!answer.contains("\"Failure\""), "{path}: {answer}");
        serde_json::from_str(&answer).unwrap()
    }

    /// Create every object of a shipped manifest (packaging/kubernetes/), as an operator's
    /// `kubectl apply` would: the API server validates each.
    fn apply(&self, file: &str) {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("packaging/kubernetes")
                .join(file),
        )
        .unwrap();
        for doc in text.split("\n---\n") {
            let kind = doc
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .unwrap_or_else(|| panic!("{file}: no kind in {doc}"));
            let path = match kind {
                "Namespace" => "/api/v1/namespaces".to_owned(),
                "ServiceAccount" => format!("/api/v1/namespaces/{NS}/serviceaccounts"),
                "Role" | "RoleBinding" => format!(
                    "/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/{}s",
                    kind.to_ascii_lowercase()
                ),
                "ClusterRole" | "ClusterRoleBinding" => format!(
                    "/apis/rbac.authorization.k8s.io/v1/{}s",
                    kind.to_ascii_lowercase()
                ),
                "PriorityLevelConfiguration" | "FlowSchema" => format!(
                    "/apis/flowcontrol.apiserver.k8s.io/v1/{}s",
                    kind.to_ascii_lowercase()
                ),
                "DaemonSet" => format!("/apis/apps/v1/namespaces/{NS}/daemonsets"),
                other => panic!("{file}: kind {other} not known to this test"),
            };
            let answer = self.curl_as("POST", &path, Some(doc), true).unwrap();
            assert!(!answer.contains("\"Failure\""), "{file} {kind}: {answer}");
        }
    }

    /// The shipped manifests, and a token of the shipped ServiceAccount (TokenRequest), in
    /// the file the kubeconfig of `pleg` names (`tokenFile`).
    fn setup(&self) -> Result<(), String> {
        self.apply("rbac.yaml");
        self.apply("flowcontrol.yaml");
        self.apply("token-writer.yaml");
        let answer = self.post(
            &format!("/api/v1/namespaces/{NS}/serviceaccounts/pleg-guard/token"),
            serde_json::json!({
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600}
            }),
        );
        // `reader` may read Leases, not write them
        self.post(
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
            serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "reader"},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                           "verbs": ["get", "list"]}]
            }),
        );
        self.post(
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
            serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "reader"}]
            }),
        );
        let token = answer["status"]["token"]
            .as_str()
            .ok_or_else(|| format!("no token: {answer}"))?;
        std::fs::write(self.dir.join("sa-token"), format!("{token}\n"))
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A kubeconfig for `who`: `pleg` (the shipped ServiceAccount, by tokenFile), `nobody`
    /// (a user without RBAC), `wrong` (a token the server does not know).
    fn kubeconfig(&self, who: &str) -> PathBuf {
        let path = self.dir.join(format!("{who}.kubeconfig"));
        if path.exists() {
            // written once: members starting meanwhile read it
            return path;
        }
        let user = match who {
            "pleg" => "tokenFile: sa-token".to_owned(),
            "nobody" => "token: nobodytoken".to_owned(),
            "reader" => "token: readertoken".to_owned(),
            _ => "token: wrongtoken".to_owned(),
        };
        let part = self.dir.join(format!("{who}.kubeconfig.part"));
        std::fs::write(
            &part,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: t\ncontexts:\n- name: t\n  context: {{cluster: t, user: u}}\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: certs/apiserver.crt\nusers:\n- name: u\n  user:\n    {user}\n",
                self.port
            ),
        )
        .unwrap();
        std::fs::rename(&part, &path).unwrap();
        path
    }

    /// The slot Leases of `group` and their holders, as the API server has them.
    fn holders(&self, group: &str) -> Vec<(String, String)> {
        let body = self
            .curl(
                "GET",
                &format!(
                    "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases?labelSelector=pleg-guard.io%2Fgroup%3D{group}"
                ),
                None,
            )
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let mut out: Vec<(String, String)> = v["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|l| {
                let name = l["metadata"]["name"].as_str()?.to_owned();
                let holder = l["spec"]["holderIdentity"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                (name.contains("-slot-") && !holder.is_empty()).then_some((name, holder))
            })
            .collect();
        out.sort();
        out
    }

    fn lease(&self, name: &str) -> Option<serde_json::Value> {
        let body = self
            .curl(
                "GET",
                &format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}"),
                None,
            )
            .ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (v["kind"] == "Lease").then_some(v)
    }
}

fn require_api() -> Option<Api> {
    match Api::start() {
        Ok(a) => Some(a),
        Err(e) if !under_ci() => {
            println!("SKIPPED: {e}");
            None
        }
        Err(e) => panic!("kube-apiserver: {e}"),
    }
}

fn settings(api: &Api, token: &str, group: &str, node: &str, max: &str, ttl: u64) -> FleetSettings {
    FleetSettings {
        endpoints: Vec::new(),
        group: group.to_owned(),
        prefix: "/pleg-guard".to_owned(),
        node: node.to_owned(),
        max_disruptive: max.parse().unwrap(),
        lease_ttl: Duration::from_secs(ttl),
        request_timeout: Duration::from_secs(5),
        tls: None,
        auth: None,
        max_unhealthy: pleg_guard::fleet::storm::MaxUnhealthy::Off,
        storm_exempt: Vec::new(),
        kubernetes: Some(KubeTarget {
            kubeconfig: api.kubeconfig(token),
            namespace: NS.to_owned(),
        }),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// One API server for the whole file's tests would be cheaper; each test starts its own so
/// they stay independent (about 5 s each).
#[test]
fn leases_on_a_real_api_server() {
    let Some(mut api) = require_api() else {
        return;
    };
    contention_never_exceeds_the_budget(&api);
    a_restarted_holder_finds_its_slot_and_a_dead_one_frees_it(&api);
    findings_keep_a_lease_while_they_last(&api);
    if api.gc {
        a_deleted_node_takes_its_leases_along(&api);
    } else {
        println!("SKIPPED: a deleted Node's Leases (no kube-controller-manager)");
    }
    the_storm_guard_counts_finding_leases_of_other_writers(&api);
    an_api_server_outage_ends_the_grant_and_its_return_makes_one(&mut api);
    rbac_refusals_name_the_verb_and_resource(&api);
}

/// Eight members, budget 2: every one is granted in the end, never more than 2 at once by
/// their own account, and the API server never shows more than 2 slot holders.
fn contention_never_exceeds_the_budget(api: &Api) {
    let rt = runtime();
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..8 {
            let s = settings(api, "pleg", "busy", &format!("node-{i}"), "2", 10);
            let (holding, most, granted) = (holding.clone(), most.clone(), granted.clone());
            tasks.push(tokio::spawn(async move {
                let mut fleet = Fleet::start(s).expect("start");
                fleet.request(ActionKind::DaemonReexec, Urgency::Emergency);
                assert!(
                    fleet.wait_granted(Duration::from_secs(90)).await,
                    "node-{i}: {:?} {:?}",
                    fleet.state(),
                    fleet.view()
                );
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                granted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(400)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                fleet.release();
                fleet.shutdown().await;
            }));
        }
        let watcher = {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut seen_most = 0;
            while granted.load(Ordering::SeqCst) < 8 && Instant::now() < deadline {
                let h = api.holders("busy");
                seen_most = seen_most.max(h.len());
                assert!(h.len() <= 2, "the API server shows {h:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            seen_most
        };
        for t in tasks {
            t.await.expect("member");
        }
        assert!(watcher >= 1, "a holder was seen on the server");
    });
    assert_eq!(granted.load(Ordering::SeqCst), 8);
    assert!(most.load(Ordering::SeqCst) <= 2, "{most:?}");
    assert!(
        api.holders("busy").is_empty(),
        "all released: {:?}",
        api.holders("busy")
    );
}

/// A holder whose process is gone without a release: the same node started again finds its
/// slot at once (holderIdentity); a different node gets it only once it stayed unchanged for
/// lease_ttl on that node's own clock.
fn a_restarted_holder_finds_its_slot_and_a_dead_one_frees_it(api: &Api) {
    let ttl = 5;
    {
        let rt = runtime();
        rt.block_on(async {
            let mut a = Fleet::start(settings(api, "pleg", "solo", "node-a", "1", ttl)).unwrap();
            a.request(ActionKind::DaemonReexec, Urgency::Emergency);
            assert!(
                a.wait_granted(Duration::from_secs(20)).await,
                "{:?}",
                a.state()
            );
            std::mem::forget(a);
        });
        // the runtime goes with its tasks: no release, no goodbye (as a SIGKILL)
        rt.shutdown_background();
    }
    assert_eq!(
        api.holders("solo"),
        vec![("solo-slot-0".to_owned(), "node-a".to_owned())]
    );
    let rt = runtime();
    rt.block_on(async {
        let mut again = Fleet::start(settings(api, "pleg", "solo", "node-a", "1", ttl)).unwrap();
        let t = Instant::now();
        again.request(ActionKind::DaemonReexec, Urgency::Emergency);
        assert!(
            again.wait_granted(Duration::from_secs(3)).await,
            "{:?}",
            again.state()
        );
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "found again, not waited for"
        );
        // now it dies for good
        std::mem::forget(again);
    });
    rt.shutdown_background();
    let rt = runtime();
    rt.block_on(async {
        let mut b = Fleet::start(settings(api, "pleg", "solo", "node-b", "1", ttl)).unwrap();
        let t = Instant::now();
        b.request(ActionKind::DaemonReexec, Urgency::Emergency);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            matches!(
                b.state(),
                SlotState::Waiting {
                    holders: 1,
                    max: 1,
                    ..
                }
            ),
            "{:?}",
            b.state()
        );
        assert!(
            b.wait_granted(Duration::from_secs(30)).await,
            "{:?}",
            b.state()
        );
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_secs(ttl),
            "taken over after {waited:?}, before lease_ttl on its own clock"
        );
        assert_eq!(
            api.holders("solo"),
            vec![("solo-slot-0".to_owned(), "node-b".to_owned())]
        );
        b.release();
        b.shutdown().await;
    });
    assert!(api.holders("solo").is_empty());
}

/// A member's findings keep `<group>-finding-<node>` with the annotation; none: deleted.
fn findings_keep_a_lease_while_they_last(api: &Api) {
    let rt = runtime();
    rt.block_on(async {
        let fleet = Fleet::start(settings(api, "pleg", "sick", "node-f", "1", 10)).unwrap();
        fleet.set_findings(vec![
            "kubelet-pleg-unhealthy".to_owned(),
            "containerd-unresponsive".to_owned(),
        ]);
        let deadline = Instant::now() + Duration::from_secs(10);
        let lease = loop {
            if let Some(l) = api.lease("sick-finding-node-f") {
                break l;
            }
            assert!(Instant::now() < deadline, "no finding Lease");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(lease["spec"]["holderIdentity"], "node-f");
        assert_eq!(lease["metadata"]["labels"]["pleg-guard.io/group"], "sick");
        assert_eq!(
            lease["metadata"]["annotations"]["pleg-guard.io/findings"],
            "kubelet-pleg-unhealthy,containerd-unresponsive"
        );
        fleet.set_findings(Vec::new());
        let deadline = Instant::now() + Duration::from_secs(10);
        while api.lease("sick-finding-node-f").is_some() {
            assert!(Instant::now() < deadline, "the finding Lease stayed");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        fleet.shutdown().await;
    });
}

/// An identity without the Role: check-config's check and the state name the verb and the
/// resource refused; one that may read but not write: the check names each write verb it
/// lacks (the API server's authorizer asked, not a write tried); with the shipped RBAC the
/// check passes, Nodes counted too.
fn rbac_refusals_name_the_verb_and_resource(api: &Api) {
    let rt = runtime();
    rt.block_on(async {
        let ok = Fleet::check(&settings(api, "pleg", "rbac", "node-r", "1", 10)).await;
        assert!(ok.is_ok(), "{ok:?}");
        let e = Fleet::check(&settings(api, "nobody", "rbac", "node-r", "1", 10))
            .await
            .unwrap_err();
        match &e {
            FleetError::Auth(m) => assert!(
                m.contains("list leases.coordination.k8s.io in namespace \"pleg-guard\"")
                    && m.contains("grant the verb \"list\""),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        let e = Fleet::check(&settings(api, "reader", "rbac", "node-r", "1", 10))
            .await
            .unwrap_err();
        match &e {
            FleetError::Auth(m) => {
                for verb in ["create", "update", "delete"] {
                    assert!(
                        m.contains(&format!(
                            "{verb} leases.coordination.k8s.io in namespace \"pleg-guard\""
                        )),
                        "{verb}: {m}"
                    );
                }
                assert!(!m.contains("list leases"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        let mut storm_on = settings(api, "pleg", "rbac", "node-r", "10%", 10);
        storm_on.max_unhealthy = "20%".parse().unwrap();
        let view = Fleet::check(&storm_on)
            .await
            .expect("the shipped RBAC reads Nodes");
        assert_eq!(view.members_alive, Some(0));
        let e = Fleet::check(&settings(api, "wrong", "rbac", "node-r", "1", 10))
            .await
            .unwrap_err();
        assert!(matches!(e, FleetError::Auth(_)), "{e:?}");
        let mut fleet = Fleet::start(settings(api, "nobody", "rbac", "node-r", "1", 10)).unwrap();
        fleet.request(ActionKind::DaemonReexec, Urgency::Emergency);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let SlotState::Rejected { error } = fleet.state() {
                assert!(error.contains("list leases"), "{error}");
                break;
            }
            assert!(Instant::now() < deadline, "{:?}", fleet.state());
            let _ = tokio::time::timeout(Duration::from_millis(500), fleet.changed()).await;
        }
        fleet.shutdown().await;
    });
}

/// A holder's Leases name its Node as owner: the Node deleted, the garbage collector deletes
/// them, the slot is free at once for another node, and the holder counts its grant lost.
fn a_deleted_node_takes_its_leases_along(api: &Api) {
    let node = api.post(
        "/api/v1/nodes",
        serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-g", "labels": {"pleg-guard.io/group": "gone"}}}),
    );
    let uid = node["metadata"]["uid"].as_str().unwrap().to_owned();
    let rt = runtime();
    rt.block_on(async {
        let mut g = Fleet::start(settings(api, "pleg", "gone", "node-g", "1", 10)).unwrap();
        g.set_findings(vec!["kubelet-pleg-unhealthy".to_owned()]);
        g.request(ActionKind::RestartKubelet, Urgency::Emergency);
        assert!(
            g.wait_granted(Duration::from_secs(20)).await,
            "{:?}",
            g.state()
        );
        let slot = api.lease("gone-slot-0").expect("slot Lease");
        assert_eq!(slot["metadata"]["ownerReferences"][0]["uid"], uid.as_str());
        assert_eq!(slot["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(
            slot["metadata"]["annotations"]["pleg-guard.io/action"],
            "restart-kubelet"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while api.lease("gone-finding-node-g").is_none() {
            assert!(Instant::now() < deadline, "no finding Lease");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        api.curl("DELETE", "/api/v1/nodes/node-g", None).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while api.lease("gone-slot-0").is_some() || api.lease("gone-finding-node-g").is_some() {
            assert!(
                Instant::now() < deadline,
                "the garbage collector left the Leases"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let mut h = Fleet::start(settings(api, "pleg", "gone", "node-h", "1", 10)).unwrap();
        h.request(ActionKind::RestartKubelet, Urgency::Emergency);
        assert!(
            h.wait_granted(Duration::from_secs(10)).await,
            "{:?}",
            h.state()
        );
        // node-g's next renewal finds its slot gone (or taken): its grant is lost
        let deadline = Instant::now() + Duration::from_secs(15);
        while matches!(g.state(), SlotState::Granted { .. }) {
            assert!(Instant::now() < deadline, "node-g still granted");
            let _ = tokio::time::timeout(Duration::from_millis(500), g.changed()).await;
        }
        assert!(g.view().expired >= 1, "{:?}", g.view());
        h.release();
        h.shutdown().await;
        g.shutdown().await;
    });
}

/// The API server stopped: the holder's grant ends within its tenure (it can no longer
/// renew) and both members say Unreachable (what `on_unreachable` acts on); back: one grant
/// (the holder's renewal of its own slot or the other's takeover of it, whichever the server
/// takes first), never two, one holder on the server, and the slot handed on at release.
fn an_api_server_outage_ends_the_grant_and_its_return_makes_one(api: &mut Api) {
    let ttl = 6;
    let rt = runtime();
    let (mut u, mut v) = rt.block_on(async {
        let mut u = Fleet::start(settings(api, "pleg", "down", "node-u", "1", ttl)).unwrap();
        u.request(ActionKind::DaemonReexec, Urgency::Emergency);
        assert!(
            u.wait_granted(Duration::from_secs(20)).await,
            "{:?}",
            u.state()
        );
        let v = Fleet::start(settings(api, "pleg", "down", "node-v", "1", ttl)).unwrap();
        v.request(ActionKind::DaemonReexec, Urgency::Emergency);
        tokio::time::sleep(Duration::from_secs(1)).await;
        (u, v)
    });
    let stopped = Instant::now();
    api.kill_apiserver();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(ttl + 10);
        loop {
            let (su, sv) = (u.state(), v.state());
            assert!(
                !(matches!(su, SlotState::Granted { .. })
                    && stopped.elapsed() > Duration::from_secs(ttl)),
                "node-u still granted {:?} after the API server stopped",
                stopped.elapsed()
            );
            if matches!(su, SlotState::Unreachable { .. })
                && matches!(sv, SlotState::Unreachable { .. })
            {
                break;
            }
            assert!(Instant::now() < deadline, "{su:?} {sv:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(u.view().expired >= 1, "{:?}", u.view());
    });
    api.start_apiserver().unwrap();
    rt.block_on(async {
        let granted = |f: &Fleet| matches!(f.state(), SlotState::Granted { .. });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !granted(&u) && !granted(&v) {
            assert!(Instant::now() < deadline, "{:?} {:?}", u.state(), v.state());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // the slot was free once node-u's tenure ended: node-u's renewal of its own slot and
        // node-v's takeover race for one resourceVersion, and one wins
        let (winner, loser) = if granted(&u) {
            ("node-u", &v)
        } else {
            ("node-v", &u)
        };
        let until = Instant::now() + Duration::from_secs(ttl + 4);
        while Instant::now() < until {
            assert!(
                granted(&u) != granted(&v),
                "{:?} {:?}",
                u.state(),
                v.state()
            );
            assert!(!granted(loser), "two grants");
            assert_eq!(
                api.holders("down"),
                vec![("down-slot-0".to_owned(), winner.to_owned())]
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (first, second) = if winner == "node-u" {
            (&mut u, &mut v)
        } else {
            (&mut v, &mut u)
        };
        first.release();
        assert!(
            second.wait_granted(Duration::from_secs(15)).await,
            "{:?}",
            second.state()
        );
        second.release();
    });
    rt.block_on(async {
        u.shutdown().await;
        v.shutdown().await;
    });
}

/// The storm guard reads the group's size from its labelled Nodes and its sick members from
/// the live finding Leases, whoever wrote them; a member reporting an exempt finding (the
/// proven-local bus wedge) does not count.
fn the_storm_guard_counts_finding_leases_of_other_writers(api: &Api) {
    for i in 0..6 {
        api.post(
            "/api/v1/nodes",
            serde_json::json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("storm-{i}"), "labels": {"pleg-guard.io/group": "storm"}}}),
        );
    }
    let finding = |node: &str, ids: &str| {
        api.post(
            &format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"),
            serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": format!("storm-finding-{node}"),
                    "labels": {"pleg-guard.io/group": "storm"},
                    "annotations": {"pleg-guard.io/findings": ids}},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 60}}),
        );
    };
    finding("storm-1", "kubelet-pleg-unhealthy");
    let rt = runtime();
    rt.block_on(async {
        let mut s = settings(api, "pleg", "storm", "storm-0", "1", 10);
        s.max_unhealthy = "20%".parse().unwrap();
        s.storm_exempt = vec!["systemd-bus-wedge".to_owned()];
        let mut fleet = Fleet::start(s).unwrap();
        let h = fresh_health(&mut fleet).await;
        assert_eq!(h.members, 6);
        assert_eq!(h.unhealthy, vec!["storm-1".to_owned()]);
        assert!(!h.storming, "1 of 6 is not more than 20 %");
        finding("storm-2", "containerd-unresponsive,dead-containers");
        finding("storm-3", "systemd-bus-wedge,bus-unresponsive");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let h = fresh_health(&mut fleet).await;
        assert_eq!(
            h.unhealthy,
            vec!["storm-1".to_owned(), "storm-2".to_owned()]
        );
        assert!(
            h.storming,
            "2 of 6 is more than 20 %; storm-3's bus wedge is exempt"
        );
        fleet.shutdown().await;
    });
}

/// Ask for the group's health and wait for a read newer than the one shown.
async fn fresh_health(fleet: &mut Fleet) -> pleg_guard::fleet::GroupHealth {
    let before = fleet.view().health.map(|h| h.read_at);
    fleet.read_health();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(h) = fleet.view().health {
            if Some(h.read_at) != before {
                return h;
            }
        }
        assert!(Instant::now() < deadline, "no health read");
        let _ = tokio::time::timeout(Duration::from_millis(300), fleet.changed()).await;
    }
}
