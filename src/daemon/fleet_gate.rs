//! The daemon's side of the fleet budget: ask for a slot before a disruptive action, follow
//! the policy ([`crate::fleet::policy`]) while it waits, give the slot back once the action
//! and its settle check are over, and say each step in the journal.

use std::collections::BTreeSet;
use std::mem::discriminant;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::fleet::FleetConfig;
use crate::fleet::policy::{self, Inputs, Verdict, WaitReason};
use crate::fleet::{Fleet, FleetError, FleetSettings, Holder, SlotState, Urgency, storm};
use crate::report::event::EventKind;
use crate::report::journal::{Event, emit};
use crate::report::status_file::{FleetNodeStatus, FleetStatus, FleetStormStatus};
use crate::target::ActionKind;

/// How often the storm guard reads the group's member keys while a repair waits on it.
const STORM_RECHECK: Duration = Duration::from_secs(5);

/// How long at most a slot is kept after its repair did not cure (the settle check found
/// its symptom standing): while this node still reports findings a fleet repair aims at, its
/// slot stays, so one bad repair cannot roll across the group node by node; the node's next
/// tier runs under it. Both backends.
pub const KEEP_UNCURED_FOR: Duration = Duration::from_secs(30 * 60);

/// Whether a slot whose repair did not cure (at `kept_since`) is still kept at `now`: while
/// the node is still `sick`, at most [`KEEP_UNCURED_FOR`].
pub fn keeps_slot(kept_since: Option<Instant>, sick: bool, now: Instant) -> bool {
    kept_since.is_some_and(|t| sick && now.saturating_duration_since(t) < KEEP_UNCURED_FOR)
}

/// What the gate says about an action the ladder chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Run it (with a slot, or under local limits alone: the journal says which).
    Go,
    /// Not yet: why.
    Wait(String),
}

/// A request that waits.
#[derive(Debug)]
struct Waiting {
    action: ActionKind,
    urgency: Urgency,
    since: Instant,
    /// The last reason logged (fleet-waiting is logged when the kind of reason changes).
    logged: Option<WaitReason>,
    reason: WaitReason,
}

/// The fleet handle and what this daemon did with it.
#[derive(Debug)]
pub struct FleetGate {
    fleet: Fleet,
    config: FleetConfig,
    node: String,
    margin: Duration,
    waiting: Option<Waiting>,
    /// An action runs (or settles) under a slot: since when.
    holding: Option<(ActionKind, Instant)>,
    /// The last action run without a slot, and why.
    local: Option<(ActionKind, String)>,
    seen_expired: u64,
    was_unavailable: bool,
    /// A repair the storm guard pauses: which, and since when (fleet-storm was logged).
    storm: Option<(ActionKind, Instant)>,
    /// When the member keys were last asked for.
    health_asked: Option<Instant>,
    /// The stray keys under `holders/` already logged (each once while it stays).
    strays_logged: BTreeSet<String>,
    /// The held slot's repair did not cure: since when it is kept ([`keeps_slot`]).
    kept: Option<Instant>,
    /// This node reports findings a fleet repair aims at (the latest `set_findings`).
    sick: bool,
}

impl FleetGate {
    /// Start the fleet handle when `[fleet]` is configured (None: no fleet budget).
    pub fn start(config: &Config) -> Option<Result<FleetGate, FleetError>> {
        let settings = FleetSettings::from_config(&config.fleet, config.etcd_request_timeout())?;
        let node = settings.node.clone();
        Some(Fleet::start(settings).map(|fleet| FleetGate {
            fleet,
            config: config.fleet.clone(),
            node,
            margin: crate::systemd::forecast::deadline_margin(
                config.actions.daemon_reexec_preempt.before,
            ),
            waiting: None,
            holding: None,
            local: None,
            seen_expired: 0,
            was_unavailable: false,
            storm: None,
            health_asked: None,
            strays_logged: BTreeSet::new(),
            kept: None,
            sick: false,
        }))
    }

    /// Resolves when the fleet's state or view changed.
    pub async fn changed(&mut self) {
        self.fleet.changed().await;
    }

    /// The findings this node acts on (its member key says so: the storm guard of the other
    /// members counts them).
    pub fn set_findings(&mut self, findings: Vec<String>) {
        self.sick = !findings.is_empty();
        self.fleet.set_findings(findings);
    }

    /// May `action` (which needs a slot, and is aimed at `aimed_at`) run now?
    pub fn admit(
        &mut self,
        action: ActionKind,
        urgency: Urgency,
        serial_eta: Option<Duration>,
        aimed_at: &[String],
    ) -> Gate {
        if self.holding.is_some_and(|(a, _)| a == action) {
            return Gate::Go;
        }
        let since = match &self.waiting {
            Some(w) if w.action == action => w.since,
            _ => Instant::now(),
        };
        if let Some(reason) = self.storm_guard(action, aimed_at) {
            return self.wait(action, urgency, since, reason);
        }
        self.fleet.request(action, urgency);
        let state = self.fleet.state();
        let verdict = policy::decide(&Inputs {
            urgency,
            waited: since.elapsed(),
            max_wait: self.config.max_wait,
            on_unreachable: self.config.on_unreachable,
            state: &state,
            serial_eta: if urgency == Urgency::Planned {
                serial_eta
            } else {
                None
            },
            margin: self.margin,
        });
        match verdict {
            Verdict::Act => {
                let view = self.fleet.view();
                let message = format!(
                    "fleet slot granted for {action} after waiting {}: {} of {} held in group {}",
                    humantime::format_duration(Duration::from_secs(since.elapsed().as_secs())),
                    view.holders.len(),
                    view.max_disruptive
                        .map_or_else(|| "?".to_owned(), |m| m.to_string()),
                    self.config.group
                );
                fleet_event(EventKind::FleetGranted, action, &message);
                self.waiting = None;
                self.local = None;
                self.holding = Some((action, Instant::now()));
                Gate::Go
            }
            Verdict::ActLocal(reason) => {
                let message = format!("{action}: {reason}");
                fleet_event(EventKind::FleetLocal, action, &message);
                // no slot will be used for this run: withdraw the request
                self.fleet.release();
                self.waiting = None;
                self.local = Some((action, reason.to_string()));
                Gate::Go
            }
            Verdict::Wait(reason) => self.wait(action, urgency, since, reason),
        }
    }

    /// The storm guard: why `action` may not even ask for a slot now (None: it may). Asks for
    /// the group's health every [`STORM_RECHECK`] while a repair waits on it (the fleet task
    /// reads the member keys once and keeps them by a watch meanwhile); logs
    /// fleet-storm once per pause and fleet-storm-over when it ends.
    fn storm_guard(&mut self, action: ActionKind, aimed_at: &[String]) -> Option<WaitReason> {
        let exempt = storm::exempt(aimed_at, &self.config.storm_exempt);
        if self.config.max_unhealthy != storm::MaxUnhealthy::Off
            && !exempt
            && self
                .health_asked
                .is_none_or(|t| t.elapsed() >= STORM_RECHECK)
        {
            self.fleet.read_health();
            self.health_asked = Some(Instant::now());
        }
        let view = self.fleet.view();
        let pause = policy::storm_pause(
            self.config.max_unhealthy,
            exempt,
            &self.fleet.state(),
            view.health.as_ref(),
        );
        match &pause {
            Some(WaitReason::Storm { .. }) if self.storm.is_none() => {
                // paused: no place in the queue meanwhile
                self.fleet.release();
                self.storm = Some((action, Instant::now()));
                let unhealthy = view
                    .health
                    .as_ref()
                    .map(|h| h.unhealthy.join(", "))
                    .unwrap_or_default();
                fleet_event(
                    EventKind::FleetStorm,
                    action,
                    &format!(
                        "{action} paused: {} (reporting: {unhealthy})",
                        pause.as_ref().map(ToString::to_string).unwrap_or_default()
                    ),
                );
            }
            Some(WaitReason::Storm { .. }) | Some(WaitReason::CheckingHealth) => {}
            _ => {
                if let Some((paused, since)) = self.storm.take() {
                    let why = if exempt {
                        format!(
                            "{action} is aimed at a cause proven local to this node (storm_exempt)"
                        )
                    } else {
                        "no more members than max_unhealthy report findings now".to_owned()
                    };
                    fleet_event(
                        EventKind::FleetStormOver,
                        paused,
                        &format!(
                            "fleet storm over for {paused} after {}: {why}",
                            humantime::format_duration(Duration::from_secs(
                                since.elapsed().as_secs()
                            ))
                        ),
                    );
                }
            }
        }
        pause
    }

    /// `action` waits for `reason`: remember it, and log fleet-waiting when the kind of
    /// reason changes (a storm has its own events).
    fn wait(
        &mut self,
        action: ActionKind,
        urgency: Urgency,
        since: Instant,
        reason: WaitReason,
    ) -> Gate {
        let mut w = match self.waiting.take() {
            Some(w) if w.action == action => w,
            _ => Waiting {
                action,
                urgency,
                since,
                logged: None,
                reason: reason.clone(),
            },
        };
        w.urgency = urgency;
        w.reason = reason.clone();
        for key in new_strays(&self.fleet.view().holders, &mut self.strays_logged) {
            fleet_event(
                EventKind::FleetWaiting,
                action,
                &format!(
                    "{action} waits: {key} is no slot of this version (written by hand, or by \
                     another version) and blocks every grant in group {} until it is deleted",
                    self.config.group
                ),
            );
        }
        let storm = matches!(
            reason,
            WaitReason::Storm { .. } | WaitReason::CheckingHealth
        );
        if !storm
            && w.logged
                .as_ref()
                .is_none_or(|l| discriminant(l) != discriminant(&reason))
        {
            fleet_event(
                EventKind::FleetWaiting,
                action,
                &format!("{action} waits: {reason}"),
            );
            w.logged = Some(reason.clone());
        }
        self.waiting = Some(w);
        Gate::Wait(reason.to_string())
    }

    /// A settle check ended: a repair that did not cure keeps its slot ([`keeps_slot`]);
    /// one that cured lets it go at the next [`FleetGate::after`].
    pub fn settled(&mut self, action: ActionKind, cured: bool) {
        if self.holding.is_none() {
            return;
        }
        if cured {
            self.kept = None;
        } else if self.kept.is_none() {
            self.kept = Some(Instant::now());
            tracing::info!(
                "{action} did not cure: this node keeps its fleet slot while its findings stand (at most {}), so the same repair does not move on to the next node",
                humantime::format_duration(KEEP_UNCURED_FOR)
            );
        }
    }

    /// After the ladder spoke and the runner moved on: release a slot whose action and settle
    /// check are over, withdraw a request the ladder no longer makes (`waiting_for_window`:
    /// the actions it holds back for their maintenance window, with its words), note expiries
    /// and etcd going away or coming back.
    pub fn after(
        &mut self,
        busy: bool,
        still_wanted: &[ActionKind],
        waiting_for_window: &[(ActionKind, String)],
    ) {
        if let Some((action, since)) = self.holding {
            if !busy && !keeps_slot(self.kept, self.sick, Instant::now()) {
                self.fleet.release();
                self.holding = None;
                let why = match self.kept.take() {
                    Some(_) if self.sick => format!(
                        "kept {} after a repair that did not cure, the most it is kept",
                        humantime::format_duration(KEEP_UNCURED_FOR)
                    ),
                    Some(_) => {
                        "kept after a repair that did not cure, until the node's findings cleared"
                            .to_owned()
                    }
                    None => "done and settled".to_owned(),
                };
                fleet_event(
                    EventKind::FleetReleased,
                    action,
                    &format!(
                        "{action} {why}: fleet slot released after {}",
                        humantime::format_duration(Duration::from_secs(since.elapsed().as_secs()))
                    ),
                );
            }
        }
        if let Some(w) = &self.waiting {
            if !still_wanted.contains(&w.action) {
                let action = w.action;
                self.fleet.release();
                self.waiting = None;
                fleet_event(
                    EventKind::FleetReleased,
                    action,
                    &withdrawn_because(action, waiting_for_window),
                );
            }
        }
        if let Some((action, since)) = self.storm {
            if !still_wanted.contains(&action) {
                self.storm = None;
                fleet_event(
                    EventKind::FleetStormOver,
                    action,
                    &format!(
                        "fleet storm pause of {action} ends after {}: this node no longer needs it",
                        humantime::format_duration(Duration::from_secs(since.elapsed().as_secs()))
                    ),
                );
            }
        }
        self.observe();
    }

    /// Journal an expired grant, and etcd becoming unavailable.
    pub fn observe(&mut self) {
        let view = self.fleet.view();
        if view.expired > self.seen_expired {
            self.seen_expired = view.expired;
            let action = self.holding.map_or(ActionKind::RestartKubelet, |(a, _)| a);
            fleet_event(
                EventKind::FleetExpired,
                action,
                &format!(
                    "this node's etcd lease expired while it held a fleet slot for {action}: another node may take it now"
                ),
            );
        }
        let state = self.fleet.state();
        let unavailable = matches!(
            state,
            SlotState::Unreachable { .. } | SlotState::Rejected { .. }
        );
        if unavailable && !self.was_unavailable {
            let (kind, error) = match &state {
                SlotState::Rejected { error } => ("refuses this node", error.clone()),
                SlotState::Unreachable { error, .. } => ("is unreachable", error.clone()),
                _ => ("", String::new()),
            };
            let message = format!(
                "etcd {kind} ({error}); on_unreachable = \"{}\"",
                self.config.on_unreachable
            );
            emit(&Event {
                kind: EventKind::FleetUnreachable,
                target: None,
                action: None,
                finding: None,
                message: &message,
            });
        } else if !unavailable && self.was_unavailable {
            tracing::info!("etcd answers again: the fleet budget is back");
        }
        self.was_unavailable = unavailable;
    }

    /// Whether a request waits (the ladder is worth asking again when the fleet changes).
    pub fn waiting(&self) -> bool {
        self.waiting.is_some()
    }

    /// status.json's `fleet`.
    pub fn status(&self) -> FleetStatus {
        let view = self.fleet.view();
        let state = self.fleet.state();
        let (name, reason) = match (&state, &self.waiting, &self.holding) {
            (_, _, Some(_)) => ("holding", None),
            (SlotState::Rejected { error }, _, _) => ("rejected", Some(error.clone())),
            (SlotState::Unreachable { error, .. }, _, _) => ("unreachable", Some(error.clone())),
            (_, Some(w), _) => ("waiting", Some(w.reason.to_string())),
            _ if self.local.is_some() => ("local", self.local.as_ref().map(|(_, r)| r.clone())),
            _ => ("idle", None),
        };
        let action = self
            .holding
            .map(|(a, _)| a)
            .or(self.waiting.as_ref().map(|w| w.action))
            .or(self
                .local
                .as_ref()
                .filter(|_| name == "local")
                .map(|(a, _)| *a))
            .map(|a| a.name().to_owned());
        let mut status = FleetStatus::of(
            &view,
            &self.node,
            self.config.max_disruptive.to_string(),
            FleetNodeStatus {
                state: name.to_owned(),
                action,
                wait_s: self.waiting.as_ref().map(|w| w.since.elapsed().as_secs()),
                position: match state {
                    SlotState::Waiting { position, .. } if self.waiting.is_some() => Some(position),
                    _ => None,
                },
                reason,
            },
        );
        status.storm = storm_status(&self.config, &view, self.storm.is_some());
        status
    }

    /// Give everything back (the lease is revoked).
    pub async fn shutdown(self) {
        self.fleet.shutdown().await;
    }
}

/// status.json's `fleet.storm` (None: the storm guard is off).
pub fn storm_status(
    config: &FleetConfig,
    view: &crate::fleet::FleetView,
    paused: bool,
) -> Option<FleetStormStatus> {
    (config.max_unhealthy != storm::MaxUnhealthy::Off).then(|| FleetStormStatus {
        max_unhealthy: config.max_unhealthy.to_string(),
        storming: view.health.as_ref().map(|h| h.storming),
        unhealthy: view
            .health
            .as_ref()
            .map(|h| h.unhealthy.clone())
            .unwrap_or_default(),
        members: view.health.as_ref().map(|h| h.members),
        read_at: view.health.as_ref().map(|h| h.read_at),
        paused,
    })
}

/// The stray holder keys (see [`Holder::stray_key`]) among `holders` not in `logged` yet;
/// `logged` keeps those still there, so a key that goes and comes back is told of again.
fn new_strays(holders: &[Holder], logged: &mut BTreeSet<String>) -> Vec<String> {
    let now: BTreeSet<&String> = holders
        .iter()
        .filter_map(|h| h.stray_key.as_ref())
        .collect();
    logged.retain(|k| now.contains(k));
    now.into_iter()
        .filter(|k| logged.insert((*k).clone()))
        .cloned()
        .collect()
}

fn fleet_event(kind: EventKind, action: ActionKind, message: &str) {
    emit(&Event {
        kind,
        target: None,
        action: Some(action),
        finding: None,
        message,
    });
}

/// The urgency of an action the ladder chose: the forecast's reexec is planned, every other
/// one a cure.
pub fn urgency_of(action: ActionKind, planned: bool) -> Urgency {
    if action == ActionKind::DaemonReexec && planned {
        Urgency::Planned
    } else {
        Urgency::Emergency
    }
}

/// Why a waiting request was withdrawn: its action waits for its maintenance window (the
/// ladder's words), or the ladder no longer asks for it.
fn withdrawn_because(action: ActionKind, waiting_for_window: &[(ActionKind, String)]) -> String {
    waiting_for_window
        .iter()
        .find(|(a, _)| *a == action)
        .map_or_else(
            || format!("{action} no longer needed: fleet request withdrawn"),
            |(_, reason)| format!("{action} {reason}: fleet request withdrawn until then"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repair_that_did_not_cure_keeps_its_slot_while_the_node_is_sick_up_to_the_cap() {
        let t0 = Instant::now();
        assert!(!keeps_slot(None, true, t0), "a cured repair's slot goes");
        assert!(keeps_slot(Some(t0), true, t0 + Duration::from_secs(60)));
        assert!(
            !keeps_slot(Some(t0), false, t0 + Duration::from_secs(60)),
            "the node's findings cleared: the slot goes"
        );
        assert!(keeps_slot(
            Some(t0),
            true,
            t0 + KEEP_UNCURED_FOR - Duration::from_secs(1)
        ));
        assert!(
            !keeps_slot(Some(t0), true, t0 + KEEP_UNCURED_FOR),
            "the cap"
        );
        // a clock read before the mark counts as no time passed
        assert!(keeps_slot(Some(t0 + Duration::from_secs(5)), true, t0));
    }

    #[test]
    fn a_stray_holder_key_is_told_of_once_while_it_stays() {
        let holder = |stray: Option<&str>| Holder {
            node: "?".into(),
            action: "?".into(),
            since: std::time::SystemTime::UNIX_EPOCH,
            stray_key: stray.map(str::to_owned),
        };
        let key = "/pleg-guard/g/holders/lock";
        let mut logged = BTreeSet::new();
        let with = [holder(None), holder(Some(key))];
        assert_eq!(new_strays(&with, &mut logged), vec![key.to_owned()]);
        assert!(new_strays(&with, &mut logged).is_empty(), "once");
        assert!(new_strays(&[holder(None)], &mut logged).is_empty());
        assert_eq!(
            new_strays(&with, &mut logged),
            vec![key.to_owned()],
            "gone and back: told again"
        );
    }

    #[test]
    fn a_request_withdrawn_for_the_window_says_so() {
        let waits = [(
            ActionKind::DaemonReexec,
            "planned, waits for preempt_window 02:00-05:00 (opens in 6h12m; runs out in ~16 h)"
                .to_owned(),
        )];
        assert_eq!(
            withdrawn_because(ActionKind::DaemonReexec, &waits),
            "daemon-reexec planned, waits for preempt_window 02:00-05:00 (opens in 6h12m; runs out in ~16 h): fleet request withdrawn until then"
        );
        assert_eq!(
            withdrawn_because(ActionKind::RestartKubelet, &waits),
            "restart-kubelet no longer needed: fleet request withdrawn"
        );
    }
}
