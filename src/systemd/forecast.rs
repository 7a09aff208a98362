//! The bus-serial forecast: from the serials of PID 1's replies on the system bus, how fast its
//! sd-bus message counter grows and when it reaches the end of the 32-bit range. Pure.
//!
//! Before systemd v242 sd-bus refused to seal a message whose 64-bit cookie had passed
//! `u32::MAX` (systemd#11809): PID 1 then can send nothing more on the system bus and the node
//! wedges. Every reply PID 1 sends carries that counter as its serial, so each probe round
//! yields a sample for free. This module keeps the samples, estimates the rate over a long
//! (steady) and a short (burst) window, and tells the time left.
//!
//! A drop in the serial resets the estimate: to a small value when PID 1 re-executed or
//! restarted (a new sd-bus object), to at least 2^31 when a *fixed* sd-bus wrapped (since v242
//! the counter continues at 2^31, its "cycled" mark), which proves that the build is fixed.
//!
//! Time is monotonic (`Duration` since an arbitrary origin, e.g. the daemon's start), so a wall
//! clock that jumps does not bend the rate; a sample older than the last one is ignored.

use std::collections::VecDeque;
use std::time::Duration;

/// The last serial an affected sd-bus can send (`sd_bus_message_seal()` refuses above it).
pub const SERIAL_MAX: u64 = u32::MAX as u64;
/// Where a fixed sd-bus continues after wrapping (`COOKIE_CYCLED` since v242).
pub const SERIAL_CYCLED: u64 = 1 << 31;

/// Windows and bounds of the estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// The steady rate is measured over this long (default 1 h).
    pub long: Duration,
    /// The burst rate is measured over this long (default 5 min).
    pub short: Duration,
    /// A rate needs samples spanning at least this long.
    pub min_span: Duration,
}

impl Default for Windows {
    fn default() -> Self {
        Windows {
            long: Duration::from_secs(3600),
            short: Duration::from_secs(300),
            min_span: Duration::from_secs(15),
        }
    }
}

/// At most this many samples are kept (older ones are thinned, never the newest).
const MAX_SAMPLES: usize = 720;

/// One serial seen at one (monotonic) time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Monotonic time of the observation.
    pub at: Duration,
    /// The serial of PID 1's reply.
    pub serial: u32,
}

/// What a new sample told about PID 1's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The first sample, or it grew (or stayed).
    Continued,
    /// It dropped to below 2^31: PID 1 re-executed or restarted (a new connection).
    Restarted {
        /// The last serial before the drop.
        from: u32,
    },
    /// It dropped to 2^31 or above: a fixed sd-bus wrapped around.
    Wrapped {
        /// The last serial before the drop.
        from: u32,
    },
    /// The sample was older than the last one: ignored.
    Ignored,
}

/// The estimator's current view, for status, decisions and metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    /// The latest serial seen.
    pub serial: u32,
    /// Serials left before an affected sd-bus stops sending.
    pub remaining: u64,
    /// Serials per second: the larger of the steady and the burst rate (None: not known yet).
    pub rate: Option<f64>,
    /// The steady rate (long window).
    pub rate_long: Option<f64>,
    /// The burst rate (short window).
    pub rate_short: Option<f64>,
    /// Seconds until [`SERIAL_MAX`] at `rate` (None: rate unknown or not growing).
    pub eta: Option<Duration>,
    /// A wrap was seen on this PID 1: the running sd-bus is fixed.
    pub wraps: bool,
}

impl Forecast {
    /// The share of the 32-bit range used, 0.0–1.0.
    pub fn used_fraction(&self) -> f64 {
        f64::from(self.serial) / SERIAL_MAX as f64
    }

    /// Compact text for status tables: `serial 3.91e9 (91%), +330/s, runs out in ~15 d`.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "serial {} ({:.0}%)",
            compact_count(u64::from(self.serial)),
            self.used_fraction() * 100.0
        );
        if let Some(r) = self.rate {
            s.push_str(&format!(", +{}/s", compact_rate(r)));
        }
        if self.wraps {
            s.push_str(", wraps (fixed sd-bus)");
        } else if let Some(eta) = self.eta {
            s.push_str(&format!(", runs out in ~{}", compact_duration(eta)));
        } else if self.rate.is_some() {
            s.push_str(", not growing");
        }
        s
    }
}

/// The estimator: samples over time → [`Forecast`].
#[derive(Debug, Clone)]
pub struct SerialTracker {
    windows: Windows,
    samples: VecDeque<Sample>,
    wraps: bool,
}

impl SerialTracker {
    /// An empty tracker.
    pub fn new(windows: Windows) -> Self {
        SerialTracker {
            windows,
            samples: VecDeque::new(),
            wraps: false,
        }
    }

    /// Record one sample.
    pub fn observe(&mut self, sample: Sample) -> Change {
        let Some(last) = self.samples.back().copied() else {
            self.samples.push_back(sample);
            return Change::Continued;
        };
        if sample.at < last.at {
            return Change::Ignored;
        }
        let change = if sample.serial >= last.serial {
            Change::Continued
        } else if u64::from(sample.serial) >= SERIAL_CYCLED {
            self.wraps = true;
            Change::Wrapped { from: last.serial }
        } else {
            // A new PID 1 (re-executed or restarted): a new sd-bus object, whose build may
            // differ from the one that wrapped.
            self.wraps = false;
            Change::Restarted { from: last.serial }
        };
        if change != Change::Continued {
            self.samples.clear();
        }
        self.samples.push_back(sample);
        self.prune(sample.at);
        change
    }

    /// The latest sample.
    pub fn latest(&self) -> Option<Sample> {
        self.samples.back().copied()
    }

    /// The current view, or None before the first sample.
    pub fn forecast(&self) -> Option<Forecast> {
        let last = self.latest()?;
        let remaining = SERIAL_MAX - u64::from(last.serial);
        let rate_long = self.rate_over(self.windows.long);
        let rate_short = self.rate_over(self.windows.short);
        let rate = match (rate_long, rate_short) {
            (Some(l), Some(s)) => Some(l.max(s)),
            (l, s) => l.or(s),
        };
        let eta = match rate {
            Some(r) if r > 0.0 && !self.wraps => {
                Duration::try_from_secs_f64(remaining as f64 / r).ok()
            }
            _ => None,
        };
        Some(Forecast {
            serial: last.serial,
            remaining,
            rate,
            rate_long,
            rate_short,
            eta,
            wraps: self.wraps,
        })
    }

    /// Serials per second over the last `window`: from the newest sample at least `window`
    /// older than the latest (or the oldest one kept) to the latest; None while they span
    /// less than `min_span`.
    fn rate_over(&self, window: Duration) -> Option<f64> {
        let last = self.latest()?;
        let first = self
            .samples
            .iter()
            .rev()
            .find(|s| last.at.saturating_sub(s.at) >= window)
            .or_else(|| self.samples.front())?;
        let span = last.at.checked_sub(first.at)?;
        if span < self.windows.min_span || span.is_zero() {
            return None;
        }
        let grown = u64::from(last.serial).checked_sub(u64::from(first.serial))?;
        Some(grown as f64 / span.as_secs_f64())
    }

    fn prune(&mut self, now: Duration) {
        // Keep one sample older than the long window so that window stays fully covered.
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|s| now.saturating_sub(s.at) > self.windows.long)
        {
            self.samples.pop_front();
        }
        if self.samples.len() > MAX_SAMPLES {
            // Thin the older half: every other sample goes, the newest half stays intact.
            let keep_from = self.samples.len() / 2;
            let mut i = 0usize;
            self.samples.retain(|_| {
                let keep = i >= keep_from || i % 2 == 0;
                i += 1;
                keep
            });
        }
    }
}

/// Thresholds of the outlook (from `[systemd]` and `[actions.daemon_reexec]`:
/// `Thresholds::of(&Config)`, written where the configuration is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// `systemd.serial_warn_before`: warn when the serials run out sooner.
    pub warn_before: Duration,
    /// `actions.daemon_reexec.preempt`.
    pub preempt: bool,
    /// `actions.daemon_reexec.preempt_headroom`: reexec when fewer serials are left.
    pub preempt_headroom: u64,
    /// `actions.daemon_reexec.preempt_before`: reexec when they run out sooner.
    pub preempt_before: Duration,
}

/// What the forecast asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outlook {
    /// Nothing: the build wraps, the forecast is far, or nothing is known.
    Calm,
    /// `systemd-serial-exhaustion`: it runs out within `warn_before` (or headroom is low).
    Warn,
    /// `systemd-serial-exhaustion` and a planned reexec is due now.
    Preempt,
}

/// The most a planned reexec keeps in hand before the forecast's end of serials: it waits (for
/// a fleet slot, for `preempt_window`) only while the serials are forecast to last longer than
/// this (1 h: the forecast rates move within the hour; a reexec takes seconds).
pub const PLANNED_MARGIN: Duration = Duration::from_secs(3600);

/// How close to the forecast's end of serials a planned reexec may wait (for a fleet slot, for
/// `preempt_window`): [`PLANNED_MARGIN`], or half of `preempt_before` when that is shorter (an
/// operator who plans reexecs 30 min ahead still leaves them room to wait).
pub fn deadline_margin(preempt_before: Duration) -> Duration {
    PLANNED_MARGIN.min(preempt_before / 2)
}

/// Why the outlook is what it is, with the numbers, for the finding and the journal:
/// `serial 4.29e9 (100%), +330/s, runs out in ~50 min; 1.2e6 serials left, below
/// preempt_headroom 2e7`.
pub fn explain(forecast: &Forecast, t: &Thresholds) -> String {
    let mut reasons = Vec::new();
    if forecast.remaining < t.preempt_headroom {
        reasons.push(format!(
            "{} serials left, below preempt_headroom {}",
            compact_count(forecast.remaining),
            compact_count(t.preempt_headroom)
        ));
    }
    if let Some(eta) = forecast.eta {
        for (limit, key) in [
            (t.preempt_before, "preempt_before"),
            (t.warn_before, "serial_warn_before"),
        ] {
            if eta <= limit {
                reasons.push(format!(
                    "runs out within {key} ({})",
                    humantime::format_duration(limit)
                ));
                break;
            }
        }
    }
    if reasons.is_empty() {
        forecast.summary()
    } else {
        format!("{}; {}", forecast.summary(), reasons.join("; "))
    }
}

impl Outlook {
    /// From a forecast on a build that is (`affected`) or is not known to carry the bug.
    pub fn of(forecast: &Forecast, affected: bool, t: &Thresholds) -> Outlook {
        if !affected || forecast.wraps {
            return Outlook::Calm;
        }
        let low_headroom = forecast.remaining < t.preempt_headroom;
        let due = |limit: Duration| forecast.eta.is_some_and(|eta| eta <= limit);
        if t.preempt && (low_headroom || due(t.preempt_before)) {
            Outlook::Preempt
        } else if low_headroom || due(t.warn_before) {
            Outlook::Warn
        } else {
            Outlook::Calm
        }
    }
}

/// `3.91e9`, `12345`, for serial counts.
pub fn compact_count(n: u64) -> String {
    if n < 100_000 {
        n.to_string()
    } else {
        let exp = (n as f64).log10().floor() as i32;
        let mant = n as f64 / 10f64.powi(exp);
        format!("{mant:.2}e{exp}")
    }
}

fn compact_rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 1.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.3}")
    }
}

/// `~15 d`, `~6 h`, `~12 min`, `~40 s`.
pub fn compact_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 2 * 86_400 {
        format!("{} d", s / 86_400)
    } else if s >= 2 * 3600 {
        format!("{} h", s / 3600)
    } else if s >= 120 {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn tracker() -> SerialTracker {
        SerialTracker::new(Windows::default())
    }

    /// Feed samples every `step` seconds growing by `rate` per second, from `start`.
    fn feed(t: &mut SerialTracker, from_s: u64, n: u64, step: u64, start: u32, rate: u32) {
        for i in 0..n {
            let at = secs(from_s + i * step);
            let serial = start + (i * step) as u32 * rate;
            assert_eq!(t.observe(Sample { at, serial }), Change::Continued);
        }
    }

    fn thresholds() -> Thresholds {
        Thresholds {
            warn_before: secs(7 * 86_400),
            preempt: true,
            preempt_headroom: 20_000_000,
            preempt_before: secs(6 * 3600),
        }
    }

    #[test]
    fn no_rate_until_the_samples_span_min_span() {
        let mut t = tracker();
        t.observe(Sample {
            at: secs(0),
            serial: 100,
        });
        t.observe(Sample {
            at: secs(10),
            serial: 110,
        });
        let f = t.forecast().unwrap();
        assert_eq!(f.serial, 110);
        assert_eq!(f.rate, None);
        assert_eq!(f.eta, None);
        t.observe(Sample {
            at: secs(20),
            serial: 120,
        });
        let f = t.forecast().unwrap();
        assert_eq!(f.rate, Some(1.0));
    }

    #[test]
    fn steady_rate_and_eta() {
        let mut t = tracker();
        feed(&mut t, 0, 400, 10, 1_000_000_000, 330);
        let f = t.forecast().unwrap();
        let r = f.rate.unwrap();
        assert!((r - 330.0).abs() < 1e-6, "{r}");
        let eta = f.eta.unwrap().as_secs_f64();
        let want = (SERIAL_MAX - u64::from(f.serial)) as f64 / 330.0;
        assert!((eta - want).abs() < 1.0, "{eta} vs {want}");
        assert!(f.summary().contains("+330/s"), "{}", f.summary());
        assert!(f.summary().contains("runs out in ~"), "{}", f.summary());
    }

    #[test]
    fn a_burst_shortens_the_eta_at_once() {
        let mut t = tracker();
        feed(&mut t, 0, 360, 10, 1_000_000, 10);
        let steady = t.forecast().unwrap();
        // 2 minutes at 10 000/s
        let last = t.latest().unwrap();
        for i in 1..=12u64 {
            t.observe(Sample {
                at: last.at + secs(i * 10),
                serial: last.serial + (i * 100_000) as u32,
            });
        }
        let burst = t.forecast().unwrap();
        assert!(
            burst.rate_short.unwrap() > 3_000.0,
            "{:?}",
            burst.rate_short
        );
        assert!(burst.rate_long.unwrap() < burst.rate_short.unwrap());
        assert_eq!(burst.rate, burst.rate_short);
        assert!(burst.eta.unwrap() < steady.eta.unwrap() / 100);
    }

    #[test]
    fn a_drop_below_2_31_is_a_restart_and_resets() {
        let mut t = tracker();
        feed(&mut t, 0, 10, 10, 4_000_000_000, 100);
        let last = t.latest().unwrap();
        assert_eq!(
            t.observe(Sample {
                at: last.at + secs(10),
                serial: 12
            }),
            Change::Restarted { from: last.serial }
        );
        let f = t.forecast().unwrap();
        assert_eq!(f.serial, 12);
        assert_eq!(f.rate, None);
        assert!(!f.wraps);
    }

    #[test]
    fn a_drop_to_2_31_is_a_wrap_and_proves_a_fixed_build() {
        let mut t = tracker();
        feed(&mut t, 0, 10, 10, 4_294_960_000, 10);
        let last = t.latest().unwrap();
        let c = t.observe(Sample {
            at: last.at + secs(10),
            serial: (SERIAL_CYCLED + 40) as u32,
        });
        assert_eq!(c, Change::Wrapped { from: last.serial });
        feed(&mut t, 200, 5, 10, (SERIAL_CYCLED + 50) as u32, 10);
        let f = t.forecast().unwrap();
        assert!(f.wraps);
        assert_eq!(f.eta, None);
        assert!(f.summary().contains("wraps"), "{}", f.summary());
        assert_eq!(Outlook::of(&f, true, &thresholds()), Outlook::Calm);
        // a later restart forgets the proof: the new PID 1 may be another build
        let last = t.latest().unwrap();
        t.observe(Sample {
            at: last.at + secs(10),
            serial: 5,
        });
        assert!(!t.forecast().unwrap().wraps);
    }

    #[test]
    fn a_clock_that_goes_back_is_ignored() {
        let mut t = tracker();
        feed(&mut t, 100, 5, 10, 1000, 1);
        assert_eq!(
            t.observe(Sample {
                at: secs(50),
                serial: 2000
            }),
            Change::Ignored
        );
        assert_eq!(t.latest().unwrap().serial, 1040);
    }

    #[test]
    fn a_long_quiet_gap_keeps_a_sane_rate() {
        // samples far apart (the daemon was stopped for a day): the long window uses the
        // sample just before it, so the rate is an average, never a division by ~0.
        let mut t = tracker();
        feed(&mut t, 0, 3, 10, 1000, 1);
        t.observe(Sample {
            at: secs(86_400),
            serial: 87_400,
        });
        let f = t.forecast().unwrap();
        let r = f.rate_long.unwrap();
        assert!(r > 0.5 && r < 2.0, "{r}");
    }

    #[test]
    fn not_growing_has_no_eta() {
        let mut t = tracker();
        for i in 0..10 {
            t.observe(Sample {
                at: secs(i * 10),
                serial: 777,
            });
        }
        let f = t.forecast().unwrap();
        assert_eq!(f.rate, Some(0.0));
        assert_eq!(f.eta, None);
        assert!(f.summary().contains("not growing"));
    }

    #[test]
    fn memory_is_bounded() {
        let mut t = tracker();
        // one sample per 100 ms for 3 hours of monotonic time
        for i in 0..108_000u64 {
            t.observe(Sample {
                at: Duration::from_millis(i * 100),
                serial: i as u32,
            });
        }
        assert!(t.samples.len() <= MAX_SAMPLES, "{}", t.samples.len());
        let r = t.forecast().unwrap().rate.unwrap();
        assert!((r - 10.0).abs() < 0.1, "{r}");
    }

    #[test]
    fn outlook_follows_headroom_and_eta() {
        let t = thresholds();
        let f = |serial: u64, rate: Option<f64>| {
            let remaining = SERIAL_MAX - serial;
            Forecast {
                serial: serial as u32,
                remaining,
                rate,
                rate_long: rate,
                rate_short: rate,
                eta: rate.map(|r| Duration::from_secs_f64(remaining as f64 / r)),
                wraps: false,
            }
        };
        // far: 1e9 serials at 100/s = 115 d
        assert_eq!(
            Outlook::of(&f(3_294_967_295, Some(100.0)), true, &t),
            Outlook::Calm
        );
        // within 7 d: 1e8 at 330/s = 3.5 d
        assert_eq!(
            Outlook::of(&f(4_194_967_295, Some(330.0)), true, &t),
            Outlook::Warn
        );
        // within 6 h: 1e8 at 10 000/s = 2.8 h
        assert_eq!(
            Outlook::of(&f(4_194_967_295, Some(10_000.0)), true, &t),
            Outlook::Preempt
        );
        // headroom: 1e7 left, rate unknown
        assert_eq!(
            Outlook::of(&f(4_284_967_295, None), true, &t),
            Outlook::Preempt
        );
        // not affected: nothing
        assert_eq!(
            Outlook::of(&f(4_284_967_295, None), false, &t),
            Outlook::Calm
        );
        // preempt off: a warning only
        let off = Thresholds {
            preempt: false,
            ..t
        };
        assert_eq!(
            Outlook::of(&f(4_284_967_295, None), true, &off),
            Outlook::Warn
        );
        // the words carry the numbers and the rule that fired
        let why = explain(&f(4_284_967_295, Some(330.0)), &t);
        assert!(
            why.starts_with("serial 4.28e9 (100%), +330/s, runs out in ~8 h"),
            "{why}"
        );
        assert!(
            why.contains("1.00e7 serials left, below preempt_headroom 2.00e7"),
            "{why}"
        );
        assert!(
            why.contains("runs out within serial_warn_before (7days)"),
            "{why}"
        );
        let why = explain(&f(4_194_967_295, Some(10_000.0)), &t);
        assert!(why.contains("runs out within preempt_before (6h)"), "{why}");
        assert!(!why.contains("headroom"), "{why}");
    }

    #[test]
    fn the_margin_is_an_hour_or_half_of_preempt_before() {
        assert_eq!(deadline_margin(secs(6 * 3600)), PLANNED_MARGIN);
        assert_eq!(deadline_margin(secs(30 * 60)), secs(15 * 60));
        assert_eq!(deadline_margin(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn compact_forms() {
        assert_eq!(compact_count(3_910_000_000), "3.91e9");
        assert_eq!(compact_count(4242), "4242");
        assert_eq!(compact_duration(secs(15 * 86_400 + 5)), "15 d");
        assert_eq!(compact_duration(secs(6 * 3600)), "6 h");
        assert_eq!(compact_duration(secs(600)), "10 min");
        assert_eq!(compact_duration(secs(40)), "40 s");
    }
}
