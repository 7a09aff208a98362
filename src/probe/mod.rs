//! Probes: one bounded call per target per round, all targets concurrently.
//!
//! Every call runs under a deadline (`probe.timeout` from the round's start). A call that has
//! not answered by then is dropped: its future, and with it the request, is abandoned, and the
//! connection it used is closed and opened afresh next round. Nothing is retried within a
//! round and nothing is spawned that could outlive it, so a hung bus or engine costs one
//! socket per target per round, never a growing pile of calls — the failure that took kubelet
//! down was exactly such a pile. A failed target is asked again off the round by [`reask`],
//! which keeps to the same rule: one call in flight per target (the round skips it meanwhile).
//!
//! Each target's probe is one file implementing [`Probe`]: it gets the round's deadline and
//! the shared system bus connection ([`RoundContext`]) and gives one [`Observation`].

pub mod containerd;
pub mod dbus;
pub mod docker;
pub mod kubelet;
pub mod logind;
pub mod reask;
pub mod systemd;

use std::future::Future;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared, join_all};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::config::Config;
use crate::target::{Observation, PathResult, Round, Target, TargetState};

/// The probes of every target, with the connections they keep between rounds.
pub struct Prober {
    timeout: Duration,
    slow_after: Duration,
    bus: dbus::SystemBus,
    probes: Probes,
}

/// One probe per target. A new target is a file with a type implementing [`Probe`], a field
/// here and its place in [`Probes::all`].
struct Probes {
    dbus: dbus::DbusProbe,
    systemd: systemd::SystemdProbe,
    logind: logind::LogindProbe,
    docker: docker::DockerProbe,
    containerd: containerd::ContainerdProbe,
    kubelet: kubelet::KubeletProbe,
}

impl Probes {
    /// Every probe, in [`Target::ALL`] order (the round's observations keep it).
    fn all(&mut self) -> [&mut dyn Probe; 6] {
        [
            &mut self.dbus,
            &mut self.systemd,
            &mut self.logind,
            &mut self.docker,
            &mut self.containerd,
            &mut self.kubelet,
        ]
    }
}

/// The round as every probe sees it.
pub struct RoundContext<'b> {
    /// When the round started: a failure before the call itself counts its latency from here.
    pub start: Instant,
    /// Every call still running at this instant is abandoned.
    pub deadline: Instant,
    /// Latency above which an answer is `slow`.
    pub slow_after: Duration,
    /// The round's system bus connection, shared by the bus targets: made at most once per
    /// round, and only when a probe awaits it.
    pub bus: Shared<BoxFuture<'b, BusState>>,
}

/// One target's probe: one bounded observation per round.
pub trait Probe: Send {
    /// The target it observes.
    fn target(&self) -> Target;

    /// Whether it talks over the shared system bus (a failed connect then resets it).
    fn uses_bus(&self) -> bool {
        false
    }

    /// Observe the target once, within `round.deadline`.
    fn observe<'a>(&'a mut self, round: &'a RoundContext<'_>) -> BoxFuture<'a, Observation>;
}

impl Prober {
    /// Probes set up from the configuration. Connects to nothing yet.
    pub fn new(config: &Config) -> Self {
        Prober {
            timeout: config.probe.timeout,
            slow_after: config.probe.slow_after,
            bus: dbus::SystemBus::new(config.dbus.enabled, config.dbus.socket.clone()),
            probes: Probes {
                dbus: dbus::DbusProbe::new(config.dbus.enabled, config.dbus.socket.clone()),
                systemd: systemd::SystemdProbe::new(config.systemd.private_socket.clone()),
                logind: logind::LogindProbe::new(config.logind.enabled && config.dbus.enabled),
                docker: docker::DockerProbe::new(
                    config.docker.enabled,
                    config.docker.socket.clone(),
                ),
                containerd: containerd::ContainerdProbe::new(
                    config.containerd.enabled,
                    config.containerd.socket.clone(),
                ),
                kubelet: kubelet::KubeletProbe::new(&config.kubelet, config.docker.socket.clone()),
            },
        }
    }

    /// The re-ask's probes ([`reask`]): their own connections, and PID 1 on the bus gets
    /// nothing but `GetUnit`.
    pub fn for_reask(config: &Config) -> Self {
        let mut p = Prober::new(config);
        p.probes.systemd = systemd::SystemdProbe::new(config.systemd.private_socket.clone())
            .without_version_on_bus();
        p
    }

    /// Follow kubelet's journal continuously (for the daemon; see
    /// [`crate::client::journal::follow`]).
    pub fn follow_kubelet_journal(&mut self) {
        self.probes.kubelet.follow_journal();
    }

    /// Ignore kubelet log lines older than `t` (set after kubelet was restarted, so the lines
    /// of the wedged instance do not count against the new one).
    pub fn ignore_kubelet_logs_before(&mut self, t: SystemTime) {
        self.probes.kubelet.ignore_logs_before(t);
    }

    /// Probe every target once, concurrently. Returns within about `probe.timeout`.
    pub async fn round(&mut self) -> Round {
        self.round_of(|_| true).await
    }

    /// Probe the targets `asked` names once, concurrently; the round holds their
    /// observations only (a target being re-asked elsewhere is skipped: one call in flight
    /// per target). Returns within about `probe.timeout`.
    pub async fn round_of(&mut self, asked: impl Fn(Target) -> bool) -> Round {
        let at = SystemTime::now();
        let start = Instant::now();
        let deadline = crate::clock::deadline(start, self.timeout);

        // The bus connection is shared by the three bus targets. It is (re)made once per
        // round under the same deadline, concurrently with everything that does not need it
        // (PID 1's private socket, docker, kubelet), so a hung bus daemon costs one connect
        // per round and delays nothing else. A node without a bus has no bus failure either.
        let bus_enabled = self.bus.enabled();
        let bus_present = self.bus.socket_exists();
        let bus = &mut self.bus;
        let connect: BoxFuture<'_, BusState> = async move {
            if !(bus_enabled && bus_present) {
                return BusState::Absent;
            }
            match bounded(deadline, bus.connection()).await {
                Ok(Ok(conn)) => BusState::Up(conn),
                Ok(Err(e)) => BusState::Failed(Failure::Error(format!("system bus: {e}"))),
                Err(()) => BusState::Failed(Failure::Timeout),
            }
        }
        .boxed();
        let round = RoundContext {
            start,
            deadline,
            slow_after: self.slow_after,
            bus: connect.shared(),
        };
        let probes: Vec<&mut dyn Probe> = self
            .probes
            .all()
            .into_iter()
            .filter(|p| asked(p.target()))
            .collect();
        let bus_asked = probes.iter().any(|p| p.uses_bus());
        let observations: Vec<Observation> =
            join_all(probes.into_iter().map(|p| p.observe(&round))).await;

        // A failed bus call may have left the shared connection wedged: start afresh.
        let bus_failed = bus_asked && matches!(round.bus.clone().await, BusState::Failed(_));
        drop(round);
        let dbus_failed = observations
            .iter()
            .any(|o| o.target == Target::Dbus && o.state.is_failure());
        if dbus_failed || bus_failed {
            self.bus.reset();
        }
        Round { at, observations }
    }

    /// Start the next round with a fresh system bus connection (the re-ask does after a
    /// failed bus call: a new call never waits behind an abandoned one on the same connection).
    pub fn reset_bus(&mut self) {
        self.bus.reset();
    }
    /// Read the systemd package version from the distribution's package database.
    pub async fn package_version(&self) -> Option<String> {
        systemd::package_version(self.timeout).await
    }
}

/// The shared system bus connection's state in a round.
#[derive(Clone)]
pub enum BusState {
    /// No bus on this node (or the bus probes are disabled).
    Absent,
    /// Connected.
    Up(zbus::Connection),
    /// Connecting failed.
    Failed(Failure),
}

/// Why a call produced no answer.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The deadline passed; the call was abandoned.
    Timeout,
    /// The call failed.
    Error(String),
}

impl Failure {
    /// A path result for a failure that happened before the call itself: `what` failed
    /// (e.g. "connecting to the system bus"); latency counts from the round's `start`.
    pub fn into_path(self, start: Instant, what: &str) -> PathResult {
        let latency = start.elapsed();
        match self {
            Failure::Timeout => PathResult {
                state: TargetState::Unresponsive,
                latency,
                detail: format!(
                    "{what}: no answer within {}; call abandoned",
                    humantime::format_duration(round_ms(latency))
                ),
            },
            Failure::Error(e) => PathResult {
                state: TargetState::Error,
                latency,
                detail: e,
            },
        }
    }
}

/// Run `fut` until `deadline`; `Err(())` when the deadline passed first (the future is dropped).
pub async fn bounded<T>(deadline: Instant, fut: impl Future<Output = T>) -> Result<T, ()> {
    tokio::time::timeout_at(deadline, fut).await.map_err(|_| ())
}

/// Run one probe call until `deadline`, measuring its latency, and classify the outcome:
/// `Ok(detail)` is `ok` (or `slow` above `slow_after`), `Err` is `error`, no answer is
/// `unresponsive`.
pub async fn timed<E: std::fmt::Display>(
    deadline: Instant,
    slow_after: Duration,
    fut: impl Future<Output = Result<String, E>>,
) -> PathResult {
    timed_with_error(deadline, slow_after, fut).await.0
}

/// [`timed`], also handing back the error itself when the call failed, so the caller can tell
/// its kind by its type (never by its text).
pub async fn timed_with_error<E: std::fmt::Display>(
    deadline: Instant,
    slow_after: Duration,
    fut: impl Future<Output = Result<String, E>>,
) -> (PathResult, Option<E>) {
    let start = Instant::now();
    let result = bounded(deadline, fut).await;
    let latency = start.elapsed();
    let mut error = None;
    let path = match result {
        Ok(Ok(detail)) => PathResult {
            state: answered(latency, slow_after),
            latency,
            detail,
        },
        Ok(Err(e)) => {
            let path = PathResult {
                state: TargetState::Error,
                latency,
                detail: e.to_string(),
            };
            error = Some(e);
            path
        }
        Err(()) => PathResult {
            state: TargetState::Unresponsive,
            latency,
            detail: format!(
                "no answer within {}; call abandoned",
                humantime::format_duration(round_ms(latency))
            ),
        },
    };
    (path, error)
}

/// An observation whose state, latency and detail are one path's.
pub fn observation(target: Target, path: PathResult) -> Observation {
    Observation {
        target,
        state: path.state,
        latency: path.latency,
        detail: path.detail,
        facts: Default::default(),
    }
}

/// The state of a call that answered: `ok`, or `slow` above `slow_after`.
pub fn answered(latency: Duration, slow_after: Duration) -> TargetState {
    if latency > slow_after {
        TargetState::Slow
    } else {
        TargetState::Ok
    }
}

/// A duration rounded to whole milliseconds, for messages.
pub fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
