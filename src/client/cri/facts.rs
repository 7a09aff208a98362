//! What a relist found, as plain data, and the pure conversions from CRI replies to it.
//! Replies are taken as untrusted: missing metadata, empty strings and enum values this
//! version does not know become `None` / `Unrecognized`, never a panic.

use std::time::Duration;

use super::proto;

/// The runtime's `Version` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeVersion {
    /// e.g. `containerd`
    pub runtime_name: String,
    /// e.g. `1.6.20~ds1`
    pub runtime_version: String,
    /// CRI API version the runtime serves, e.g. `v1`
    pub runtime_api_version: String,
}

/// A pod sandbox's state. CRI v1 has no "unknown" sandbox state: a value outside the enum is
/// kept as `Unrecognized` and counts as unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
    Unrecognized(i32),
}

/// A container's state; `Unknown` is CRI's `CONTAINER_UNKNOWN` (the runtime lost track of it,
/// e.g. its shim is gone), `Unrecognized` a value outside the enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
    Unrecognized(i32),
}

impl SandboxState {
    pub fn from_wire(v: i32) -> SandboxState {
        match proto::PodSandboxState::try_from(v) {
            Ok(proto::PodSandboxState::SandboxReady) => SandboxState::Ready,
            Ok(proto::PodSandboxState::SandboxNotready) => SandboxState::NotReady,
            Err(_) => SandboxState::Unrecognized(v),
        }
    }
    /// Whether the runtime reports a state we cannot name.
    pub fn is_unknown(self) -> bool {
        matches!(self, SandboxState::Unrecognized(_))
    }
}

impl ContainerState {
    pub fn from_wire(v: i32) -> ContainerState {
        match proto::ContainerState::try_from(v) {
            Ok(proto::ContainerState::ContainerCreated) => ContainerState::Created,
            Ok(proto::ContainerState::ContainerRunning) => ContainerState::Running,
            Ok(proto::ContainerState::ContainerExited) => ContainerState::Exited,
            Ok(proto::ContainerState::ContainerUnknown) => ContainerState::Unknown,
            Err(_) => ContainerState::Unrecognized(v),
        }
    }
    /// `CONTAINER_UNKNOWN` or a value outside the enum.
    pub fn is_unknown(self) -> bool {
        matches!(
            self,
            ContainerState::Unknown | ContainerState::Unrecognized(_)
        )
    }
}

/// One pod sandbox from `ListPodSandbox`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    /// `metadata.name`; None when the runtime sent no metadata or an empty name.
    pub name: Option<String>,
    /// `metadata.namespace` (Kubernetes namespace); None when absent or empty.
    pub namespace: Option<String>,
    pub attempt: u32,
    pub state: SandboxState,
}

/// One container from `ListContainers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub sandbox_id: String,
    /// `metadata.name`; None when the runtime sent no metadata or an empty name.
    pub name: Option<String>,
    pub attempt: u32,
    pub state: ContainerState,
}

impl Sandbox {
    /// `namespace/name` when known, else the id: what a finding names it by.
    pub fn display_name(&self) -> String {
        display(&self.namespace, &self.name, &self.id)
    }
}

impl Container {
    /// The container's name when known, else its id.
    pub fn display_name(&self) -> String {
        display(&None, &self.name, &self.id)
    }
}

fn display(namespace: &Option<String>, name: &Option<String>, id: &str) -> String {
    match (namespace, name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) => n.clone(),
        _ => id.to_string(),
    }
}

/// The one `ContainerStatus` call of a relist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerStatusCheck {
    /// The runtime described the container.
    Found {
        id: String,
        state: ContainerState,
        /// CRI's `reason` (e.g. `Completed`, `Error`); None when empty.
        reason: Option<String>,
    },
    /// The container went away between `ListContainers` and `ContainerStatus` (`NotFound`):
    /// a normal race, not a fault.
    Gone { id: String },
}

/// How long each step took (the first connect included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    pub connect: Duration,
    pub version: Duration,
    pub list_pod_sandbox: Duration,
    pub list_containers: Duration,
    /// None when there was no container to ask about.
    pub container_status: Option<Duration>,
    pub total: Duration,
}

/// Everything one relist learnt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relist {
    pub version: RuntimeVersion,
    pub sandboxes: Vec<Sandbox>,
    pub containers: Vec<Container>,
    /// None when `ListContainers` returned no container.
    pub status_check: Option<ContainerStatusCheck>,
    pub timings: Timings,
}

impl Relist {
    /// Sandboxes in a state the runtime cannot (or we cannot) name.
    pub fn unknown_sandboxes(&self) -> impl Iterator<Item = &Sandbox> {
        self.sandboxes.iter().filter(|s| s.state.is_unknown())
    }
    /// Containers in `CONTAINER_UNKNOWN` or an unrecognized state.
    pub fn unknown_containers(&self) -> impl Iterator<Item = &Container> {
        self.containers.iter().filter(|c| c.state.is_unknown())
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// `Version`'s reply. An empty runtime name is not a runtime: Err(detail).
pub fn runtime_version(r: proto::VersionResponse) -> Result<RuntimeVersion, String> {
    if r.runtime_name.is_empty() {
        return Err("Version reply has an empty runtime_name".into());
    }
    Ok(RuntimeVersion {
        runtime_name: r.runtime_name,
        runtime_version: r.runtime_version,
        runtime_api_version: r.runtime_api_version,
    })
}

/// `ListPodSandbox`'s reply. An item without an id cannot be a sandbox: Err(detail).
pub fn sandboxes(r: proto::ListPodSandboxResponse) -> Result<Vec<Sandbox>, String> {
    r.items
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            if s.id.is_empty() {
                return Err(format!("ListPodSandbox item {i} has an empty id"));
            }
            let md = s.metadata.unwrap_or_default();
            Ok(Sandbox {
                name: non_empty(&md.name),
                namespace: non_empty(&md.namespace),
                attempt: md.attempt,
                state: SandboxState::from_wire(s.state),
                id: s.id,
            })
        })
        .collect()
}

/// `ListContainers`' reply. An item without an id cannot be a container: Err(detail).
pub fn containers(r: proto::ListContainersResponse) -> Result<Vec<Container>, String> {
    r.containers
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            if c.id.is_empty() {
                return Err(format!("ListContainers item {i} has an empty id"));
            }
            let md = c.metadata.unwrap_or_default();
            Ok(Container {
                name: non_empty(&md.name),
                attempt: md.attempt,
                state: ContainerState::from_wire(c.state),
                sandbox_id: c.pod_sandbox_id,
                id: c.id,
            })
        })
        .collect()
}

/// Which container the relist's one `ContainerStatus` asks about: like PLEG, one whose state
/// matters most — an unknown one first, else a running one, else the first listed.
pub fn container_to_check(containers: &[Container]) -> Option<&Container> {
    containers
        .iter()
        .find(|c| c.state.is_unknown())
        .or_else(|| {
            containers
                .iter()
                .find(|c| c.state == ContainerState::Running)
        })
        .or_else(|| containers.first())
}

/// `ContainerStatus`'s reply for container `id`. A reply without a status, or about another
/// container, is nonsense: Err(detail). (An empty id in the status is taken as `id`.)
pub fn status_check(
    id: &str,
    r: proto::ContainerStatusResponse,
) -> Result<ContainerStatusCheck, String> {
    let Some(st) = r.status else {
        return Err(format!("ContainerStatus reply for {id} has no status"));
    };
    if !st.id.is_empty() && st.id != id {
        return Err(format!(
            "ContainerStatus reply for {id} describes container {:?}",
            st.id
        ));
    }
    Ok(ContainerStatusCheck::Found {
        state: ContainerState::from_wire(st.state),
        reason: non_empty(&st.reason),
        id: id.to_string(),
    })
}
