//! Applying a file: each fragment's values are validated while their place in the file is at
//! hand ([`Applier::error_at`]) and written over the configuration built so far; the checks that
//! relate two keys run once on the merged result ([`check_relations`]). A subsystem's own value
//! types say what is valid for them (`FixedBuild`, `Window`, `HttpUrl`, [`crate::fleet::settings`]);
//! this file names the key and the place.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::explain::{explain_toml_error, line_col};
use super::fragment::{Field, FleetFragment, Fragment, MetricsFragment};
use super::{
    ActionConfig, Config, ConfigError, MetricsConfig, Mode, PREEMPT_HEADROOM_MAX, ReexecWhen,
    duration_ceiling, parse_duration,
};
use crate::fleet::settings::{self, FleetConfig, Secret};
use crate::systemd::version::FixedBuild;

/// Checks between keys, on the merged configuration.
pub(super) fn check_relations(config: &Config, path: &Path) -> Result<(), ConfigError> {
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
    config.fleet.check_relations().map_err(invalid)
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

    /// A systemd unit's name: not empty, no path.
    fn unit_name(
        &self,
        slot: &mut String,
        key: &str,
        field: Field<String>,
    ) -> Result<(), ConfigError> {
        if let Some(unit) = field {
            if unit.get_ref().is_empty() || unit.get_ref().contains('/') {
                return Err(self.error_at(
                    unit.span().start,
                    format!("`{key}` is not a unit name: \"{}\"", unit.get_ref()),
                ));
            }
            *slot = unit.into_inner();
        }
        Ok(())
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

/// Apply one file's text over `config`.
pub(super) fn apply_file(config: &mut Config, path: &Path, text: &str) -> Result<(), ConfigError> {
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
    a.path(
        &mut config.npd_cursor_directory,
        "npd_cursor_directory",
        f.npd_cursor_directory,
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
        a.unit_name(&mut config.docker.unit, "docker.unit", d.unit)?;
        a.path(
            &mut config.docker.daemon_json,
            "docker.daemon_json",
            d.daemon_json,
        )?;
    }
    if let Some(c) = f.containerd {
        a.set(&mut config.containerd.enabled, c.enabled);
        a.path(&mut config.containerd.socket, "containerd.socket", c.socket)?;
        a.unit_name(&mut config.containerd.unit, "containerd.unit", c.unit)?;
    }
    if let Some(k) = f.kubelet {
        a.set(&mut config.kubelet.enabled, k.enabled);
        a.unit_name(&mut config.kubelet.unit, "kubelet.unit", k.unit)?;
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
        if let Some(c) = actions.restart_containerd {
            a.action(
                &mut config.actions.restart_containerd,
                "restart_containerd",
                c.enabled,
                c.min_interval,
                c.max_per_day,
                c.settle,
            )?;
            a.set(&mut config.actions.restart_containerd.fleet, c.fleet);
            a.duration(
                &mut config.actions.runtime_startup_grace.containerd,
                "actions.restart_containerd.startup_grace",
                c.startup_grace,
                true,
            )?;
        }
        if let Some(d) = actions.restart_docker {
            a.action(
                &mut config.actions.restart_docker,
                "restart_docker",
                d.enabled,
                d.min_interval,
                d.max_per_day,
                d.settle,
            )?;
            a.set(&mut config.actions.restart_docker.fleet, d.fleet);
            a.duration(
                &mut config.actions.runtime_startup_grace.docker,
                "actions.restart_docker.startup_grace",
                d.startup_grace,
                true,
            )?;
            a.set(
                &mut config.actions.restart_docker_require_live_restore,
                d.require_live_restore,
            );
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
        if let Some(p) = m.bearer_token_file {
            let start = p.span().start;
            self.optional_path(
                &mut slot.bearer_token_file,
                "metrics.bearer_token_file",
                Some(p),
            )?;
            slot.bearer_token = match &slot.bearer_token_file {
                None => None,
                Some(file) => Some(
                    crate::fleet::Secret::read_for("metrics.bearer_token_file", file)
                        .map_err(|e| self.error_at(start, e))?,
                ),
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

    /// `[fleet]`: [`crate::fleet::settings`] says which values are good.
    fn fleet(&self, slot: &mut FleetConfig, f: FleetFragment) -> Result<(), ConfigError> {
        let at = |v: &Spanned<String>| {
            let start = v.span().start;
            move |message: String| self.error_at(start, message)
        };
        if let Some(b) = f.backend {
            slot.backend = b.get_ref().parse().map_err(at(&b))?;
        }
        self.optional_path(&mut slot.kubeconfig, "fleet.kubeconfig", f.kubeconfig)?;
        if let Some(n) = f.namespace {
            slot.namespace = settings::namespace(n.get_ref()).map_err(at(&n))?;
        }
        if let Some(list) = f.etcd_endpoints {
            let mut endpoints = Vec::new();
            for item in list.into_inner() {
                endpoints.push(settings::endpoint(item.get_ref()).map_err(at(&item))?);
            }
            slot.etcd_endpoints = endpoints;
        }
        if let Some(g) = f.group {
            slot.group = settings::group(g.get_ref()).map_err(at(&g))?;
        }
        if let Some(m) = f.max_disruptive {
            slot.max_disruptive = m
                .get_ref()
                .parse()
                .map_err(|e| at(&m)(format!("`fleet.max_disruptive`: {e}")))?;
        }
        if let Some(v) = f.lease_ttl {
            let d = parse_duration(v.get_ref())
                .map_err(|e| at(&v)(format!("`fleet.lease_ttl`: {e}")))?;
            slot.lease_ttl = settings::lease_ttl(d, v.get_ref()).map_err(at(&v))?;
        }
        if let Some(v) = f.on_unreachable {
            slot.on_unreachable = v.get_ref().parse().map_err(at(&v))?;
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
                Some(file) => Some(Secret::read(file).map_err(|e| self.error_at(start, e))?),
            };
        }
        self.set(
            &mut slot.allow_password_over_http,
            f.allow_password_over_http,
        );
        if let Some(n) = f.node {
            slot.node = settings::node(n.get_ref()).map_err(at(&n))?;
        }
        if let Some(p) = f.prefix {
            slot.prefix = settings::prefix(p.get_ref()).map_err(at(&p))?;
        }
        if let Some(m) = f.max_unhealthy {
            slot.max_unhealthy = m
                .get_ref()
                .parse()
                .map_err(|e| at(&m)(format!("`fleet.max_unhealthy`: {e}")))?;
        }
        if let Some(list) = f.storm_exempt {
            let mut exempt = Vec::new();
            for item in list.into_inner() {
                exempt.push(settings::finding_id(item.get_ref()).map_err(at(&item))?);
            }
            slot.storm_exempt = exempt;
        }
        Ok(())
    }
}
