//! The daemon: a probe round every `interval`, diagnosis, the ladder, one action at a time,
//! the settle check, and the reports — wired together, with signals and the watchdog.
//!
//! ```text
//!            ┌──────── round (bounded by probe.timeout) ────────┐
//!  tick ──▶  probe ─▶ diagnosis ─▶ settle check ─▶ ladder ─▶ act? ─▶ status.json, STATUS=
//!              │                                             │
//!        SystemdWatch (verdict, evidence,        ActionRunner (ledger before act; the action
//!        serial forecast)                        runs as a task; its end is another event)
//! ```
//!
//! This file is the loop and the wiring; [`runner`] owns the ledger and an action's life,
//! [`systemd_watch`] what is known of systemd, [`crate::assessment`] the status line and
//! the snapshot. The loop also wakes for the watchdog (`WATCHDOG=1` only from here, so a stuck
//! loop is killed by systemd), SIGHUP (reload) and SIGTERM/SIGINT (stop at once, abandoning
//! any call in flight; the ledger already holds a started action).

pub mod fleet_gate;
mod runner;
mod runtime_facts;
pub mod systemd_watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jiff::tz::TimeZone;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, MissedTickBehavior};

use crate::action::{ActionContext, ActionReport, RealExecutor};
use crate::assessment::{self, Assessment};
use crate::config::{self, Config, Mode};
use crate::diagnosis::{Diagnosis, FindingId, Severity, Transition};
use crate::ladder::{self, Decision};
use crate::probe::reask::{Reask, Reasked};
use crate::probe::{self, Prober};
use crate::report::event::EventKind;
use crate::report::journal::{Event, emit};
use crate::report::notify;
use crate::report::status_file::{self, Snapshot};
use crate::target::{ActionKind, Round};

use crate::daemon::systemd_watch::{LocalTime, SystemdWatch};
use crate::systemd::preempt::Wait;
use fleet_gate::{FleetGate, Gate};
use runner::{ActionRunner, join};

/// How many past action runs status.json lists.
const RECENT_ACTIONS: usize = 10;

/// The daemon's state between rounds.
pub struct Daemon {
    config: Config,
    config_path: Option<PathBuf>,
    dry_run: bool,
    prober: Prober,
    /// Failed targets asked again off the round ([`crate::probe::reask`]).
    reask: Reask<Prober>,
    diagnosis: Diagnosis,
    runner: ActionRunner,
    systemd: SystemdWatch,
    started: Instant,
    package_version: Option<String>,
    /// The serial forecast asks for a planned reexec now.
    preempt_due: bool,
    /// ... or would, but it waits for `preempt_window`.
    preempt_waits: Option<Wait>,
    /// The opening of `preempt_window` whose wait was last logged.
    wait_logged: Option<SystemTime>,
    /// The node's time zone, for `preempt_window`.
    tz: TimeZone,
    last_round: Option<Round>,
    /// The last decision text, for the status line.
    next_step: Option<String>,
    /// Prometheus metrics: the textfile and the `/metrics` endpoint.
    metrics: crate::metrics::Exporter,
    /// The fleet budget (None: `[fleet]` not configured, or its files unusable).
    fleet: Option<FleetGate>,
    /// What PID 1 and dockerd's configuration say of a hung runtime (read while one hangs).
    runtime: crate::ladder::RuntimeFacts,
}

impl Daemon {
    /// Set up from a loaded configuration; reads the ledger and this boot's bus-bug proof
    /// (logging a problem with either).
    pub fn new(config: Config, config_path: Option<PathBuf>, dry_run: bool) -> Self {
        Daemon {
            prober: daemon_prober(&config),
            reask: Reask::for_config(&config),
            diagnosis: Diagnosis::new(config.probe.unhealthy_after.get()),
            runner: ActionRunner::open(&config.state_directory, Arc::new(RealExecutor)),
            systemd: SystemdWatch::new(&config.state_directory),
            started: Instant::now(),
            package_version: None,
            preempt_due: false,
            preempt_waits: None,
            wait_logged: None,
            tz: local_time_zone(&config),
            last_round: None,
            next_step: None,
            metrics: crate::metrics::Exporter::default(),
            fleet: None,
            runtime: crate::ladder::RuntimeFacts::default(),
            config,
            config_path,
            dry_run,
        }
    }

    fn mode(&self) -> Mode {
        if self.dry_run {
            Mode::Observe
        } else {
            self.config.mode
        }
    }

    /// Run until SIGTERM/SIGINT. `Ok` on a clean stop.
    pub async fn run(mut self) -> anyhow::Result<()> {
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sighup = signal(SignalKind::hangup())?;

        if let Err(e) = std::fs::create_dir_all(&self.config.runtime_directory) {
            tracing::warn!(
                "cannot create {}: {e}; status.json will not be written",
                self.config.runtime_directory.display()
            );
        }
        tracing::info!(
            mode = %self.mode(),
            interval = %humantime::format_duration(self.config.interval),
            "pleg-guard {} starting",
            env!("CARGO_PKG_VERSION")
        );
        // The startup grace counts from the line that says so, not from `new`: since the
        // ladder is asked the moment the grace ends, the time `new` took (the ledger, the
        // proof file) would otherwise let an action in before `startup_grace` had passed
        // since "starting" (CI saw 7.983 s of an 8 s grace).
        self.started = Instant::now();

        match FleetGate::start(&self.config) {
            None => {}
            Some(Ok(gate)) => self.fleet = Some(gate),
            Some(Err(e)) => tracing::error!(
                "[fleet] cannot be used ({e}): actions that need a fleet slot will not run; fix the configuration and reload"
            ),
        }

        // The first round, then READY=1 (systemctl start returns once we have looked). The
        // package database is asked alongside: it is the slowest part of starting.
        let timeout = self.config.probe.timeout;
        let started = Instant::now();
        tokio::select! {
            (round, package) = async {
                tokio::join!(self.prober.round(), probe::systemd::package_version(timeout))
            } => {
                self.package_version = package;
                self.after_calls(Reasked { round, started }).await
            }
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
        }
        notify::ready(&self.status_line());

        let mut ticker = tokio::time::interval_at(
            crate::clock::deadline_in(self.config.interval),
            self.config.interval,
        );
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let watchdog = notify::watchdog_period().map(|p| p / 3);
        if let Some(period) = notify::watchdog_period() {
            // A round blocks the loop for up to probe.timeout; past half the watchdog period a
            // merely hung probe could get a turning loop killed.
            if self.config.probe.timeout.saturating_mul(2) >= period {
                tracing::warn!(
                    "probe.timeout ({}) is not well below the unit's WatchdogSec ({}): hung probes may trip the watchdog",
                    humantime::format_duration(self.config.probe.timeout),
                    humantime::format_duration(period)
                );
            }
        }
        let mut watchdog_ticker =
            tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
        // The ladder is asked again the moment the startup grace ends, not a round later: a
        // runtime hang seen during the grace leaves kubelet only ~30 s before the Node goes
        // NotReady ("container runtime is down"), and a round is 10 s of that.
        let mut grace_over = self.config.startup_grace.is_zero();

        loop {
            let grace_end = self.started + self.config.startup_grace;
            // Biased: after a round that took a whole tick, the round ticker and the watchdog
            // ticker are both ready; a random pick let the ticker win several times in a row
            // while probes hung, and systemd killed a loop that was turning.
            tokio::select! {
                biased;
                _ = sigterm.recv() => break,
                _ = sigint.recv() => break,
                _ = sighup.recv() => {
                    if let Some(new_interval) = self.reload() {
                        ticker = tokio::time::interval_at(crate::clock::deadline_in(new_interval), new_interval);
                        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    }
                }
                _ = watchdog_ticker.tick(), if watchdog.is_some() => notify::watchdog(),
                () = tokio::time::sleep_until(grace_end), if !grace_over => {
                    grace_over = true;
                    if !self.diagnosis.findings().is_empty() {
                        self.climb_ladder();
                        self.publish();
                    }
                }
                report = self.runner.next_report(), if self.runner.running() => {
                    self.action_done(report).await;
                }
                reasked = self.reask.next(), if self.reask.running() => self.after_calls(reasked).await,
                () = fleet_changed(&mut self.fleet) => self.fleet_changed(),
                _ = ticker.tick() => {
                    let started = Instant::now();
                    let reask = &self.reask;
                    tokio::select! {
                        round = self.prober.round_of(|t| !reask.holds(t)) => {
                            self.after_calls(Reasked { round, started }).await
                        }
                        _ = sigterm.recv() => break,
                        _ = sigint.recv() => break,
                    }
                }
            }
        }
        notify::stopping();
        tracing::info!("pleg-guard stopping");
        if let Some(gate) = self.fleet.take() {
            gate.shutdown().await;
        }
        Ok(())
    }

    /// Re-read the configuration. A bad one is logged and the old one kept. Returns the new
    /// interval when it changed.
    fn reload(&mut self) -> Option<Duration> {
        notify::reloading();
        let changed = match config::load(self.config_path.as_deref()) {
            Err(e) => {
                tracing::error!("reload: configuration not used, keeping the running one: {e}");
                None
            }
            Ok(loaded) => {
                for w in &loaded.warnings {
                    tracing::warn!("reload: configuration: {w}");
                }
                let new = loaded.config;
                let interval_changed =
                    (new.interval != self.config.interval).then_some(new.interval);
                if new.state_directory != self.config.state_directory {
                    self.runner.move_to(&new.state_directory);
                    self.systemd.move_to(&new.state_directory);
                }
                self.prober = daemon_prober(&new);
                self.reask = Reask::for_config(&new);
                self.diagnosis
                    .set_unhealthy_after(new.probe.unhealthy_after.get());
                self.tz = local_time_zone(&new);
                self.config = new;
                tracing::info!(mode = %self.mode(), "reload: new configuration takes effect at the next round");
                interval_changed
            }
        };
        notify::ready(&self.status_line());
        changed
    }

    /// A round's (or a re-ask's) observations counted, then the re-ask of what failed.
    async fn after_calls(&mut self, calls: Reasked) {
        let Reasked { round, started } = calls;
        let asked = round.clone();
        self.after_round(round).await;
        let diagnosis = &self.diagnosis;
        self.reask
            .follow_up(&asked, started, |t| diagnosis.failures(t));
    }

    /// Everything that follows a probe round (or a re-ask: a round of a few targets).
    async fn after_round(&mut self, round: Round) {
        let now = SystemTime::now();
        let outlook = self.systemd.observe(
            &round,
            self.started.elapsed(),
            self.package_version.as_deref(),
            &self.config,
            LocalTime { now, tz: &self.tz },
        );
        self.preempt_due = outlook.preempt_due;
        self.preempt_waits = outlook.preempt_waits;
        self.diagnosis.set_serial_exhaustion(outlook.exhaustion);
        let (transitions, new_findings) =
            self.diagnosis.update(&round, self.systemd.verdict(), now);
        if crate::diagnosis::runtime_recovered(&transitions) {
            // kubelet's PLEG lines from the outage are not evidence against kubelet now
            self.prober.ignore_kubelet_logs_before(now);
        }
        for t in transitions {
            self.log_transition(&round, t);
        }
        for f in &new_findings {
            let message = format!("{}: {}. Seen: {}", f.id, f.id.explanation(), f.detail);
            emit(&Event {
                kind: EventKind::Finding,
                target: Some(f.target),
                action: None,
                finding: Some(f.id),
                message: &message,
            });
        }
        self.systemd.remember_wedge(self.diagnosis.findings());
        self.last_round = Some(Round::merged(self.last_round.as_ref(), &round));
        let diagnosis = &self.diagnosis;
        let settled = self.runner.check_settled(|id| diagnosis.has(id));
        if let (Some(s), Some(gate)) = (settled, self.fleet.as_mut()) {
            gate.settled(s.action, s.cured);
        }
        if !self.runner.busy() {
            let ids: Vec<FindingId> = self.diagnosis.findings().iter().map(|f| f.id).collect();
            self.runtime = runtime_facts::read(&ids, &self.config).await;
        }
        self.climb_ladder();
        self.publish();
    }

    /// One journal entry for a target's change of health.
    fn log_transition(&self, round: &Round, t: Transition) {
        let (kind, target) = match t {
            Transition::Unhealthy(t) => (EventKind::TargetUnhealthy, t),
            Transition::Recovered(t) => (EventKind::TargetRecovered, t),
        };
        let detail = round
            .get(target)
            .map(|o| format!("{} ({})", o.state, o.detail))
            .unwrap_or_default();
        let message = match kind {
            EventKind::TargetUnhealthy => format!(
                "{target} unhealthy after {} failed calls in a row{}: {detail}",
                self.config.probe.unhealthy_after,
                self.diagnosis
                    .failing_since(target)
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .map_or(String::new(), |d| format!(
                        ", {:.1} s since the first one started",
                        d.as_secs_f64()
                    ))
            ),
            _ => format!("{target} recovered: {detail}"),
        };
        emit(&Event {
            kind,
            target: Some(target),
            action: None,
            finding: None,
            message: &message,
        });
    }

    /// Ask the ladder, log what it holds back, start what it chooses.
    fn climb_ladder(&mut self) {
        let findings: Vec<FindingId> = self.diagnosis.findings().iter().map(|f| f.id).collect();
        let in_grace = self.started.elapsed() < self.config.startup_grace;
        let decisions = ladder::decide(&ladder::Context {
            now: crate::clock::boot::Now::read(),
            mode: self.mode(),
            in_startup_grace: in_grace,
            busy: self.runner.busy(),
            findings: &findings,
            systemd_affected: self.systemd.status().affected,
            serial_preempt_due: self.preempt_due,
            serial_preempt_waits: self.preempt_waits.as_ref().map(|w| w.words.as_str()),
            actions: &self.config.actions,
            ledger: self.runner.ledger(),
            runtime: &self.runtime,
        });
        self.runner.forget_notes(&findings);
        self.next_step = (in_grace && findings.iter().any(|f| f.severity() == Severity::Problem))
            .then(|| "no action during startup grace".to_owned());

        if let Some(gate) = self.fleet.as_mut() {
            gate.set_findings(acted_on(&decisions, &self.config.actions));
        }
        let wanted: Vec<ActionKind> = decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Act { action, .. } => Some(*action),
                _ => None,
            })
            .collect();
        let mut waiting_for_window: Vec<(ActionKind, String)> = Vec::new();
        for d in decisions {
            match d {
                Decision::Act { action, aimed_at } => {
                    let why = self.systemd.planned_because(&aimed_at, &self.config);
                    if let Some(gate) = self
                        .fleet
                        .as_mut()
                        .filter(|_| self.config.actions.of(action).fleet)
                    {
                        let urgency = fleet_gate::urgency_of(
                            action,
                            aimed_at.contains(&FindingId::SystemdSerialExhaustion),
                        );
                        let causes: Vec<String> =
                            aimed_at.iter().map(|f| f.name().to_owned()).collect();
                        if let Gate::Wait(reason) =
                            gate.admit(action, urgency, self.systemd.serial_eta(), &causes)
                        {
                            self.next_step = Some(format!("{action}: {reason}"));
                            continue;
                        }
                    }
                    // A failure to start is logged by the runner (no ledger, no action).
                    let _ =
                        self.runner
                            .start(action, aimed_at, &why, ActionContext::of(&self.config));
                }
                Decision::Suppressed {
                    action,
                    aimed_at,
                    next_allowed_at,
                } => {
                    let when = crate::clock::time_format::rfc3339(next_allowed_at);
                    let message = format!(
                        "{action} held back by its rate limit (for {}); next run allowed at {when}",
                        join(&aimed_at)
                    );
                    self.next_step = Some(format!("{action} suppressed until {when}"));
                    self.runner
                        .note(EventKind::ActionSuppressed, action, &aimed_at, message);
                }
                Decision::Waits {
                    action,
                    aimed_at,
                    reason,
                } => {
                    self.next_step = Some(format!("{action}: {reason}"));
                    waiting_for_window.push((action, reason.clone()));
                    let opens = self.preempt_waits.as_ref().map(|w| w.opens);
                    if opens.is_some() && opens != self.wait_logged {
                        self.wait_logged = opens;
                        tracing::info!(
                            "{action} for {}: {reason}; the window opens at {}{}",
                            join(&aimed_at),
                            opens.map_or_else(String::new, crate::clock::time_format::rfc3339),
                            self.systemd.planned_because(&aimed_at, &self.config)
                        );
                    }
                }
                Decision::Skipped {
                    action,
                    aimed_at,
                    reason,
                } => {
                    let message = format!(
                        "{action} not run (for {}): {reason}{}",
                        join(&aimed_at),
                        self.systemd.planned_because(&aimed_at, &self.config)
                    );
                    self.next_step = Some(format!("{action} skipped: {reason}"));
                    self.runner
                        .note(EventKind::ActionSkipped, action, &aimed_at, message);
                }
            }
        }
        let busy = self.runner.busy();
        if let Some(gate) = self.fleet.as_mut() {
            gate.after(busy, &wanted, &waiting_for_window);
        }
    }

    /// The fleet's state or view changed: a waiting action may go now; status shows it.
    fn fleet_changed(&mut self) {
        let waiting = self.fleet.as_mut().is_some_and(|g| {
            g.observe();
            g.waiting()
        });
        if waiting {
            self.climb_ladder();
        }
        self.publish();
    }

    /// The running action ended.
    async fn action_done(&mut self, report: ActionReport) {
        let Some(kind) = self.runner.running_action() else {
            return;
        };
        let settle = self.config.actions.of(kind).settle;
        let finished = self.runner.finish(report, settle);
        let busy = self.runner.busy();
        if let Some(gate) = self.fleet.as_mut() {
            // a failed action does not settle: its slot goes back now
            gate.after(busy, &[], &[]);
        }
        if let Some(f) = finished.filter(|f| f.succeeded) {
            match f.action {
                ActionKind::RestartKubelet => {
                    self.prober.ignore_kubelet_logs_before(SystemTime::now())
                }
                ActionKind::DaemonReexec => {
                    self.package_version = self.prober.package_version().await
                }
                ActionKind::RestartContainerd | ActionKind::RestartDocker => {
                    // the runtime's errors in kubelet's log from the hang are not evidence
                    // against kubelet now
                    self.prober.ignore_kubelet_logs_before(SystemTime::now())
                }
                ActionKind::PurgeDeadContainers => {}
            }
        }
        self.publish();
    }

    /// The assessment of the current state.
    fn assessment(&self) -> Assessment<'_> {
        Assessment {
            mode: self.mode(),
            round: self.last_round.as_ref(),
            findings: self.diagnosis.findings(),
            degraded: self.diagnosis.degraded(),
            systemd: self.systemd.status(),
            activity: self.runner.activity(),
            next_step: self.next_step.as_deref(),
        }
    }

    /// The `STATUS=` line.
    fn status_line(&self) -> String {
        self.assessment().status_line()
    }

    /// Write status.json and the STATUS= line.
    fn publish(&self) {
        let assessment = self.assessment();
        notify::status(&assessment.status_line());
        let snapshot = self.snapshot(&assessment);
        if let Err(e) = status_file::write(&self.config.runtime_directory, &snapshot) {
            tracing::debug!("status.json: {e}");
        }
        let totals = self.runner.ledger().totals();
        self.metrics
            .publish(&self.config.metrics, &snapshot, &totals);
    }

    fn snapshot(&self, assessment: &Assessment<'_>) -> Snapshot {
        let now = crate::clock::boot::Now::read();
        assessment.snapshot(assessment::Context {
            pid: Some(std::process::id()),
            interval: self.config.interval,
            at: Some(now.wall),
            actions: self.runner.recent(RECENT_ACTIONS),
            budget: self.runner.budgets(&self.config.actions, &now),
            fleet: self.fleet.as_ref().map(FleetGate::status),
        })
    }
}

/// The findings this node acts on, for its member key (the storm guard of the group counts
/// them): those a disruptive repair (one that needs a fleet slot) is aimed at, whether it
/// runs, waits or is held back by its rate limit.
fn acted_on(decisions: &[Decision], actions: &crate::config::ActionsConfig) -> Vec<String> {
    let mut out: Vec<String> = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Act { action, aimed_at }
            | Decision::Suppressed {
                action, aimed_at, ..
            }
            | Decision::Waits {
                action, aimed_at, ..
            } if actions.of(*action).fleet => Some(aimed_at),
            _ => None,
        })
        .flatten()
        .map(|f| f.name().to_owned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Resolves when the fleet changed; never without a fleet.
async fn fleet_changed(fleet: &mut Option<FleetGate>) {
    match fleet {
        Some(gate) => gate.changed().await,
        None => std::future::pending().await,
    }
}

/// The node's time zone for `preempt_window`: `TZ`, else `/etc/localtime`; UTC when it cannot
/// be read (with a warning). Without a window nothing reads local time, so the zone (its
/// rules, and jiff's look-up of its name in /usr/share/zoneinfo) is not loaded at all.
pub(crate) fn local_time_zone(config: &Config) -> TimeZone {
    let Some(window) = config.actions.daemon_reexec_preempt.window else {
        return TimeZone::UTC;
    };
    TimeZone::try_system().unwrap_or_else(|e| {
        tracing::warn!(
            "the local time zone cannot be read ({e}): preempt_window {window} is taken as UTC"
        );
        TimeZone::UTC
    })
}

/// The daemon's probes: like `diagnose`'s, but following kubelet's journal continuously.
fn daemon_prober(config: &Config) -> Prober {
    let mut p = Prober::new(config);
    p.follow_kubelet_journal();
    p
}
