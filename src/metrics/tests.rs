//! Rendering against golden text, and the exporter's outputs, without root.

use super::*;
use crate::ledger::{Ledger, RunOutcome, Symptom};

/// A degraded node: logind hung, docker absent, an affected PID 1 whose serials run out in
/// about five days, one reexec that did not help and a spent budget.
const SNAPSHOT: &str = r#"{
  "pleg_guard_version": "0.1.0",
  "pid": 4242,
  "mode": "repair",
  "healthy": false,
  "state": "degraded",
  "summary": "logind-unresponsive",
  "updated_at": "2026-12-03T10:00:00Z",
  "interval_ms": 10000,
  "systemd": {
    "version": "219-57.el7",
    "affected": true,
    "reason": "219 before the fix",
    "bus_serial": 4100000000,
    "bus_serial_rate": 450.5,
    "bus_serial_eta_s": 432000,
    "bus_serial_wraps": false
  },
  "targets": {
    "dbus": {"target": "dbus", "state": "ok", "latency_ms": 2, "detail": ""},
    "docker": {"target": "docker", "state": "absent", "latency_ms": 0, "detail": "no socket"},
    "logind": {"target": "logind", "state": "unresponsive", "latency_ms": 5000, "detail": "timeout"},
    "systemd": {"target": "systemd", "state": "slow", "latency_ms": 1250, "detail": ""},
    "kubelet": {"target": "kubelet", "state": "error", "latency_ms": 12, "detail": "PLEG"}
  },
  "findings": [
    {"id": "logind-unresponsive", "since": "2026-12-03T09:50:00Z", "severity": "problem", "detail": "", "target": "logind"},
    {"id": "systemd-affected", "since": "2026-12-03T09:00:00Z", "severity": "warning", "detail": "", "target": "systemd"},
    {"id": "systemd-serial-exhaustion", "since": "2026-12-03T09:00:00Z", "severity": "warning", "detail": "", "target": "systemd"}
  ],
  "actions": [],
  "budget": {
    "daemon-reexec": {"enabled": true, "remaining": 0, "max_per_day": 3, "next_allowed_at": "2026-12-04T08:00:00Z"},
    "purge-dead-containers": {"enabled": true, "remaining": 24, "max_per_day": 24, "next_allowed_at": null},
    "restart-kubelet": {"enabled": false, "remaining": 4, "max_per_day": 4, "next_allowed_at": null}
  },
  "fleet": {
    "group": "pool-a",
    "node": "n1",
    "max_disruptive_setting": "5%",
    "max_disruptive": 2,
    "members_alive": 40,
    "holders": [
      {"node": "n7", "action": "restart-kubelet", "since": "2026-12-03T09:58:00Z"},
      {"node": "n1", "action": "daemon-reexec", "since": "2026-12-03T09:40:00Z"}
    ],
    "waiting": 3,
    "reachable": true,
    "last_error": null,
    "this_node": {"state": "holding", "action": "daemon-reexec", "wait_s": null, "position": null, "reason": null}
  }
}"#;

fn snapshot() -> Snapshot {
    serde_json::from_str(SNAPSHOT).unwrap()
}

fn totals() -> Totals {
    let mut l = Ledger::default();
    let t = &crate::clock::boot::Now::wall_only(SystemTime::UNIX_EPOCH);
    for symptom in [Symptom::Persisted, Symptom::Cleared, Symptom::Persisted] {
        let id = l.record_start(ActionKind::DaemonReexec, t);
        l.record_end(id, RunOutcome::Succeeded, "");
        l.record_symptom(id, symptom);
    }
    l.count(ActionKind::DaemonReexec, Outcome::Suppressed);
    let id = l.record_start(ActionKind::PurgeDeadContainers, t);
    l.record_end(id, RunOutcome::Failed, "");
    l.totals().into_owned()
}

const GOLDEN_TEXT: &str = include_str!("golden.prom");
const GOLDEN_OPENMETRICS: &str = include_str!("golden.openmetrics");

#[test]
fn renders_the_golden_text_in_both_formats() {
    let r = render(&snapshot(), &totals()).unwrap();
    if std::env::var_os("PLEG_GUARD_BLESS").is_some() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/metrics/");
        std::fs::write(format!("{dir}golden.prom"), &r.text).unwrap();
        std::fs::write(format!("{dir}golden.openmetrics"), &r.openmetrics).unwrap();
    }
    assert_eq!(
        r.text, GOLDEN_TEXT,
        "PLEG_GUARD_BLESS=1 rewrites the golden files"
    );
    assert_eq!(r.openmetrics, GOLDEN_OPENMETRICS);
}

#[test]
fn contract_names_and_values() {
    let text = render(&snapshot(), &totals()).unwrap().text;
    let has = |line: &str| text.lines().any(|l| l == line);
    for line in [
        r#"pleg_guard_build_info{version="0.1.0"} 1"#,
        r#"pleg_guard_target_up{target="dbus"} 1"#,
        r#"pleg_guard_target_up{target="systemd"} 1"#,
        r#"pleg_guard_target_up{target="logind"} 0"#,
        r#"pleg_guard_target_up{target="kubelet"} 0"#,
        r#"pleg_guard_target_latency_seconds{target="logind"} 5.0"#,
        r#"pleg_guard_target_latency_seconds{target="systemd"} 1.25"#,
        r#"pleg_guard_finding_active{finding="logind-unresponsive"} 1"#,
        r#"pleg_guard_finding_active{finding="systemd-bus-wedge"} 0"#,
        r#"pleg_guard_actions_total{action="daemon-reexec",outcome="succeeded"} 3"#,
        r#"pleg_guard_actions_total{action="daemon-reexec",outcome="persisted"} 2"#,
        r#"pleg_guard_actions_total{action="daemon-reexec",outcome="suppressed"} 1"#,
        r#"pleg_guard_actions_total{action="purge-dead-containers",outcome="failed"} 1"#,
        r#"pleg_guard_actions_total{action="restart-kubelet",outcome="skipped"} 0"#,
        r#"pleg_guard_budget_remaining{action="daemon-reexec"} 0"#,
        r#"pleg_guard_budget_remaining{action="purge-dead-containers"} 24"#,
        "pleg_guard_systemd_affected 1",
        "pleg_guard_systemd_bus_serial 4100000000",
        "pleg_guard_systemd_bus_serial_eta_seconds 432000",
        "pleg_guard_healthy 0",
        "pleg_guard_round_interval_seconds 10.0",
        "pleg_guard_fleet_slots_held 2",
        "pleg_guard_fleet_slots_max 2",
        "pleg_guard_fleet_members 40",
        "pleg_guard_fleet_wait_seconds 0",
        "pleg_guard_fleet_hold_seconds 1200",
        "pleg_guard_fleet_reachable 1",
    ] {
        assert!(has(line), "missing {line:?} in\n{text}");
    }
    // absent targets are left out, every finding id and action x outcome is there
    assert!(!text.contains(r#"target="docker""#), "{text}");
    let count = |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("pleg_guard_finding_active{"), FindingId::ALL.len());
    assert_eq!(
        count("pleg_guard_actions_total{"),
        ActionKind::ALL.len() * 6
    );
}

#[test]
fn unknown_serial_and_eta_are_left_out() {
    let mut s = snapshot();
    s.systemd.bus_serial = None;
    s.systemd.bus_serial_eta_s = None;
    let r = render(&s, &Totals::default()).unwrap();
    for text in [&r.text, &r.openmetrics] {
        assert!(!text.contains("pleg_guard_systemd_bus_serial"), "{text}");
        assert!(text.contains("pleg_guard_systemd_affected 1"), "{text}");
    }
}

#[test]
fn fleet_gauges_only_with_a_fleet_and_unknowns_left_out() {
    let mut s = snapshot();
    let f = s.fleet.as_mut().unwrap();
    f.max_disruptive = None;
    f.members_alive = None;
    f.holders.clear();
    f.reachable = false;
    f.this_node.wait_s = Some(95);
    let text = render(&s, &Totals::default()).unwrap().text;
    for line in [
        "pleg_guard_fleet_slots_held 0",
        "pleg_guard_fleet_wait_seconds 95",
        "pleg_guard_fleet_hold_seconds 0",
        "pleg_guard_fleet_reachable 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(!text.contains("pleg_guard_fleet_slots_max"), "{text}");
    assert!(!text.contains("pleg_guard_fleet_members"), "{text}");
    s.fleet = None;
    let text = render(&s, &Totals::default()).unwrap().text;
    assert!(!text.contains("pleg_guard_fleet"), "{text}");
}

#[test]
fn exporter_writes_the_textfile_and_skips_a_missing_directory() {
    let d = crate::testing::tempdir("pleg-guard-exporter");
    let exporter = Exporter::default();
    let cfg = MetricsConfig {
        textfile: Some(d.join("pleg-guard.prom")),
        listen: None,
        bearer_token_file: None,
        bearer_token: None,
    };
    exporter.publish(&cfg, &snapshot(), &totals());
    let written = std::fs::read_to_string(d.join("pleg-guard.prom")).unwrap();
    assert_eq!(written, GOLDEN_TEXT);
    let missing = MetricsConfig {
        textfile: Some(d.join("nope/pleg-guard.prom")),
        listen: None,
        bearer_token_file: None,
        bearer_token: None,
    };
    exporter.publish(&missing, &snapshot(), &totals());
    assert!(!d.join("nope").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// Render time of one round's metrics (both formats), release or debug as built.
#[test]
fn render_is_cheap() {
    let (s, t) = (snapshot(), totals());
    let n = 200;
    let start = std::time::Instant::now();
    for _ in 0..n {
        render(&s, &t).unwrap();
    }
    let each = start.elapsed() / n;
    eprintln!(
        "render: {each:?} per round (both formats), textfile {} bytes",
        GOLDEN_TEXT.len()
    );
    assert!(each < std::time::Duration::from_millis(20), "{each:?}");
}
