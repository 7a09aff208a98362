//! Configuration: `/etc/pleg-guard/config.toml`, then `config.d/*.toml` beside it merged over
//! it in name order, validated into [`Config`], whose fields cannot hold a bad value.
//!
//! Each file is parsed on its own into a *fragment* (every key optional, each value with its
//! byte span), and the fragments are applied one after another over the built-in defaults.
//! Validating a value while its fragment is at hand means every error can say which file,
//! line and column it comes from; only the checks that relate two keys run on the merged
//! result, and those name both keys.

use std::fmt;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::maintenance_window::Window;
use crate::systemd_version::{DEFAULT_FIXED_BUILDS, FixedBuild};

/// The configuration file the daemon and `diagnose` read when no `--config` is given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/pleg-guard/config.toml";
/// The drop-in directory's name, beside the main file.
pub const DROPIN_DIR_NAME: &str = "config.d";

/// Default probe round period (10 s): kubelet's PLEG threshold is 180 s, so three failed
/// rounds plus a timeout are seen in well under a minute.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// Default time after start-up during which no action is taken (30 s).
pub const DEFAULT_STARTUP_GRACE: Duration = Duration::from_secs(30);
/// Default per-call probe timeout (5 s).
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default latency above which an answering target is reported `slow` (1 s).
pub const DEFAULT_SLOW_AFTER: Duration = Duration::from_secs(1);
/// Default number of consecutive failed calls before a target is unhealthy.
pub const DEFAULT_UNHEALTHY_AFTER: u32 = 3;
/// Default system bus socket.
pub const DEFAULT_DBUS_SOCKET: &str = "/run/dbus/system_bus_socket";
/// Default path of PID 1's private D-Bus socket.
pub const DEFAULT_SYSTEMD_PRIVATE_SOCKET: &str = "/run/systemd/private";
/// Default docker engine socket.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// Default containerd socket (CRI v1 over gRPC).
pub const DEFAULT_CONTAINERD_SOCKET: &str = crate::client::cri::DEFAULT_SOCKET;
/// Default kubelet unit.
pub const DEFAULT_KUBELET_UNIT: &str = "kubelet.service";
/// Default kubelet health endpoint (kubelet's `--healthz-port`, 10248).
pub const DEFAULT_KUBELET_HEALTHZ_URL: &str = "http://127.0.0.1:10248/healthz";
/// Default window in which a kubelet `PLEG is not healthy` line counts (60 s): kubelet repeats
/// the line at least every 5 s while PLEG is unhealthy, so a minute without one means healthy.
pub const DEFAULT_PLEG_LOG_WINDOW: Duration = Duration::from_secs(60);
/// `[systemd] serial_warn_before`: a week's notice before an affected PID 1 runs out of bus
/// serials (time to plan a systemd upgrade).
pub const DEFAULT_SERIAL_WARN_BEFORE: Duration = Duration::from_secs(7 * 24 * 3600);
/// `[actions.daemon_reexec] preempt_headroom`: 20 million serials, about 17 h at a busy node's
/// 330 replies a second; guards against a burst the rate windows have not caught up with.
pub const DEFAULT_PREEMPT_HEADROOM: u64 = 20_000_000;
/// `[actions.daemon_reexec] preempt_before`: reexec when the forecast says 6 h are left.
pub const DEFAULT_PREEMPT_BEFORE: Duration = Duration::from_secs(6 * 3600);
/// The largest `preempt_headroom` that means anything: the whole 32-bit serial range.
pub const PREEMPT_HEADROOM_MAX: u64 = 1 << 32;
/// Default persistent state directory (the action ledger, the bus-bug proof).
pub const DEFAULT_STATE_DIRECTORY: &str = "/var/lib/pleg-guard";
/// Default runtime directory (status.json).
pub const DEFAULT_RUNTIME_DIRECTORY: &str = "/run/pleg-guard";
/// Default metrics file: the directory Debian's `prometheus-node-exporter` reads with its
/// textfile collector.
pub const DEFAULT_METRICS_TEXTFILE: &str = "/var/lib/prometheus/node-exporter/pleg-guard.prom";

/// The longest value any duration key takes: one year. Larger values (`"500000000y"`) would
/// only overflow a deadline (`Instant + Duration` aborts a release build) or a timestamp
/// that status.json cannot print; they are rejected with the key named.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest value of the keys that time the probe loop and its waits (`interval`,
/// `startup_grace`, `probe.*`, `kubelet.pleg_log_window`, `actions.*.settle`): one day.
pub const MAX_LOOP_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The upper bound of duration key `key` (see [`MAX_DURATION`], [`MAX_LOOP_DURATION`]).
pub fn duration_ceiling(key: &str) -> Duration {
    let loop_key = matches!(
        key,
        "interval" | "startup_grace" | "kubelet.pleg_log_window"
    ) || key.starts_with("probe.")
        || (key.starts_with("actions.") && key.ends_with(".settle"));
    if loop_key {
        MAX_LOOP_DURATION
    } else {
        MAX_DURATION
    }
}

/// Whether the daemon acts or only reports what it would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Apply repairs.
    Repair,
    /// Detect and log what would be done, change nothing.
    Observe,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Repair => "repair",
            Mode::Observe => "observe",
        })
    }
}

/// When `daemon-reexec` may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReexecWhen {
    /// Only on a systemd build that carries the bus bug.
    Affected,
    /// On any systemd version.
    Always,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `mode`.
    pub mode: Mode,
    /// `interval`: one probe round every interval.
    pub interval: Duration,
    /// `startup_grace`: no action this soon after the daemon starts.
    pub startup_grace: Duration,
    /// `state_directory`: where the action ledger lives.
    pub state_directory: PathBuf,
    /// `runtime_directory`: where status.json lives.
    pub runtime_directory: PathBuf,
    /// `[probe]`.
    pub probe: ProbeConfig,
    /// `[dbus]`.
    pub dbus: DbusConfig,
    /// `[systemd]`.
    pub systemd: SystemdConfig,
    /// `[logind]`.
    pub logind: LogindConfig,
    /// `[docker]`.
    pub docker: DockerConfig,
    /// `[containerd]`.
    pub containerd: ContainerdConfig,
    /// `[kubelet]`.
    pub kubelet: KubeletConfig,
    /// `[actions.*]`.
    pub actions: ActionsConfig,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[fleet]`.
    pub fleet: FleetConfig,
}

/// Default `[fleet] group`.
pub const DEFAULT_FLEET_GROUP: &str = "default";
/// Default `[fleet] prefix`: the etcd key prefix every group lives under.
pub const DEFAULT_FLEET_PREFIX: &str = "/pleg-guard";
/// Default `[fleet] lease_ttl` (60 s): a dead holder's slot frees within this.
pub const DEFAULT_FLEET_LEASE_TTL: Duration = Duration::from_secs(60);
/// The shortest `[fleet] lease_ttl` (5 s): keep-alives go every third of it, and a shorter
/// lease would expire on one slow etcd answer.
pub const MIN_FLEET_LEASE_TTL: Duration = Duration::from_secs(5);
/// The longest `[fleet] lease_ttl` (1 h): a dead holder blocks its group at most this long.
pub const MAX_FLEET_LEASE_TTL: Duration = Duration::from_secs(3600);
/// Default `[fleet] max_wait` (15 min): an emergency cure waits at most this long for a slot.
pub const DEFAULT_FLEET_MAX_WAIT: Duration = Duration::from_secs(15 * 60);
/// The longest a group or node name may be (it is one etcd key segment).
pub const MAX_FLEET_NAME: usize = 253;

/// `[fleet] max_disruptive`: how many nodes of the group may be in a disruptive repair at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaxDisruptive {
    /// `"2"`: at most this many.
    Count(NonZeroU32),
    /// `"5%"`: this share (1..=100) of the group's live members, rounded down, at least 1.
    Percent(u8),
}

impl MaxDisruptive {
    /// The number of slots for `members` live members (at least 1).
    pub fn slots(self, members: usize) -> usize {
        match self {
            MaxDisruptive::Count(n) => usize::try_from(n.get()).unwrap_or(usize::MAX),
            MaxDisruptive::Percent(p) => (members.saturating_mul(usize::from(p)) / 100).max(1),
        }
    }
}

impl fmt::Display for MaxDisruptive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxDisruptive::Count(n) => write!(f, "{n}"),
            MaxDisruptive::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl std::str::FromStr for MaxDisruptive {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            return match p.trim().parse::<u8>() {
                Ok(p @ 1..=100) => Ok(MaxDisruptive::Percent(p)),
                _ => Err(format!(
                    "\"{s}\" is not a share between \"1%\" and \"100%\""
                )),
            };
        }
        t.parse::<u32>()
            .ok()
            .and_then(NonZeroU32::new)
            .map(MaxDisruptive::Count)
            .ok_or_else(|| {
                format!("\"{s}\" is neither a count of at least 1 (\"2\") nor a share (\"5%\")")
            })
    }
}

impl serde::Serialize for MaxDisruptive {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `[fleet] on_unreachable`: what an action that needs a slot does while etcd cannot be
/// reached (down, partitioned, no quorum) or refuses this node (bad certificate or password).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnreachable {
    /// Hold the action until etcd answers (nothing acts without a slot).
    Wait,
    /// Act under the local rate limits only.
    Local,
}

impl fmt::Display for OnUnreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnUnreachable::Wait => "wait",
            OnUnreachable::Local => "local",
        })
    }
}

/// The password read from `[fleet] password_file`; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the etcd client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// `[fleet]`: the fleet-wide disruption budget kept in etcd.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// `etcd_endpoints`: empty = no fleet budget.
    pub etcd_endpoints: Vec<String>,
    /// `group`: the pool sharing one budget.
    pub group: String,
    /// `max_disruptive`.
    pub max_disruptive: MaxDisruptive,
    /// `lease_ttl`: whole seconds, at least [`MIN_FLEET_LEASE_TTL`].
    pub lease_ttl: Duration,
    /// `on_unreachable`.
    pub on_unreachable: OnUnreachable,
    /// `max_wait`: an emergency cure waits at most this long for a slot.
    pub max_wait: Duration,
    /// `ca_file`: the CA that signed etcd's server certificates (None: the system's roots).
    pub ca_file: Option<PathBuf>,
    /// `cert_file`: this node's client certificate (with `key_file`).
    pub cert_file: Option<PathBuf>,
    /// `key_file`: its private key.
    pub key_file: Option<PathBuf>,
    /// `username`: etcd user (with `password_file`).
    pub username: Option<String>,
    /// `password_file`: the file the password was read from.
    pub password_file: Option<PathBuf>,
    /// The password read from `password_file` when the configuration was loaded.
    pub password: Option<Secret>,
    /// `node`: this node's name in the group (None: the host name).
    pub node: Option<String>,
    /// `prefix`: the etcd key prefix.
    pub prefix: String,
}

impl FleetConfig {
    /// Whether a fleet budget is configured at all.
    pub fn enabled(&self) -> bool {
        !self.etcd_endpoints.is_empty()
    }

    /// This node's name: `node`, or the kernel's host name.
    pub fn node_name(&self) -> String {
        self.node.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| fleet_name_ok(s))
                .unwrap_or_else(|| "localhost".to_owned())
        })
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            etcd_endpoints: Vec::new(),
            group: DEFAULT_FLEET_GROUP.to_owned(),
            max_disruptive: MaxDisruptive::Count(NonZeroU32::MIN),
            lease_ttl: DEFAULT_FLEET_LEASE_TTL,
            on_unreachable: OnUnreachable::Wait,
            max_wait: DEFAULT_FLEET_MAX_WAIT,
            ca_file: None,
            cert_file: None,
            key_file: None,
            username: None,
            password_file: None,
            password: None,
            node: None,
            prefix: DEFAULT_FLEET_PREFIX.to_owned(),
        }
    }
}

/// A group or node name is one etcd key segment: letters, digits, `.`, `_`, `-`.
pub fn fleet_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_FLEET_NAME
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// An etcd endpoint: `http(s)://host:port` (no path).
fn check_endpoint(s: &str) -> Result<(), String> {
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .ok_or_else(|| format!("\"{s}\" is not an http:// or https:// URL"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') || authority.contains('?') || authority.contains('@') {
        return Err(format!(
            "\"{s}\" must be scheme://host:port only (no path, query or user)"
        ));
    }
    let (host, port) = authority
        .rsplit_once(':')
        .filter(|(h, _)| !h.ends_with(']') || h.starts_with('['))
        .filter(|(h, _)| !h.contains(':') || h.starts_with('['))
        .ok_or_else(|| format!("\"{s}\" has no port (etcd's client port is usually 2379)"))?;
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("`{port}` in \"{s}\" is not a port number"));
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("\"{s}\" has no host"));
    }
    Ok(())
}

/// `[metrics]`: where the Prometheus metrics go.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConfig {
    /// `textfile`: the file node_exporter's textfile collector reads (None: `""`, off).
    pub textfile: Option<PathBuf>,
    /// `listen`: address of the `/metrics` endpoint (None: `""`, off).
    pub listen: Option<std::net::SocketAddr>,
}

/// `[probe]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Per-call timeout; a hung call is abandoned.
    pub timeout: Duration,
    /// Consecutive failed calls before a target is unhealthy (a failed target is re-asked at
    /// once, [`crate::probe::reask`]).
    pub unhealthy_after: NonZeroU32,
    /// Latency above which an answer is `slow`.
    pub slow_after: Duration,
}

/// `[dbus]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DbusConfig {
    /// Probe the bus (and, through it, PID 1 and logind).
    pub enabled: bool,
    /// The system bus socket.
    pub socket: PathBuf,
}

/// `[systemd]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemdConfig {
    /// PID 1's private socket, reached without the bus daemon.
    pub private_socket: PathBuf,
    /// Builds older than upstream 242 known to carry the bus-bug fix.
    pub fixed_builds: Vec<FixedBuild>,
    /// `systemd-serial-exhaustion` when an affected PID 1 runs out of bus serials sooner.
    pub serial_warn_before: Duration,
}

/// `[logind]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogindConfig {
    /// Probe logind.
    pub enabled: bool,
}

/// `[docker]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerConfig {
    /// Probe docker (and allow `purge-dead-containers`).
    pub enabled: bool,
    /// The engine's unix socket.
    pub socket: PathBuf,
}

/// `[containerd]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerdConfig {
    /// Probe containerd's CRI service.
    pub enabled: bool,
    /// containerd's unix socket (CRI v1 over gRPC).
    pub socket: PathBuf,
}

/// `[kubelet]`.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    /// Probe kubelet (and allow `restart-kubelet`).
    pub enabled: bool,
    /// kubelet's systemd unit (its journal is read; it is what gets restarted).
    pub unit: String,
    /// Set when kubelet runs as a docker container (e.g. RKE): its name. Logs are then read and
    /// restarts done through the docker API instead of the journal and systemd.
    pub container: Option<String>,
    /// kubelet's health endpoint.
    pub healthz_url: HttpUrl,
    /// How far back a `PLEG is not healthy` log line counts.
    pub pleg_log_window: Duration,
}

/// `[actions]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionsConfig {
    /// `[actions.purge_dead_containers]`.
    pub purge_dead_containers: ActionConfig,
    /// `[actions.daemon_reexec]`.
    pub daemon_reexec: ActionConfig,
    /// `[actions.daemon_reexec] when`.
    pub daemon_reexec_when: ReexecWhen,
    /// `[actions.daemon_reexec] preempt*`: the planned reexec before the serials run out.
    pub daemon_reexec_preempt: PreemptConfig,
    /// `[actions.restart_kubelet]`.
    pub restart_kubelet: ActionConfig,
}

/// The settings every action has.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionConfig {
    /// Whether the action may run at all.
    pub enabled: bool,
    /// At least this long between two runs.
    pub min_interval: Duration,
    /// At most this many runs in any rolling 24 h.
    pub max_per_day: NonZeroU32,
    /// How long to wait after the action before checking whether the symptom cleared.
    pub settle: Duration,
    /// `fleet`: the action needs a slot of the fleet budget (when `[fleet]` is configured).
    pub fleet: bool,
}

/// When a planned `daemon-reexec` runs before an affected PID 1 runs out of bus serials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptConfig {
    /// `preempt`: plan reexecs at all.
    pub enabled: bool,
    /// `preempt_headroom`: reexec when fewer serials than this are left (at any rate).
    pub headroom: u64,
    /// `preempt_before`: reexec when the forecast says they run out sooner than this.
    pub before: Duration,
    /// `preempt_window`: planned reexecs happen in this daily window of local time (None: any
    /// time): brought forward into it when they would come due before its next opening, and
    /// waiting for it when due outside unless the serials would run out first
    /// ([`crate::maintenance_window`]).
    pub window: Option<Window>,
}

/// A plain `http://host:port/path` URL (kubelet's healthz is never TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Path with query, starting with `/`.
    pub path: String,
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

impl std::str::FromStr for HttpUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| format!("`{s}` is not an http:// URL"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| format!("`{p}` in `{s}` is not a port number"))?;
                (h, port)
            }
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("`{s}` has no host"));
        }
        Ok(HttpUrl {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        let action = |min_interval_s: u64, max_per_day: u32, settle_s: u64, fleet| ActionConfig {
            enabled: true,
            min_interval: Duration::from_secs(min_interval_s),
            max_per_day: NonZeroU32::new(max_per_day).unwrap_or(NonZeroU32::MIN),
            settle: Duration::from_secs(settle_s),
            fleet,
        };
        Config {
            mode: Mode::Repair,
            interval: DEFAULT_INTERVAL,
            startup_grace: DEFAULT_STARTUP_GRACE,
            state_directory: PathBuf::from(DEFAULT_STATE_DIRECTORY),
            runtime_directory: PathBuf::from(DEFAULT_RUNTIME_DIRECTORY),
            probe: ProbeConfig {
                timeout: DEFAULT_PROBE_TIMEOUT,
                unhealthy_after: NonZeroU32::new(DEFAULT_UNHEALTHY_AFTER)
                    .unwrap_or(NonZeroU32::MIN),
                slow_after: DEFAULT_SLOW_AFTER,
            },
            dbus: DbusConfig {
                enabled: true,
                socket: PathBuf::from(DEFAULT_DBUS_SOCKET),
            },
            systemd: SystemdConfig {
                private_socket: PathBuf::from(DEFAULT_SYSTEMD_PRIVATE_SOCKET),
                fixed_builds: DEFAULT_FIXED_BUILDS
                    .iter()
                    .filter_map(|s| s.parse().ok())
                    .collect(),
                serial_warn_before: DEFAULT_SERIAL_WARN_BEFORE,
            },
            logind: LogindConfig { enabled: true },
            docker: DockerConfig {
                enabled: true,
                socket: PathBuf::from(DEFAULT_DOCKER_SOCKET),
            },
            containerd: ContainerdConfig {
                enabled: true,
                socket: PathBuf::from(DEFAULT_CONTAINERD_SOCKET),
            },
            kubelet: KubeletConfig {
                enabled: true,
                unit: DEFAULT_KUBELET_UNIT.to_owned(),
                container: None,
                healthz_url: DEFAULT_KUBELET_HEALTHZ_URL.parse().unwrap_or(HttpUrl {
                    host: "127.0.0.1".to_owned(),
                    port: 10248,
                    path: "/healthz".to_owned(),
                }),
                pleg_log_window: DEFAULT_PLEG_LOG_WINDOW,
            },
            actions: ActionsConfig {
                // 5 min apart, 24 a day, checked 30 s later.
                purge_dead_containers: action(300, 24, 30, false),
                // 1 h apart, 3 a day, checked 20 s later.
                daemon_reexec: action(3600, 3, 20, true),
                daemon_reexec_when: ReexecWhen::Affected,
                daemon_reexec_preempt: PreemptConfig {
                    enabled: true,
                    headroom: DEFAULT_PREEMPT_HEADROOM,
                    before: DEFAULT_PREEMPT_BEFORE,
                    window: None,
                },
                // 30 min apart, 4 a day, checked 90 s later (kubelet needs a while to relist).
                restart_kubelet: action(1800, 4, 90, true),
            },
            metrics: MetricsConfig {
                textfile: Some(PathBuf::from(DEFAULT_METRICS_TEXTFILE)),
                listen: None,
            },
            fleet: FleetConfig::default(),
        }
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A syntax error or a bad value at a known place.
    #[error("{path}:{line}:{column}: {message}")]
    At {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A problem that relates keys rather than sitting at one place.
    #[error("{path}: {message}")]
    Invalid {
        /// The main configuration file.
        path: PathBuf,
        /// What is wrong, naming the keys.
        message: String,
    },
}

/// A loaded configuration and the files it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated settings.
    pub config: Config,
    /// The files applied over the defaults, in order (empty: built-in defaults only).
    pub sources: Vec<PathBuf>,
}

/// Load the configuration. `explicit` is the `--config` path: a missing explicit file is an
/// error, a missing default file means the built-in defaults. Drop-ins are read from
/// `config.d/` beside the main file either way.
pub fn load(explicit: Option<&Path>) -> Result<Loaded, ConfigError> {
    let main = explicit.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
    let mut config = Config::default();
    let mut sources = Vec::new();
    match std::fs::read_to_string(main) {
        Ok(text) => {
            apply_file(&mut config, main, &text)?;
            sources.push(main.to_path_buf());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {}
        Err(source) => {
            return Err(ConfigError::Read {
                path: main.to_path_buf(),
                source,
            });
        }
    }
    let dropin_dir = main
        .parent()
        .unwrap_or(Path::new("."))
        .join(DROPIN_DIR_NAME);
    for path in dropins(&dropin_dir)? {
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        apply_file(&mut config, &path, &text)?;
        sources.push(path);
    }
    check_relations(&config, main)?;
    Ok(Loaded { config, sources })
}

/// Parse one configuration text on its own (no drop-ins).
#[cfg(test)]
pub fn parse_str(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    apply_file(&mut config, path, text)?;
    check_relations(&config, path)?;
    Ok(config)
}

/// The `*.toml` files of a drop-in directory in name order; a missing directory has none.
fn dropins(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConfigError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// Checks between keys, on the merged configuration.
fn check_relations(config: &Config, path: &Path) -> Result<(), ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    if config.probe.timeout > config.interval {
        return Err(invalid(format!(
            "`probe.timeout` ({}) must not exceed `interval` ({}): rounds would overlap",
            humantime::format_duration(config.probe.timeout),
            humantime::format_duration(config.interval)
        )));
    }
    if config.probe.slow_after > config.probe.timeout {
        return Err(invalid(format!(
            "`probe.slow_after` ({}) must not exceed `probe.timeout` ({})",
            humantime::format_duration(config.probe.slow_after),
            humantime::format_duration(config.probe.timeout)
        )));
    }
    check_fleet_relations(&config.fleet).map_err(invalid)
}

/// Checks between `[fleet]` keys.
fn check_fleet_relations(f: &FleetConfig) -> Result<(), String> {
    if f.cert_file.is_some() != f.key_file.is_some() {
        return Err(
            "`fleet.cert_file` and `fleet.key_file` go together: set both or neither".to_owned(),
        );
    }
    if f.username.is_some() != f.password_file.is_some() {
        return Err(
            "`fleet.username` and `fleet.password_file` go together: set both or neither"
                .to_owned(),
        );
    }
    let tls = f.ca_file.is_some() || f.cert_file.is_some();
    if let Some(plain) = f.etcd_endpoints.iter().find(|e| e.starts_with("http://")) {
        if tls {
            return Err(format!(
                "`fleet.etcd_endpoints` has \"{plain}\" (plain http) while `fleet.ca_file`/`fleet.cert_file` ask for TLS: use https:// endpoints"
            ));
        }
        if f.etcd_endpoints.iter().any(|e| e.starts_with("https://")) {
            return Err(
                "`fleet.etcd_endpoints` mixes http:// and https:// endpoints: one cluster speaks one".to_owned(),
            );
        }
    }
    Ok(())
}

// ---- fragments: one file's raw contents ------------------------------------------------

type Field<T> = Option<Spanned<T>>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fragment {
    mode: Field<String>,
    interval: Field<String>,
    startup_grace: Field<String>,
    state_directory: Field<String>,
    runtime_directory: Field<String>,
    probe: Option<ProbeFragment>,
    dbus: Option<DbusFragment>,
    systemd: Option<SystemdFragment>,
    logind: Option<LogindFragment>,
    docker: Option<DockerFragment>,
    containerd: Option<ContainerdFragment>,
    kubelet: Option<KubeletFragment>,
    actions: Option<ActionsFragment>,
    metrics: Option<MetricsFragment>,
    fleet: Option<FleetFragment>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFragment {
    etcd_endpoints: Field<Vec<Spanned<String>>>,
    group: Field<String>,
    max_disruptive: Field<String>,
    lease_ttl: Field<String>,
    on_unreachable: Field<String>,
    max_wait: Field<String>,
    ca_file: Field<String>,
    cert_file: Field<String>,
    key_file: Field<String>,
    username: Field<String>,
    password_file: Field<String>,
    node: Field<String>,
    prefix: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsFragment {
    textfile: Field<String>,
    listen: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeFragment {
    timeout: Field<String>,
    unhealthy_after: Field<i64>,
    slow_after: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DbusFragment {
    enabled: Field<bool>,
    socket: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemdFragment {
    private_socket: Field<String>,
    fixed_builds: Field<Vec<Spanned<String>>>,
    serial_warn_before: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogindFragment {
    enabled: Field<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DockerFragment {
    enabled: Field<bool>,
    socket: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContainerdFragment {
    enabled: Field<bool>,
    socket: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KubeletFragment {
    enabled: Field<bool>,
    unit: Field<String>,
    container: Field<String>,
    healthz_url: Field<String>,
    pleg_log_window: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionsFragment {
    purge_dead_containers: Option<ActionFragment>,
    daemon_reexec: Option<ReexecFragment>,
    restart_kubelet: Option<ActionFragment>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionFragment {
    enabled: Field<bool>,
    min_interval: Field<String>,
    max_per_day: Field<i64>,
    settle: Field<String>,
    fleet: Field<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReexecFragment {
    enabled: Field<bool>,
    when: Field<String>,
    preempt: Field<bool>,
    preempt_headroom: Field<i64>,
    preempt_before: Field<String>,
    preempt_window: Field<String>,
    min_interval: Field<String>,
    max_per_day: Field<i64>,
    settle: Field<String>,
    fleet: Field<bool>,
}

/// Applies one file's values over `config`, validating each with its position.
struct Applier<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Applier<'_> {
    fn error_at(&self, offset: usize, message: String) -> ConfigError {
        let (line, column) = line_col(self.text, offset);
        ConfigError::At {
            path: self.path.to_path_buf(),
            line,
            column,
            message,
        }
    }

    fn set<T: Clone>(&self, slot: &mut T, field: Field<T>) {
        if let Some(v) = field {
            *slot = v.into_inner();
        }
    }

    fn duration(
        &self,
        slot: &mut Duration,
        key: &str,
        field: Field<String>,
        allow_zero: bool,
    ) -> Result<(), ConfigError> {
        let Some(v) = field else { return Ok(()) };
        let d = parse_duration(v.get_ref())
            .map_err(|e| self.error_at(v.span().start, format!("`{key}`: {e}")))?;
        if d.is_zero() && !allow_zero {
            return Err(self.error_at(v.span().start, format!("`{key}` must be above zero")));
        }
        let ceiling = duration_ceiling(key);
        if d > ceiling {
            return Err(self.error_at(
                v.span().start,
                format!(
                    "`{key}` must be at most \"{}d\", not \"{}\"",
                    ceiling.as_secs() / 86_400,
                    v.get_ref()
                ),
            ));
        }
        *slot = d;
        Ok(())
    }

    fn path(&self, slot: &mut PathBuf, key: &str, field: Field<String>) -> Result<(), ConfigError> {
        let Some(v) = field else { return Ok(()) };
        if !v.get_ref().starts_with('/') {
            return Err(self.error_at(
                v.span().start,
                format!("`{key}` must be an absolute path, not `{}`", v.get_ref()),
            ));
        }
        *slot = PathBuf::from(v.into_inner());
        Ok(())
    }

    fn count(
        &self,
        slot: &mut NonZeroU32,
        key: &str,
        field: Field<i64>,
        max: u32,
    ) -> Result<(), ConfigError> {
        let Some(v) = field else { return Ok(()) };
        let n = *v.get_ref();
        match u32::try_from(n).ok().and_then(NonZeroU32::new) {
            Some(nz) if nz.get() <= max => {
                *slot = nz;
                Ok(())
            }
            _ => Err(self.error_at(
                v.span().start,
                format!("`{key}` must be between 1 and {max}, not {n}"),
            )),
        }
    }

    fn action(
        &self,
        slot: &mut ActionConfig,
        name: &str,
        enabled: Field<bool>,
        min_interval: Field<String>,
        max_per_day: Field<i64>,
        settle: Field<String>,
    ) -> Result<(), ConfigError> {
        self.set(&mut slot.enabled, enabled);
        self.duration(
            &mut slot.min_interval,
            &format!("actions.{name}.min_interval"),
            min_interval,
            true,
        )?;
        self.count(
            &mut slot.max_per_day,
            &format!("actions.{name}.max_per_day"),
            max_per_day,
            10_000,
        )?;
        self.duration(
            &mut slot.settle,
            &format!("actions.{name}.settle"),
            settle,
            false,
        )
    }
}

fn apply_file(config: &mut Config, path: &Path, text: &str) -> Result<(), ConfigError> {
    let a = Applier { path, text };
    let f: Fragment = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        a.error_at(offset, explain_toml_error(e.message()))
    })?;

    if let Some(v) = f.mode {
        config.mode = match v.get_ref().as_str() {
            "repair" => Mode::Repair,
            "observe" => Mode::Observe,
            other => {
                return Err(a.error_at(
                    v.span().start,
                    format!("`mode` must be \"repair\" or \"observe\", not \"{other}\""),
                ));
            }
        };
    }
    a.duration(&mut config.interval, "interval", f.interval, false)?;
    a.duration(
        &mut config.startup_grace,
        "startup_grace",
        f.startup_grace,
        true,
    )?;
    a.path(
        &mut config.state_directory,
        "state_directory",
        f.state_directory,
    )?;
    a.path(
        &mut config.runtime_directory,
        "runtime_directory",
        f.runtime_directory,
    )?;
    if let Some(p) = f.probe {
        a.duration(&mut config.probe.timeout, "probe.timeout", p.timeout, false)?;
        a.count(
            &mut config.probe.unhealthy_after,
            "probe.unhealthy_after",
            p.unhealthy_after,
            1000,
        )?;
        a.duration(
            &mut config.probe.slow_after,
            "probe.slow_after",
            p.slow_after,
            false,
        )?;
    }
    if let Some(d) = f.dbus {
        a.set(&mut config.dbus.enabled, d.enabled);
        a.path(&mut config.dbus.socket, "dbus.socket", d.socket)?;
    }
    if let Some(s) = f.systemd {
        a.path(
            &mut config.systemd.private_socket,
            "systemd.private_socket",
            s.private_socket,
        )?;
        if let Some(list) = s.fixed_builds {
            let mut builds = Vec::new();
            for item in list.into_inner() {
                let build = item.get_ref().parse::<FixedBuild>().map_err(|e| {
                    a.error_at(item.span().start, format!("`systemd.fixed_builds`: {e}"))
                })?;
                builds.push(build);
            }
            config.systemd.fixed_builds = builds;
        }
        a.duration(
            &mut config.systemd.serial_warn_before,
            "systemd.serial_warn_before",
            s.serial_warn_before,
            true,
        )?;
    }
    if let Some(l) = f.logind {
        a.set(&mut config.logind.enabled, l.enabled);
    }
    if let Some(d) = f.docker {
        a.set(&mut config.docker.enabled, d.enabled);
        a.path(&mut config.docker.socket, "docker.socket", d.socket)?;
    }
    if let Some(c) = f.containerd {
        a.set(&mut config.containerd.enabled, c.enabled);
        a.path(&mut config.containerd.socket, "containerd.socket", c.socket)?;
    }
    if let Some(k) = f.kubelet {
        a.set(&mut config.kubelet.enabled, k.enabled);
        if let Some(unit) = k.unit {
            if unit.get_ref().is_empty() || unit.get_ref().contains('/') {
                return Err(a.error_at(
                    unit.span().start,
                    format!("`kubelet.unit` is not a unit name: \"{}\"", unit.get_ref()),
                ));
            }
            config.kubelet.unit = unit.into_inner();
        }
        if let Some(c) = k.container {
            let name = c.into_inner();
            config.kubelet.container = (!name.is_empty()).then_some(name);
        }
        if let Some(url) = k.healthz_url {
            config.kubelet.healthz_url = url
                .get_ref()
                .parse()
                .map_err(|e| a.error_at(url.span().start, format!("`kubelet.healthz_url`: {e}")))?;
        }
        a.duration(
            &mut config.kubelet.pleg_log_window,
            "kubelet.pleg_log_window",
            k.pleg_log_window,
            false,
        )?;
    }
    if let Some(actions) = f.actions {
        if let Some(p) = actions.purge_dead_containers {
            a.action(
                &mut config.actions.purge_dead_containers,
                "purge_dead_containers",
                p.enabled,
                p.min_interval,
                p.max_per_day,
                p.settle,
            )?;
            a.set(&mut config.actions.purge_dead_containers.fleet, p.fleet);
        }
        if let Some(r) = actions.daemon_reexec {
            if let Some(w) = r.when {
                config.actions.daemon_reexec_when = match w.get_ref().as_str() {
                    "affected" => ReexecWhen::Affected,
                    "always" => ReexecWhen::Always,
                    other => {
                        return Err(a.error_at(
                            w.span().start,
                            format!(
                                "`actions.daemon_reexec.when` must be \"affected\" or \"always\", not \"{other}\""
                            ),
                        ));
                    }
                };
            }
            let preempt = &mut config.actions.daemon_reexec_preempt;
            a.set(&mut preempt.enabled, r.preempt);
            if let Some(h) = r.preempt_headroom {
                preempt.headroom = u64::try_from(*h.get_ref())
                    .ok()
                    .filter(|n| *n <= PREEMPT_HEADROOM_MAX)
                    .ok_or_else(|| {
                        a.error_at(
                            h.span().start,
                            format!(
                                "`actions.daemon_reexec.preempt_headroom` must be between 0 and {PREEMPT_HEADROOM_MAX} (2^32), not {}",
                                h.get_ref()
                            ),
                        )
                    })?;
            }
            a.duration(
                &mut preempt.before,
                "actions.daemon_reexec.preempt_before",
                r.preempt_before,
                true,
            )?;
            if let Some(v) = r.preempt_window {
                let text = v.get_ref();
                preempt.window = if text.is_empty() {
                    None
                } else {
                    Some(text.parse().map_err(|e| {
                        a.error_at(
                            v.span().start,
                            format!("`actions.daemon_reexec.preempt_window`: {e}"),
                        )
                    })?)
                };
            }
            a.action(
                &mut config.actions.daemon_reexec,
                "daemon_reexec",
                r.enabled,
                r.min_interval,
                r.max_per_day,
                r.settle,
            )?;
            a.set(&mut config.actions.daemon_reexec.fleet, r.fleet);
        }
        if let Some(k) = actions.restart_kubelet {
            a.action(
                &mut config.actions.restart_kubelet,
                "restart_kubelet",
                k.enabled,
                k.min_interval,
                k.max_per_day,
                k.settle,
            )?;
            a.set(&mut config.actions.restart_kubelet.fleet, k.fleet);
        }
    }
    if let Some(m) = f.metrics {
        a.metrics(&mut config.metrics, m)?;
    }
    if let Some(fl) = f.fleet {
        a.fleet(&mut config.fleet, fl)?;
    }
    Ok(())
}

impl Applier<'_> {
    /// `[metrics]`: `""` turns either output off.
    fn metrics(&self, slot: &mut MetricsConfig, m: MetricsFragment) -> Result<(), ConfigError> {
        if let Some(v) = m.textfile {
            let text = v.get_ref();
            slot.textfile = if text.is_empty() {
                None
            } else if !text.starts_with('/') {
                return Err(self.error_at(
                    v.span().start,
                    format!("`metrics.textfile` must be an absolute path (or \"\" for off), not `{text}`"),
                ));
            } else if !text.ends_with(".prom") || text.ends_with("/.prom") {
                return Err(self.error_at(
                    v.span().start,
                    format!(
                        "`metrics.textfile` must name a `*.prom` file (node_exporter's textfile collector reads no other), not `{text}`"
                    ),
                ));
            } else {
                Some(PathBuf::from(text))
            };
        }
        if let Some(v) = m.listen {
            let text = v.get_ref().trim();
            slot.listen = if text.is_empty() {
                None
            } else {
                match text.parse::<std::net::SocketAddr>() {
                    Ok(addr) if addr.port() != 0 => Some(addr),
                    Ok(_) => {
                        return Err(self.error_at(
                            v.span().start,
                            format!("`metrics.listen` needs a port other than 0, not `{text}`"),
                        ));
                    }
                    Err(_) => {
                        return Err(self.error_at(
                            v.span().start,
                            format!(
                                "`metrics.listen` must be an IP address and port such as \"127.0.0.1:9847\" or \"[::1]:9847\" (or \"\" for off), not `{text}`"
                            ),
                        ));
                    }
                }
            };
        }
        Ok(())
    }
}

impl Applier<'_> {
    /// An optional absolute path: `""` unsets it.
    fn optional_path(
        &self,
        slot: &mut Option<PathBuf>,
        key: &str,
        field: Field<String>,
    ) -> Result<(), ConfigError> {
        let Some(v) = field else { return Ok(()) };
        let text = v.get_ref();
        *slot = if text.is_empty() {
            None
        } else if !text.starts_with('/') {
            return Err(self.error_at(
                v.span().start,
                format!("`{key}` must be an absolute path (or \"\" for none), not `{text}`"),
            ));
        } else {
            Some(PathBuf::from(text))
        };
        Ok(())
    }

    /// `[fleet]`.
    fn fleet(&self, slot: &mut FleetConfig, f: FleetFragment) -> Result<(), ConfigError> {
        if let Some(list) = f.etcd_endpoints {
            let mut endpoints = Vec::new();
            for item in list.into_inner() {
                let e = item.get_ref().trim();
                check_endpoint(e).map_err(|m| {
                    self.error_at(item.span().start, format!("`fleet.etcd_endpoints`: {m}"))
                })?;
                endpoints.push(e.trim_end_matches('/').to_owned());
            }
            slot.etcd_endpoints = endpoints;
        }
        if let Some(g) = f.group {
            if !fleet_name_ok(g.get_ref()) {
                return Err(self.error_at(
                    g.span().start,
                    format!(
                        "`fleet.group` must be 1 to {MAX_FLEET_NAME} letters, digits, `.`, `_` or `-` (it is an etcd key segment), not \"{}\"",
                        g.get_ref()
                    ),
                ));
            }
            slot.group = g.into_inner();
        }
        if let Some(m) = f.max_disruptive {
            slot.max_disruptive = m.get_ref().parse().map_err(|e| {
                self.error_at(m.span().start, format!("`fleet.max_disruptive`: {e}"))
            })?;
        }
        if let Some(v) = f.lease_ttl {
            let d = parse_duration(v.get_ref())
                .map_err(|e| self.error_at(v.span().start, format!("`fleet.lease_ttl`: {e}")))?;
            if d < MIN_FLEET_LEASE_TTL || d > MAX_FLEET_LEASE_TTL || d.subsec_nanos() != 0 {
                return Err(self.error_at(
                    v.span().start,
                    format!(
                        "`fleet.lease_ttl` must be whole seconds between \"5s\" and \"1h\" (etcd leases count seconds; keep-alives go every third), not \"{}\"",
                        v.get_ref()
                    ),
                ));
            }
            slot.lease_ttl = d;
        }
        if let Some(v) = f.on_unreachable {
            slot.on_unreachable = match v.get_ref().as_str() {
                "wait" => OnUnreachable::Wait,
                "local" => OnUnreachable::Local,
                other => {
                    return Err(self.error_at(
                        v.span().start,
                        format!(
                            "`fleet.on_unreachable` must be \"wait\" or \"local\", not \"{other}\""
                        ),
                    ));
                }
            };
        }
        self.duration(&mut slot.max_wait, "fleet.max_wait", f.max_wait, false)?;
        self.optional_path(&mut slot.ca_file, "fleet.ca_file", f.ca_file)?;
        self.optional_path(&mut slot.cert_file, "fleet.cert_file", f.cert_file)?;
        self.optional_path(&mut slot.key_file, "fleet.key_file", f.key_file)?;
        if let Some(u) = f.username {
            let name = u.into_inner();
            slot.username = (!name.is_empty()).then_some(name);
        }
        if let Some(p) = f.password_file {
            let start = p.span().start;
            self.optional_path(&mut slot.password_file, "fleet.password_file", Some(p))?;
            slot.password = match &slot.password_file {
                None => None,
                Some(file) => {
                    let text = std::fs::read_to_string(file).map_err(|e| {
                        self.error_at(
                            start,
                            format!("`fleet.password_file`: cannot read {}: {e}", file.display()),
                        )
                    })?;
                    let password = text.strip_suffix('\n').unwrap_or(&text);
                    let password = password.strip_suffix('\r').unwrap_or(password);
                    if password.is_empty() {
                        return Err(self.error_at(
                            start,
                            format!("`fleet.password_file`: {} is empty", file.display()),
                        ));
                    }
                    Some(Secret(password.to_owned()))
                }
            };
        }
        if let Some(n) = f.node {
            let name = n.get_ref();
            slot.node = if name.is_empty() {
                None
            } else if fleet_name_ok(name) {
                Some(name.clone())
            } else {
                return Err(self.error_at(
                    n.span().start,
                    format!(
                        "`fleet.node` must be 1 to {MAX_FLEET_NAME} letters, digits, `.`, `_` or `-` (or \"\" for the host name), not \"{name}\""
                    ),
                ));
            };
        }
        if let Some(p) = f.prefix {
            let text = p.get_ref();
            let ok =
                text.starts_with('/') && text.len() > 1 && text[1..].split('/').all(fleet_name_ok);
            if !ok {
                return Err(self.error_at(
                    p.span().start,
                    format!(
                        "`fleet.prefix` must be an absolute key path such as \"/pleg-guard\" (segments of letters, digits, `.`, `_`, `-`; no trailing `/`), not \"{text}\""
                    ),
                ));
            }
            slot.prefix = p.into_inner();
        }
        Ok(())
    }
}

/// Parse a human duration (`"500ms"`, `"10s"`, `"5m"`, `"1h 30m"`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        format!("bad duration \"{s}\" ({e}); write e.g. \"500ms\", \"10s\", \"5m\", \"1h\"")
    })
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// Rephrase toml/serde's messages in the config's own words, suggesting the nearest valid
/// key for an unknown one.
fn explain_toml_error(message: &str) -> String {
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((key, expected)) = rest.split_once('`') {
            let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
            let nearest = candidates
                .iter()
                .map(|c| (edit_distance(key, c), *c))
                .filter(|(d, c)| *d <= 3 && *d < c.len().max(key.len()))
                .min();
            return match nearest {
                Some((_, c)) => format!("unknown key `{key}` (did you mean `{c}`?)"),
                None if candidates.is_empty() => format!("unknown key `{key}`"),
                None => format!(
                    "unknown key `{key}` (valid here: {})",
                    candidates.join(", ")
                ),
            };
        }
    }
    message.to_owned()
}

/// Levenshtein distance, for key suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        parse_str(Path::new("/etc/pleg-guard/config.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn contract_example_parses() {
        let text = r#"
mode = "repair"
interval = "10s"
startup_grace = "30s"

[probe]
timeout = "5s"
unhealthy_after = 3

[docker]
enabled = true
socket = "/var/run/docker.sock"

[kubelet]
enabled = true
unit = "kubelet.service"
healthz_url = "http://127.0.0.1:10248/healthz"

[actions.purge_dead_containers]
enabled = true
min_interval = "5m"
max_per_day = 24

[actions.daemon_reexec]
enabled = true
when = "affected"
min_interval = "1h"
max_per_day = 3

[actions.restart_kubelet]
enabled = true
min_interval = "30m"
max_per_day = 4
"#;
        let c = parse(text).unwrap();
        assert_eq!(c.interval, Duration::from_secs(10));
        assert_eq!(c.actions.daemon_reexec.max_per_day.get(), 3);
        assert_eq!(c.actions.daemon_reexec_when, ReexecWhen::Affected);
        assert_eq!(c.kubelet.healthz_url.port, 10248);
    }

    #[test]
    fn values_are_read() {
        let c = parse(
            "mode = \"observe\"\ninterval = \"500ms\"\n[probe]\ntimeout = \"250ms\"\nslow_after = \"100ms\"\nunhealthy_after = 1\n[actions.daemon_reexec]\nwhen = \"always\"\n[kubelet]\ncontainer = \"kubelet\"\n",
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Observe);
        assert_eq!(c.interval, Duration::from_millis(500));
        assert_eq!(c.probe.timeout, Duration::from_millis(250));
        assert_eq!(c.probe.unhealthy_after.get(), 1);
        assert_eq!(c.actions.daemon_reexec_when, ReexecWhen::Always);
        assert_eq!(c.kubelet.container.as_deref(), Some("kubelet"));
    }

    #[test]
    fn serial_forecast_keys_are_read_and_checked() {
        let c = parse(
            "[systemd]\nserial_warn_before = \"3d\"\n[actions.daemon_reexec]\npreempt = false\npreempt_headroom = 1000\npreempt_before = \"2h\"\n",
        )
        .unwrap();
        assert_eq!(c.systemd.serial_warn_before, Duration::from_secs(3 * 86400));
        let p = c.actions.daemon_reexec_preempt;
        assert!(!p.enabled);
        assert_eq!(p.headroom, 1000);
        assert_eq!(p.before, Duration::from_secs(7200));
        let d = Config::default().actions.daemon_reexec_preempt;
        assert!(d.enabled && d.headroom == 20_000_000 && d.before == Duration::from_secs(6 * 3600));
        for bad in ["-1", "4294967297"] {
            let e = parse(&format!(
                "[actions.daemon_reexec]\npreempt_headroom = {bad}\n"
            ))
            .unwrap_err();
            assert!(
                e.contains("`actions.daemon_reexec.preempt_headroom`"),
                "{e}"
            );
        }
        let e = parse("[systemd]\nserial_warn_before = \"soon\"\n").unwrap_err();
        assert!(e.contains("`systemd.serial_warn_before`"), "{e}");
    }

    #[test]
    fn preempt_window_is_read_and_checked() {
        assert_eq!(Config::default().actions.daemon_reexec_preempt.window, None);
        let c = parse("[actions.daemon_reexec]\npreempt_window = \"23:00-02:00\"\n").unwrap();
        let w = c.actions.daemon_reexec_preempt.window.unwrap();
        assert_eq!(w.to_string(), "23:00-02:00");
        // "" is any time, also over an earlier file's window
        let c = parse("[actions.daemon_reexec]\npreempt_window = \"\"\n").unwrap();
        assert_eq!(c.actions.daemon_reexec_preempt.window, None);
        for (bad, needle) in [
            ("00:00-00:00", "starts where it ends"),
            ("02:00-24:00", "24:00 is not a time of day"),
            ("2:00-5:00", "is not a window: write \"HH:MM-HH:MM\""),
            ("02:00", "is not a window"),
            ("night", "is not a window"),
        ] {
            let e = parse(&format!(
                "[actions.daemon_reexec]\npreempt_window = \"{bad}\"\n"
            ))
            .unwrap_err();
            assert!(
                e.starts_with(
                    "/etc/pleg-guard/config.toml:2:18: `actions.daemon_reexec.preempt_window`: "
                ),
                "{e}"
            );
            assert!(e.contains(needle), "{e}");
        }
        let e = parse("[actions.daemon_reexec]\npreempt_window = 2\n").unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let e = parse("interval = \"10s\"\nmode = \n").unwrap_err();
        assert!(e.starts_with("/etc/pleg-guard/config.toml:2:"), "{e}");
    }

    #[test]
    fn unknown_key_is_named_with_suggestion() {
        let e = parse("[probe]\ntimout = \"5s\"\n").unwrap_err();
        assert_eq!(
            e,
            "/etc/pleg-guard/config.toml:2:1: unknown key `timout` (did you mean `timeout`?)"
        );
        let e = parse("intervall = \"5s\"\n").unwrap_err();
        assert!(e.contains("did you mean `interval`"), "{e}");
    }

    #[test]
    fn bad_duration_names_key_and_place() {
        let e = parse("[actions.restart_kubelet]\nmin_interval = \"thirty\"\n").unwrap_err();
        assert!(
            e.starts_with("/etc/pleg-guard/config.toml:2:16: `actions.restart_kubelet.min_interval`: bad duration"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (text, needle) in [
            ("mode = \"fix\"\n", "`mode` must be"),
            ("interval = \"0s\"\n", "`interval` must be above zero"),
            (
                "[probe]\nunhealthy_after = 0\n",
                "`probe.unhealthy_after` must be between",
            ),
            (
                "[probe]\nunhealthy_after = -2\n",
                "`probe.unhealthy_after` must be between",
            ),
            (
                "[actions.daemon_reexec]\nwhen = \"sometimes\"\n",
                "`actions.daemon_reexec.when`",
            ),
            (
                "[actions.daemon_reexec]\nmax_per_day = 0\n",
                "max_per_day` must be between",
            ),
            ("[docker]\nsocket = \"docker.sock\"\n", "absolute path"),
            (
                "[containerd]\nsocket = \"containerd.sock\"\n",
                "`containerd.socket`",
            ),
            ("[containerd]\nenabled = \"yes\"\n", "invalid type"),
            (
                "[kubelet]\nhealthz_url = \"https://x/healthz\"\n",
                "not an http:// URL",
            ),
            (
                "[systemd]\nfixed_builds = [\"nonsense\"]\n",
                "`systemd.fixed_builds`",
            ),
            ("interval = 10\n", "invalid type"),
            (
                "[probe]\ntimeout = \"20s\"\n",
                "`probe.timeout` (20s) must not exceed `interval`",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn huge_durations_are_rejected_with_the_key_named() {
        for (text, key) in [
            (
                "interval = \"500000000y\"\n",
                "`interval` must be at most \"1d\"",
            ),
            (
                "startup_grace = \"1000y\"\n",
                "`startup_grace` must be at most \"1d\"",
            ),
            (
                "[probe]\ntimeout = \"100000y\"\n",
                "`probe.timeout` must be at most",
            ),
            (
                "[probe]\nslow_after = \"2d\"\n",
                "`probe.slow_after` must be at most",
            ),
            (
                "[kubelet]\npleg_log_window = \"9999y\"\n",
                "`kubelet.pleg_log_window`",
            ),
            (
                "[actions.daemon_reexec]\nmin_interval = \"100000y\"\n",
                "`actions.daemon_reexec.min_interval` must be at most \"365d\"",
            ),
            (
                "[actions.restart_kubelet]\nsettle = \"300000000000y\"\n",
                "`actions.restart_kubelet.settle` must be at most \"1d\"",
            ),
            (
                "[actions.purge_dead_containers]\nsettle = \"2d\"\n",
                "`actions.purge_dead_containers.settle`",
            ),
            // Past u64 seconds: humantime's own overflow, still a named error.
            (
                "interval = \"999999999999999y\"\n",
                "`interval`: bad duration",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(key), "{text:?}: {e}");
        }
        // The ceilings themselves are accepted (interval and timeout at one day each).
        let c = parse(
            "interval = \"1d\"\nstartup_grace = \"1d\"\n[probe]\ntimeout = \"1d\"\n[actions.daemon_reexec]\nmin_interval = \"365d\"\nsettle = \"1d\"\n",
        )
        .unwrap();
        assert_eq!(c.actions.daemon_reexec.min_interval, MAX_DURATION);
        assert_eq!(c.interval, MAX_LOOP_DURATION);
        // Keys added later get the general ceiling.
        assert_eq!(duration_ceiling("systemd.serial_warn_before"), MAX_DURATION);
    }

    #[test]
    fn metrics_keys() {
        let c = parse("").unwrap();
        assert_eq!(
            c.metrics.textfile.as_deref(),
            Some(Path::new(DEFAULT_METRICS_TEXTFILE))
        );
        assert_eq!(c.metrics.listen, None);
        let c = parse("[metrics]\ntextfile = \"\"\nlisten = \"[::1]:9847\"\n").unwrap();
        assert_eq!(c.metrics.textfile, None);
        assert_eq!(c.metrics.listen, "[::1]:9847".parse().ok());
        let c = parse("[metrics]\ntextfile = \"/tmp/x/pg.prom\"\nlisten = \"127.0.0.1:9847\"\n")
            .unwrap();
        assert_eq!(
            c.metrics.textfile.as_deref(),
            Some(Path::new("/tmp/x/pg.prom"))
        );
        assert_eq!(c.metrics.listen, "127.0.0.1:9847".parse().ok());
        for (text, needle) in [
            (
                "[metrics]\nlisten = \"localhost:9847\"\n",
                "2:10: `metrics.listen` must be an IP address and port",
            ),
            ("[metrics]\nlisten = \"9847\"\n", "`metrics.listen` must be"),
            (
                "[metrics]\nlisten = \"127.0.0.1:0\"\n",
                "`metrics.listen` needs a port other than 0",
            ),
            (
                "[metrics]\ntextfile = \"pg.prom\"\n",
                "`metrics.textfile` must be an absolute path",
            ),
            (
                "[metrics]\ntextfile = \"/var/lib/x/pg.txt\"\n",
                "`metrics.textfile` must name a `*.prom` file",
            ),
            ("[metrics]\nlissen = \"\"\n", "did you mean `listen`"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn healthz_url_forms() {
        let u: HttpUrl = "http://localhost:8080".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("localhost", 8080, "/")
        );
        let u: HttpUrl = "http://[::1]:10248/healthz".parse().unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 10248));
        assert!("http://:80/".parse::<HttpUrl>().is_err());
        assert!("http://h:99999/".parse::<HttpUrl>().is_err());
    }

    #[test]
    fn dropins_merge_in_name_order_and_missing_default_is_fine() {
        let dir =
            std::env::temp_dir().join(format!("pleg-guard-config-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("config.d")).unwrap();
        let main = dir.join("config.toml");
        std::fs::write(&main, "interval = \"20s\"\nmode = \"observe\"\n").unwrap();
        std::fs::write(dir.join("config.d/20-b.toml"), "interval = \"30s\"\n").unwrap();
        std::fs::write(
            dir.join("config.d/10-a.toml"),
            "interval = \"40s\"\n[probe]\ntimeout = \"2s\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("config.d/ignored.conf"), "garbage").unwrap();
        let loaded = load(Some(&main)).unwrap();
        assert_eq!(loaded.config.interval, Duration::from_secs(30));
        assert_eq!(loaded.config.probe.timeout, Duration::from_secs(2));
        assert_eq!(loaded.config.mode, Mode::Observe);
        assert_eq!(loaded.sources.len(), 3);

        std::fs::write(dir.join("config.d/30-bad.toml"), "[probe]\nbogus = 1\n").unwrap();
        let e = load(Some(&main)).unwrap_err().to_string();
        assert!(e.contains("30-bad.toml:2:1: unknown key `bogus`"), "{e}");

        let e = load(Some(&dir.join("missing.toml")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.toml"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fleet_keys_are_read() {
        let dir = std::env::temp_dir().join(format!("pg-fleet-cfg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pw = dir.join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let text = format!(
            r#"
[fleet]
etcd_endpoints = ["https://10.0.0.5:2379", "https://[::1]:2379/"]
group = "pool-a.eu_1"
max_disruptive = "5%"
lease_ttl = "30s"
on_unreachable = "local"
max_wait = "5m"
ca_file = "/etc/pleg-guard/etcd-ca.pem"
cert_file = "/etc/pleg-guard/node.pem"
key_file = "/etc/pleg-guard/node-key.pem"
username = "pleg"
password_file = "{}"
node = "node-17"
prefix = "/ops/pleg-guard"

[actions.purge_dead_containers]
fleet = true
[actions.restart_kubelet]
fleet = false
"#,
            pw.display()
        );
        let c = parse(&text).unwrap();
        let f = &c.fleet;
        assert!(f.enabled());
        assert_eq!(
            f.etcd_endpoints,
            ["https://10.0.0.5:2379", "https://[::1]:2379"]
        );
        assert_eq!(f.group, "pool-a.eu_1");
        assert_eq!(f.max_disruptive, MaxDisruptive::Percent(5));
        assert_eq!(f.lease_ttl, Duration::from_secs(30));
        assert_eq!(f.on_unreachable, OnUnreachable::Local);
        assert_eq!(f.max_wait, Duration::from_secs(300));
        assert_eq!(f.password.as_ref().map(Secret::expose), Some("s3cret"));
        assert!(
            !format!("{f:?}").contains("s3cret"),
            "Debug hides the password"
        );
        assert_eq!(f.node_name(), "node-17");
        assert_eq!(f.prefix, "/ops/pleg-guard");
        assert!(c.actions.purge_dead_containers.fleet);
        assert!(c.actions.daemon_reexec.fleet, "default stays");
        assert!(!c.actions.restart_kubelet.fleet);
        let d = Config::default();
        assert!(!d.fleet.enabled());
        assert!(!d.actions.purge_dead_containers.fleet);
        assert!(d.actions.daemon_reexec.fleet && d.actions.restart_kubelet.fleet);
        assert!(!d.fleet.node_name().is_empty());

        let missing = dir.join("nope");
        let e = parse(&format!(
            "[fleet]\nusername = \"u\"\npassword_file = \"{}\"\n",
            missing.display()
        ))
        .unwrap_err();
        assert!(
            e.contains(":3:17: `fleet.password_file`: cannot read") && e.contains("nope"),
            "{e}"
        );
        std::fs::write(&pw, "\n").unwrap();
        let e = parse(&format!(
            "[fleet]\nusername = \"u\"\npassword_file = \"{}\"\n",
            pw.display()
        ))
        .unwrap_err();
        assert!(
            e.contains("`fleet.password_file`") && e.contains("is empty"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_fleet_values_are_named() {
        for (text, expect) in [
            (
                "etcd_endpoints = [\"10.0.0.5:2379\"]",
                "`fleet.etcd_endpoints`: \"10.0.0.5:2379\" is not an http",
            ),
            ("etcd_endpoints = [\"https://10.0.0.5\"]", "has no port"),
            (
                "etcd_endpoints = [\"https://10.0.0.5:0\"]",
                "is not a port number",
            ),
            ("etcd_endpoints = [\"https://:2379\"]", "has no host"),
            ("etcd_endpoints = [\"https://h:2379/v3\"]", "no path"),
            ("group = \"\"", "`fleet.group` must be"),
            ("group = \"a/b\"", "`fleet.group` must be"),
            ("group = \"..\"", "`fleet.group` must be"),
            (
                "max_disruptive = \"0\"",
                "`fleet.max_disruptive`: \"0\" is neither",
            ),
            ("max_disruptive = \"two\"", "`fleet.max_disruptive`"),
            ("max_disruptive = \"0%\"", "between \"1%\" and \"100%\""),
            ("max_disruptive = \"101%\"", "between \"1%\" and \"100%\""),
            (
                "lease_ttl = \"2s\"",
                "`fleet.lease_ttl` must be whole seconds",
            ),
            (
                "lease_ttl = \"5500ms\"",
                "`fleet.lease_ttl` must be whole seconds",
            ),
            ("lease_ttl = \"2h\"", "`fleet.lease_ttl`"),
            (
                "on_unreachable = \"panic\"",
                "`fleet.on_unreachable` must be \"wait\" or \"local\"",
            ),
            ("max_wait = \"0s\"", "`fleet.max_wait` must be above zero"),
            ("max_wait = \"2y\"", "`fleet.max_wait` must be at most"),
            (
                "ca_file = \"ca.pem\"",
                "`fleet.ca_file` must be an absolute path",
            ),
            ("node = \"a b\"", "`fleet.node` must be"),
            ("prefix = \"pleg\"", "`fleet.prefix` must be"),
            ("prefix = \"/pleg/\"", "`fleet.prefix` must be"),
            ("bogus = 1", "unknown key `bogus`"),
        ] {
            let e = parse(&format!("[fleet]\n{text}\n")).unwrap_err();
            assert!(e.contains(":2:"), "{text}: {e}");
            assert!(e.contains(expect), "{text}: {e}");
        }
        for (text, expect) in [
            (
                "cert_file = \"/c.pem\"",
                "`fleet.cert_file` and `fleet.key_file` go together",
            ),
            (
                "username = \"u\"",
                "`fleet.username` and `fleet.password_file` go together",
            ),
            (
                "etcd_endpoints = [\"http://h:2379\"]\nca_file = \"/ca.pem\"",
                "plain http",
            ),
            (
                "etcd_endpoints = [\"http://h:2379\", \"https://g:2379\"]",
                "mixes http:// and https://",
            ),
        ] {
            let e = parse(&format!("[fleet]\n{text}\n")).unwrap_err();
            assert!(e.contains(expect), "{text}: {e}");
        }
    }

    #[test]
    fn max_disruptive_slots() {
        let p = |s: &str| s.parse::<MaxDisruptive>().unwrap();
        assert_eq!(p("2").slots(100), 2);
        assert_eq!(p(" 3 ").to_string(), "3");
        assert_eq!(p("50%").slots(4), 2);
        assert_eq!(p("50%").slots(2), 1);
        assert_eq!(p("5%").slots(10), 1, "at least one");
        assert_eq!(p("5%").slots(0), 1);
        assert_eq!(p("5%").slots(2000), 100);
        assert_eq!(p("100%").to_string(), "100%");
        assert_eq!(
            serde_json::to_value(p("5%")).unwrap(),
            serde_json::json!("5%")
        );
    }

    #[test]
    fn shipped_default_config_matches_built_in_defaults() {
        let text = include_str!("../packaging/config.toml");
        assert_eq!(parse(text).unwrap(), Config::default());
        let uncommented: String = text
            .lines()
            .map(|l| {
                l.strip_prefix("#")
                    .filter(|r| !r.starts_with(' ') && !r.starts_with('#') && !r.is_empty())
                    .map_or(l.to_owned(), str::to_owned)
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            parse(&uncommented).unwrap(),
            Config::default(),
            "{uncommented}"
        );
    }
}
