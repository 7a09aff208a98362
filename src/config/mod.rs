//! Configuration: `/etc/pleg-guard/config.toml`, then `config.d/*.toml` beside it merged over
//! it in name order, validated into [`Config`], whose fields cannot hold a bad value.
//!
//! Each file is parsed on its own into a *fragment* (every key optional, each value with its
//! byte span), and the fragments are applied one after another over the built-in defaults.
//! Validating a value while its fragment is at hand means every error can say which file,
//! line and column it comes from; only the checks that relate two keys run on the merged
//! result, and those name both keys.
//!
//! - this file: the schema ([`Config`] and its sections), the defaults and the loader;
//! - [`fragment`]: one file's raw contents;
//! - [`apply`]: a fragment validated and written over the configuration, key by key;
//! - [`explain`]: line and column of an error, toml's messages in the config's words.
//!
//! A subsystem's own value types live with the subsystem and say what a good value is:
//! `[fleet]` in [`crate::fleet::settings`], kubelet's [`HttpUrl`] beside its client,
//! systemd's [`FixedBuild`], the preempt [`Window`].

mod apply;
mod explain;
mod fragment;
#[cfg(test)]
mod tests;

use std::fmt;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::client::kubelet::HttpUrl;
use crate::fleet::FleetConfig;
use crate::systemd::forecast::Thresholds;
use crate::systemd::version::{DEFAULT_FIXED_BUILDS, FixedBuild};
use crate::systemd::window::Window;
use crate::target::ActionKind;
use apply::{apply_file, check_relations};

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
pub const DEFAULT_CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
/// Default docker engine unit (what `restart-docker` restarts).
pub const DEFAULT_DOCKER_UNIT: &str = "docker.service";
/// Default docker engine configuration, read for `live-restore` before `restart-docker`.
pub const DEFAULT_DOCKER_DAEMON_JSON: &str = "/etc/docker/daemon.json";
/// Default containerd unit (what `restart-containerd` restarts).
pub const DEFAULT_CONTAINERD_UNIT: &str = "containerd.service";
/// Default start-up grace of a runtime's unit: a runtime whose unit became active less than
/// this long ago is still starting (recovering its containers), not hung.
pub const DEFAULT_RUNTIME_STARTUP_GRACE: Duration = Duration::from_secs(60);
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
/// Default directory of `npd-check`'s Event cursors: apart from the state directory, so that
/// node-problem-detector's DaemonSet can mount the ledger read-only and only this writable.
pub const DEFAULT_NPD_CURSOR_DIRECTORY: &str = "/var/lib/pleg-guard-npd";
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
    /// `npd_cursor_directory`: where `npd-check` keeps what each Event rule reported.
    pub npd_cursor_directory: PathBuf,
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

/// `[metrics]`: where the Prometheus metrics go.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConfig {
    /// `textfile`: the file node_exporter's textfile collector reads (None: `""`, off).
    pub textfile: Option<PathBuf>,
    /// `listen`: address of the `/metrics` endpoint (None: `""`, off).
    pub listen: Option<std::net::SocketAddr>,
    /// `bearer_token_file`: the file the token was read from (None: `""`, no token asked).
    pub bearer_token_file: Option<PathBuf>,
    /// The token `/metrics` requires (`Authorization: Bearer <token>`), read at load.
    pub bearer_token: Option<crate::fleet::Secret>,
}

impl MetricsConfig {
    /// Warnings about a valid but exposed endpoint: on a non-loopback address without a token
    /// (anyone who reaches the node reads it), a token file others can read.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(addr) = self.listen {
            if !addr.ip().is_loopback() && self.bearer_token.is_none() {
                w.push(format!(
                    "`metrics.listen` = \"{addr}\" is not a loopback address and no `metrics.bearer_token_file` is set: whoever reaches {addr} reads the metrics (the unit's IPAddressDeny= needs a drop-in for a remote scraper, and does not filter at all without cgroup v2)"
                ));
            }
        }
        if let Some(file) = &self.bearer_token_file {
            w.extend(crate::fleet::settings::secret_file_exposure(
                "metrics.bearer_token_file",
                file,
            ));
        }
        w
    }
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
    /// The engine's systemd unit (`restart-docker` restarts it through PID 1).
    pub unit: String,
    /// The engine's configuration file, read for `live-restore` before a restart.
    pub daemon_json: PathBuf,
}

/// `[containerd]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerdConfig {
    /// Probe containerd's CRI service.
    pub enabled: bool,
    /// containerd's unix socket (CRI v1 over gRPC).
    pub socket: PathBuf,
    /// containerd's systemd unit (`restart-containerd` restarts it through PID 1).
    pub unit: String,
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
    /// `[actions.restart_containerd]`.
    pub restart_containerd: ActionConfig,
    /// `[actions.restart_docker]`.
    pub restart_docker: ActionConfig,
    /// `[actions.restart_containerd] startup_grace`, `[actions.restart_docker] ...`: the
    /// runtimes' own start-up grace.
    pub runtime_startup_grace: RuntimeStartupGrace,
    /// `[actions.restart_docker] require_live_restore`: restart dockerd only when its
    /// configuration has `"live-restore": true` (else the restart would kill every container).
    pub restart_docker_require_live_restore: bool,
    /// `[actions.restart_kubelet]`.
    pub restart_kubelet: ActionConfig,
}

/// How long each runtime's unit must have been active before its hang may be cured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeStartupGrace {
    /// containerd's.
    pub containerd: Duration,
    /// dockerd's.
    pub docker: Duration,
}

impl ActionsConfig {
    /// The settings of one action.
    pub fn of(&self, kind: ActionKind) -> &ActionConfig {
        match kind {
            ActionKind::PurgeDeadContainers => &self.purge_dead_containers,
            ActionKind::DaemonReexec => &self.daemon_reexec,
            ActionKind::RestartContainerd => &self.restart_containerd,
            ActionKind::RestartDocker => &self.restart_docker,
            ActionKind::RestartKubelet => &self.restart_kubelet,
        }
    }
}

/// The shortest timeout of one request to etcd (2 s), however short `probe.timeout` is: a
/// lease keep-alive or a slot transaction must not fail on one slow answer.
pub const MIN_ETCD_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

impl Config {
    /// The timeout of one request to etcd (`[fleet]`): `probe.timeout`, at least
    /// [`MIN_ETCD_REQUEST_TIMEOUT`]. The daemon, `check-config --connect` and `diagnose` use it.
    pub fn etcd_request_timeout(&self) -> Duration {
        self.probe.timeout.max(MIN_ETCD_REQUEST_TIMEOUT)
    }
}

impl Thresholds {
    /// The serial forecast's thresholds, from `[systemd]` and `[actions.daemon_reexec]`.
    pub fn of(config: &Config) -> Thresholds {
        let p = config.actions.daemon_reexec_preempt;
        Thresholds {
            warn_before: config.systemd.serial_warn_before,
            preempt: p.enabled,
            preempt_headroom: p.headroom,
            preempt_before: p.before,
        }
    }
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
    /// ([`crate::systemd::preempt`]).
    pub window: Option<Window>,
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
            npd_cursor_directory: PathBuf::from(DEFAULT_NPD_CURSOR_DIRECTORY),
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
                unit: DEFAULT_DOCKER_UNIT.to_owned(),
                daemon_json: PathBuf::from(DEFAULT_DOCKER_DAEMON_JSON),
            },
            containerd: ContainerdConfig {
                enabled: true,
                socket: PathBuf::from(DEFAULT_CONTAINERD_SOCKET),
                unit: DEFAULT_CONTAINERD_UNIT.to_owned(),
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
                // 30 min apart, 4 a day, checked 60 s later (kubelet reconnects and relists
                // within seconds of the runtime's return).
                restart_containerd: action(1800, 4, 60, true),
                restart_docker: action(1800, 4, 60, true),
                runtime_startup_grace: RuntimeStartupGrace {
                    containerd: DEFAULT_RUNTIME_STARTUP_GRACE,
                    docker: DEFAULT_RUNTIME_STARTUP_GRACE,
                },
                restart_docker_require_live_restore: true,
                // 30 min apart, 4 a day, checked 90 s later (kubelet needs a while to relist).
                restart_kubelet: action(1800, 4, 90, true),
            },
            metrics: MetricsConfig {
                textfile: Some(PathBuf::from(DEFAULT_METRICS_TEXTFILE)),
                listen: None,
                bearer_token_file: None,
                bearer_token: None,
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
    /// What is valid but unsafe (a secret file others can read), for the daemon's log and
    /// `check-config`.
    pub warnings: Vec<String>,
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
    let mut warnings = config.fleet.secret_file_warnings();
    warnings.extend(config.metrics.warnings());
    Ok(Loaded {
        config,
        sources,
        warnings,
    })
}

/// Parse one configuration text on its own (no drop-ins).
#[cfg(any(test, feature = "fuzzing"))]
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

/// Parse a human duration (`"500ms"`, `"10s"`, `"5m"`, `"1h 30m"`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        format!("bad duration \"{s}\" ({e}); write e.g. \"500ms\", \"10s\", \"5m\", \"1h\"")
    })
}
