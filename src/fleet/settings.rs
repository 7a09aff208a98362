//! `[fleet]` settings: their validated form ([`FleetConfig`]) and what makes each value valid.
//!
//! The configuration loader (`crate::config`) reads the keys with their places in the file and
//! asks this module whether a value is good; the messages name the key, so the loader only adds
//! the file, line and column. The checks that relate two `[fleet]` keys are
//! [`FleetConfig::check_relations`].

use std::fmt;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use super::storm::{DEFAULT_EXEMPT, MaxUnhealthy};
use crate::client::authority;

/// Default `[fleet] group`.
pub const DEFAULT_FLEET_GROUP: &str = "default";
/// Default `[fleet] namespace`: backend kubernetes's Leases live in this namespace.
pub const DEFAULT_FLEET_NAMESPACE: &str = "pleg-guard";
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

impl std::str::FromStr for OnUnreachable {
    type Err = String;

    /// `fleet.on_unreachable`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "wait" => Ok(OnUnreachable::Wait),
            "local" => Ok(OnUnreachable::Local),
            other => Err(format!(
                "`fleet.on_unreachable` must be \"wait\" or \"local\", not \"{other}\""
            )),
        }
    }
}

impl fmt::Display for OnUnreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnUnreachable::Wait => "wait",
            OnUnreachable::Local => "local",
        })
    }
}

/// `[fleet] backend`: where the group's budget is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Keys and transactions on an etcd of pleg-guard's own (`etcd_endpoints`).
    #[default]
    Etcd,
    /// `coordination.k8s.io/v1` Leases on the cluster's API server (`kubeconfig`).
    Kubernetes,
}

impl std::str::FromStr for Backend {
    type Err = String;

    /// `fleet.backend`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "etcd" => Ok(Backend::Etcd),
            "kubernetes" => Ok(Backend::Kubernetes),
            other => Err(format!(
                "`fleet.backend` must be \"etcd\" or \"kubernetes\", not \"{other}\""
            )),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Etcd => "etcd",
            Backend::Kubernetes => "kubernetes",
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

    /// `fleet.password_file`: the password is the file's text without its final line break;
    /// an unreadable or empty file is an error naming the key.
    pub fn read(file: &Path) -> Result<Secret, String> {
        Self::read_for("fleet.password_file", file)
    }

    /// A secret read from the file named by config key `key` (see [`Secret::read`]).
    pub fn read_for(key: &str, file: &Path) -> Result<Secret, String> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("`{key}`: cannot read {}: {e}", file.display()))?;
        let password = text.strip_suffix('\n').unwrap_or(&text);
        let password = password.strip_suffix('\r').unwrap_or(password);
        if password.is_empty() {
            return Err(format!("`{key}`: {} is empty", file.display()));
        }
        Ok(Secret(password.to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// `[fleet]`: the fleet-wide disruption budget, kept in etcd or in Kubernetes Leases.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// `backend`: where the budget is kept.
    pub backend: Backend,
    /// `kubeconfig`: backend kubernetes's identity and API server (None: no fleet budget there).
    pub kubeconfig: Option<PathBuf>,
    /// `namespace`: backend kubernetes's Leases live here.
    pub namespace: String,
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
    /// `allow_password_over_http`: accept `username`/`password_file` with plain-http
    /// endpoints off this host (the password then crosses the network in cleartext).
    pub allow_password_over_http: bool,
    /// `node`: this node's name in the group (None: the host name).
    pub node: Option<String>,
    /// `prefix`: the etcd key prefix.
    pub prefix: String,
    /// `max_unhealthy`: the storm guard ([`crate::fleet::storm`]).
    pub max_unhealthy: MaxUnhealthy,
    /// `storm_exempt`: the findings whose cures go on in a storm (proven local to the node).
    pub storm_exempt: Vec<String>,
}

impl FleetConfig {
    /// Whether a fleet budget is configured at all.
    pub fn enabled(&self) -> bool {
        match self.backend {
            Backend::Etcd => !self.etcd_endpoints.is_empty(),
            Backend::Kubernetes => self.kubeconfig.is_some(),
        }
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
            backend: Backend::Etcd,
            kubeconfig: None,
            namespace: DEFAULT_FLEET_NAMESPACE.to_owned(),
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
            allow_password_over_http: false,
            node: None,
            prefix: DEFAULT_FLEET_PREFIX.to_owned(),
            max_unhealthy: MaxUnhealthy::default(),
            storm_exempt: DEFAULT_EXEMPT.iter().map(|f| (*f).to_owned()).collect(),
        }
    }
}

/// A finding id in `storm_exempt`: kebab-case (`systemd-bus-wedge`).
pub fn finding_id(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "`fleet.storm_exempt`: \"{s}\" is not a finding id (kebab-case, e.g. \"systemd-bus-wedge\")"
        ))
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
pub fn check_endpoint(s: &str) -> Result<(), String> {
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .ok_or_else(|| format!("\"{s}\" is not an http:// or https:// URL"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        // never echo what may be `user:password@`
        return Err(format!(
            "\"{}\" must be scheme://host:port only (no user or password: use `fleet.username` and `fleet.password_file`)",
            redact_userinfo(s)
        ));
    }
    if authority.contains('/') || authority.contains('?') {
        return Err(format!(
            "\"{s}\" must be scheme://host:port only (no path or query)"
        ));
    }
    let (host, port) = match authority::split(authority) {
        (h, Some(p)) if !h.contains(':') || h.starts_with('[') => (h, p),
        _ => {
            return Err(format!(
                "\"{s}\" has no port (etcd's client port is usually 2379)"
            ));
        }
    };
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("`{port}` in \"{s}\" is not a port number"));
    }
    if authority::host(host).is_empty() {
        return Err(format!("\"{s}\" has no host"));
    }
    Ok(())
}

impl FleetConfig {
    /// The checks between `[fleet]` keys, on the merged configuration; the message names both.
    pub fn check_relations(&self) -> Result<(), String> {
        let f = self;
        match f.backend {
            Backend::Etcd => f.check_etcd_only()?,
            Backend::Kubernetes => return f.check_kubernetes(),
        }
        if f.cert_file.is_some() != f.key_file.is_some() {
            return Err(
                "`fleet.cert_file` and `fleet.key_file` go together: set both or neither"
                    .to_owned(),
            );
        }
        if f.username.is_some() != f.password_file.is_some() {
            return Err(
                "`fleet.username` and `fleet.password_file` go together: set both or neither"
                    .to_owned(),
            );
        }
        if f.username.is_some() && !f.allow_password_over_http {
            if let Some(plain) = f
                .etcd_endpoints
                .iter()
                .find(|e| e.starts_with("http://") && !endpoint_is_loopback(e))
            {
                return Err(format!(
                    "`fleet.username`/`fleet.password_file` with the plain-http endpoint \"{plain}\": the password would cross the network in cleartext; use https:// endpoints, or set `fleet.allow_password_over_http = true` to accept that"
                ));
            }
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
}

impl FleetConfig {
    /// Backend etcd: the kubernetes keys have no meaning, so setting one is a mistake.
    fn check_etcd_only(&self) -> Result<(), String> {
        if self.kubeconfig.is_some() {
            return Err(
                "`fleet.kubeconfig` is set while `fleet.backend` is \"etcd\": set `fleet.backend = \"kubernetes\"` to keep the budget in Leases, or remove `fleet.kubeconfig`".to_owned(),
            );
        }
        if self.namespace != DEFAULT_FLEET_NAMESPACE {
            return Err(format!(
                "`fleet.namespace` (\"{}\") is for `fleet.backend = \"kubernetes\"`; backend \"etcd\" keeps its keys under `fleet.prefix`",
                self.namespace
            ));
        }
        Ok(())
    }

    /// Backend kubernetes: a kubeconfig, no etcd key, and a group and node that make valid
    /// Lease names and label values.
    fn check_kubernetes(&self) -> Result<(), String> {
        if self.kubeconfig.is_none() {
            return Err(
                "`fleet.backend = \"kubernetes\"` needs `fleet.kubeconfig`: the kubeconfig pleg-guard writes its Leases with (see packaging/kubernetes/)".to_owned(),
            );
        }
        let etcd_keys = [
            ("fleet.etcd_endpoints", !self.etcd_endpoints.is_empty()),
            ("fleet.ca_file", self.ca_file.is_some()),
            ("fleet.cert_file", self.cert_file.is_some()),
            ("fleet.key_file", self.key_file.is_some()),
            ("fleet.username", self.username.is_some()),
            ("fleet.password_file", self.password_file.is_some()),
            (
                "fleet.allow_password_over_http",
                self.allow_password_over_http,
            ),
            ("fleet.prefix", self.prefix != DEFAULT_FLEET_PREFIX),
        ];
        let given: Vec<String> = etcd_keys
            .iter()
            .filter(|(_, set)| *set)
            .map(|(key, _)| format!("`{key}`"))
            .collect();
        if !given.is_empty() {
            return Err(format!(
                "{} {} for backend \"etcd\" only; with `fleet.backend = \"kubernetes\"` the API server, its CA and the credentials come from `fleet.kubeconfig`",
                given.join(", "),
                if given.len() == 1 { "is" } else { "are" }
            ));
        }
        crate::fleet::backend::kubernetes::names::check_group(&self.group)?;
        crate::fleet::backend::kubernetes::names::check_namespace(&self.namespace)?;
        if let Some(node) = &self.node {
            crate::fleet::backend::kubernetes::names::check_node(node)?;
        }
        Ok(())
    }
}

/// `scheme://user:password@rest` as `scheme://***@rest`: an endpoint fit for a message.
pub fn redact_userinfo(endpoint: &str) -> String {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("", endpoint));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let sep = if scheme.is_empty() { "" } else { "://" };
            format!("{scheme}{sep}***{}", &rest[at..])
        }
        None => endpoint.to_owned(),
    }
}

/// Whether an `http(s)://host:port` endpoint is on this host (127.0.0.0/8, ::1, localhost):
/// nothing sent to it crosses a network.
pub fn endpoint_is_loopback(endpoint: &str) -> bool {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let host = rest
        .rsplit_once(':')
        .map_or(rest, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Why a file holding a secret (`fleet.password_file`, `fleet.key_file`) is exposed: readable
/// by group or others, or owned by someone other than root; `None` when it is not (or cannot
/// be looked at: reading it reports that).
pub fn secret_file_exposure(key: &str, file: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(file).ok()?;
    let mode = m.mode() & 0o7777;
    let mut why = Vec::new();
    if mode & 0o044 != 0 {
        why.push(format!(
            "readable by group or others (mode {mode:04o}: chmod 0600)"
        ));
    }
    if m.uid() != 0 {
        why.push(format!("owned by uid {}, not root (chown root)", m.uid()));
    }
    (!why.is_empty()).then(|| format!("`{key}` {}: {}", file.display(), why.join("; ")))
}

impl FleetConfig {
    /// Warnings about the files holding this node's secrets (see [`secret_file_exposure`]).
    pub fn secret_file_warnings(&self) -> Vec<String> {
        [
            ("fleet.password_file", &self.password_file),
            ("fleet.kubeconfig", &self.kubeconfig),
            ("fleet.key_file", &self.key_file),
        ]
        .into_iter()
        .filter_map(|(key, file)| secret_file_exposure(key, file.as_deref()?))
        .collect()
    }
}

/// `fleet.etcd_endpoints`: one endpoint, trimmed, without a trailing `/`.
pub fn endpoint(text: &str) -> Result<String, String> {
    let e = text.trim();
    check_endpoint(e).map_err(|m| format!("`fleet.etcd_endpoints`: {m}"))?;
    Ok(e.trim_end_matches('/').to_owned())
}

/// `fleet.group`.
pub fn group(text: &str) -> Result<String, String> {
    if !fleet_name_ok(text) {
        return Err(format!(
            "`fleet.group` must be 1 to {MAX_FLEET_NAME} letters, digits, `.`, `_` or `-` (it is an etcd key segment), not \"{text}\""
        ));
    }
    Ok(text.to_owned())
}

/// `fleet.lease_ttl`, `d` read from `text`: whole seconds within
/// [`MIN_FLEET_LEASE_TTL`]..=[`MAX_FLEET_LEASE_TTL`].
pub fn lease_ttl(d: Duration, text: &str) -> Result<Duration, String> {
    if d < MIN_FLEET_LEASE_TTL || d > MAX_FLEET_LEASE_TTL || d.subsec_nanos() != 0 {
        return Err(format!(
            "`fleet.lease_ttl` must be whole seconds between \"5s\" and \"1h\" (etcd leases count seconds; keep-alives go every third), not \"{text}\""
        ));
    }
    Ok(d)
}

/// `fleet.namespace`: checked as a Kubernetes namespace name in
/// [`FleetConfig::check_relations`] (it matters for backend kubernetes only).
pub fn namespace(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(
            "`fleet.namespace` must not be empty (the default is \"pleg-guard\")".to_owned(),
        );
    }
    Ok(t.to_owned())
}

/// `fleet.node`: `""` means the host name.
pub fn node(text: &str) -> Result<Option<String>, String> {
    if text.is_empty() {
        Ok(None)
    } else if fleet_name_ok(text) {
        Ok(Some(text.to_owned()))
    } else {
        Err(format!(
            "`fleet.node` must be 1 to {MAX_FLEET_NAME} letters, digits, `.`, `_` or `-` (or \"\" for the host name), not \"{text}\""
        ))
    }
}

/// `fleet.prefix`: an absolute etcd key path of name segments.
pub fn prefix(text: &str) -> Result<String, String> {
    let ok = text.starts_with('/') && text.len() > 1 && text[1..].split('/').all(fleet_name_ok);
    if !ok {
        return Err(format!(
            "`fleet.prefix` must be an absolute key path such as \"/pleg-guard\" (segments of letters, digits, `.`, `_`, `-`; no trailing `/`), not \"{text}\""
        ));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
