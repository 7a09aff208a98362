//! The shipped node-problem-detector monitor config (packaging/npd/pleg-guard-monitor.json)
//! is one NPD's custom plugin monitor accepts (the fields and checks of NPD's
//! pkg/custompluginmonitor/types/config.go) and one pleg-guard answers: every rule runs a
//! binary the packages install, with a condition or rule `pleg-guard npd-check` knows.

use std::path::PathBuf;
use std::time::Duration;

use pleg_guard::npd::Condition;
use pleg_guard::npd::events::Temporary;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn shipped() -> Value {
    let path = repo().join("packaging/npd/pleg-guard-monitor.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Go's `time.ParseDuration`: an optional sign, then one or more decimal numbers each with a
/// unit (ns, us, µs, ms, s, m, h); "0" alone is allowed.
fn go_duration(s: &str) -> Option<Duration> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return None; // a negative timeout or interval is no use to NPD
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(n);
        if num.is_empty() || num == "." {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        let u = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(u);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = tail;
    }
    Some(Duration::from_secs_f64(total))
}

#[test]
fn go_duration_parses_as_go_does() {
    assert_eq!(go_duration("30s"), Some(Duration::from_secs(30)));
    assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
    assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(go_duration("0"), Some(Duration::ZERO));
    for bad in ["", "30", "5 s", "1d", "s", "-1s"] {
        assert_eq!(go_duration(bad), None, "{bad:?}");
    }
}

fn str_field<'a>(v: &'a Value, key: &str, at: &str) -> &'a str {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{at}.{key}: missing or not a string"))
}

/// Every file the .deb and the .rpm install, from Cargo.toml's asset lists.
fn installed() -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap_or_default();
    let cargo: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("Cargo.toml: {e}"));
    let meta = &cargo["package"]["metadata"];
    let deb: Vec<String> = meta["deb"]["assets"]
        .as_array()
        .unwrap_or_else(|| panic!("no deb assets"))
        .iter()
        .map(|a| {
            let src = a[0].as_str().unwrap_or_default();
            let dest = a[1].as_str().unwrap_or_default();
            let name = src.rsplit('/').next().unwrap_or_default();
            let dest = if dest.ends_with('/') {
                format!("{dest}{name}")
            } else {
                dest.to_owned()
            };
            format!("/{}", dest.trim_start_matches('/'))
        })
        .collect();
    let rpm: Vec<String> = meta["generate-rpm"]["assets"]
        .as_array()
        .unwrap_or_else(|| panic!("no rpm assets"))
        .iter()
        .map(|a| a["dest"].as_str().unwrap_or_default().to_owned())
        .collect();
    (deb, rpm)
}

#[test]
fn the_monitor_config_is_shipped_at_the_contract_path_by_both_packages() {
    let (deb, rpm) = installed();
    let path = "/usr/share/pleg-guard/npd/pleg-guard-monitor.json";
    assert!(deb.iter().any(|d| d == path), "deb lacks {path}: {deb:?}");
    assert!(rpm.iter().any(|d| d == path), "rpm lacks {path}: {rpm:?}");
}

#[test]
fn the_shipped_monitor_config_is_one_npd_accepts_and_pleg_guard_answers() {
    let v = shipped();
    assert_eq!(
        str_field(&v, "plugin", ""),
        "custom",
        "NPD knows only \"custom\""
    );
    assert!(!str_field(&v, "source", "").is_empty());
    assert!(
        v["metricsReporting"].is_boolean(),
        "metricsReporting: a bool"
    );

    let pc = &v["pluginConfig"];
    let interval = go_duration(str_field(pc, "invoke_interval", "pluginConfig"))
        .unwrap_or_else(|| panic!("invoke_interval: not a Go duration"));
    let global = go_duration(str_field(pc, "timeout", "pluginConfig"))
        .unwrap_or_else(|| panic!("timeout: not a Go duration"));
    assert!(
        global > Duration::ZERO && global <= interval,
        "timeout {global:?} vs interval {interval:?}"
    );
    let max_output = pc["max_output_length"]
        .as_u64()
        .unwrap_or_else(|| panic!("max_output_length: an integer"));
    assert!(
        max_output >= pleg_guard::npd::MAX_MESSAGE as u64,
        "NPD would cut npd-check's messages"
    );
    assert!(
        pc["concurrency"].as_u64().is_some_and(|c| c >= 1),
        "concurrency: a positive integer"
    );
    assert!(pc["enable_message_change_based_condition_update"].is_boolean());

    let conditions = v["conditions"]
        .as_array()
        .unwrap_or_else(|| panic!("conditions[]"));
    let mut declared = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let at = format!("conditions[{i}]");
        let t = str_field(c, "type", &at);
        str_field(c, "reason", &at);
        str_field(c, "message", &at);
        assert!(!declared.contains(&t), "{t} declared twice");
        declared.push(t);
    }
    // Every contract condition is declared.
    for (_, name) in Condition::ALL {
        assert!(declared.contains(&name), "{name} is not declared");
    }

    let (deb, rpm) = installed();
    let rules = v["rules"].as_array().unwrap_or_else(|| panic!("rules[]"));
    let mut permanent = Vec::new();
    let mut temporary = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        let kind = str_field(r, "type", &at);
        let reason = str_field(r, "reason", &at);
        assert!(!reason.is_empty(), "{at}: empty reason");
        let path = str_field(r, "path", &at);
        assert!(
            deb.iter().any(|d| d == path) && rpm.iter().any(|d| d == path),
            "{at}: {path} is not installed by both packages"
        );
        if let Some(t) = r.get("timeout") {
            let t = t.as_str().and_then(go_duration);
            let t = t.unwrap_or_else(|| panic!("{at}.timeout: not a Go duration"));
            assert!(
                t <= global,
                "{at}: NPD refuses a rule timeout above the global one"
            );
        }
        let args: Vec<&str> = r["args"]
            .as_array()
            .unwrap_or_else(|| panic!("{at}.args: an array"))
            .iter()
            .map(|a| a.as_str().unwrap_or_else(|| panic!("{at}.args: strings")))
            .collect();
        assert_eq!(args.first(), Some(&"npd-check"), "{at}: runs npd-check");
        assert_eq!(args.len(), 2, "{at}: npd-check CONDITION");
        let arg = args[1];
        match kind {
            "permanent" => {
                let cond = str_field(r, "condition", &at);
                assert!(
                    declared.contains(&cond),
                    "{at}: {cond} has no default condition"
                );
                assert_eq!(arg, cond, "{at}: asks npd-check about its own condition");
                assert!(
                    Condition::from_name(arg).is_some(),
                    "{at}: npd-check does not know {arg}"
                );
                permanent.push(cond);
            }
            "temporary" => {
                assert!(
                    r.get("condition").is_none(),
                    "{at}: a temporary rule has no condition"
                );
                assert!(
                    Temporary::from_name(arg).is_some(),
                    "{at}: npd-check does not know {arg}"
                );
                assert_eq!(arg, reason, "{at}: the Event's reason is the rule's name");
                temporary.push(arg);
            }
            other => panic!("{at}: type {other:?} is neither permanent nor temporary"),
        }
    }
    for name in &declared {
        assert!(
            permanent.contains(name),
            "{name} is declared but no rule sets it"
        );
    }
    for (_, name) in Temporary::ALL {
        assert!(temporary.contains(&name), "no temporary rule for {name}");
    }
}

/// The alert rules on NPD's metrics pass `promtool check rules` and their unit tests.
#[test]
fn npd_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let promtool = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("promtool"))
            .find(|p| p.is_file())
    });
    let Some(promtool) = promtool else {
        let under_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !under_ci,
            "`promtool` not installed (Debian package `prometheus`): required under CI=true"
        );
        eprintln!("SKIPPED: `promtool` not installed (Debian package `prometheus`)");
        return;
    };
    for args in [
        [
            "check",
            "rules",
            "packaging/prometheus/pleg-guard-npd.rules.yml",
        ],
        [
            "test",
            "rules",
            "tests/prometheus/pleg-guard-npd.rules.test.yml",
        ],
    ] {
        let o = std::process::Command::new(&promtool)
            .args(args)
            .current_dir(repo())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", promtool.display()));
        assert!(
            o.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
