//! The `containerd` target: containerd's CRI v1 service on its unix socket, asked what
//! kubelet's PLEG asks when it relists on a containerd node — `Version`, then
//! `ListPodSandbox`, `ListContainers` and one `ContainerStatus` — one call at a time, the whole
//! bounded by the round's deadline (see [`crate::client::cri::relist`]). A call still
//! unanswered at the deadline is abandoned with its connection; the next round dials afresh.
//!
//! What counts as absent (not a problem): the target disabled, no socket at the path, or a
//! containerd that does not serve CRI at all (`Unimplemented`: the CRI plugin is disabled, as
//! in the containerd that docker runs for itself). A socket nobody accepts on, a gRPC error or
//! a nonsense reply is `error`; no answer in time is `unresponsive`.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::{Probe, RoundContext, round_ms};
use crate::client::cri::{self, Call, CriError, Relist};
use crate::target::{ContainerRef, Facts, Observation, Target, TargetState};

/// Probes containerd's CRI service. Keeps no connection between rounds: a relist dials,
/// makes its four calls and hangs up, as cheap as a unix socket connect.
pub struct ContainerdProbe {
    enabled: bool,
    socket: PathBuf,
}

impl ContainerdProbe {
    /// A probe of the CRI service at `socket`.
    pub fn new(enabled: bool, socket: PathBuf) -> Self {
        ContainerdProbe { enabled, socket }
    }

    /// Relist once before `deadline`.
    pub async fn probe(&self, deadline: Instant, slow_after: Duration) -> Observation {
        if !self.enabled {
            return Observation::absent(Target::Containerd, "disabled in config");
        }
        if !self.socket.exists() {
            return Observation::absent(
                Target::Containerd,
                format!("no containerd socket at {}", self.socket.display()),
            );
        }
        let start = Instant::now();
        let budget = deadline.saturating_duration_since(start);
        let result = cri::relist(&self.socket, budget).await;
        observe(result, start.elapsed(), slow_after)
    }
}

/// The observation for one relist's outcome (pure, so the mapping is tested without a
/// runtime). `elapsed` is the wall time of the whole relist.
pub fn observe(
    result: Result<Relist, CriError>,
    elapsed: Duration,
    slow_after: Duration,
) -> Observation {
    let relist = match result {
        Ok(r) => r,
        Err(e) => return failed(e, elapsed),
    };
    let latency = relist.timings.total;
    let unknown_containers: Vec<ContainerRef> = relist
        .unknown_containers()
        .map(|c| ContainerRef {
            id: short(&c.id),
            name: c.display_name(),
        })
        .collect();
    let unknown_sandboxes: Vec<ContainerRef> = relist
        .unknown_sandboxes()
        .map(|s| ContainerRef {
            id: short(&s.id),
            name: s.display_name(),
        })
        .collect();
    let runtime = format!(
        "{} {}",
        relist.version.runtime_name, relist.version.runtime_version
    );
    let mut detail = format!(
        "{runtime} (CRI {}): {} pod sandbox(es), {} container(s), relist {}",
        relist.version.runtime_api_version,
        relist.sandboxes.len(),
        relist.containers.len(),
        humantime::format_duration(round_ms(latency)),
    );
    let unknown: Vec<String> = unknown_containers
        .iter()
        .map(|c| format!("container {} ({})", c.name, c.id))
        .chain(
            unknown_sandboxes
                .iter()
                .map(|s| format!("pod sandbox {} ({})", s.name, s.id)),
        )
        .collect();
    if !unknown.is_empty() {
        detail = format!("{detail}; in an unknown state: {}", unknown.join(", "));
    }
    Observation {
        target: Target::Containerd,
        state: super::answered(latency, slow_after),
        latency,
        detail,
        facts: Facts {
            containers: Some(relist.containers.len()),
            sandboxes: Some(relist.sandboxes.len()),
            runtime_version: Some(runtime),
            unknown_containers,
            unknown_sandboxes,
            ..Facts::default()
        },
    }
}

fn failed(e: CriError, elapsed: Duration) -> Observation {
    let (state, latency) = match &e {
        CriError::NotInstalled { path } => {
            return Observation::absent(
                Target::Containerd,
                format!("no containerd socket at {}", path.display()),
            );
        }
        // A runtime on the socket that does not serve CRI v1: containerd with its CRI plugin
        // disabled (docker's own containerd, `disabled_plugins = ["cri"]`), which kubelet
        // cannot use either. Nothing to watch there.
        CriError::Rpc {
            call: Call::Version,
            code: tonic::Code::Unimplemented,
            ..
        } => {
            return Observation::absent(
                Target::Containerd,
                format!("{e} (the socket does not serve CRI v1: CRI plugin disabled?)"),
            );
        }
        CriError::Timeout { elapsed, .. } => (TargetState::Unresponsive, *elapsed),
        CriError::Refused { .. }
        | CriError::Connect { .. }
        | CriError::Rpc { .. }
        | CriError::Protocol { .. } => (TargetState::Error, elapsed),
    };
    let detail = match &e {
        CriError::Timeout { call, elapsed, .. } => format!(
            "CRI {call}: no answer within {}; call abandoned",
            humantime::format_duration(round_ms(*elapsed))
        ),
        other => error_chain(other),
    };
    Observation {
        target: Target::Containerd,
        state,
        latency,
        detail,
        facts: Facts::default(),
    }
}

/// The error and its sources, `: `-joined.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out = format!("{out}: {s}");
        source = s.source();
    }
    out
}

/// The first 12 characters of a CRI id (ids are hex, as docker's).
fn short(id: &str) -> String {
    id.get(..12).unwrap_or(id).to_owned()
}

impl Probe for ContainerdProbe {
    fn target(&self) -> Target {
        Target::Containerd
    }

    fn observe<'a>(&'a mut self, round: &'a RoundContext<'_>) -> BoxFuture<'a, Observation> {
        self.probe(round.deadline, round.slow_after).boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::client::cri::{
        Container, ContainerState, RuntimeVersion, Sandbox, SandboxState, Timings,
    };

    fn relist(containers: Vec<Container>, sandboxes: Vec<Sandbox>, total_ms: u64) -> Relist {
        Relist {
            version: RuntimeVersion {
                runtime_name: "containerd".into(),
                runtime_version: "1.6.20~ds1".into(),
                runtime_api_version: "v1".into(),
            },
            sandboxes,
            containers,
            status_check: None,
            timings: Timings {
                total: Duration::from_millis(total_ms),
                ..Timings::default()
            },
        }
    }

    fn container(id: &str, name: &str, state: ContainerState) -> Container {
        Container {
            id: id.into(),
            sandbox_id: "s".into(),
            name: Some(name.into()),
            attempt: 0,
            state,
        }
    }

    const SLOW: Duration = Duration::from_secs(1);

    #[test]
    fn a_healthy_relist_is_ok_with_counts() {
        let r = relist(
            vec![container("c1", "app", ContainerState::Running)],
            vec![Sandbox {
                id: "s1".into(),
                name: Some("web".into()),
                namespace: Some("default".into()),
                attempt: 0,
                state: SandboxState::NotReady,
            }],
            3,
        );
        let o = observe(Ok(r), Duration::from_millis(4), SLOW);
        assert_eq!(o.state, TargetState::Ok);
        assert_eq!(o.latency, Duration::from_millis(3));
        assert_eq!(
            o.detail,
            "containerd 1.6.20~ds1 (CRI v1): 1 pod sandbox(es), 1 container(s), relist 3ms"
        );
        assert_eq!(o.facts.containers, Some(1));
        assert_eq!(o.facts.sandboxes, Some(1));
        assert!(
            o.facts.unknown_containers.is_empty(),
            "notready is no unknown"
        );
        assert!(o.facts.unknown_sandboxes.is_empty());
    }

    #[test]
    fn unknown_containers_and_sandboxes_are_named() {
        let r = relist(
            vec![
                container("0123456789abcdef", "app", ContainerState::Unknown),
                container("c2", "side", ContainerState::Unrecognized(7)),
                container("c3", "ok", ContainerState::Exited),
            ],
            vec![Sandbox {
                id: "s9".into(),
                name: Some("web".into()),
                namespace: Some("prod".into()),
                attempt: 0,
                state: SandboxState::Unrecognized(5),
            }],
            1500,
        );
        let o = observe(Ok(r), Duration::from_millis(1500), SLOW);
        assert_eq!(o.state, TargetState::Slow);
        let names: Vec<(&str, &str)> = o
            .facts
            .unknown_containers
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(names, vec![("0123456789ab", "app"), ("c2", "side")]);
        assert_eq!(o.facts.unknown_sandboxes[0].name, "prod/web");
        assert!(
            o.detail.ends_with(
                "in an unknown state: container app (0123456789ab), container side (c2), pod sandbox prod/web (s9)"
            ),
            "{}",
            o.detail
        );
    }

    #[test]
    fn a_hung_call_is_unresponsive_and_names_the_call() {
        let e = CriError::Timeout {
            call: Call::ListPodSandbox,
            deadline: Duration::from_secs(2),
            elapsed: Duration::from_millis(2001),
        };
        let o = observe(Err(e), Duration::from_millis(2003), SLOW);
        assert_eq!(o.state, TargetState::Unresponsive);
        assert_eq!(o.latency, Duration::from_millis(2001));
        assert_eq!(
            o.detail,
            "CRI ListPodSandbox: no answer within 2s 1ms; call abandoned"
        );
    }

    #[test]
    fn no_socket_and_no_cri_are_absent_refused_is_error() {
        let o = observe(
            Err(CriError::NotInstalled {
                path: Path::new("/run/containerd/containerd.sock").into(),
            }),
            Duration::ZERO,
            SLOW,
        );
        assert_eq!(o.state, TargetState::Absent);
        let o = observe(
            Err(CriError::Rpc {
                call: Call::Version,
                code: tonic::Code::Unimplemented,
                message: "unknown service runtime.v1.RuntimeService".into(),
            }),
            Duration::from_millis(1),
            SLOW,
        );
        assert_eq!(o.state, TargetState::Absent, "{}", o.detail);
        assert!(o.detail.contains("does not serve CRI v1"), "{}", o.detail);
        let o = observe(
            Err(CriError::Refused {
                path: Path::new("/run/containerd/containerd.sock").into(),
                source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            }),
            Duration::from_millis(1),
            SLOW,
        );
        assert_eq!(o.state, TargetState::Error);
        assert!(o.detail.contains("refused"), "{}", o.detail);
        let o = observe(
            Err(CriError::Rpc {
                call: Call::ListContainers,
                code: tonic::Code::Internal,
                message: "boom".into(),
            }),
            Duration::from_millis(1),
            SLOW,
        );
        assert_eq!(o.state, TargetState::Error);
    }
}
