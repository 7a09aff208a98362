//! Tier 1, `purge-dead-containers`: force-remove every container in state `dead`, and
//! nothing else. Each candidate is inspected right before its removal and removed only if its
//! state is `dead` then, so a container that changed state since the listing is left alone.

use std::path::Path;
use std::time::Duration;

use super::{ActionReport, within};
use crate::client::docker::{
    connect, container_ref, is_dead, list_all, may_be_dead, remove_forced,
};

/// Remove the dead containers of the engine at `socket`; each docker call is bounded by
/// `timeout`.
pub async fn run(socket: &Path, timeout: Duration) -> ActionReport {
    let docker = match within(timeout, "docker: connect", connect(socket)).await {
        Ok(d) => d,
        Err(e) => return ActionReport::failed(e),
    };
    let listed = match within(timeout, "listing containers", list_all(&docker)).await {
        Ok(list) => list,
        Err(e) => return ActionReport::failed(e),
    };
    // The listing names candidates; the inspected state right before removal decides.
    let candidates: Vec<_> = listed.iter().filter(|c| may_be_dead(c)).collect();
    if candidates.is_empty() {
        return ActionReport::ok("no dead containers left to remove");
    }

    let mut removed = Vec::new();
    let mut failed = Vec::new();
    for c in candidates {
        let r = container_ref(c);
        let Some(id) = c.id.as_deref() else { continue };
        let label = format!("{} ({})", r.name, r.id);
        match within(timeout, &format!("{label}: inspect"), is_dead(&docker, id)).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(container = %label, "not dead; left alone");
                continue;
            }
            Err(e) => {
                failed.push(e);
                continue;
            }
        }
        let removal = remove_forced(&docker, id);
        match within(timeout, &label, removal).await {
            Ok(()) => {
                tracing::info!(container = %label, "removed dead container");
                removed.push(label);
            }
            Err(e) => failed.push(one_line(&e)),
        }
    }
    let mut detail = format!("removed {}: {}", removed.len(), list_or_none(&removed));
    if failed.is_empty() {
        ActionReport::ok(detail)
    } else {
        detail.push_str(&format!("; failed {}: {}", failed.len(), failed.join("; ")));
        ActionReport::failed(detail)
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(300)
        .collect()
}
