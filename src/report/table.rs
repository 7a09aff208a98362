//! The human-readable report of `diagnose` and `status`: a compact table of targets, then
//! findings with their explanation and remedy, then actions and budgets.

use std::fmt::Write;
use std::time::SystemTime;

use super::status_file::Snapshot;
use crate::diagnosis::{FindingId, Severity};

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
        }
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

fn rfc3339(t: SystemTime) -> String {
    crate::report::time_format::rfc3339(t)
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
