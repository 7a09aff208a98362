//! The fleet-wide disruption budget (issue 21): a pool never has more than `max_disruptive`
//! nodes in a disruptive repair at once. One core that every backend serves:
//!
//! - this file: [`Fleet`], the handle the daemon holds (it never blocks on a backend), and the
//!   types every part shares (urgency, slot state, the group's view, errors by kind);
//! - [`policy`]: when an action waits for its slot and when it acts without one (pure);
//! - [`storm`]: the storm guard, when a group's sick members pause repairs (pure);
//! - [`settings`]: the `[fleet]` settings and what makes each value valid;
//! - [`backend`]: what the handle and a backend say to each other, and the backends, one
//!   folder each ([`backend::etcd`], [`backend::kubernetes`]).

pub mod backend;
pub mod policy;
pub mod settings;
pub mod storm;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};

use backend::{Command, Shared};

use crate::target::ActionKind;
pub use settings::{Backend, FleetConfig, MaxDisruptive, OnUnreachable, Secret};

/// How urgent a slot request is: emergencies go first in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Urgency {
    /// A cure for a node that is already wedged.
    Emergency,
    /// The forecast's planned reexec, hours ahead of the serials running out.
    Planned,
}

/// Where this node's slot request stands.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum SlotState {
    /// No request, or one not answered yet.
    Idle,
    /// Queued.
    Waiting {
        /// Since when this node asks.
        since: SystemTime,
        /// Waiters ahead of this node that free slots go to first.
        position: usize,
        /// Slots held now.
        holders: usize,
        /// Slots in the group now.
        max: usize,
    },
    /// This node holds a slot.
    Granted {
        /// Since when.
        since: SystemTime,
        /// etcd's revision of the grant.
        revision: i64,
    },
    /// etcd does not answer (down, partitioned, no quorum).
    Unreachable {
        /// Since when.
        since: SystemTime,
        /// What failed.
        error: String,
    },
    /// etcd refuses this node (TLS, auth, permission): not transient, an operator must act.
    Rejected {
        /// What etcd or the TLS layer said.
        error: String,
    },
}

impl SlotState {
    /// The state of a request while its store is down (since `since`) or refuses this node:
    /// `Rejected` for a refusal an operator must mend, `Unreachable` otherwise.
    pub fn down(since: SystemTime, e: &FleetError) -> SlotState {
        if e.is_rejection() {
            SlotState::Rejected {
                error: e.to_string(),
            }
        } else {
            SlotState::Unreachable {
                since,
                error: e.to_string(),
            }
        }
    }
}

/// A holder of a slot, as the group shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The node.
    pub node: String,
    /// Its action (the contract's name; `?` when its key cannot be read).
    pub action: String,
    /// Since when it holds the slot.
    pub since: SystemTime,
    /// A key under `holders/` that is no slot this version writes (written by hand, or by
    /// another version): it blocks every grant of the group until it is deleted. None: a slot.
    pub stray_key: Option<String>,
}

/// The line status and `check-config --connect` show for a stray holder key
/// ([`Holder::stray_key`]).
pub fn stray_holder_line(key: &str) -> String {
    format!("holder ? at {key}: no slot of this version; every grant waits until it is deleted")
}

/// The group as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetView {
    /// `[fleet] group`.
    pub group: String,
    /// Live members (None: not read yet).
    pub members_alive: Option<usize>,
    /// The slots the group has now (None: not read yet).
    pub max_disruptive: Option<usize>,
    /// Who holds a slot.
    pub holders: Vec<Holder>,
    /// How many nodes wait for one.
    pub waiting: usize,
    /// Whether etcd answered the latest request.
    pub reachable: bool,
    /// The latest error (None since etcd last answered).
    pub last_error: Option<String>,
    /// Grants this node lost without releasing them (its lease expired while it held a slot).
    pub expired: u64,
    /// The group's health as its member keys said at the latest read (None: not read; it is
    /// read only while this node asks for a disruptive repair).
    pub health: Option<GroupHealth>,
}

/// The group's health, for the storm guard ([`storm`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupHealth {
    /// Live members.
    pub members: usize,
    /// Members reporting findings that need a repair (none exempt), by name.
    pub unhealthy: Vec<String>,
    /// Whether that is a storm under `max_unhealthy`.
    pub storming: bool,
    /// When it was read.
    pub read_at: SystemTime,
}

/// TLS files for etcd.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// The CA of etcd's server certificates (None: the system's bundle).
    pub ca_file: Option<PathBuf>,
    /// This node's client certificate.
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
}

/// Backend kubernetes: the API server and identity, and where the Leases live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeTarget {
    /// `[fleet] kubeconfig`: the API server, its CA and pleg-guard's credentials.
    pub kubeconfig: PathBuf,
    /// `[fleet] namespace`: the group's Leases live here.
    pub namespace: String,
}

/// What the fleet handle needs, from `[fleet]` (its Debug leaves the password out).
#[derive(Clone)]
pub struct FleetSettings {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// The group sharing one budget.
    pub group: String,
    /// The key prefix every group lives under.
    pub prefix: String,
    /// This node's name in the group.
    pub node: String,
    /// The budget.
    pub max_disruptive: MaxDisruptive,
    /// The lease: a dead holder's slot frees within this.
    pub lease_ttl: Duration,
    /// The most one etcd call may take.
    pub request_timeout: Duration,
    /// TLS (None: plain http endpoints).
    pub tls: Option<TlsFiles>,
    /// etcd user and password.
    pub auth: Option<(String, String)>,
    /// The storm guard's threshold.
    pub max_unhealthy: storm::MaxUnhealthy,
    /// The findings proven local to a node (its members reporting them do not count).
    pub storm_exempt: Vec<String>,
    /// Backend kubernetes (None: backend etcd, at `endpoints`).
    pub kubernetes: Option<KubeTarget>,
}

impl std::fmt::Debug for FleetSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetSettings")
            .field("endpoints", &self.endpoints)
            .field("group", &self.group)
            .field("prefix", &self.prefix)
            .field("node", &self.node)
            .field("max_disruptive", &self.max_disruptive)
            .field("lease_ttl", &self.lease_ttl)
            .field("request_timeout", &self.request_timeout)
            .field("tls", &self.tls)
            .field("auth", &self.auth.as_ref().map(|(user, _)| (user, "..")))
            .field("kubernetes", &self.kubernetes)
            .finish()
    }
}

impl FleetSettings {
    /// From `[fleet]` (None: no fleet budget configured).
    pub fn from_config(c: &FleetConfig, request_timeout: Duration) -> Option<FleetSettings> {
        if !c.enabled() {
            return None;
        }
        let tls = (c.ca_file.is_some()
            || c.cert_file.is_some()
            || c.etcd_endpoints.iter().any(|e| e.starts_with("https://")))
        .then(|| TlsFiles {
            ca_file: c.ca_file.clone(),
            cert_file: c.cert_file.clone(),
            key_file: c.key_file.clone(),
        });
        let auth = match (&c.username, &c.password) {
            (Some(u), Some(p)) => Some((u.clone(), p.expose().to_owned())),
            _ => None,
        };
        Some(FleetSettings {
            endpoints: c.etcd_endpoints.clone(),
            group: c.group.clone(),
            prefix: c.prefix.trim_end_matches('/').to_owned(),
            node: c.node_name(),
            max_disruptive: c.max_disruptive,
            lease_ttl: c.lease_ttl,
            request_timeout,
            tls,
            auth,
            max_unhealthy: c.max_unhealthy,
            storm_exempt: c.storm_exempt.clone(),
            kubernetes: match (c.backend, &c.kubeconfig) {
                (settings::Backend::Kubernetes, Some(path)) => Some(KubeTarget {
                    kubeconfig: path.clone(),
                    namespace: c.namespace.clone(),
                }),
                _ => None,
            },
        })
    }

    /// The backend these settings name.
    pub fn backend(&self) -> settings::Backend {
        match self.kubernetes {
            Some(_) => settings::Backend::Kubernetes,
            None => settings::Backend::Etcd,
        }
    }

    /// `<prefix>/<group>/`: every key of the group is under it.
    pub fn group_prefix(&self) -> String {
        format!("{}/{}/", self.prefix.trim_end_matches('/'), self.group)
    }
}

/// What went wrong talking to etcd, by kind (decided on error types and gRPC codes, never on
/// message text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    /// The settings cannot work (a file missing or unreadable, a bad endpoint).
    #[error("fleet settings: {0}")]
    Config(String),
    /// TLS failed: a certificate etcd or this node does not trust.
    #[error("TLS with etcd failed: {0}")]
    Tls(String),
    /// etcd refused the user, password or permission.
    #[error("etcd refused the credentials: {0}")]
    Auth(String),
    /// No answer: etcd down, partitioned, or without quorum.
    #[error("etcd unreachable: {0}")]
    Unreachable(String),
    /// An answer that makes no sense.
    #[error("etcd protocol: {0}")]
    Protocol(String),
}

impl FleetError {
    /// Whether an operator must fix something (as opposed to waiting for etcd).
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            FleetError::Config(_) | FleetError::Tls(_) | FleetError::Auth(_)
        )
    }
}

/// The daemon's handle on its fleet slot. Cheap to ask; the etcd work happens in a task of
/// its own, so a slow or absent etcd never holds up the probe loop.
#[derive(Debug)]
pub struct Fleet {
    commands: mpsc::UnboundedSender<Command>,
    shared: watch::Receiver<Shared>,
    task: tokio::task::JoinHandle<()>,
    request_timeout: Duration,
}

impl Fleet {
    /// Start the actor (inside a tokio runtime). Checks the TLS files at once; never waits
    /// for etcd.
    pub fn start(settings: FleetSettings) -> Result<Fleet, FleetError> {
        let (commands, rx) = mpsc::unbounded_channel();
        let (tx, shared) = watch::channel(Shared {
            state: SlotState::Idle,
            view: FleetView {
                group: settings.group.clone(),
                ..FleetView::default()
            },
        });
        let request_timeout = settings.request_timeout;
        let task = backend::start(settings, tx, rx)?;
        Ok(Fleet {
            commands,
            shared,
            task,
            request_timeout,
        })
    }

    /// Reach the store once and read the group, as `check-config --connect` does: the TLS,
    /// auth and reachability errors the daemon would meet.
    pub async fn check(settings: &FleetSettings) -> Result<FleetView, FleetError> {
        backend::check(settings).await
    }

    /// Ask for a slot for `action` (idempotent while a request stands; a higher urgency
    /// replaces a lower one).
    pub fn request(&self, action: ActionKind, urgency: Urgency) {
        let _ = self.commands.send(Command::Request(action, urgency));
    }

    /// The findings this node acts on now, for its member key (written when they change).
    pub fn set_findings(&self, findings: Vec<String>) {
        let _ = self.commands.send(Command::Findings(findings));
    }

    /// Read the group's health (the member keys) once more; the view shows it.
    pub fn read_health(&self) {
        let _ = self.commands.send(Command::ReadHealth);
    }

    /// Give the slot back (or withdraw the request).
    pub fn release(&self) {
        let _ = self.commands.send(Command::Release);
    }

    /// Where this node's request stands.
    pub fn state(&self) -> SlotState {
        self.shared.borrow().state.clone()
    }

    /// The group as this node sees it.
    pub fn view(&self) -> FleetView {
        self.shared.borrow().view.clone()
    }

    /// Resolves when the state or the view changed (never, once the actor is gone).
    pub async fn changed(&mut self) {
        if self.shared.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Wait until this node holds its slot, at most `within`.
    pub async fn wait_granted(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if matches!(self.state(), SlotState::Granted { .. }) {
                return true;
            }
            if tokio::time::timeout_at(deadline, self.changed())
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    /// Stop: revoke the lease (the member and slot keys go at once), at most a request
    /// timeout and a second.
    pub async fn shutdown(self) {
        let (done, acked) = oneshot::channel();
        if self.commands.send(Command::Shutdown(done)).is_ok() {
            let _ =
                tokio::time::timeout(self.request_timeout + Duration::from_secs(1), acked).await;
        }
        self.task.abort();
    }
}
