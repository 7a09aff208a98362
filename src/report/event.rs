//! The journal's event kinds: each state change of a target, each finding and each action
//! outcome is one entry with `PLEG_GUARD_EVENT` and a fixed `MESSAGE_ID` per kind, explained in
//! `systemd/pleg-guard.catalog` (`journalctl -x`).

use std::fmt;

use crate::ledger::Outcome;

/// An event kind (the contract's `PLEG_GUARD_EVENT` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A target failed `probe.unhealthy_after` rounds in a row.
    TargetUnhealthy,
    /// An unhealthy target answered well again.
    TargetRecovered,
    /// A finding appeared.
    Finding,
    /// An action is about to run (the ledger already holds it).
    ActionStarted,
    /// An action did what it was asked.
    ActionSucceeded,
    /// An action failed.
    ActionFailed,
    /// A rate limit held an action back.
    ActionSuppressed,
    /// Observe mode, or the action is disabled or not applicable: not run.
    ActionSkipped,
    /// After the settle time, the symptom the action aimed at is gone.
    SymptomCleared,
    /// After the settle time, the symptom the action aimed at is still there.
    SymptomPersisted,
    /// An action waits for a slot of the fleet budget (the group is busy, or etcd is unavailable under `on_unreachable = "wait"`).
    FleetWaiting,
    /// A fleet slot was granted: the action runs now.
    FleetGranted,
    /// The fleet slot was given back (after the action and its settle check, or on a failure or stop), or the request was withdrawn.
    FleetReleased,
    /// A slot held was lost: etcd did not renew its lease.
    FleetExpired,
    /// etcd cannot be reached, or refuses this node (TLS, auth).
    FleetUnreachable,
    /// An action that needs a slot runs without one, under the local limits only (max_wait passed, `on_unreachable = "local"`, or a planned reexec at its forecast deadline).
    FleetLocal,
    /// The storm guard paused this node's disruptive repairs: more members of the group than `[fleet] max_unhealthy` report findings that need a repair.
    FleetStorm,
    /// The storm is over (or this node no longer needs the repair): its repairs go on.
    FleetStormOver,
}

impl EventKind {
    /// The ledger outcome a suppressed/skipped journal note counts as.
    pub fn counts_as(self) -> Option<Outcome> {
        match self {
            EventKind::ActionSuppressed => Some(Outcome::Suppressed),
            EventKind::ActionSkipped => Some(Outcome::Skipped),
            _ => None,
        }
    }

    /// Every kind.
    #[cfg(test)]
    pub const ALL: [EventKind; 18] = [
        EventKind::TargetUnhealthy,
        EventKind::TargetRecovered,
        EventKind::Finding,
        EventKind::ActionStarted,
        EventKind::ActionSucceeded,
        EventKind::ActionFailed,
        EventKind::ActionSuppressed,
        EventKind::ActionSkipped,
        EventKind::SymptomCleared,
        EventKind::SymptomPersisted,
        EventKind::FleetWaiting,
        EventKind::FleetGranted,
        EventKind::FleetReleased,
        EventKind::FleetExpired,
        EventKind::FleetUnreachable,
        EventKind::FleetLocal,
        EventKind::FleetStorm,
        EventKind::FleetStormOver,
    ];

    /// The `PLEG_GUARD_EVENT` value.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::TargetUnhealthy => "target-unhealthy",
            EventKind::TargetRecovered => "target-recovered",
            EventKind::Finding => "finding",
            EventKind::ActionStarted => "action-started",
            EventKind::ActionSucceeded => "action-succeeded",
            EventKind::ActionFailed => "action-failed",
            EventKind::ActionSuppressed => "action-suppressed",
            EventKind::ActionSkipped => "action-skipped",
            EventKind::SymptomCleared => "symptom-cleared",
            EventKind::SymptomPersisted => "symptom-persisted",
            EventKind::FleetWaiting => "fleet-waiting",
            EventKind::FleetGranted => "fleet-granted",
            EventKind::FleetReleased => "fleet-released",
            EventKind::FleetExpired => "fleet-expired",
            EventKind::FleetUnreachable => "fleet-unreachable",
            EventKind::FleetLocal => "fleet-local",
            EventKind::FleetStorm => "fleet-storm",
            EventKind::FleetStormOver => "fleet-storm-over",
        }
    }

    /// The journal `MESSAGE_ID` (128-bit, as `journalctl -x` and the catalog use it).
    pub fn message_id(self) -> &'static str {
        match self {
            EventKind::TargetUnhealthy => "a9742433f52a432e9ba2bfcf269ede3c",
            EventKind::TargetRecovered => "df5756518b07429cb91bb4390e50ab59",
            EventKind::Finding => "ad6f0b949b3f47599ad5d91ebb1ec009",
            EventKind::ActionStarted => "0e72ab0b5ecf4522ac73e6b0ce2369c1",
            EventKind::ActionSucceeded => "a1437e5e0b5741dbaa53e76876aa5e87",
            EventKind::ActionFailed => "a7eaf73d1c4b4826b9f3db6a99f425e6",
            EventKind::ActionSuppressed => "d29ef561af524338a4d58ed6e107c19b",
            EventKind::ActionSkipped => "93bdf3b0beda423ca2b0d4dbce59c10f",
            EventKind::SymptomCleared => "bd6945000457485385b62ee2bd90725b",
            EventKind::SymptomPersisted => "3e5ac07fe5be454a85b934c9628899a7",
            EventKind::FleetWaiting => "718a4bd8d3774c0c8fecd637efd7f202",
            EventKind::FleetGranted => "1c370ed523184502b34efa6921aa7280",
            EventKind::FleetReleased => "3e7dd2aa57ea4e37b870380ee15996c0",
            EventKind::FleetExpired => "dec9745652c9421380c74b362b718967",
            EventKind::FleetUnreachable => "5e7d2235685344488ef0a4cf24e15d8b",
            EventKind::FleetLocal => "25c518b9798c4a9f841991039cc91d17",
            EventKind::FleetStorm => "9c6dd14d63c743f79c27de7ca8e2a56c",
            EventKind::FleetStormOver => "cf1cf3c98c034934ab8272ccc59f708f",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_unique_128_bit_hex() {
        let mut ids: Vec<&str> = EventKind::ALL.iter().map(|k| k.message_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
                "{id}"
            );
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), EventKind::ALL.len());
    }

    #[test]
    fn the_catalog_explains_every_event() {
        let catalog = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/systemd/pleg-guard.catalog"
        ))
        .expect("systemd/pleg-guard.catalog is shipped");
        for kind in EventKind::ALL {
            assert!(
                catalog.contains(&format!("-- {}", kind.message_id())),
                "the catalog has no entry for {} ({})",
                kind.name(),
                kind.message_id()
            );
        }
    }
}
