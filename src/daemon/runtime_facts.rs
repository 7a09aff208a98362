//! What the runtimes' rungs need to know before a restart, read only while a runtime's hang
//! is a finding (nothing is asked on a healthy node): how long PID 1 says the unit has been
//! active (a runtime still starting is not hung), and dockerd's `live-restore` from its
//! configuration file (the engine itself is what hangs, so its API cannot say); and, while
//! kubelet's PLEG is unhealthy, kubelet's unit and its `WatchdogSec=` (kubelet's own systemd
//! watchdog, 1.35+, which `restart-kubelet` must not race).
//!
//! PID 1 is asked over its private socket first, then the bus, each bounded; while PID 1 or
//! the bus is broken nothing is asked (the ladder holds runtime restarts back then anyway).

use std::path::Path;
use std::time::Duration;

use crate::client::pid1::{Pid1, Route, ServiceState};
use crate::config::Config;
use crate::diagnosis::FindingId;
use crate::ladder::{KubeletFacts, LiveRestore, RuntimeFacts, UnitFacts, UnitState};

/// The facts for the findings that stand (`findings`), read as the configuration says.
pub async fn read(findings: &[FindingId], config: &Config) -> RuntimeFacts {
    let has = |id| findings.contains(&id);
    if crate::ladder::PID1_OR_BUS_BROKEN.iter().any(|id| has(*id)) {
        return RuntimeFacts::default();
    }
    let actions = &config.actions;
    let mut facts = RuntimeFacts::default();
    if has(FindingId::ContainerdUnresponsive) && actions.restart_containerd.enabled {
        facts.containerd = Some(unit_facts(&config.containerd.unit, config).await);
    }
    if has(FindingId::DockerUnresponsive) && actions.restart_docker.enabled {
        facts.docker = Some(unit_facts(&config.docker.unit, config).await);
        facts.docker_live_restore = Some(live_restore_of(&config.docker.daemon_json));
    }
    if has(FindingId::KubeletPlegUnhealthy)
        && actions.restart_kubelet.enabled
        && config.kubelet.container.is_none()
    {
        let (unit, watchdog) = unit_read(&config.kubelet.unit, config).await;
        facts.kubelet = Some(KubeletFacts { unit, watchdog });
    }
    facts
}

/// The state of `unit` as PID 1 tells it.
async fn unit_facts(unit: &str, config: &Config) -> UnitFacts {
    unit_read(unit, config).await.0
}

/// The state of `unit` as PID 1 tells it, and its `WatchdogSec=` (None: not armed, or not
/// read).
async fn unit_read(unit: &str, config: &Config) -> (UnitFacts, Option<Duration>) {
    let timeout = config.probe.timeout;
    let mut notes = Vec::new();
    for route in [Route::Private, Route::Bus] {
        let asked = tokio::time::timeout(timeout, async {
            let mut pid1 =
                Pid1::connect(route, &config.systemd.private_socket, &config.dbus.socket).await?;
            pid1.service_state(unit).await
        })
        .await;
        match asked {
            Ok(Ok(s)) => {
                let watchdog =
                    (s.watchdog_usec > 0).then(|| Duration::from_micros(s.watchdog_usec));
                let facts = UnitFacts {
                    unit: unit.to_owned(),
                    state: state_of(&s, monotonic_now()),
                };
                return (facts, watchdog);
            }
            Ok(Err(e)) => notes.push(format!("{}: {e}", route.name())),
            Err(_) => notes.push(format!("{}: no answer", route.name())),
        }
    }
    let facts = UnitFacts {
        unit: unit.to_owned(),
        state: UnitState::Unknown(notes.join("; ")),
    };
    (facts, None)
}

/// CLOCK_MONOTONIC now (the clock of `ActiveEnterTimestampMonotonic`); None if unreadable.
fn monotonic_now() -> Option<Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .ok()
        .map(Duration::from)
}

/// A unit's state from PID 1's answer, `now` on CLOCK_MONOTONIC.
pub fn state_of(s: &ServiceState, now: Option<Duration>) -> UnitState {
    if s.active_state != "active" {
        return UnitState::NotActive(s.active_state.clone());
    }
    match now {
        Some(now) if s.active_since_us > 0 => {
            UnitState::ActiveFor(now.saturating_sub(Duration::from_micros(s.active_since_us)))
        }
        Some(_) => UnitState::Unknown("active, but PID 1 gave no time it became so".into()),
        None => UnitState::Unknown("CLOCK_MONOTONIC unreadable".into()),
    }
}

/// dockerd's `live-restore` from its configuration file at `path`.
pub fn live_restore_of(path: &Path) -> LiveRestore {
    match std::fs::read_to_string(path) {
        Ok(text) => live_restore_in(path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => LiveRestore::Off(format!(
            "there is no {} (dockerd's default)",
            path.display()
        )),
        Err(e) => LiveRestore::Unknown(format!("{}: {e}", path.display())),
    }
}

/// `live-restore` in the text of `path`.
pub fn live_restore_in(path: &Path, text: &str) -> LiveRestore {
    let shown = path.display();
    if text.trim().is_empty() {
        // dockerd reads an empty file as no settings
        return LiveRestore::Off(format!("{shown} is empty"));
    }
    let parsed: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return LiveRestore::Unknown(format!("{shown} is not JSON: {e}")),
    };
    let Some(settings) = parsed.as_object() else {
        return LiveRestore::Unknown(format!("{shown} is not a JSON object"));
    };
    match settings.get("live-restore") {
        Some(serde_json::Value::Bool(true)) => LiveRestore::On,
        Some(serde_json::Value::Bool(false)) => {
            LiveRestore::Off(format!("{shown} sets \"live-restore\": false"))
        }
        Some(other) => LiveRestore::Unknown(format!(
            "{shown}: \"live-restore\" is {other}, not a boolean"
        )),
        None => LiveRestore::Off(format!("{shown} does not set \"live-restore\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("/etc/docker/daemon.json")
    }

    #[test]
    fn live_restore_is_on_only_when_the_file_says_true() {
        assert_eq!(
            live_restore_in(p(), r#"{"live-restore": true, "log-driver": "journald"}"#),
            LiveRestore::On
        );
        assert!(
            matches!(live_restore_in(p(), r#"{"live-restore": false}"#), LiveRestore::Off(s) if s.contains("false"))
        );
        assert!(
            matches!(live_restore_in(p(), r#"{"debug": true}"#), LiveRestore::Off(s) if s.contains("does not set"))
        );
        assert!(matches!(live_restore_in(p(), " \n"), LiveRestore::Off(_)));
    }

    #[test]
    fn a_daemon_json_that_cannot_be_read_leaves_live_restore_unknown_not_off() {
        assert!(
            matches!(live_restore_in(p(), "{not json"), LiveRestore::Unknown(s) if s.contains("not JSON"))
        );
        assert!(matches!(
            live_restore_in(p(), "[1]"),
            LiveRestore::Unknown(_)
        ));
        assert!(
            matches!(live_restore_in(p(), r#"{"live-restore": "yes"}"#), LiveRestore::Unknown(s) if s.contains("not a boolean"))
        );
        assert!(matches!(
            live_restore_of(Path::new("/nonexistent/pleg-guard/daemon.json")),
            LiveRestore::Off(s) if s.contains("there is no")
        ));
    }

    #[test]
    fn a_unit_is_up_for_the_time_since_it_became_active() {
        let s = |state: &str, since| ServiceState {
            active_state: state.into(),
            active_since_us: since,
            main_pid: 7,
            watchdog_usec: 0,
        };
        let now = Some(Duration::from_secs(100));
        assert_eq!(
            state_of(&s("active", 40_000_000), now),
            UnitState::ActiveFor(Duration::from_secs(60))
        );
        assert_eq!(
            state_of(&s("activating", 40_000_000), now),
            UnitState::NotActive("activating".into())
        );
        assert!(matches!(
            state_of(&s("active", 0), now),
            UnitState::Unknown(_)
        ));
        assert!(matches!(
            state_of(&s("active", 1), None),
            UnitState::Unknown(_)
        ));
    }
}
