//! The restart of one service unit in place, shared by `restart-containerd`, `restart-docker`
//! and `restart-kubelet`: what the peers' `systemctl kill` does not do.
//!
//! 1. PID 1 is reached by the path that works: its private socket first (it answers while
//!    the system bus is wedged), then the bus.
//! 2. The unit's main process is asked for its goroutine stacks ([`super::stacks`]) before
//!    anything destroys them; a capture that fails is reported, and the restart goes on.
//! 3. `RestartUnit` (`replace`): systemd's own stop sends SIGTERM *and* SIGCONT, so a stopped
//!    process goes too, and a unit with `Restart=on-failure` starts again (a restart job is
//!    not a failure that the unit's policy judges).
//! 4. Verified: the unit is `active` with a new main process within [`ACTIVE_WITHIN`]. An old
//!    process that still holds on after [`STOP_HELD`] (stuck in its SIGTERM handler) gets one
//!    SIGKILL, so the restart does not wait for the unit's `TimeoutStopSec=`.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::stacks::{self, Dumper};
use super::{ActionReport, within};
use crate::client::pid1::{Pid1, Route, ServiceState};

/// How long the unit may take to be active again with a new main process.
pub const ACTIVE_WITHIN: Duration = Duration::from_secs(60);
/// How long the old main process may take to go before it is killed.
pub const STOP_HELD: Duration = Duration::from_secs(20);
/// How often the unit's state is read while waiting.
const POLL: Duration = Duration::from_millis(250);

/// One restart to carry out.
#[derive(Debug, Clone, Copy)]
pub struct UnitRestart<'a> {
    /// The unit (`containerd.service`).
    pub unit: &'a str,
    /// How its main process gives its goroutine stacks; None: not a Go daemon that can.
    pub dumper: Option<Dumper>,
    /// Where dumps are kept.
    pub stacks_directory: &'a Path,
    /// PID 1's private socket.
    pub private_socket: &'a Path,
    /// The system bus socket.
    pub bus_socket: &'a Path,
    /// Bounds each call to PID 1.
    pub timeout: Duration,
}

/// Restart `r.unit`, keeping its stacks first.
pub async fn restart(r: &UnitRestart<'_>) -> ActionReport {
    let unit = r.unit;
    let mut notes = Vec::new();
    // taken once, whichever route then restarts
    let mut evidence: Option<String> = None;
    for route in [Route::Private, Route::Bus] {
        let name = route.name();
        let connect = Pid1::connect(route, r.private_socket, r.bus_socket);
        let mut pid1 = match within(r.timeout, &format!("{name}: connect"), connect).await {
            Ok(c) => c,
            Err(e) => {
                notes.push(e);
                continue;
            }
        };
        let before = match within(
            r.timeout,
            &format!("{name}: state of {unit}"),
            pid1.service_state(unit),
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                notes.push(e);
                continue;
            }
        };
        if evidence.is_none() {
            evidence = Some(keep_evidence(r, before.main_pid).await);
        }
        let started = tokio::time::Instant::now();
        let restarted_by_systemd = r.dumper == Some(Dumper::StderrOnQuit)
            && matches!(
                tokio::time::timeout(r.timeout, pid1.service_state(unit)).await,
                Ok(Ok(ref s)) if is_replacement(s, before.main_pid)
            );
        if !restarted_by_systemd {
            if let Err(e) = within(
                r.timeout,
                &format!("{name}: RestartUnit"),
                pid1.restart_unit(unit),
            )
            .await
            {
                notes.push(e);
                continue;
            }
        }
        let waited = wait_replaced(&mut pid1, r, before.main_pid).await;
        let took = started.elapsed();
        let mut parts = Vec::new();
        if let Some(e) = &evidence {
            parts.push(e.clone());
        }
        let how = if restarted_by_systemd {
            "systemd restarted it after the dump".to_owned()
        } else {
            format!("restarted via {name}")
        };
        let report = match waited {
            Ok((now, killed)) => {
                let mut s = format!(
                    "{unit} {how}: PID {} -> {}, active again after {:.1}s",
                    before.main_pid,
                    now.main_pid,
                    took.as_secs_f64()
                );
                if let Some(k) = killed {
                    s.push_str(&format!(" ({k})"));
                }
                parts.push(s);
                if !notes.is_empty() {
                    parts.push(format!("before that: {}", notes.join("; ")));
                }
                ActionReport::ok(parts.join("; "))
            }
            Err(e) => {
                parts.push(format!("{unit} {how}, but {e}"));
                ActionReport::failed(parts.join("; "))
            }
        };
        return report;
    }
    let mut detail = format!("could not restart {unit}: {}", notes.join("; "));
    if let Some(e) = evidence {
        detail = format!("{e}; {detail}");
    }
    ActionReport::failed(detail)
}

/// Take the stacks of `pid` (0: no main process); what to say of them.
async fn keep_evidence(r: &UnitRestart<'_>, pid: u32) -> String {
    let Some(how) = r.dumper else {
        return format!("no goroutine stacks asked of {}", r.unit);
    };
    if pid == 0 {
        return format!("no goroutine stacks: {} has no main process", r.unit);
    }
    let stopped = stopped(pid);
    let mut said = match stacks::capture(how, r.unit, pid, r.stacks_directory).await {
        Ok(kept) => kept.describe(pid),
        Err(e) => format!("no goroutine stacks of PID {pid}: {e}"),
    };
    if stopped {
        said.push_str(" [the process was stopped (state T) before the restart]");
    }
    said
}

/// Whether `s` shows the unit running again in a process other than `old`.
fn is_replacement(s: &ServiceState, old: u32) -> bool {
    s.active_state == "active" && s.main_pid != 0 && s.main_pid != old
}

/// Wait for the unit to run again in a new process; SIGKILL the old one once if it holds on
/// past [`STOP_HELD`]. Ok: the new state, and a note if the old process had to be killed.
async fn wait_replaced(
    pid1: &mut Pid1,
    r: &UnitRestart<'_>,
    old: u32,
) -> Result<(ServiceState, Option<String>), String> {
    let started = tokio::time::Instant::now();
    let mut killed = None;
    let mut last;
    loop {
        match tokio::time::timeout(r.timeout, pid1.service_state(r.unit)).await {
            Ok(Ok(s)) if is_replacement(&s, old) => return Ok((s, killed)),
            Ok(Ok(s)) => {
                last = format!("it is {} (main PID {})", s.active_state, s.main_pid);
                if killed.is_none()
                    && old != 0
                    && s.main_pid == old
                    && started.elapsed() >= STOP_HELD
                {
                    let target = Pid::from_raw(i32::try_from(old).unwrap_or(i32::MAX));
                    killed = Some(match kill(target, Signal::SIGKILL) {
                        Ok(()) => format!(
                            "PID {old} still there after {}s: sent SIGKILL",
                            STOP_HELD.as_secs()
                        ),
                        Err(e) => format!("PID {old} still there; SIGKILL: {e}"),
                    });
                }
            }
            Ok(Err(e)) => last = format!("reading its state failed: {e}"),
            Err(_) => last = "PID 1 did not answer about its state".into(),
        }
        if started.elapsed() >= ACTIVE_WITHIN {
            let mut e = format!("after {}s {last}", ACTIVE_WITHIN.as_secs());
            if let Some(k) = killed {
                e.push_str(&format!(" ({k})"));
            }
            return Err(e);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether process `pid` is stopped (`T` in /proc/PID/stat): a SIGSTOP or a tracer.
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| process_state(&s))
        .is_some_and(|c| c == 'T' || c == 't')
}

/// The state letter of a /proc/PID/stat line: the field after the `(comm)` (which may hold
/// spaces and parentheses itself).
fn process_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_letter_is_read_past_a_command_name_with_parentheses() {
        assert_eq!(process_state("123 (containerd) T 1 123 123"), Some('T'));
        assert_eq!(process_state("7 (a) b) (c) S 1"), Some('S'));
        assert_eq!(process_state("garbage"), None);
    }

    #[test]
    fn only_an_active_unit_in_a_new_process_is_a_replacement() {
        let s = |state: &str, pid| ServiceState {
            active_state: state.into(),
            active_since_us: 1,
            main_pid: pid,
            watchdog_usec: 0,
        };
        assert!(is_replacement(&s("active", 8), 7));
        assert!(!is_replacement(&s("active", 7), 7));
        assert!(!is_replacement(&s("activating", 8), 7));
        assert!(!is_replacement(&s("active", 0), 7));
        assert!(is_replacement(&s("active", 3), 0));
    }
}
