//! Prometheus metrics: what the daemon knows after each round, in the exposition format, for
//! node_exporter's textfile collector (`[metrics] textfile`) and an optional `/metrics`
//! endpoint (`[metrics] listen`).
//!
//! ```text
//!  Snapshot (status.json) + ledger totals ─▶ Model ─▶ Registry (prometheus-client)
//!        ─▶ Rendered { Prometheus text 0.0.4, OpenMetrics } ─┬▶ textfile (tmp + rename)
//!                                                             └▶ http server (watch channel)
//! ```
//!
//! Rendering happens once per round on the daemon loop (tens of microseconds); the server
//! only ever hands out the latest pre-rendered text, so a scraper, slow or not, never waits
//! for the loop and the loop never waits for a scraper. The names are the contract's.

pub mod http;
pub mod textfile;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::config::MetricsConfig;
use crate::diagnosis::FindingId;
use crate::fleet::Secret;
use crate::ledger::{Outcome, Totals};
use crate::report::status_file::Snapshot;
use crate::target::ActionKind;
use crate::target::TargetState;

/// The metrics in both text formats, rendered from one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Prometheus text format 0.0.4: the textfile, and `/metrics` for a plain `Accept`.
    pub text: String,
    /// OpenMetrics 1.0: `/metrics` for a scraper that asks for it (Prometheus does).
    pub openmetrics: String,
}

/// Why the metrics could not be rendered (a formatter error: not expected in practice).
#[derive(Debug, thiserror::Error)]
#[error("rendering the metrics failed")]
pub struct RenderError;

/// Render the metrics of `snapshot` with the ledger's cumulative `totals`.
pub fn render(snapshot: &Snapshot, totals: &Totals) -> Result<Rendered, RenderError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Model::new(snapshot, totals)));
    let mut text = String::with_capacity(4096);
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        .map_err(|_| RenderError)?;
    let mut openmetrics = String::with_capacity(4096);
    prometheus_client::encoding::text::encode(&mut openmetrics, &registry)
        .map_err(|_| RenderError)?;
    Ok(Rendered { text, openmetrics })
}

/// The numbers behind the metrics, taken from a snapshot: owned plain data, in a fixed order
/// (so the output is stable and diffable), encoded by prometheus-client as a collector.
#[derive(Debug)]
struct Model {
    version: String,
    healthy: bool,
    updated_at: f64,
    interval: f64,
    /// (target, up, latency in seconds) for every target that is not absent.
    targets: Vec<(String, bool, f64)>,
    findings: Vec<(&'static str, bool)>,
    actions: Vec<(&'static str, &'static str, u64)>,
    /// (action, enabled, runs left today).
    budget: Vec<(String, bool, u32)>,
    affected: bool,
    bus_serial: Option<u32>,
    bus_serial_eta: Option<u64>,
    /// The fleet budget, when configured.
    fleet: Option<FleetModel>,
}

/// The fleet budget's numbers.
#[derive(Debug)]
struct FleetModel {
    held: u64,
    max: Option<u64>,
    members: Option<u64>,
    wait_s: u64,
    hold_s: u64,
    reachable: bool,
    /// (storming, paused, members reporting findings), when the storm guard read the group.
    storm: Option<(bool, bool, u64)>,
}

impl FleetModel {
    fn new(f: &crate::report::status_file::FleetStatus, now: SystemTime) -> Self {
        let n = |x: usize| u64::try_from(x).unwrap_or(u64::MAX);
        let hold_s = f.holders.iter().find(|h| h.node == f.node).map_or(0, |h| {
            now.duration_since(h.since).map_or(0, |d| d.as_secs())
        });
        FleetModel {
            held: n(f.holders.len()),
            max: f.max_disruptive.map(n),
            members: f.members_alive.map(n),
            wait_s: f.this_node.wait_s.unwrap_or(0),
            hold_s,
            reachable: f.reachable,
            storm: f.storm.as_ref().and_then(|s| {
                s.storming
                    .map(|storming| (storming, s.paused, n(s.unhealthy.len())))
            }),
        }
    }
}

impl Model {
    fn new(s: &Snapshot, totals: &Totals) -> Self {
        let targets = s
            .targets
            .iter()
            .filter(|(_, o)| o.state != TargetState::Absent)
            .map(|(name, o)| {
                let up = matches!(o.state, TargetState::Ok | TargetState::Slow);
                (name.clone(), up, o.latency.as_secs_f64())
            })
            .collect();
        let findings = FindingId::ALL
            .iter()
            .map(|id| (id.name(), s.findings.iter().any(|f| f.id == *id)))
            .collect();
        let actions = ActionKind::ALL
            .iter()
            .flat_map(|a| {
                Outcome::ALL
                    .iter()
                    .map(move |o| (a.name(), o.name(), totals.get(*a, *o)))
            })
            .collect();
        let budget = s
            .budget
            .iter()
            .map(|(name, b)| (name.clone(), b.enabled, b.budget.remaining))
            .collect();
        Model {
            version: s.pleg_guard_version.clone(),
            healthy: s.healthy,
            updated_at: s
                .updated_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            interval: s.interval_ms as f64 / 1000.0,
            targets,
            findings,
            actions,
            budget,
            affected: s.systemd.affected,
            bus_serial: s.systemd.bus_serial,
            bus_serial_eta: s.systemd.bus_serial_eta_s,
            fleet: s.fleet.as_ref().map(|f| FleetModel::new(f, s.updated_at)),
        }
    }
}

/// One gauge without labels.
fn gauge<N>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let g = ConstGauge::new(value);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// A gauge family with one label.
fn gauges<'a, N: 'a>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, N)>,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (value_of_label, v) in values {
        ConstGauge::new(v).encode(m.encode_family(&[(label, value_of_label)])?)?;
    }
    Ok(())
}

impl Collector for Model {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let b = |x: bool| i64::from(x);
        e.encode_descriptor(
            "pleg_guard_build",
            "pleg-guard's version (always 1).",
            None,
            MetricType::Info,
        )?
        .encode_info(&[("version", self.version.as_str())])?;
        gauge(
            &mut e,
            "pleg_guard_healthy",
            "1 when no problem stands (status healthy), 0 when degraded or repairing.",
            b(self.healthy),
        )?;
        gauge(
            &mut e,
            "pleg_guard_last_update_timestamp_seconds",
            "When pleg-guard last updated these metrics (after every probe round), Unix time.",
            self.updated_at,
        )?;
        gauge(
            &mut e,
            "pleg_guard_round_interval_seconds",
            "The configured probe interval: a last update older than a few of these is stale.",
            self.interval,
        )?;
        gauges(
            &mut e,
            "pleg_guard_target_up",
            "1 when the target answered in the latest round (ok or slow), 0 when unresponsive or in error; absent targets are left out.",
            "target",
            self.targets.iter().map(|(t, up, _)| (t.as_str(), b(*up))),
        )?;
        gauges(
            &mut e,
            "pleg_guard_target_latency_seconds",
            "How long the target's probe call took in the latest round (up to probe.timeout for a call abandoned).",
            "target",
            self.targets.iter().map(|(t, _, l)| (t.as_str(), *l)),
        )?;
        gauges(
            &mut e,
            "pleg_guard_finding_active",
            "1 while the finding stands, 0 otherwise.",
            "finding",
            self.findings.iter().map(|(f, on)| (*f, b(*on))),
        )?;
        let mut m = e.encode_descriptor(
            "pleg_guard_actions",
            "Action outcomes since the ledger began (kept in the ledger: restarts do not reset them). succeeded/failed per run, cleared/persisted per settle check, suppressed/skipped once per episode.",
            None,
            MetricType::Counter,
        )?;
        for (action, outcome, n) in &self.actions {
            ConstCounter::new(*n)
                .encode(m.encode_family(&[("action", *action), ("outcome", *outcome)])?)?;
        }
        gauges(
            &mut e,
            "pleg_guard_budget_remaining",
            "Runs of the action left in the rolling 24 h (max_per_day minus the runs in the window).",
            "action",
            self.budget.iter().map(|(a, _, r)| (a.as_str(), *r)),
        )?;
        gauges(
            &mut e,
            "pleg_guard_action_enabled",
            "1 when the action is enabled in the configuration.",
            "action",
            self.budget.iter().map(|(a, on, _)| (a.as_str(), b(*on))),
        )?;
        gauge(
            &mut e,
            "pleg_guard_systemd_affected",
            "1 when the running systemd build carries the bus bug (systemd#11809).",
            b(self.affected),
        )?;
        if let Some(serial) = self.bus_serial {
            gauge(
                &mut e,
                "pleg_guard_systemd_bus_serial",
                "The serial of PID 1's latest reply on the system bus (an affected build wedges at 2^32).",
                serial,
            )?;
        }
        if let Some(eta) = self.bus_serial_eta {
            gauge(
                &mut e,
                "pleg_guard_systemd_bus_serial_eta_seconds",
                "Seconds until PID 1's bus serial reaches 2^32 at its current rate (absent while unknown, not growing, or on a build that wraps).",
                eta,
            )?;
        }
        if let Some(f) = &self.fleet {
            f.encode(&mut e)?;
        }
        Ok(())
    }
}

impl FleetModel {
    /// The `pleg_guard_fleet_*` gauges (only while `[fleet]` is configured).
    fn encode(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            e,
            "pleg_guard_fleet_slots_held",
            "Slots of the fleet budget held in this node's group now (as this node last read etcd).",
            self.held,
        )?;
        if let Some(max) = self.max {
            gauge(
                e,
                "pleg_guard_fleet_slots_max",
                "Slots the group has now: max_disruptive, or its share of the live members.",
                max,
            )?;
        }
        if let Some(members) = self.members {
            gauge(
                e,
                "pleg_guard_fleet_members",
                "Live members of this node's group (member keys on a lease in etcd).",
                members,
            )?;
        }
        gauge(
            e,
            "pleg_guard_fleet_wait_seconds",
            "How long this node's action has waited for a fleet slot (0 when not waiting).",
            self.wait_s,
        )?;
        gauge(
            e,
            "pleg_guard_fleet_hold_seconds",
            "How long this node has held its fleet slot (0 when it holds none).",
            self.hold_s,
        )?;
        if let Some((storming, paused, unhealthy)) = self.storm {
            gauge(
                e,
                "pleg_guard_fleet_storm",
                "1 when more members of the group than max_unhealthy report findings (storm guard, as this node last read the member keys).",
                i64::from(storming),
            )?;
            gauge(
                e,
                "pleg_guard_fleet_storm_paused",
                "1 while the storm guard pauses a disruptive repair of this node.",
                i64::from(paused),
            )?;
            gauge(
                e,
                "pleg_guard_fleet_unhealthy_members",
                "Members of the group reporting findings that need a repair (storm guard, latest read).",
                unhealthy,
            )?;
        }
        gauge(
            e,
            "pleg_guard_fleet_reachable",
            "1 when etcd answered this node's latest request, 0 when unreachable or refusing it (TLS, auth).",
            i64::from(self.reachable),
        )
    }
}

/// Publishes each round's metrics: writes the textfile, feeds the `/metrics` server (started,
/// moved or stopped as `[metrics] listen` says, also after a reload). Never fails the daemon:
/// a problem is logged once (and again only when it changes).
#[derive(Debug, Default)]
pub struct Exporter {
    state: Mutex<ExporterState>,
}

#[derive(Debug, Default)]
struct ExporterState {
    /// The server and the token it asks for.
    server: Option<(http::Server, Option<Secret>)>,
    /// The last problem logged, so each is logged once.
    textfile_problem: Option<String>,
    listen_problem: Option<String>,
}

impl Exporter {
    /// Render the metrics and hand them to the configured outputs.
    pub fn publish(&self, cfg: &MetricsConfig, snapshot: &Snapshot, totals: &Totals) {
        if cfg.textfile.is_none() && cfg.listen.is_none() {
            if let Ok(mut st) = self.state.lock() {
                st.server = None;
            }
            return;
        }
        let started = std::time::Instant::now();
        let rendered = match render(snapshot, totals) {
            Ok(r) => {
                tracing::debug!(
                    "metrics: rendered in {:?} ({} bytes of text)",
                    started.elapsed(),
                    r.text.len()
                );
                Arc::new(r)
            }
            Err(e) => {
                tracing::warn!("metrics: {e}");
                return;
            }
        };
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if let Some(path) = &cfg.textfile {
            st.write_textfile(path, &rendered.text);
        }
        st.serve(cfg.listen, cfg.bearer_token.as_ref(), rendered);
    }
}

impl ExporterState {
    fn write_textfile(&mut self, path: &Path, text: &str) {
        let problem = match textfile::write(path, text) {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        if problem != self.textfile_problem {
            match &problem {
                Some(p) => tracing::warn!("metrics: {p}"),
                None => tracing::info!("metrics: {} written again", path.display()),
            }
            self.textfile_problem = problem;
        }
    }

    fn serve(
        &mut self,
        listen: Option<SocketAddr>,
        token: Option<&Secret>,
        rendered: Arc<Rendered>,
    ) {
        let Some(addr) = listen else {
            self.server = None;
            return;
        };
        if let Some((server, served_token)) = &self.server {
            if server.addr() == addr && served_token.as_ref() == token {
                server.update(rendered);
                return;
            }
        }
        // Not serving yet, or `listen` or the token changed: (re)bind; the old server stops.
        self.server = None;
        let problem = match http::Server::start(addr, rendered, token.cloned()) {
            Ok(server) => {
                tracing::info!(
                    "metrics: serving http://{addr}/metrics{}",
                    if token.is_some() {
                        " (bearer token required)"
                    } else {
                        ""
                    }
                );
                if !addr.ip().is_loopback() {
                    tracing::warn!(
                        "metrics: `metrics.listen` = {addr} is not a loopback address: whoever reaches it can scrape{}",
                        if token.is_some() {
                            " (with the token)"
                        } else {
                            " (no `metrics.bearer_token_file` set)"
                        }
                    );
                    if !ip_filter_can_apply() {
                        tracing::warn!(
                            "metrics: this host has no cgroup v2, so the unit's IPAddressDeny=/IPAddressAllow= filter nothing: {addr} is open to every address that reaches the node (docs/security.md)"
                        );
                    }
                }
                self.server = Some((server, token.cloned()));
                None
            }
            Err(e) => Some(e.to_string()),
        };
        if problem != self.listen_problem {
            if let Some(p) = &problem {
                tracing::error!("metrics: {p}; retrying every round");
            }
            self.listen_problem = problem;
        }
    }
}

/// Whether systemd can apply the unit's IPAddressDeny=/IPAddressAllow= here: they are BPF
/// programs on the unit's cgroup, which need the unified (v2) hierarchy (mounted on
/// /sys/fs/cgroup, or beside v1 on /sys/fs/cgroup/unified in the hybrid layout).
fn ip_filter_can_apply() -> bool {
    [
        "/sys/fs/cgroup/cgroup.controllers",
        "/sys/fs/cgroup/unified/cgroup.controllers",
    ]
    .iter()
    .any(|p| Path::new(p).exists())
}

#[cfg(test)]
mod tests;
