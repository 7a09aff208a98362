//! Fleet budget benchmark (issue 21): what a slot costs against a real 3-member TLS etcd
//! cluster on loopback (`tests/support/etcd.rs`). Not part of the pass/fail suite.
//!
//! ```text
//! cargo bench --bench fleet
//! PLEG_BENCH_REPEAT=1 PLEG_BENCH_IDLE_SECS=30 cargo bench --bench fleet
//! ```
//!
//! Sections:
//! - grant latency: `PLEG_BENCH_CLIENTS` [50] `Fleet` clients in one group with
//!   max_disruptive `PLEG_BENCH_MAX` ["5"], each requesting, releasing at once when granted
//!   (hold 0) and requesting again, `PLEG_BENCH_ROUNDS` [4] times; the latency is request →
//!   `Granted` (queueing behind the 45 others included), p50/p99 per run, and the grants per
//!   second; plus one client alone (no contention) for the floor;
//! - idle cost: one idle `Fleet` (lease_ttl `PLEG_BENCH_IDLE_TTL` [60] s) for
//!   `PLEG_BENCH_IDLE_SECS` [60] s; the etcd requests it made, counted by etcd itself (every
//!   member's `/metrics`: `grpc_server_msg_received_total`, which counts unary calls and each
//!   message on a stream such as a lease keep-alive; and the writes, `etcd_mvcc_put_total` +
//!   `etcd_mvcc_txn_total` + `etcd_mvcc_delete_total`, of the member that applied them — all
//!   members apply every write, so one member's count is the cluster's), scaled to an hour.
//!
//! Each section runs `PLEG_BENCH_REPEAT` [3] times (a fresh group each time on one cluster);
//! min / median / max are printed in a table and written to `PLEG_BENCH_OUT`
//! [bench-results/fleet.json].

#[path = "../tests/support/etcd.rs"]
mod etcd;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use etcd::EtcdCluster;
use pleg_guard::fleet::{Fleet, FleetSettings, SlotState, Urgency};
use pleg_guard::target::ActionKind;
use serde_json::json;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn settings(etcd: &EtcdCluster, group: &str, node: &str, max: &str, ttl: u64) -> FleetSettings {
    etcd.fleet_settings(
        group,
        node,
        max,
        Duration::from_secs(ttl),
        Duration::from_secs(5),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// min / median / max of `v`.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (s[0], s[s.len() / 2], s[s.len() - 1])
}

async fn until_idle(fleet: &mut Fleet, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while !matches!(fleet.state(), SlotState::Idle) {
        if tokio::time::timeout_at(deadline, fleet.changed())
            .await
            .is_err()
        {
            panic!(
                "not idle after release within {within:?}: {:?}",
                fleet.state()
            );
        }
    }
}

async fn until_members(fleets: &mut [Fleet], n: usize) {
    for f in fleets.iter_mut() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while f.view().members_alive != Some(n) {
            if tokio::time::timeout_at(deadline, f.changed())
                .await
                .is_err()
            {
                panic!("members alive never {n}: {:?}", f.view());
            }
        }
    }
}

/// One contended run: returns (sorted latencies in ms, grants per second).
fn contended_run(
    etcd: &EtcdCluster,
    group: &str,
    clients: usize,
    max: &str,
    rounds: usize,
) -> (Vec<f64>, f64) {
    let rt = runtime();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut fleets: Vec<Fleet> = (0..clients)
            .map(|i| {
                Fleet::start(settings(etcd, group, &format!("bench-{i:03}"), max, 10))
                    .unwrap_or_else(|e| panic!("Fleet::start: {e}"))
            })
            .collect();
        until_members(&mut fleets, clients).await;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for mut fleet in fleets {
            tasks.push(tokio::task::spawn_local(async move {
                let mut lat = Vec::new();
                for _ in 0..rounds {
                    let asked = Instant::now();
                    fleet.request(ActionKind::RestartKubelet, Urgency::Planned);
                    if !fleet.wait_granted(Duration::from_secs(300)).await {
                        panic!("not granted in 300 s: {:?}", fleet.state());
                    }
                    lat.push(asked.elapsed().as_secs_f64() * 1000.0);
                    fleet.release();
                    until_idle(&mut fleet, Duration::from_secs(30)).await;
                }
                fleet.shutdown().await;
                lat
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap_or_else(|e| panic!("client task: {e}")));
        }
        let rate = all.len() as f64 / started.elapsed().as_secs_f64();
        all.sort_by(f64::total_cmp);
        (all, rate)
    })
}

/// Sums every sample of `metric` in Prometheus text, per label set (labels kept as text).
fn samples(text: &str, metric: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l.to_string(), v),
                None => continue,
            },
            None if rest.starts_with(' ') => (String::new(), rest),
            None => continue,
        };
        if let Ok(v) = value.trim().parse::<f64>() {
            *out.entry(labels).or_insert(0.0) += v;
        }
    }
    out
}

/// Every member's metrics text.
fn scrape(etcd: &EtcdCluster) -> Vec<String> {
    (0..etcd.len())
        .map(|i| {
            etcd.metrics(i)
                .unwrap_or_else(|e| panic!("metrics of m{i}: {e}"))
        })
        .collect()
}

/// The label `name`'s value in a label set `a="x",b="y"`.
fn label<'a>(labels: &'a str, name: &str) -> &'a str {
    labels
        .split(',')
        .find_map(|kv| {
            kv.strip_prefix(name)?
                .strip_prefix("=\"")?
                .strip_suffix('"')
        })
        .unwrap_or("")
}

struct Idle {
    requests_per_hour: f64,
    writes_per_hour: f64,
    by_method: BTreeMap<String, f64>,
}

/// One idle client for `secs`: etcd's own counts of what it asked, per hour.
fn idle_run(etcd: &EtcdCluster, group: &str, secs: u64, ttl: u64) -> Idle {
    let rt = runtime();
    rt.block_on(async {
        let mut fleet = Fleet::start(settings(etcd, group, "idle-node", "1", ttl))
            .unwrap_or_else(|e| panic!("Fleet::start: {e}"));
        until_members(std::slice::from_mut(&mut fleet), 1).await;
        // let the start-up (connect, lease grant, member put, watch) settle
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = scrape(etcd);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let after = scrape(etcd);
        let window = t0.elapsed().as_secs_f64();
        fleet.shutdown().await;
        let scale = 3600.0 / window;
        let mut by_method = BTreeMap::new();
        let mut requests = 0.0;
        for (b, a) in before.iter().zip(&after) {
            let (sb, sa) = (
                samples(b, "grpc_server_msg_received_total"),
                samples(a, "grpc_server_msg_received_total"),
            );
            for (labels, va) in &sa {
                let d = va - sb.get(labels).copied().unwrap_or(0.0);
                if d > 0.0 {
                    let m = format!(
                        "{}/{}",
                        label(labels, "grpc_service"),
                        label(labels, "grpc_method")
                    );
                    *by_method.entry(m).or_insert(0.0) += d * scale;
                    requests += d;
                }
            }
        }
        let writes = |text: &str| {
            [
                "etcd_mvcc_put_total",
                "etcd_mvcc_txn_total",
                "etcd_mvcc_delete_total",
            ]
            .iter()
            .map(|m| samples(text, m).values().sum::<f64>())
            .sum::<f64>()
        };
        Idle {
            requests_per_hour: requests * scale,
            writes_per_hour: (writes(&after[0]) - writes(&before[0])) * scale,
            by_method,
        }
    })
}

fn main() {
    // `cargo bench` passes --bench; a plain `cargo test --benches` run passes nothing useful
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let repeat = env_num("PLEG_BENCH_REPEAT", 3).max(1) as usize;
    let clients = env_num("PLEG_BENCH_CLIENTS", 50).max(1) as usize;
    let rounds = env_num("PLEG_BENCH_ROUNDS", 4).max(1) as usize;
    let max = std::env::var("PLEG_BENCH_MAX").unwrap_or_else(|_| "5".to_string());
    let idle_secs = env_num("PLEG_BENCH_IDLE_SECS", 60).max(5);
    let idle_ttl = env_num("PLEG_BENCH_IDLE_TTL", 60).max(5);
    let out = std::env::var("PLEG_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench-results/fleet.json")
        });

    let etcd = EtcdCluster::start(3).unwrap_or_else(|e| panic!("etcd cluster: {e}"));
    eprintln!("etcd: 3 members, TLS, {}", etcd.endpoints().join(" "));

    let mut alone_p50 = Vec::new();
    let mut alone_p99 = Vec::new();
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    let mut rate = Vec::new();
    let mut idle = Vec::new();
    for r in 0..repeat {
        let (lat, _) = contended_run(&etcd, &format!("alone-{r}"), 1, &max, 20);
        alone_p50.push(quantile(&lat, 0.5));
        alone_p99.push(quantile(&lat, 0.99));
        let (lat, g) = contended_run(&etcd, &format!("contended-{r}"), clients, &max, rounds);
        eprintln!(
            "run {r}: {} grants, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {g:.1} grants/s",
            lat.len(),
            quantile(&lat, 0.5),
            quantile(&lat, 0.99),
            lat.last().copied().unwrap_or(f64::NAN)
        );
        p50.push(quantile(&lat, 0.5));
        p99.push(quantile(&lat, 0.99));
        rate.push(g);
    }
    for r in 0..repeat {
        let i = idle_run(&etcd, &format!("idle-{r}"), idle_secs, idle_ttl);
        eprintln!(
            "idle run {r}: {:.0} requests/h, {:.0} writes/h: {:?}",
            i.requests_per_hour, i.writes_per_hour, i.by_method
        );
        idle.push(i);
    }

    let row = |name: &str, v: &[f64], unit: &str| {
        let (a, b, c) = spread(v);
        println!("| {name} | {a:.1} / {b:.1} / {c:.1} {unit} |");
        json!({"name": name, "min": a, "median": b, "max": c, "unit": unit, "runs": v})
    };
    println!(
        "\nfleet budget against 3 etcd members (TLS, loopback), min / median / max, n = {repeat}\n"
    );
    println!("| | value |");
    println!("| --- | --- |");
    let rows = vec![
        row("grant latency p50, 1 client alone", &alone_p50, "ms"),
        row("grant latency p99, 1 client alone", &alone_p99, "ms"),
        row(
            &format!("grant latency p50, {clients} clients, max {max}, hold 0"),
            &p50,
            "ms",
        ),
        row(
            &format!("grant latency p99, {clients} clients, max {max}, hold 0"),
            &p99,
            "ms",
        ),
        row(
            &format!("grants per second, {clients} clients, max {max}"),
            &rate,
            "/s",
        ),
        row(
            &format!("etcd requests per idle node per hour (lease_ttl {idle_ttl} s)"),
            &idle.iter().map(|i| i.requests_per_hour).collect::<Vec<_>>(),
            "/h",
        ),
        row(
            "etcd writes per idle node per hour",
            &idle.iter().map(|i| i.writes_per_hour).collect::<Vec<_>>(),
            "/h",
        ),
    ];
    let methods: Vec<_> = idle.iter().map(|i| &i.by_method).collect();
    let doc = json!({
        "clients": clients, "rounds": rounds, "max_disruptive": max, "repeat": repeat,
        "idle_secs": idle_secs, "idle_lease_ttl_secs": idle_ttl,
        "rows": rows, "idle_requests_by_method_per_hour": methods,
    });
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match serde_json::to_string_pretty(&doc) {
        Ok(text) => match std::fs::write(&out, text) {
            Ok(()) => println!("\nwritten to {}", out.display()),
            Err(e) => eprintln!("cannot write {}: {e}", out.display()),
        },
        Err(e) => eprintln!("cannot render the results: {e}"),
    }
}
