//! The kubernetes backend: the budget in `coordination.k8s.io/v1` Leases on the cluster's own
//! API server (issue 43).
//!
//! - [`names`]: the Leases' names and labels, and what makes a group, node or namespace fit
//!   them (pure);
//! - [`kubeconfig`]: the API server and identity, read from the kubeconfig;
//! - [`types`]: the Lease, list and Status objects, and the client's errors by kind (pure);
//! - [`client`]: the typed Lease client (hyper over tokio-rustls, one kept connection);
//! - [`slots`]: the protocol core: which slot is free, which is ours, what write takes one
//!   (pure);
//! - [`actor`]: the task that serves the handle's commands ([`crate::fleet::backend`]).

pub mod actor;
pub mod client;
pub mod kubeconfig;
pub mod names;
pub mod slots;
pub mod types;

use tokio::time::Instant;

use tokio::sync::{mpsc, watch};

use super::{Command, Shared};
use crate::fleet::storm::MaxUnhealthy;
use crate::fleet::{FleetError, FleetSettings, FleetView, KubeTarget, MaxDisruptive};

/// The kubeconfig read and a client made for the settings' target.
fn client_for(settings: &FleetSettings) -> Result<client::Client, FleetError> {
    let Some(KubeTarget {
        kubeconfig,
        namespace,
    }) = &settings.kubernetes
    else {
        return Err(FleetError::Config("no `fleet.kubeconfig`".to_owned()));
    };
    let k = kubeconfig::Kubeconfig::load(kubeconfig)
        .map_err(|e| FleetError::Config(format!("fleet.kubeconfig: {e}")))?;
    names::check_node(&settings.node).map_err(FleetError::Config)?;
    client::Client::new(&k, namespace, settings.request_timeout)
        .map_err(|e| FleetError::Config(format!("fleet.kubeconfig {}: {e}", kubeconfig.display())))
}

/// Check the settings (the kubeconfig and the files it names are read at once) and start the
/// task; never waits for the API server.
pub(crate) fn start(
    settings: FleetSettings,
    tx: watch::Sender<Shared>,
    rx: mpsc::UnboundedReceiver<Command>,
) -> Result<tokio::task::JoinHandle<()>, FleetError> {
    let client = client_for(&settings)?;
    Ok(tokio::spawn(
        actor::Actor::new(settings, client, tx).run(rx),
    ))
}

/// Reach the API server once and read the group, as `check-config --connect` does: the
/// group's Leases listed, every verb the daemon will use asked of the API server's
/// authorizer (SelfSubjectAccessReview; each refused one is named), and the group's Nodes
/// counted when a share budget or the storm guard needs them.
pub(crate) async fn check(settings: &FleetSettings) -> Result<FleetView, FleetError> {
    let client = client_for(settings)?;
    let selector = names::group_selector(&settings.group);
    let list = client.list(&selector).await?;
    let needs_members = matches!(settings.max_disruptive, MaxDisruptive::Percent(_))
        || settings.max_unhealthy != MaxUnhealthy::Off;
    let mut needed: Vec<(&'static str, &'static str, &'static str, Option<&str>)> =
        ["get", "list", "create", "update", "delete"]
            .into_iter()
            .map(|verb| {
                (
                    verb,
                    types::LEASES,
                    types::COORDINATION,
                    Some(client.namespace()),
                )
            })
            .collect();
    if needs_members {
        needed.push(("list", "nodes", "", None));
    }
    let mut refused = Vec::new();
    for (verb, resource, group, namespace) in needed {
        if !client.may(verb, resource, group, namespace).await? {
            let call = types::Call {
                verb,
                resource,
                group,
                namespace: namespace.map(str::to_owned),
                name: None,
            };
            refused.push(call.to_string());
        }
    }
    if !refused.is_empty() {
        return Err(FleetError::Auth(format!(
            "the API server's RBAC does not let this identity {} (packaging/kubernetes/rbac.yaml grants what pleg-guard needs)",
            refused.join(", ")
        )));
    }
    let members = match needs_members {
        true => Some(client.count_nodes(&selector).await?),
        false => None,
    };
    let now = Instant::now();
    let mut obs = slots::Observations::default();
    obs.observe_all(&list.items, now);
    let budget = settings.max_disruptive.slots(members.unwrap_or(0));
    let plan = slots::Plan::make(
        &settings.group,
        &settings.node,
        budget,
        &list.items,
        &obs,
        settings.lease_ttl,
        now,
    );
    let mut view = actor::view_of(settings, &plan, members);
    if settings.max_unhealthy != MaxUnhealthy::Off {
        view.health = Some(actor::health_of(
            settings,
            &list.items,
            &obs,
            members.unwrap_or(0),
            now,
        ));
    }
    Ok(view)
}
