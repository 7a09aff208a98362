//! `[actions.daemon_reexec] preempt_window`: a daily window of the node's local time. Pure and
//! a leaf: parse `"HH:MM-HH:MM"`, tell whether it is open at an instant and when it opens next.
//! What the planned reexec does about it is [`super::preempt`].
//!
//!
//! The time zone is an input (the daemon passes the system's, tests pass explicit ones), and so
//! is "now". Each day's window is one interval of real time, from the first instant the local
//! clock reads the start to the first instant it reads the end (the next day's when the end is
//! earlier than the start, i.e. the window crosses midnight):
//! - a time skipped by a DST change (the clock jumps from 02:00 to 03:00) is reached at the
//!   jump, so `"02:30-04:00"` opens at 03:00 that day, and a window that lies wholly inside the
//!   skipped hour does not open that day;
//! - a time repeated by a DST change counts at its first occurrence, so `"00:00-01:30"` closes at
//!   the first 01:30 and does not open again when the clock goes back to 01:00.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone};

/// How many days ahead an opening is looked for (a window skipped by a DST change or a zone's
/// calendar jump opens on a later day).
pub const LOOKAHEAD_DAYS: usize = 8;

/// A time of day, 00:00–23:59.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ClockTime {
    hour: i8,
    minute: i8,
}

impl fmt::Display for ClockTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.hour, self.minute)
    }
}

/// A daily window of local time, e.g. `02:00-05:00` or `23:00-02:00` (crossing midnight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    start: ClockTime,
    end: ClockTime,
}

/// Why a `preempt_window` value is not a window.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Not `HH:MM-HH:MM`.
    #[error(
        "\"{0}\" is not a window: write \"HH:MM-HH:MM\" in local time, e.g. \"02:00-05:00\" (or \"\" for any time)"
    )]
    Format(String),
    /// A part is not a time of day.
    #[error("\"{value}\": {part} is not a time of day (00:00 to 23:59)")]
    OutOfRange {
        /// The whole value.
        value: String,
        /// The part that is out of range.
        part: String,
    },
    /// Start and end are the same.
    #[error("\"{0}\" starts where it ends: write \"\" for any time")]
    Empty(String),
}

impl FromStr for Window {
    type Err = WindowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let format = || WindowError::Format(s.to_owned());
        let (start, end) = s.split_once('-').ok_or_else(format)?;
        let time = |part: &str| -> Result<ClockTime, WindowError> {
            let b = part.as_bytes();
            let digits = |i: usize| b[i].is_ascii_digit();
            if b.len() != 5 || b[2] != b':' || !(digits(0) && digits(1) && digits(3) && digits(4)) {
                return Err(format());
            }
            let n = |i: usize| (b[i] - b'0') * 10 + (b[i + 1] - b'0');
            let (hour, minute) = (n(0), n(3));
            match (i8::try_from(hour), i8::try_from(minute)) {
                (Ok(hour), Ok(minute)) if hour < 24 && minute < 60 => {
                    Ok(ClockTime { hour, minute })
                }
                _ => Err(WindowError::OutOfRange {
                    value: s.to_owned(),
                    part: part.to_owned(),
                }),
            }
        };
        let window = Window {
            start: time(start)?,
            end: time(end)?,
        };
        if window.start == window.end {
            return Err(WindowError::Empty(s.to_owned()));
        }
        Ok(window)
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// Open or closed, at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Open until `closes`.
    Open {
        /// When this opening ends.
        closes: SystemTime,
    },
    /// Closed until `opens` (None: it does not open within the next days).
    Closed {
        /// The next opening.
        opens: Option<SystemTime>,
    },
}

impl Window {
    /// Whether the window is open at `at` in `tz`.
    pub fn is_open(&self, at: SystemTime, tz: &TimeZone) -> bool {
        matches!(self.state(at, tz), State::Open { .. })
    }

    /// The first opening at or after `after` (an opening already under way does not count).
    pub fn next_opening(&self, after: SystemTime, tz: &TimeZone) -> Option<SystemTime> {
        let at = Timestamp::try_from(after).ok()?;
        self.openings_from(at, tz)
            .map(|(open, _)| open)
            .find(|open| *open >= at)
            .and_then(|open| SystemTime::try_from(open).ok())
    }

    /// Open (until when) or closed (until when) at `at` in `tz`.
    pub fn state(&self, at: SystemTime, tz: &TimeZone) -> State {
        let Ok(now) = Timestamp::try_from(at) else {
            return State::Closed { opens: None };
        };
        for (open, close) in self.openings_from(now, tz) {
            if now < open {
                return State::Closed {
                    opens: SystemTime::try_from(open).ok(),
                };
            }
            if now < close {
                return match SystemTime::try_from(close) {
                    Ok(closes) => State::Open { closes },
                    Err(_) => State::Closed { opens: None },
                };
            }
        }
        State::Closed { opens: None }
    }

    /// The day's openings as `(open, close)` instants, from the one that starts the day before
    /// `at`'s local date (it may run past midnight), in order; days on which the window does
    /// not happen (it lies in a skipped hour) are left out.
    fn openings_from(
        &self,
        at: Timestamp,
        tz: &TimeZone,
    ) -> impl Iterator<Item = (Timestamp, Timestamp)> {
        let first = tz.to_datetime(at).date().yesterday().ok();
        let days = std::iter::successors(first, |d| d.tomorrow().ok()).take(LOOKAHEAD_DAYS + 2);
        let tz = tz.clone();
        let window = *self;
        days.filter_map(move |date| window.opening_on(date, &tz))
    }

    /// The opening that starts on `date`, if the window happens that day.
    fn opening_on(&self, date: Date, tz: &TimeZone) -> Option<(Timestamp, Timestamp)> {
        let open = first_instant(date, self.start, tz)?;
        let end_date = if self.end < self.start {
            date.tomorrow().ok()?
        } else {
            date
        };
        let close = first_instant(end_date, self.end, tz)?;
        (open < close).then_some((open, close))
    }
}

/// The first instant at which the local clock in `tz` reads `t` (or later) on `date`: the
/// earlier of two in a fold, the moment of the jump in a gap.
fn first_instant(date: Date, t: ClockTime, tz: &TimeZone) -> Option<Timestamp> {
    let dt = date.at(t.hour, t.minute, 0, 0);
    let ambiguous = tz.to_ambiguous_timestamp(dt);
    match ambiguous.offset() {
        AmbiguousOffset::Unambiguous { .. } | AmbiguousOffset::Fold { .. } => {
            ambiguous.earlier().ok()
        }
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the offset after the jump, the time lies just before the jump.
            let before_jump = after.to_timestamp(dt).ok()?;
            tz.following(before_jump).next().map(|t| t.timestamp())
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A zone from the system's tz database; a missing one fails the test by name.
    pub(crate) fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap_or_else(|e| {
            panic!("time zone {name} is not in the tz database (install tzdata): {e}")
        })
    }

    /// The instant of a local date and time in `tz`, with the offset spelled out (RFC 9557),
    /// e.g. `at("2026-11-01T01:30-05:00", &ny)`: the second 01:30 of that night.
    pub(crate) fn at(text: &str) -> SystemTime {
        let ts: Timestamp = text
            .parse()
            .unwrap_or_else(|e| panic!("bad test instant {text}: {e}"));
        SystemTime::try_from(ts).unwrap()
    }

    pub(crate) fn w(text: &str) -> Window {
        text.parse().unwrap()
    }

    fn opens(window: &str, after: &str, tz: &TimeZone) -> SystemTime {
        w(window).next_opening(at(after), tz).unwrap()
    }

    #[test]
    fn parses_strictly() {
        assert_eq!(w("02:00-05:00").to_string(), "02:00-05:00");
        assert_eq!(w("23:00-02:00").to_string(), "23:00-02:00");
        assert_eq!(w("00:00-23:59").to_string(), "00:00-23:59");
        for bad in [
            "",
            "2:00-05:00",
            "02:00-5:00",
            "02:00 - 05:00",
            "02:00",
            "02:00-",
            "-05:00",
            "0200-0500",
            "02:00-05:00-06:00",
            "02.00-05.00",
            "+2:00-05:00",
            "02:0a-05:00",
            " 02:00-05:00",
            "02:00-05:00\n",
            "٠٢:٠٠-٠٥:٠٠",
        ] {
            assert!(
                matches!(bad.parse::<Window>(), Err(WindowError::Format(_))),
                "{bad:?}: {:?}",
                bad.parse::<Window>()
            );
        }
        for bad in ["24:00-05:00", "02:00-24:00", "02:60-05:00", "99:99-05:00"] {
            let e = bad.parse::<Window>().unwrap_err();
            assert!(matches!(e, WindowError::OutOfRange { .. }), "{bad}: {e:?}");
            assert!(e.to_string().contains("not a time of day"), "{e}");
        }
        for bad in ["00:00-00:00", "02:00-02:00", "23:59-23:59"] {
            let e = bad.parse::<Window>().unwrap_err();
            assert_eq!(e, WindowError::Empty(bad.to_owned()));
            assert!(e.to_string().contains("starts where it ends"), "{e}");
        }
    }

    #[test]
    fn open_and_next_opening_on_an_ordinary_day() {
        let utc = TimeZone::UTC;
        let win = w("02:00-05:00");
        assert!(!win.is_open(at("2026-06-10T01:59:59Z"), &utc));
        assert!(win.is_open(at("2026-06-10T02:00:00Z"), &utc));
        assert!(win.is_open(at("2026-06-10T04:59:59Z"), &utc));
        assert!(!win.is_open(at("2026-06-10T05:00:00Z"), &utc));
        assert_eq!(
            opens("02:00-05:00", "2026-06-10T01:00:00Z", &utc),
            at("2026-06-10T02:00:00Z")
        );
        // at the very opening it counts; while open, the next one is tomorrow's
        assert_eq!(
            opens("02:00-05:00", "2026-06-10T02:00:00Z", &utc),
            at("2026-06-10T02:00:00Z")
        );
        assert_eq!(
            opens("02:00-05:00", "2026-06-10T03:00:00Z", &utc),
            at("2026-06-11T02:00:00Z")
        );
        assert_eq!(
            win.state(at("2026-06-10T03:00:00Z"), &utc),
            State::Open {
                closes: at("2026-06-10T05:00:00Z")
            }
        );
        // local time, not UTC
        let berlin = zone("Europe/Berlin");
        assert!(
            !win.is_open(at("2026-06-09T23:30:00Z"), &berlin),
            "01:30 CEST"
        );
        assert!(
            win.is_open(at("2026-06-10T00:30:00Z"), &berlin),
            "02:30 CEST"
        );
        assert!(
            win.is_open(at("2026-06-10T02:30:00Z"), &berlin),
            "04:30 CEST"
        );
        assert!(
            !win.is_open(at("2026-06-10T03:30:00Z"), &berlin),
            "05:30 CEST"
        );
    }

    #[test]
    fn windows_crossing_midnight() {
        let ny = zone("America/New_York");
        let win = w("23:00-02:00");
        assert!(!win.is_open(at("2026-06-10T22:59:00-04:00"), &ny));
        assert!(win.is_open(at("2026-06-10T23:00:00-04:00"), &ny));
        assert!(
            win.is_open(at("2026-06-11T00:30:00-04:00"), &ny),
            "after midnight"
        );
        assert!(win.is_open(at("2026-06-11T01:59:00-04:00"), &ny));
        assert!(!win.is_open(at("2026-06-11T02:00:00-04:00"), &ny));
        assert_eq!(
            win.state(at("2026-06-11T00:30:00-04:00"), &ny),
            State::Open {
                closes: at("2026-06-11T02:00:00-04:00")
            }
        );
        assert_eq!(
            opens("23:00-02:00", "2026-06-11T00:30:00-04:00", &ny),
            at("2026-06-11T23:00:00-04:00")
        );
        assert_eq!(
            opens("23:00-02:00", "2026-06-11T12:00:00-04:00", &ny),
            at("2026-06-11T23:00:00-04:00")
        );
        // a window that ends at midnight
        let win = w("22:00-00:00");
        assert!(win.is_open(at("2026-06-10T23:59:00-04:00"), &ny));
        assert!(!win.is_open(at("2026-06-11T00:00:00-04:00"), &ny));
        // New Year crosses a year boundary like any other midnight
        let utc = TimeZone::UTC;
        assert!(w("23:30-00:30").is_open(at("2027-01-01T00:10:00Z"), &utc));
        assert_eq!(
            opens("23:30-00:30", "2026-12-31T12:00:00Z", &utc),
            at("2026-12-31T23:30:00Z")
        );
    }

    #[test]
    fn new_york_spring_forward_skips_02_to_03() {
        // 2026-03-08: at 02:00 EST the clock jumps to 03:00 EDT (07:00Z).
        let ny = zone("America/New_York");
        // a window starting in the skipped hour opens at the jump
        assert_eq!(
            opens("02:30-04:00", "2026-03-08T00:00:00-05:00", &ny),
            at("2026-03-08T03:00:00-04:00")
        );
        assert!(w("02:30-04:00").is_open(at("2026-03-08T03:10:00-04:00"), &ny));
        assert!(!w("02:30-04:00").is_open(at("2026-03-08T01:59:00-05:00"), &ny));
        // "02:00-05:00" opens at the jump too, and is an hour shorter that night
        assert_eq!(
            opens("02:00-05:00", "2026-03-08T00:00:00-05:00", &ny),
            at("2026-03-08T03:00:00-04:00")
        );
        assert_eq!(
            w("02:00-05:00").state(at("2026-03-08T03:00:00-04:00"), &ny),
            State::Open {
                closes: at("2026-03-08T05:00:00-04:00")
            }
        );
        // a window wholly inside the skipped hour does not happen that night
        assert_eq!(
            opens("02:10-02:50", "2026-03-08T00:00:00-05:00", &ny),
            at("2026-03-09T02:10:00-04:00")
        );
        assert!(!w("02:10-02:50").is_open(at("2026-03-08T03:00:00-04:00"), &ny));
        // a window ending in the skipped hour closes at the jump
        assert_eq!(
            w("01:00-02:30").state(at("2026-03-08T01:30:00-05:00"), &ny),
            State::Open {
                closes: at("2026-03-08T03:00:00-04:00")
            }
        );
        // across midnight into the jump: 23:00 EST to 03:00 EDT, three real hours
        assert_eq!(
            w("23:00-02:30").state(at("2026-03-08T00:30:00-05:00"), &ny),
            State::Open {
                closes: at("2026-03-08T03:00:00-04:00")
            }
        );
        // the day after, the ordinary times again (now EDT)
        assert_eq!(
            opens("02:00-05:00", "2026-03-08T12:00:00-04:00", &ny),
            at("2026-03-09T02:00:00-04:00")
        );
    }

    #[test]
    fn new_york_fall_back_repeats_01_to_02() {
        // 2026-11-01: at 02:00 EDT the clock goes back to 01:00 EST (06:00Z); 01:00-02:00
        // happens twice.
        let ny = zone("America/New_York");
        // a window ending in the repeated hour closes at its first pass and does not reopen
        let win = w("00:00-01:30");
        assert_eq!(
            win.state(at("2026-11-01T00:30:00-04:00"), &ny),
            State::Open {
                closes: at("2026-11-01T01:30:00-04:00")
            }
        );
        assert!(!win.is_open(at("2026-11-01T01:45:00-04:00"), &ny));
        assert!(
            !win.is_open(at("2026-11-01T01:10:00-05:00"), &ny),
            "the second 01:10 is after the close"
        );
        assert_eq!(
            opens("00:00-01:30", "2026-11-01T01:10:00-05:00", &ny),
            at("2026-11-02T00:00:00-05:00")
        );
        // a window starting in the repeated hour opens at its first pass and stays open
        // through the second
        let win = w("01:30-03:00");
        assert_eq!(
            opens("01:30-03:00", "2026-11-01T00:00:00-04:00", &ny),
            at("2026-11-01T01:30:00-04:00")
        );
        assert!(win.is_open(at("2026-11-01T01:10:00-05:00"), &ny));
        assert_eq!(
            win.state(at("2026-11-01T01:10:00-05:00"), &ny),
            State::Open {
                closes: at("2026-11-01T03:00:00-05:00")
            }
        );
        // spanning the change: "00:00-03:00" lasts four real hours that night
        assert_eq!(
            w("00:00-03:00").state(at("2026-11-01T00:00:00-04:00"), &ny),
            State::Open {
                closes: at("2026-11-01T03:00:00-05:00")
            }
        );
    }

    #[test]
    fn berlin_dst_changes() {
        let berlin = zone("Europe/Berlin");
        // 2026-03-29: 02:00 CET → 03:00 CEST (01:00Z)
        assert_eq!(
            opens("02:15-04:00", "2026-03-28T12:00:00+01:00", &berlin),
            at("2026-03-29T03:00:00+02:00")
        );
        assert_eq!(
            opens("01:00-05:00", "2026-03-28T12:00:00+01:00", &berlin),
            at("2026-03-29T01:00:00+01:00")
        );
        assert!(w("01:00-05:00").is_open(at("2026-03-29T03:30:00+02:00"), &berlin));
        assert!(!w("02:00-03:00").is_open(at("2026-03-29T03:00:00+02:00"), &berlin));
        assert_eq!(
            opens("02:00-03:00", "2026-03-29T00:00:00+01:00", &berlin),
            at("2026-03-30T02:00:00+02:00")
        );
        // 2026-10-25: 03:00 CEST → 02:00 CET (01:00Z); 02:00-03:00 twice
        let win = w("01:00-02:30");
        assert_eq!(
            win.state(at("2026-10-25T02:10:00+02:00"), &berlin),
            State::Open {
                closes: at("2026-10-25T02:30:00+02:00")
            }
        );
        assert!(!win.is_open(at("2026-10-25T02:10:00+01:00"), &berlin));
        let win = w("02:30-04:00");
        assert_eq!(
            opens("02:30-04:00", "2026-10-24T12:00:00+02:00", &berlin),
            at("2026-10-25T02:30:00+02:00")
        );
        assert!(win.is_open(at("2026-10-25T02:10:00+01:00"), &berlin));
        // a crossing-midnight window over the change: 22:00 CEST to 04:00 CET, 7 real hours
        assert_eq!(
            w("22:00-04:00").state(at("2026-10-24T23:00:00+02:00"), &berlin),
            State::Open {
                closes: at("2026-10-25T04:00:00+01:00")
            }
        );
    }
}
