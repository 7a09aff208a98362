//! Property tests of every parser that reads input from outside the process: random and
//! mutated inputs must give a value or an error, never a panic (the release profile aborts
//! on panic) and never memory out of proportion to the input.
//!
//! Covered here: the systemd version parsers, the config loader, journal lines, docker's
//! JSON, the ledger file, status.json, `preempt_window` (with its arithmetic in odd time
//! zones) and what etcd answers the fleet module (holder, queue and member keys). The D-Bus
//! p2p reader's own properties are in `client::p2p`'s tests, the log line assembler's in
//! `client::log_lines`'s. Each property runs
//! [`CASES`] inputs (a few seconds in all, unoptimised).

use std::path::Path;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use crate::client::journal::follow as journal_follow;
use crate::config;
use crate::ledger::Ledger;
use crate::report::status_file::Snapshot;
use crate::systemd::version::{self, FixedBuild};
use crate::systemd::window::{State, Window};
use crate::target::ActionKind;

/// Inputs per property.
pub const CASES: u32 = 2_000;

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    }
}

/// Apply byte-level edits (overwrite, insert, delete) to `text`.
fn mutate(text: &[u8], edits: &[(prop::sample::Index, u8, u8)]) -> Vec<u8> {
    let mut m = text.to_vec();
    for (at, byte, op) in edits {
        if m.is_empty() {
            m.push(*byte);
            continue;
        }
        let i = at.index(m.len());
        match op % 3 {
            0 => m[i] = *byte,
            1 => m.insert(i, *byte),
            _ => {
                m.remove(i);
            }
        }
    }
    m
}

fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8, u8)>> {
    proptest::collection::vec(
        (any::<prop::sample::Index>(), any::<u8>(), any::<u8>()),
        1..8,
    )
}

/// Bytes a config or JSON mutation likes: structure characters, digits, units, quotes.
fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        any::<u8>(),
        prop::sample::select(b"[]{}\"'=.,:\n#-0123456789ymdhs \\".to_vec()),
    ]
}

const CONFIG: &str = include_str!("../packaging/config.toml");

const LEDGER: &str = r#"{"format":1,"next_id":3,"entries":[
 {"id":1,"action":"daemon-reexec","at":"2026-12-01T10:00:00Z","outcome":"succeeded","detail":"private socket","symptom":"cleared"},
 {"id":2,"action":"restart-kubelet","at":"2026-12-02T10:00:00Z","outcome":"started"},
 {"id":3,"action":"purge-dead-containers","at":"2026-12-02T11:00:00Z","outcome":"failed","detail":"x"}]}"#;

const CONTAINERS: &str = r#"[{"Id":"8dfafdbc3a40aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","Names":["/k8s_POD_x"],
 "Image":"pause:3.9","ImageID":"sha256:1","Command":"/pause","Created":1733150000,"Ports":[],
 "Labels":{"io.kubernetes.pod.name":"x"},"State":"dead","Status":"Dead","HostConfig":{"NetworkMode":"none"},
 "NetworkSettings":{"Networks":{}},"Mounts":[]},
 {"Id":"ab","Names":["/kubelet"],"State":"removing","Status":"Removal In Progress"}]"#;

const INSPECT: &str = r#"{"Id":"ab","Created":"2026-12-01T10:00:00.123456789Z","Path":"/pause","Args":[],
 "State":{"Status":"dead","Running":false,"Paused":false,"Restarting":false,"OOMKilled":false,"Dead":true,"Pid":0,"ExitCode":0,
 "Error":"","StartedAt":"2026-12-01T10:00:00Z","FinishedAt":"0001-01-01T00:00:00Z"},"Name":"/x","RestartCount":0}"#;

/// Random text: any character, with ASCII punctuation and digits made likely.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            any::<char>(),
            prop::sample::select(
                "[]{}()\"'=.,:~^+_-\n#0123456789 abcsvy"
                    .chars()
                    .collect::<Vec<_>>()
            ),
        ],
        0..max,
    )
    .prop_map(String::from_iter)
}

fn version_like() -> BoxedStrategy<String> {
    match proptest::string::string_regex(
        r"(systemd |v)?[0-9]{0,12}([.~^+:_-][0-9a-z]{0,6}){0,5}( \([0-9a-z.~_-]{0,20}\)?)?",
    ) {
        Ok(s) => s.boxed(),
        Err(_) => Just(String::new()).boxed(),
    }
}

/// Every operation on a ledger, for a ledger read from a file.
fn use_ledger(mut l: Ledger) {
    let now = &crate::clock::boot::Now::read();
    let actions = config::Config::default().actions;
    for a in ActionKind::ALL {
        let c = actions.of(a);
        let b = l.budget(a, c, now);
        let _ = serde_json::to_string(&b);
        let _ = l.check(a, c, now);
        let mut huge = c.clone();
        huge.min_interval = Duration::MAX;
        let _ = serde_json::to_string(&l.budget(a, &huge, now));
    }
    l.prune(now, crate::ledger::DAY * 2);
    let id = l.record_start(ActionKind::DaemonReexec, now);
    l.record_end(id, crate::ledger::RunOutcome::Succeeded, "x");
    // The same on the wall clock alone (entries of another boot, or no boot clock).
    let wall = &crate::clock::boot::Now::wall_only(now.wall);
    for a in ActionKind::ALL {
        let _ = l.check(a, actions.of(a), wall);
    }
    let _ = serde_json::to_string(&l);
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn version_parsers_never_panic(s in text(60), v in version_like()) {
        let fixed = FixedBuild::defaults();
        for input in [s.as_str(), v.as_str()] {
            let _ = version::parse_manager_version(input);
            let _ = version::parse_package_version(input);
            let _ = input.parse::<FixedBuild>();
            let (build, verdict) = version::identify(Some(input), Some(&v), &fixed);
            let _ = build.map(|b| b.to_string());
            let _ = verdict.reason();
        }
    }

    /// rpmvercmp is a consistent order: antisymmetric and reflexive.
    #[test]
    fn rpmvercmp_is_antisymmetric(a in version_like(), b in version_like()) {
        prop_assert_eq!(
            version::rpmvercmp(&a, &b),
            version::rpmvercmp(&b, &a).reverse()
        );
        prop_assert_eq!(version::rpmvercmp(&a, &a), std::cmp::Ordering::Equal);
    }

    #[test]
    fn config_loader_never_panics_on_random_text(s in text(80)) {
        let _ = config::parse_str(Path::new("/etc/pleg-guard/config.toml"), &s);
    }

    /// Any number with any unit, for every duration key: a config or an error naming the key.
    #[test]
    fn any_duration_value_is_a_config_or_a_named_error(
        key in prop::sample::select(vec![
            ("", "interval"), ("", "startup_grace"), ("probe", "timeout"), ("probe", "slow_after"),
            ("kubelet", "pleg_log_window"), ("actions.daemon_reexec", "min_interval"),
            ("actions.restart_kubelet", "settle"), ("actions.purge_dead_containers", "min_interval"),
        ]),
        n in prop_oneof![0u64..1000, any::<u64>()],
        unit in prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h", "d", "w", "M", "y", ""]),
    ) {
        let (table, name) = key;
        let text = if table.is_empty() {
            format!("{name} = \"{n}{unit}\"\n")
        } else {
            format!("[{table}]\n{name} = \"{n}{unit}\"\n")
        };
        match config::parse_str(Path::new("/c.toml"), &text) {
            Ok(c) => {
                prop_assert!(c.interval <= config::MAX_LOOP_DURATION);
                prop_assert!(c.actions.daemon_reexec.min_interval <= config::MAX_DURATION);
            }
            Err(e) => {
                let e = e.to_string();
                let full = if table.is_empty() { name.to_owned() } else { format!("{table}.{name}") };
                // Relations name both keys (`probe.timeout` must not exceed `interval`).
                prop_assert!(e.contains(&format!("`{full}`")) || e.contains("must not exceed"), "{}", e);
            }
        }
    }

    /// Any `preempt_window` text: a config, or an error naming the key.
    #[test]
    fn any_preempt_window_is_a_config_or_a_named_error(
        s in prop_oneof![
            text(14),
            (0u32..30, 0u32..70, 0u32..30, 0u32..70)
                .prop_map(|(a, b, c, d)| format!("{a:02}:{b:02}-{c:02}:{d:02}")),
        ],
    ) {
        let value = s.replace('\\', "\\\\").replace('"', "\\\"");
        let text = format!("[actions.daemon_reexec]\npreempt_window = \"{value}\"\n");
        match config::parse_str(Path::new("/c.toml"), &text) {
            Ok(c) => {
                if let Some(w) = c.actions.daemon_reexec_preempt.window {
                    prop_assert_eq!(w.to_string(), s);
                }
            }
            Err(e) => {
                // text TOML takes as a string (no control characters) is our value to judge
                let e = e.to_string();
                let plain = s.chars().all(|c| c == ' ' || c.is_ascii_graphic() || !c.is_control());
                prop_assert!(
                    !plain || e.contains("`actions.daemon_reexec.preempt_window`"),
                    "{}", e
                );
            }
        }
    }

    /// Any window at any instant of 2024-2030 in zones with odd DST rules (30 min in
    /// Lord Howe, +5:45 in Kathmandu, a skipped day in Apia in 2011 nearby): open until a later
    /// instant, or closed until an opening that is open.
    #[test]
    fn window_state_is_consistent_in_any_zone(
        a in 0u32..1440, b in 0u32..1440,
        secs in 1_704_067_200u64..1_924_992_000,
        zone in prop::sample::select(vec![
            "UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
            "Asia/Kathmandu", "Pacific/Apia", "America/Santiago",
        ]),
    ) {
        prop_assume!(a != b);
        let text = format!("{:02}:{:02}-{:02}:{:02}", a / 60, a % 60, b / 60, b % 60);
        let w: Window = text.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let tz = jiff::tz::TimeZone::get(zone)
            .map_err(|e| TestCaseError::fail(format!("{zone} not in the tz database: {e}")))?;
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        match w.state(at, &tz) {
            State::Open { closes } => prop_assert!(closes > at, "{} {} {:?}", text, zone, at),
            State::Closed { opens } => {
                let opens = opens.ok_or_else(|| TestCaseError::fail(format!("{text} never opens in {zone}")))?;
                prop_assert!(opens > at);
                prop_assert!(w.is_open(opens, &tz), "{} {} opens {:?} but is not open then", text, zone, opens);
            }
        }
        let next = w.next_opening(at, &tz)
            .ok_or_else(|| TestCaseError::fail(format!("{text} never opens in {zone}")))?;
        prop_assert!(next >= at && w.is_open(next, &tz));
    }

    #[test]
    fn journal_lines_never_panic(s in text(120), secs in any::<u64>(), frac in any::<u64>()) {
        let _ = journal_follow::parse_short_unix(&s);
        let line = format!("{secs}.{frac} host kubelet[1]: I1202 14:00:00.000000 1 kubelet.go:1829] skipping pod synchronization - PLEG is not healthy: {s}");
        if let Some(t) = journal_follow::parse_short_unix(&line) {
            let _ = crate::clock::time_format::rfc3339(t);
        }
        journal_follow::note_line_for_test(&line);
    }

    #[test]
    fn docker_json_never_panics(
        which in 0usize..2,
        e in proptest::collection::vec((any::<prop::sample::Index>(), interesting_byte(), any::<u8>()), 1..8),
    ) {
        if which == 0 {
            let m = mutate(CONTAINERS.as_bytes(), &e);
            if let Ok(list) = serde_json::from_slice::<Vec<bollard::models::ContainerSummary>>(&m) {
                for c in &list {
                    let _ = crate::client::docker::may_be_dead(c);
                    let r = crate::client::docker::container_ref(c);
                    prop_assert!(r.id.len() <= c.id.as_deref().map_or(1, str::len).max(1));
                }
            }
        } else {
            let m = mutate(INSPECT.as_bytes(), &e);
            let _ = serde_json::from_slice::<bollard::models::ContainerInspectResponse>(&m);
        }
    }

    #[test]
    fn ledger_files_never_panic(e in edits()) {
        let m = mutate(LEDGER.as_bytes(), &e);
        if let Ok(l) = serde_json::from_slice::<Ledger>(&m) {
            use_ledger(l);
        }
    }

    /// What etcd hands the fleet module from other writers (holder, queue and member keys:
    /// any writer may write a member key) is read, counted and decided on without a panic,
    /// whatever the key, value, revisions, lease or budget.
    #[test]
    fn a_groups_etcd_answers_never_panic(
        e in edits(),
        which in 0..3u8,
        key in proptest::collection::vec(any::<u8>(), 0..40),
        index in any::<u16>(),
        revisions in (any::<i64>(), any::<i64>(), any::<i64>()),
        ahead in 0..64usize,
        max in (any::<u32>(), any::<u8>()),
    ) {
        use crate::fleet::backend::etcd::group::{Head, Held, Keys, MemberFindings, RawKv, Snapshot};
        use crate::fleet::storm::{Health, MaxUnhealthy};
        use crate::fleet::MaxDisruptive;
        let keys = Keys::new("/pleg-guard/g");
        let sample = [HOLDER, QUEUED, MEMBER][usize::from(which)];
        let value = mutate(sample.as_bytes(), &e);
        let (create_revision, mod_revision, lease) = revisions;
        let holder_key = format!("{}{index:06}", keys.holders());
        let mut holders = Vec::new();
        for k in [key.as_slice(), holder_key.as_bytes()] {
            let kv = RawKv { key: k, value: &value, create_revision, mod_revision, lease };
            holders.extend(Held::parse(&keys, kv));
            let _ = Head::of(kv);
        }
        let _ = MemberFindings::parse(&value);
        let node = String::from_utf8_lossy(&key).into_owned();
        let health = Health::of([(node.as_str(), value.as_slice())], &["systemd-bus-wedge".to_owned()]);
        let _ = health.storming(MaxUnhealthy::Percent(max.1.min(100)));
        let _ = health.storming(MaxUnhealthy::Count(max.0));
        let snapshot = Snapshot {
            revision: mod_revision,
            members: usize::from(max.1),
            holders,
            waiting: ahead,
            ahead,
            ..Snapshot::default()
        };
        let budget = match std::num::NonZeroU32::new(max.0) {
            Some(n) => MaxDisruptive::Count(n),
            None => MaxDisruptive::Percent(max.1.clamp(1, 100)),
        };
        let _ = snapshot.next(budget);
        let _ = snapshot.held_by(&node, lease);
    }

    #[test]
    fn status_files_never_panic(e in edits(), with_actions in any::<bool>()) {
        let snapshot = serde_json::to_vec(&sample_snapshot()).unwrap_or_default();
        let m = mutate(&snapshot, &e);
        if let Ok(s) = serde_json::from_slice::<Snapshot>(&m) {
            let _ = crate::report::table::render(&s, with_actions);
        }
    }
}

proptest! {
    // Each case parses the whole shipped config (~100 lines): fewer cases.
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn config_loader_never_panics_on_mutated_configs(
        e in proptest::collection::vec((any::<prop::sample::Index>(), interesting_byte(), any::<u8>()), 1..8),
        uncomment in any::<bool>(),
    ) {
        // The shipped file with its commented defaults switched on: every key present.
        let base: String = if uncomment {
            CONFIG.lines().map(|l| l.strip_prefix('#').filter(|r| !r.starts_with([' ', '#']) && !r.is_empty()).unwrap_or(l)).collect::<Vec<_>>().join("\n")
        } else {
            CONFIG.to_owned()
        };
        let m = mutate(base.as_bytes(), &e);
        let text = String::from_utf8_lossy(&m);
        if let Err(err) = config::parse_str(Path::new("/etc/pleg-guard/config.toml"), &text) {
            prop_assert!(!err.to_string().is_empty());
        }
    }

}

/// A holder key's value as a node writes it (the fleet property above mutates it).
const HOLDER: &str = r#"{"node":"n1","action":"daemon-reexec","urgency":"emergency","since":"2026-12-06T03:00:00Z","granted_at":"2026-12-06T03:00:01Z"}"#;
/// A queue key's value.
const QUEUED: &str = r#"{"node":"n2","action":"restart-kubelet","urgency":"planned","since":"2026-12-06T03:00:00Z"}"#;
/// A member key's value as the contract lets any writer write it.
const MEMBER: &str = r#"{"node":"n3","since":"2026-12-06T03:00:00Z","version":"0.1.0","findings":["logind-unresponsive","systemd-bus-wedge"]}"#;

fn sample_snapshot() -> serde_json::Value {
    serde_json::json!({
        "pleg_guard_version": "0.1.0", "pid": 42, "mode": "repair", "healthy": false,
        "state": "degraded", "summary": "x", "updated_at": "2026-12-02T10:00:00Z",
        "interval_ms": 10000, "systemd": {"version": "219", "affected": true, "reason": "r"},
        "targets": {}, "findings": [], "actions": [
            {"action": "daemon-reexec", "at": "2026-12-02T10:00:00Z", "outcome": "succeeded", "detail": "d"}],
        "budget": {"daemon-reexec": {"enabled": true, "remaining": 2, "max_per_day": 3,
            "next_allowed_at": "9999-12-31T23:59:59Z"}}
    })
}

/// The sample itself must parse, or the status property tests nothing.
#[test]
fn the_status_sample_parses() {
    let s: Result<Snapshot, _> = serde_json::from_value(sample_snapshot());
    assert!(s.is_ok(), "{s:?}");
    let l: Result<Ledger, _> = serde_json::from_str(LEDGER);
    assert!(l.is_ok(), "{l:?}");
    let c: Result<Vec<bollard::models::ContainerSummary>, _> = serde_json::from_str(CONTAINERS);
    assert!(c.is_ok(), "{c:?}");
    let i: Result<bollard::models::ContainerInspectResponse, _> = serde_json::from_str(INSPECT);
    assert!(i.is_ok(), "{i:?}");
}

/// Deeply nested TOML must be an error (or a value), not a stack overflow: a stack overflow
/// aborts the process whatever the panic strategy.
#[test]
fn deeply_nested_config_is_an_error() {
    for depth in [1_000usize, 100_000] {
        let text = format!("interval = {}{}\n", "[".repeat(depth), "]".repeat(depth));
        assert!(config::parse_str(Path::new("/c.toml"), &text).is_err());
        let text = format!("interval = {}1{}\n", "{a=".repeat(depth), "}".repeat(depth));
        assert!(config::parse_str(Path::new("/c.toml"), &text).is_err());
    }
}

/// Deeply nested JSON in the ledger file is refused by serde_json's recursion limit.
#[test]
fn deeply_nested_ledger_is_an_error() {
    let text = format!(
        "{{\"entries\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(serde_json::from_str::<Ledger>(&text).is_err());
}

/// The fleet property's samples are what the fleet module reads, unmutated: a holder, a
/// waiter that can be handed a slot, a member reporting two findings (one of them exempt).
#[test]
fn the_fleet_samples_parse() {
    use crate::fleet::backend::etcd::group::{Head, Held, Keys, MemberFindings, RawKv};
    let keys = Keys::new("/pleg-guard/g");
    let key = format!("{}000003", keys.holders());
    let kv = |value: &'static str| RawKv {
        key: key.as_bytes(),
        value: value.as_bytes(),
        create_revision: 7,
        mod_revision: 9,
        lease: 42,
    };
    let held = Held::parse(&keys, kv(HOLDER));
    assert_eq!(held.as_ref().map(|h| h.index), Some(3));
    assert!(held.is_some_and(|h| h.value.is_some()));
    assert!(Head::of(kv(QUEUED)).is_some());
    assert_eq!(MemberFindings::parse(MEMBER.as_bytes()).findings.len(), 2);
}
