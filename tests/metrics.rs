//! Prometheus metrics against the real things: Debian's `prometheus-node-exporter` reads the
//! textfile pleg-guard writes in a bed (under its real unit) and follows a fault and a repair;
//! a real `prometheus` server scrapes pleg-guard's `/metrics` in the bed's network namespace
//! and answers PromQL over its HTTP API; `promtool` checks and unit-tests the shipped alert
//! rules. Tools missing: skipped locally, a failure under CI=true (tests/run-all.sh installs
//! `prometheus` and `prometheus-node-exporter`).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use support::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `name` on PATH; when missing: None (SKIPPED) locally, a panic under CI=true.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let reason = format!("`{name}` not installed (Debian package `{package}`)");
        assert!(!under_ci(), "{reason}: required under CI=true");
        eprintln!("SKIPPED: {reason}");
    }
    found
}

/// A process killed (and reaped) when dropped.
struct Proc {
    child: Child,
    what: &'static str,
    log: PathBuf,
}

impl Proc {
    fn spawn(what: &'static str, cmd: &mut Command, log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Proc { child, what, log }
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        format!(
            "--- {} log (last lines) ---\n{}",
            self.what,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique_name(tag));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A loopback port free right now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// GET over HTTP/1.0 on the host's loopback: the body on 200.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_owned()))
}

/// The value of the sample whose name and labels are exactly `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls `get` until `pred` holds on what it returns; panics with the last value and `context`.
fn wait_for<T: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    mut get: impl FnMut() -> Option<T>,
    pred: impl Fn(&T) -> bool,
    context: impl Fn() -> String,
) -> T {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(v) = get() {
            if pred(&v) {
                return v;
            }
            last = Some(v);
        }
        if start.elapsed() > timeout {
            panic!(
                "timed out after {timeout:?} waiting for {what}; last: {last:?}\n{}",
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET on the bed's loopback (inside its network namespace), with the bed's busybox.
fn bed_get(bed: &Bed, url: &str) -> Option<String> {
    let o = bed.sh(&format!("timeout 5 busybox wget -qO- '{url}'"));
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A PromQL instant query against the Prometheus server in the bed's network namespace: the
/// result vector, or None while it cannot be had.
fn promql(bed: &Bed, expr: &str) -> Option<Vec<Value>> {
    let body = bed_get(
        bed,
        &format!(
            "http://127.0.0.1:9090/api/v1/query?query={}",
            percent_encode(expr)
        ),
    )?;
    let v: Value = serde_json::from_str(&body).ok()?;
    (v["status"] == "success").then(|| v["data"]["result"].as_array().cloned().unwrap_or_default())
}

fn promql_value(bed: &Bed, expr: &str) -> Option<f64> {
    let r = promql(bed, expr)?;
    r.first()?["value"][1].as_str()?.parse().ok()
}

/// Fast rounds; `when = "always"` because the bed's systemd 252 is not affected (its
/// `resume_logind_on_reexec` stands in for a bug that reexec cures).
const CONFIG: &str = r#"interval = "1s"
startup_grace = "0s"

[probe]
timeout = "1s"
slow_after = "500ms"
unhealthy_after = 2

[actions.daemon_reexec]
when = "always"
settle = "3s"

[metrics]
listen = "127.0.0.1:9847"
"#;

const TEXTFILE_DIR: &str = "/var/lib/prometheus/node-exporter";

#[test]
fn node_exporter_and_prometheus_read_the_metrics_through_a_fault_and_a_repair() {
    let Some(env) = require_bed() else { return };
    let Some(node_exporter) = tool("prometheus-node-exporter", "prometheus-node-exporter") else {
        return;
    };
    let Some(prometheus) = tool("prometheus", "prometheus") else {
        return;
    };
    let work = temp_dir("metrics");
    let textfiles = work.join("textfile");
    std::fs::create_dir_all(&textfiles).unwrap();
    let mut opts = BedOptions::with_pleg_guard();
    opts.extra_binds
        .push((textfiles.clone(), TEXTFILE_DIR.to_owned()));
    let bed = Bed::boot(&env, opts);
    bed.install_pleg_guard(CONFIG);
    bed.start_pleg_guard();

    // node_exporter on the host's loopback, reading the directory the bed's pleg-guard writes.
    let ne_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let ne = Proc::spawn(
        "node_exporter",
        Command::new(&node_exporter).args([
            &format!("--web.listen-address={ne_addr}"),
            "--collector.disable-defaults",
            "--collector.textfile",
            &format!("--collector.textfile.directory={}", textfiles.display()),
        ]),
        work.join("node_exporter.log"),
    );
    let diag = || format!("{}\n{}", ne.log(), bed.pleg_guard_diagnostics());
    let scrape = || http_get(ne_addr, "/metrics");
    let series = |name: &str| {
        let name = name.to_owned();
        move || scrape().and_then(|t| sample(&t, &name))
    };
    let logind_up = r#"pleg_guard_target_up{target="logind"}"#;
    wait_for(
        "logind up in node_exporter",
        secs(30),
        series(logind_up),
        |v| *v == 1.0,
        diag,
    );
    let text = scrape().unwrap();
    assert_eq!(
        sample(&text, "node_textfile_scrape_error"),
        Some(0.0),
        "{text}"
    );
    let version = format!(
        r#"pleg_guard_build_info{{version="{}"}}"#,
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(sample(&text, &version), Some(1.0), "{text}");
    // node_exporter keeps the counter's type: the textfile is Prometheus text 0.0.4
    assert!(
        text.contains("# TYPE pleg_guard_actions_total counter"),
        "{text}"
    );
    let file = textfiles.join("pleg-guard.prom");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o644);
    let t = Instant::now();
    let n = 20;
    for _ in 0..n {
        scrape().unwrap();
    }
    eprintln!(
        "MEASURED: node_exporter scrape with pleg-guard's textfile ({} bytes): {:?} each",
        std::fs::metadata(&file).unwrap().len(),
        t.elapsed() / n
    );

    // Prometheus in the bed's network namespace, scraping pleg-guard's /metrics every second
    // (through the unit's IPAddressDeny=any / IPAddressAllow=localhost), with the shipped rules.
    let storage = work.join("tsdb");
    let prom_config = work.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: pleg-guard\n    static_configs:\n      - targets: ['127.0.0.1:9847']\n",
            repo()
                .join("packaging/prometheus/pleg-guard.rules.yml")
                .display()
        ),
    )
    .unwrap();
    let prom = Proc::spawn(
        "prometheus",
        Command::new("nsenter")
            .arg(format!("--target={}", bed.host_pid1()))
            .arg("--net")
            .arg("--")
            .arg(&prometheus)
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!("--storage.tsdb.path={}", storage.display()))
            .arg("--web.listen-address=127.0.0.1:9090"),
        work.join("prometheus.log"),
    );
    let pdiag = || format!("{}\n{}", prom.log(), bed.pleg_guard_diagnostics());
    wait_for(
        "Prometheus to scrape pleg-guard (up == 1)",
        secs(60),
        || promql_value(&bed, r#"up{job="pleg-guard"}"#),
        |v| *v == 1.0,
        pdiag,
    );
    let info = wait_for(
        "pleg_guard_build_info in Prometheus",
        secs(30),
        || promql(&bed, "pleg_guard_build_info"),
        |r| !r.is_empty(),
        pdiag,
    );
    assert_eq!(
        info[0]["metric"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{info:?}"
    );
    assert_eq!(info[0]["metric"]["job"], "pleg-guard", "{info:?}");
    let actions = promql(&bed, "count(pleg_guard_actions_total)").unwrap();
    // every action with every outcome, counted from zero (a new rung adds its series)
    let action_series =
        pleg_guard::target::ActionKind::ALL.len() * pleg_guard::ledger::Outcome::ALL.len();
    assert_eq!(
        actions[0]["value"][1],
        action_series.to_string(),
        "{actions:?}"
    );
    // OpenMetrics was negotiated and the counter arrived as a counter
    let meta = bed_get(
        &bed,
        // OpenMetrics names the counter's family without `_total`
        "http://127.0.0.1:9090/api/v1/targets/metadata?metric=pleg_guard_actions",
    )
    .unwrap();
    assert!(meta.contains(r#""type":"counter""#), "{meta}");

    // A fault: logind hangs. Its target goes down, daemon-reexec cures it (the bed's stand-in).
    bed.resume_logind_on_reexec();
    bed.stop_logind();
    wait_for(
        "logind down in node_exporter",
        secs(30),
        series(logind_up),
        |v| *v == 0.0,
        diag,
    );
    let succeeded = r#"pleg_guard_actions_total{action="daemon-reexec",outcome="succeeded"}"#;
    let cleared = r#"pleg_guard_actions_total{action="daemon-reexec",outcome="cleared"}"#;
    wait_for(
        "the reexec counted",
        secs(60),
        series(succeeded),
        |v| *v == 1.0,
        diag,
    );
    wait_for(
        "its symptom cleared",
        secs(30),
        series(cleared),
        |v| *v == 1.0,
        diag,
    );
    wait_for(
        "logind up again",
        secs(30),
        series(logind_up),
        |v| *v == 1.0,
        diag,
    );

    // Prometheus saw the same over /metrics.
    wait_for(
        "Prometheus to see the reexec",
        secs(30),
        || promql_value(&bed, succeeded),
        |v| *v == 1.0,
        pdiag,
    );
    assert_eq!(
        promql_value(
            &bed,
            r#"min_over_time(pleg_guard_target_up{target="logind"}[10m])"#
        ),
        Some(0.0)
    );
    assert_eq!(
        promql_value(
            &bed,
            r#"pleg_guard_finding_active{finding="logind-unresponsive"}"#
        ),
        Some(0.0)
    );
    let rules = bed_get(&bed, "http://127.0.0.1:9090/api/v1/rules").unwrap();
    let rules: Value = serde_json::from_str(&rules).unwrap();
    let all: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    // Every alert of the shipped file is loaded (counted from the file, not hard-coded).
    let shipped = std::fs::read_to_string(repo().join("packaging/prometheus/pleg-guard.rules.yml"))
        .unwrap()
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    assert!(shipped >= 7, "only {shipped} alerts in the shipped rules");
    assert_eq!(all.len(), shipped, "{rules}");
    assert!(all.iter().all(|r| r["health"] != "err"), "{rules}");
    let scrape_ms = promql_value(
        &bed,
        r#"max_over_time(scrape_duration_seconds{job="pleg-guard"}[10m]) * 1000"#,
    )
    .unwrap();
    let scrape_avg_ms = promql_value(
        &bed,
        r#"avg_over_time(scrape_duration_seconds{job="pleg-guard"}[10m]) * 1000"#,
    )
    .unwrap();
    eprintln!(
        "MEASURED: Prometheus scrape of pleg-guard's /metrics: avg {scrape_avg_ms:.2} ms, max {scrape_ms:.2} ms"
    );

    // A restart keeps the counters (they live in the ledger).
    let restarted = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    bed.sh_ok("systemctl restart pleg-guard");
    let stamp = "pleg_guard_last_update_timestamp_seconds";
    wait_for(
        "a round after the restart",
        secs(30),
        series(stamp),
        |v| *v > restarted,
        diag,
    );
    let text = scrape().unwrap();
    assert_eq!(sample(&text, succeeded), Some(1.0), "{text}");
    assert_eq!(sample(&text, cleared), Some(1.0), "{text}");
    let leftovers: Vec<_> = std::fs::read_dir(&textfiles)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["pleg-guard.prom"], "no temp files left");

    drop(prom);
    drop(ne);
    drop(bed);
    let _ = std::fs::remove_dir_all(&work);
}

/// Without the textfile directory (node_exporter not installed) pleg-guard writes nothing and
/// logs nothing about it; the unit's `ReadWritePaths=-...` lets it start all the same.
#[test]
fn a_missing_textfile_directory_is_no_problem() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.install_pleg_guard(
        "interval = \"1s\"\n[probe]\ntimeout = \"500ms\"\nslow_after = \"250ms\"\n",
    );
    bed.start_pleg_guard();
    std::thread::sleep(secs(3)); // a few rounds
    bed.sh_ok("test ! -e /var/lib/prometheus");
    assert_eq!(bed.unit_property("pleg-guard", "ActiveState"), "active");
    let log = bed.sh_ok("journalctl -u pleg-guard --no-pager -o cat");
    assert!(!log.contains("metrics"), "{log}");
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = tool("promtool", "prometheus") else {
        return;
    };
    let rules = repo().join("packaging/prometheus/pleg-guard.rules.yml");
    let o = host(
        promtool.to_str().unwrap(),
        &["check", "rules", rules.to_str().unwrap()],
    );
    assert!(o.status.success(), "promtool check rules: {}", show(&o));
    let tests = repo().join("tests/prometheus/pleg-guard.rules.test.yml");
    let o = host(
        promtool.to_str().unwrap(),
        &["test", "rules", tests.to_str().unwrap()],
    );
    assert!(o.status.success(), "promtool test rules: {}", show(&o));
    // the rendered metrics (the golden text of the unit tests) pass promtool's lint
    let golden = std::fs::read(repo().join("src/metrics/golden.prom")).unwrap();
    let o = run_with_timeout(
        Command::new(&promtool).args(["check", "metrics"]),
        Some(&golden),
        secs(30),
    )
    .unwrap();
    assert!(o.status.success(), "promtool check metrics: {}", show(&o));
    assert!(Path::new(&rules).exists());
}
