//! The daemon's brain against the real bed: pleg-guard runs as a real systemd service in a
//! booted bed, a real fault is injected, and the journal must show the right repair — once,
//! within its budget, and nothing on a node in observe mode.

mod support;

use support::*;

/// The fast rounds of [`FAST_ROUNDS`] with short settle times, and `when = "always"`
/// because the bed's systemd 252 is not affected by the bus bug (the bed's
/// `resume_logind_on_reexec` stands in for a bug that reexec cures); `top` holds top-level keys.
fn config(top: &str) -> String {
    fast_config(&format!(
        r#"{top}
[actions.purge_dead_containers]
settle = "2s"

[actions.daemon_reexec]
when = "always"
settle = "3s"
"#
    ))
}

/// Entries of pleg-guard with this event (and action, when given).
fn events(bed: &Bed, event: &str, action: Option<&str>) -> usize {
    let fields: Vec<(&str, &str)> = action
        .map(|a| ("PLEG_GUARD_ACTION", a))
        .into_iter()
        .collect();
    bed.pleg_guard_events(event, &fields).len()
}

fn start(bed: &Bed, top: &str) {
    bed.run_pleg_guard(&config(top));
}

#[test]
fn purges_exactly_the_dead_containers() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let dead1 = DeadContainer::create(&unique_name("dead1"));
    let dead2 = DeadContainer::create(&unique_name("dead2"));
    let running = TestContainer::running(&unique_name("running"));
    let exited = TestContainer::exited(&unique_name("exited"));
    dead1.release();
    dead2.release();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    start(&bed, "");

    let done = bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "purge-dead-containers")],
        secs(30),
    );
    let msg = field(&done, "MESSAGE").unwrap_or("");
    assert!(
        msg.contains(&dead1.name) && msg.contains(&dead2.name),
        "{msg}"
    );
    assert_eq!(docker_state(&dead1.name), None);
    assert_eq!(docker_state(&dead2.name), None);
    assert_eq!(docker_state(&running.name).as_deref(), Some("running"));
    assert_eq!(docker_state(&exited.name).as_deref(), Some("exited"));
    bed.wait_event(
        "symptom-cleared",
        &[("PLEG_GUARD_ACTION", "purge-dead-containers")],
        secs(15),
    );
    assert_eq!(
        events(&bed, "action-started", Some("purge-dead-containers")),
        1
    );
    // The finding and the start are logged with the contract's fields.
    bed.wait_event(
        "finding",
        &[
            ("PLEG_GUARD_FINDING", "dead-containers"),
            ("PLEG_GUARD_TARGET", "docker"),
        ],
        secs(1),
    );
}

#[test]
fn undeletable_dead_container_fails_then_is_rate_limited() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let dead = DeadContainer::create(&unique_name("stuck"));
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    start(&bed, "");

    let failed = bed.wait_event(
        "action-failed",
        &[("PLEG_GUARD_ACTION", "purge-dead-containers")],
        secs(30),
    );
    assert!(field(&failed, "MESSAGE").unwrap_or("").contains(&dead.name));
    let held = bed.wait_event(
        "action-suppressed",
        &[("PLEG_GUARD_ACTION", "purge-dead-containers")],
        secs(10),
    );
    assert!(
        field(&held, "MESSAGE")
            .unwrap_or("")
            .contains("next run allowed at")
    );
    stays(
        "purge-dead-containers started, then suppressed once (not every round)",
        (1, 1),
        secs(4),
        || {
            (
                events(&bed, "action-started", Some("purge-dead-containers")),
                events(&bed, "action-suppressed", Some("purge-dead-containers")),
            )
        },
    );
    assert_eq!(bed.unit_property("pleg-guard", "ActiveState"), "active");
    assert_eq!(docker_state(&dead.name).as_deref(), Some("dead"));
    let status = bed.status_json();
    assert_eq!(
        status["budget"]["purge-dead-containers"]["remaining"], 23,
        "{status:#}"
    );
    assert!(
        status["budget"]["purge-dead-containers"]["next_allowed_at"].is_string(),
        "{status:#}"
    );
    assert_eq!(status["state"], "degraded", "{status:#}");
}

#[test]
fn reexec_cures_a_stuck_logind_once() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, "");
    bed.resume_logind_on_reexec();
    bed.stop_logind();

    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "logind-unresponsive")],
        secs(20),
    );
    bed.wait_reexec_cured(secs(40), secs(20));
    bed.wait_event(
        "target-recovered",
        &[("PLEG_GUARD_TARGET", "logind")],
        secs(5),
    );
    stays(
        "exactly one reexec (count, action-started)",
        (1, 1),
        secs(4),
        || {
            (
                bed.reexec_count(),
                events(&bed, "action-started", Some("daemon-reexec")),
            )
        },
    );
    let status = bed.status_json();
    assert_eq!(status["state"], "healthy", "{status:#}");
    assert_eq!(
        status["actions"][0]["action"], "daemon-reexec",
        "{status:#}"
    );
    assert_eq!(status["actions"][0]["outcome"], "succeeded", "{status:#}");
    assert_eq!(status["actions"][0]["symptom"], "cleared", "{status:#}");
}

#[test]
fn reexecs_stop_at_the_budget_when_logind_stays_stuck() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, "");
    // Two a day, one second apart (the drop-in below overrides the base config).
    bed.write_file(
        "/etc/pleg-guard/config.d/50-budget.toml",
        "[actions.daemon_reexec]\nmin_interval = \"1s\"\nmax_per_day = 2\n",
    );
    bed.sh_ok("systemctl reload pleg-guard");
    bed.stop_logind();

    bed.wait_event(
        "action-suppressed",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(90),
    );
    stays(
        "two reexecs, no third (started, persisted, count)",
        (2, 2, 2),
        secs(5),
        || {
            (
                events(&bed, "action-started", Some("daemon-reexec")),
                events(&bed, "symptom-persisted", Some("daemon-reexec")),
                bed.reexec_count(),
            )
        },
    );
    let status = bed.status_json();
    assert_eq!(
        status["budget"]["daemon-reexec"]["remaining"], 0,
        "{status:#}"
    );
    assert_eq!(status["healthy"], false);
    assert!(
        bed.unit_property("pleg-guard", "StatusText")
            .starts_with("degraded"),
        "{}",
        bed.unit_property("pleg-guard", "StatusText")
    );
}

#[test]
fn stopped_bus_is_reported_and_not_reexeced() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, "");
    bed.stop_dbus();
    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "bus-unresponsive")],
        secs(20),
    );
    stays("no action, no reexec", (0, 0), secs(6), || {
        (events(&bed, "action-started", None), bed.reexec_count())
    });
}

#[test]
fn wedged_kubelet_is_restarted_once() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    start(&bed, "");
    let before = bed.main_pid("kubelet.service");
    bed.kubelet_wedge();

    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "kubelet-pleg-unhealthy")],
        secs(20),
    );
    bed.wait_cured("restart-kubelet", secs(30), secs(20));
    assert_ne!(
        bed.main_pid("kubelet.service"),
        before,
        "kubelet was restarted"
    );
    stays(
        "one restart-kubelet and nothing else (restarts, all actions)",
        (1, 1),
        secs(3),
        || {
            (
                events(&bed, "action-started", Some("restart-kubelet")),
                events(&bed, "action-started", None),
            )
        },
    );
}

/// What a tenant's failing probe makes kubelet log (`klog.V(1).InfoS("Probe failed", ...,
/// "output", output)`) when the probe prints kubelet's own PLEG line: logged by the kubelet
/// unit itself, every second.
const FORGED_PROBE: &str = r#"#!/bin/sh
while :; do
    printf '%s\n' 'I1202 14:00:00.000000    4242 prober.go:107] "Probe failed" probeType="Liveness" pod="tenant/evil" podUID="0c0a" containerName="c" probeResult="failure" output="I1202 14:00:00.000000 1 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s]"'
    sleep 1
done
"#;

/// A tenant must not make pleg-guard restart kubelet: kubelet's unit logging a probe failure
/// whose output quotes the PLEG line gives no finding and no action; kubelet's own PLEG line
/// afterwards does (pleg-guard was reading that journal all along).
#[test]
fn a_probe_output_quoting_the_pleg_line_restarts_nothing() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.write_file("/usr/local/bin/forged-probe", FORGED_PROBE);
    bed.write_file(
        "/etc/systemd/system/kubelet.service.d/forged-probe.conf",
        "[Service]\nExecStartPost=/bin/sh -c '/bin/sh /usr/local/bin/forged-probe &'\n",
    );
    bed.sh_ok("systemctl daemon-reload && systemctl restart kubelet.service");
    let kubelet = bed.main_pid("kubelet.service");
    start(&bed, "");
    wait_until(
        "the forged probe lines in kubelet's journal",
        secs(10),
        || {
            bed.journal(&["-u", "kubelet.service"])
                .iter()
                .filter(|e| field(e, "MESSAGE").is_some_and(|m| m.contains("\"Probe failed\"")))
                .count()
                >= 3
        },
    );
    std::thread::sleep(secs(6)); // several 1 s rounds past the startup grace of FAST_ROUNDS
    assert_eq!(
        bed.pleg_guard_events(
            "finding",
            &[("PLEG_GUARD_FINDING", "kubelet-pleg-unhealthy")]
        )
        .len(),
        0
    );
    assert_eq!(events(&bed, "action-started", None), 0);
    assert_eq!(bed.main_pid("kubelet.service"), kubelet);
    assert_eq!(
        bed.status_json()["targets"]["kubelet"]["state"],
        "ok",
        "{:#}",
        bed.status_json()
    );
    bed.kubelet_wedge();
    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "kubelet-pleg-unhealthy")],
        secs(20),
    );
}

#[test]
fn observe_mode_changes_nothing() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let dead = DeadContainer::create(&unique_name("observed"));
    dead.release();
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());
    start(&bed, "mode = \"observe\"\n");
    let kubelet = bed.main_pid("kubelet.service");
    bed.stop_logind();
    bed.kubelet_wedge();

    let skipped = bed.wait_event(
        "action-skipped",
        &[("PLEG_GUARD_ACTION", "purge-dead-containers")],
        secs(20),
    );
    assert!(
        field(&skipped, "MESSAGE").unwrap_or("").contains("observe"),
        "{skipped:?}"
    );
    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "logind-unresponsive")],
        secs(20),
    );
    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "kubelet-pleg-unhealthy")],
        secs(20),
    );
    stays(
        "observe mode: no action, no reexec",
        (0, 0),
        secs(5),
        || (events(&bed, "action-started", None), bed.reexec_count()),
    );
    assert_eq!(docker_state(&dead.name).as_deref(), Some("dead"));
    assert_eq!(bed.main_pid("kubelet.service"), kubelet);
    assert_eq!(bed.status_json()["mode"], "observe");
    // --dry-run does the same whatever the file says (checked on the command line).
    let o = bed.sh("pleg-guard run --help");
    assert!(String::from_utf8_lossy(&o.stdout).contains("--dry-run"));
}

#[test]
fn budget_survives_kill_9_and_restart() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    start(&bed, "");
    bed.write_file(
        "/etc/pleg-guard/config.d/50-budget.toml",
        "[actions.daemon_reexec]\nmin_interval = \"1h\"\nmax_per_day = 1\n",
    );
    bed.sh_ok("systemctl reload pleg-guard");
    bed.stop_logind();
    bed.wait_event(
        "action-started",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(30),
    );
    // Right after the action started the ledger already holds it. PID 1 may be re-executing
    // at this very moment, so systemctl is retried until it gets through.
    // (kill(1) on MainPID rather than `systemctl kill`: inside the bed the latter also tries
    // the cgroup and reports an I/O error even when the process died.)
    wait_until("kill -9 of pleg-guard delivered", secs(20), || {
        bed.sh("pid=$(systemctl show -p MainPID --value pleg-guard) && [ \"$pid\" -gt 0 ] && kill -9 \"$pid\"")
            .status
            .success()
    });
    wait_until("pleg-guard restarted after kill -9", secs(30), || {
        bed.sh("test \"$(systemctl show -p NRestarts --value pleg-guard)\" -ge 1 && systemctl is-active -q pleg-guard")
            .status
            .success()
    });
    bed.wait_event(
        "action-suppressed",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(30),
    );
    stays("one daemon-reexec started, no second", 1, secs(3), || {
        events(&bed, "action-started", Some("daemon-reexec"))
    });
    assert!(bed.reexec_count() <= 1);
    let status = bed.status_json();
    assert_eq!(
        status["budget"]["daemon-reexec"]["remaining"], 0,
        "{status:#}"
    );
}

/// A kubelet run as a docker container (RKE and the like): it logs PLEG lines until it is
/// restarted (the stand-in keeps a marker file in its own filesystem, which survives
/// `docker restart`).
const CONTAINER_KUBELET: &str = "if [ -e /restarted ]; then echo 'I1202 kubelet.go:1400] Started kubelet'; exec sleep 3600; fi; \
     touch /restarted; while true; do \
     echo 'I1202 14:00:00.000000       1 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s]'; \
     sleep 1; done";

#[test]
fn container_run_kubelet_is_read_and_restarted_through_docker() {
    let Some(env) = require_bed() else { return };
    let _docker = docker_lock();
    let name = unique_name("kubelet");
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &name,
        IMAGE,
        "sh",
        "-c",
        CONTAINER_KUBELET,
    ]);
    let kubelet = TestContainer { name: name.clone() };
    let started = docker_ok(&["inspect", "-f", "{{.State.StartedAt}}", &kubelet.name]);
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard_and_docker());

    // diagnose reads the container's log through the docker API
    bed.write_file(
        "/etc/pleg-guard/config.toml",
        format!("[kubelet]\ncontainer = \"{name}\"\n"),
    );
    let o = bed.exec(&["pleg-guard", "diagnose", "--json"], secs(30));
    let r: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
    assert_eq!(r["targets"]["kubelet"]["state"], "error", "{r:#}");
    assert!(
        r["targets"]["kubelet"]["detail"]
            .as_str()
            .unwrap_or("")
            .starts_with("PLEG is not healthy"),
        "{r:#}"
    );

    // the daemon restarts the container, not a unit
    bed.install_pleg_guard(&config(""));
    bed.write_file(
        "/etc/pleg-guard/config.d/10-container.toml",
        format!("[kubelet]\ncontainer = \"{name}\"\n"),
    );
    bed.start_pleg_guard();
    let ok = bed.wait_cured("restart-kubelet", secs(30), secs(30));
    assert!(
        field(&ok, "MESSAGE")
            .unwrap_or("")
            .contains(&format!("restarted container {name}")),
        "{ok:?}"
    );
    let restarted = docker_ok(&["inspect", "-f", "{{.State.StartedAt}}", &kubelet.name]);
    assert_ne!(started, restarted, "the kubelet container was restarted");
    assert_eq!(docker_state(&name).as_deref(), Some("running"));
}

#[test]
fn corrupt_ledger_is_kept_aside_and_holds_actions_back() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.write_file(
        "/var/lib/pleg-guard/ledger.json",
        "{\"entries\": [ {\"id\": 1, \"act",
    );
    start(&bed, "");
    let err = bed.wait_journal(
        &["-u", "pleg-guard", "-p", "err"],
        |e| field(e, "MESSAGE").is_some_and(|m| m.contains("ledger") && m.contains("corrupt")),
        secs(10),
    );
    assert!(
        field(&err, "MESSAGE").unwrap_or("").contains("kept aside"),
        "{err:?}"
    );
    assert!(
        bed.sh("ls /var/lib/pleg-guard | grep -q 'ledger.json.corrupt-'")
            .status
            .success()
    );
    bed.stop_logind();
    let held = bed.wait_event(
        "action-suppressed",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(20),
    );
    assert!(
        field(&held, "MESSAGE")
            .unwrap_or("")
            .contains("next run allowed at")
    );
    assert_eq!(events(&bed, "action-started", None), 0);
    assert_eq!(bed.reexec_count(), 0);
}

#[test]
fn dry_run_flag_acts_on_nothing() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.install_pleg_guard(&config(""));
    bed.write_file(
        "/etc/systemd/system/pleg-guard.service.d/dry-run.conf",
        "[Service]\nExecStart=\nExecStart=/usr/bin/pleg-guard run --dry-run\n",
    );
    bed.sh_ok("systemctl daemon-reload");
    bed.start_pleg_guard();
    bed.stop_logind();
    let skipped = bed.wait_event(
        "action-skipped",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(20),
    );
    assert!(
        field(&skipped, "MESSAGE")
            .unwrap_or("")
            .contains("observe mode"),
        "{skipped:?}"
    );
    stays(
        "observe mode: no action, no reexec",
        (0, 0),
        secs(3),
        || (events(&bed, "action-started", None), bed.reexec_count()),
    );
    assert_eq!(bed.status_json()["mode"], "observe");
}

#[test]
fn nothing_is_done_within_the_startup_grace() {
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    bed.install_pleg_guard(&config(""));
    bed.write_file(
        "/etc/pleg-guard/config.d/10-grace.toml",
        "startup_grace = \"8s\"\n",
    );
    bed.resume_logind_on_reexec();
    bed.stop_logind();
    bed.start_pleg_guard();
    let begun = bed.wait_journal(
        &["-u", "pleg-guard"],
        |e| field(e, "MESSAGE").is_some_and(|m| m.contains("starting")),
        secs(10),
    );
    bed.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "logind-unresponsive")],
        secs(10),
    );
    let started = bed.wait_event(
        "action-started",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(30),
    );
    let at = |e: &serde_json::Map<String, serde_json::Value>| -> u64 {
        field(e, "__REALTIME_TIMESTAMP")
            .and_then(|t| t.parse().ok())
            .expect("timestamp")
    };
    let waited_us = at(&started) - at(&begun);
    assert!(
        waited_us >= 8_000_000,
        "acted {waited_us} µs after start, within the 8 s grace"
    );
    bed.wait_event(
        "symptom-cleared",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(30),
    );
}
