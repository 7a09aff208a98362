//! When an action that needs a fleet slot waits, and when it acts without one. Pure.
//!
//! The rules, in order:
//! - a slot granted: act;
//! - etcd unreachable (down, partitioned, no quorum) or refusing this node (bad certificate,
//!   bad password, no permission): `on_unreachable = "wait"` holds the action, whatever its
//!   urgency and however long it waited — under `"wait"` nothing acts without a slot, since a
//!   partition that cuts off many nodes at once is exactly when their repairs would pile up;
//!   `"local"` acts on the local rate limits alone;
//! - a busy but reachable fleet (queued, or the request not answered yet):
//!   - an emergency cure (the node is already wedged) waits at most `max_wait`, then acts on
//!     the local limits alone;
//!   - the forecast's planned reexec waits for as long as its forecast allows: it acts without
//!     a slot once the serials are forecast to run out within
//!     [`crate::systemd::forecast::deadline_margin`]; with no forecast time (planned on the headroom
//!     alone) it is bounded by `max_wait` like an emergency.

use std::fmt;
use std::time::Duration;

use super::OnUnreachable;

use super::storm::MaxUnhealthy;
use super::{GroupHealth, SlotState, Urgency};

/// What the policy looks at.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// Emergency cure or planned reexec.
    pub urgency: Urgency,
    /// How long the action has waited for its slot so far.
    pub waited: Duration,
    /// `[fleet] max_wait`.
    pub max_wait: Duration,
    /// `[fleet] on_unreachable`.
    pub on_unreachable: OnUnreachable,
    /// This node's request, as the fleet handle sees it now.
    pub state: &'a SlotState,
    /// For a planned reexec: how long until PID 1 runs out of bus serials at the forecast rate
    /// (None: no forecast time).
    pub serial_eta: Option<Duration>,
    /// [`crate::systemd::forecast::deadline_margin`] for this configuration.
    pub margin: Duration,
}

/// Why an action acts without a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalReason {
    /// An emergency cure waited `max_wait` in a busy group.
    MaxWaitPassed {
        /// How long it waited.
        waited: Duration,
    },
    /// etcd cannot be reached or refuses this node, and `on_unreachable = "local"`.
    Unreachable {
        /// What the fleet handle says.
        error: String,
    },
    /// A planned reexec whose forecast says the serials run out within the margin.
    ForecastDeadline {
        /// The forecast time left.
        eta: Duration,
    },
}

impl fmt::Display for LocalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalReason::MaxWaitPassed { waited } => write!(
                f,
                "waited {} for a fleet slot (max_wait): acting under local limits only",
                humantime::format_duration(whole_seconds(*waited))
            ),
            LocalReason::Unreachable { error } => write!(
                f,
                "etcd unavailable ({error}) and on_unreachable = \"local\": acting under local limits only"
            ),
            LocalReason::ForecastDeadline { eta } => write!(
                f,
                "PID 1 is forecast to run out of bus serials in {}: a planned reexec waits no longer for a fleet slot",
                humantime::format_duration(whole_seconds(*eta))
            ),
        }
    }
}

/// Why an action waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// The request is on its way (no answer from the fleet yet).
    Requesting,
    /// Queued behind others in a busy group.
    Queued {
        /// This node's place among the waiters (0: next).
        position: usize,
        /// Slots held now.
        holders: usize,
        /// Slots in the group now.
        max: usize,
    },
    /// etcd cannot be reached and `on_unreachable = "wait"`.
    Unreachable {
        /// What the fleet handle says.
        error: String,
    },
    /// etcd refuses this node (TLS, auth, permission) and `on_unreachable = "wait"`.
    Rejected {
        /// What the fleet handle says.
        error: String,
    },
    /// The storm guard reads the group's member keys before a disruptive repair asks.
    CheckingHealth,
    /// The storm guard pauses disruptive repairs in the group.
    Storm {
        /// Members reporting findings that need a repair.
        unhealthy: usize,
        /// Live members.
        members: usize,
        /// `[fleet] max_unhealthy`.
        max_unhealthy: String,
    },
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Requesting => f.write_str("asking the fleet for a slot"),
            WaitReason::Queued {
                position,
                holders,
                max,
            } => write!(
                f,
                "waiting for a fleet slot: {holders} of {max} held, {position} ahead of this node"
            ),
            WaitReason::Unreachable { error } => write!(
                f,
                "etcd unreachable ({error}); on_unreachable = \"wait\": nothing acts without a slot"
            ),
            WaitReason::Rejected { error } => write!(
                f,
                "etcd refuses this node ({error}): fix [fleet] TLS/auth; on_unreachable = \"wait\": nothing acts without a slot"
            ),
            WaitReason::CheckingHealth => f.write_str(
                "reading the group's member keys (storm guard) before asking for a slot",
            ),
            WaitReason::Storm {
                unhealthy,
                members,
                max_unhealthy,
            } => write!(
                f,
                "fleet storm: {unhealthy} of {members} members report findings that need a repair (max_unhealthy {max_unhealthy}): disruptive repairs in the group pause"
            ),
        }
    }
}

/// The policy's word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The slot is held: act.
    Act,
    /// Act without a slot, under the local rate limits alone.
    ActLocal(LocalReason),
    /// Keep waiting (the probe loop goes on).
    Wait(WaitReason),
}

/// The storm guard's word on a repair, before it asks for a slot: None (go on and ask), or
/// why it waits. Pure: `health` is what the fleet handle read last (None: not yet), `exempt`
/// whether the cure's cause is proven local to the node ([`super::storm::exempt`]).
pub fn storm_pause(
    max_unhealthy: MaxUnhealthy,
    exempt: bool,
    state: &SlotState,
    health: Option<&GroupHealth>,
) -> Option<WaitReason> {
    if max_unhealthy == MaxUnhealthy::Off || exempt {
        return None;
    }
    if matches!(
        state,
        SlotState::Unreachable { .. } | SlotState::Rejected { .. } | SlotState::Granted { .. }
    ) {
        // nothing to read (the slot policy below decides), or the slot is held already
        return None;
    }
    match health {
        None => Some(WaitReason::CheckingHealth),
        Some(h) if h.storming => Some(WaitReason::Storm {
            unhealthy: h.unhealthy.len(),
            members: h.members,
            max_unhealthy: max_unhealthy.to_string(),
        }),
        Some(_) => None,
    }
}

/// Decide for one action that needs a slot.
pub fn decide(i: &Inputs<'_>) -> Verdict {
    let unavailable = |error: &str, rejected: bool| match i.on_unreachable {
        OnUnreachable::Local => Verdict::ActLocal(LocalReason::Unreachable {
            error: error.to_owned(),
        }),
        OnUnreachable::Wait if rejected => Verdict::Wait(WaitReason::Rejected {
            error: error.to_owned(),
        }),
        OnUnreachable::Wait => Verdict::Wait(WaitReason::Unreachable {
            error: error.to_owned(),
        }),
    };
    let busy = match i.state {
        SlotState::Granted { .. } => return Verdict::Act,
        SlotState::Unreachable { error, .. } => return unavailable(error, false),
        SlotState::Rejected { error } => return unavailable(error, true),
        SlotState::Idle => WaitReason::Requesting,
        SlotState::Waiting {
            position,
            holders,
            max,
            ..
        } => WaitReason::Queued {
            position: *position,
            holders: *holders,
            max: *max,
        },
    };
    match (i.urgency, i.serial_eta) {
        (Urgency::Planned, Some(eta)) if eta <= i.margin => {
            Verdict::ActLocal(LocalReason::ForecastDeadline { eta })
        }
        (Urgency::Planned, Some(_)) => Verdict::Wait(busy),
        (Urgency::Emergency, _) | (Urgency::Planned, None) if i.waited >= i.max_wait => {
            Verdict::ActLocal(LocalReason::MaxWaitPassed { waited: i.waited })
        }
        _ => Verdict::Wait(busy),
    }
}

fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::systemd::forecast::deadline_margin;

    const MIN: Duration = Duration::from_secs(60);

    fn waiting() -> SlotState {
        SlotState::Waiting {
            since: SystemTime::UNIX_EPOCH,
            position: 2,
            holders: 1,
            max: 1,
        }
    }

    fn granted() -> SlotState {
        SlotState::Granted {
            since: SystemTime::UNIX_EPOCH,
            revision: 7,
        }
    }

    fn unreachable() -> SlotState {
        SlotState::Unreachable {
            since: SystemTime::UNIX_EPOCH,
            error: "no quorum".into(),
        }
    }

    fn rejected() -> SlotState {
        SlotState::Rejected {
            error: "certificate signed by unknown authority".into(),
        }
    }

    fn run(
        urgency: Urgency,
        state: &SlotState,
        waited_min: u64,
        on: OnUnreachable,
        eta_min: Option<u64>,
    ) -> Verdict {
        decide(&Inputs {
            urgency,
            waited: MIN * waited_min as u32,
            max_wait: MIN * 15,
            on_unreachable: on,
            state,
            serial_eta: eta_min.map(|m| MIN * m as u32),
            margin: deadline_margin(Duration::from_secs(6 * 3600)),
        })
    }

    use OnUnreachable::{Local, Wait};
    use Urgency::{Emergency, Planned};

    #[test]
    fn a_granted_slot_acts_whatever_else_holds() {
        for u in [Emergency, Planned] {
            for on in [Wait, Local] {
                assert_eq!(run(u, &granted(), 0, on, Some(600)), Verdict::Act);
                assert_eq!(run(u, &granted(), 100, on, None), Verdict::Act);
            }
        }
    }

    #[test]
    fn an_emergency_waits_for_a_busy_fleet_at_most_max_wait() {
        for on in [Wait, Local] {
            assert_eq!(
                run(Emergency, &waiting(), 14, on, None),
                Verdict::Wait(WaitReason::Queued {
                    position: 2,
                    holders: 1,
                    max: 1
                })
            );
            assert_eq!(
                run(Emergency, &SlotState::Idle, 3, on, None),
                Verdict::Wait(WaitReason::Requesting)
            );
            let v = run(Emergency, &waiting(), 15, on, None);
            assert_eq!(
                v,
                Verdict::ActLocal(LocalReason::MaxWaitPassed { waited: MIN * 15 })
            );
            assert_eq!(
                run(Emergency, &SlotState::Idle, 16, on, None),
                Verdict::ActLocal(LocalReason::MaxWaitPassed { waited: MIN * 16 })
            );
        }
    }

    #[test]
    fn under_wait_an_unreachable_or_refusing_etcd_holds_everything() {
        for u in [Emergency, Planned] {
            for waited in [0, 15, 10_000] {
                for eta in [None, Some(600), Some(5)] {
                    assert!(matches!(
                        run(u, &unreachable(), waited, Wait, eta),
                        Verdict::Wait(WaitReason::Unreachable { .. })
                    ));
                    assert!(matches!(
                        run(u, &rejected(), waited, Wait, eta),
                        Verdict::Wait(WaitReason::Rejected { .. })
                    ));
                }
            }
        }
    }

    #[test]
    fn under_local_an_unreachable_or_refusing_etcd_acts_at_once() {
        for u in [Emergency, Planned] {
            for state in [unreachable(), rejected()] {
                assert!(matches!(
                    run(u, &state, 0, Local, Some(600)),
                    Verdict::ActLocal(LocalReason::Unreachable { .. })
                ));
            }
        }
    }

    #[test]
    fn a_planned_reexec_waits_until_its_forecast_deadline_not_max_wait() {
        // 5 h of serials left: it waits, far past max_wait
        assert!(matches!(
            run(Planned, &waiting(), 240, Wait, Some(300)),
            Verdict::Wait(WaitReason::Queued { .. })
        ));
        // within the hour's margin: no further
        assert_eq!(
            run(Planned, &waiting(), 1, Wait, Some(59)),
            Verdict::ActLocal(LocalReason::ForecastDeadline { eta: MIN * 59 })
        );
        assert!(matches!(
            run(Planned, &SlotState::Idle, 0, Local, Some(60)),
            Verdict::ActLocal(LocalReason::ForecastDeadline { .. })
        ));
        // no forecast time (planned on the headroom alone): bounded like an emergency
        assert!(matches!(
            run(Planned, &waiting(), 14, Wait, None),
            Verdict::Wait(_)
        ));
        assert!(matches!(
            run(Planned, &waiting(), 15, Wait, None),
            Verdict::ActLocal(LocalReason::MaxWaitPassed { .. })
        ));
    }

    #[test]
    fn a_storm_pauses_what_is_not_exempt_and_only_with_the_guard_on() {
        let health = |storming| GroupHealth {
            members: 10,
            unhealthy: vec!["a".into(), "b".into(), "c".into()],
            storming,
            read_at: SystemTime::UNIX_EPOCH,
        };
        let on = MaxUnhealthy::Percent(20);
        let storm = health(true);
        let calm = health(false);
        assert_eq!(
            storm_pause(on, false, &SlotState::Idle, Some(&storm)),
            Some(WaitReason::Storm {
                unhealthy: 3,
                members: 10,
                max_unhealthy: "20%".into()
            })
        );
        assert_eq!(storm_pause(on, true, &SlotState::Idle, Some(&storm)), None);
        assert_eq!(
            storm_pause(MaxUnhealthy::Off, false, &SlotState::Idle, Some(&storm)),
            None
        );
        assert_eq!(storm_pause(on, false, &waiting(), Some(&calm)), None);
        assert_eq!(
            storm_pause(on, false, &SlotState::Idle, None),
            Some(WaitReason::CheckingHealth)
        );
        assert_eq!(storm_pause(on, false, &unreachable(), None), None);
        assert_eq!(storm_pause(on, false, &granted(), Some(&storm)), None);
        let Some(w) = storm_pause(on, false, &SlotState::Idle, Some(&storm)) else {
            panic!()
        };
        assert_eq!(
            w.to_string(),
            "fleet storm: 3 of 10 members report findings that need a repair (max_unhealthy 20%): disruptive repairs in the group pause"
        );
    }

    #[test]
    fn reasons_read_well() {
        let v = run(Emergency, &waiting(), 15, Wait, None);
        let Verdict::ActLocal(r) = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            r.to_string(),
            "waited 15m for a fleet slot (max_wait): acting under local limits only"
        );
        let Verdict::Wait(w) = run(Emergency, &rejected(), 0, Wait, None) else {
            panic!()
        };
        assert!(w.to_string().contains("fix [fleet] TLS/auth"), "{w}");
        let Verdict::Wait(w) = run(Emergency, &waiting(), 0, Wait, None) else {
            panic!()
        };
        assert_eq!(
            w.to_string(),
            "waiting for a fleet slot: 1 of 1 held, 2 ahead of this node"
        );
    }
}
