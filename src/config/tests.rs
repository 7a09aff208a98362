//! The configuration's unit tests: whole files parsed as the daemon reads them.

use std::path::Path;

use super::*;
use crate::fleet::storm::MaxUnhealthy;
use crate::fleet::{MaxDisruptive, OnUnreachable, Secret};

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
        e.starts_with(
            "/etc/pleg-guard/config.toml:2:16: `actions.restart_kubelet.min_interval`: bad duration"
        ),
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
    let c =
        parse("[metrics]\ntextfile = \"/tmp/x/pg.prom\"\nlisten = \"127.0.0.1:9847\"\n").unwrap();
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
fn dropins_merge_in_name_order_and_missing_default_is_fine() {
    let dir = crate::testing::tempdir("config-test");
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
    let dir = crate::testing::tempdir("pg-fleet-cfg");
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
max_unhealthy = "3"
storm_exempt = []

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
    assert_eq!(f.max_unhealthy, MaxUnhealthy::Count(3));
    assert!(f.storm_exempt.is_empty());
    assert!(c.actions.purge_dead_containers.fleet);
    assert!(c.actions.daemon_reexec.fleet, "default stays");
    assert!(!c.actions.restart_kubelet.fleet);
    let d = Config::default();
    assert!(!d.fleet.enabled());
    assert!(!d.actions.purge_dead_containers.fleet);
    assert!(d.actions.daemon_reexec.fleet && d.actions.restart_kubelet.fleet);
    assert!(!d.fleet.node_name().is_empty());
    assert_eq!(d.fleet.max_unhealthy, MaxUnhealthy::Percent(20));
    assert_eq!(d.fleet.storm_exempt, ["systemd-bus-wedge"]);
    let off = parse("[fleet]\nmax_unhealthy = \"\"\n").unwrap();
    assert_eq!(off.fleet.max_unhealthy, MaxUnhealthy::Off);

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
            "max_unhealthy = \"many\"",
            "`fleet.max_unhealthy`: \"many\" is neither",
        ),
        ("max_unhealthy = \"120%\"", "`fleet.max_unhealthy`"),
        (
            "storm_exempt = [\"Bus Wedge\"]",
            "`fleet.storm_exempt`: \"Bus Wedge\" is not a finding id",
        ),
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
fn shipped_default_config_matches_built_in_defaults() {
    let text = include_str!("../../packaging/config.toml");
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

#[test]
fn thresholds_come_from_the_config() {
    let t = Thresholds::of(&Config::default());
    assert_eq!(t.warn_before, std::time::Duration::from_secs(7 * 86_400));
    assert!(t.preempt);
    assert_eq!(t.preempt_headroom, 20_000_000);
    assert_eq!(t.preempt_before, std::time::Duration::from_secs(6 * 3600));
}

/// A password over plain http to another host is refused unless `allow_password_over_http`
/// says so; loopback is fine; an endpoint's `user:password@` is never echoed; a password file
/// others can read is named in a warning.
#[test]
fn etcd_passwords_stay_off_cleartext_networks() {
    let dir = crate::testing::tempdir("pg-fleet-http");
    let pw = dir.join("pw");
    std::fs::write(&pw, "s3cret\n").unwrap();
    let with = |endpoint: &str, extra: &str| {
        format!(
            "[fleet]\netcd_endpoints = [\"{endpoint}\"]\nusername = \"u\"\npassword_file = \"{}\"\n{extra}",
            pw.display()
        )
    };
    let e = parse(&with("http://10.0.0.5:2379", "")).unwrap_err();
    assert!(
        e.contains("cleartext") && e.contains("`fleet.allow_password_over_http = true`"),
        "{e}"
    );
    assert!(
        parse(&with(
            "http://10.0.0.5:2379",
            "allow_password_over_http = true\n"
        ))
        .is_ok()
    );
    for local in [
        "http://127.0.0.1:2379",
        "http://[::1]:2379",
        "http://localhost:2379",
    ] {
        assert!(parse(&with(local, "")).is_ok(), "{local}");
    }
    assert!(parse(&with("https://10.0.0.5:2379", "")).is_ok());
    // no password: plain http is the operator's business
    assert!(parse("[fleet]\netcd_endpoints = [\"http://10.0.0.5:2379\"]\n").is_ok());

    let e =
        parse("[fleet]\netcd_endpoints = [\"http://pleg:hunter2@10.0.0.5:2379\"]\n").unwrap_err();
    assert!(!e.contains("hunter2") && !e.contains("pleg:"), "{e}");
    assert!(e.contains("http://***@10.0.0.5:2379"), "{e}");

    use std::os::unix::fs::PermissionsExt;
    let c = parse(&with("https://10.0.0.5:2379", "")).unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).unwrap();
    let w = c.fleet.secret_file_warnings();
    assert!(
        w.len() == 1 && w[0].contains("fleet.password_file") && w[0].contains("0644"),
        "{w:?}"
    );
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    if nix::unistd::geteuid().is_root() {
        assert_eq!(c.fleet.secret_file_warnings(), Vec::<String>::new());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The settings handed to the etcd client print the user but not the password.
#[test]
fn debug_of_fleet_settings_leaves_the_password_out() {
    let dir = crate::testing::tempdir("pg-fleet-dbg");
    let pw = dir.join("pw");
    std::fs::write(&pw, "hunter2-secret\n").unwrap();
    let c = parse(&format!(
        "[fleet]\netcd_endpoints = [\"https://10.0.0.5:2379\"]\nusername = \"pleg\"\npassword_file = \"{}\"\n",
        pw.display()
    ))
    .unwrap();
    let s = crate::fleet::FleetSettings::from_config(&c.fleet, Duration::from_secs(1)).unwrap();
    let shown = format!("{s:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("pleg"), "{shown}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[metrics] bearer_token_file` is read at load; a non-loopback `listen` without one, and a
/// token file others can read, are named in warnings.
#[test]
fn metrics_token_and_exposure_warnings() {
    let dir = crate::testing::tempdir("pg-metrics-cfg");
    let token = dir.join("token");
    std::fs::write(&token, "abc\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = parse("[metrics]\nlisten = \"0.0.0.0:9847\"\n").unwrap();
    let w = open.metrics.warnings();
    assert!(
        w.len() == 1 && w[0].contains("not a loopback address"),
        "{w:?}"
    );
    assert!(
        parse("[metrics]\nlisten = \"127.0.0.1:9847\"\n")
            .unwrap()
            .metrics
            .warnings()
            .is_empty()
    );
    let with = parse(&format!(
        "[metrics]\nlisten = \"0.0.0.0:9847\"\nbearer_token_file = \"{}\"\n",
        token.display()
    ))
    .unwrap();
    assert_eq!(
        with.metrics.bearer_token.as_ref().map(|t| t.expose()),
        Some("abc")
    );
    if nix::unistd::geteuid().is_root() {
        assert!(
            with.metrics.warnings().is_empty(),
            "{:?}",
            with.metrics.warnings()
        );
    }
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let w = with.metrics.warnings();
    assert!(
        w.iter().any(|m| m.contains("metrics.bearer_token_file")),
        "{w:?}"
    );
    let e = parse("[metrics]\nbearer_token_file = \"/nonexistent/pg-token\"\n").unwrap_err();
    assert!(
        e.contains("`metrics.bearer_token_file`: cannot read"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runtime_restarts_parse_with_their_grace_and_live_restore_rule() {
    let c = parse(
        r#"
[containerd]
unit = "containerd-custom.service"
[docker]
unit = "docker.service"
daemon_json = "/etc/docker/other.json"
[actions.restart_containerd]
enabled = false
startup_grace = "2m"
fleet = false
[actions.restart_docker]
require_live_restore = false
startup_grace = "0s"
max_per_day = 2
"#,
    )
    .unwrap();
    assert_eq!(c.containerd.unit, "containerd-custom.service");
    assert_eq!(c.docker.daemon_json, Path::new("/etc/docker/other.json"));
    assert!(!c.actions.restart_containerd.enabled);
    assert!(!c.actions.restart_containerd.fleet);
    assert_eq!(
        c.actions.runtime_startup_grace.containerd,
        Duration::from_secs(120)
    );
    assert_eq!(c.actions.runtime_startup_grace.docker, Duration::ZERO);
    assert!(!c.actions.restart_docker_require_live_restore);
    assert_eq!(c.actions.restart_docker.max_per_day.get(), 2);
    let d = Config::default();
    assert!(d.actions.restart_containerd.enabled && d.actions.restart_docker.enabled);
    assert!(d.actions.restart_docker_require_live_restore);
    assert_eq!(
        d.actions.runtime_startup_grace.containerd,
        Duration::from_secs(60)
    );
}

#[test]
fn a_unit_name_that_is_not_one_is_refused_with_its_key() {
    let e = parse("[containerd]\nunit = \"../etc/passwd\"\n").unwrap_err();
    assert!(e.contains("containerd.unit"), "{e}");
    let e = parse("[actions.restart_docker]\nrequire_live_restore = \"yes\"\n").unwrap_err();
    // serde's own words, with the line and column of the value
    assert!(e.starts_with("/etc/pleg-guard/config.toml:2:"), "{e}");
}

/// `[fleet] backend = "kubernetes"` reads `kubeconfig` and `namespace`; the settings name the
/// backend; the keys of the other backend, and names Kubernetes cannot take, are refused with
/// the key named.
#[test]
fn kubernetes_backend_keys_are_read() {
    let c = parse(
        "[fleet]\nbackend = \"kubernetes\"\nkubeconfig = \"/etc/pleg-guard/kubeconfig\"\nnamespace = \"ops\"\ngroup = \"pool-a\"\nmax_disruptive = \"10%\"\n",
    )
    .unwrap();
    let f = &c.fleet;
    assert!(f.enabled());
    assert_eq!(f.backend, crate::fleet::Backend::Kubernetes);
    assert_eq!(
        f.kubeconfig.as_deref(),
        Some(Path::new("/etc/pleg-guard/kubeconfig"))
    );
    assert_eq!(f.namespace, "ops");
    let s = crate::fleet::FleetSettings::from_config(f, Duration::from_secs(2)).unwrap();
    assert_eq!(s.backend(), crate::fleet::Backend::Kubernetes);
    let k = s.kubernetes.as_ref().unwrap();
    assert_eq!(k.namespace, "ops");
    assert_eq!(k.kubeconfig, Path::new("/etc/pleg-guard/kubeconfig"));

    let d = parse("[fleet]\nbackend = \"kubernetes\"\nkubeconfig = \"/k\"\n").unwrap();
    assert_eq!(d.fleet.namespace, "pleg-guard", "the default namespace");
    let etcd =
        parse("[fleet]\nbackend = \"etcd\"\netcd_endpoints = [\"http://h:2379\"]\n").unwrap();
    let s = crate::fleet::FleetSettings::from_config(&etcd.fleet, Duration::from_secs(2)).unwrap();
    assert_eq!(s.backend(), crate::fleet::Backend::Etcd);
    assert!(s.kubernetes.is_none());
    assert_eq!(Config::default().fleet.backend, crate::fleet::Backend::Etcd);

    for (text, expect) in [
        (
            "backend = \"consul\"",
            "`fleet.backend` must be \"etcd\" or \"kubernetes\"",
        ),
        (
            "kubeconfig = \"kubeconfig\"",
            "`fleet.kubeconfig` must be an absolute path",
        ),
        ("namespace = \"\"", "`fleet.namespace` must not be empty"),
        ("backend = 3", "invalid type"),
    ] {
        let e = parse(&format!("[fleet]\n{text}\n")).unwrap_err();
        assert!(e.contains(":2:"), "{text}: {e}");
        assert!(e.contains(expect), "{text}: {e}");
    }
    for (text, expect) in [
        ("backend = \"kubernetes\"", "needs `fleet.kubeconfig`"),
        (
            "kubeconfig = \"/k\"",
            "`fleet.kubeconfig` is set while `fleet.backend` is \"etcd\"",
        ),
        ("namespace = \"ops\"", "`fleet.namespace` (\"ops\") is for"),
        (
            "backend = \"kubernetes\"\nkubeconfig = \"/k\"\netcd_endpoints = [\"http://h:2379\"]\nprefix = \"/x\"",
            "`fleet.etcd_endpoints`, `fleet.prefix` are for backend \"etcd\" only",
        ),
        (
            "backend = \"kubernetes\"\nkubeconfig = \"/k\"\nca_file = \"/ca.pem\"",
            "`fleet.ca_file` is for backend \"etcd\" only",
        ),
        (
            "backend = \"kubernetes\"\nkubeconfig = \"/k\"\ngroup = \"Pool_A\"",
            "`fleet.group` with `fleet.backend = \"kubernetes\"` must be",
        ),
        (
            "backend = \"kubernetes\"\nkubeconfig = \"/k\"\nnode = \"Node_1\"",
            "`fleet.node` with `fleet.backend = \"kubernetes\"` must be",
        ),
        (
            "backend = \"kubernetes\"\nkubeconfig = \"/k\"\nnamespace = \"a.b\"",
            "`fleet.namespace` must be a namespace name",
        ),
    ] {
        let e = parse(&format!("[fleet]\n{text}\n")).unwrap_err();
        assert!(e.contains(expect), "{text}: {e}");
    }
}

/// A kubeconfig that cannot be read is a clear error at start and at check, not a panic.
#[test]
fn kubernetes_backend_without_its_kubeconfig_is_a_clear_error() {
    let c = parse("[fleet]\nbackend = \"kubernetes\"\nkubeconfig = \"/k\"\n").unwrap();
    let s = crate::fleet::FleetSettings::from_config(&c.fleet, Duration::from_secs(1)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = rt.block_on(async { crate::fleet::Fleet::start(s.clone()).map(|_| ()) });
    assert!(
        matches!(&e, Err(crate::fleet::FleetError::Config(m)) if m.contains("fleet.kubeconfig") && m.contains("/k")),
        "{e:?}"
    );
    let e = rt.block_on(crate::fleet::Fleet::check(&s));
    assert!(
        matches!(e, Err(crate::fleet::FleetError::Config(_))),
        "{e:?}"
    );
}
