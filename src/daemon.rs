//! The daemon: a probe round every `interval`, diagnosis, the ladder, one action at a time,
//! the settle check, and the reports — wired together, with signals and the watchdog.
//!
//! ```text
//!            ┌──────── round (bounded by probe.timeout) ────────┐
//!  tick ──▶  probe ─▶ diagnosis ─▶ settle check ─▶ ladder ─▶ act? ─▶ status.json, STATUS=
//!                                                            │
//!                       ledger (saved before and after) ◀────┘ action runs as a task;
//!                                                              its end is another event
//! ```
//!
//! The loop also wakes for the watchdog (`WATCHDOG=1` only from here, so a stuck loop is
//! killed by systemd), SIGHUP (reload) and SIGTERM/SIGINT (stop at once, abandoning any call
//! in flight; the ledger already holds a started action).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::action::{self, ActionKind, ActionReport};
use crate::bug_evidence::{self, ProofFile, WedgeProof};
use crate::config::{self, Config, Mode};
use crate::diagnosis::{Diagnosis, FindingId, Transition};
use crate::forecast::{self, Change, Outlook, Sample, SerialTracker, Thresholds, Windows};
use crate::ladder::{self, Decision};
use crate::ledger::{self, Ledger, LedgerFile, RunOutcome, Symptom};
use crate::probe::{self, Prober, Round};
use crate::report::event::EventKind;
use crate::report::journal::{Event, emit};
use crate::report::notify;
use crate::report::status_file::{
    self, ActionRecord, BudgetStatus, Overall, Snapshot, SystemdStatus,
};
use crate::systemd_version::{self, Verdict};
use crate::target::Target;

/// How many past action runs status.json lists.
const RECENT_ACTIONS: usize = 10;

/// An action running as a task.
struct InFlight {
    id: u64,
    action: ActionKind,
    aimed_at: Vec<FindingId>,
    handle: JoinHandle<ActionReport>,
}

/// An action that ended well, waiting for its settle time.
struct Settling {
    id: u64,
    action: ActionKind,
    aimed_at: Vec<FindingId>,
    until: Instant,
}

/// The daemon's state between rounds.
pub struct Daemon {
    config: Config,
    config_path: Option<PathBuf>,
    dry_run: bool,
    prober: Prober,
    diagnosis: Diagnosis,
    ledger: Ledger,
    ledger_file: LedgerFile,
    started: Instant,
    package_version: Option<String>,
    systemd: SystemdStatus,
    /// PID 1's bus serials over time: the exhaustion forecast.
    serials: SerialTracker,
    verdict: Option<Verdict>,
    /// Where this boot's proof that the build is affected is kept.
    proof_file: ProofFile,
    /// This boot's id (None: /proc does not tell; the proof then lives in memory only).
    boot_id: Option<String>,
    /// A `systemd-bus-wedge` seen on this boot (see [`crate::bug_evidence`]).
    proof: Option<WedgeProof>,
    /// The serial forecast asks for a planned reexec now.
    preempt_due: bool,
    last_round: Option<Round>,
    in_flight: Option<InFlight>,
    settling: Option<Settling>,
    /// The last suppressed/skipped note logged per action, so each is logged once.
    notes: HashMap<ActionKind, String>,
    /// The last decision text, for the status line.
    next_step: Option<String>,
}

impl Daemon {
    /// Set up from a loaded configuration; reads the ledger (logging a problem with it).
    pub fn new(config: Config, config_path: Option<PathBuf>, dry_run: bool) -> Self {
        let ledger_file = LedgerFile::new(&config.state_directory);
        let loaded = ledger_file.load(SystemTime::now());
        if let Some(problem) = &loaded.problem {
            tracing::error!("action ledger: {problem}");
        }
        let boot_id = bug_evidence::boot_id();
        let proof_file = ProofFile::new(&config.state_directory);
        let proof = load_proof(&proof_file, boot_id.as_deref());
        Daemon {
            prober: daemon_prober(&config),
            diagnosis: Diagnosis::new(config.probe.unhealthy_after.get()),
            ledger: loaded.ledger,
            ledger_file,
            started: Instant::now(),
            package_version: None,
            systemd: SystemdStatus::default(),
            serials: SerialTracker::new(Windows::default()),
            verdict: None,
            proof_file,
            boot_id,
            proof,
            preempt_due: false,
            last_round: None,
            in_flight: None,
            settling: None,
            notes: HashMap::new(),
            next_step: None,
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

        // The first round, then READY=1 (systemctl start returns once we have looked). The
        // package database is asked alongside: it is the slowest part of starting.
        let timeout = self.config.probe.timeout;
        tokio::select! {
            (round, package) = async {
                tokio::join!(self.prober.round(), probe::systemd::package_version(timeout))
            } => {
                self.package_version = package;
                self.after_round(round).await
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

        loop {
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
                report = async {
                    match self.in_flight.as_mut() {
                        Some(f) => (&mut f.handle).await,
                        None => std::future::pending().await,
                    }
                }, if self.in_flight.is_some() => {
                    let report = report.unwrap_or_else(|e| ActionReport::failed(format!("action task ended abnormally: {e}")));
                    self.action_done(report).await;
                }
                _ = ticker.tick() => {
                    tokio::select! {
                        round = self.prober.round() => self.after_round(round).await,
                        _ = sigterm.recv() => break,
                        _ = sigint.recv() => break,
                    }
                }
            }
        }
        notify::stopping();
        tracing::info!("pleg-guard stopping");
        Ok(())
    }

    /// Re-read the configuration. A bad one is logged and the old one kept. Returns the new
    /// interval when it changed.
    fn reload(&mut self) -> Option<Duration> {
        notify::reloading();
        let result = config::load(self.config_path.as_deref());
        let changed = match result {
            Err(e) => {
                tracing::error!("reload: configuration not used, keeping the running one: {e}");
                None
            }
            Ok(loaded) => {
                let new = loaded.config;
                let interval_changed =
                    (new.interval != self.config.interval).then_some(new.interval);
                if new.state_directory != self.config.state_directory {
                    self.move_ledger(&new.state_directory);
                    self.proof_file = ProofFile::new(&new.state_directory);
                    if let Some(p) = load_proof(&self.proof_file, self.boot_id.as_deref()) {
                        self.proof = Some(p);
                    }
                }
                self.prober = daemon_prober(&new);
                self.diagnosis
                    .set_unhealthy_after(new.probe.unhealthy_after.get());
                self.config = new;
                tracing::info!(mode = %self.mode(), "reload: new configuration takes effect at the next round");
                interval_changed
            }
        };
        notify::ready(&self.status_line());
        changed
    }

    /// Move the ledger to `dir` (a reload changed `state_directory`): the runs recorded so
    /// far come along, merged with what `dir` holds (see [`Ledger::absorb`]), and an action
    /// running or settling keeps its own entry, so its end is neither lost nor written over
    /// another run's.
    fn move_ledger(&mut self, dir: &std::path::Path) {
        let file = LedgerFile::new(dir);
        let mut loaded = file.load(SystemTime::now());
        if let Some(p) = &loaded.problem {
            tracing::error!("action ledger: {p}");
        }
        let ids = loaded.ledger.absorb(&self.ledger);
        let remap = |id: u64| ids.iter().find(|(o, _)| *o == id).map_or(id, |(_, n)| *n);
        if let Some(f) = &mut self.in_flight {
            f.id = remap(f.id);
        }
        if let Some(s) = &mut self.settling {
            s.id = remap(s.id);
        }
        self.ledger = loaded.ledger;
        self.ledger_file = file;
        self.save_ledger();
    }

    /// Everything that follows a probe round.
    async fn after_round(&mut self, round: Round) {
        let now = SystemTime::now();
        self.refresh_systemd(&round);
        let (transitions, new_findings) = self.diagnosis.update(&round, self.verdict.as_ref(), now);
        for t in transitions {
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
                    "{target} unhealthy after {} failed rounds: {detail}",
                    self.config.probe.unhealthy_after
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
        self.remember_wedge();
        self.last_round = Some(round);
        self.check_settled();
        self.climb_ladder().await;
        self.publish();
    }

    /// Keep the systemd version and verdict current (the version comes with each round), and
    /// ask the serial forecast what it expects.
    fn refresh_systemd(&mut self, round: &Round) {
        self.track_bus_serial(round);
        let manager = round
            .get(Target::Systemd)
            .and_then(|o| o.facts.systemd_version.clone());
        if manager.is_some() || self.verdict.is_none() {
            let (build, policy) = systemd_version::identify(
                manager.as_deref(),
                self.package_version.as_deref(),
                &self.config.systemd.fixed_builds,
            );
            self.systemd.version = build.map(|b| b.to_string());
            self.verdict = Some(policy);
        } // else PID 1 did not answer this round: keep what we knew.
        self.weigh_evidence();
        self.forecast_outlook();
    }

    /// The version policy's verdict weighed against this boot's evidence.
    fn weigh_evidence(&mut self) {
        let Some(policy) = self.verdict.clone() else {
            return;
        };
        let wrapped = self.serials.forecast().is_some_and(|f| f.wraps);
        let weighed = bug_evidence::weigh(policy, self.proof.as_ref(), wrapped);
        self.systemd.affected = weighed.verdict.is_affected();
        self.systemd.reason = weighed.verdict.reason().to_owned();
        self.systemd.evidence = weighed.evidence;
        self.systemd.bus_wedge_seen_at = self.proof.as_ref().map(|p| p.seen_at);
    }

    /// The serial forecast's outlook → the `systemd-serial-exhaustion` input of the diagnosis
    /// and whether a planned reexec is due.
    fn forecast_outlook(&mut self) {
        let thresholds = Thresholds::of(&self.config);
        let affected = self.systemd.affected
            || self.config.actions.daemon_reexec_when == crate::config::ReexecWhen::Always;
        let (outlook, detail) = match self.serials.forecast() {
            Some(f) => (
                Outlook::of(&f, affected, &thresholds),
                forecast::explain(&f, &thresholds),
            ),
            None => (Outlook::Calm, String::new()),
        };
        self.preempt_due = outlook == Outlook::Preempt;
        self.diagnosis
            .set_serial_exhaustion((outlook != Outlook::Calm).then_some(detail));
    }

    /// A `systemd-bus-wedge` is the bug's own signature: remember it for this boot.
    fn remember_wedge(&mut self) {
        if self.proof.is_some() {
            return;
        }
        let Some(wedge) = self
            .diagnosis
            .findings()
            .iter()
            .find(|f| f.id == FindingId::SystemdBusWedge)
        else {
            return;
        };
        let proof = WedgeProof {
            boot_id: self.boot_id.clone().unwrap_or_default(),
            seen_at: wedge.since,
            systemd_version: self.systemd.version.clone(),
            detail: wedge.detail.clone(),
        };
        match self.proof_file.save(&proof) {
            Ok(()) => tracing::info!(
                "systemd-bus-wedge seen: this systemd build ({}) carries the bus bug, whatever its version says; remembered for this boot in {}",
                proof
                    .systemd_version
                    .as_deref()
                    .unwrap_or("version unknown"),
                self.config.state_directory.display()
            ),
            Err(e) => tracing::warn!(
                "systemd-bus-wedge seen: this build carries the bus bug; the proof could not be saved ({e}), it is kept until pleg-guard stops"
            ),
        }
        self.proof = Some(proof);
        self.weigh_evidence();
    }

    /// Feed the serial of PID 1's reply on the bus into the forecast (see [`crate::forecast`]).
    fn track_bus_serial(&mut self, round: &Round) {
        let Some(serial) = round.get(Target::Systemd).and_then(|o| o.facts.bus_serial) else {
            return;
        };
        let at = self.started.elapsed();
        match self.serials.observe(Sample { at, serial }) {
            Change::Restarted { from } => tracing::info!(
                "PID 1's bus serial dropped from {from} to {serial}: PID 1 re-executed or restarted; forecast starts afresh"
            ),
            Change::Wrapped { from } => tracing::info!(
                "PID 1's bus serial wrapped from {from} to {serial}: this sd-bus is fixed (it continues at 2^31)"
            ),
            Change::Continued | Change::Ignored => {}
        }
        self.systemd.set_forecast(self.serials.forecast().as_ref());
    }

    /// After the settle time, tell whether the action's symptom cleared.
    fn check_settled(&mut self) {
        let Some(s) = &self.settling else { return };
        if Instant::now() < s.until {
            return;
        }
        let still: Vec<FindingId> = s
            .aimed_at
            .iter()
            .copied()
            .filter(|id| self.diagnosis.has(*id))
            .collect();
        let (kind, symptom, message) = if still.is_empty() {
            (
                EventKind::SymptomCleared,
                Symptom::Cleared,
                format!("{} cleared {}", s.action, join(&s.aimed_at)),
            )
        } else {
            (
                EventKind::SymptomPersisted,
                Symptom::Persisted,
                format!(
                    "{} did not clear {}; the next tier may follow",
                    s.action,
                    join(&still)
                ),
            )
        };
        let finding = s.aimed_at.first().copied();
        emit(&Event {
            kind,
            target: None,
            action: Some(s.action),
            finding,
            message: &message,
        });
        self.ledger.record_symptom(s.id, symptom);
        self.save_ledger();
        self.settling = None;
    }

    /// Ask the ladder, log what it holds back, start what it chooses.
    async fn climb_ladder(&mut self) {
        let findings: Vec<FindingId> = self.diagnosis.findings().iter().map(|f| f.id).collect();
        let in_grace = self.started.elapsed() < self.config.startup_grace;
        let decisions = ladder::decide(&ladder::Context {
            now: SystemTime::now(),
            mode: self.mode(),
            in_startup_grace: in_grace,
            busy: self.in_flight.is_some() || self.settling.is_some(),
            findings: &findings,
            systemd_affected: self.systemd.affected,
            serial_preempt_due: self.preempt_due,
            actions: &self.config.actions,
            ledger: &self.ledger,
        });
        // Forget notes about actions whose symptoms are gone, so a new episode logs again.
        self.notes
            .retain(|a, _| ladder::aims(*a).iter().any(|id| findings.contains(id)));
        self.next_step = if in_grace
            && findings
                .iter()
                .any(|f| f.severity() == crate::diagnosis::Severity::Problem)
        {
            Some("no action during startup grace".into())
        } else {
            None
        };

        for d in decisions {
            match d {
                Decision::Act { action, aimed_at } => self.start(action, aimed_at),
                Decision::Suppressed {
                    action,
                    aimed_at,
                    next_allowed_at,
                } => {
                    let when = crate::report::time_format::rfc3339(next_allowed_at);
                    let message = format!(
                        "{action} held back by its rate limit (for {}); next run allowed at {when}",
                        join(&aimed_at)
                    );
                    self.next_step = Some(format!("{action} suppressed until {when}"));
                    self.note(EventKind::ActionSuppressed, action, &aimed_at, message);
                }
                Decision::Skipped {
                    action,
                    aimed_at,
                    reason,
                } => {
                    let message = format!(
                        "{action} not run (for {}): {reason}{}",
                        join(&aimed_at),
                        self.planned_because(&aimed_at)
                    );
                    self.next_step = Some(format!("{action} skipped: {reason}"));
                    self.note(EventKind::ActionSkipped, action, &aimed_at, message);
                }
            }
        }
    }

    /// For a planned reexec (aimed at `systemd-serial-exhaustion`): why now, with the numbers.
    fn planned_because(&self, aimed_at: &[FindingId]) -> String {
        if !aimed_at.contains(&FindingId::SystemdSerialExhaustion) {
            return String::new();
        }
        self.serials.forecast().map_or(String::new(), |f| {
            format!(
                " (planned, before PID 1 runs out of bus serials: {})",
                forecast::explain(&f, &Thresholds::of(&self.config))
            )
        })
    }

    /// Log a suppressed/skipped note once per episode.
    fn note(
        &mut self,
        kind: EventKind,
        action: ActionKind,
        aimed_at: &[FindingId],
        message: String,
    ) {
        if self.notes.get(&action) == Some(&message) {
            return;
        }
        emit(&Event {
            kind,
            target: None,
            action: Some(action),
            finding: aimed_at.first().copied(),
            message: &message,
        });
        self.notes.insert(action, message);
    }

    /// Record and start an action as a task.
    fn start(&mut self, action: ActionKind, aimed_at: Vec<FindingId>) {
        let id = self.ledger.record_start(action, SystemTime::now());
        if let Err(e) = self.ledger_file.save(&self.ledger) {
            // Without a durable record the rate limit could be lost: do not act. The run did
            // not happen, so it holds nothing back once the state directory is writable again;
            // the failure is logged once per episode, not every round.
            self.ledger.forget(id);
            let message = format!("{action} not started: the ledger could not be saved: {e}");
            self.next_step = Some(format!("{action} not started: ledger not writable"));
            self.note(EventKind::ActionFailed, action, &aimed_at, message);
            return;
        }
        let message = format!(
            "{action} started for {}{}",
            join(&aimed_at),
            self.planned_because(&aimed_at)
        );
        emit(&Event {
            kind: EventKind::ActionStarted,
            target: None,
            action: Some(action),
            finding: aimed_at.first().copied(),
            message: &message,
        });
        self.notes.remove(&action);

        let timeout = self.config.probe.timeout;
        let docker_socket = self.config.docker.socket.clone();
        let private_socket = self.config.systemd.private_socket.clone();
        let bus_socket = self.config.dbus.socket.clone();
        let unit = self.config.kubelet.unit.clone();
        let container = self.config.kubelet.container.clone();
        let handle = tokio::spawn(async move {
            match action {
                ActionKind::PurgeDeadContainers => {
                    action::purge_dead::run(&docker_socket, timeout).await
                }
                ActionKind::DaemonReexec => {
                    action::reexec::run(&private_socket, &bus_socket, timeout).await
                }
                ActionKind::RestartKubelet => match container {
                    Some(name) => {
                        action::restart_kubelet::restart_container(&name, &docker_socket, timeout)
                            .await
                    }
                    None => {
                        action::restart_kubelet::restart_unit(
                            &unit,
                            &private_socket,
                            &bus_socket,
                            timeout,
                        )
                        .await
                    }
                },
            }
        });
        self.in_flight = Some(InFlight {
            id,
            action,
            aimed_at,
            handle,
        });
        self.publish();
    }

    /// An action task ended.
    async fn action_done(&mut self, report: ActionReport) {
        let Some(f) = self.in_flight.take() else {
            return;
        };
        let outcome = if report.succeeded {
            RunOutcome::Succeeded
        } else {
            RunOutcome::Failed
        };
        self.ledger.record_end(f.id, outcome, &report.detail);
        self.save_ledger();
        let kind = if report.succeeded {
            EventKind::ActionSucceeded
        } else {
            EventKind::ActionFailed
        };
        let message = format!(
            "{} {}: {}",
            f.action,
            if report.succeeded {
                "succeeded"
            } else {
                "failed"
            },
            report.detail
        );
        emit(&Event {
            kind,
            target: None,
            action: Some(f.action),
            finding: f.aimed_at.first().copied(),
            message: &message,
        });
        if report.succeeded {
            match f.action {
                ActionKind::RestartKubelet => {
                    self.prober.ignore_kubelet_logs_before(SystemTime::now())
                }
                ActionKind::DaemonReexec => {
                    self.package_version = self.prober.package_version().await
                }
                ActionKind::PurgeDeadContainers => {}
            }
            let settle = f.action.config(&self.config.actions).settle;
            self.settling = Some(Settling {
                id: f.id,
                action: f.action,
                aimed_at: f.aimed_at,
                until: crate::clock::deadline_in(settle),
            });
        }
        self.publish();
    }

    fn save_ledger(&mut self) {
        self.ledger.prune(
            SystemTime::now(),
            ledger::DAY + Duration::from_secs(24 * 3600),
        );
        if let Err(e) = self.ledger_file.save(&self.ledger) {
            tracing::error!("action ledger: {e}");
        }
    }

    /// The overall state.
    fn overall(&self) -> Overall {
        if self.in_flight.is_some() || self.settling.is_some() {
            Overall::Repairing
        } else if self.diagnosis.degraded() {
            Overall::Degraded
        } else {
            Overall::Healthy
        }
    }

    /// The `STATUS=` line: the state word, then a summary readable at a glance.
    fn status_line(&self) -> String {
        let overall = self.overall();
        let mut parts = Vec::new();
        if let Some(f) = &self.in_flight {
            parts.push(format!("{} running", f.action));
        } else if let Some(s) = &self.settling {
            parts.push(format!(
                "{} done, checking in {}s",
                s.action,
                s.until.saturating_duration_since(Instant::now()).as_secs()
            ));
        }
        let problems: Vec<&str> = self
            .diagnosis
            .findings()
            .iter()
            .filter(|f| f.severity == crate::diagnosis::Severity::Problem)
            .map(|f| f.id.name())
            .collect();
        if !problems.is_empty() {
            parts.push(problems.join(", "));
        }
        if let Some(round) = &self.last_round {
            let bad = round.failing();
            if problems.is_empty() && !bad.is_empty() {
                parts.push(bad.join(", "));
            }
            if parts.is_empty() {
                let ok = round
                    .observations
                    .iter()
                    .filter(|o| {
                        !o.state.is_failure() && o.state != crate::target::TargetState::Absent
                    })
                    .count();
                let absent = round
                    .observations
                    .iter()
                    .filter(|o| o.state == crate::target::TargetState::Absent)
                    .count();
                parts.push(format!("{ok} targets ok, {absent} absent"));
            }
        }
        if self.diagnosis.has(FindingId::SystemdSerialExhaustion) {
            parts.push(format!(
                "systemd-serial-exhaustion: {}",
                self.systemd.bus_serial_summary.as_deref().unwrap_or("?")
            ));
        }
        if let Some(next) = &self.next_step {
            parts.push(next.clone());
        }
        if self.systemd.affected && self.systemd.version.is_some() {
            parts.push(format!(
                "systemd {} affected by the bus bug",
                self.systemd.version.as_deref().unwrap_or("?")
            ));
        }
        if self.mode() == Mode::Observe {
            parts.push("observe mode".into());
        }
        format!("{}: {}", overall.name(), parts.join("; "))
    }

    /// Write status.json and the STATUS= line.
    fn publish(&self) {
        let line = self.status_line();
        notify::status(&line);
        let snapshot = self.snapshot(line);
        if let Err(e) = status_file::write(&self.config.runtime_directory, &snapshot) {
            tracing::debug!("status.json: {e}");
        }
    }

    fn snapshot(&self, summary: String) -> Snapshot {
        let now = SystemTime::now();
        let overall = self.overall();
        let summary = summary
            .split_once(": ")
            .map_or(summary.clone(), |(_, s)| s.to_owned());
        let targets = self
            .last_round
            .as_ref()
            .map(Round::by_name)
            .unwrap_or_default();
        let entries = self.ledger.entries();
        let actions = entries[entries.len().saturating_sub(RECENT_ACTIONS)..]
            .iter()
            .map(|e| ActionRecord {
                action: e.action.name().to_owned(),
                at: e.at,
                outcome: serde_json::to_value(e.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                symptom: e.symptom.map(|s| match s {
                    Symptom::Cleared => "cleared".to_owned(),
                    Symptom::Persisted => "persisted".to_owned(),
                }),
                detail: e.detail.clone(),
            })
            .collect();
        let budget = ActionKind::ALL
            .iter()
            .map(|a| {
                let cfg = a.config(&self.config.actions);
                (
                    a.name().to_owned(),
                    BudgetStatus {
                        enabled: cfg.enabled,
                        budget: self.ledger.budget(*a, cfg, now),
                    },
                )
            })
            .collect();
        Snapshot {
            pleg_guard_version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: Some(std::process::id()),
            mode: self.mode(),
            healthy: overall == Overall::Healthy,
            state: overall,
            summary,
            updated_at: now,
            interval_ms: u64::try_from(self.config.interval.as_millis()).unwrap_or(u64::MAX),
            systemd: self.systemd.clone(),
            targets,
            findings: self.diagnosis.findings().to_vec(),
            actions,
            budget,
        }
    }
}

/// This boot's proof from the state directory, logging a problem with it.
fn load_proof(file: &ProofFile, boot_id: Option<&str>) -> Option<WedgeProof> {
    let boot_id = boot_id?;
    match file.load(boot_id) {
        Ok(proof) => proof,
        Err(e) => {
            tracing::error!("bus-bug proof: {e}");
            None
        }
    }
}

/// The daemon's probes: like `diagnose`'s, but following kubelet's journal continuously.
fn daemon_prober(config: &Config) -> Prober {
    let mut p = Prober::new(config);
    p.follow_kubelet_journal();
    p
}

fn join(ids: &[FindingId]) -> String {
    ids.iter().map(|i| i.name()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[path = "daemon_state_tests.rs"]
mod state_tests;
