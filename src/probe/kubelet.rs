//! The `kubelet` target: its `/healthz` endpoint and its own log lines.
//!
//! kubelet's `/healthz` does not include PLEG (it turns red only minutes later, through the
//! sync loop), so the early signal is kubelet's log: `skipping pod synchronization - [PLEG is
//! not healthy: ...]`, repeated at least every 5 s while PLEG is stuck. The lines are read
//! from the unit's journal, or, for kubelets run as a docker container (RKE and the like),
//! through the docker API.
//!
//! The reading is the clients' ([`crate::client::kubelet`] for healthz,
//! [`crate::client::journal`] and [`crate::client::docker`] for the log); this probe decides
//! the observation from what they found.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::{bounded, timed_with_error};
use crate::client::journal::follow::JournalFollower;
use crate::client::kubelet::HttpUrl;
use crate::client::kubelet::healthz;
use crate::client::{self, ErrorKind};
use crate::config::KubeletConfig;
use crate::target::{Facts, Observation, PathResult, Target, TargetState};

/// The text that marks kubelet's PLEG complaint in its log.
pub const PLEG_MARKER: &str = "PLEG is not healthy";

/// Directories where a kubelet unit file would be installed.
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// Probes kubelet.
pub struct KubeletProbe {
    enabled: bool,
    unit: String,
    container: Option<String>,
    healthz: HttpUrl,
    window: Duration,
    docker_socket: PathBuf,
    not_before: Option<SystemTime>,
    /// Set in the daemon: a `journalctl --follow` instead of one `journalctl` per round.
    follower: Option<JournalFollower>,
}

impl KubeletProbe {
    /// A probe set up from `[kubelet]`; `docker_socket` serves container-run kubelets.
    pub fn new(config: &KubeletConfig, docker_socket: PathBuf) -> Self {
        KubeletProbe {
            enabled: config.enabled,
            unit: config.unit.clone(),
            container: config.container.clone(),
            healthz: config.healthz_url.clone(),
            window: config.pleg_log_window,
            docker_socket,
            not_before: None,
            follower: None,
        }
    }

    /// Follow the unit's journal with one long-running `journalctl` instead of querying it
    /// every round (the daemon does this; a one-shot `diagnose` does not).
    pub fn follow_journal(&mut self) {
        if self.container.is_none() {
            self.follower = Some(JournalFollower::new(&self.unit, PLEG_MARKER));
        }
    }

    /// Ignore log lines older than `t`.
    pub fn ignore_logs_before(&mut self, t: SystemTime) {
        self.not_before = Some(t);
    }

    /// Probe healthz and the log concurrently before `deadline`.
    pub async fn probe(&mut self, deadline: Instant, slow_after: Duration) -> Observation {
        if !self.enabled {
            return Observation::absent(Target::Kubelet, "disabled in config");
        }
        let installed = match &self.container {
            Some(_) => self.docker_socket.exists(),
            None => unit_installed(&self.unit),
        };
        let since = {
            let window_start = SystemTime::now()
                .checked_sub(self.window)
                .unwrap_or(UNIX_EPOCH);
            self.not_before
                .map_or(window_start, |t| t.max(window_start))
        };
        let url = self.healthz.clone();
        let health = timed_with_error(deadline, slow_after, healthz(&url));
        let logs = async {
            if !installed {
                // No kubelet here: no log to read (and no journalctl left running for it).
                return Ok(None);
            }
            match bounded(deadline, self.pleg_lines(since)).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(()) => Err("reading kubelet's log took longer than the timeout".to_owned()),
            }
        };
        let (health, logs) = tokio::join!(health, logs);
        let (health, error) = health;
        let refused = error.is_some_and(|e| e.kind() == ErrorKind::Refused);
        classify(
            installed,
            &self.healthz,
            &self.source(),
            health,
            refused,
            logs,
        )
    }

    fn source(&self) -> String {
        match &self.container {
            Some(c) => format!("container {c}"),
            None => self.unit.clone(),
        }
    }

    /// The latest `PLEG is not healthy` line since `since`, if any.
    async fn pleg_lines(&mut self, since: SystemTime) -> Result<Option<String>, client::Error> {
        if let Some(f) = &mut self.follower {
            f.ensure_running(since)?;
            return Ok(f.latest_since(since, self.window));
        }
        match &self.container {
            Some(name) => {
                let docker = client::docker::connect(&self.docker_socket).await?;
                client::docker::last_log_line(&docker, name, since, PLEG_MARKER).await
            }
            None => client::journal::last_matching_line(&self.unit, since, PLEG_MARKER).await,
        }
    }
}

/// Decide the observation from healthz and the log.
fn classify(
    installed: bool,
    url: &HttpUrl,
    source: &str,
    health: PathResult,
    refused: bool,
    logs: Result<Option<String>, String>,
) -> Observation {
    if !installed && refused && !matches!(logs, Ok(Some(_))) {
        return Observation::absent(
            Target::Kubelet,
            format!("no {source} installed and nothing listens on {url}"),
        );
    }
    let healthz_ok = match health.state {
        TargetState::Ok | TargetState::Slow => Some(true),
        TargetState::Error => Some(false),
        _ => None,
    };
    let pleg_line = logs.as_ref().ok().cloned().flatten();
    let (state, detail) = match (&pleg_line, health.state) {
        (Some(line), _) => (TargetState::Error, excerpt(line).to_owned()),
        (None, TargetState::Ok | TargetState::Slow) => match &logs {
            Ok(_) => (health.state, format!("healthz {}", health.detail)),
            Err(e) => (
                health.state,
                format!("healthz {}; log unreadable: {e}", health.detail),
            ),
        },
        (None, state) => (state, format!("healthz: {}", health.detail)),
    };
    Observation {
        target: Target::Kubelet,
        state,
        latency: health.latency,
        detail,
        facts: Facts {
            pleg_line,
            healthz_ok,
            ..Facts::default()
        },
    }
}

/// The part of a kubelet line from the PLEG marker on (klog headers are noise here).
fn excerpt(line: &str) -> &str {
    let from = line.find(PLEG_MARKER).unwrap_or(0);
    let s = &line[from..];
    s.trim_end_matches(['"', ']', '\n'])
}

/// Whether a unit file for `unit` exists in one of the unit directories.
fn unit_installed(unit: &str) -> bool {
    UNIT_DIRS.iter().any(|d| Path::new(d).join(unit).exists())
}

/// The last line of `log` that carries the PLEG marker.
#[cfg(test)]
fn last_pleg_line(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .find(|l| l.contains(PLEG_MARKER))
        .map(|l| l.chars().take(400).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "I1105 09:50:27.583544  548093 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active 58h29m3.043779855s ago; threshold is 3m0s]";
    const NEW: &str = r#"I1105 09:50:27.583544     123 kubelet.go:2412] "Skipping pod synchronization" err="[PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s]""#;

    fn url() -> HttpUrl {
        "http://127.0.0.1:10248/healthz".parse().unwrap()
    }

    fn ok() -> PathResult {
        PathResult {
            state: TargetState::Ok,
            latency: Duration::from_millis(1),
            detail: "ok".into(),
        }
    }

    #[test]
    fn finds_both_kubelet_formats() {
        let log = format!("I1105 starting\n{OLD}\nI1105 other\n{NEW}\nI1105 more\n");
        assert_eq!(last_pleg_line(&log).as_deref(), Some(NEW));
        assert_eq!(
            excerpt(OLD),
            "PLEG is not healthy: pleg was last seen active 58h29m3.043779855s ago; threshold is 3m0s"
        );
        assert_eq!(
            excerpt(NEW),
            "PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s"
        );
        assert_eq!(last_pleg_line("I1105 fine\n"), None);
    }

    #[test]
    fn pleg_line_is_an_error_even_when_healthz_is_ok() {
        let o = classify(
            true,
            &url(),
            "kubelet.service",
            ok(),
            false,
            Ok(Some(OLD.into())),
        );
        assert_eq!(o.state, TargetState::Error);
        assert_eq!(o.facts.healthz_ok, Some(true));
        assert!(o.detail.starts_with("PLEG is not healthy"), "{}", o.detail);
    }

    #[test]
    fn not_installed_and_refused_is_absent() {
        let refused = PathResult {
            state: TargetState::Error,
            latency: Duration::ZERO,
            detail: "connect: Connection refused (os error 111)".into(),
        };
        let o = classify(
            false,
            &url(),
            "kubelet.service",
            refused.clone(),
            true,
            Ok(None),
        );
        assert_eq!(o.state, TargetState::Absent);
        let o = classify(
            true,
            &url(),
            "kubelet.service",
            refused.clone(),
            true,
            Ok(None),
        );
        assert_eq!(o.state, TargetState::Error);
        // the same text without the typed refusal (e.g. a reset) is a failure, not absence
        let o = classify(false, &url(), "kubelet.service", refused, false, Ok(None));
        assert_eq!(o.state, TargetState::Error);
    }

    #[test]
    fn healthy_kubelet_is_ok() {
        let o = classify(true, &url(), "kubelet.service", ok(), false, Ok(None));
        assert_eq!(o.state, TargetState::Ok);
    }

    /// A container-run kubelet whose docker socket does not exist (so no log is read and
    /// healthz alone decides), its healthz on `port`, probed with a 500 ms deadline.
    async fn probe_healthz(port: u16) -> Observation {
        let config = KubeletConfig {
            enabled: true,
            unit: "kubelet.service".into(),
            container: Some("pleg-guard-test-no-such-kubelet".into()),
            healthz_url: HttpUrl {
                host: "127.0.0.1".into(),
                port,
                path: "/healthz".into(),
            },
            pleg_log_window: Duration::from_secs(60),
        };
        let mut p = KubeletProbe::new(
            &config,
            PathBuf::from("/nonexistent/pleg-guard-test/docker.sock"),
        );
        p.probe(
            Instant::now() + Duration::from_millis(500),
            Duration::from_millis(400),
        )
        .await
    }

    /// The healthz client's answers, as the probe words them (a fake kubelet on loopback).
    #[tokio::test]
    async fn healthz_answers_become_observations() {
        use crate::client::kubelet::tests::{Healthz, closed_port, fake_kubelet};
        let ok = fake_kubelet(Healthz::Says(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ));
        let o = probe_healthz(ok.await).await;
        assert_eq!(
            (o.state, o.detail.as_str()),
            (TargetState::Ok, "healthz ok")
        );
        assert_eq!(o.facts.healthz_ok, Some(true));

        let failing = fake_kubelet(Healthz::Says(
            b"HTTP/1.1 500 Internal Server Error\r\n\r\nno",
        ));
        let o = probe_healthz(failing.await).await;
        assert_eq!(o.state, TargetState::Error, "{}", o.detail);
        assert_eq!(o.facts.healthz_ok, Some(false));
        assert!(o.detail.contains("500"), "{}", o.detail);

        let garbage = fake_kubelet(Healthz::Says(b"\x00\xff not http"));
        assert_eq!(probe_healthz(garbage.await).await.state, TargetState::Error);

        // Refused, and no kubelet installed: no kubelet here.
        let o = probe_healthz(closed_port().await).await;
        assert_eq!(o.state, TargetState::Absent, "{}", o.detail);

        let o = probe_healthz(fake_kubelet(Healthz::Hangs).await).await;
        assert_eq!(o.state, TargetState::Unresponsive, "{}", o.detail);
    }
}
