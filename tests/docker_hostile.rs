//! The shipped binary against a hostile docker engine: `pleg-guard diagnose` asks a unix socket
//! served here that answers the container listing with 1 GiB of JSON (as fast as the socket
//! takes it). The listing must be refused at its 6 MiB cap with a plain `error` state, and the
//! pleg-guard process must stay under 16 MiB of RSS: its VmHWM, read from /proc while it runs.
//! The binary measured is the one the .deb ships (`PLEG_GUARD_DEB`, which tests/run-all.sh
//! builds first; required under CI=true): an unoptimised test build starts at ~18 MiB by
//! itself, so outside CI, without a .deb, only the growth over an honest engine's run is
//! checked. No bed, no root needed.

mod support;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const GIB: u64 = 1 << 30;
const VERSION: &str = r#"{"Version":"20.10.24","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux","Arch":"amd64"}"#;
const CONTAINER: &str = r#"{"Id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","Names":["/k8s_app_web-0"],"Image":"busybox","State":"running","Status":"Up 2 hours"},"#;

/// One connection of the engine: `/version` honestly, the listing as 1 GiB of JSON containers
/// when `hostile` (else one container). Counts what the listing got out before the client hung
/// up.
fn serve(mut s: UnixStream, sent: &AtomicU64, hostile: bool) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let target = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
    if !target.contains("/containers/json") {
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{VERSION}",
            VERSION.len()
        );
        return;
    }
    if !hostile {
        let one = format!("[{}]", CONTAINER.trim_end_matches(','));
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{one}",
            one.len()
        );
        return;
    }
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {GIB}\r\nConnection: close\r\n\r\n["
    );
    let chunk = CONTAINER.repeat(64 * 1024 / CONTAINER.len());
    let mut total = 1u64;
    while total < GIB {
        let n = chunk
            .len()
            .min(usize::try_from(GIB - total).unwrap_or(usize::MAX));
        if s.write_all(&chunk.as_bytes()[..n]).is_err() {
            break;
        }
        total += n as u64;
        sent.store(total, Ordering::Relaxed);
    }
}

/// `VmHWM` of `pid` in KiB, while it has an address space.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn config(dir: &Path, docker: &Path) -> String {
    format!(
        r#"state_directory = "{d}/state"
runtime_directory = "{d}/run"

[probe]
timeout = "5s"

[dbus]
enabled = false

[systemd]
private_socket = "{d}/no-private-socket"

[logind]
enabled = false

[docker]
socket = "{docker}"

[containerd]
enabled = false

[kubelet]
enabled = false
"#,
        d = dir.display(),
        docker = docker.display()
    )
}

/// The binary the .deb ships, unpacked from `PLEG_GUARD_DEB` into `dir`; None when no .deb is
/// named (a failure under CI=true, where tests/run-all.sh always names one).
fn shipped_binary(dir: &Path) -> Option<PathBuf> {
    let Some(deb) = std::env::var_os("PLEG_GUARD_DEB") else {
        assert!(
            !under_ci(),
            "PLEG_GUARD_DEB is required under CI=true: the memory bound is the shipped binary's"
        );
        return None;
    };
    let root = dir.join("deb-root");
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .output();
    assert!(
        out.as_ref().is_ok_and(|o| o.status.success()),
        "dpkg-deb -x {}: {out:?}",
        Path::new(&deb).display()
    );
    Some(root.join("usr/bin/pleg-guard"))
}

/// What one `diagnose --json` run against an engine on `socket` showed.
struct Run {
    status: std::process::ExitStatus,
    took: Duration,
    hwm_kib: u64,
    report: Value,
    sent_mib: f64,
}

/// Serve an engine (hostile or honest) on `socket` and run `binary diagnose --json` against it,
/// reading its VmHWM from /proc every 2 ms until it exits.
fn diagnose_against(binary: &Path, dir: &Path, tag: &str, hostile: bool) -> Run {
    let socket = dir.join(format!("{tag}.sock"));
    let listener = UnixListener::bind(&socket);
    let Ok(listener) = listener else {
        panic!("bind {}: {listener:?}", socket.display())
    };
    let sent = Arc::new(AtomicU64::new(0));
    let served = sent.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let sent = served.clone();
            std::thread::spawn(move || serve(s, &sent, hostile));
        }
    });
    let config_path = dir.join(format!("{tag}.toml"));
    assert!(std::fs::write(&config_path, config(dir, &socket)).is_ok());

    let start = Instant::now();
    let child = Command::new(binary)
        .args(["diagnose", "--json", "--config"])
        .arg(&config_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        panic!("spawn {}: {child:?}", binary.display())
    };
    let pid = child.id();
    // The pipes are drained while it runs, so a large report cannot block it.
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut text);
        }
        text
    });
    let mut hwm_kib = 0u64;
    let status = loop {
        if let Some(k) = vm_hwm_kib(pid) {
            hwm_kib = hwm_kib.max(k);
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            other => {
                let _ = child.kill();
                panic!("pleg-guard diagnose did not finish in 30 s: {other:?}");
            }
        }
    };
    let took = start.elapsed();
    let stdout = reader.join().unwrap_or_default();
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    let report: Value = match serde_json::from_str(&stdout) {
        Ok(v) => v,
        Err(e) => panic!("diagnose --json printed no JSON ({e}): {stdout}\nstderr: {stderr}"),
    };
    assert!(hwm_kib > 0, "no VmHWM read from /proc/{pid}/status");
    Run {
        status,
        took,
        hwm_kib,
        report,
        sent_mib: sent.load(Ordering::Relaxed) as f64 / f64::from(1 << 20),
    }
}

#[test]
fn a_gigabyte_listing_is_refused_in_bounded_memory() {
    let dir = std::env::temp_dir().join(unique_name("docker-hostile"));
    assert!(std::fs::create_dir_all(&dir).is_ok(), "{}", dir.display());
    let shipped = shipped_binary(&dir);
    let binary = shipped.clone().unwrap_or_else(built_pleg_guard);

    let honest = diagnose_against(&binary, &dir, "honest", false);
    let hostile = diagnose_against(&binary, &dir, "hostile", true);
    let _ = std::fs::remove_dir_all(&dir);
    let growth_kib = hostile.hwm_kib.saturating_sub(honest.hwm_kib);
    eprintln!(
        "MEASURED: {} against an honest engine: {:?}, VmHWM {} KiB; against a 1 GiB listing: \
         exit {}, {:?}, VmHWM {} KiB (+{growth_kib} KiB), the engine got {:.1} MiB out before \
         the hang-up",
        if shipped.is_some() {
            "the shipped binary"
        } else {
            "the test build"
        },
        honest.took,
        honest.hwm_kib,
        hostile.status,
        hostile.took,
        hostile.hwm_kib,
        hostile.sent_mib
    );
    assert_eq!(
        honest.report["targets"]["docker"]["state"], "ok",
        "{:#}",
        honest.report["targets"]["docker"]
    );
    let docker = &hostile.report["targets"]["docker"];
    assert_eq!(docker["state"], "error", "{docker:#}");
    assert_eq!(
        docker["detail"], "docker listing larger than 6 MiB: refused",
        "{docker:#}"
    );
    // What the cap lets in (6 MiB) and some slack for the parser's and hyper's buffers.
    assert!(
        growth_kib < 10 * 1024,
        "the 1 GiB listing grew pleg-guard's RSS by {growth_kib} KiB"
    );
    if shipped.is_some() {
        assert!(
            hostile.hwm_kib < 16 * 1024,
            "the shipped pleg-guard's VmHWM reached {} KiB",
            hostile.hwm_kib
        );
    }
    // It hung up near the cap, not after reading the gigabyte to its end.
    assert!(
        hostile.sent_mib < 64.0,
        "the engine got {:.1} MiB out",
        hostile.sent_mib
    );
}
