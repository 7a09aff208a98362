//! Tier 2, `daemon-reexec`: make PID 1 re-execute itself, which clears the systemd bus bug
//! at once.
//!
//! PID 1 is reached by the path that works: `Reexecute` over its private socket first (the
//! bus is what is broken), then over the system bus, then SIGTERM to PID 1 (which systemd
//! documents as "reexecute"). systemd answers `Reexecute` by dropping the connection rather
//! than replying, so a disconnect or a timeout on that call counts as *sent*; the action
//! succeeds only once PID 1's own `Reexecuting.` journal line (written after the request was
//! sent) confirms it.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ActionReport;
use crate::probe::systemd::{connect_private, manager};

/// How long to wait for PID 1's confirmation after each path.
const CONFIRM_WITHIN: Duration = Duration::from_secs(15);

/// The ways to reach PID 1, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path1 {
    Private,
    Bus,
    Sigterm,
}

impl Path1 {
    fn name(self) -> &'static str {
        match self {
            Path1::Private => "private socket",
            Path1::Bus => "system bus",
            Path1::Sigterm => "SIGTERM to PID 1",
        }
    }
}

/// Re-execute PID 1. `timeout` bounds each call.
pub async fn run(private_socket: &Path, bus_socket: &Path, timeout: Duration) -> ActionReport {
    let mut notes = Vec::new();
    for path in [Path1::Private, Path1::Bus, Path1::Sigterm] {
        let since = SystemTime::now() - Duration::from_secs(1);
        match send(path, private_socket, bus_socket, timeout).await {
            Ok(how) => {
                tracing::info!(path = path.name(), how = %how, "asked PID 1 to re-execute");
                match confirm(since).await {
                    Ok(()) => {
                        let mut detail = format!(
                            "PID 1 re-executed via {} (confirmed by its \"Reexecuting.\" journal line)",
                            path.name()
                        );
                        if !notes.is_empty() {
                            detail.push_str(&format!("; before that: {}", notes.join("; ")));
                        }
                        return ActionReport::ok(detail);
                    }
                    Err(e) => notes.push(format!("{}: sent ({how}) but {e}", path.name())),
                }
            }
            Err(e) => notes.push(format!("{}: {e}", path.name())),
        }
    }
    ActionReport::failed(format!("PID 1 did not re-execute: {}", notes.join("; ")))
}

/// Send the request by one path. `Ok` says how it went (a reply, a dropped connection, no
/// answer): all of them mean the request left.
async fn send(
    path: Path1,
    private_socket: &Path,
    bus_socket: &Path,
    timeout: Duration,
) -> Result<String, String> {
    match path {
        Path1::Private | Path1::Bus => {
            let connect = async {
                if path == Path1::Private {
                    connect_private(private_socket).await
                } else {
                    crate::probe::dbus::connect(bus_socket).await
                }
            };
            let conn = match tokio::time::timeout(timeout, connect).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(format!("connect: {e}")),
                Err(_) => return Err("connect: no answer".into()),
            };
            let call = async {
                let m = manager(&conn).await?;
                m.reexecute().await
            };
            match tokio::time::timeout(timeout, call).await {
                Ok(Ok(())) => Ok("PID 1 replied".into()),
                Ok(Err(e)) if is_disconnect(&e) => {
                    Ok("PID 1 dropped the connection, as it does".into())
                }
                Ok(Err(e)) => Err(format!("Reexecute refused: {e}")),
                Err(_) => Ok("no reply before the timeout".into()),
            }
        }
        Path1::Sigterm => {
            // SAFETY: kill(2) with a constant pid and signal has no memory-safety concerns.
            let rc = unsafe { libc::kill(1, libc::SIGTERM) };
            if rc == 0 {
                Ok("signal delivered".into())
            } else {
                Err(format!(
                    "kill(1, SIGTERM): {}",
                    std::io::Error::last_os_error()
                ))
            }
        }
    }
}

fn is_disconnect(e: &zbus::Error) -> bool {
    let s = e.to_string().to_lowercase();
    matches!(e, zbus::Error::InputOutput(_))
        || s.contains("disconnect")
        || s.contains("connection")
        || s.contains("broken pipe")
        || s.contains("reset")
        || s.contains("eof")
}

/// Wait for PID 1's `Reexecuting.` journal line written since `since`.
async fn confirm(since: SystemTime) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + CONFIRM_WITHIN;
    let since_s = since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut last_error = String::from("no \"Reexecuting.\" line from PID 1 yet");
    loop {
        let out = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::process::Command::new("journalctl")
                .args(["--no-pager", "--quiet", "-o", "cat", "_PID=1"])
                .arg(format!("--since=@{since_s}"))
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await;
        match out {
            Ok(Ok(o)) if o.status.success() => {
                if String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.trim() == "Reexecuting.")
                {
                    return Ok(());
                }
            }
            Ok(Ok(o)) => {
                last_error = format!(
                    "journalctl failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )
            }
            Ok(Err(e)) => last_error = format!("journalctl: {e}"),
            Err(_) => last_error = "journalctl did not answer".into(),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "not confirmed within {}s: {last_error}",
                CONFIRM_WITHIN.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
