//! status.json: the daemon's view after each round, written atomically to the runtime
//! directory, read by `pleg-guard status`. `diagnose --json` prints the same shape.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::config::Mode;
use crate::diagnosis::Finding;
use crate::ledger::Budget;
use crate::target::Observation;

/// The file name in the runtime directory.
pub const STATUS_FILE: &str = "status.json";

/// The overall state, the first word of the `STATUS=` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overall {
    /// No problem found.
    Healthy,
    /// A problem stands.
    Degraded,
    /// An action is running or settling.
    Repairing,
}

impl Overall {
    /// The word.
    pub fn name(self) -> &'static str {
        match self {
            Overall::Healthy => "healthy",
            Overall::Degraded => "degraded",
            Overall::Repairing => "repairing",
        }
    }
}

/// What is known of the running systemd.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemdStatus {
    /// The build, as best known (`219-62.el7_6.8`, `252.38-1~deb12u1`), or None.
    pub version: Option<String>,
    /// Whether it carries the bus bug.
    pub affected: bool,
    /// Why the policy says so.
    pub reason: String,
    /// What decided `affected`: `version-policy`, `bus-wedge-seen` (the bug's signature seen on
    /// this boot), `serial-wrapped` (a fixed sd-bus wrapped its serial).
    #[serde(default)]
    pub evidence: crate::systemd::evidence::Evidence,
    /// When the `systemd-bus-wedge` that proves the build affected was seen (this boot).
    #[serde(default, with = "crate::clock::time_format::option")]
    pub bus_wedge_seen_at: Option<SystemTime>,
    /// The serial of PID 1's latest reply on the system bus (None: not seen).
    #[serde(default)]
    pub bus_serial: Option<u32>,
    /// Serials per second (the larger of the 1 h and the 5 min rate; None: not known yet).
    #[serde(default)]
    pub bus_serial_rate: Option<f64>,
    /// Seconds until the serial reaches 2^32 at that rate (None: unknown, not growing, or a
    /// build that wraps).
    #[serde(default)]
    pub bus_serial_eta_s: Option<u64>,
    /// A wrap of the serial was seen: the running sd-bus is fixed.
    #[serde(default)]
    pub bus_serial_wraps: bool,
    /// The serial forecast in words (`serial 3.91e9 (91%), +330/s, runs out in ~15 d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_serial_summary: Option<String>,
}

impl SystemdStatus {
    /// Fill the serial fields from a forecast.
    pub fn set_forecast(&mut self, f: Option<&crate::systemd::forecast::Forecast>) {
        self.bus_serial = f.map(|f| f.serial);
        self.bus_serial_rate = f.and_then(|f| f.rate);
        self.bus_serial_eta_s = f.and_then(|f| f.eta).map(|d| d.as_secs());
        self.bus_serial_wraps = f.is_some_and(|f| f.wraps);
        self.bus_serial_summary = f.map(|f| f.summary());
    }
}

/// One action run as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// The action's name.
    pub action: String,
    /// When it started.
    #[serde(with = "crate::clock::time_format")]
    pub at: SystemTime,
    /// `started`, `succeeded`, `failed` (plus `cleared`/`persisted` once settled).
    pub outcome: String,
    /// The settle-time verdict, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symptom: Option<String>,
    /// What it did.
    #[serde(default)]
    pub detail: String,
}

/// The whole status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// pleg-guard's version.
    pub pleg_guard_version: String,
    /// The daemon's pid (None for `diagnose`).
    #[serde(default)]
    pub pid: Option<u32>,
    /// `repair` or `observe`.
    pub mode: Mode,
    /// No problem stands.
    pub healthy: bool,
    /// healthy, degraded or repairing.
    pub state: Overall,
    /// The one-line summary (the `STATUS=` line).
    pub summary: String,
    /// When this snapshot was taken.
    #[serde(with = "crate::clock::time_format")]
    pub updated_at: SystemTime,
    /// The probe interval in milliseconds (a reader can tell a stale file by it).
    pub interval_ms: u64,
    /// The running systemd.
    pub systemd: SystemdStatus,
    /// Every target's latest observation, by name.
    pub targets: BTreeMap<String, Observation>,
    /// The current findings.
    pub findings: Vec<Finding>,
    /// The latest action runs, newest last.
    pub actions: Vec<ActionRecord>,
    /// Each action's remaining budget, by name.
    pub budget: BTreeMap<String, BudgetStatus>,
    /// The fleet budget (None: `[fleet] etcd_endpoints` is empty).
    #[serde(default)]
    pub fleet: Option<FleetStatus>,
}

/// The fleet-wide disruption budget as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetStatus {
    /// `[fleet] group`.
    pub group: String,
    /// This node's name in the group.
    pub node: String,
    /// `[fleet] max_disruptive` as configured (`"2"`, `"5%"`).
    pub max_disruptive_setting: String,
    /// The slots the group has now (a share is of the live members; None: not known yet).
    pub max_disruptive: Option<usize>,
    /// Member keys alive in the group (None: not known yet).
    pub members_alive: Option<usize>,
    /// Who holds a slot now.
    pub holders: Vec<FleetHolder>,
    /// How many nodes wait for a slot.
    pub waiting: usize,
    /// Whether etcd answered the latest request.
    pub reachable: bool,
    /// The latest error talking to etcd (None: none since it last answered).
    pub last_error: Option<String>,
    /// This node.
    pub this_node: FleetNodeStatus,
    /// The storm guard (None: `max_unhealthy = ""`).
    #[serde(default)]
    pub storm: Option<FleetStormStatus>,
}

/// The storm guard as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetStormStatus {
    /// `[fleet] max_unhealthy` as configured (`"20%"`, `"3"`).
    pub max_unhealthy: String,
    /// Whether more members than that report findings (as of `read_at`; None: the member keys
    /// were not read yet: they are read only while this node needs a disruptive repair).
    pub storming: Option<bool>,
    /// Members reporting findings that need a repair, at the latest read.
    #[serde(default)]
    pub unhealthy: Vec<String>,
    /// Live members at the latest read.
    #[serde(default)]
    pub members: Option<usize>,
    /// When the member keys were read.
    #[serde(default, with = "crate::clock::time_format::option")]
    pub read_at: Option<SystemTime>,
    /// Whether the storm pauses a repair of this node now.
    pub paused: bool,
}

impl FleetStatus {
    /// The group as `view` shows it, with this node's part.
    pub fn of(
        view: &crate::fleet::FleetView,
        node: &str,
        max_disruptive_setting: String,
        this_node: FleetNodeStatus,
    ) -> FleetStatus {
        FleetStatus {
            group: view.group.clone(),
            node: node.to_owned(),
            max_disruptive_setting,
            max_disruptive: view.max_disruptive,
            members_alive: view.members_alive,
            holders: view
                .holders
                .iter()
                .map(|h| FleetHolder {
                    node: h.node.clone(),
                    action: h.action.clone(),
                    since: h.since,
                    stray_key: h.stray_key.clone(),
                })
                .collect(),
            waiting: view.waiting,
            reachable: view.reachable,
            last_error: view.last_error.clone(),
            this_node,
            storm: None,
        }
    }
}

/// One slot holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetHolder {
    /// The node.
    pub node: String,
    /// Its action.
    pub action: String,
    /// Since when it holds the slot.
    #[serde(with = "crate::clock::time_format")]
    pub since: SystemTime,
    /// A key under `holders/` that is no slot this version writes: it blocks every grant of
    /// the group until it is deleted (absent: a slot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stray_key: Option<String>,
}

/// This node's part in the fleet budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetNodeStatus {
    /// `idle`, `waiting`, `holding`, `unreachable`, `rejected` (etcd refuses this node: TLS or
    /// auth), `local` (acting without a slot).
    pub state: String,
    /// The action the slot is for.
    #[serde(default)]
    pub action: Option<String>,
    /// Seconds this node has waited for its slot (None: not waiting).
    #[serde(default)]
    pub wait_s: Option<u64>,
    /// Its place among the waiters (0: next).
    #[serde(default)]
    pub position: Option<usize>,
    /// Why it waits, or why it acts without a slot.
    #[serde(default)]
    pub reason: Option<String>,
}

/// An action's budget as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStatus {
    /// Whether the action is enabled.
    pub enabled: bool,
    /// The ledger's budget.
    #[serde(flatten)]
    pub budget: Budget,
}

/// The status file in `runtime_directory`.
pub fn path(runtime_directory: &Path) -> PathBuf {
    runtime_directory.join(STATUS_FILE)
}

/// Write the snapshot atomically.
pub fn write(runtime_directory: &Path, snapshot: &Snapshot) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(snapshot).map_err(std::io::Error::other)?;
    crate::state_file::write(&path(runtime_directory), &json, crate::state_file::KEPT)
}

/// Why status.json could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No file: no daemon has run (since boot).
    #[error("{0}: no daemon state (is pleg-guard running?)")]
    Missing(PathBuf),
    /// Unreadable or not status JSON.
    #[error("{path}: {message}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Read the snapshot.
pub fn read(runtime_directory: &Path) -> Result<Snapshot, ReadError> {
    let p = path(runtime_directory);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing(p)),
        Err(e) => {
            return Err(ReadError::Bad {
                path: p,
                message: e.to_string(),
            });
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| ReadError::Bad {
        path: p,
        message: format!("not a pleg-guard status: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systemd::forecast::{Sample, SerialTracker, Windows};
    use std::time::Duration;

    #[test]
    fn serial_fields_are_null_while_unknown() {
        let json = serde_json::to_value(SystemdStatus::default()).unwrap();
        for key in ["bus_serial", "bus_serial_rate", "bus_serial_eta_s"] {
            assert!(json.get(key).is_some_and(|v| v.is_null()), "{key}: {json}");
        }
    }

    #[test]
    fn serial_fields_from_a_forecast_read_back() {
        let mut t = SerialTracker::new(Windows::default());
        for i in 0..10u32 {
            t.observe(Sample {
                at: Duration::from_secs(u64::from(i) * 10),
                serial: 4_000_000_000 + i * 3300,
            });
        }
        let mut s = SystemdStatus::default();
        s.set_forecast(t.forecast().as_ref());
        assert_eq!(s.bus_serial, Some(4_000_029_700));
        assert_eq!(s.bus_serial_rate, Some(330.0));
        let eta = s.bus_serial_eta_s.unwrap();
        assert_eq!(eta, (u64::from(u32::MAX) - 4_000_029_700) / 330);
        let back: SystemdStatus =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
