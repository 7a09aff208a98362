//! The repair ladder: findings + ledger + configuration → what to do now. Pure.
//!
//! Tiers, lowest first: `purge-dead-containers` (dead containers), `daemon-reexec` (the
//! systemd bus wedge, or logind hung while the bus answers), `restart-containerd` and
//! `restart-docker` (a runtime hung while PID 1 and the bus answer, its unit up past its own
//! start-up grace; dockerd only with `live-restore`), `restart-kubelet` (PLEG still unhealthy
//! once the runtime answers). At most one action runs at a time, and none while an
//! earlier one is settling: the next tier is reached only after the lower one had its chance
//! and the symptom persisted (or its budget is spent, or it is disabled).
//!
//! A *planned* reexec (for `systemd-serial-exhaustion` alone) may wait for
//! `preempt_window` ([`crate::systemd::preempt`]: the serial forecast decides, this only
//! says so); a reexec for an emergency (`systemd-bus-wedge`, `logind-unresponsive`) never waits.

use std::time::{Duration, SystemTime};

use crate::clock::boot::Now;
use crate::config::{ActionsConfig, Mode, ReexecWhen};
use crate::diagnosis::FindingId;
use crate::ledger::Ledger;
use crate::target::ActionKind;

/// Everything the ladder looks at.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// Now (the wall clock, and this boot's clock the ledger's limits count on).
    pub now: Now,
    /// `repair` or `observe` (or `--dry-run`).
    pub mode: Mode,
    /// Still within `startup_grace` of the daemon's start.
    pub in_startup_grace: bool,
    /// An action is running or settling.
    pub busy: bool,
    /// The current findings.
    pub findings: &'a [FindingId],
    /// This systemd carries the bus bug: the version policy says so, or this boot proved it
    /// (see [`crate::systemd::evidence`]).
    pub systemd_affected: bool,
    /// The serial forecast asks for a planned reexec now: due, or brought forward into an open
    /// `preempt_window` (`systemd-serial-exhaustion` alone is a warning until then).
    pub serial_preempt_due: bool,
    /// A planned reexec would be due but waits for `preempt_window`: the words for status
    /// (`planned, waits for preempt_window 02:00-05:00 (opens in 6h12m; runs out in ~16 h)`).
    pub serial_preempt_waits: Option<&'a str>,
    /// `[actions.*]`.
    pub actions: &'a ActionsConfig,
    /// The ledger.
    pub ledger: &'a Ledger,
    /// What PID 1 and the engine's configuration say of the runtimes, read while a runtime's
    /// hang is a finding (nothing is read otherwise).
    pub runtime: &'a RuntimeFacts,
}

/// What PID 1 says of a runtime's unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitState {
    /// Active for this long.
    ActiveFor(Duration),
    /// Not active (starting, stopping, restarting, failed): PID 1's `ActiveState`.
    NotActive(String),
    /// PID 1 did not tell (no answer, the unit not loaded): why.
    Unknown(String),
}

/// A runtime's unit and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFacts {
    /// The unit (`containerd.service`).
    pub unit: String,
    /// Its state.
    pub state: UnitState,
}

/// Whether dockerd keeps its containers running while it restarts (`"live-restore": true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveRestore {
    /// On.
    On,
    /// Off, and where that was read.
    Off(String),
    /// Could not be read: why.
    Unknown(String),
}

/// kubelet's unit, read while `kubelet-pleg-unhealthy` stands and kubelet runs as a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletFacts {
    /// The unit and its state.
    pub unit: UnitFacts,
    /// The unit's `WatchdogSec=` (None: not armed). kubelet >= 1.35 pings systemd's watchdog
    /// only while its own /healthz checks pass, so systemd restarts a kubelet that stops.
    pub watchdog: Option<Duration>,
}

/// The runtimes' facts for their rungs (None: not read, because no hang of theirs stands).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFacts {
    /// containerd's unit.
    pub containerd: Option<UnitFacts>,
    /// dockerd's unit.
    pub docker: Option<UnitFacts>,
    /// dockerd's `live-restore`.
    pub docker_live_restore: Option<LiveRestore>,
    /// kubelet's unit (None: not read: no PLEG finding, kubelet runs in a container, or
    /// `restart-kubelet` is off).
    pub kubelet: Option<KubeletFacts>,
}

/// One decision about one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it now.
    Act {
        /// Which.
        action: ActionKind,
        /// The findings it is meant to clear.
        aimed_at: Vec<FindingId>,
    },
    /// A rate limit holds it back.
    Suppressed {
        /// Which.
        action: ActionKind,
        /// The findings it would have aimed at.
        aimed_at: Vec<FindingId>,
        /// When the next run is allowed.
        next_allowed_at: SystemTime,
    },
    /// Not yet: a planned action waits for its window (nothing is logged as an outcome).
    Waits {
        /// Which.
        action: ActionKind,
        /// The findings it will aim at.
        aimed_at: Vec<FindingId>,
        /// What it waits for.
        reason: String,
    },
    /// Not run: observe mode, disabled, or not applicable; the reason says which.
    Skipped {
        /// Which.
        action: ActionKind,
        /// The findings it would have aimed at.
        aimed_at: Vec<FindingId>,
        /// Why.
        reason: String,
    },
}

/// Findings that mean PID 1, the bus or logind are broken: a runtime that hangs now is
/// likely blocked on them (runc and dockerd ask PID 1 over the bus), which `daemon-reexec`
/// cures and a restart of the runtime would not; so no runtime restart while one stands.
pub const PID1_OR_BUS_BROKEN: [FindingId; 4] = [
    FindingId::BusUnresponsive,
    FindingId::SystemdBusWedge,
    FindingId::SystemdUnresponsive,
    FindingId::LogindUnresponsive,
];

/// Findings that mean the runtime's own dependencies are broken: restarting kubelet cannot
/// help while any of them stands.
const RUNTIME_BROKEN: [FindingId; 6] = [
    FindingId::BusUnresponsive,
    FindingId::SystemdBusWedge,
    FindingId::SystemdUnresponsive,
    FindingId::LogindUnresponsive,
    FindingId::DockerUnresponsive,
    FindingId::ContainerdUnresponsive,
];

/// Decide, lowest tier first. At most one `Act`, and it is the last decision.
pub fn decide(ctx: &Context<'_>) -> Vec<Decision> {
    if ctx.busy || ctx.in_startup_grace {
        return Vec::new();
    }
    let has = |id: FindingId| ctx.findings.contains(&id);
    let mut out = Vec::new();

    for action in ActionKind::ALL {
        let aimed_at: Vec<FindingId> = aims(action)
            .iter()
            .copied()
            .filter(|id| has(*id))
            .filter(|id| *id != FindingId::SystemdSerialExhaustion || ctx.serial_preempt_due)
            .collect();
        if aimed_at.is_empty() {
            if let Some(reason) = ctx.serial_preempt_waits.filter(|_| {
                action == ActionKind::DaemonReexec
                    && has(FindingId::SystemdSerialExhaustion)
                    && ctx.actions.of(action).enabled
            }) {
                out.push(Decision::Waits {
                    action,
                    aimed_at: vec![FindingId::SystemdSerialExhaustion],
                    reason: reason.to_owned(),
                });
            }
            continue;
        }
        let skip = |reason: String| Decision::Skipped {
            action,
            aimed_at: aimed_at.clone(),
            reason,
        };
        let cfg = ctx.actions.of(action);
        if !cfg.enabled {
            out.push(skip("disabled in config".into()));
            continue;
        }
        match action {
            // The wedge is the bug's own signature: it proves the build affected, whatever
            // the version policy made of its version string.
            ActionKind::DaemonReexec
                if ctx.actions.daemon_reexec_when == ReexecWhen::Affected
                    && !ctx.systemd_affected
                    && !has(FindingId::SystemdBusWedge) =>
            {
                out.push(skip(
                    "this systemd is not affected by the bus bug (when = \"affected\")".into(),
                ));
                continue;
            }
            ActionKind::RestartContainerd | ActionKind::RestartDocker => {
                if let Some(reason) = runtime_restart_blocked(action, ctx, &has) {
                    out.push(skip(reason));
                    continue;
                }
            }
            ActionKind::RestartKubelet => {
                if let Some(blocker) = RUNTIME_BROKEN.iter().find(|id| has(**id)) {
                    out.push(skip(format!(
                        "waits until the runtime answers ({blocker} stands); a kubelet restart would not help"
                    )));
                    break;
                }
                if let Some(reason) = ctx
                    .runtime
                    .kubelet
                    .as_ref()
                    .and_then(kubelet_restart_blocked)
                {
                    out.push(skip(reason));
                    break;
                }
            }
            _ => {}
        }
        if let Err(next_allowed_at) = ctx.ledger.check(action, cfg, &ctx.now) {
            out.push(Decision::Suppressed {
                action,
                aimed_at,
                next_allowed_at,
            });
            continue;
        }
        if ctx.mode == Mode::Observe {
            out.push(skip("observe mode: would run now".into()));
            break;
        }
        out.push(Decision::Act { action, aimed_at });
        break;
    }
    out
}

/// Why a runtime's restart may not run now (None: it may): PID 1 or the bus broken, the unit
/// still starting or already being restarted by systemd, dockerd without `live-restore`.
/// The words name no changing number, so the journal says each once per episode.
fn runtime_restart_blocked(
    action: ActionKind,
    ctx: &Context<'_>,
    has: &impl Fn(FindingId) -> bool,
) -> Option<String> {
    if let Some(blocker) = PID1_OR_BUS_BROKEN.iter().find(|id| has(**id)) {
        return Some(format!(
            "waits while {blocker} stands: a runtime blocked on PID 1 or the bus is daemon-reexec's to cure, a restart would not help"
        ));
    }
    let (facts, grace) = match action {
        ActionKind::RestartDocker => (
            ctx.runtime.docker.as_ref(),
            ctx.actions.runtime_startup_grace.docker,
        ),
        _ => (
            ctx.runtime.containerd.as_ref(),
            ctx.actions.runtime_startup_grace.containerd,
        ),
    };
    let Some(UnitFacts { unit, state }) = facts else {
        return Some("the runtime's unit was not read from PID 1".to_owned());
    };
    match state {
        UnitState::ActiveFor(up) if *up >= grace => {}
        UnitState::ActiveFor(_) => {
            return Some(format!(
                "{unit} became active less than its startup_grace ({}) ago: a runtime still starting is not hung",
                humantime::format_duration(grace)
            ));
        }
        UnitState::NotActive(state) => {
            return Some(format!(
                "{unit} is {state}: systemd is already starting or stopping it"
            ));
        }
        UnitState::Unknown(why) => {
            return Some(format!("PID 1 did not say whether {unit} is up: {why}"));
        }
    }
    if action == ActionKind::RestartDocker && ctx.actions.restart_docker_require_live_restore {
        match &ctx.runtime.docker_live_restore {
            Some(LiveRestore::On) => {}
            Some(LiveRestore::Off(said)) => {
                return Some(format!(
                    "held back: live-restore is off ({said}), so restarting dockerd would kill every container; set \"live-restore\": true, or [actions.restart_docker] require_live_restore = false to restart anyway"
                ));
            }
            Some(LiveRestore::Unknown(why)) => {
                return Some(format!(
                    "held back: whether live-restore is on is unknown ({why}); without it a restart kills every container"
                ));
            }
            None => return Some("held back: live-restore was not read".to_owned()),
        }
    }
    None
}

/// How long a kubelet whose own systemd watchdog is armed must have stayed up before
/// pleg-guard restarts it: this many `WatchdogSec`. Within it, systemd is the first doctor (it
/// restarted kubelet, or will once the pings stop), and a second restart would race it.
pub const KUBELET_WATCHDOG_ROOM: u32 = 2;

/// Why `restart-kubelet` may not run now (None: it may): systemd is already starting or
/// stopping kubelet, or kubelet's own watchdog is armed and kubelet came up too recently to
/// tell systemd's cure from its failure. The words name no changing number.
fn kubelet_restart_blocked(k: &KubeletFacts) -> Option<String> {
    let unit = &k.unit.unit;
    let armed = |w: Duration| {
        format!(
            "its own systemd watchdog is armed (WatchdogSec={})",
            humantime::format_duration(w)
        )
    };
    match (&k.unit.state, k.watchdog) {
        (UnitState::NotActive(state), None) => Some(format!(
            "{unit} is {state}: systemd is already starting or stopping it"
        )),
        (UnitState::NotActive(state), Some(w)) => Some(format!(
            "{unit} is {state}: systemd is already restarting it, {}; a second restart would race it",
            armed(w)
        )),
        (UnitState::ActiveFor(up), Some(w)) if *up < w * KUBELET_WATCHDOG_ROOM => Some(format!(
            "{unit} came up less than {} ago and {}: systemd restarts a kubelet whose /healthz fails, so pleg-guard waits {KUBELET_WATCHDOG_ROOM} watchdog periods before a restart of its own",
            humantime::format_duration(w * KUBELET_WATCHDOG_ROOM),
            armed(w)
        )),
        (UnitState::ActiveFor(_), _) => None,
        (UnitState::Unknown(why), _) => {
            Some(format!("PID 1 did not say whether {unit} is up: {why}"))
        }
    }
}

/// The findings each action cures.
pub fn aims(action: ActionKind) -> &'static [FindingId] {
    match action {
        ActionKind::PurgeDeadContainers => &[FindingId::DeadContainers],
        ActionKind::RestartContainerd => &[FindingId::ContainerdUnresponsive],
        ActionKind::RestartDocker => &[FindingId::DockerUnresponsive],
        ActionKind::DaemonReexec => &[
            FindingId::SystemdBusWedge,
            FindingId::LogindUnresponsive,
            FindingId::SystemdSerialExhaustion,
        ],
        ActionKind::RestartKubelet => &[FindingId::KubeletPlegUnhealthy],
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Config;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    struct Case {
        config: Config,
        ledger: Ledger,
        affected: bool,
        preempt_due: bool,
        preempt_waits: Option<&'static str>,
        busy: bool,
        grace: bool,
        runtime: RuntimeFacts,
    }

    /// Both runtimes' units up for an hour, dockerd with live-restore.
    fn runtimes_up() -> RuntimeFacts {
        let up = |unit: &str| UnitFacts {
            unit: unit.to_owned(),
            state: UnitState::ActiveFor(Duration::from_secs(3600)),
        };
        RuntimeFacts {
            containerd: Some(up("containerd.service")),
            docker: Some(up("docker.service")),
            docker_live_restore: Some(LiveRestore::On),
            kubelet: None,
        }
    }

    impl Case {
        fn new() -> Self {
            Case {
                config: Config::default(),
                ledger: Ledger::default(),
                affected: true,
                preempt_due: false,
                preempt_waits: None,
                busy: false,
                grace: false,
                runtime: runtimes_up(),
            }
        }

        fn decide(&self, findings: &[FindingId]) -> Vec<Decision> {
            decide(&Context {
                now: Now::wall_only(t(0)),
                mode: self.config.mode,
                in_startup_grace: self.grace,
                busy: self.busy,
                findings,
                systemd_affected: self.affected,
                serial_preempt_due: self.preempt_due,
                serial_preempt_waits: self.preempt_waits,
                actions: &self.config.actions,
                ledger: &self.ledger,
                runtime: &self.runtime,
            })
        }
    }

    fn act(action: ActionKind, aimed_at: &[FindingId]) -> Decision {
        Decision::Act {
            action,
            aimed_at: aimed_at.to_vec(),
        }
    }

    use FindingId::*;

    #[test]
    fn nothing_to_do_on_a_healthy_node() {
        assert!(Case::new().decide(&[]).is_empty());
        assert!(Case::new().decide(&[SystemdAffected]).is_empty());
    }

    #[test]
    fn lowest_tier_first_one_at_a_time() {
        let c = Case::new();
        assert_eq!(
            c.decide(&[DeadContainers, SystemdBusWedge, KubeletPlegUnhealthy]),
            vec![act(ActionKind::PurgeDeadContainers, &[DeadContainers])]
        );
        assert_eq!(
            c.decide(&[SystemdBusWedge, LogindUnresponsive, KubeletPlegUnhealthy]),
            vec![act(
                ActionKind::DaemonReexec,
                &[SystemdBusWedge, LogindUnresponsive]
            )]
        );
        assert_eq!(
            c.decide(&[KubeletPlegUnhealthy]),
            vec![act(ActionKind::RestartKubelet, &[KubeletPlegUnhealthy])]
        );
    }

    #[test]
    fn nothing_while_busy_or_in_grace() {
        let mut c = Case::new();
        c.busy = true;
        assert!(c.decide(&[DeadContainers]).is_empty());
        c.busy = false;
        c.grace = true;
        assert!(c.decide(&[DeadContainers]).is_empty());
    }

    #[test]
    fn bus_unresponsive_gets_no_reexec() {
        let c = Case::new();
        assert!(c.decide(&[BusUnresponsive]).is_empty());
        // and no kubelet restart either
        let d = c.decide(&[BusUnresponsive, KubeletPlegUnhealthy]);
        assert!(
            matches!(
                &d[..],
                [Decision::Skipped {
                    action: ActionKind::RestartKubelet,
                    ..
                }]
            ),
            "{d:?}"
        );
    }

    #[test]
    fn a_wedge_is_its_own_proof_but_a_hung_logind_is_not() {
        let mut c = Case::new();
        c.affected = false;
        // the bus-wedge signature proves the build affected: act on it
        assert_eq!(
            c.decide(&[SystemdBusWedge]),
            vec![act(ActionKind::DaemonReexec, &[SystemdBusWedge])]
        );
        // logind alone on a build the policy calls fixed needs `when = "always"`
        let d = c.decide(&[LogindUnresponsive]);
        assert!(
            matches!(&d[..], [Decision::Skipped { action: ActionKind::DaemonReexec, reason, .. }] if reason.contains("not affected")),
            "{d:?}"
        );
        c.config.actions.daemon_reexec_when = ReexecWhen::Always;
        assert_eq!(
            c.decide(&[LogindUnresponsive]),
            vec![act(ActionKind::DaemonReexec, &[LogindUnresponsive])]
        );
    }

    #[test]
    fn serial_exhaustion_reexecs_only_when_the_forecast_says_it_is_due() {
        let mut c = Case::new();
        assert!(
            c.decide(&[SystemdSerialExhaustion]).is_empty(),
            "a warning only"
        );
        c.preempt_due = true;
        assert_eq!(
            c.decide(&[SystemdSerialExhaustion]),
            vec![act(ActionKind::DaemonReexec, &[SystemdSerialExhaustion])]
        );
        // the same budget as any reexec
        c.ledger
            .record_start(ActionKind::DaemonReexec, &Now::wall_only(t(0)));
        assert!(matches!(
            &c.decide(&[SystemdSerialExhaustion])[..],
            [Decision::Suppressed {
                action: ActionKind::DaemonReexec,
                ..
            }]
        ),);
        // observe mode says what it would do
        let mut c = Case::new();
        c.preempt_due = true;
        c.config.mode = Mode::Observe;
        let d = c.decide(&[SystemdSerialExhaustion]);
        assert!(
            matches!(&d[..], [Decision::Skipped { action: ActionKind::DaemonReexec, reason, .. }] if reason.contains("observe")),
            "{d:?}"
        );
    }

    #[test]
    fn a_planned_reexec_waits_for_its_window_an_emergency_does_not() {
        const WAITS: &str =
            "planned, waits for preempt_window 02:00-05:00 (opens in 6h12m; runs out in ~16 h)";
        let mut c = Case::new();
        c.preempt_waits = Some(WAITS);
        // planned, window closed, time enough: no act, the wait is said
        let d = c.decide(&[SystemdSerialExhaustion]);
        assert_eq!(
            d,
            vec![Decision::Waits {
                action: ActionKind::DaemonReexec,
                aimed_at: vec![SystemdSerialExhaustion],
                reason: WAITS.into()
            }]
        );
        // the next tier still has its turn
        let d = c.decide(&[SystemdSerialExhaustion, KubeletPlegUnhealthy]);
        assert!(matches!(&d[0], Decision::Waits { .. }), "{d:?}");
        assert_eq!(
            d[1],
            act(ActionKind::RestartKubelet, &[KubeletPlegUnhealthy])
        );
        // an emergency never waits: the bus wedge or a hung logind act now
        assert_eq!(
            c.decide(&[SystemdBusWedge, SystemdSerialExhaustion]),
            vec![act(ActionKind::DaemonReexec, &[SystemdBusWedge])]
        );
        assert_eq!(
            c.decide(&[LogindUnresponsive]),
            vec![act(ActionKind::DaemonReexec, &[LogindUnresponsive])]
        );
        // a disabled reexec does not claim to wait
        c.config.actions.daemon_reexec.enabled = false;
        assert!(c.decide(&[SystemdSerialExhaustion]).is_empty());
        // not waiting (the forecast said it runs out first): due, and it acts
        let mut c = Case::new();
        c.preempt_due = true;
        assert_eq!(
            c.decide(&[SystemdSerialExhaustion]),
            vec![act(ActionKind::DaemonReexec, &[SystemdSerialExhaustion])]
        );
    }

    /// A case with both runtime restarts disabled: what the kubelet rung does alone.
    fn without_runtime_restarts() -> Case {
        let mut c = Case::new();
        c.config.actions.restart_containerd.enabled = false;
        c.config.actions.restart_docker.enabled = false;
        c
    }

    fn skipped_reason(d: &[Decision], which: ActionKind) -> String {
        d.iter()
            .find_map(|d| match d {
                Decision::Skipped { action, reason, .. } if *action == which => {
                    Some(reason.clone())
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("{which} not skipped: {d:?}"))
    }

    #[test]
    fn kubelet_restart_waits_for_the_runtime() {
        let c = without_runtime_restarts();
        let d = c.decide(&[DockerUnresponsive, KubeletPlegUnhealthy]);
        assert!(
            skipped_reason(&d, ActionKind::RestartKubelet).contains("docker-unresponsive"),
            "{d:?}"
        );
    }

    #[test]
    fn kubelet_restart_waits_for_containerd_too() {
        let c = without_runtime_restarts();
        let d = c.decide(&[ContainerdUnresponsive, KubeletPlegUnhealthy]);
        assert!(
            skipped_reason(&d, ActionKind::RestartKubelet).contains("containerd-unresponsive"),
            "{d:?}"
        );
        // unknown containers alone: no action aims at them (report only), none is blocked
        assert!(c.decide(&[CriUnknownContainers]).is_empty());
        assert_eq!(
            c.decide(&[CriUnknownContainers, KubeletPlegUnhealthy]),
            vec![act(ActionKind::RestartKubelet, &[KubeletPlegUnhealthy])]
        );
    }

    #[test]
    fn suppressed_lower_tier_lets_the_next_tier_have_its_turn() {
        let mut c = Case::new();
        c.ledger.record_start(
            ActionKind::PurgeDeadContainers,
            &Now::wall_only(t(0) - Duration::from_secs(10)),
        );
        let d = c.decide(&[DeadContainers, KubeletPlegUnhealthy]);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            matches!(&d[0], Decision::Suppressed { action: ActionKind::PurgeDeadContainers, next_allowed_at, .. } if *next_allowed_at == t(290))
        );
        assert_eq!(
            d[1],
            act(ActionKind::RestartKubelet, &[KubeletPlegUnhealthy])
        );
    }

    #[test]
    fn spent_budget_is_suppressed_not_looped() {
        let mut c = Case::new();
        for h in [3, 2, 1] {
            c.ledger.record_start(
                ActionKind::DaemonReexec,
                &Now::wall_only(t(0) - Duration::from_secs(h * 3600 + 1)),
            );
        }
        let d = c.decide(&[LogindUnresponsive]);
        assert!(
            matches!(
                &d[..],
                [Decision::Suppressed {
                    action: ActionKind::DaemonReexec,
                    ..
                }]
            ),
            "{d:?}"
        );
    }

    #[test]
    fn disabled_is_skipped_and_next_tier_considered() {
        let mut c = Case::new();
        c.config.actions.purge_dead_containers.enabled = false;
        let d = c.decide(&[DeadContainers, KubeletPlegUnhealthy]);
        assert!(matches!(&d[0], Decision::Skipped { reason, .. } if reason.contains("disabled")));
        assert_eq!(
            d[1],
            act(ActionKind::RestartKubelet, &[KubeletPlegUnhealthy])
        );
    }

    #[test]
    fn observe_mode_says_what_it_would_do_and_acts_on_nothing() {
        let mut c = Case::new();
        c.config.mode = Mode::Observe;
        let d = c.decide(&[DeadContainers, SystemdBusWedge]);
        assert!(
            matches!(&d[..], [Decision::Skipped { action: ActionKind::PurgeDeadContainers, reason, .. }] if reason.contains("observe")),
            "{d:?}"
        );
        assert!(!d.iter().any(|d| matches!(d, Decision::Act { .. })));
    }

    #[test]
    fn a_hung_runtime_is_restarted_before_kubelet_and_after_the_reexec() {
        let c = Case::new();
        assert_eq!(
            c.decide(&[ContainerdUnresponsive, KubeletPlegUnhealthy]),
            vec![act(
                ActionKind::RestartContainerd,
                &[ContainerdUnresponsive]
            )]
        );
        assert_eq!(
            c.decide(&[DockerUnresponsive]),
            vec![act(ActionKind::RestartDocker, &[DockerUnresponsive])]
        );
        // containerd first: dockerd stands on it
        assert_eq!(
            c.decide(&[DockerUnresponsive, ContainerdUnresponsive]),
            vec![act(
                ActionKind::RestartContainerd,
                &[ContainerdUnresponsive]
            )]
        );
        // the seed's chain: the wedge is the reexec's, the runtime is not restarted for it
        assert_eq!(
            c.decide(&[
                SystemdBusWedge,
                ContainerdUnresponsive,
                KubeletPlegUnhealthy
            ]),
            vec![act(ActionKind::DaemonReexec, &[SystemdBusWedge])]
        );
    }

    #[test]
    fn no_runtime_restart_while_pid1_or_the_bus_is_broken() {
        let mut c = Case::new();
        // the reexec's budget spent: the runtime still waits for it, whatever else stands
        for h in [3, 2, 1] {
            c.ledger.record_start(
                ActionKind::DaemonReexec,
                &Now::wall_only(t(0) - Duration::from_secs(h * 3600 + 1)),
            );
        }
        for broken in [
            SystemdBusWedge,
            LogindUnresponsive,
            BusUnresponsive,
            SystemdUnresponsive,
        ] {
            let d = c.decide(&[broken, ContainerdUnresponsive, DockerUnresponsive]);
            assert!(
                !d.iter().any(|d| matches!(d, Decision::Act { .. })),
                "{d:?}"
            );
            for runtime in [ActionKind::RestartContainerd, ActionKind::RestartDocker] {
                let why = skipped_reason(&d, runtime);
                assert!(why.contains(broken.name()), "{why}");
            }
        }
    }

    fn kubelet(state: UnitState, watchdog: Option<u64>) -> Option<KubeletFacts> {
        Some(KubeletFacts {
            unit: UnitFacts {
                unit: "kubelet.service".into(),
                state,
            },
            watchdog: watchdog.map(Duration::from_secs),
        })
    }

    /// kubelet >= 1.35 under `WatchdogSec=`: systemd restarts a kubelet whose /healthz fails;
    /// pleg-guard's restart must not be a second one on top.
    #[test]
    fn kubelet_with_its_own_watchdog_is_left_to_systemd_first() {
        let mut c = Case::new();
        let pleg = [KubeletPlegUnhealthy];
        let restart = vec![act(ActionKind::RestartKubelet, &pleg)];
        // no watchdog: up a second or an hour, restarted as before
        for up in [1, 3600] {
            c.runtime.kubelet = kubelet(UnitState::ActiveFor(Duration::from_secs(up)), None);
            assert_eq!(c.decide(&pleg), restart);
        }
        // watchdog armed at 20 s: restarted by systemd 10 s ago, left alone for 2 x 20 s
        c.runtime.kubelet = kubelet(UnitState::ActiveFor(Duration::from_secs(10)), Some(20));
        let why = skipped_reason(&c.decide(&pleg), ActionKind::RestartKubelet);
        assert!(
            why.contains("WatchdogSec=20s") && why.contains("less than 40s ago"),
            "{why}"
        );
        c.runtime.kubelet = kubelet(UnitState::ActiveFor(Duration::from_secs(39)), Some(20));
        assert_eq!(
            skipped_reason(&c.decide(&pleg), ActionKind::RestartKubelet),
            why,
            "the words do not change while it waits"
        );
        // up 2 watchdog periods with PLEG still unhealthy: the watchdog did not cure it
        c.runtime.kubelet = kubelet(UnitState::ActiveFor(Duration::from_secs(40)), Some(20));
        assert_eq!(c.decide(&pleg), restart);
        // systemd restarting it (the watchdog fired): never a second restart
        for watchdog in [Some(20), None] {
            c.runtime.kubelet = kubelet(UnitState::NotActive("activating".into()), watchdog);
            let why = skipped_reason(&c.decide(&pleg), ActionKind::RestartKubelet);
            assert!(why.contains("kubelet.service is activating"), "{why}");
        }
        c.runtime.kubelet = kubelet(UnitState::Unknown("no answer within 5s".into()), Some(20));
        let why = skipped_reason(&c.decide(&pleg), ActionKind::RestartKubelet);
        assert!(why.contains("no answer"), "{why}");
        // not read (a container-run kubelet): as before
        c.runtime.kubelet = None;
        assert_eq!(c.decide(&pleg), restart);
    }

    #[test]
    fn a_runtime_still_starting_or_being_restarted_is_left_alone() {
        let mut c = Case::new();
        c.runtime.containerd = Some(UnitFacts {
            unit: "containerd.service".into(),
            state: UnitState::ActiveFor(Duration::from_secs(59)),
        });
        let d = c.decide(&[ContainerdUnresponsive]);
        let why = skipped_reason(&d, ActionKind::RestartContainerd);
        assert!(why.contains("startup_grace (1m)"), "{why}");
        // exactly the grace: up long enough
        c.runtime.containerd = Some(UnitFacts {
            unit: "containerd.service".into(),
            state: UnitState::ActiveFor(Duration::from_secs(60)),
        });
        assert_eq!(
            c.decide(&[ContainerdUnresponsive]),
            vec![act(
                ActionKind::RestartContainerd,
                &[ContainerdUnresponsive]
            )]
        );
        for (state, word) in [
            (UnitState::NotActive("activating".into()), "activating"),
            (UnitState::NotActive("deactivating".into()), "deactivating"),
            (
                UnitState::Unknown("no answer within 5s".into()),
                "no answer",
            ),
        ] {
            c.runtime.containerd = Some(UnitFacts {
                unit: "containerd.service".into(),
                state,
            });
            let d = c.decide(&[ContainerdUnresponsive]);
            let why = skipped_reason(&d, ActionKind::RestartContainerd);
            assert!(
                why.contains(word) && why.contains("containerd.service"),
                "{why}"
            );
        }
        // not read at all: never acts on a guess
        c.runtime.containerd = None;
        let d = c.decide(&[ContainerdUnresponsive]);
        assert!(
            !d.iter().any(|d| matches!(d, Decision::Act { .. })),
            "{d:?}"
        );
    }

    #[test]
    fn dockerd_is_restarted_only_with_live_restore_unless_told() {
        let mut c = Case::new();
        c.runtime.docker_live_restore = Some(LiveRestore::Off(
            "/etc/docker/daemon.json has no \"live-restore\"".into(),
        ));
        let d = c.decide(&[DockerUnresponsive, KubeletPlegUnhealthy]);
        let why = skipped_reason(&d, ActionKind::RestartDocker);
        assert!(
            why.contains("live-restore is off") && why.contains("kill every container"),
            "{why}"
        );
        // ... and kubelet still waits for the runtime
        assert!(skipped_reason(&d, ActionKind::RestartKubelet).contains("docker-unresponsive"));
        c.runtime.docker_live_restore = Some(LiveRestore::Unknown("not JSON".into()));
        let d = c.decide(&[DockerUnresponsive]);
        assert!(skipped_reason(&d, ActionKind::RestartDocker).contains("unknown"));
        // the operator said so explicitly
        c.config.actions.restart_docker_require_live_restore = false;
        assert_eq!(
            c.decide(&[DockerUnresponsive]),
            vec![act(ActionKind::RestartDocker, &[DockerUnresponsive])]
        );
    }

    #[test]
    fn runtime_restarts_keep_their_own_budget_and_observe_mode() {
        let mut c = Case::new();
        c.ledger
            .record_start(ActionKind::RestartContainerd, &Now::wall_only(t(0)));
        let d = c.decide(&[ContainerdUnresponsive, KubeletPlegUnhealthy]);
        assert!(
            matches!(&d[0], Decision::Suppressed { action: ActionKind::RestartContainerd, next_allowed_at, .. } if *next_allowed_at == t(1800)),
            "{d:?}"
        );
        // a restart that did not help is not followed by kubelet's while the runtime hangs
        assert!(skipped_reason(&d, ActionKind::RestartKubelet).contains("containerd-unresponsive"));
        let mut c = Case::new();
        c.config.mode = Mode::Observe;
        let d = c.decide(&[ContainerdUnresponsive]);
        assert!(skipped_reason(&d, ActionKind::RestartContainerd).contains("observe"));
    }
}
