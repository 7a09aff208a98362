//! The `docker` target: the engine API on its unix socket, asked what kubelet's PLEG relist
//! asks — `_ping`, then the equivalent of `docker ps -a`, then an inspect of one container —
//! and counting the containers in state `dead`.
//!
//! bollard's own timeout covers only the response headers, so each whole call is bounded by
//! the round's deadline instead; an abandoned call drops the client and its connection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerSummaryStateEnum;
use bollard::query_parameters::ListContainersOptions;
use tokio::time::Instant;

use super::{observation, timed};
use crate::target::{ContainerRef, Facts, Observation, Target};

/// Probes the docker engine and keeps its client between rounds.
pub struct DockerProbe {
    enabled: bool,
    socket: PathBuf,
    client: Option<Docker>,
}

/// What one successful docker probe saw.
#[derive(Debug, Default)]
struct Listing {
    total: usize,
    dead: Vec<ContainerRef>,
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
            listing = list(&docker).await?;
            Ok::<_, anyhow::Error>(format!(
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

/// Connect to the engine at `socket` and agree on an API version (`_ping` tells the engine's;
/// an old engine refuses a client that asks for a newer one).
pub async fn connect(socket: &Path) -> anyhow::Result<Docker> {
    let path = socket
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("docker socket path is not UTF-8"))?;
    let docker = Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION)?;
    let docker = docker.negotiate_version().await?;
    Ok(docker)
}

/// `docker ps -a`, then inspect the newest container (as PLEG's relist does), noting the dead.
async fn list(docker: &Docker) -> anyhow::Result<Listing> {
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            ..Default::default()
        }))
        .await?;
    if let Some(id) = containers.first().and_then(|c| c.id.as_deref()) {
        docker.inspect_container(id, None).await?;
    }
    let mut dead = Vec::new();
    for c in containers.iter().filter(|c| may_be_dead(c)) {
        if let Some(id) = c.id.as_deref() {
            if is_dead(docker, id).await? {
                dead.push(container_ref(c));
            }
        }
    }
    Ok(Listing {
        total: containers.len(),
        dead,
    })
}

/// Whether a listed container may be dead. The listing is not enough either way: after a
/// failed removal docker (20.10 at least) keeps listing the container as `removing`
/// ("Removal In Progress") while its inspected state is `dead`, so both are candidates and
/// [`is_dead`] decides.
pub fn may_be_dead(c: &bollard::models::ContainerSummary) -> bool {
    matches!(
        c.state,
        Some(ContainerSummaryStateEnum::DEAD) | Some(ContainerSummaryStateEnum::REMOVING)
    )
}

/// Whether the container's inspected state is `dead`.
pub async fn is_dead(docker: &Docker, id: &str) -> Result<bool, bollard::errors::Error> {
    let info = docker.inspect_container(id, None).await?;
    Ok(info.state.as_ref().and_then(|s| s.status)
        == Some(bollard::models::ContainerStateStatusEnum::DEAD))
}

/// Short id and name of a listed container.
pub fn container_ref(c: &bollard::models::ContainerSummary) -> ContainerRef {
    let id = c.id.as_deref().unwrap_or("?");
    let name = c
        .names
        .as_ref()
        .and_then(|n| n.first())
        .map(|n| n.trim_start_matches('/').to_owned())
        .unwrap_or_default();
    ContainerRef {
        id: id.get(..12).unwrap_or(id).to_owned(),
        name,
    }
}
