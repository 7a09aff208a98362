//! `pleg-guard diagnose`: probe everything once, print each target and finding, act on
//! nothing. Finishes within about `probe.timeout` + 1 s even when every target hangs.

use std::process::ExitCode;
use std::time::SystemTime;

use crate::bug_evidence::{self, ProofFile, WedgeProof};
use crate::cli::DiagnoseArgs;
use crate::diagnosis::{Diagnosis, FindingId, Severity};
use crate::forecast::SerialTracker;
use crate::probe::{Prober, systemd};
use crate::report::journal;
use crate::report::status_file::{Overall, Snapshot, SystemdStatus};
use crate::report::table;
use crate::systemd_version;

/// Exit 0 healthy, 1 a problem found, 2 usage or configuration error.
pub fn main(args: DiagnoseArgs) -> ExitCode {
    journal::init_stderr(tracing::Level::WARN);
    let config = match super::load_config(args.config.config.as_deref()) {
        Ok(l) => l.config,
        Err(code) => return code,
    };
    let runtime = match super::runtime(super::EXIT_CONFIG) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let snapshot = runtime.block_on(async {
        let mut prober = Prober::new(&config);
        let (round, package) = tokio::join!(
            prober.round(),
            systemd::package_version(config.probe.timeout)
        );
        let manager = round
            .get(crate::target::Target::Systemd)
            .and_then(|o| o.facts.systemd_version.clone());
        let (build, policy) = systemd_version::identify(
            manager.as_deref(),
            package.as_deref(),
            &config.systemd.fixed_builds,
        );
        // The daemon's proof from earlier on this boot, if any (read only: diagnose writes
        // nothing).
        let mut proof = bug_evidence::boot_id().and_then(|boot| {
            ProofFile::new(&config.state_directory)
                .load(&boot)
                .unwrap_or_else(|e| {
                    tracing::warn!("bus-bug proof: {e}");
                    None
                })
        });
        let weighed = bug_evidence::weigh(policy.clone(), proof.as_ref(), false);
        // One look: a single failed call counts.
        let mut diagnosis = Diagnosis::new(1);
        diagnosis.update(&round, Some(&weighed.verdict), SystemTime::now());
        // A wedge seen now is the proof itself.
        if proof.is_none() {
            if let Some(wedge) = diagnosis
                .findings()
                .iter()
                .find(|f| f.id == FindingId::SystemdBusWedge)
            {
                proof = Some(WedgeProof {
                    boot_id: String::new(),
                    seen_at: wedge.since,
                    systemd_version: None,
                    detail: wedge.detail.clone(),
                });
            }
        }
        let weighed = bug_evidence::weigh(policy, proof.as_ref(), false);
        let problems: Vec<&str> = diagnosis
            .findings()
            .iter()
            .filter(|f| f.severity == Severity::Problem)
            .map(|f| f.id.name())
            .collect();
        let degraded = diagnosis.degraded();
        let summary = if problems.is_empty() {
            let bad = round.failing();
            if bad.is_empty() {
                "no problem found".to_owned()
            } else {
                bad.join(", ")
            }
        } else {
            problems.join(", ")
        };
        Snapshot {
            pleg_guard_version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: None,
            mode: config.mode,
            healthy: !degraded,
            state: if degraded {
                Overall::Degraded
            } else {
                Overall::Healthy
            },
            summary,
            updated_at: round.at,
            interval_ms: u64::try_from(config.interval.as_millis()).unwrap_or(u64::MAX),
            systemd: {
                let mut systemd = SystemdStatus {
                    version: build.map(|b| b.to_string()),
                    affected: weighed.verdict.is_affected(),
                    reason: weighed.verdict.reason().to_owned(),
                    evidence: weighed.evidence,
                    bus_wedge_seen_at: proof.as_ref().map(|p| p.seen_at),
                    ..SystemdStatus::default()
                };
                let serial = round
                    .get(crate::target::Target::Systemd)
                    .and_then(|o| o.facts.bus_serial);
                systemd.set_forecast(serial.map(SerialTracker::single).as_ref());
                systemd
            },
            targets: round.by_name(),
            findings: diagnosis.findings().to_vec(),
            actions: Vec::new(),
            budget: Default::default(),
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    if let Err(e) = table::print(&snapshot, args.json, false) {
        eprintln!("pleg-guard: {e}");
        return ExitCode::from(super::EXIT_CONFIG);
    }
    if snapshot.healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
