//! The `docker` target: the engine API on its unix socket, asked what kubelet's PLEG relist
//! asks — `_ping`, then the equivalent of `docker ps -a`, then an inspect of one container —
//! and counting the containers in state `dead`.
//!
//! The calls are the docker client's ([`crate::client::docker`]); each whole call is bounded by
//! the round's deadline; an abandoned call drops the client and its connection.

use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::{Probe, RoundContext, observation, timed};
use crate::client::docker::{Listing, connect, relist};
use crate::target::{Facts, Observation, Target};

/// Probes the docker engine and keeps its client between rounds.
pub struct DockerProbe {
    enabled: bool,
    socket: PathBuf,
    client: Option<Docker>,
}

impl DockerProbe {
    /// A probe of the engine at `socket`.
    pub fn new(enabled: bool, socket: PathBuf) -> Self {
        DockerProbe {
            enabled,
            socket,
            client: None,
        }
    }

    /// Probe once before `deadline`.
    pub async fn probe(&mut self, deadline: Instant, slow_after: Duration) -> Observation {
        if !self.enabled {
            return Observation::absent(Target::Docker, "disabled in config");
        }
        if !self.socket.exists() {
            self.client = None;
            return Observation::absent(
                Target::Docker,
                format!("no docker socket at {}", self.socket.display()),
            );
        }
        let mut listing = Listing::default();
        let cached = self.client.clone();
        let mut made = None;
        let path = timed(deadline, slow_after, async {
            let docker = match cached {
                Some(d) => d,
                None => {
                    let d = connect(&self.socket).await?;
                    made = Some(d.clone());
                    d
                }
            };
            listing = relist(&docker).await?;
            Ok::<_, crate::client::Error>(format!(
                "{} container(s), {} dead",
                listing.total,
                listing.dead.len()
            ))
        })
        .await;
        if path.state.is_failure() {
            self.client = None;
        } else if made.is_some() {
            self.client = made;
        }
        let mut obs = observation(Target::Docker, path);
        if !obs.state.is_failure() {
            if !listing.dead.is_empty() {
                let names: Vec<&str> = listing.dead.iter().map(|c| c.name.as_str()).collect();
                obs.detail = format!("{}: {}", obs.detail, names.join(", "));
            }
            obs.facts = Facts {
                containers: Some(listing.total),
                dead_containers: listing.dead,
                ..Facts::default()
            };
        }
        obs
    }
}

impl Probe for DockerProbe {
    fn target(&self) -> Target {
        Target::Docker
    }

    fn observe<'a>(&'a mut self, round: &'a RoundContext<'_>) -> BoxFuture<'a, Observation> {
        self.probe(round.deadline, round.slow_after).boxed()
    }
}
