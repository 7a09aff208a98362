//! What the task publishes: its state and the group as a [`FleetView`].

use super::*;

/// The group as a [`FleetView`].
pub(crate) fn view_of(
    s: &FleetSettings,
    snap: &Snapshot,
    reachable: bool,
    last_error: Option<String>,
    expired: u64,
) -> FleetView {
    FleetView {
        group: s.group.clone(),
        members_alive: Some(snap.members),
        max_disruptive: Some(snap.max(s.max_disruptive)),
        holders: snap
            .holders
            .iter()
            .map(|h| Holder {
                node: h
                    .value
                    .as_ref()
                    .map_or_else(|| "?".to_owned(), |v| v.node.clone()),
                action: h
                    .value
                    .as_ref()
                    .map_or_else(|| "?".to_owned(), |v| v.action.clone()),
                since: h
                    .value
                    .as_ref()
                    .map_or(SystemTime::UNIX_EPOCH, |v| v.granted_at),
                stray_key: h.stray_key.clone(),
            })
            .collect(),
        waiting: snap.waiting,
        reachable,
        last_error,
        expired,
        health: None,
    }
}

/// The group's health from its member keys.
pub(crate) fn health_of<'a>(
    s: &FleetSettings,
    members: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> GroupHealth {
    let h = Health::of(members, &s.storm_exempt);
    GroupHealth {
        storming: h.storming(s.max_unhealthy),
        members: h.members,
        unhealthy: h.unhealthy,
        read_at: SystemTime::now(),
    }
}

impl Actor {
    pub(super) fn state(&self) -> SlotState {
        if let Some(g) = self.granted {
            return SlotState::Granted {
                since: g.since,
                revision: g.revision,
            };
        }
        if let Some((since, e)) = &self.down {
            return SlotState::down(*since, e);
        }
        match (&self.want, self.queue) {
            (Some(w), Some((position, holders, max))) => SlotState::Waiting {
                since: w.since,
                position,
                holders,
                max,
            },
            _ => SlotState::Idle,
        }
    }

    pub(super) fn publish(&self) {
        let reachable = self.down.is_none();
        let last_error = self.down.as_ref().map(|(_, e)| e.to_string());
        let mut view = match &self.snapshot {
            Some(snap) => view_of(&self.s, snap, reachable, last_error, self.expired),
            None => FleetView {
                group: self.s.group.clone(),
                reachable,
                last_error,
                expired: self.expired,
                ..FleetView::default()
            },
        };
        view.health = self.health.clone();
        let state = self.state();
        Shared::publish(&self.tx, state, view);
    }
}
