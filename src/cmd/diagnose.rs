//! `pleg-guard diagnose`: probe everything once, print each target and finding, act on
//! nothing. Finishes within about `probe.timeout` + 1 s even when every target hangs.

use crate::config::Config;
use crate::fleet::{Fleet, FleetError, FleetSettings, FleetView};
use crate::report::status_file::{FleetNodeStatus, FleetStatus};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use crate::assessment::{self, Assessment};
use crate::cli::DiagnoseArgs;
use crate::daemon::systemd_watch::{LocalTime, SystemdWatch};
use crate::diagnosis::Diagnosis;
use crate::probe::{Prober, systemd};
use crate::report::journal;
use crate::report::table;

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
        let (round, package, fleet) = tokio::join!(
            prober.round(),
            systemd::package_version(config.probe.timeout),
            fleet_status(&config)
        );
        // What the daemon would know of systemd after this one round (diagnose writes
        // nothing: a wedge seen now is proof for this report only).
        let mut watch = SystemdWatch::read_only(&config.state_directory);
        let tz = crate::daemon::local_time_zone(&config);
        let local = LocalTime {
            now: SystemTime::now(),
            tz: &tz,
        };
        let outlook = watch.observe(&round, Duration::ZERO, package.as_deref(), &config, local);
        // what the daemon would say of a planned reexec that waits for preempt_window
        let next_step = outlook
            .preempt_waits
            .as_ref()
            .map(|w| format!("daemon-reexec: {}", w.words));
        // One look: a single failed call counts.
        let mut diagnosis = Diagnosis::new(1);
        diagnosis.set_serial_exhaustion(outlook.exhaustion);
        diagnosis.update(&round, watch.verdict(), SystemTime::now());
        watch.remember_wedge(diagnosis.findings());
        let systemd = watch.status().clone();
        Assessment {
            mode: config.mode,
            round: Some(&round),
            findings: diagnosis.findings(),
            degraded: diagnosis.degraded(),
            systemd: &systemd,
            activity: None,
            next_step: next_step.as_deref(),
        }
        .snapshot(assessment::Context {
            interval: config.interval,
            at: Some(round.at),
            fleet,
            ..assessment::Context::default()
        })
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

/// The fleet group as one read shows it (None: no `[fleet]`), within `probe.timeout`.
async fn fleet_status(config: &Config) -> Option<FleetStatus> {
    let timeout = config.probe.timeout;
    let settings = FleetSettings::from_config(&config.fleet, config.etcd_request_timeout())?;
    let result = match tokio::time::timeout(timeout, Fleet::check(&settings)).await {
        Ok(r) => r,
        Err(_) => Err(FleetError::Unreachable(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        ))),
    };
    let (view, state, reason) = match result {
        Ok(view) => {
            let holding = view.holders.iter().any(|h| h.node == settings.node);
            (view, if holding { "holding" } else { "idle" }, None)
        }
        Err(e) => {
            let state = if e.is_rejection() {
                "rejected"
            } else {
                "unreachable"
            };
            let view = FleetView {
                group: settings.group.clone(),
                last_error: Some(e.to_string()),
                ..FleetView::default()
            };
            (view, state, Some(e.to_string()))
        }
    };
    let mut status = FleetStatus::of(
        &view,
        &settings.node,
        config.fleet.max_disruptive.to_string(),
        FleetNodeStatus {
            state: state.to_owned(),
            action: None,
            wait_s: None,
            position: None,
            reason,
        },
    );
    status.storm = crate::daemon::fleet_gate::storm_status(&config.fleet, &view, false);
    Some(status)
}
