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
/// Default number of consecutive failed rounds before a target is unhealthy.
pub const DEFAULT_UNHEALTHY_AFTER: u32 = 3;
/// Default system bus socket.
pub const DEFAULT_DBUS_SOCKET: &str = "/run/dbus/system_bus_socket";
/// Default path of PID 1's private D-Bus socket.
pub const DEFAULT_SYSTEMD_PRIVATE_SOCKET: &str = "/run/systemd/private";
/// Default docker engine socket.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";
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
    /// `[kubelet]`.
    pub kubelet: KubeletConfig,
    /// `[actions.*]`.
    pub actions: ActionsConfig,
}

/// `[probe]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Per-call timeout; a hung call is abandoned.
    pub timeout: Duration,
    /// Consecutive failed rounds before a target is unhealthy.
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
        let action = |min_interval_s: u64, max_per_day: u32, settle_s: u64| ActionConfig {
            enabled: true,
            min_interval: Duration::from_secs(min_interval_s),
            max_per_day: NonZeroU32::new(max_per_day).unwrap_or(NonZeroU32::MIN),
            settle: Duration::from_secs(settle_s),
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
                purge_dead_containers: action(300, 24, 30),
                // 1 h apart, 3 a day, checked 20 s later.
                daemon_reexec: action(3600, 3, 20),
                daemon_reexec_when: ReexecWhen::Affected,
                daemon_reexec_preempt: PreemptConfig {
                    enabled: true,
                    headroom: DEFAULT_PREEMPT_HEADROOM,
                    before: DEFAULT_PREEMPT_BEFORE,
                },
                // 30 min apart, 4 a day, checked 90 s later (kubelet needs a while to relist).
                restart_kubelet: action(1800, 4, 90),
            },
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
    kubelet: Option<KubeletFragment>,
    actions: Option<ActionsFragment>,
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReexecFragment {
    enabled: Field<bool>,
    when: Field<String>,
    preempt: Field<bool>,
    preempt_headroom: Field<i64>,
    preempt_before: Field<String>,
    min_interval: Field<String>,
    max_per_day: Field<i64>,
    settle: Field<String>,
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
            a.action(
                &mut config.actions.daemon_reexec,
                "daemon_reexec",
                r.enabled,
                r.min_interval,
                r.max_per_day,
                r.settle,
            )?;
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
        }
    }
    Ok(())
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
