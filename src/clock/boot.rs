//! The clocks the rate limits count on, read at one edge: the wall clock and this boot's
//! `CLOCK_BOOTTIME` with the kernel's boot id.
//!
//! The wall clock can jump either way (NTP stepping a wrong clock, an operator's `date -s`):
//! measured on it alone, a jump forward of a day frees a day's budget at once. Within one boot
//! `CLOCK_BOOTTIME` cannot jump (it also counts through suspend, unlike `CLOCK_MONOTONIC`), so
//! a ledger entry stamped with it ([`BootClock`]) ages on it while the boot id is the same: a
//! daemon restarted in the same boot still reads it right. An entry of another boot (or one
//! stamped without it: an older ledger, a kernel without a boot id) can only age on the wall
//! clock, and one stamped in the future counts as happening now.
//!
//! [`Now::read`] is the only place that reads these clocks; the ledger gets a [`Now`] and stays
//! pure.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// Where the kernel tells this boot's id (a random UUID made at boot).
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// A point on one boot's `CLOCK_BOOTTIME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootClock {
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// `CLOCK_BOOTTIME`: time since that boot, suspend included.
    #[serde(rename = "since_boot_ns", with = "nanos")]
    pub since_boot: Duration,
}

/// The present, as the rate limits see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Now {
    /// The wall clock (what people read, and all that is known across boots).
    pub wall: SystemTime,
    /// This boot's clock; None when it could not be read (then only the wall clock counts).
    pub boot: Option<BootClock>,
}

impl Now {
    /// Read the wall clock and this boot's clock.
    pub fn read() -> Now {
        Now {
            wall: SystemTime::now(),
            boot: read_boot_clock(),
        }
    }

    /// A present known by the wall clock alone.
    pub fn wall_only(wall: SystemTime) -> Now {
        Now { wall, boot: None }
    }

    /// How long ago something stamped `at` on the wall clock and `boot` on its boot's clock
    /// happened: on the boot clock when it is of this boot, else on the wall clock. Never
    /// negative: a stamp in the future counts as now.
    pub fn elapsed_since(&self, at: SystemTime, boot: Option<&BootClock>) -> Duration {
        match (&self.boot, boot) {
            (Some(now), Some(then)) if now.boot_id == then.boot_id => {
                now.since_boot.saturating_sub(then.since_boot)
            }
            _ => self.wall.duration_since(at).unwrap_or(Duration::ZERO),
        }
    }

    /// `wait` from now as a wall time, for people (saturated at 9999-12-31).
    pub fn wall_in(&self, wait: Duration) -> SystemTime {
        crate::clock::later(self.wall, wait)
    }
}

/// Why this boot's clock could not be read.
#[derive(Debug, thiserror::Error)]
enum BootClockError {
    /// The boot id file.
    #[error("{BOOT_ID_PATH}: {0}")]
    BootId(String),
    /// The clock.
    #[error("clock_gettime(CLOCK_BOOTTIME): {0}")]
    Clock(String),
}

/// This boot's clock, or None (said once in the log; the rate limits then use the wall clock
/// alone, as before boot clocks were kept).
fn read_boot_clock() -> Option<BootClock> {
    match try_read_boot_clock() {
        Ok(c) => Some(c),
        Err(e) => {
            static SAID: OnceLock<()> = OnceLock::new();
            if SAID.set(()).is_ok() {
                tracing::warn!(
                    "rate limits count on the wall clock alone (a clock jump can free or hold a budget early): {e}"
                );
            }
            None
        }
    }
}

fn try_read_boot_clock() -> Result<BootClock, BootClockError> {
    // The boot id cannot change under a running process: read once.
    static BOOT_ID: OnceLock<Result<String, String>> = OnceLock::new();
    let boot_id = BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string(BOOT_ID_PATH)
                .map_err(|e| e.to_string())
                .and_then(|s| parse_boot_id(&s))
        })
        .clone()
        .map_err(BootClockError::BootId)?;
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map_err(|e| BootClockError::Clock(e.to_string()))?;
    let secs = u64::try_from(t.tv_sec())
        .map_err(|_| BootClockError::Clock(format!("negative seconds {}", t.tv_sec())))?;
    let nanos = u32::try_from(t.tv_nsec())
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| BootClockError::Clock(format!("nanoseconds {}", t.tv_nsec())))?;
    Ok(BootClock {
        boot_id,
        since_boot: Duration::new(secs, nanos),
    })
}

/// The boot id as the kernel writes it (a UUID and a newline); anything else is refused.
fn parse_boot_id(s: &str) -> Result<String, String> {
    let id = s.trim();
    if id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        Ok(id.to_owned())
    } else {
        Err(format!(
            "not a boot id: {:?}",
            id.chars().take(40).collect::<String>()
        ))
    }
}

/// A `Duration` as whole nanoseconds (u64: 584 years of uptime).
mod nanos {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot(id: &str, s: u64) -> BootClock {
        BootClock {
            boot_id: id.to_owned(),
            since_boot: Duration::from_secs(s),
        }
    }

    const B1: &str = "11111111-2222-3333-4444-555555555555";
    const B2: &str = "66666666-7777-8888-9999-000000000000";

    #[test]
    fn the_same_boot_counts_on_its_clock_another_on_the_wall() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let day = Duration::from_secs(86_400);
        // The wall clock says a day and 100 s; the boot clock says 100 s.
        let now = Now {
            wall: wall + day + Duration::from_secs(100),
            boot: Some(boot(B1, 200)),
        };
        assert_eq!(
            now.elapsed_since(wall, Some(&boot(B1, 100))),
            Duration::from_secs(100)
        );
        assert_eq!(
            now.elapsed_since(wall, Some(&boot(B2, 100))),
            day + Duration::from_secs(100)
        );
        assert_eq!(
            now.elapsed_since(wall, None),
            day + Duration::from_secs(100)
        );
        // A stamp ahead of either clock counts as now.
        assert_eq!(
            now.elapsed_since(wall, Some(&boot(B1, 300))),
            Duration::ZERO
        );
        assert_eq!(
            Now::wall_only(wall).elapsed_since(wall + day, None),
            Duration::ZERO
        );
    }

    #[test]
    fn reads_this_boot() {
        let a = Now::read();
        let b = Now::read();
        let (Some(a), Some(b)) = (a.boot, b.boot) else {
            panic!("no boot clock on this Linux host")
        };
        assert_eq!(a.boot_id, b.boot_id);
        assert!(b.since_boot >= a.since_boot);
        assert_eq!(parse_boot_id(&format!("{}\n", a.boot_id)), Ok(a.boot_id));
        assert!(parse_boot_id("../../etc/passwd").is_err());
        assert!(parse_boot_id("").is_err());
    }

    #[test]
    fn round_trips_as_nanoseconds() {
        let c = BootClock {
            boot_id: B1.to_owned(),
            since_boot: Duration::new(12, 345),
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            format!(r#"{{"boot_id":"{B1}","since_boot_ns":12000000345}}"#)
        );
        assert_eq!(serde_json::from_str::<BootClock>(&json).unwrap(), c);
    }
}
