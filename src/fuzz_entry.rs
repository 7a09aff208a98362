//! Entry points for the coverage-guided fuzz targets under `fuzz/` (built only with the
//! `fuzzing` feature, which nothing but `fuzz/` turns on): each takes raw bytes from the
//! fuzzer and runs one parser of outside input the way pleg-guard does, then uses what came
//! out. A panic (or a sanitizer report) here is a bug: bad input must be an error.

use std::path::Path;

/// The private-socket D-Bus reader (`client::p2p`): framing, header fields, reply bodies.
pub fn p2p_message(data: &[u8]) {
    crate::client::p2p::fuzz_message(data);
}

/// docker's answers: a container list, an inspect, a multiplexed log stream.
pub fn docker_answers(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            if let Ok(list) = serde_json::from_slice::<Vec<bollard::models::ContainerSummary>>(rest)
            {
                for c in &list {
                    let _ = crate::client::docker::may_be_dead(c);
                    let _ = crate::client::docker::container_ref(c);
                }
            }
        }
        1 => {
            let _ = serde_json::from_slice::<bollard::models::ContainerInspectResponse>(rest);
        }
        _ => {
            // frames: [stream][len] then that many bytes, as the engine sends them
            let mut scan =
                crate::client::docker::LogScan::new(crate::client::kubelet_log::is_pleg_complaint);
            let mut at = rest;
            while let Some((&stream, more)) = at.split_first() {
                let Some((&len, more)) = more.split_first() else {
                    break;
                };
                let (frame, more) = more.split_at(usize::from(len).min(more.len()));
                let message = frame.to_vec().into();
                let out = match stream % 3 {
                    0 => bollard::container::LogOutput::StdOut { message },
                    1 => bollard::container::LogOutput::StdErr { message },
                    _ => bollard::container::LogOutput::Console { message },
                };
                scan.push(&out);
                at = more;
            }
            let _ = scan.finish();
        }
    }
}

/// A CRI runtime's answers (protobuf), decoded and turned into the relist's facts.
pub fn cri_answers(data: &[u8]) {
    crate::client::cri::fuzz_answers(data);
}

/// Journal output as the readers get it: chunks joined into lines, each line's short-unix
/// prefix and stamp, and whether it is kubelet's PLEG complaint.
pub fn journal_lines(data: &[u8]) {
    let mut lines = crate::client::log_lines::LineAssembler::new();
    let mut last =
        crate::client::log_lines::LastMatch::new(crate::client::kubelet_log::is_pleg_complaint);
    let each = |line: &str, last: &mut crate::client::log_lines::LastMatch| {
        last.note(line);
        let _ = crate::client::journal::follow::parse_short_unix(line);
        if let Some(message) = crate::client::kubelet_log::short_unix_message(line) {
            let _ = crate::client::kubelet_log::pleg_complaint(message);
        }
    };
    for chunk in data.chunks(97) {
        lines.push(chunk, |l| each(l, &mut last));
    }
    lines.finish(|l| each(l, &mut last));
    let _ = last.into_last();
}

/// The files pleg-guard reads back: the ledger, status.json, an NPD cursor.
pub fn state_files(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            if let Ok(ledger) = crate::npd::events::parse_ledger(rest) {
                let now = crate::clock::boot::Now::read();
                let actions = crate::config::Config::default().actions;
                for a in crate::target::ActionKind::ALL {
                    let c = actions.of(a);
                    let _ = ledger.budget(a, c, &now);
                    let _ = ledger.check(a, c, &now);
                }
                for (rule, _) in crate::npd::events::Temporary::ALL {
                    let _ = crate::npd::events::report(
                        rule,
                        Some(&ledger),
                        &crate::npd::events::Cursor::default(),
                    );
                }
                let _ = serde_json::to_vec(&ledger);
            }
        }
        1 => {
            if let Ok(s) = serde_json::from_slice::<crate::report::status_file::Snapshot>(rest) {
                let _ = crate::report::table::render(&s, true);
                let _ = serde_json::to_vec(&s);
            }
        }
        _ => {
            if let Ok(cursor) = crate::npd::events::parse_cursor(rest) {
                for (rule, _) in crate::npd::events::Temporary::ALL {
                    let _ = crate::npd::events::report(rule, None, &cursor);
                }
            }
        }
    }
}

/// A configuration file's text (validated as `check-config` does, drop-ins aside).
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = crate::config::parse_str(Path::new("/etc/pleg-guard/config.toml"), &text) {
        let _ = c.metrics.warnings();
        let _ = c.fleet.secret_file_warnings();
        let _ =
            crate::fleet::FleetSettings::from_config(&c.fleet, std::time::Duration::from_secs(1));
    }
}

/// What etcd hands the fleet module from other writers: the first byte picks a key kind
/// (holder, queue, member), the next eight the revisions and lease, the rest is the value.
/// It is parsed, counted by the storm guard and decided on as a waiter would.
pub fn fleet_answers(data: &[u8]) {
    use crate::fleet::backend::etcd::group::{Head, Held, Keys, MemberFindings, RawKv, Snapshot};
    use crate::fleet::storm::{Health, MaxUnhealthy};
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let (head, value) = rest.split_at(rest.len().min(8));
    let n = |i: usize| i64::from(head.get(i).copied().unwrap_or(0));
    let keys = Keys::new("/pleg-guard/g");
    let key = match which % 3 {
        0 => format!("{}{:06}", keys.holders(), which / 3),
        1 => keys.queued(crate::fleet::Urgency::Planned, "n"),
        _ => keys.member("n"),
    };
    let kv = RawKv {
        key: key.as_bytes(),
        value,
        create_revision: n(0) - 128,
        mod_revision: n(1) - 128,
        lease: n(2) - 128,
    };
    let holders: Vec<Held> = Held::parse(&keys, kv).into_iter().collect();
    let _ = Head::of(kv);
    let _ = MemberFindings::parse(value);
    let health = Health::of([("n", value)], &["systemd-bus-wedge".to_owned()]);
    let _ = health.storming(MaxUnhealthy::Percent(head.get(3).copied().unwrap_or(20)));
    let _ = health.storming(MaxUnhealthy::Count(u32::from(
        head.get(4).copied().unwrap_or(0),
    )));
    let snapshot = Snapshot {
        members: usize::from(head.get(5).copied().unwrap_or(0)),
        ahead: usize::from(head.get(6).copied().unwrap_or(0)),
        holders,
        ..Snapshot::default()
    };
    let max = std::num::NonZeroU32::new(u32::from(head.get(7).copied().unwrap_or(1))).map_or(
        crate::fleet::MaxDisruptive::Percent(20),
        crate::fleet::MaxDisruptive::Count,
    );
    let _ = snapshot.next(max);
}
