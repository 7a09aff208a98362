//! `sd_notify`: `READY=1` after the first round, a `STATUS=` line after every round, and
//! `WATCHDOG=1` from the main loop. Without `NOTIFY_SOCKET` every call is a no-op.

use std::time::Duration;

use sd_notify::NotifyState;

/// Tell systemd the daemon is ready, with its first status line.
pub fn ready(status: &str) {
    let _ = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Update the status line shown by `systemctl status`.
pub fn status(status: &str) {
    let _ = sd_notify::notify(&[NotifyState::Status(status)]);
}

/// Tell systemd a configuration reload has started (it ends with the next `ready`).
pub fn reloading() {
    let _ = sd_notify::notify(&[
        NotifyState::Reloading,
        NotifyState::monotonic_usec_now().unwrap_or(NotifyState::Status("reloading")),
    ]);
}

/// Tell systemd the daemon is stopping.
pub fn stopping() {
    let _ = sd_notify::notify(&[NotifyState::Stopping]);
}

/// Pet the watchdog.
pub fn watchdog() {
    let _ = sd_notify::notify(&[NotifyState::Watchdog]);
}

/// The watchdog period systemd asked for, if any.
pub fn watchdog_period() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}
