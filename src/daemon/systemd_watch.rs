//! What the daemon knows of the running systemd across rounds: its build and the version
//! policy's verdict, this boot's evidence ([`crate::systemd::evidence`]: a wedge seen, a serial
//! wrapped), and PID 1's bus serials over time ([`crate::systemd::forecast`]), which give the
//! `systemd-serial-exhaustion` input of the diagnosis and say when a planned reexec is due
//! (now, or at the next opening of `preempt_window`: [`crate::systemd::preempt`]).

use std::path::Path;
use std::time::{Duration, SystemTime};

use jiff::tz::TimeZone;

use crate::config::{Config, ReexecWhen};
use crate::diagnosis::{Finding, FindingId};
use crate::report::status_file::SystemdStatus;
use crate::systemd::evidence::{self, ProofFile, WedgeProof};
use crate::systemd::forecast::{self, Change, Outlook, Sample, SerialTracker, Thresholds, Windows};
use crate::systemd::preempt::{self, Plan, Wait};
use crate::systemd::version::{self, Verdict};
use crate::target::Round;
use crate::target::Target;

/// The serial forecast's word for this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerialOutlook {
    /// `Some(detail)` while `systemd-serial-exhaustion` stands.
    pub exhaustion: Option<String>,
    /// A planned reexec goes now: due (in `preempt_window`, or not waiting for it), or brought
    /// forward into an open window because it would come due before the next opening.
    pub preempt_due: bool,
    /// A planned reexec would be due but waits for `preempt_window` (`preempt_due` is false).
    pub preempt_waits: Option<Wait>,
}

/// The node's wall clock for `preempt_window`: now, and the local time zone.
#[derive(Debug, Clone, Copy)]
pub struct LocalTime<'a> {
    /// Now.
    pub now: SystemTime,
    /// The node's time zone.
    pub tz: &'a TimeZone,
}

/// systemd's build, verdict, evidence and serial forecast.
pub struct SystemdWatch {
    /// Save proofs (the daemon) or only read them (`diagnose`).
    persist: bool,
    status: SystemdStatus,
    /// The version policy's verdict.
    verdict: Option<Verdict>,
    /// The same weighed against this boot's evidence.
    weighed: Option<Verdict>,
    serials: SerialTracker,
    proof_file: ProofFile,
    boot_id: Option<String>,
    proof: Option<WedgeProof>,
    /// What `preempt_window` made of the last due planned reexec.
    window_plan: Option<Plan>,
}

impl SystemdWatch {
    /// Start watching; loads this boot's proof from `state_directory` and saves a new one
    /// there.
    pub fn new(state_directory: &Path) -> Self {
        Self::open(state_directory, true)
    }

    /// The same, but never writing (for `diagnose`).
    pub fn read_only(state_directory: &Path) -> Self {
        Self::open(state_directory, false)
    }

    fn open(state_directory: &Path, persist: bool) -> Self {
        let boot_id = evidence::boot_id();
        let proof_file = ProofFile::new(state_directory);
        let proof = load_proof(&proof_file, boot_id.as_deref());
        SystemdWatch {
            persist,
            status: SystemdStatus::default(),
            verdict: None,
            weighed: None,
            serials: SerialTracker::new(Windows::default()),
            proof_file,
            boot_id,
            proof,
            window_plan: None,
        }
    }

    /// Keep the proof in another state directory (a reload changed it); a proof already held
    /// is kept.
    pub fn move_to(&mut self, state_directory: &Path) {
        self.proof_file = ProofFile::new(state_directory);
        if let Some(p) = load_proof(&self.proof_file, self.boot_id.as_deref()) {
            self.proof = Some(p);
        }
    }

    /// What is known, for the status.
    pub fn status(&self) -> &SystemdStatus {
        &self.status
    }

    /// The verdict weighed against this boot's evidence (None before the first round).
    pub fn verdict(&self) -> Option<&Verdict> {
        self.weighed.as_ref()
    }

    /// Take in a round: the serial (at `at`, monotonic), the version, the verdict weighed
    /// against the evidence; then the forecast's outlook under `config` (and `preempt_window`
    /// at `local`).
    pub fn observe(
        &mut self,
        round: &Round,
        at: Duration,
        package_version: Option<&str>,
        config: &Config,
        local: LocalTime<'_>,
    ) -> SerialOutlook {
        self.track_bus_serial(round, at);
        let manager = round
            .get(Target::Systemd)
            .and_then(|o| o.facts.systemd_version.clone());
        // PID 1 not answering this round keeps what we knew.
        if manager.is_some() || self.verdict.is_none() {
            let (build, policy) = version::identify(
                manager.as_deref(),
                package_version,
                &config.systemd.fixed_builds,
            );
            self.status.version = build.map(|b| b.to_string());
            self.verdict = Some(policy);
        }
        self.weigh_evidence();
        self.outlook(config, local)
    }

    /// A `systemd-bus-wedge` among `findings` is the bug's own signature: remember it for this
    /// boot (once; saved in the state directory unless read-only).
    pub fn remember_wedge(&mut self, findings: &[Finding]) {
        if self.proof.is_some() {
            return;
        }
        let Some(wedge) = findings.iter().find(|f| f.id == FindingId::SystemdBusWedge) else {
            return;
        };
        let proof = WedgeProof {
            boot_id: self.boot_id.clone().unwrap_or_default(),
            seen_at: wedge.since,
            systemd_version: self.status.version.clone(),
            detail: wedge.detail.clone(),
        };
        if self.persist {
            match self.proof_file.save(&proof) {
                Ok(()) => tracing::info!(
                    "systemd-bus-wedge seen: this systemd build ({}) carries the bus bug, whatever its version says; remembered for this boot in {}",
                    proof
                        .systemd_version
                        .as_deref()
                        .unwrap_or("version unknown"),
                    self.proof_file.path().display()
                ),
                Err(e) => tracing::warn!(
                    "systemd-bus-wedge seen: this build carries the bus bug; the proof could not be saved ({e}), it is kept until pleg-guard stops"
                ),
            }
        }
        self.proof = Some(proof);
        self.weigh_evidence();
    }

    /// For a planned reexec (aimed at `systemd-serial-exhaustion`): why now, with the numbers,
    /// and what `preempt_window` said (open, why it was brought forward into this opening, or
    /// why it did not wait for the next one).
    pub fn planned_because(&self, aimed_at: &[FindingId], config: &Config) -> String {
        if !aimed_at.contains(&FindingId::SystemdSerialExhaustion) {
            return String::new();
        }
        let window = match (
            &self.window_plan,
            config.actions.daemon_reexec_preempt.window,
        ) {
            (Some(Plan::NotWaiting(why) | Plan::BroughtForward(why)), _) => format!("; {why}"),
            (Some(Plan::InWindow), Some(w)) => format!("; within preempt_window {w}"),
            _ => String::new(),
        };
        self.serials.forecast().map_or(String::new(), |f| {
            format!(
                " (planned, before PID 1 runs out of bus serials: {}{window})",
                forecast::explain(&f, &Thresholds::of(config))
            )
        })
    }

    /// How long until PID 1 runs out of bus serials at the forecast rate (None: no forecast).
    pub fn serial_eta(&self) -> Option<std::time::Duration> {
        self.serials.forecast().and_then(|f| f.eta)
    }

    /// Feed the serial of PID 1's reply on the bus into the forecast.
    fn track_bus_serial(&mut self, round: &Round, at: Duration) {
        let Some(serial) = round.get(Target::Systemd).and_then(|o| o.facts.bus_serial) else {
            return;
        };
        match self.serials.observe(Sample { at, serial }) {
            Change::Restarted { from } => tracing::info!(
                "PID 1's bus serial dropped from {from} to {serial}: PID 1 re-executed or restarted; forecast starts afresh"
            ),
            Change::Wrapped { from } => tracing::info!(
                "PID 1's bus serial wrapped from {from} to {serial}: this sd-bus is fixed (it continues at 2^31)"
            ),
            Change::Continued | Change::Ignored => {}
        }
        self.status.set_forecast(self.serials.forecast().as_ref());
    }

    /// The version policy's verdict weighed against this boot's evidence.
    fn weigh_evidence(&mut self) {
        let Some(policy) = self.verdict.clone() else {
            return;
        };
        let wrapped = self.serials.forecast().is_some_and(|f| f.wraps);
        let weighed = evidence::weigh(policy, self.proof.as_ref(), wrapped);
        self.status.affected = weighed.verdict.is_affected();
        self.status.reason = weighed.verdict.reason().to_owned();
        self.status.evidence = weighed.evidence;
        self.status.bus_wedge_seen_at = self.proof.as_ref().map(|p| p.seen_at);
        self.weighed = Some(weighed.verdict);
    }

    /// The serial forecast's outlook; while `systemd-serial-exhaustion` stands, `preempt_window`
    /// says whether the planned reexec goes now (due, or brought forward into an open window),
    /// waits for the opening, or is not due yet.
    fn outlook(&mut self, config: &Config, local: LocalTime<'_>) -> SerialOutlook {
        let thresholds = Thresholds::of(config);
        let affected =
            self.status.affected || config.actions.daemon_reexec_when == ReexecWhen::Always;
        let forecast = self.serials.forecast();
        let (outlook, detail) = match &forecast {
            Some(f) => (
                Outlook::of(f, affected, &thresholds),
                forecast::explain(f, &thresholds),
            ),
            None => (Outlook::Calm, String::new()),
        };
        self.window_plan = forecast.filter(|_| outlook != Outlook::Calm).map(|f| {
            preempt::plan(
                config.actions.daemon_reexec_preempt.window.as_ref(),
                local.now,
                local.tz,
                &f,
                outlook,
                &thresholds,
            )
        });
        let preempt_waits = match &self.window_plan {
            Some(Plan::Wait(wait)) => Some(wait.clone()),
            _ => None,
        };
        SerialOutlook {
            exhaustion: (outlook != Outlook::Calm).then_some(detail),
            preempt_due: self.window_plan.as_ref().is_some_and(Plan::acts_now),
            preempt_waits,
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

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::target::{Facts, Observation, TargetState};
    use crate::testing::tempdir;

    fn round(serial: u32, version: Option<&str>) -> Round {
        Round {
            at: SystemTime::UNIX_EPOCH,
            observations: vec![Observation {
                target: Target::Systemd,
                state: TargetState::Ok,
                latency: Duration::from_millis(1),
                detail: String::new(),
                facts: Facts {
                    bus_serial: Some(serial),
                    systemd_version: version.map(str::to_owned),
                    ..Facts::default()
                },
            }],
        }
    }

    /// Noon UTC on an ordinary day (2026-06-10).
    fn noon(tz: &TimeZone) -> LocalTime<'_> {
        LocalTime {
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_781_092_800),
            tz,
        }
    }

    #[test]
    fn a_fixed_version_near_the_end_is_calm_unless_always() {
        let utc = TimeZone::UTC;
        let d = tempdir("calm");
        let mut w = SystemdWatch::new(&d);
        let mut config = Config::default();
        let o = w.observe(
            &round(u32::MAX - 1000, Some("252.39-1~deb12u2")),
            Duration::ZERO,
            None,
            &config,
            noon(&utc),
        );
        assert_eq!(
            o,
            SerialOutlook {
                exhaustion: None,
                preempt_due: false,
                preempt_waits: None
            }
        );
        assert!(!w.status().affected);
        config.actions.daemon_reexec_when = ReexecWhen::Always;
        let o = w.observe(
            &round(u32::MAX - 990, Some("252.39-1~deb12u2")),
            Duration::from_secs(1),
            None,
            &config,
            noon(&utc),
        );
        assert!(o.preempt_due, "1000 left < headroom 2e7: {o:?}");
        assert!(o.exhaustion.is_some_and(|d| d.contains("preempt_headroom")));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_affected_version_warns_and_preempts_on_headroom() {
        let utc = TimeZone::UTC;
        let d = tempdir("affected");
        let mut w = SystemdWatch::new(&d);
        let o = w.observe(
            &round(u32::MAX - 1000, Some("219")),
            Duration::ZERO,
            None,
            &Config::default(),
            noon(&utc),
        );
        assert!(w.status().affected);
        assert!(o.preempt_due);
        let why = w.planned_because(&[FindingId::SystemdSerialExhaustion], &Config::default());
        assert!(
            why.contains("planned") && why.contains("1000 serials left"),
            "{why}"
        );
        assert_eq!(
            w.planned_because(&[FindingId::SystemdBusWedge], &Config::default()),
            ""
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A watch on an affected PID 1 whose serial grows at `rate` per second and has
    /// `remaining` left, seen at `now` (UTC), under `config`.
    fn growing(
        tag: &str,
        remaining: u32,
        rate: u32,
        now: SystemTime,
        config: &Config,
    ) -> (SystemdWatch, SerialOutlook) {
        let utc = TimeZone::UTC;
        let local = LocalTime { now, tz: &utc };
        let d = tempdir(tag);
        let mut w = SystemdWatch::new(&d);
        let start = u32::MAX - remaining - 20 * rate;
        w.observe(
            &round(start, Some("219")),
            Duration::ZERO,
            None,
            config,
            local,
        );
        let o = w.observe(
            &round(u32::MAX - remaining, Some("219")),
            Duration::from_secs(20),
            None,
            config,
            local,
        );
        let _ = std::fs::remove_dir_all(&d);
        (w, o)
    }

    #[test]
    fn a_planned_reexec_waits_for_preempt_window_unless_it_runs_out_first() {
        use crate::ladder::{self, Decision};
        use crate::ledger::Ledger;
        use crate::target::ActionKind;
        // the shipped thresholds (headroom 2e7, before 6h), a busy node's 330/s
        let mut config = Config::default();
        config.actions.daemon_reexec_preempt.window = Some("02:00-05:00".parse().unwrap());
        const HOUR: u32 = 3600 * 330;
        // 19:48 UTC: the window opens in 6h12m
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_781_120_880);
        let ledger = Ledger::default();
        let decide = |o: &SerialOutlook, findings: &[FindingId]| {
            ladder::decide(&ladder::Context {
                now: crate::clock::boot::Now::wall_only(now),
                mode: config.mode,
                in_startup_grace: false,
                busy: false,
                findings,
                systemd_affected: true,
                serial_preempt_due: o.preempt_due,
                serial_preempt_waits: o.preempt_waits.as_ref().map(|w| w.words.as_str()),
                actions: &config.actions,
                ledger: &ledger,
                runtime: &crate::ladder::RuntimeFacts::default(),
            })
        };
        use FindingId::{SystemdBusWedge, SystemdSerialExhaustion};
        let act = |aimed_at| {
            vec![Decision::Act {
                action: ActionKind::DaemonReexec,
                aimed_at: vec![aimed_at],
            }]
        };
        // the planned reexec acts now; what its journal entry gives as the reason
        let planned_now = |w: &SystemdWatch, o: &SerialOutlook| {
            assert_eq!(
                decide(o, &[SystemdSerialExhaustion]),
                act(SystemdSerialExhaustion)
            );
            w.planned_because(&[SystemdSerialExhaustion], &config)
        };

        // due by the headroom (16 h left: 1.9e7), window closed, the serials last past its
        // opening plus 1 h: no act, the finding stays a warning, the wait is said
        let (_, o) = growing("wait", 16 * HOUR, 330, now, &config);
        assert!(!o.preempt_due, "{o:?}");
        assert!(o.exhaustion.is_some());
        let wait = o.preempt_waits.clone().unwrap();
        assert_eq!(
            wait.words,
            "planned, waits for preempt_window 02:00-05:00 (opens in 6h12m; runs out in ~16 h)"
        );
        assert_eq!(
            wait.opens,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_781_143_200)
        );
        assert_eq!(
            decide(&o, &[SystemdSerialExhaustion]),
            vec![Decision::Waits {
                action: ActionKind::DaemonReexec,
                aimed_at: vec![SystemdSerialExhaustion],
                reason: wait.words.clone()
            }]
        );
        // an emergency does not wait for it
        assert_eq!(
            decide(&o, &[SystemdBusWedge, SystemdSerialExhaustion]),
            act(SystemdBusWedge)
        );

        // due, window closed, but it runs out before the opening plus the margin (30e6 at
        // 2500/s: ~3 h): act, and say why it did not wait
        let (w, o) = growing("runs-out", 30_000_000, 2500, now, &config);
        assert!(o.preempt_due && o.preempt_waits.is_none(), "{o:?}");
        let why = planned_now(&w, &o);
        assert!(
            why.ends_with(
                "; runs out in ~3 h, before preempt_window 02:00-05:00 opens (in 6h12m) plus 1h margin: not waiting)"
            ),
            "{why}"
        );

        // below the headroom with no rate yet: nothing says the serials last, act now
        let no_rate = tempdir("no-rate");
        let mut w = SystemdWatch::new(&no_rate);
        let utc = TimeZone::UTC;
        let o = w.observe(
            &round(u32::MAX - 1_000_000, Some("219")),
            Duration::ZERO,
            None,
            &config,
            LocalTime { now, tz: &utc },
        );
        let _ = std::fs::remove_dir_all(&no_rate);
        assert!(o.preempt_due && o.preempt_waits.is_none(), "{o:?}");
        let why = w.planned_because(&[SystemdSerialExhaustion], &config);
        assert!(
            why.contains("; 1.00e6 serials left and no forecast rate to tell whether they last until preempt_window 02:00-05:00 opens (in 6h12m): not waiting"),
            "{why}"
        );

        // inside the window (03:00), due: now, and the journal says so
        let in_window = SystemTime::UNIX_EPOCH + Duration::from_secs(1_781_146_800);
        let (w, o) = growing("open", 16 * HOUR, 330, in_window, &config);
        assert!(o.preempt_due && o.preempt_waits.is_none(), "{o:?}");
        let why = w.planned_because(&[SystemdSerialExhaustion], &config);
        assert!(
            why.ends_with("; within preempt_window 02:00-05:00)"),
            "{why}"
        );

        // inside the window, not due (30 h left), but due before tomorrow's 02:00 (7 h left
        // then, 8.3e6 serials): brought forward, the ladder acts on the warning
        let (w, o) = growing("forward", 30 * HOUR, 330, in_window, &config);
        assert!(o.preempt_due && o.preempt_waits.is_none(), "{o:?}");
        assert!(o.exhaustion.is_some());
        let why = planned_now(&w, &o);
        assert!(
            why.ends_with(
                "; would come due before preempt_window 02:00-05:00 opens again (in 23h; ~8.32e6 serials left by then, below preempt_headroom 2.00e7): reexec now, inside the window)"
            ),
            "{why}"
        );
        // 60 h left: still 37 h at tomorrow's opening; a warning, nothing to do tonight
        let (_, o) = growing("later", 60 * HOUR, 330, in_window, &config);
        assert!(!o.preempt_due && o.preempt_waits.is_none(), "{o:?}");
        assert!(o.exhaustion.is_some());
        assert_eq!(decide(&o, &[SystemdSerialExhaustion]), vec![]);
        // preempt = false: never brought forward
        config.actions.daemon_reexec_preempt.enabled = false;
        let (_, o) = growing("off", 30 * HOUR, 330, in_window, &config);
        assert!(!o.preempt_due && o.exhaustion.is_some(), "{o:?}");
        config.actions.daemon_reexec_preempt.enabled = true;

        // no window: as before, due at once, and not before it is due
        config.actions.daemon_reexec_preempt.window = None;
        let (w, o) = growing("any", 16 * HOUR, 330, now, &config);
        assert!(o.preempt_due && o.preempt_waits.is_none(), "{o:?}");
        let why = w.planned_because(&[SystemdSerialExhaustion], &config);
        assert!(!why.contains("preempt_window"), "{why}");
        let (_, o) = growing("any-later", 30 * HOUR, 330, in_window, &config);
        assert!(!o.preempt_due, "{o:?}");
    }
}
