//! The kubernetes backend: the budget in `coordination.k8s.io/v1` Leases on the cluster's own
//! API server (issue 43).
//!
//! - [`names`]: the Leases' names and labels, and what makes a group, node or namespace fit
//!   them (pure);
//! - [`kubeconfig`]: the API server and identity, read from the kubeconfig;
//! - [`types`]: the Lease, list and Status objects, and the client's errors by kind (pure);
//! - [`client`]: the typed Lease client (hyper over tokio-rustls, one kept connection);
//! - [`slots`]: the protocol core: which slot is free, which is ours, what write takes one
//!   (pure).

pub mod client;
pub mod kubeconfig;
pub mod names;
pub mod slots;
pub mod types;

use tokio::sync::{mpsc, watch};

use super::{Command, Shared};
use crate::fleet::{FleetError, FleetSettings, FleetView};

/// What [`start`] and [`check`] say while the backend's task is not built yet.
const NOT_YET: &str = "`fleet.backend = \"kubernetes\"` is not available in this build yet: use `fleet.backend = \"etcd\"`";

/// Check the settings and start the task; never waits for the API server.
pub(crate) fn start(
    settings: FleetSettings,
    _tx: watch::Sender<Shared>,
    _rx: mpsc::UnboundedReceiver<Command>,
) -> Result<tokio::task::JoinHandle<()>, FleetError> {
    if settings.kubernetes.is_none() {
        return Err(FleetError::Config("no `fleet.kubeconfig`".to_owned()));
    }
    Err(FleetError::Config(NOT_YET.to_owned()))
}

/// Reach the API server once and read the group, as `check-config --connect` does.
pub(crate) async fn check(settings: &FleetSettings) -> Result<FleetView, FleetError> {
    if settings.kubernetes.is_none() {
        return Err(FleetError::Config("no `fleet.kubeconfig`".to_owned()));
    }
    Err(FleetError::Config(NOT_YET.to_owned()))
}
