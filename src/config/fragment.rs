//! Fragments: one configuration file's raw contents, every key optional and each value with
//! its byte span, so that a bad value is reported at its line and column. Unknown keys are
//! refused here (`deny_unknown_fields`); [`super::apply`] validates the values.

use serde::Deserialize;
use toml::Spanned;

/// A key as written: absent, or its value with its byte span in the file.
pub(super) type Field<T> = Option<Spanned<T>>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Fragment {
    pub(super) mode: Field<String>,
    pub(super) interval: Field<String>,
    pub(super) startup_grace: Field<String>,
    pub(super) state_directory: Field<String>,
    pub(super) runtime_directory: Field<String>,
    pub(super) npd_cursor_directory: Field<String>,
    pub(super) probe: Option<ProbeFragment>,
    pub(super) dbus: Option<DbusFragment>,
    pub(super) systemd: Option<SystemdFragment>,
    pub(super) logind: Option<LogindFragment>,
    pub(super) docker: Option<DockerFragment>,
    pub(super) containerd: Option<ContainerdFragment>,
    pub(super) kubelet: Option<KubeletFragment>,
    pub(super) actions: Option<ActionsFragment>,
    pub(super) metrics: Option<MetricsFragment>,
    pub(super) fleet: Option<FleetFragment>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FleetFragment {
    pub(super) backend: Field<String>,
    pub(super) kubeconfig: Field<String>,
    pub(super) namespace: Field<String>,
    pub(super) etcd_endpoints: Field<Vec<Spanned<String>>>,
    pub(super) group: Field<String>,
    pub(super) max_disruptive: Field<String>,
    pub(super) lease_ttl: Field<String>,
    pub(super) on_unreachable: Field<String>,
    pub(super) max_wait: Field<String>,
    pub(super) ca_file: Field<String>,
    pub(super) cert_file: Field<String>,
    pub(super) key_file: Field<String>,
    pub(super) username: Field<String>,
    pub(super) password_file: Field<String>,
    pub(super) allow_password_over_http: Field<bool>,
    pub(super) node: Field<String>,
    pub(super) prefix: Field<String>,
    pub(super) max_unhealthy: Field<String>,
    pub(super) storm_exempt: Field<Vec<Spanned<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsFragment {
    pub(super) textfile: Field<String>,
    pub(super) listen: Field<String>,
    pub(super) bearer_token_file: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProbeFragment {
    pub(super) timeout: Field<String>,
    pub(super) unhealthy_after: Field<i64>,
    pub(super) slow_after: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DbusFragment {
    pub(super) enabled: Field<bool>,
    pub(super) socket: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SystemdFragment {
    pub(super) private_socket: Field<String>,
    pub(super) fixed_builds: Field<Vec<Spanned<String>>>,
    pub(super) serial_warn_before: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogindFragment {
    pub(super) enabled: Field<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DockerFragment {
    pub(super) enabled: Field<bool>,
    pub(super) socket: Field<String>,
    pub(super) unit: Field<String>,
    pub(super) daemon_json: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContainerdFragment {
    pub(super) enabled: Field<bool>,
    pub(super) socket: Field<String>,
    pub(super) unit: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KubeletFragment {
    pub(super) enabled: Field<bool>,
    pub(super) unit: Field<String>,
    pub(super) container: Field<String>,
    pub(super) healthz_url: Field<String>,
    pub(super) pleg_log_window: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActionsFragment {
    pub(super) purge_dead_containers: Option<ActionFragment>,
    pub(super) daemon_reexec: Option<ReexecFragment>,
    pub(super) restart_containerd: Option<RuntimeRestartFragment>,
    pub(super) restart_docker: Option<DockerRestartFragment>,
    pub(super) restart_kubelet: Option<ActionFragment>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuntimeRestartFragment {
    pub(super) enabled: Field<bool>,
    pub(super) min_interval: Field<String>,
    pub(super) max_per_day: Field<i64>,
    pub(super) settle: Field<String>,
    pub(super) fleet: Field<bool>,
    pub(super) startup_grace: Field<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DockerRestartFragment {
    pub(super) enabled: Field<bool>,
    pub(super) min_interval: Field<String>,
    pub(super) max_per_day: Field<i64>,
    pub(super) settle: Field<String>,
    pub(super) fleet: Field<bool>,
    pub(super) startup_grace: Field<String>,
    pub(super) require_live_restore: Field<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActionFragment {
    pub(super) enabled: Field<bool>,
    pub(super) min_interval: Field<String>,
    pub(super) max_per_day: Field<i64>,
    pub(super) settle: Field<String>,
    pub(super) fleet: Field<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReexecFragment {
    pub(super) enabled: Field<bool>,
    pub(super) when: Field<String>,
    pub(super) preempt: Field<bool>,
    pub(super) preempt_headroom: Field<i64>,
    pub(super) preempt_before: Field<String>,
    pub(super) preempt_window: Field<String>,
    pub(super) min_interval: Field<String>,
    pub(super) max_per_day: Field<i64>,
    pub(super) settle: Field<String>,
    pub(super) fleet: Field<bool>,
}
