//! The human-readable report of `diagnose` and `status`: a compact table of targets, then
//! findings with their explanation and remedy, then actions and budgets.

use std::fmt::Write;
use std::time::SystemTime;

use super::status_file::{FleetStatus, Snapshot};
use crate::diagnosis::{FindingId, Severity};
use crate::target::{ContainerRef, Target};

/// How many containers a finding lists in the table; `--json` has them all.
const NAMED_AT_MOST: usize = 20;

/// Print a snapshot to stdout: as JSON, or as the table. `Err` when it cannot be serialised.
pub fn print(s: &Snapshot, json: bool, with_actions: bool) -> Result<(), serde_json::Error> {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
    } else {
        print!("{}", render(s, with_actions));
    }
    Ok(())
}

/// Render a snapshot for a terminal.
pub fn render(s: &Snapshot, with_actions: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: {}", s.state.name(), s.summary);
    let _ = writeln!(
        out,
        "systemd: {}{}",
        if s.systemd.affected {
            "AFFECTED by the bus bug: "
        } else {
            ""
        },
        s.systemd.reason
    );
    if let Some(summary) = &s.systemd.bus_serial_summary {
        let _ = writeln!(out, "bus: PID 1's {summary}");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<10} {:<13} {:>9}  DETAIL",
        "TARGET", "STATE", "LATENCY"
    );
    let ordered = crate::target::Target::ALL
        .iter()
        .filter_map(|t| s.targets.get(t.name()).map(|o| (t.name(), o)));
    for (name, o) in ordered {
        let latency = if o.state == crate::target::TargetState::Absent {
            "-".to_owned()
        } else {
            format!("{}ms", o.latency.as_millis())
        };
        let _ = writeln!(
            out,
            "{:<10} {:<13} {:>9}  {}",
            name,
            o.state.name(),
            latency,
            o.detail
        );
    }
    let _ = writeln!(out);
    if s.findings.is_empty() {
        let _ = writeln!(out, "findings: none");
    } else {
        let _ = writeln!(out, "findings:");
        for f in &s.findings {
            let tag = match f.severity {
                Severity::Problem => "PROBLEM",
                Severity::Warning => "warning",
            };
            let _ = writeln!(
                out,
                "  {tag} {} (since {}, {})",
                f.id,
                rfc3339(f.since),
                ago(f.since)
            );
            let _ = writeln!(out, "    seen:   {}", f.detail);
            let _ = writeln!(out, "    means:  {}", f.id.explanation());
            let _ = writeln!(out, "    remedy: {}", FindingId::remedy(f.id));
            write_named(&mut out, s, f.id);
        }
    }
    if let Some(f) = &s.fleet {
        let _ = writeln!(out);
        render_fleet(&mut out, f);
    }
    if with_actions {
        let _ = writeln!(out);
        if s.actions.is_empty() {
            let _ = writeln!(out, "recent actions: none");
        } else {
            let _ = writeln!(out, "recent actions:");
            for a in &s.actions {
                let symptom = a
                    .symptom
                    .as_deref()
                    .map(|x| format!(", symptom {x}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {} {} {}{}: {}",
                    rfc3339(a.at),
                    a.action,
                    a.outcome,
                    symptom,
                    a.detail
                );
            }
        }
        let _ = writeln!(out, "budget (rolling 24 h):");
        for (name, b) in &s.budget {
            let next = match b.budget.next_allowed_at {
                Some(t) if t > SystemTime::now() => format!("next run allowed at {}", rfc3339(t)),
                _ => "may run now".to_owned(),
            };
            let enabled = if b.enabled { "" } else { " (disabled)" };
            let _ = writeln!(
                out,
                "  {name:<22} {}/{} left, {next}{enabled}",
                b.budget.remaining, b.budget.max_per_day
            );
        }
    }
    out
}

/// The fleet budget: the group, its slots and holders, this node's part.
fn render_fleet(out: &mut String, f: &FleetStatus) {
    let known = |n: Option<usize>| n.map_or_else(|| "?".to_owned(), |n| n.to_string());
    let etcd = if f.reachable {
        "etcd reachable".to_owned()
    } else {
        format!(
            "etcd UNREACHABLE: {}",
            f.last_error.as_deref().unwrap_or("no answer yet")
        )
    };
    let _ = writeln!(
        out,
        "fleet: group {}, {} members alive, {} of {} slots held (max_disruptive \"{}\"), {} waiting; {etcd}",
        f.group,
        known(f.members_alive),
        f.holders.len(),
        known(f.max_disruptive),
        f.max_disruptive_setting,
        f.waiting
    );
    for h in &f.holders {
        if let Some(key) = &h.stray_key {
            let _ = writeln!(out, "  {}", crate::fleet::stray_holder_line(key));
            continue;
        }
        let _ = writeln!(
            out,
            "  holder {} {} since {} ({})",
            h.node,
            h.action,
            rfc3339(h.since),
            ago(h.since)
        );
    }
    let n = &f.this_node;
    let mut line = format!("  this node ({}): {}", f.node, n.state);
    if let Some(a) = &n.action {
        let _ = write!(line, " for {a}");
    }
    if let Some(w) = n.wait_s {
        let _ = write!(
            line,
            ", waiting {}",
            humantime::format_duration(std::time::Duration::from_secs(w))
        );
    }
    if let Some(p) = n.position {
        let _ = write!(line, ", {p} ahead");
    }
    if let Some(r) = &n.reason {
        let _ = write!(line, ": {r}");
    }
    let _ = writeln!(out, "{line}");
    if let Some(s) = &f.storm {
        let members = s.members.map_or_else(|| "?".to_owned(), |m| m.to_string());
        let verdict = match s.storming {
            None => "not read (read only while this node needs a disruptive repair)".to_owned(),
            Some(true) => format!(
                "STORM: {} of {members} members report findings ({}){}",
                s.unhealthy.len(),
                s.unhealthy.join(", "),
                if s.paused {
                    "; this node's repair is paused"
                } else {
                    ""
                }
            ),
            Some(false) => format!(
                "calm: {} of {members} members report findings",
                s.unhealthy.len()
            ),
        };
        let _ = writeln!(
            out,
            "  storm guard (max_unhealthy \"{}\"): {verdict}",
            s.max_unhealthy
        );
    }
    if f.reachable {
        if let Some(e) = &f.last_error {
            let _ = writeln!(out, "  last etcd error: {e}");
        }
    }
}

/// The containers (and pod sandboxes) behind a finding that is about them, from the target's
/// latest observation: kind and reference.
fn named(s: &Snapshot, id: FindingId) -> Vec<(&'static str, &ContainerRef)> {
    let facts = |t: Target| s.targets.get(t.name()).map(|o| &o.facts);
    match id {
        FindingId::CriUnknownContainers => facts(Target::Containerd)
            .map(|f| {
                let containers = f.unknown_containers.iter().map(|c| ("container", c));
                let sandboxes = f.unknown_sandboxes.iter().map(|c| ("pod sandbox", c));
                containers.chain(sandboxes).collect()
            })
            .unwrap_or_default(),
        FindingId::DeadContainers => facts(Target::Docker)
            .map(|f| f.dead_containers.iter().map(|c| ("container", c)).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// One line per container behind the finding (id, then name), at most [`NAMED_AT_MOST`].
fn write_named(out: &mut String, s: &Snapshot, id: FindingId) {
    let list = named(s, id);
    if list.is_empty() {
        return;
    }
    let _ = writeln!(out, "    names:");
    for (kind, c) in list.iter().take(NAMED_AT_MOST) {
        let _ = writeln!(out, "      {kind:<11} {:<12}  {}", c.id, c.name);
    }
    if list.len() > NAMED_AT_MOST {
        let _ = writeln!(
            out,
            "      … and {} more (--json lists them all)",
            list.len() - NAMED_AT_MOST
        );
    }
}

fn rfc3339(t: SystemTime) -> String {
    crate::clock::time_format::rfc3339(t)
}

fn ago(t: SystemTime) -> String {
    match SystemTime::now().duration_since(t) {
        Ok(d) => format!(
            "{} ago",
            humantime::format_duration(std::time::Duration::from_secs(d.as_secs()))
        ),
        Err(_) => "just now".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::status_file::{FleetHolder, FleetNodeStatus};

    /// Group pool-a: one slot, held by `holder`; node-b waits, 1 ahead.
    fn pool_a_with(holder: FleetHolder) -> FleetStatus {
        FleetStatus {
            group: "pool-a".into(),
            node: "node-b".into(),
            max_disruptive_setting: "1".into(),
            max_disruptive: Some(1),
            members_alive: Some(3),
            holders: vec![holder],
            waiting: 2,
            reachable: true,
            last_error: None,
            this_node: FleetNodeStatus {
                state: "waiting".into(),
                action: Some("restart-kubelet".into()),
                wait_s: Some(70),
                position: Some(1),
                reason: None,
            },
            storm: None,
        }
    }

    #[test]
    fn the_fleet_section_names_group_holders_and_this_nodes_wait() {
        let mut f = pool_a_with(FleetHolder {
            node: "node-a".into(),
            action: "restart-kubelet".into(),
            since: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_000_000),
            stray_key: None,
        });
        let mut out = String::new();
        render_fleet(&mut out, &f);
        assert!(
            out.starts_with("fleet: group pool-a, 3 members alive, 1 of 1 slots held (max_disruptive \"1\"), 2 waiting; etcd reachable\n"),
            "{out}"
        );
        assert!(
            out.contains("  holder node-a restart-kubelet since 2025-11-24T16:00:00Z ("),
            "{out}"
        );
        assert!(
            out.contains(
                "  this node (node-b): waiting for restart-kubelet, waiting 1m 10s, 1 ahead\n"
            ),
            "{out}"
        );
        f.reachable = false;
        f.last_error = Some("no quorum".into());
        f.members_alive = None;
        let mut out = String::new();
        render_fleet(&mut out, &f);
        assert!(
            out.contains("? members alive") && out.contains("etcd UNREACHABLE: no quorum"),
            "{out}"
        );
    }

    /// A key under `holders/` that no pleg-guard of this version wrote blocks every grant:
    /// status names it, so that an operator knows what to delete.
    #[test]
    fn a_stray_holder_key_is_named_with_what_it_does() {
        let f = pool_a_with(FleetHolder {
            node: "?".into(),
            action: "?".into(),
            since: SystemTime::UNIX_EPOCH,
            stray_key: Some("/pleg-guard/pool-a/holders/lock".into()),
        });
        let mut out = String::new();
        render_fleet(&mut out, &f);
        assert!(
            out.contains(
                "  holder ? at /pleg-guard/pool-a/holders/lock: no slot of this version; every grant waits until it is deleted\n"
            ),
            "{out}"
        );
        let json = serde_json::to_value(&f.holders[0]).unwrap_or_default();
        assert_eq!(json["stray_key"], "/pleg-guard/pool-a/holders/lock");
        let slot = FleetHolder {
            stray_key: None,
            ..f.holders[0].clone()
        };
        let json = serde_json::to_value(&slot).unwrap_or_default();
        assert!(json.get("stray_key").is_none(), "absent for a slot: {json}");
    }

    fn snapshot(containerd_facts: serde_json::Value, finding: &str) -> Snapshot {
        let value = serde_json::json!({
            "pleg_guard_version": "0.1.0", "pid": null, "mode": "observe", "healthy": true,
            "state": "healthy", "summary": "s", "updated_at": "2026-12-02T10:00:00Z",
            "interval_ms": 10000,
            "systemd": {"version": "252", "affected": false, "reason": "r"},
            "targets": {"containerd": {"target": "containerd", "state": "ok",
                "latency_ms": 3, "detail": "containerd 1.6.20", "facts": containerd_facts}},
            "findings": [{"id": finding, "since": "2026-12-02T10:00:00Z",
                "severity": "warning", "detail": "d", "target": "containerd"}],
            "actions": [], "budget": {}
        });
        match serde_json::from_value(value) {
            Ok(s) => s,
            Err(e) => panic!("sample snapshot: {e}"),
        }
    }

    #[test]
    fn cri_unknown_containers_are_named_one_per_line() {
        let s = snapshot(
            serde_json::json!({
                "unknown_containers": [
                    {"id": "0123456789ab", "name": "prod/web-1/app"},
                    {"id": "ba9876543210", "name": "kube-system/dns/coredns"}],
                "unknown_sandboxes": [{"id": "aaaabbbbcccc", "name": "prod/web-1"}]
            }),
            "cri-unknown-containers",
        );
        let text = render(&s, false);
        let expected = "    names:\n      \
                        container   0123456789ab  prod/web-1/app\n      \
                        container   ba9876543210  kube-system/dns/coredns\n      \
                        pod sandbox aaaabbbbcccc  prod/web-1\n";
        assert!(text.contains(expected), "{text}");
        // The block stands under its finding, after the remedy.
        let remedy = text.find("    remedy: ").unwrap_or(usize::MAX);
        let names = text.find("    names:").unwrap_or(0);
        assert!(remedy < names, "{text}");
    }

    #[test]
    fn a_long_list_is_cut_with_a_count() {
        let many: Vec<serde_json::Value> = (0..25)
            .map(|i| serde_json::json!({"id": format!("{i:012}"), "name": format!("c{i}")}))
            .collect();
        let s = snapshot(
            serde_json::json!({ "unknown_containers": many }),
            "cri-unknown-containers",
        );
        let text = render(&s, false);
        assert!(
            text.contains("      container   000000000019  c19\n"),
            "{text}"
        );
        assert!(!text.contains("c20"), "{text}");
        assert!(
            text.contains("      … and 5 more (--json lists them all)\n"),
            "{text}"
        );
    }

    #[test]
    fn findings_about_no_container_list_none() {
        let s = snapshot(serde_json::json!({}), "cri-unknown-containers");
        assert!(!render(&s, false).contains("names:"));
        let s = snapshot(
            serde_json::json!({"unknown_containers": [{"id": "0123456789ab", "name": "x"}]}),
            "containerd-unresponsive",
        );
        assert!(!render(&s, false).contains("names:"));
    }
}
