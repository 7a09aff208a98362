//! Deadline and timestamp arithmetic that cannot panic.
//!
//! `Instant + Duration` and `SystemTime + Duration` panic on overflow, and the release
//! profile aborts on panic: one huge duration from the config, or a timestamp parsed from a
//! journal line, would kill the daemon. Every sum whose duration comes from the config or
//! from outside goes through here instead. The config also caps its durations
//! ([`crate::config::MAX_DURATION`]), so the saturating branches are a second line of defence.
//!
//! - [`boot`]: the clocks the rate limits count on (wall clock and `CLOCK_BOOTTIME`);
//! - [`time_format`]: the one way a timestamp is written down (RFC 3339 UTC, seconds).

pub mod boot;
pub mod time_format;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// How far ahead a saturated deadline lies: "never" for a daemon (about 30 years, the same
/// horizon tokio uses for its far-future instants).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `start + d`, or a deadline ~30 years from `start` (or `start` itself if even that
/// overflows) when the sum does not fit.
pub fn deadline(start: Instant, d: Duration) -> Instant {
    start
        .checked_add(d)
        .or_else(|| start.checked_add(FAR_FUTURE))
        .unwrap_or(start)
}

/// `now + d` as a deadline.
pub fn deadline_in(d: Duration) -> Instant {
    deadline(Instant::now(), d)
}

/// The last second RFC 3339 (and so status.json and the ledger) can hold: 9999-12-31T23:59:59Z.
pub const LAST_PRINTABLE_SECS: u64 = 253_402_300_799;

/// The latest time that can be written as RFC 3339.
pub fn last_printable() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(LAST_PRINTABLE_SECS)
}

/// `t + d`, saturated at 9999-12-31T23:59:59Z (the last time status.json and the ledger can
/// write: later ones would make the formatter panic).
pub fn later(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d)
        .map_or_else(last_printable, |s| s.min(last_printable()))
}

/// `t` clamped into the range RFC 3339 can print (1970 to 9999), for formatting.
pub fn printable(t: SystemTime) -> SystemTime {
    t.max(UNIX_EPOCH).min(last_printable())
}

/// `UNIX_EPOCH + secs + micros`, or None when it does not fit (a corrupt timestamp).
pub fn from_unix(secs: u64, micros: u64) -> Option<SystemTime> {
    if secs > LAST_PRINTABLE_SECS {
        return None;
    }
    UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))?
        .checked_add(Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_saturate_instead_of_panicking() {
        let now = Instant::now();
        assert!(deadline(now, Duration::MAX) > now + Duration::from_secs(86_400 * 365));
        assert_eq!(
            deadline(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(later(t, Duration::MAX), last_printable());
        assert_eq!(
            later(t, Duration::from_secs(100_000 * 31_557_600)),
            last_printable()
        );
        assert_eq!(later(t, Duration::from_secs(1)), t + Duration::from_secs(1));
        assert_eq!(from_unix(u64::MAX, 0), None);
        assert_eq!(from_unix(LAST_PRINTABLE_SECS + 1, 0), None);
        assert_eq!(
            from_unix(1, 999_999_999_999_999),
            Some(UNIX_EPOCH + Duration::from_secs(1) + Duration::from_micros(999_999_999_999_999))
        );
        // Before the epoch and past 9999 both print.
        let before = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(printable(before), UNIX_EPOCH);
        let _ = humantime::format_rfc3339_seconds(printable(before)).to_string();
        let _ = humantime::format_rfc3339_seconds(printable(later(t, Duration::MAX))).to_string();
    }
}
