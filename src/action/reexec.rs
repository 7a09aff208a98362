//! Tier 2, `daemon-reexec`: make PID 1 re-execute itself, which clears the systemd bus bug
//! at once.
//!
//! PID 1 is reached by the path that works: `Reexecute` over its private socket first (the
//! bus is what is broken), then over the system bus, then SIGTERM to PID 1 (which systemd
//! documents as "reexecute"). systemd answers `Reexecute` by dropping the connection rather
//! than replying, so a disconnect or a timeout on that call counts as *sent*; the action
//! succeeds only once PID 1's own `Reexecuting.` journal line (written after the request was
//! sent) confirms it.

use nix::sys::signal::Signal;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{ActionReport, within};
use crate::client::pid1::{Pid1, Route};

/// How long to wait for PID 1's confirmation after each path.
const CONFIRM_WITHIN: Duration = Duration::from_secs(15);

/// The ways to reach PID 1, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Call(Route),
    Sigterm,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Call(r) => r.name(),
            Way::Sigterm => "SIGTERM to PID 1",
        }
    }
}

/// Re-execute PID 1. `timeout` bounds each call.
pub async fn run(private_socket: &Path, bus_socket: &Path, timeout: Duration) -> ActionReport {
    let mut notes = Vec::new();
    for way in [
        Way::Call(Route::Private),
        Way::Call(Route::Bus),
        Way::Sigterm,
    ] {
        let since = SystemTime::now() - Duration::from_secs(1);
        match send(way, private_socket, bus_socket, timeout).await {
            Ok(how) => {
                tracing::info!(path = way.name(), how = %how, "asked PID 1 to re-execute");
                match confirm(since).await {
                    Ok(()) => {
                        let mut detail = format!(
                            "PID 1 re-executed via {} (confirmed by its \"Reexecuting.\" journal line)",
                            way.name()
                        );
                        if !notes.is_empty() {
                            detail.push_str(&format!("; before that: {}", notes.join("; ")));
                        }
                        return ActionReport::ok(detail);
                    }
                    Err(e) => notes.push(format!("{}: sent ({how}) but {e}", way.name())),
                }
            }
            Err(e) => notes.push(format!("{}: {e}", way.name())),
        }
    }
    ActionReport::failed(format!("PID 1 did not re-execute: {}", notes.join("; ")))
}

/// Send the request one way. `Ok` says how it went (a reply, a dropped connection, no
/// answer): all of them mean the request left.
async fn send(
    way: Way,
    private_socket: &Path,
    bus_socket: &Path,
    timeout: Duration,
) -> Result<String, String> {
    match way {
        Way::Call(route) => {
            let connect = Pid1::connect(route, private_socket, bus_socket);
            let mut pid1 = within(timeout, "connect", connect).await?;
            match tokio::time::timeout(timeout, pid1.reexecute()).await {
                Ok(Ok(())) => Ok("PID 1 replied".into()),
                Ok(Err(e)) if e.is_disconnect() => {
                    Ok("PID 1 dropped the connection, as it does".into())
                }
                Ok(Err(e)) => Err(format!("Reexecute refused: {e}")),
                Err(_) => Ok("no reply before the timeout".into()),
            }
        }
        Way::Sigterm => {
            // systemd documents SIGTERM to PID 1 as "reexecute".
            match nix::sys::signal::kill(nix::unistd::Pid::from_raw(1), Signal::SIGTERM) {
                Ok(()) => Ok("signal delivered".into()),
                Err(e) => Err(format!("kill(1, SIGTERM): {e}")),
            }
        }
    }
}

/// Wait for PID 1's `Reexecuting.` journal line written since `since`.
async fn confirm(since: SystemTime) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + CONFIRM_WITHIN;
    let since_s = since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut last_error = String::from("no \"Reexecuting.\" line from PID 1 yet");
    loop {
        let out = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::process::Command::new(crate::system_program::path_of(
                crate::system_program::JOURNALCTL,
            ))
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
