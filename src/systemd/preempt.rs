//! The planned reexec's plan: the serial forecast's outlook and the `preempt_window`
//! ([`super::window`]) decide whether the planned `daemon-reexec` goes now, waits for the
//! window, or is not due yet ([`plan`]): brought forward into an open window when it would come
//! due before the next one, waits for the opening when it is due outside, unless the serials
//! would run out first. Pure: the time zone and "now" are inputs.

use std::time::{Duration, SystemTime};

use jiff::tz::TimeZone;

use super::forecast::{
    Forecast, Outlook, Thresholds, compact_count, compact_duration, deadline_margin,
};
use super::window::{LOOKAHEAD_DAYS, State, Window};

/// A planned reexec that waits for the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The window's next opening.
    pub opens: SystemTime,
    /// For status: `planned, waits for preempt_window 02:00-05:00 (opens in 6h12m; runs out
    /// in ~16 h)`.
    pub words: String,
}

/// What the serial forecast's planned reexec does about the window this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Not due, and not brought forward: nothing now.
    NotYet,
    /// Due, and no window is configured: now.
    AnyTime,
    /// Due, and the window is open: now.
    InWindow,
    /// Rule 1: not due yet, but the window is open and the reexec would come due before the
    /// window opens again: now, inside this opening. The words say so, for the journal
    /// (`would come due before preempt_window 02:00-05:00 opens again (in 23h; ~8.32e6 serials
    /// left by then, below preempt_headroom 2.00e7): reexec now, inside the window`).
    BroughtForward(String),
    /// Rule 2: due, the window is closed and the serials last until it opens plus the margin:
    /// wait for the opening.
    Wait(Wait),
    /// Rules 2 and 3: due, the window is closed but waiting is not safe (the serials run out
    /// before the opening plus the margin, no rate tells how long they last, or the window
    /// does not open within days): now; the words say why, for the journal (`runs out in ~5 h,
    /// before preempt_window 02:00-05:00 opens (in 9h) plus 1h margin: not waiting`).
    NotWaiting(String),
}

impl Plan {
    /// The planned reexec goes now (the ladder may act on `systemd-serial-exhaustion`).
    pub fn acts_now(&self) -> bool {
        match self {
            Plan::AnyTime | Plan::InWindow | Plan::BroughtForward(_) | Plan::NotWaiting(_) => true,
            Plan::NotYet | Plan::Wait(_) => false,
        }
    }
}

/// The serial forecast's planned reexec under `window` (None: any time) at `now` in `tz`, given
/// the forecast's `outlook` (`Preempt`: due now; `Warn`: `systemd-serial-exhaustion` stands but
/// not due yet; `Calm`: nothing stands) and its thresholds `t`:
///
/// 1. the window is open: act if due, or if it would come due before the window's *next*
///    opening — projected to that opening at the forecast's rate, fewer than
///    `preempt_headroom` serials would be left or they would run out within `preempt_before`
///    (only while `systemd-serial-exhaustion` stands and `preempt` is on);
/// 2. the window is closed and it is due: wait for the opening, unless at the forecast's rate
///    the serials run out before the opening plus [`crate::systemd::forecast::deadline_margin`]; being
///    under `preempt_headroom` alone does not hurry it while a rate is known (each round looks
///    again, so a burst that shortens the time left ends the wait at once);
/// 3. due with no forecast time (no rate, or not growing: due by the headroom alone): act now,
///    nothing says the serials last until the window;
/// 4. not due and not brought forward: nothing.
///
/// Hours are real elapsed time between instants, so a DST change between now and the opening
/// counts as the clock hours it adds or takes away.
pub fn plan(
    window: Option<&Window>,
    now: SystemTime,
    tz: &TimeZone,
    forecast: &Forecast,
    outlook: Outlook,
    t: &Thresholds,
) -> Plan {
    match outlook {
        Outlook::Calm => return Plan::NotYet,
        Outlook::Warn if !t.preempt => return Plan::NotYet,
        Outlook::Warn | Outlook::Preempt => {}
    }
    let due = outlook == Outlook::Preempt;
    let Some(window) = window else {
        return if due { Plan::AnyTime } else { Plan::NotYet };
    };
    match window.state(now, tz) {
        State::Open { .. } if due => Plan::InWindow,
        State::Open { closes } => bring_forward(window, now, closes, tz, forecast, t),
        State::Closed { .. } if !due => Plan::NotYet,
        State::Closed { opens: None } => Plan::NotWaiting(format!(
            "preempt_window {window} does not open in the next {LOOKAHEAD_DAYS} days: not waiting"
        )),
        State::Closed { opens: Some(opens) } => {
            wait_or_not(window, opens, now, forecast, t.preempt_before)
        }
    }
}

/// Rule 1, not due yet in a window open until `closes`: now if it would come due before the
/// next opening (the one after this, even at this one's very first instant).
fn bring_forward(
    window: &Window,
    now: SystemTime,
    closes: SystemTime,
    tz: &TimeZone,
    forecast: &Forecast,
    t: &Thresholds,
) -> Plan {
    let Some(next) = window.next_opening(closes, tz) else {
        return Plan::BroughtForward(format!(
            "preempt_window {window} does not open again in the next {LOOKAHEAD_DAYS} days: reexec now, inside the window"
        ));
    };
    // Not due with the finding standing means a forecast time (the headroom alone would make
    // it due); without one there is nothing to project.
    let (Some(rate), Some(eta)) = (forecast.rate.filter(|r| *r > 0.0), forecast.eta) else {
        return Plan::NotYet;
    };
    let until = next.duration_since(now).unwrap_or_default();
    let left = (forecast.remaining as f64 - rate * until.as_secs_f64()).max(0.0);
    let eta_then = eta.saturating_sub(until);
    let reason = if left < t.preempt_headroom as f64 {
        format!(
            "~{} serials left by then, below preempt_headroom {}",
            compact_count(left as u64),
            compact_count(t.preempt_headroom)
        )
    } else if eta_then <= t.preempt_before {
        format!(
            "~{} left by then, within preempt_before {}",
            compact_duration(eta_then),
            humantime::format_duration(t.preempt_before)
        )
    } else {
        return Plan::NotYet;
    };
    Plan::BroughtForward(format!(
        "would come due before preempt_window {window} opens again (in {}; {reason}): reexec now, inside the window",
        hours_minutes(until)
    ))
}

/// Rules 2 and 3, due with the window closed until `opens`: wait unless the serials run out
/// before the opening plus the margin, or no forecast time says how long they last.
fn wait_or_not(
    window: &Window,
    opens: SystemTime,
    now: SystemTime,
    forecast: &Forecast,
    preempt_before: Duration,
) -> Plan {
    let until = opens.duration_since(now).unwrap_or_default();
    let when = format!(
        "preempt_window {window} opens (in {})",
        hours_minutes(until)
    );
    let Some(eta) = forecast.eta else {
        return Plan::NotWaiting(format!(
            "{} serials left and no forecast rate to tell whether they last until {when}: not waiting",
            compact_count(forecast.remaining)
        ));
    };
    let margin = deadline_margin(preempt_before);
    if eta <= until + margin {
        return Plan::NotWaiting(format!(
            "runs out in ~{}, before {when} plus {} margin: not waiting",
            compact_duration(eta),
            humantime::format_duration(margin)
        ));
    }
    Plan::Wait(Wait {
        opens,
        words: format!(
            "planned, waits for preempt_window {window} (opens in {}; runs out in ~{})",
            hours_minutes(until),
            compact_duration(eta)
        ),
    })
}

/// `6h12m`, `9h`, `45m`, `<1m`: a wait for a daily window.
pub fn hours_minutes(d: Duration) -> String {
    let minutes = d.as_secs() / 60;
    let (h, m) = (minutes / 60, minutes % 60);
    match (h, m) {
        (0, 0) => "<1m".to_owned(),
        (0, m) => format!("{m}m"),
        (h, 0) => format!("{h}h"),
        (h, m) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systemd::forecast::SERIAL_MAX;
    use crate::systemd::window::tests::{at, w, zone};

    fn forecast(remaining: u64, rate: Option<f64>) -> Forecast {
        Forecast {
            serial: (SERIAL_MAX - remaining) as u32,
            remaining,
            rate,
            rate_long: rate,
            rate_short: rate,
            eta: rate
                .filter(|r| *r > 0.0)
                .map(|r| Duration::from_secs_f64(remaining as f64 / r)),
            wraps: false,
        }
    }

    /// A busy node's rate, the one the defaults are tuned for.
    const BUSY: f64 = 330.0;

    /// The serials a busy node uses in `hours`, i.e. a forecast of `hours` left at 330/s.
    fn busy_for(hours: f64) -> Forecast {
        forecast((hours * 3600.0 * BUSY) as u64, Some(BUSY))
    }

    /// The shipped thresholds: warn 7 d, preempt on, headroom 2e7, before 6 h.
    fn defaults() -> Thresholds {
        Thresholds::of(&crate::config::Config::default())
    }

    /// [`plan`] with the outlook the forecast gives on an affected build, as the daemon asks.
    fn plan_at(window: &str, now: SystemTime, tz: &TimeZone, f: &Forecast, t: &Thresholds) -> Plan {
        let window = (!window.is_empty()).then(|| w(window));
        plan(window.as_ref(), now, tz, f, Outlook::of(f, true, t), t)
    }

    #[test]
    fn at_defaults_a_busy_node_reexecs_in_the_last_window_before_it_comes_due() {
        let utc = TimeZone::UTC;
        let t = defaults();
        assert_eq!(t.preempt_headroom, 20_000_000);
        let three = at("2026-06-10T03:00:00Z");
        // 30 h left at 03:00: not due (3.56e7 left, above the headroom; beyond 6 h), but at
        // tomorrow's 02:00 (23 h on) only 7 h are left, ~8.3e6 serials: brought forward
        let f = busy_for(30.0);
        assert_eq!(Outlook::of(&f, true, &t), Outlook::Warn);
        let p = plan_at("02:00-05:00", three, &utc, &f, &t);
        assert_eq!(
            p,
            Plan::BroughtForward(
                "would come due before preempt_window 02:00-05:00 opens again (in 23h; ~8.32e6 serials left by then, below preempt_headroom 2.00e7): reexec now, inside the window".into()
            )
        );
        assert!(p.acts_now());
        // 60 h left: at tomorrow's 02:00 still 37 h (4.4e7): nothing tonight
        let p = plan_at("02:00-05:00", three, &utc, &busy_for(60.0), &t);
        assert_eq!(p, Plan::NotYet);
        assert!(!p.acts_now());
        // 40 h left at 03:00 leave 17 h at the next opening, just above the headroom's
        // ~16.8 h: nothing tonight; at that opening it would come due within the hour, before
        // the opening after it: now, in that window
        assert_eq!(
            plan_at("02:00-05:00", three, &utc, &busy_for(40.0), &t),
            Plan::NotYet
        );
        let p = plan_at(
            "02:00-05:00",
            at("2026-06-11T02:00:00Z"),
            &utc,
            &busy_for(17.0),
            &t,
        );
        assert!(matches!(p, Plan::BroughtForward(_)), "{p:?}");
        // and once due inside the window, it is due there
        assert_eq!(
            plan_at(
                "02:00-05:00",
                at("2026-06-11T02:30:00Z"),
                &utc,
                &busy_for(16.5),
                &t
            ),
            Plan::InWindow
        );
    }

    #[test]
    fn brought_forward_by_preempt_before_when_the_headroom_is_small() {
        // headroom 1000 (the ETA rule alone): 28 h left at 03:00 are 5 h at the next opening
        let utc = TimeZone::UTC;
        let t = Thresholds {
            preempt_headroom: 1000,
            ..defaults()
        };
        let p = plan_at(
            "02:00-05:00",
            at("2026-06-10T03:00:00Z"),
            &utc,
            &busy_for(28.0),
            &t,
        );
        assert_eq!(
            p,
            Plan::BroughtForward(
                "would come due before preempt_window 02:00-05:00 opens again (in 23h; ~5 h left by then, within preempt_before 6h): reexec now, inside the window".into()
            )
        );
    }

    #[test]
    fn nothing_is_brought_forward_without_the_finding_or_with_preempt_off() {
        let utc = TimeZone::UTC;
        let three = at("2026-06-10T03:00:00Z");
        // the finding stands from serial_warn_before on; with it at 20 h, 30 h left is calm
        let t = Thresholds {
            warn_before: Duration::from_secs(20 * 3600),
            ..defaults()
        };
        let f = busy_for(30.0);
        assert_eq!(Outlook::of(&f, true, &t), Outlook::Calm);
        assert_eq!(plan_at("02:00-05:00", three, &utc, &f, &t), Plan::NotYet);
        // preempt = false: a warning, never a reexec
        let t = Thresholds {
            preempt: false,
            ..defaults()
        };
        assert_eq!(plan_at("02:00-05:00", three, &utc, &f, &t), Plan::NotYet);
        assert_eq!(
            plan_at("02:00-05:00", three, &utc, &busy_for(1.0), &t),
            Plan::NotYet
        );
        // not due and no window: nothing, as before windows
        assert_eq!(plan_at("", three, &utc, &f, &defaults()), Plan::NotYet);
        // not due and the window closed: nothing
        assert_eq!(
            plan_at(
                "02:00-05:00",
                at("2026-06-10T14:00:00Z"),
                &utc,
                &busy_for(30.0),
                &defaults()
            ),
            Plan::NotYet
        );
    }

    #[test]
    fn a_due_reexec_waits_for_the_window_while_the_serials_last_until_it_opens_plus_the_margin() {
        let utc = TimeZone::UTC;
        let t = defaults();
        let two_pm = at("2026-06-10T14:00:00Z");
        // 16 h left: due by the headroom (1.9e7), the window opens in 12 h, 16 h > 12 h + 1 h
        let f = busy_for(16.0);
        assert_eq!(Outlook::of(&f, true, &t), Outlook::Preempt);
        let p = plan_at("02:00-05:00", two_pm, &utc, &f, &t);
        assert_eq!(
            p,
            Plan::Wait(Wait {
                opens: at("2026-06-11T02:00:00Z"),
                words: "planned, waits for preempt_window 02:00-05:00 (opens in 12h; runs out in ~16 h)"
                    .into()
            })
        );
        assert!(!p.acts_now());
        // 12.5 h left: they run out before the opening plus the margin (13 h): now
        let p = plan_at("02:00-05:00", two_pm, &utc, &busy_for(12.5), &t);
        assert_eq!(
            p,
            Plan::NotWaiting(
                "runs out in ~12 h, before preempt_window 02:00-05:00 opens (in 12h) plus 1h margin: not waiting".into()
            )
        );
        assert!(p.acts_now());
        // due by preempt_before (5 h) with the window 9 h away
        let p = plan_at(
            "02:00-05:00",
            at("2026-06-10T17:00:00Z"),
            &utc,
            &forecast(30_000_000, Some(1666.0)),
            &t,
        );
        assert_eq!(
            p,
            Plan::NotWaiting(
                "runs out in ~5 h, before preempt_window 02:00-05:00 opens (in 9h) plus 1h margin: not waiting".into()
            )
        );
        // the margin is half of preempt_before when that is shorter: 40 min ahead, 20 min
        let t40 = Thresholds {
            preempt_before: Duration::from_secs(40 * 60),
            preempt_headroom: 1000,
            ..t
        };
        let near = at("2026-06-10T01:45:00Z"); // opens in 15 min
        let p = plan_at("02:00-05:00", near, &utc, &busy_for(34.0 / 60.0), &t40);
        assert!(
            matches!(&p, Plan::NotWaiting(why) if why.contains("plus 20m margin")),
            "{p:?}"
        );
        let p = plan_at("02:00-05:00", near, &utc, &busy_for(39.0 / 60.0), &t40);
        assert!(matches!(p, Plan::Wait(_)), "{p:?}");
    }

    #[test]
    fn due_with_no_rate_goes_now() {
        // below the headroom with no rate yet (the first rounds): nothing says it lasts
        let utc = TimeZone::UTC;
        let f = forecast(1_000_000, None);
        let p = plan_at(
            "02:00-05:00",
            at("2026-06-10T17:00:00Z"),
            &utc,
            &f,
            &defaults(),
        );
        assert_eq!(
            p,
            Plan::NotWaiting(
                "1.00e6 serials left and no forecast rate to tell whether they last until preempt_window 02:00-05:00 opens (in 9h): not waiting".into()
            )
        );
        // not growing: no forecast time either
        let p = plan_at(
            "02:00-05:00",
            at("2026-06-10T17:00:00Z"),
            &utc,
            &forecast(1_000_000, Some(0.0)),
            &defaults(),
        );
        assert!(p.acts_now(), "{p:?}");
    }

    #[test]
    fn due_with_no_window_or_in_the_window_goes_now() {
        let utc = TimeZone::UTC;
        let f = busy_for(10.0);
        let t = defaults();
        assert_eq!(
            plan_at("", at("2026-06-10T14:00:00Z"), &utc, &f, &t),
            Plan::AnyTime
        );
        assert_eq!(
            plan_at("02:00-05:00", at("2026-06-10T03:00:00Z"), &utc, &f, &t),
            Plan::InWindow
        );
    }

    #[test]
    fn plan_counts_real_hours_across_a_dst_change() {
        let ny = zone("America/New_York");
        let t = defaults();
        // Rule 2. 2026-03-08 00:30 EST: "03:00-05:00" opens at 03:00 EDT, 1.5 real hours later
        // (not the 2.5 the wall clock suggests): 2.6 h left last past 1.5 h + 1 h, it waits.
        let now = at("2026-03-08T00:30:00-05:00");
        assert_eq!(
            plan_at("03:00-05:00", now, &ny, &busy_for(2.6), &t),
            Plan::Wait(Wait {
                opens: at("2026-03-08T03:00:00-04:00"),
                words: "planned, waits for preempt_window 03:00-05:00 (opens in 1h30m; runs out in ~2 h)"
                    .into()
            })
        );
        // fall back: 00:30 EDT to 03:00 EST is 3.5 real hours (not 2.5): 4.2 h left do not
        // last past 3.5 h + 1 h
        let now = at("2026-11-01T00:30:00-04:00");
        let p = plan_at("03:00-05:00", now, &ny, &busy_for(4.2), &t);
        assert!(
            matches!(&p, Plan::NotWaiting(why) if why.contains("(in 3h30m) plus 1h margin")),
            "{p:?}"
        );
        // Rule 1. The night before fall back, 03:30 EDT: the next 03:00 (EST) is 24.5 real
        // hours on; 41 h left leave 16.5 h then, under the headroom's ~16.8 h (by the wall
        // clock's 23.5 h it would be 17.5 h, above)
        let now = at("2026-10-31T03:30:00-04:00");
        let p = plan_at("03:00-04:00", now, &ny, &busy_for(41.0), &t);
        assert!(
            matches!(&p, Plan::BroughtForward(why) if why.contains("(in 24h30m;")),
            "{p:?}"
        );
        // the night before spring forward, 03:30 EST: the next 03:00 (EDT) is 22.5 real hours
        // on; 39.8 h left leave 17.3 h then, above (by the wall clock's 23.5 h, 16.3 h: below)
        let now = at("2026-03-07T03:30:00-05:00");
        assert_eq!(
            plan_at("03:00-04:00", now, &ny, &busy_for(39.8), &t),
            Plan::NotYet
        );
        assert_eq!(
            w("03:00-04:00").next_opening(now, &ny),
            Some(at("2026-03-08T03:00:00-04:00"))
        );
    }

    #[test]
    fn compact_waits() {
        assert_eq!(
            hours_minutes(Duration::from_secs(6 * 3600 + 12 * 60 + 59)),
            "6h12m"
        );
        assert_eq!(hours_minutes(Duration::from_secs(9 * 3600)), "9h");
        assert_eq!(
            hours_minutes(Duration::from_secs(3 * 3600 + 5 * 60)),
            "3h05m"
        );
        assert_eq!(hours_minutes(Duration::from_secs(45 * 60)), "45m");
        assert_eq!(hours_minutes(Duration::from_secs(20)), "<1m");
    }
}
