//! The fleet budget between real nodes (issue 21): three beds, each with its own pleg-guard
//! and a wedged stand-in kubelet, share one slot on the real 3-member TLS etcd cluster. Their
//! kubelet restarts must not overlap in time, as their own journals tell.
//!
//! The beds reach the cluster through `support::fleet_bed`'s bridge.

mod support;

use std::time::{Duration, Instant};

use support::etcd::*;
use support::fleet_bed::*;
use support::*;

fn config(etcd: &EtcdCluster, node: &str) -> String {
    config_in(etcd, "beds", node, "")
}

fn config_in(etcd: &EtcdCluster, group: &str, node: &str, extra: &str) -> String {
    fast_config(&format!("{}{extra}", fleet_toml(etcd, group, node)))
}

/// The realtime stamp (µs) of the first entry of `event` for restart-kubelet.
fn stamp(bed: &Bed, event: &str) -> Option<u64> {
    bed.pleg_guard_events(event, &[("PLEG_GUARD_ACTION", "restart-kubelet")])
        .first()
        .and_then(|e| field(e, "__REALTIME_TIMESTAMP"))
        .and_then(|t| t.parse().ok())
}

#[test]
fn three_beds_one_slot_their_kubelet_restarts_do_not_overlap() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let Some(env) = require_bed() else { return };
    let beds: Vec<Bed> = (0..3)
        .map(|_| Bed::boot(&env, BedOptions::with_pleg_guard()))
        .collect();
    let mut bridges = Vec::new();
    for bed in &beds {
        give_certificates(bed, &etcd);
        bridges.push(bridge(bed, &etcd));
        let node = bed.name.clone();
        bed.install_pleg_guard(&config(&etcd, &node));
        let check = bed.sh("pleg-guard check-config --connect /etc/pleg-guard/config.toml");
        assert!(check.status.success(), "{}: {}", bed.name, show(&check));
        bed.start_pleg_guard();
    }
    for bed in &beds {
        bed.kubelet_wedge();
    }

    // every bed's restart goes through, one after another
    let deadline = Instant::now() + secs(150);
    let mut released = vec![None; beds.len()];
    while released.iter().any(Option::is_none) {
        assert!(
            Instant::now() < deadline,
            "not every bed restarted kubelet under the budget: released {released:?}\n{}",
            beds.iter()
                .map(|b| b.pleg_guard_diagnostics())
                .collect::<Vec<_>>()
                .join("\n")
        );
        for (i, bed) in beds.iter().enumerate() {
            if released[i].is_none() {
                released[i] = stamp(bed, "fleet-released");
            }
        }
        std::thread::sleep(secs(1));
    }
    let mut spans = Vec::new();
    for (i, bed) in beds.iter().enumerate() {
        let granted = stamp(bed, "fleet-granted").expect("fleet-granted in the journal");
        let started = stamp(bed, "action-started").expect("action-started in the journal");
        let succeeded = stamp(bed, "action-succeeded").expect("action-succeeded");
        let end = released[i].unwrap_or_default();
        assert!(granted <= started && started <= succeeded && succeeded <= end);
        let waits = bed.pleg_guard_events("fleet-waiting", &[]).len();
        spans.push((granted, end, bed.name.clone(), waits));
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "{} held the slot until {} but {} was granted at {}",
            w[0].2,
            w[0].1,
            w[1].2,
            w[1].0
        );
    }
    let first = spans[0].0;
    for (granted, end, name, waits) in &spans {
        eprintln!(
            "{name}: slot {:.1} s .. {:.1} s after the first grant ({waits} fleet-waiting entries)",
            (granted - first) as f64 / 1e6,
            (end - first) as f64 / 1e6
        );
    }
    assert!(
        spans.iter().filter(|s| s.3 > 0).count() >= 2,
        "at least two beds must have waited for the slot"
    );
    drop(bridges);
}

/// Quorum lost under `on_unreachable = "wait"`: the wedged kubelet is not restarted, status
/// says why, and the probe loop keeps its 1 s interval; the members return and the restart
/// goes through on its own.
#[test]
fn quorum_lost_nothing_acts_the_loop_keeps_its_interval_and_it_recovers() {
    let Some(mut etcd) = require_etcd(3) else {
        return;
    };
    let Some(env) = require_bed() else { return };
    let bed = Bed::boot(&env, BedOptions::with_pleg_guard());
    give_certificates(&bed, &etcd);
    let _bridge = bridge(&bed, &etcd);
    let node = bed.name.clone();
    bed.install_pleg_guard(&config(&etcd, &node));
    bed.start_pleg_guard();
    // registered as a member before the quorum goes
    std::thread::sleep(secs(3));

    etcd.kill_member(0);
    etcd.kill_member(1);
    bed.kubelet_wedge();
    bed.wait_event("fleet-unreachable", &[], secs(40));
    // the loop goes on at its interval while the action waits
    let mut stamps = Vec::new();
    let watch_from = Instant::now();
    while watch_from.elapsed() < secs(8) {
        let s = bed.status_json();
        if let Some(t) = s["updated_at"].as_str() {
            if stamps.last().map(String::as_str) != Some(t) {
                stamps.push(t.to_string());
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let s = bed.status_json();
    assert_eq!(
        s["fleet"]["this_node"]["state"], "unreachable",
        "status: {}",
        s["fleet"]
    );
    assert!(
        stamps.len() >= 5,
        "status.json updated {} times in 8 s with interval 1s: {stamps:?}",
        stamps.len()
    );
    assert!(
        bed.pleg_guard_events("action-started", &[]).is_empty(),
        "an action started without a slot under on_unreachable = \"wait\""
    );

    let back = Instant::now();
    etcd.start_members(&[0, 1]).expect("the members return");
    bed.wait_event(
        "action-succeeded",
        &[("PLEG_GUARD_ACTION", "restart-kubelet")],
        secs(60),
    );
    eprintln!(
        "quorum lost: status.json updated {} times in 8 s; restart-kubelet succeeded {:?} after the members returned",
        stamps.len(),
        back.elapsed()
    );
    assert_eq!(bed.pleg_guard_events("fleet-granted", &[]).len(), 1);
}

/// Member keys of nodes that are not beds, as any other member (or a test outside the
/// project) writes them: `{"node":..,"findings":[..]}` on a live lease.
struct FakeMembers<'a> {
    etcd: &'a EtcdCluster,
    group: String,
    lease: String,
    nodes: Vec<String>,
}

impl<'a> FakeMembers<'a> {
    fn new(etcd: &'a EtcdCluster, group: &str, n: usize) -> FakeMembers<'a> {
        let out = etcd.etcdctl(&["lease", "grant", "600"]).expect("a lease");
        // "lease 694d8b0a1c2e3f4a granted with TTL(600s)"
        let lease = out
            .split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("no lease id in {out:?}"))
            .to_string();
        FakeMembers {
            etcd,
            group: group.to_string(),
            lease,
            nodes: (0..n).map(|i| format!("fake-{i}")).collect(),
        }
    }

    fn report(&self, findings: &[&str]) {
        for node in &self.nodes {
            let value = serde_json::json!({"node": node, "findings": findings}).to_string();
            self.etcd
                .etcdctl(&[
                    "put",
                    &format!("--lease={}", self.lease),
                    &format!("/pleg-guard/{}/members/{node}", self.group),
                    &value,
                ])
                .expect("a fake member key");
        }
    }
}

/// The storm guard between real nodes: five members (written from outside) and one bed report
/// `logind-unresponsive` in a group of seven (more than max_unhealthy "20%"): the bed's logind
/// cure pauses (fleet-storm, once; status says so) while an affected bed's proven bus wedge
/// (exempt: `systemd-bus-wedge` is PID 1's own serial on that node) is still cured; the five
/// recover and the paused cure goes on (fleet-storm-over).
#[test]
fn a_storm_pauses_a_logind_cure_a_proven_bus_wedge_is_cured_and_the_pause_ends() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let Some(env) = require_affected_bed() else {
        return;
    };
    let group = "storm";
    let fakes = FakeMembers::new(&etcd, group, 5);
    fakes.report(&["logind-unresponsive"]);

    let sick = Bed::boot(&env, BedOptions::with_pleg_guard());
    let wedged = Bed::boot(&env, BedOptions::affected_with_pleg_guard());
    let mut bridges = Vec::new();
    for bed in [&sick, &wedged] {
        give_certificates(bed, &etcd);
        bridges.push(bridge(bed, &etcd));
        let node = bed.name.clone();
        bed.install_pleg_guard(&config_in(
            &etcd,
            group,
            &node,
            "\n[actions.daemon_reexec]\nwhen = \"always\"\nsettle = \"3s\"\n",
        ));
        bed.start_pleg_guard();
    }
    sick.resume_logind_on_reexec();
    sick.stop_logind();
    wedged.pid1_bus_object();
    // 6 serials left: pleg-guard's own probes use them up
    wedged.fast_forward_pid1_serial(0xFFFF_FFF9);

    let storm = sick.wait_event(
        "fleet-storm",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(60),
    );
    eprintln!("sick bed: {}", field(&storm, "MESSAGE").unwrap_or(""));
    // the proven wedge is cured meanwhile
    wedged.wait_reexec_cured(secs(60), secs(40));
    // before the wedge is proven its symptoms are not exempt and may pause too; once it is,
    // the cure goes on (fleet-storm-over says why)
    wedged.wait_event(
        "finding",
        &[("PLEG_GUARD_FINDING", "systemd-bus-wedge")],
        secs(5),
    );
    eprintln!(
        "wedged bed: {} fleet-storm, {} fleet-storm-over entries",
        wedged.pleg_guard_events("fleet-storm", &[]).len(),
        wedged.pleg_guard_events("fleet-storm-over", &[]).len()
    );
    let s = sick.status_json();
    assert_eq!(s["fleet"]["storm"]["storming"], true, "{}", s["fleet"]);
    assert_eq!(s["fleet"]["storm"]["paused"], true, "{}", s["fleet"]);
    assert!(
        sick.pleg_guard_events("action-started", &[("PLEG_GUARD_ACTION", "daemon-reexec")])
            .is_empty(),
        "the logind cure ran during the storm"
    );
    // the sick bed publishes what it acts on
    let key = format!("/pleg-guard/{group}/members/{}", sick.name);
    let member = etcd.get(&key).expect("etcdctl get").unwrap_or_default();
    assert!(member.contains("logind-unresponsive"), "{key}: {member}");

    let recovered = Instant::now();
    fakes.report(&[]);
    sick.wait_event(
        "fleet-storm-over",
        &[("PLEG_GUARD_ACTION", "daemon-reexec")],
        secs(30),
    );
    sick.wait_reexec_cured(secs(60), secs(30));
    eprintln!(
        "the paused logind cure succeeded {:?} after the other members recovered",
        recovered.elapsed()
    );
    assert_eq!(
        sick.pleg_guard_events("fleet-storm", &[]).len(),
        1,
        "fleet-storm logged once per pause"
    );
    drop(bridges);
}
