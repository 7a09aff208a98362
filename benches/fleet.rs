//! Fleet budget benchmark (issues 21, 28): what a slot costs against a real 3-member TLS etcd
//! cluster on loopback (`tests/support/etcd.rs`). Not part of the pass/fail suite.
//!
//! ```text
//! cargo bench --bench fleet
//! PLEG_BENCH_LOADS=50/5/0 PLEG_BENCH_ROUNDS=2 cargo bench --bench fleet
//! ```
//!
//! Loads (`PLEG_BENCH_LOADS`, `members/max/hold_ms[/askers]`, comma-separated; default
//! `50/5/0,50/5/50,1000/5/0/200`): `members` [`Fleet`] clients of the project's fleet module
//! in one group, all in this one process on one current-thread tokio runtime (a member is a task and a
//! connection, never a thread); `askers` of them (default: all) ask for a slot at once, hold it
//! `hold_ms`, release it and ask again, `PLEG_BENCH_ROUNDS` [4] times (1 round with 1,000
//! members). One line per load:
//!
//! ```text
//! fleet-bench members=N max=K hold_ms=H grants_per_s=… handoff_p50_ms=… handoff_p99_ms=…
//!   writes_per_grant=… failed_txn_per_grant=… watch_msgs_per_grant=… idle_requests_per_node_h=…
//! ```
//!
//! - handoff: a slot's release committed → the next grant committed, both seen by one observer
//!   watching `holders/` (its own watch latency cancels out): each grant made while releases
//!   wait for a taker is paired with the oldest such release; a release that handed its slot
//!   straight to the next waiter (a put over a held holder key: release and grant in one
//!   revision) is a handoff of 0 ms. The check line says how many were direct, and how long
//!   a member took to learn of its grant (`grant_noticed`: the observer saw the grant → the
//!   member's state says Granted);
//! - every count is etcd's own, from the members' `/metrics`: writes are raft proposals
//!   committed (`etcd_server_proposals_committed_total`, member 0); failed transactions are the
//!   proposals that did not make a revision (a failed compare); watch messages are
//!   `grpc_server_msg_sent_total{grpc_method="Watch"}` over every member, less the observer's;
//! - idle: before the load, every member idle for `PLEG_BENCH_IDLE_SECS` [20] s, every message
//!   etcd received (`grpc_server_msg_received_total`), per member per hour (lease_ttl
//!   `PLEG_BENCH_TTL` [30] s: keep-alives every 10 s).
//!
//! A second line per load, `fleet-bench-check`, says what etcd's history shows: the most
//! holders at any revision, and how far any grant overtook earlier waiters (0 = strict FIFO;
//! below `max` = within one batch of free slots, which the n-th waiter taking the n-th free
//! slot allows). Results also go to `PLEG_BENCH_OUT` [bench-results/fleet.json].
//!
//! `PLEG_BENCH_STEPS=1` adds `fleet-bench-step` lines: a slot's turn cut into its steps by the
//! product's debug events (target `pleg_guard::fleet::turn`: the handoff seen on the watch,
//! the release asked, the queue's head read sent and answered or known from the waiters read
//! behind the holder (`heads_known`), the release Txn sent and answered) and the bench's own
//! (`noticed`: the member's task saw its grant), p50/p99 of each, how the next holder learned
//! of its slot (`handed`: from its watch; `read_held`: by a read) and how many releases read
//! the head first; `PLEG_BENCH_STEPS_DUMP=FILE` also writes every step to FILE, one per line
//! (ms since the load began, node, step, revision). `PLEG_BENCH_THREADS=N` runs the members on a multi-thread runtime of `N`
//! workers instead of the current-thread one.
//!
//! A third line per load, `fleet-bench-cost`, says what a grant cost the machine: CPU
//! milliseconds of the three etcd members together (`process_cpu_seconds_total`) and of this
//! process (every member's client, the observer), how busy that kept the machine's cores
//! (`cpu_busy`, 1 = all of them) and the grants/s they would give at that CPU per grant
//! (`cpu_ceiling_grants_per_s`: a run whose rate is near it was bound by the machine's CPU),
//! the bytes the three members wrote to their WALs and received from their clients, and the
//! gRPC messages etcd received per grant by method. `PLEG_ETCD_PPROF=1` starts the members with `--enable-pprof`, for
//! `go tool pprof` on their client URLs.

#[path = "../tests/support/etcd.rs"]
mod etcd;
mod support {
    pub mod client;
}

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd::EtcdCluster;
use pleg_guard::fleet::{Fleet, FleetSettings, SlotState, Urgency};
use pleg_guard::target::ActionKind;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

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
        Duration::from_secs(10),
    )
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Sums every sample of `metric` in Prometheus text whose labels contain `with`.
fn sum(text: &str, metric: &str, with: &str) -> f64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once('}')?,
                None if rest.starts_with(' ') => ("", rest),
                None => return None,
            };
            labels.contains(with).then_some(())?;
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

/// etcd's own counters at one moment.
#[derive(Debug, Clone, Default)]
struct Counters {
    received: f64,
    watch_sent: f64,
    proposals: f64,
    revision: f64,
    /// CPU seconds of every etcd member (`process_cpu_seconds_total`).
    etcd_cpu_s: f64,
    /// CPU seconds of this process (every member client, the observer).
    client_cpu_s: f64,
    /// gRPC messages received, by method, over every member.
    by_method: BTreeMap<String, f64>,
    /// Bytes written to the WAL, over every member (`etcd_disk_wal_write_bytes_total`).
    wal_bytes: f64,
    /// Bytes etcd received from its clients, over every member
    /// (`etcd_network_client_grpc_received_bytes_total`).
    client_rx_bytes: f64,
}

/// This process's CPU time (user + system), from `/proc/self/stat`.
fn own_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // after the command's closing parenthesis: state is field 3, utime 14, stime 15
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // CLK_TCK is 100 on Linux x86_64
    (ticks(11) + ticks(12)) / 100.0
}

fn counters(etcd: &EtcdCluster) -> Counters {
    let texts: Vec<String> = (0..etcd.len())
        .map(|i| {
            etcd.metrics(i)
                .unwrap_or_else(|e| panic!("metrics of m{i}: {e}"))
        })
        .collect();
    Counters {
        received: texts
            .iter()
            .map(|t| sum(t, "grpc_server_msg_received_total", ""))
            .sum(),
        watch_sent: texts
            .iter()
            .map(|t| sum(t, "grpc_server_msg_sent_total", "grpc_method=\"Watch\""))
            .sum(),
        proposals: sum(&texts[0], "etcd_server_proposals_committed_total", ""),
        revision: etcd.revision().unwrap_or_else(|e| panic!("revision: {e}")) as f64,
        etcd_cpu_s: texts
            .iter()
            .map(|t| sum(t, "process_cpu_seconds_total", ""))
            .sum(),
        client_cpu_s: own_cpu_s(),
        wal_bytes: texts
            .iter()
            .map(|t| sum(t, "etcd_disk_wal_write_bytes_total", ""))
            .sum(),
        client_rx_bytes: texts
            .iter()
            .map(|t| sum(t, "etcd_network_client_grpc_received_bytes_total", ""))
            .sum(),
        by_method: {
            let mut m = BTreeMap::new();
            for t in &texts {
                etcd::add_received_by_method(t, &mut m);
            }
            m
        },
    }
}

/// Watches `holders/` with its own client: when each grant (put) and release (delete) became
/// visible, and how many watch messages it got.
/// One event the observer saw: when, put (else delete), the key, the event's revision.
type Seen = (Instant, bool, Vec<u8>, i64);

struct Observer {
    events: Arc<Mutex<Vec<Seen>>>,
    messages: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    async fn start(etcd: &EtcdCluster, prefix: String) -> Observer {
        let mut client = support::client::client(etcd).await;
        let mut stream = client
            .watch(prefix, Some(etcd_client::WatchOptions::new().with_prefix()))
            .await
            .unwrap_or_else(|e| panic!("observer watch: {e}"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let messages = Arc::new(Mutex::new(0u64));
        let (e2, m2) = (events.clone(), messages.clone());
        let task = tokio::spawn(async move {
            let _client = client;
            while let Ok(Some(resp)) = stream.message().await {
                let now = Instant::now();
                *m2.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                let mut ev = e2.lock().unwrap_or_else(|p| p.into_inner());
                for e in resp.events() {
                    let (key, rev) = e
                        .kv()
                        .map_or((Vec::new(), 0), |kv| (kv.key().to_vec(), kv.mod_revision()));
                    ev.push((now, e.event_type() == etcd_client::EventType::Put, key, rev));
                }
            }
        });
        Observer {
            events,
            messages,
            task,
        }
    }

    fn messages(&self) -> u64 {
        *self.messages.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Handoff times (ms): each grant made while a release waited for a taker, from the
    /// oldest such release; a put over a holder key that is held (a release that handed its
    /// slot over in the same revision) is a handoff of 0. Also how many were direct.
    fn handoffs(&self) -> (Vec<f64>, usize) {
        let ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let mut pending: VecDeque<Instant> = VecDeque::new();
        let mut held: std::collections::BTreeSet<Vec<u8>> = Default::default();
        let mut out = Vec::new();
        let mut direct = 0;
        for (at, put, key, _) in ev.iter() {
            if *put {
                if !held.insert(key.clone()) {
                    out.push(0.0);
                    direct += 1;
                } else if let Some(r) = pending.pop_front() {
                    out.push(at.duration_since(r).as_secs_f64() * 1000.0);
                }
            } else {
                held.remove(key);
                pending.push_back(*at);
            }
        }
        out.sort_by(f64::total_cmp);
        (out, direct)
    }

    /// When the observer saw the grant of `revision`.
    fn seen(&self, revision: i64) -> Option<Instant> {
        let ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        ev.iter()
            .find(|(_, put, _, rev)| *put && *rev == revision)
            .map(|(at, ..)| *at)
    }
}

/// A slot turn's steps (`PLEG_BENCH_STEPS=1`): the product's debug events of target
/// [`TURN`](pleg_guard::fleet::backend::etcd::TURN) and the bench's own (`noticed`, the member's task
/// learned its grant), each with when, the node and a revision.
mod steps {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Instant;

    /// (when, node, step, revision)
    pub type Step = (Instant, String, String, i64);

    static STEPS: Mutex<Vec<Step>> = Mutex::new(Vec::new());

    pub fn on() -> bool {
        std::env::var("PLEG_BENCH_STEPS").is_ok_and(|v| v == "1")
    }

    pub fn record(node: &str, step: &str, revision: i64) {
        let now = Instant::now();
        STEPS.lock().unwrap_or_else(|p| p.into_inner()).push((
            now,
            node.to_owned(),
            step.to_owned(),
            revision,
        ));
    }

    pub fn take() -> Vec<Step> {
        std::mem::take(&mut *STEPS.lock().unwrap_or_else(|p| p.into_inner()))
    }

    #[derive(Default)]
    struct Fields {
        node: String,
        step: String,
        revision: i64,
    }

    impl tracing::field::Visit for Fields {
        fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
            match f.name() {
                "node" => self.node = v.to_owned(),
                "step" => self.step = v.to_owned(),
                _ => {}
            }
        }
        fn record_i64(&mut self, f: &tracing::field::Field, v: i64) {
            if f.name() == "revision" {
                self.revision = v;
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    /// Collects the product's turn events.
    pub struct Collect;

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Collect {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            if event.metadata().target() != pleg_guard::fleet::backend::etcd::TURN {
                return;
            }
            let mut f = Fields::default();
            event.record(&mut f);
            record(&f.node, &f.step, f.revision);
        }
    }

    fn ms(a: Instant, b: Instant) -> f64 {
        if b >= a {
            b.duration_since(a).as_secs_f64() * 1000.0
        } else {
            -(a.duration_since(b).as_secs_f64() * 1000.0)
        }
    }

    /// One line per step of a turn: p50/p99 (ms) and how many turns showed it.
    pub fn report(all: &[Step]) -> Vec<String> {
        // (node, step, revision) -> when (the first)
        let mut at: BTreeMap<(&str, &str, i64), Instant> = BTreeMap::new();
        // revision -> the node that learned of that grant, and how
        let mut learned: BTreeMap<i64, (&str, &str, Instant)> = BTreeMap::new();
        for (t, node, step, rev) in all {
            at.entry((node, step, *rev)).or_insert(*t);
            if matches!(step.as_str(), "handed" | "read_held" | "granted") {
                learned.entry(*rev).or_insert((node, step, *t));
            }
        }
        let mut d: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut how: BTreeMap<&str, usize> = BTreeMap::new();
        for (t, node, step, r1) in all {
            if step != "release_answered" {
                continue;
            }
            let _ = t;
            // this release's grant revision: its release_sent of the same node just before
            let Some(((_, _, g), sent)) = at
                .iter()
                .filter(|((n, s, _), w)| *n == node.as_str() && *s == "release_sent" && **w <= *t)
                .max_by_key(|(_, w)| **w)
            else {
                continue;
            };
            let g = *g;
            let get = |s: &str| at.get(&(node.as_str(), s, g)).copied();
            let Some(asked) = get("release_asked") else {
                continue;
            };
            if let Some((_, how0, l)) = learned.get(&g) {
                if let Some(n) = get("noticed") {
                    d.entry(if *how0 == "handed" {
                        "1 watch event -> task (noticed)"
                    } else {
                        "1' own grant/read -> task"
                    })
                    .or_default()
                    .push(ms(*l, n));
                    d.entry("2 task -> release asked")
                        .or_default()
                        .push(ms(n, asked));
                }
            }
            match (get("heads_sent"), get("heads_answered")) {
                (Some(hs), Some(ha)) => {
                    *how.entry("release read the head").or_default() += 1;
                    d.entry("3 release asked -> heads read sent")
                        .or_default()
                        .push(ms(asked, hs));
                    d.entry("4 heads read (linearizable)")
                        .or_default()
                        .push(ms(hs, ha));
                    d.entry("5 heads answered -> release txn sent")
                        .or_default()
                        .push(ms(ha, *sent));
                }
                _ => {
                    // the waiters read behind it while it waited (heads_known)
                    *how.entry("release knew the head").or_default() += 1;
                    d.entry("3k release asked -> release txn sent (head known)")
                        .or_default()
                        .push(ms(asked, *sent));
                }
            }
            d.entry("6 release txn").or_default().push(ms(*sent, *t));
            match learned.get(r1) {
                Some((_, how1, l)) => {
                    *how.entry(how1).or_default() += 1;
                    d.entry("7 txn sent -> next holder learns")
                        .or_default()
                        .push(ms(*sent, *l));
                    d.entry("7' txn answered -> next holder learns")
                        .or_default()
                        .push(ms(*t, *l));
                    if let Some((_, _, l0)) = learned.get(&g) {
                        d.entry("T turn: holder learns -> next holder learns")
                            .or_default()
                            .push(ms(*l0, *l));
                    }
                }
                None => *how.entry("freed (no handoff)").or_default() += 1,
            }
        }
        let mut out = Vec::new();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, _, step, _) in all {
            *counts.entry(step.as_str()).or_default() += 1;
        }
        out.push(format!("fleet-bench-step events: {counts:?}"));
        for (k, mut v) in d {
            v.sort_by(f64::total_cmp);
            out.push(format!(
                "fleet-bench-step {k:<45} n={:<4} p50_ms={:.2} p99_ms={:.2}",
                v.len(),
                super::quantile(&v, 0.5),
                super::quantile(&v, 0.99)
            ));
        }
        out.push(format!(
            "fleet-bench-step next holder learned by (and releases' heads): {how:?}"
        ));
        out
    }
}

struct Load {
    members: usize,
    max: usize,
    hold_ms: u64,
    askers: usize,
}

fn loads() -> Vec<Load> {
    let spec = std::env::var("PLEG_BENCH_LOADS")
        .unwrap_or_else(|_| "50/5/0,50/5/50,1000/5/0/200".to_string());
    spec.split(',')
        .filter_map(|l| {
            let n: Vec<usize> = l.trim().split('/').filter_map(|x| x.parse().ok()).collect();
            match n.as_slice() {
                [m, k, h] => Some(Load {
                    members: *m,
                    max: *k,
                    hold_ms: *h as u64,
                    askers: *m,
                }),
                [m, k, h, a] => Some(Load {
                    members: *m,
                    max: *k,
                    hold_ms: *h as u64,
                    askers: (*a).min(*m),
                }),
                _ => None,
            }
        })
        .collect()
}

/// What etcd's history of the group shows: the most holders at any revision, and the most
/// earlier waiters (same urgency) any grant overtook.
fn check_history(etcd: &EtcdCluster, group: &str) -> (usize, usize, usize) {
    let holders = etcd
        .history(&format!("/pleg-guard/{group}/holders/"))
        .unwrap_or_else(|e| panic!("history: {e}"));
    let mut slots: BTreeMap<String, String> = BTreeMap::new();
    let mut most = 0;
    let mut grants: Vec<String> = Vec::new();
    let mut i = 0;
    while i < holders.len() {
        let rev = holders[i].revision;
        while i < holders.len() && holders[i].revision == rev {
            let e = &holders[i];
            if e.delete {
                slots.remove(&e.key);
            } else {
                let node = serde_json::from_str::<serde_json::Value>(&e.value)
                    .ok()
                    .and_then(|v| v["node"].as_str().map(str::to_string))
                    .unwrap_or_default();
                grants.push(node.clone());
                slots.insert(e.key.clone(), node);
            }
            i += 1;
        }
        most = most.max(slots.len());
    }
    // the joins, in queue order: every put that created a queue key
    let queue = etcd
        .history(&format!("/pleg-guard/{group}/queue/"))
        .unwrap_or_else(|e| panic!("history: {e}"));
    let mut created: BTreeMap<String, bool> = BTreeMap::new();
    let mut joins: Vec<String> = Vec::new();
    for e in &queue {
        if e.delete {
            created.remove(&e.key);
        } else if created.insert(e.key.clone(), true).is_none() {
            joins.push(e.key.rsplit('/').next().unwrap_or("").to_string());
        }
    }
    // pair the k-th join of a node with its k-th grant; overtaken = earlier joins granted later
    let mut join_seq: BTreeMap<String, VecDeque<usize>> = BTreeMap::new();
    for (j, n) in joins.iter().enumerate() {
        join_seq.entry(n.clone()).or_default().push_back(j);
    }
    let mut grant_of_join: Vec<Option<usize>> = vec![None; joins.len()];
    for (g, n) in grants.iter().enumerate() {
        if let Some(j) = join_seq.get_mut(n).and_then(VecDeque::pop_front) {
            grant_of_join[j] = Some(g);
        }
    }
    let mut worst = 0;
    for (j, g) in grant_of_join.iter().enumerate() {
        let Some(g) = g else { continue };
        let overtook = grant_of_join[..j]
            .iter()
            .filter(|earlier| earlier.is_some_and(|eg| eg > *g))
            .count();
        worst = worst.max(overtook);
    }
    (most, worst, grants.len())
}

fn run_load(
    etcd: &EtcdCluster,
    load: &Load,
    n: usize,
    rounds: usize,
    idle_secs: u64,
    ttl: u64,
) -> serde_json::Value {
    let group = format!("load-{n}");
    // PLEG_BENCH_THREADS=N: a multi-thread runtime of N workers instead (0: current-thread)
    let threads = env_num("PLEG_BENCH_THREADS", 0) as usize;
    let rt = if threads == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    }
    .enable_all()
    .build()
    .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let max = load.max.to_string();
    rt.block_on(async {
        let mut fleets: Vec<Fleet> = Vec::new();
        // start in batches, so 1,000 TLS handshakes do not all land in one second
        for chunk in (0..load.members).collect::<Vec<_>>().chunks(50) {
            for i in chunk {
                fleets.push(
                    Fleet::start(settings(etcd, &group, &format!("m{i:04}"), &max, ttl))
                        .unwrap_or_else(|e| panic!("Fleet::start: {e}")),
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let prefix = format!("/pleg-guard/{group}/members/");
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let have = etcd.get_prefix(&prefix).map(|k| k.len()).unwrap_or(0);
            if have == load.members {
                break;
            }
            assert!(Instant::now() < deadline, "{have} of {} members registered", load.members);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        // idle: every member idle
        let before = counters(etcd);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(idle_secs)).await;
        let after = counters(etcd);
        let idle_per_node_h = (after.received - before.received) / load.members as f64 * 3600.0
            / t0.elapsed().as_secs_f64();

        let observer = Observer::start(etcd, format!("/pleg-guard/{group}/holders/")).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = counters(etcd);
        let observed_before = observer.messages();
        let started = Instant::now();
        let askers: Vec<Fleet> = fleets.drain(..load.askers).collect();
        let hold = Duration::from_millis(load.hold_ms);
        let mut tasks = Vec::new();
        // when each member saw its grant: (the grant's revision, when)
        let noticed: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
        for (i, mut fleet) in askers.into_iter().enumerate() {
            let noticed = noticed.clone();
            let node = format!("m{i:04}");
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    fleet.request(ActionKind::RestartKubelet, Urgency::Planned);
                    if !fleet.wait_granted(Duration::from_secs(600)).await {
                        panic!("not granted in 600 s: {:?}", fleet.state());
                    }
                    if let SlotState::Granted { revision, .. } = fleet.state() {
                        if steps::on() {
                            steps::record(&node, "noticed", revision);
                        }
                        noticed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((revision, Instant::now()));
                    }
                    if !hold.is_zero() {
                        tokio::time::sleep(hold).await;
                    }
                    fleet.release();
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                    while !matches!(fleet.state(), SlotState::Idle) {
                        if tokio::time::timeout_at(deadline, fleet.changed()).await.is_err() {
                            panic!("not idle after release: {:?}", fleet.state());
                        }
                    }
                }
                fleet
            }));
        }
        for t in tasks {
            fleets.push(t.await.unwrap_or_else(|e| panic!("client task: {e}")));
        }
        let elapsed = started.elapsed().as_secs_f64();
        // the last release reached etcd: let the counters settle
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = counters(etcd);
        let observed = (observer.messages() - observed_before) as f64;
        let (handoffs, direct) = observer.handoffs();
        // a grant committed (as the observer saw it) -> its member knows
        let mut notice: Vec<f64> = noticed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(rev, at)| {
                let seen = observer.seen(*rev)?;
                Some(at.saturating_duration_since(seen).as_secs_f64() * 1000.0)
            })
            .collect();
        notice.sort_by(f64::total_cmp);
        observer.task.abort();
        for f in fleets {
            f.shutdown().await;
        }
        let grants = (load.askers * rounds) as f64;
        let proposals = after.proposals - before.proposals;
        let revisions = after.revision - before.revision;
        let (most, overtaken, granted) = check_history(etcd, &group);
        let line = format!(
            "fleet-bench members={} max={} hold_ms={} grants_per_s={:.1} handoff_p50_ms={:.1} handoff_p99_ms={:.1} writes_per_grant={:.2} failed_txn_per_grant={:.3} watch_msgs_per_grant={:.2} idle_requests_per_node_h={:.0}",
            load.members,
            load.max,
            load.hold_ms,
            grants / elapsed,
            quantile(&handoffs, 0.5),
            quantile(&handoffs, 0.99),
            proposals / grants,
            (proposals - revisions).max(0.0) / grants,
            (after.watch_sent - before.watch_sent - observed).max(0.0) / grants,
            idle_per_node_h,
        );
        println!("{line}");
        println!(
            "fleet-bench-check members={} max={} askers={} rounds={rounds} grants_in_history={granted} max_holders_in_history={most} fifo_most_overtaken={overtaken} lease_ttl_s={ttl} handoffs={} direct_handoffs={direct} grant_noticed_p50_ms={:.1} grant_noticed_p99_ms={:.1}",
            load.members, load.max, load.askers, handoffs.len(),
            quantile(&notice, 0.5),
            quantile(&notice, 0.99),
        );
        let per_method: Vec<String> = after
            .by_method
            .iter()
            .map(|(m, v)| (m, v - before.by_method.get(m).copied().unwrap_or(0.0)))
            .filter(|(_, d)| *d > 0.0)
            .map(|(m, d)| format!("{m}={:.2}", d / grants))
            .collect();
        // the machine's share used by etcd and this process over the load, and the grants/s
        // its cores would give at this run's CPU per grant with nothing else running: where
        // both are near 1 and the rate, the run was CPU-bound
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let etcd_ms = (after.etcd_cpu_s - before.etcd_cpu_s) * 1000.0 / grants;
        let client_ms = (after.client_cpu_s - before.client_cpu_s) * 1000.0 / grants;
        let busy = (etcd_ms + client_ms) * grants / 1000.0 / (elapsed * cores);
        let cost = format!(
            "fleet-bench-cost members={} max={} hold_ms={} etcd_cpu_ms_per_grant={:.2} client_cpu_ms_per_grant={:.2} cpu_busy={:.2} cpu_ceiling_grants_per_s={:.0} wal_bytes_per_grant={:.0} client_bytes_per_grant={:.0} received_per_grant: {}",
            load.members,
            load.max,
            load.hold_ms,
            etcd_ms,
            client_ms,
            busy,
            cores * 1000.0 / (etcd_ms + client_ms),
            (after.wal_bytes - before.wal_bytes) / grants,
            (after.client_rx_bytes - before.client_rx_bytes) / grants,
            per_method.join(" "),
        );
        println!("{cost}");
        if steps::on() {
            let all = steps::take();
            for l in steps::report(&all) {
                println!("{l}");
            }
            // PLEG_BENCH_STEPS_DUMP=FILE: every step, one per line (ms since the load began)
            if let Ok(path) = std::env::var("PLEG_BENCH_STEPS_DUMP") {
                let text: String = all
                    .iter()
                    .map(|(t, node, step, rev)| {
                        format!(
                            "{:.3} {node} {step} {rev}\n",
                            t.saturating_duration_since(started).as_secs_f64() * 1000.0
                        )
                    })
                    .collect();
                if let Err(e) = std::fs::write(&path, text) {
                    eprintln!("cannot write {path}: {e}");
                }
            }
        }
        assert!(most <= load.max, "{most} holders at once in etcd's history, max {}", load.max);
        json!({
            "members": load.members, "max": load.max, "hold_ms": load.hold_ms,
            "askers": load.askers, "rounds": rounds, "line": line,
            "grants_per_s": grants / elapsed,
            "handoff_p50_ms": quantile(&handoffs, 0.5),
            "handoff_p99_ms": quantile(&handoffs, 0.99),
            "handoffs": handoffs.len(),
            "direct_handoffs": direct,
            "grant_noticed_p50_ms": quantile(&notice, 0.5),
            "grant_noticed_p99_ms": quantile(&notice, 0.99),
            "writes_per_grant": proposals / grants,
            "failed_txn_per_grant": (proposals - revisions).max(0.0) / grants,
            "watch_msgs_per_grant": (after.watch_sent - before.watch_sent - observed).max(0.0) / grants,
            "idle_requests_per_node_h": idle_per_node_h,
            "max_holders_in_history": most,
            "fifo_most_overtaken": overtaken,
            "cost": cost,
        })
    })
}

/// Room for a connection per member to each etcd member (and etcd's side of them).
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

fn main() {
    // `cargo bench` passes --bench; a plain `cargo test --benches` run passes nothing useful
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    raise_fd_limit();
    if steps::on() {
        let _ = tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(steps::Collect),
        );
    }
    let rounds = env_num("PLEG_BENCH_ROUNDS", 4).max(1) as usize;
    let idle_secs = env_num("PLEG_BENCH_IDLE_SECS", 20).max(5);
    let ttl = env_num("PLEG_BENCH_TTL", 30).max(5);
    let out = std::env::var("PLEG_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench-results/fleet.json")
        });

    let etcd = EtcdCluster::start(3).unwrap_or_else(|e| panic!("etcd cluster: {e}"));
    eprintln!("etcd: 3 members, TLS, {}", etcd.endpoints().join(" "));
    let mut results = Vec::new();
    for (n, load) in loads().iter().enumerate() {
        let rounds = if load.members >= 500 { 1 } else { rounds };
        results.push(run_load(&etcd, load, n, rounds, idle_secs, ttl));
    }
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match serde_json::to_string_pretty(&json!({ "loads": results })) {
        Ok(text) => match std::fs::write(&out, text) {
            Ok(()) => eprintln!("written to {}", out.display()),
            Err(e) => eprintln!("cannot write {}: {e}", out.display()),
        },
        Err(e) => eprintln!("cannot render the results: {e}"),
    }
}
