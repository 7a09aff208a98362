//! pleg-guard as a systemd citizen, against the real bed: READY=1 and STATUS= as systemd sees
//! them, the journal's structured fields and catalog, quiet healthy rounds, reload, a fast
//! stop while calls hang, the watchdog, `pleg-guard status`, and the hardened unit's score.

mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// The `MESSAGE_ID` of `target-unhealthy`, as in src/report/event.rs.
const TARGET_UNHEALTHY_ID: &str = "a9742433f52a432e9ba2bfcf269ede3c";

/// Fast rounds; daemon-reexec disabled (nothing repairs a fault) unless `reexec`, then
/// `when = "always"` (the bed's systemd 252 is not affected by the bus bug).
fn config(top: &str, reexec: bool) -> String {
    let reexec = if reexec {
        "enabled = true\nwhen = \"always\"\nsettle = \"3s\""
    } else {
        "enabled = false"
    };
    format!(
        r#"{top}
interval = "1s"
startup_grace = "0s"

[probe]
timeout = "1s"
unhealthy_after = 2

[actions.daemon_reexec]
{reexec}
"#
    )
}

/// Installs the unit and config and starts it; returns how long `systemctl start` took.
fn start(bed: &Bed, config: &str) -> Duration {
    bed.install_pleg_guard(config);
    let t = Instant::now();
    bed.start_pleg_guard();
    t.elapsed()
}

fn status_text(bed: &Bed) -> String {
    bed.unit_property("pleg-guard", "StatusText")
}

/// Waits until systemd's StatusText starts with `prefix`; returns it.
fn wait_status_text(bed: &Bed, prefix: &str, timeout: Duration) -> String {
    let start = Instant::now();
    loop {
        let s = status_text(bed);
        if s.starts_with(prefix) {
            return s;
        }
        assert!(
            start.elapsed() < timeout,
            "StatusText still {s:?} after {timeout:?}, expected {prefix:?}...\n{}",
            bed.pleg_guard_diagnostics()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `pleg-guard status ARGS` inside the bed.
fn status_cmd(bed: &Bed, args: &[&str]) -> Output {
    let mut argv = vec!["pleg-guard", "status"];
    argv.extend_from_slice(args);
    bed.exec(&argv, secs(10))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Journal lines pleg-guard itself wrote (not PID 1's lines about the unit).
fn own_lines(bed: &Bed, extra: &[&str]) -> Vec<String> {
    // Not `-u`: journalctl ANDs a further match only with the last term `-u` expands to.
    let mut args = vec![
        "_SYSTEMD_UNIT=pleg-guard.service",
        "SYSLOG_IDENTIFIER=pleg-guard",
    ];
    args.extend_from_slice(extra);
    bed.journal(&args)
        .iter()
        .filter(|e| field(e, "SYSLOG_IDENTIFIER") == Some("pleg-guard"))
        .map(|e| {
            format!(
                "<{}> {}",
                field(e, "PRIORITY").unwrap_or("?"),
                field(e, "MESSAGE").unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn starts_active_after_ready_and_reports_healthy() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    let took = start(&bed, &config("", false));
    eprintln!("MEASURED systemctl start pleg-guard -> active: {took:?}");
    assert_eq!(bed.unit_property("pleg-guard", "ActiveState"), "active");
    assert_eq!(bed.unit_property("pleg-guard", "SubState"), "running");
    assert_eq!(bed.unit_property("pleg-guard", "Type"), "notify");
    // READY=1 comes after the first round: status.json exists as soon as start returns.
    let status = bed.status_json();
    assert_eq!(status["healthy"], true, "{status:#}");
    let text = status_text(&bed);
    assert!(text.starts_with("healthy"), "StatusText {text:?}");
    // `systemctl status` shows the line.
    let o = bed.sh("systemctl status --no-pager pleg-guard");
    assert!(
        stdout(&o).contains(&format!("Status: \"{text}")),
        "{}",
        show(&o)
    );
    assert!(
        took < secs(10),
        "start took {took:?} with interval 1s and timeout 1s"
    );
}

#[test]
fn fault_is_degraded_in_status_text_journal_fields_and_catalog() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, &config("", false));
    wait_status_text(&bed, "healthy", secs(5));

    bed.stop_logind();
    let text = wait_status_text(&bed, "degraded", secs(20));
    eprintln!("StatusText while logind is stopped: {text}");
    assert!(text.contains("logind"), "{text}");

    let e = bed.wait_event(
        "target-unhealthy",
        &[("PLEG_GUARD_TARGET", "logind")],
        secs(10),
    );
    assert_eq!(field(&e, "MESSAGE_ID"), Some(TARGET_UNHEALTHY_ID), "{e:?}");
    assert_eq!(field(&e, "SYSLOG_IDENTIFIER"), Some("pleg-guard"), "{e:?}");
    assert_eq!(field(&e, "_SYSTEMD_UNIT"), Some("pleg-guard.service"));
    assert_eq!(
        field(&e, "PRIORITY"),
        Some("4"),
        "trouble is a warning: {e:?}"
    );
    let prefixed: Vec<&String> = e.keys().filter(|k| k.starts_with("F_")).collect();
    assert!(
        prefixed.is_empty(),
        "F_-prefixed fields {prefixed:?}: {e:?}"
    );
    // Fields that do not apply are left out rather than logged empty.
    assert!(!e.contains_key("PLEG_GUARD_ACTION"), "{e:?}");

    // journalctl -x shows the catalog text for the entry.
    let o = bed.sh(
        "journalctl -x --no-pager -u pleg-guard PLEG_GUARD_EVENT=target-unhealthy PLEG_GUARD_TARGET=logind",
    );
    let x = stdout(&o);
    assert!(
        x.contains("Subject: pleg-guard: logind is unhealthy"),
        "no catalog subject in journalctl -x:\n{x}"
    );
    assert!(
        x.contains("What to do:") && x.contains("pleg-guard status"),
        "{x}"
    );

    // The finding is skipped (reexec disabled) and logged once, not every round.
    bed.wait_event(
        "action-skipped",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(10),
    );
    stays("action-skipped logged once per episode", 1, secs(3), || {
        bed.journal(&["-u", "pleg-guard", "PLEG_GUARD_EVENT=action-skipped"])
            .len()
    });

    bed.cont_logind();
    wait_status_text(&bed, "healthy", secs(10));
    let r = bed.wait_event(
        "target-recovered",
        &[("PLEG_GUARD_TARGET", "logind")],
        secs(5),
    );
    assert_eq!(
        field(&r, "MESSAGE_ID"),
        Some("df5756518b07429cb91bb4390e50ab59")
    );
}

#[test]
fn healthy_rounds_write_nothing_to_the_journal() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, &config("", false));
    // (Counted, not --after-cursor: journalctl skips the first match after a cursor whose
    // own entry does not match.)
    let at_ready = own_lines(&bed, &[]).len();
    std::thread::sleep(secs(10)); // ten rounds
    let status = bed.status_json();
    assert_eq!(status["healthy"], true, "{status:#}");
    let all = own_lines(&bed, &[]);
    let since_ready = &all[at_ready..];
    eprintln!(
        "MEASURED pleg-guard journal lines: {at_ready} at start-up, {} in 10 healthy rounds:\n{}",
        since_ready.len(),
        all.join("\n")
    );
    assert!(
        since_ready.is_empty(),
        "healthy rounds logged:\n{}",
        since_ready.join("\n")
    );
    assert!(all.len() <= 3, "too chatty a start:\n{}", all.join("\n"));
}

#[test]
fn reload_applies_a_valid_config_and_keeps_the_old_one_on_an_invalid_one() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, &config("", false));
    let pid = bed.main_pid("pleg-guard");
    assert_eq!(bed.status_json()["mode"], "repair");

    // valid: observe mode shows at the next round
    bed.write_file(
        "/etc/pleg-guard/config.toml",
        config("mode = \"observe\"", false),
    );
    let t = Instant::now();
    bed.sh_ok("systemctl reload pleg-guard");
    eprintln!("MEASURED systemctl reload (valid): {:?}", t.elapsed());
    let text = wait_status_text(&bed, "healthy", secs(5));
    wait_until("status.json mode observe", secs(5), || {
        bed.status_json()["mode"] == "observe"
    });
    wait_until("StatusText says observe mode", secs(5), || {
        status_text(&bed).contains("observe mode")
    });
    eprintln!("StatusText after reload: {text}");

    // invalid: an unknown key; the error names it, the old config stays
    let before = bed.journal(&["_SYSTEMD_UNIT=pleg-guard.service"]).len();
    bed.write_file(
        "/etc/pleg-guard/config.toml",
        config("mode = \"repair\"\nbogus_knob = 1", false),
    );
    let o = bed.sh("systemctl reload pleg-guard");
    assert!(o.status.success(), "systemctl reload failed: {}", show(&o));
    let mut err = None;
    wait_until("the reload error in the journal", secs(5), || {
        err = bed.journal(&["_SYSTEMD_UNIT=pleg-guard.service"])[before..]
            .iter()
            .find(|e| field(e, "MESSAGE").is_some_and(|m| m.contains("bogus_knob")))
            .cloned();
        err.is_some()
    });
    let err = err.unwrap();
    eprintln!("reload error: {}", field(&err, "MESSAGE").unwrap_or(""));
    assert_eq!(field(&err, "PRIORITY"), Some("3"), "an error: {err:?}");
    stays(
        "active, same main PID (reload must not restart)",
        ("active".to_owned(), pid),
        secs(2),
        || {
            (
                bed.unit_property("pleg-guard", "ActiveState"),
                bed.main_pid("pleg-guard"),
            )
        },
    );
    assert_eq!(bed.status_json()["mode"], "observe", "old config kept");
    assert!(status_text(&bed).contains("observe mode"));
}

#[test]
fn sigterm_stops_within_a_second_while_the_bus_hangs() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, &config("", false));
    bed.stop_dbus();
    bed.wait_event(
        "target-unhealthy",
        &[("PLEG_GUARD_TARGET", "dbus")],
        secs(20),
    );
    // Land the signal in the middle of a round: bus calls are hanging right now.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let o = bed.sh("systemctl stop pleg-guard");
    let took = t.elapsed();
    eprintln!("MEASURED systemctl stop with dbus-daemon SIGSTOPped: {took:?}");
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(bed.unit_property("pleg-guard", "ActiveState"), "inactive");
    assert_eq!(bed.unit_property("pleg-guard", "Result"), "success");
    assert_eq!(bed.unit_property("pleg-guard", "ExecMainStatus"), "0");
    assert!(took < Duration::from_millis(1500), "stop took {took:?}");
}

#[test]
fn watchdog_restarts_a_stopped_daemon_but_not_one_whose_probes_hang() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.install_pleg_guard(&config("", false));
    bed.write_file(
        "/etc/systemd/system/pleg-guard.service.d/50-test-watchdog.conf",
        "[Service]\nWatchdogSec=3s\nRestartSec=1s\n",
    );
    bed.sh_ok("systemctl daemon-reload");
    bed.start_pleg_guard();
    assert_eq!(bed.unit_property("pleg-guard", "WatchdogUSec"), "3s");
    let old = bed.main_pid("pleg-guard");

    // Hung probes (dbus-daemon stopped) are bounded: the loop turns and the watchdog is fed.
    bed.stop_dbus();
    stays(
        "no restart while the probes hang (NRestarts, main PID)",
        ("0".to_owned(), old),
        secs(8),
        || {
            (
                bed.unit_property("pleg-guard", "NRestarts"),
                bed.main_pid("pleg-guard"),
            )
        },
    );
    bed.cont_dbus();

    // A stopped loop is not.
    let t = Instant::now();
    bed.sh_ok(&format!("kill -STOP {old}"));
    bed.wait_journal(
        &["_PID=1", "-u", "pleg-guard"],
        |e| field(e, "MESSAGE").is_some_and(|m| m.contains("Watchdog timeout")),
        secs(15),
    );
    eprintln!(
        "MEASURED kill -STOP -> watchdog timeout logged: {:?}",
        t.elapsed()
    );
    wait_until("a new pleg-guard process, active", secs(30), || {
        let p = bed.unit_property("pleg-guard", "MainPID");
        bed.unit_property("pleg-guard", "ActiveState") == "active"
            && p != "0"
            && p != old.to_string()
    });
    eprintln!(
        "MEASURED kill -STOP -> restarted and active: {:?}",
        t.elapsed()
    );
    let restarts: u32 = bed
        .unit_property("pleg-guard", "NRestarts")
        .parse()
        .unwrap();
    assert!(restarts >= 1, "NRestarts {restarts}");
    wait_status_text(&bed, "healthy", secs(10));
}

#[test]
fn status_command_output_and_exit_codes() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.install_pleg_guard(&config("", false));

    // no status.json at all
    let o = status_cmd(&bed, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no daemon state"),
        "{}",
        show(&o)
    );

    bed.start_pleg_guard();
    let o = status_cmd(&bed, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = stdout(&o);
    eprintln!("--- pleg-guard status (healthy) ---\n{out}");
    assert!(out.starts_with("healthy: "), "{out}");
    for t in ["dbus", "systemd", "logind", "kubelet"] {
        assert!(
            out.lines().any(|l| l.starts_with(t) && l.contains("ms")),
            "no {t} line with a latency:\n{out}"
        );
    }
    assert!(out.contains("findings: none"), "{out}");
    assert!(out.contains("budget (rolling 24 h):"), "{out}");
    assert!(
        out.contains("daemon-reexec") && out.contains("(disabled)"),
        "{out}"
    );

    bed.stop_logind();
    wait_status_text(&bed, "degraded", secs(20));
    let o = status_cmd(&bed, &[]);
    let out = stdout(&o);
    eprintln!("--- pleg-guard status (degraded) ---\n{out}");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(out.starts_with("degraded: "), "{out}");
    assert!(out.contains("logind-unresponsive (since "), "{out}");
    bed.cont_logind();
    wait_status_text(&bed, "healthy", secs(10));

    // stopped: the file stays (stale), exit 3
    bed.sh_ok("systemctl stop pleg-guard");
    assert!(bed.read_file("/run/pleg-guard/status.json").is_some());
    let o = status_cmd(&bed, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("stale"),
        "{}",
        show(&o)
    );
    let o = status_cmd(&bed, &["--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));

    bed.sh_ok("rm /run/pleg-guard/status.json");
    let o = status_cmd(&bed, &["--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
}

/// The contract's keys of a status document, flattened to (path, value).
fn contract_view(s: &Value) -> Vec<(String, Value)> {
    let mut v = vec![
        ("mode".to_owned(), s["mode"].clone()),
        ("healthy".to_owned(), s["healthy"].clone()),
        (
            "systemd.version".to_owned(),
            s["systemd"]["version"].clone(),
        ),
        (
            "systemd.affected".to_owned(),
            s["systemd"]["affected"].clone(),
        ),
    ];
    for (name, t) in s["targets"].as_object().expect("targets") {
        v.push((format!("targets.{name}.state"), t["state"].clone()));
        v.push((
            format!("targets.{name}.latency_ms"),
            t["latency_ms"].clone(),
        ));
    }
    for (i, f) in s["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .enumerate()
    {
        v.push((format!("findings[{i}].id"), f["id"].clone()));
        v.push((format!("findings[{i}].since"), f["since"].clone()));
    }
    for (i, a) in s["actions"].as_array().expect("actions").iter().enumerate() {
        for k in ["action", "at", "outcome"] {
            v.push((format!("actions[{i}].{k}"), a[k].clone()));
        }
    }
    for (name, b) in s["budget"].as_object().expect("budget") {
        v.push((format!("budget.{name}"), b.clone()));
    }
    v
}

/// `status --json` and status.json read around it, retried until no round rewrote the file in
/// between; checks the contract's keys are there and equal. Returns the document.
fn json_matches_file(bed: &Bed, want_exit: i32) -> Value {
    for _ in 0..20 {
        let before = bed.read_file("/run/pleg-guard/status.json").unwrap();
        let o = status_cmd(bed, &["--json"]);
        let after = bed.read_file("/run/pleg-guard/status.json").unwrap();
        if before != after {
            continue;
        }
        assert_eq!(o.status.code(), Some(want_exit), "{}", show(&o));
        let printed: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {}", show(&o)));
        let file: Value = serde_json::from_str(&after).unwrap();
        for (k, v) in contract_view(&file) {
            assert!(
                !v.is_null() || k == "systemd.version",
                "{k} missing:\n{file:#}"
            );
        }
        assert_eq!(contract_view(&printed), contract_view(&file));
        return file;
    }
    panic!("status.json changed under every read");
}

#[test]
fn status_json_equals_the_file_in_the_contract_keys() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, &config("", true));
    let s = json_matches_file(&bed, 0);
    assert_eq!(s["systemd"]["affected"], false, "{s:#}");
    assert!(
        s["systemd"]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("252")),
        "{s:#}"
    );
    // The serial forecast: PID 1's bus serial at once, a rate and an ETA once the samples
    // span 15 s (pleg-guard's own probes make it grow).
    assert!(s["systemd"]["bus_serial"].is_u64(), "{s:#}");
    wait_until("a bus serial rate in status.json", secs(40), || {
        let s = bed.status_json();
        s["systemd"]["bus_serial_rate"]
            .as_f64()
            .is_some_and(|r| r > 0.0)
            && s["systemd"]["bus_serial_eta_s"].is_u64()
    });
    let before_reexec = bed.status_json()["systemd"]["bus_serial"]
        .as_u64()
        .unwrap_or(0);

    // A fault that reexec cures: findings while it stands, an action afterwards.
    bed.resume_logind_on_reexec();
    bed.stop_logind();
    wait_until("a finding in status.json", secs(20), || {
        bed.status_json()["findings"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    });
    let s = json_matches_file(&bed, 1);
    assert!(s["findings"][0]["id"].is_string(), "{s:#}");
    bed.wait_event(
        "symptom-cleared",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(40),
    );
    wait_status_text(&bed, "healthy", secs(10));
    let s = json_matches_file(&bed, 0);
    assert_eq!(s["actions"][0]["action"], "daemon-reexec", "{s:#}");
    assert_eq!(s["actions"][0]["outcome"], "succeeded", "{s:#}");
    // The re-executed PID 1 is a new sd-bus connection: its serial starts again.
    wait_until(
        "the bus serial to restart after the reexec",
        secs(20),
        || {
            bed.status_json()["systemd"]["bus_serial"]
                .as_u64()
                .is_some_and(|v| v < before_reexec)
        },
    );
    let b = &s["budget"]["daemon-reexec"];
    assert!(
        b["remaining"].is_u64() && b.get("next_allowed_at").is_some(),
        "{s:#}"
    );
}

/// The [Service] settings of the hardening block of systemd/pleg-guard.service.
fn hardening_properties() -> Vec<String> {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/pleg-guard.service"),
    )
    .unwrap();
    let block = unit
        .split_once("# ---- Hardening")
        .expect("hardening block")
        .1;
    block
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.is_empty() && !l.starts_with('#') && l.contains('='))
        .map(str::to_owned)
        .collect()
}

#[test]
fn hardened_unit_scores_at_most_2_5_and_can_still_signal_pid1() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, &config("", false));
    let o = bed.sh("systemd-analyze security --no-pager pleg-guard.service");
    let out = stdout(&o);
    let overall = out
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no score: {}", show(&o)));
    eprintln!("{out}");
    eprintln!("MEASURED {overall}");
    let score: f64 = overall
        .split_once("pleg-guard.service:")
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the score: {overall}"));
    assert!(score <= 2.5, "{overall}");
    // TasksMax=64 and MemoryMax=256M are far above what the daemon uses (its threads and
    // children, and its RSS; the bed's cgroup does no task or memory accounting of its own)
    let pid = bed.main_pid("pleg-guard");
    let use_ = bed.sh_ok(&format!(
        "echo threads=$(ls /proc/{pid}/task | wc -l) children=$(pgrep -c -P {pid} || true) $(grep VmRSS /proc/{pid}/status | tr -d ' \t')"
    ));
    eprintln!("MEASURED {use_}");
    let count = |key: &str| -> u64 {
        use_.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.trim_end_matches("kB").parse().ok())
            .unwrap_or(u64::MAX)
    };
    assert!(count("threads=") + count("children=") < 32, "{use_}");
    assert!(count("VmRSS:") < 128 * 1024, "{use_}");

    // The reexec fallback (SIGTERM to PID 1) works inside the same sandbox.
    let before = bed.reexec_count();
    let mut cmd = String::from("systemd-run --wait --quiet --collect --unit=sandboxed-kill");
    for p in hardening_properties() {
        cmd.push_str(&format!(" -p '{p}'"));
    }
    cmd.push_str(" /bin/kill -TERM 1");
    let o = bed.sh(&cmd);
    assert!(o.status.success(), "{cmd}: {}", show(&o));
    wait_until(
        "PID 1 reexecuted on SIGTERM from the sandbox",
        secs(15),
        || bed.reexec_count() > before,
    );
    wait_until("pleg-guard still active after the reexec", secs(10), || {
        bed.unit_property("pleg-guard", "ActiveState") == "active"
    });
}

#[test]
fn restart_unit_over_the_bus_works_with_no_capability() {
    // The unit keeps no capability. Over the private socket that is proven by the daemon
    // scenarios; here PID 1's private socket is hidden so RestartUnit goes over dbus-daemon.
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    bed.write_file(
        "/etc/pleg-guard/config.d/50-no-private.toml",
        "[systemd]\nprivate_socket = \"/run/nonexistent/private\"\n",
    );
    start(&bed, &config("", false));
    let pid = bed.main_pid("pleg-guard");
    let caps = bed.sh_ok(&format!("grep -E '^Cap(Eff|Bnd)' /proc/{pid}/status"));
    assert!(
        caps.lines().all(|l| l.ends_with("0000000000000000")),
        "{caps}"
    );
    let before = bed.main_pid("kubelet.service");
    bed.kubelet_wedge();
    let ok = bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(40),
    );
    let msg = field(&ok, "MESSAGE").unwrap_or("");
    assert!(msg.contains("via system bus"), "{msg}");
    assert_ne!(bed.main_pid("kubelet.service"), before);
}
