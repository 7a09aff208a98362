//! `pleg-guard status`: print the running daemon's status.json for people (or as it is).

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use crate::cli::StatusArgs;
use crate::config;
use crate::report::status_file::{self, ReadError};
use crate::report::table;

/// Exit 0 when the daemon is healthy, 1 when degraded (or repairing), 3 when there is no
/// (or only stale) daemon state.
pub fn main(args: StatusArgs) -> ExitCode {
    let runtime_directory = match config::load(args.config.config.as_deref()) {
        Ok(l) => l.config.runtime_directory,
        Err(e) => {
            eprintln!("pleg-guard: {e}");
            return ExitCode::from(2);
        }
    };
    let snapshot = match status_file::read(&runtime_directory) {
        Ok(s) => s,
        Err(e @ ReadError::Missing(_)) | Err(e @ ReadError::Bad { .. }) => {
            eprintln!("pleg-guard: {e}");
            return ExitCode::from(3);
        }
    };
    // A file no running daemon updates any more is no daemon state.
    let age = SystemTime::now()
        .duration_since(snapshot.updated_at)
        .unwrap_or_default();
    let stale_after =
        Duration::from_millis(snapshot.interval_ms.saturating_mul(3)).max(Duration::from_secs(30));
    let alive = snapshot.pid.is_some_and(pid_alive);
    let stale = age > stale_after || !alive;
    if let Err(e) = table::print(&snapshot, args.json, true) {
        eprintln!("pleg-guard: {e}");
        return ExitCode::from(3);
    }
    if stale {
        eprintln!(
            "pleg-guard: this state is stale (updated {} ago{}); is pleg-guard running?",
            humantime::format_duration(Duration::from_secs(age.as_secs())),
            if alive { "" } else { ", its process is gone" }
        );
        return ExitCode::from(3);
    }
    if snapshot.healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Whether the process `pid` exists (also when it belongs to another user).
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // Signal 0 only checks that the process exists. EPERM means it exists but belongs to
    // someone else: the daemon runs as root and status.json is world-readable, so a non-root
    // operator running `pleg-guard status` gets exactly that.
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::pid_alive;

    #[test]
    fn own_process_is_alive_and_a_free_pid_is_not() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX));
    }

    #[test]
    fn another_users_process_counts_as_alive() {
        // PID 1 exists on every Linux system; as non-root kill(1, 0) gives EPERM.
        assert!(pid_alive(1));
    }
}
