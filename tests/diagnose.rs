//! `pleg-guard diagnose` against the real test bed: a booted systemd 252 with dbus and
//! logind, the host's real dockerd, and the stand-in kubelet. Each fault is injected for real
//! and diagnose must name the target that is wedged.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

/// A fast configuration: a hung call is abandoned after 2 s.
const CONFIG: &str = "[probe]\ntimeout = \"2s\"\nslow_after = \"1s\"\n";

#[test]
fn healthy_bed_every_target_ok() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    let (code, r, _) = bed.diagnose_json(CONFIG);
    for t in ["dbus", "systemd", "logind", "docker", "kubelet"] {
        assert!(
            matches!(report_state(&r, t), "ok" | "slow"),
            "{t} is {} on a healthy bed: {r:#}",
            report_state(&r, t)
        );
    }
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["healthy"], true);
    // PID 1 answered on both paths, and systemd 252 is not affected by the bus bug.
    assert_eq!(
        r["targets"]["systemd"]["facts"]["bus"]["state"], "ok",
        "{r:#}"
    );
    assert_eq!(
        r["targets"]["systemd"]["facts"]["private"]["state"], "ok",
        "{r:#}"
    );
    assert!(
        r["systemd"]["version"]
            .as_str()
            .unwrap_or("")
            .starts_with("252"),
        "{r:#}"
    );
    assert_eq!(r["systemd"]["affected"], false);
    // PID 1's reply on the bus carried its serial; one round gives no rate and no ETA.
    assert!(
        r["systemd"]["bus_serial"].as_u64().is_some_and(|s| s > 0),
        "{r:#}"
    );
    assert!(r["systemd"]["bus_serial_rate"].is_null(), "{r:#}");
    assert!(r["systemd"]["bus_serial_eta_s"].is_null(), "{r:#}");
    assert!(r["targets"]["docker"]["latency_ms"].as_u64().is_some());

    // The human table names every target too.
    let o = bed.exec(&["pleg-guard", "diagnose"], secs(30));
    let text = String::from_utf8_lossy(&o.stdout);
    for t in ["dbus", "systemd", "logind", "docker", "kubelet"] {
        assert!(
            text.lines().any(|l| l.starts_with(t) && l.contains(" ok ")),
            "{t}:\n{text}"
        );
    }
}

#[test]
fn logind_stopped_is_unresponsive() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.stop_logind();
    let (code, r, took) = bed.diagnose_json(CONFIG);
    assert_eq!(report_state(&r, "logind"), "unresponsive", "{r:#}");
    assert_eq!(report_state(&r, "dbus"), "ok", "{r:#}");
    assert_eq!(report_state(&r, "systemd"), "ok", "{r:#}");
    assert_eq!(
        report_state(&r, "docker"),
        "absent",
        "no docker socket in this bed: {r:#}"
    );
    assert_eq!(finding_ids(&r), vec!["logind-unresponsive"]);
    assert_eq!(code, 1);
    assert!(took < secs(4), "diagnose took {took:?} with a 2 s timeout");
}

#[test]
fn dbus_stopped_is_unresponsive_while_pid1_answers_on_its_private_socket() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.stop_dbus();
    let (code, r, took) = bed.diagnose_json(CONFIG);
    assert_eq!(report_state(&r, "dbus"), "unresponsive", "{r:#}");
    let systemd = &r["targets"]["systemd"]["facts"];
    assert_eq!(systemd["private"]["state"], "ok", "{r:#}");
    assert_ne!(systemd["bus"]["state"], "ok", "{r:#}");
    assert_eq!(finding_ids(&r), vec!["bus-unresponsive"], "{r:#}");
    assert_eq!(code, 1);
    assert!(took < secs(4), "diagnose took {took:?} with a 2 s timeout");
}

#[test]
fn dockerd_stopped_is_unresponsive() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    let _stopped = stop_dockerd();
    let (code, r, took) = bed.diagnose_json(CONFIG);
    assert_eq!(report_state(&r, "docker"), "unresponsive", "{r:#}");
    assert_eq!(finding_ids(&r), vec!["docker-unresponsive"], "{r:#}");
    assert_eq!(code, 1);
    assert!(took < secs(4), "diagnose took {took:?} with a 2 s timeout");
}

#[test]
fn dead_containers_are_found_and_named() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    let dead = DeadContainer::create(&unique_name("dead"));
    let _running = TestContainer::running(&unique_name("running"));
    let (code, r, _) = bed.diagnose_json(CONFIG);
    assert_eq!(report_state(&r, "docker"), "ok", "{r:#}");
    let names: Vec<&str> = r["targets"]["docker"]["facts"]["dead_containers"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec![dead.name.as_str()], "{r:#}");
    assert_eq!(finding_ids(&r), vec!["dead-containers"]);
    let detail = r["findings"][0]["detail"].as_str().unwrap_or("");
    assert!(detail.contains(&dead.name), "{detail}");
    assert_eq!(code, 1);
    // diagnose acts on nothing
    assert_eq!(docker_state(&dead.name).as_deref(), Some("dead"));
}

#[test]
fn wedged_kubelet_reports_pleg() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.kubelet_wedge();
    wait_until("the stand-in kubelet logs PLEG lines", secs(10), || {
        bed.sh("journalctl -u kubelet -o cat | grep -q 'PLEG is not healthy'")
            .status
            .success()
    });
    let (code, r, _) = bed.diagnose_json(CONFIG);
    assert_eq!(report_state(&r, "kubelet"), "error", "{r:#}");
    assert!(
        r["targets"]["kubelet"]["detail"]
            .as_str()
            .unwrap_or("")
            .starts_with("PLEG is not healthy"),
        "{r:#}"
    );
    assert_eq!(finding_ids(&r), vec!["kubelet-pleg-unhealthy"]);
    assert_eq!(code, 1);
}

#[test]
fn everything_hung_still_answers_within_the_timeout() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    bed.stop_dbus();
    let _stopped = stop_dockerd();
    let (code, r, took) = bed.diagnose_json(CONFIG);
    assert_eq!(code, 1);
    assert_eq!(report_state(&r, "dbus"), "unresponsive");
    assert_eq!(report_state(&r, "docker"), "unresponsive");
    assert!(
        took < secs(2) + secs(1) + Duration::from_millis(500),
        "took {took:?}"
    );
}

/// On a machine without systemd, D-Bus, docker or kubelet, every target is absent and that
/// is not a problem. (Sockets and URLs pointed at nothing, so this holds on any host.)
#[test]
fn plain_machine_every_target_absent_exit_0() {
    let dir = std::env::temp_dir().join(format!("pgt-plain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[dbus]\nsocket = \"/nonexistent/bus\"\n[systemd]\nprivate_socket = \"/nonexistent/private\"\n\
         [docker]\nsocket = \"/nonexistent/docker.sock\"\n[containerd]\nsocket = \"/nonexistent/containerd.sock\"\n[kubelet]\nunit = \"no-such-kubelet.service\"\n\
         healthz_url = \"http://127.0.0.1:9/healthz\"\n",
    )
    .unwrap();
    let o = std::process::Command::new(built_pleg_guard())
        .args(["diagnose", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let r: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
    for t in [
        "dbus",
        "systemd",
        "logind",
        "docker",
        "containerd",
        "kubelet",
    ] {
        assert_eq!(report_state(&r, t), "absent", "{t}: {r:#}");
    }
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_and_config_errors_exit_2() {
    let o = std::process::Command::new(built_pleg_guard())
        .args(["diagnose", "--config", "/nonexistent/config.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/config.toml"));
    let o = std::process::Command::new(built_pleg_guard())
        .args(["diagnose", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
}
