//! pleg-guard on a containerd node, against a real containerd with its CRI plugin: the bed's
//! own containerd that `tests/bed/containerd.sh` (run by prepare.sh) starts on the host, whose
//! socket directory beds bind onto `/run/containerd`. Pods and containers are made through CRI
//! from here (the project's own CRI client, host networking, no CNI), then faults are
//! injected for real: containerd SIGSTOPped, its socket gone, a shim SIGSTOPped.
//!
//! Every test holds the containerd lock (the one containerd is shared, and a stopped one
//! stops every test's calls).

mod support;

#[allow(dead_code, unused_imports)]
#[path = "../src/client/cri/mod.rs"]
mod cri;

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use support::*;

use cri::proto;
use cri::proto::runtime_service_client::RuntimeServiceClient;

/// Where containerd.sh's containerd serves (the directory is bound onto a bed's /run/containerd).
const SOCKET_DIR: &str = "/run/pleg-guard-test-containerd/sock";
const SOCKET: &str = "/run/pleg-guard-test-containerd/sock/containerd.sock";
const CONFIG_FILE: &str = "/run/pleg-guard-test-containerd/config.toml";
const LOCK_FILE: &str = "/run/pleg-guard-test-containerd.lock";
/// The sandbox image containerd.sh imported; containers run it too (busybox, `sleep` default).
const IMAGE: &str = "docker.io/pleg-guard-test/pause:latest";
/// The Kubernetes namespace of every pod made here.
const POD_NAMESPACE: &str = "pleg-guard-test";

// ------------------------------------------------------------------------------------------------
// the shared containerd: lock, pid, stopping it
// ------------------------------------------------------------------------------------------------

static MUTEX: Mutex<()> = Mutex::new(());

/// Serialises containerd tests within this process and across processes (flock).
struct ContainerdLock {
    _file: Flock<File>,
    _guard: MutexGuard<'static, ()>,
}

fn containerd_lock() -> ContainerdLock {
    let guard = MUTEX.lock().unwrap_or_else(|e| e.into_inner());
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(LOCK_FILE)
        .unwrap_or_else(|e| panic!("open {LOCK_FILE}: {e}"));
    let file = Flock::lock(file, FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("flock {LOCK_FILE}: {e}"));
    ContainerdLock {
        _file: file,
        _guard: guard,
    }
}

/// The host pid of containerd.sh's containerd.
fn containerd_pid() -> u32 {
    let out = host_ok(
        "pgrep",
        &["-f", &format!("^containerd --config {CONFIG_FILE}$")],
    );
    let pids: Vec<u32> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(pids.len(), 1, "expected one bed containerd, found {pids:?}");
    pids[0]
}

/// The host pid of the shim that runs pod sandbox `id`.
fn shim_pid(sandbox_id: &str) -> u32 {
    let out = host_ok(
        "pgrep",
        &[
            "-f",
            &format!("containerd-shim-runc-v2 .*-id {sandbox_id} .*-address {SOCKET}"),
        ],
    );
    let pids: Vec<u32> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(
        pids.len(),
        1,
        "expected one shim for {sandbox_id}, found {pids:?}"
    );
    pids[0]
}

/// A SIGSTOPped host process; Drop SIGCONTs it (also on panic).
struct Stopped {
    pid: u32,
    what: &'static str,
}

fn sigstop(pid: u32, what: &'static str) -> Stopped {
    let guard = Stopped { pid, what };
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP)
        .unwrap_or_else(|e| panic!("SIGSTOP {what} ({pid}): {e}"));
    wait_until(&format!("{what} ({pid}) stopped"), secs(5), || {
        host_proc_state(pid) == Some('T')
    });
    guard
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Err(e) = kill(Pid::from_raw(self.pid as i32), Signal::SIGCONT) {
            eprintln!("SIGCONT {} ({}): {e}", self.what, self.pid);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// CRI from the test: pods and containers
// ------------------------------------------------------------------------------------------------

type Client = RuntimeServiceClient<cri::CriChannel>;

/// Runs one exchange with the bed's containerd (connect + `f`) within `limit`.
fn cri_call<T>(
    limit: Duration,
    f: impl AsyncFnOnce(&mut Client) -> Result<tonic::Response<T>, tonic::Status>,
) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        let work = async {
            let channel = cri::connect(Path::new(SOCKET))
                .await
                .map_err(|e| format!("connect {SOCKET}: {e}"))?;
            let mut client = channel.runtime_service();
            f(&mut client)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
        };
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| format!("no answer within {limit:?}"))?
    })
}

/// Like [`cri_call`] with a 60 s limit, panicking on failure.
fn cri_ok<T>(
    what: &str,
    f: impl AsyncFnOnce(&mut Client) -> Result<tonic::Response<T>, tonic::Status>,
) -> T {
    cri_call(secs(60), f).unwrap_or_else(|e| panic!("CRI {what}: {e}"))
}

/// A pod sandbox (host network); Drop stops and removes it with its containers.
struct Pod {
    id: String,
    name: String,
    config: proto::PodSandboxConfig,
}

impl Pod {
    fn run(name: &str) -> Pod {
        let config = proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: name.into(),
                uid: name.into(),
                namespace: POD_NAMESPACE.into(),
                attempt: 0,
            }),
            // host network: the node's hostname (a private one needs a UTS namespace)
            linux: Some(proto::LinuxPodSandboxConfig {
                security_context: Some(proto::LinuxSandboxSecurityContext {
                    namespace_options: Some(proto::NamespaceOption {
                        network: proto::NamespaceMode::Node as i32,
                        pid: proto::NamespaceMode::Pod as i32,
                        ipc: proto::NamespaceMode::Pod as i32,
                        target_id: String::new(),
                    }),
                    privileged: false,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = proto::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let id = cri_ok("RunPodSandbox", async |c| c.run_pod_sandbox(req).await).pod_sandbox_id;
        Pod {
            id,
            name: name.into(),
            config,
        }
    }

    /// Creates (and, when `start`, starts) a container running `command` in the pod.
    fn container(&self, name: &str, command: &[&str], start: bool) -> String {
        let req = proto::CreateContainerRequest {
            pod_sandbox_id: self.id.clone(),
            config: Some(proto::ContainerConfig {
                metadata: Some(proto::ContainerMetadata {
                    name: name.into(),
                    attempt: 0,
                }),
                image: Some(proto::ImageSpec {
                    image: IMAGE.into(),
                }),
                command: command.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
            sandbox_config: Some(self.config.clone()),
        };
        let id = cri_ok("CreateContainer", async |c| c.create_container(req).await).container_id;
        if start {
            let req = proto::StartContainerRequest {
                container_id: id.clone(),
            };
            cri_ok("StartContainer", async |c| c.start_container(req).await);
        }
        id
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        remove_pod(&self.id, &self.name);
    }
}

fn remove_pod(id: &str, name: &str) {
    for step in ["StopPodSandbox", "RemovePodSandbox"] {
        let id = id.to_string();
        let r = cri_call(secs(60), async |c| {
            if step == "StopPodSandbox" {
                c.stop_pod_sandbox(proto::StopPodSandboxRequest { pod_sandbox_id: id })
                    .await
                    .map(|r| r.map(|_| ()))
            } else {
                c.remove_pod_sandbox(proto::RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await
                    .map(|r| r.map(|_| ()))
            }
        });
        if let Err(e) = r {
            eprintln!("{step} {name}: {e}");
        }
    }
}

/// Removes pods made by test processes that are gone (named `pgt-<pid>-...`).
fn cleanup_stale_pods() {
    let pods = cri_ok("ListPodSandbox", async |c| {
        c.list_pod_sandbox(proto::ListPodSandboxRequest { filter: None })
            .await
    });
    for p in pods.items {
        let Some(md) = p.metadata else { continue };
        let stale = md.namespace == POD_NAMESPACE
            && md
                .name
                .strip_prefix("pgt-")
                .and_then(|r| r.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if stale {
            remove_pod(&p.id, &md.name);
        }
    }
}

/// The CRI state of container `id` (`ContainerState` as i32).
fn container_state(id: &str) -> i32 {
    let req = proto::ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    };
    cri_ok("ContainerStatus", async |c| c.container_status(req).await)
        .status
        .map(|s| s.state)
        .unwrap_or(-1)
}

/// Holds the lock, checks containerd answers, removes stale pods.
fn setup() -> Option<(BedEnv, ContainerdLock)> {
    let env = require_bed()?;
    let lock = containerd_lock();
    assert!(
        Path::new(SOCKET).exists(),
        "{SOCKET} missing: tests/bed/containerd.sh (run by prepare.sh) did not start containerd"
    );
    cleanup_stale_pods();
    Some((env, lock))
}

// ------------------------------------------------------------------------------------------------
// pleg-guard
// ------------------------------------------------------------------------------------------------

/// A bed with the bed containerd's socket at /run/containerd/containerd.sock and no docker.
fn containerd_bed(env: &BedEnv) -> Bed {
    let mut opts = BedOptions::with_pleg_guard();
    opts.extra_binds
        .push((SOCKET_DIR.into(), "/run/containerd".to_owned()));
    Bed::boot(env, opts)
}

const DIAGNOSE_CONFIG: &str = "[probe]\ntimeout = \"2s\"\nslow_after = \"1s\"\n";

/// `diagnose --json` on the host against the bed containerd only (every other target off).
fn host_diagnose() -> Value {
    let dir = std::env::temp_dir().join(unique_name("containerd-conf"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[probe]\ntimeout = \"2s\"\n[containerd]\nsocket = \"{SOCKET}\"\n[docker]\nenabled = false\n\
             [dbus]\nenabled = false\n[systemd]\nprivate_socket = \"/nonexistent/private\"\n[kubelet]\nenabled = false\n"
        ),
    )
    .unwrap();
    let o = std::process::Command::new(built_pleg_guard())
        .args(["diagnose", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let r: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

// ------------------------------------------------------------------------------------------------
// tests
// ------------------------------------------------------------------------------------------------

/// A containerd node without docker is a normal node: containerd `ok` with its pods and
/// containers counted, docker `absent`, nothing found. kubelet's PLEG lines are still found
/// there, and a socket that goes away makes containerd `absent`. Also measures the relist.
#[test]
fn containerd_node_is_watched_through_cri() {
    let Some((env, _lock)) = setup() else { return };
    let pod = Pod::run(&unique_name("web"));
    let app = pod.container("app", &["sleep", "3600"], true);
    let done = pod.container("done", &["true"], true);
    pod.container("created", &["true"], false);
    wait_until("the `done` container exited", secs(20), || {
        container_state(&done) == proto::ContainerState::ContainerExited as i32
    });
    assert_eq!(
        container_state(&app),
        proto::ContainerState::ContainerRunning as i32
    );

    // the probe's own relist from the host, measured
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut totals = Vec::new();
    for _ in 0..30 {
        let r = rt
            .block_on(cri::relist(Path::new(SOCKET), secs(5)))
            .unwrap_or_else(|e| panic!("relist: {e}"));
        assert!(r.containers.len() >= 3 && !r.sandboxes.is_empty(), "{r:?}");
        assert!(r.status_check.is_some());
        totals.push(r.timings.total);
    }
    let min = *totals.iter().min().unwrap();
    let max = *totals.iter().max().unwrap();
    let med = median(&mut totals);
    eprintln!(
        "MEASURED relist (connect, Version, ListPodSandbox, ListContainers, ContainerStatus) against containerd 1.6, n=30: min {min:?} / median {med:?} / max {max:?}"
    );
    assert!(med < secs(1), "median relist {med:?}");

    let bed = containerd_bed(&env);
    let (code, r, _) = bed.diagnose_json(DIAGNOSE_CONFIG);
    for t in ["dbus", "systemd", "logind", "containerd", "kubelet"] {
        assert!(
            matches!(report_state(&r, t), "ok" | "slow"),
            "{t} is {} on a healthy containerd node: {r:#}",
            report_state(&r, t)
        );
    }
    assert_eq!(report_state(&r, "docker"), "absent", "{r:#}");
    let facts = &r["targets"]["containerd"]["facts"];
    assert!(facts["containers"].as_u64().unwrap_or(0) >= 3, "{r:#}");
    assert!(facts["sandboxes"].as_u64().unwrap_or(0) >= 1, "{r:#}");
    assert!(
        facts["runtime_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("containerd "),
        "{r:#}"
    );
    assert!(finding_ids(&r).is_empty(), "{r:#}");
    assert_eq!(code, 0, "{r:#}");
    let table = bed.exec(&["pleg-guard", "diagnose"], secs(30));
    eprintln!(
        "--- diagnose on a containerd node ---\n{}",
        String::from_utf8_lossy(&table.stdout)
    );

    // the daemon on it: healthy, nothing found, nothing done
    bed.install_pleg_guard(
        "interval = \"1s\"\nstartup_grace = \"0s\"\n[probe]\ntimeout = \"1s\"\nunhealthy_after = 2\n",
    );
    bed.start_pleg_guard();
    std::thread::sleep(secs(4));
    let status = bed.status_json();
    assert_eq!(status["healthy"], true, "{status:#}");
    assert!(
        matches!(
            status["targets"]["containerd"]["state"].as_str(),
            Some("ok" | "slow")
        ),
        "{status:#}"
    );
    assert_eq!(status["targets"]["docker"]["state"], "absent", "{status:#}");
    let events = bed
        .journal(&["-u", "pleg-guard", "PLEG_GUARD_EVENT=finding"])
        .len()
        + bed
            .journal(&["-u", "pleg-guard", "PLEG_GUARD_EVENT=action-started"])
            .len();
    assert_eq!(events, 0, "{}", bed.pleg_guard_diagnostics());
    bed.sh_ok("systemctl stop pleg-guard");

    // kubelet on containerd logs the same PLEG lines
    bed.kubelet_wedge();
    wait_until("the stand-in kubelet logs PLEG lines", secs(10), || {
        bed.sh("journalctl -u kubelet -o cat | grep -q 'PLEG is not healthy'")
            .status
            .success()
    });
    let (code, r, _) = bed.diagnose_json(DIAGNOSE_CONFIG);
    assert_eq!(report_state(&r, "kubelet"), "error", "{r:#}");
    assert!(
        matches!(report_state(&r, "containerd"), "ok" | "slow"),
        "{r:#}"
    );
    assert_eq!(finding_ids(&r), vec!["kubelet-pleg-unhealthy"], "{r:#}");
    assert_eq!(code, 1);
    bed.kubelet_heal();

    // the socket goes away (containerd uninstalled, or its /run entry gone): absent
    bed.sh_ok("umount /run/containerd && ! test -e /run/containerd/containerd.sock");
    let (_, r, _) = bed.diagnose_json(DIAGNOSE_CONFIG);
    assert_eq!(report_state(&r, "containerd"), "absent", "{r:#}");
    assert!(
        r["targets"]["containerd"]["detail"]
            .as_str()
            .unwrap_or("")
            .contains("no containerd socket at /run/containerd/containerd.sock"),
        "{r:#}"
    );
}

/// containerd SIGSTOPped: CRI calls hang, `diagnose` abandons them at the timeout, the
/// daemon finds `containerd-unresponsive` and holds kubelet's restart back while it stands;
/// once containerd answers again the PLEG finding gets its kubelet restart.
#[test]
fn hung_containerd_is_unresponsive_and_kubelet_restart_waits() {
    let Some((env, _lock)) = setup() else { return };
    // prepare.sh before this branch resumed every stopped process named containerd (under the
    // docker lock): holding that lock too keeps such a run from resuming ours mid-test.
    let _docker = docker_lock();
    let bed = containerd_bed(&env);
    let pid = containerd_pid();

    let stopped = sigstop(pid, "containerd");
    let (code, r, took) = bed.diagnose_json(DIAGNOSE_CONFIG);
    assert_eq!(report_state(&r, "containerd"), "unresponsive", "{r:#}");
    assert!(
        r["targets"]["containerd"]["detail"]
            .as_str()
            .unwrap_or("")
            .contains("call abandoned"),
        "{r:#}"
    );
    assert_eq!(finding_ids(&r), vec!["containerd-unresponsive"], "{r:#}");
    assert_eq!(code, 1);
    assert!(
        took < secs(2) + secs(1) + Duration::from_millis(500),
        "took {took:?}"
    );
    let table = bed.exec(&["pleg-guard", "diagnose"], secs(30));
    eprintln!(
        "--- diagnose with containerd stopped ---\n{}",
        String::from_utf8_lossy(&table.stdout)
    );

    bed.install_pleg_guard(
        "interval = \"1s\"\nstartup_grace = \"0s\"\n[probe]\ntimeout = \"1s\"\nslow_after = \"500ms\"\nunhealthy_after = 2\n\
         [kubelet]\npleg_log_window = \"8s\"\n[actions.restart_kubelet]\nsettle = \"5s\"\n\
         [actions.restart_containerd]\nenabled = false\n",
    );
    // restart-containerd is off: this scenario is the kubelet rung waiting for the runtime
    // (the cure itself is tests/real_node.rs frozen_containerd_is_restarted_in_place...)
    bed.start_pleg_guard();
    let kubelet = bed.main_pid("kubelet.service");
    bed.wait_event(
        "target-unhealthy",
        &[("PLEG_GUARD_TARGET", "containerd")],
        secs(20),
    );
    bed.wait_event(
        "finding",
        &[
            ("PLEG_GUARD_FINDING", "containerd-unresponsive"),
            ("PLEG_GUARD_TARGET", "containerd"),
        ],
        secs(20),
    );
    bed.kubelet_wedge();
    let skipped = bed.wait_event(
        "action-skipped",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(30),
    );
    assert!(
        field(&skipped, "MESSAGE")
            .unwrap_or("")
            .contains("containerd-unresponsive"),
        "{skipped:?}"
    );
    // every round's hung call is abandoned with its connection: nothing piles up
    let daemon = bed.main_pid("pleg-guard.service");
    let fds = || -> usize {
        let n = bed.sh_ok(&format!("ls /proc/{daemon}/fd | wc -l"));
        n.parse().unwrap_or_else(|e| panic!("fd count {n:?}: {e}"))
    };
    let before = fds();
    std::thread::sleep(secs(4));
    let after = fds();
    assert!(
        after <= before + 1,
        "pleg-guard's fds grew from {before} to {after} in 4 rounds with containerd hung"
    );
    let status = bed.status_json();
    assert_eq!(status["targets"]["containerd"]["state"], "unresponsive");
    let text = bed.sh("pleg-guard status");
    let out = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.status.code(), Some(1), "{}", show(&text));
    assert!(
        out.lines()
            .any(|l| l.starts_with("containerd ") && l.contains(" unresponsive ")),
        "{out}"
    );
    assert!(out.contains("PROBLEM containerd-unresponsive"), "{out}");
    assert_eq!(
        bed.journal(&["-u", "pleg-guard", "PLEG_GUARD_EVENT=action-started"])
            .len(),
        0,
        "no action while containerd hangs"
    );
    assert_eq!(bed.main_pid("kubelet.service"), kubelet);

    // containerd answers again: recovered, and now kubelet's restart may run
    drop(stopped);
    bed.wait_event(
        "target-recovered",
        &[("PLEG_GUARD_TARGET", "containerd")],
        secs(20),
    );
    bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(30),
    );
    assert_ne!(bed.main_pid("kubelet.service"), kubelet);
}

/// A pod's shim SIGSTOPped: what PLEG's relist sees. containerd answers `ListPodSandbox`,
/// `ListContainers` and `ContainerStatus` from its own store without asking the shim, so the
/// relist stays healthy (a hung shim is invisible to PLEG) while calls that need the shim —
/// here `StopContainer` — hang.
#[test]
fn stopped_shim_is_invisible_to_the_relist() {
    let Some((_env, _lock)) = setup() else { return };
    let pod = Pod::run(&unique_name("shim"));
    let app = pod.container("app", &["sleep", "3600"], true);
    let shim = sigstop(shim_pid(&pod.id), "containerd-shim-runc-v2");

    let r = host_diagnose();
    eprintln!(
        "shim stopped: containerd {} in {} ms: {}",
        report_state(&r, "containerd"),
        r["targets"]["containerd"]["latency_ms"],
        r["targets"]["containerd"]["detail"]
    );
    assert!(
        matches!(report_state(&r, "containerd"), "ok" | "slow"),
        "{r:#}"
    );
    assert!(finding_ids(&r).is_empty(), "{r:#}");

    // ... while a call that needs the shim hangs
    let req = proto::StopContainerRequest {
        container_id: app.clone(),
        timeout: 1,
    };
    let stop = cri_call(secs(4), async |c| c.stop_container(req).await);
    assert!(
        stop.as_ref().is_err_and(|e| e.contains("no answer")),
        "StopContainer with the shim stopped: {stop:?}"
    );
    drop(shim);
}

/// containerd restarted while a pod's shim is SIGSTOPped. One would expect CRI to report the
/// container `CONTAINER_UNKNOWN` (its state cannot be read from the hung shim); containerd
/// 1.6.20 is back within ~2 s and keeps reporting it `CONTAINER_RUNNING` from its checkpoint
/// (watched for 80 s once by hand). So the relist stays healthy and no finding is made:
/// pleg-guard does not false-alarm on it (`cri-unknown-containers` is tested against a fake
/// runtime that reports the state, `src/client/cri/tests.rs` and `src/probe/containerd.rs`).
#[test]
fn restart_with_a_hung_shim_keeps_the_relist_healthy() {
    let Some((_env, _lock)) = setup() else { return };
    let _docker = docker_lock(); // see hung_containerd_is_unresponsive_and_kubelet_restart_waits
    let pod = Pod::run(&unique_name("restart"));
    let app = pod.container("app", &["sleep", "3600"], true);
    let shim = sigstop(shim_pid(&pod.id), "containerd-shim-runc-v2");
    let pid = containerd_pid();
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM)
        .unwrap_or_else(|e| panic!("SIGTERM containerd ({pid}): {e}"));
    wait_until("containerd exited", secs(20), || {
        host_proc_state(pid).is_none()
    });
    let t = Instant::now();
    let o = run_with_timeout(
        std::process::Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/bed/containerd.sh"
            ))
            // this test holds both locks: the script must not wait for them
            .env("PLEG_GUARD_TEST_CONTAINERD_LOCK_HELD", "1")
            .env("PLEG_GUARD_TEST_DOCKER_LOCK_HELD", "1"),
        None,
        secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "containerd.sh: {}", show(&o));
    eprintln!(
        "containerd answers again {:?} after its restart",
        t.elapsed()
    );

    let r = host_diagnose();
    assert!(
        matches!(report_state(&r, "containerd"), "ok" | "slow"),
        "{r:#}"
    );
    assert!(finding_ids(&r).is_empty(), "{r:#}");
    assert_eq!(
        container_state(&app),
        proto::ContainerState::ContainerRunning as i32,
        "containerd 1.6.20 reports a container of a hung shim as running after a restart"
    );
    drop(shim);
}

/// The pids of containerd.sh's containerd (none while it is down).
fn containerd_pids() -> Vec<u32> {
    let o = std::process::Command::new("pgrep")
        .args(["-f", &format!("^containerd --config {CONFIG_FILE}$")])
        .output()
        .unwrap_or_else(|e| panic!("pgrep: {e}"));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// `tests/bed/containerd.sh` (which every test binary's prepare.sh runs) while a test holds the
/// containerd lock with containerd down for longer than the 60 s after which the script once
/// went on without the lock: it waits, starts no second containerd and imports nothing
/// meanwhile, and succeeds once the holder has brought containerd back. Two copies run at once,
/// so their configuration writes meet too. A fresh-machine run of the suite once failed with
/// "docker.io/pleg-guard-test/pause:latest not in containerd after import" exactly so.
#[test]
fn containerd_sh_waits_while_a_test_holds_containerd_down() {
    let Some((_env, lock)) = setup() else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/bed/containerd.sh");
    let pid = containerd_pid();
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM)
        .unwrap_or_else(|e| panic!("SIGTERM containerd ({pid}): {e}"));
    wait_until("containerd exited", secs(20), || {
        host_proc_state(pid).is_none()
    });
    let mut waiters: Vec<std::process::Child> = (0..2)
        .map(|_| {
            std::process::Command::new("bash")
                .arg(script)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("bash {script}: {e}"))
        })
        .collect();
    let held = Instant::now();
    while held.elapsed() < secs(70) {
        assert_eq!(
            containerd_pids(),
            Vec::<u32>::new(),
            "containerd.sh started containerd while a test held the lock"
        );
        for w in &mut waiters {
            let done = w.try_wait().unwrap_or_else(|e| panic!("wait: {e}"));
            assert!(
                done.is_none(),
                "containerd.sh ended ({done:?}) while a test held the lock"
            );
        }
        std::thread::sleep(secs(1));
    }
    // the holder brings containerd back, as restart_with_a_hung_shim_keeps_the_relist_healthy does
    let o = run_with_timeout(
        std::process::Command::new("bash")
            .arg(script)
            .env("PLEG_GUARD_TEST_CONTAINERD_LOCK_HELD", "1"),
        None,
        secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "containerd.sh: {}", show(&o));
    drop(lock);
    for w in waiters {
        let deadline = Instant::now() + secs(120);
        let mut w = w;
        while w
            .try_wait()
            .unwrap_or_else(|e| panic!("wait: {e}"))
            .is_none()
        {
            assert!(
                Instant::now() < deadline,
                "containerd.sh still waiting 120 s after the lock was released"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let o = w.wait_with_output().unwrap_or_else(|e| panic!("wait: {e}"));
        assert!(
            o.status.success(),
            "containerd.sh after the lock: {}",
            show(&o)
        );
    }
    assert_eq!(containerd_pids().len(), 1, "one bed containerd afterwards");
    let images = host_ok(
        "ctr",
        &["--address", SOCKET, "-n", "k8s.io", "images", "ls", "-q"],
    );
    assert!(
        images.lines().any(|l| l.trim() == IMAGE),
        "{IMAGE} in containerd afterwards: {images}"
    );
}
