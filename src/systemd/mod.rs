//! systemd and its sd-bus serial bug (systemd#11809), in one place:
//!
//! - [`version`]: which builds carry the bug (pure, table-tested);
//! - [`evidence`]: the persisted proof that this boot's PID 1 hit it;
//! - [`forecast`]: when an affected PID 1 runs out of bus serials (pure);
//! - [`window`]: the daily `preempt_window` calendar (pure, a leaf);
//! - [`preempt`]: the planned reexec: forecast and window decide now, wait, or not yet (pure).
//!
//! The probe that reads PID 1 is `crate::probe::systemd`; the daemon's task that watches the
//! serial and the version is `crate::daemon::systemd_watch`.

pub mod evidence;
pub mod forecast;
pub mod preempt;
pub mod version;
pub mod window;
