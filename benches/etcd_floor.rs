//! The floor of this machine for the fleet bench (issue 28): what the same real 3-member TLS
//! etcd cluster (`tests/support/etcd.rs`) does with no protocol around it. Not part of the
//! pass/fail suite.
//!
//! ```text
//! cargo bench --bench etcd_floor
//! ```
//!
//! One line each:
//! - `seq`: one client, one guarded write (a Txn: compare, put) after another: the latency of
//!   one raft write as a client sees it (p50/p99 ms, writes/s);
//! - `conc c=N`: N tasks on one current-thread runtime (as the fleet bench runs its members),
//!   each with its own connection, each writing guarded Txns one after another: the cluster's
//!   write throughput when N writers keep it busy;
//! - `chain`: a writer puts a key, a second client watching it puts another as soon as it sees
//!   the first: a write seen through a watch and answered with a write, the least a handoff
//!   through a watch can take (p50/p99 ms);
//! - `ring`: the least a grant protocol of two writes a grant can cost here, with nothing to
//!   read and nothing to set up: `RING_MEMBERS` clients, each with its own connection and its
//!   lease, each watching its own token key from the start; `RING_SLOTS` tokens. A client that
//!   sees its token put hands it to the client `RING_SLOTS` further on (one Txn: its key still
//!   its grant's revision → delete it, put the next one's, on the next one's lease), then joins
//!   again (a put on its lease), then waits: the fleet bench's loop at hold 0 (handoffs per s).
//!   `PLEG_RING_READ=1`, `PLEG_RING_NEWWATCH=1`, `PLEG_RING_REWATCH=1`, `PLEG_RING_SCAN=1`,
//!   `PLEG_RING_EXTRAWATCH=1` and `PLEG_RING_OFFERS=N` add one part of a real protocol each
//!   ([`RingCosts`]), to price it by what it takes off the line (issue 28's ninth and eleventh
//!   looks).

#[path = "../tests/support/etcd.rs"]
mod etcd;
mod support {
    pub mod client;
}

use std::time::{Duration, Instant};

use etcd::EtcdCluster;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchOptions,
};
use support::client::client;

const SEQ: usize = 500;
const CONC_SECS: u64 = 5;
const CHAIN: usize = 300;
const RING_MEMBERS: usize = 50;
const RING_SLOTS: usize = 5;
const RING_SECS: u64 = 10;

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// A guarded write like the protocol's: compare a key's create revision, put.
fn txn(key: &str, n: usize) -> Txn {
    Txn::new()
        .when([Compare::create_revision("/floor/none", CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, n.to_string(), None)])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let etcd = EtcdCluster::start(3).unwrap_or_else(|e| panic!("etcd cluster: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    rt.block_on(async {
        let mut c = client(&etcd).await;
        for i in 0..50 {
            c.txn(txn("/floor/warm", i))
                .await
                .unwrap_or_else(|e| panic!("txn: {e}"));
        }
        let mut lat = Vec::new();
        let t0 = Instant::now();
        for i in 0..SEQ {
            let t = Instant::now();
            c.txn(txn("/floor/seq", i))
                .await
                .unwrap_or_else(|e| panic!("txn: {e}"));
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let per_s = SEQ as f64 / t0.elapsed().as_secs_f64();
        println!(
            "etcd-floor seq txn_p50_ms={:.2} txn_p99_ms={:.2} writes_per_s={per_s:.0}",
            quantile(&mut lat, 0.5),
            quantile(&mut lat, 0.99)
        );

        for n in [5usize, 50] {
            let mut clients = Vec::new();
            for _ in 0..n {
                clients.push(client(&etcd).await);
            }
            let until = Instant::now() + Duration::from_secs(CONC_SECS);
            let t0 = Instant::now();
            let tasks: Vec<_> = clients
                .into_iter()
                .enumerate()
                .map(|(k, mut c)| {
                    tokio::spawn(async move {
                        let key = format!("/floor/conc/{k}");
                        let mut done = 0usize;
                        while Instant::now() < until {
                            c.txn(txn(&key, done))
                                .await
                                .unwrap_or_else(|e| panic!("txn: {e}"));
                            done += 1;
                        }
                        done
                    })
                })
                .collect();
            let mut total = 0;
            for t in tasks {
                total += t.await.unwrap_or_else(|e| panic!("task: {e}"));
            }
            println!(
                "etcd-floor conc c={n} writes_per_s={:.0}",
                total as f64 / t0.elapsed().as_secs_f64()
            );
        }

        // chain: a put seen through a watch, answered by a put from another client
        let mut a = client(&etcd).await;
        let mut b = client(&etcd).await;
        let mut seen = b
            .watch("/floor/ping", Some(WatchOptions::new()))
            .await
            .unwrap_or_else(|e| panic!("watch: {e}"));
        let mut back = a
            .watch("/floor/pong", Some(WatchOptions::new()))
            .await
            .unwrap_or_else(|e| panic!("watch: {e}"));
        let responder = tokio::spawn(async move {
            let mut n = 0;
            while let Ok(Some(r)) = seen.message().await {
                for _ in r.events() {
                    b.txn(txn("/floor/pong", n))
                        .await
                        .unwrap_or_else(|e| panic!("txn: {e}"));
                    n += 1;
                }
                if n >= CHAIN {
                    break;
                }
            }
        });
        let mut lat = Vec::new();
        for i in 0..CHAIN {
            let t = Instant::now();
            a.txn(txn("/floor/ping", i))
                .await
                .unwrap_or_else(|e| panic!("txn: {e}"));
            let committed = t.elapsed();
            loop {
                match back.message().await {
                    Ok(Some(r)) if !r.events().is_empty() => break,
                    Ok(Some(_)) => {}
                    other => panic!("watch ended: {other:?}"),
                }
            }
            // from the first write's answer to the second write's event at the first client:
            // watch delivery + a Txn + watch delivery; half the round trip minus one Txn
            // is what a handoff through a watch costs at least
            lat.push((t.elapsed() - committed).as_secs_f64() * 1000.0);
        }
        let _ = responder.await;
        println!(
            "etcd-floor chain watch_then_txn_then_watch_p50_ms={:.2} p99_ms={:.2}",
            quantile(&mut lat, 0.5),
            quantile(&mut lat, 0.99)
        );
        ring(&etcd).await;
    });
}

/// What the `ring` line adds to its two writes a handoff, to price a protocol's parts
/// (`PLEG_RING_…` in the environment; the line names them).
#[derive(Debug, Default, Clone, Copy)]
struct RingCosts {
    /// `PLEG_RING_READ=1`: a linearizable count-only read per handoff.
    read: bool,
    /// `PLEG_RING_NEWWATCH=1`: a new watch stream per handoff (the old one dropped).
    new_watch: bool,
    /// `PLEG_RING_REWATCH=1`: the watch cancelled and made again on the same stream.
    rewatch: bool,
    /// `PLEG_RING_EXTRAWATCH=1`: with `PLEG_RING_NEWWATCH=1`, a second watch made on the new
    /// stream, on the token key of the client that hands this one its token (one event a
    /// handoff, read and dropped): what a waiter that watches a key further ahead, or the
    /// holder keys before its turn, adds instead of a read (issue 28's eleventh look).
    extra_watch: bool,
    /// `PLEG_RING_SCAN=1`: the join reads the newest queue keys by create revision with it.
    scan: bool,
    /// `PLEG_RING_OFFERS=N`: N offers more in the handoff's else branch, never tried (a
    /// release's nested offers, ~0.5 KB each).
    offers: usize,
}

impl RingCosts {
    fn from_env() -> RingCosts {
        let on = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
        RingCosts {
            read: on("PLEG_RING_READ"),
            new_watch: on("PLEG_RING_NEWWATCH"),
            rewatch: on("PLEG_RING_REWATCH"),
            extra_watch: on("PLEG_RING_EXTRAWATCH"),
            scan: on("PLEG_RING_SCAN"),
            offers: std::env::var("PLEG_RING_OFFERS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        }
    }
}

/// `n` offers of `next_tok` to made-up waiters, nested, none of which can hold: the bytes of
/// a release's offers, riding in the else branch.
fn untried_offers(
    n: usize,
    my_tok: &str,
    revision: i64,
    next_tok: &str,
    lease: i64,
) -> Option<Txn> {
    let mut orelse: Option<Txn> = None;
    for k in 0..n {
        let waiter = format!("/floor/ring/queue/planned/waiter-node-{k:04}");
        let value = format!(
            r#"{{"node":"waiter-node-{k:04}","action":"restart-kubelet","urgency":"planned","since":"2026-12-05T15:00:00.123456789Z","granted_at":"2026-12-05T15:00:01.123456789Z"}}"#
        );
        let mut offer = Txn::new()
            .when([
                Compare::mod_revision(my_tok, CompareOp::Equal, revision),
                Compare::create_revision("/floor/ring/holders/000005", CompareOp::Equal, 0)
                    .with_range("/floor/ring/holders0"),
                Compare::create_revision(waiter.as_str(), CompareOp::Equal, 12345),
                Compare::create_revision("/floor/ring/queue/planned/", CompareOp::Greater, 12344)
                    .with_range("/floor/ring/queue/planned0"),
            ])
            .and_then([
                TxnOp::put(next_tok, value, Some(PutOptions::new().with_lease(lease))),
                TxnOp::delete(waiter.as_str(), None),
            ]);
        if let Some(e) = orelse.take() {
            offer = offer.or_else([TxnOp::txn(e)]);
        }
        orelse = Some(offer);
    }
    orelse
}

/// The `ring` line: see the module doc.
async fn ring(etcd: &EtcdCluster) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let costs = RingCosts::from_env();
    let tok = |i: usize| format!("/floor/ring/tok/{i:02}");
    let mut clients = Vec::new();
    let mut leases = Vec::new();
    let mut watches = Vec::new();
    for i in 0..RING_MEMBERS {
        let mut c = client(etcd).await;
        let lease = c
            .lease_grant(60, None)
            .await
            .unwrap_or_else(|e| panic!("lease: {e}"))
            .id();
        let w = c
            .watch(tok(i), Some(WatchOptions::new()))
            .await
            .unwrap_or_else(|e| panic!("watch: {e}"));
        clients.push(c);
        leases.push(lease);
        watches.push(w);
    }
    let passed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (i, (mut c, mut w)) in clients.into_iter().zip(watches).enumerate() {
        let next = (i + RING_SLOTS) % RING_MEMBERS;
        let (mine, theirs) = (leases[i], leases[next]);
        let (my_tok, next_tok) = (tok(i), tok(next));
        let before_me = tok((i + RING_MEMBERS - RING_SLOTS) % RING_MEMBERS);
        let passed = passed.clone();
        tasks.push(tokio::spawn(async move {
            let mut watch_id = -1;
            // a new watch from now may land on a member behind the one that answered the
            // handoff (the client balances over the endpoints), which shows that put again
            let mut handed_at = 0;
            loop {
                let revision = match w.message().await {
                    Ok(Some(r)) if r.created() => {
                        // the first watch made on a stream is the token's
                        if watch_id < 0 {
                            watch_id = r.watch_id();
                        }
                        continue;
                    }
                    Ok(Some(r)) if r.watch_id() != watch_id => continue,
                    Ok(Some(r)) => match r
                        .events()
                        .iter()
                        .filter(|e| e.event_type() == EventType::Put)
                        .filter_map(|e| e.kv())
                        .find(|kv| kv.mod_revision() > handed_at)
                    {
                        Some(kv) => kv.mod_revision(),
                        None => continue,
                    },
                    other => panic!("ring watch ended: {other:?}"),
                };
                // this client's next token comes only after this one went round its chain
                if costs.new_watch {
                    watch_id = -1;
                    w = c
                        .watch(my_tok.as_str(), Some(WatchOptions::new()))
                        .await
                        .unwrap_or_else(|e| panic!("watch: {e}"));
                    if costs.extra_watch {
                        w.watch(before_me.as_str(), Some(WatchOptions::new()))
                            .await
                            .unwrap_or_else(|e| panic!("watch: {e}"));
                    }
                } else if costs.rewatch {
                    w.cancel(watch_id)
                        .await
                        .unwrap_or_else(|e| panic!("cancel: {e}"));
                    watch_id = -1;
                    w.watch(my_tok.as_str(), Some(WatchOptions::new()))
                        .await
                        .unwrap_or_else(|e| panic!("watch: {e}"));
                }
                let mut handoff = Txn::new()
                    .when([Compare::mod_revision(
                        my_tok.as_str(),
                        CompareOp::Equal,
                        revision,
                    )])
                    .and_then([
                        TxnOp::delete(my_tok.as_str(), None),
                        TxnOp::put(
                            next_tok.as_str(),
                            "holder",
                            Some(PutOptions::new().with_lease(theirs)),
                        ),
                    ]);
                if let Some(e) = untried_offers(costs.offers, &my_tok, revision, &next_tok, theirs)
                {
                    handoff = handoff.or_else([TxnOp::txn(e)]);
                }
                let handed = c
                    .txn(handoff)
                    .await
                    .unwrap_or_else(|e| panic!("handoff: {e}"));
                assert!(handed.succeeded(), "{my_tok}: the token's handoff failed");
                handed_at = handed.header().map_or(revision, |h| h.revision());
                if costs.read {
                    c.get(
                        "/floor/ring/queue/",
                        Some(GetOptions::new().with_prefix().with_count_only()),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("read: {e}"));
                }
                let key = format!("/floor/ring/queue/{i:02}");
                let mut join = vec![TxnOp::put(
                    key.as_str(),
                    "waiting",
                    Some(PutOptions::new().with_lease(mine)),
                )];
                if costs.scan {
                    let ahead = GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_sort(SortTarget::Create, SortOrder::Descend)
                        .with_limit(6);
                    join.push(TxnOp::get("/floor/ring/queue/", Some(ahead)));
                }
                c.txn(Txn::new().and_then(join))
                    .await
                    .unwrap_or_else(|e| panic!("join: {e}"));
                passed.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut starter = client(etcd).await;
    for (i, &lease) in leases.iter().enumerate().take(RING_SLOTS) {
        starter
            .put(tok(i), "holder", Some(PutOptions::new().with_lease(lease)))
            .await
            .unwrap_or_else(|e| panic!("put: {e}"));
    }
    // one second to get going, then count
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (t0, before) = (Instant::now(), passed.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(RING_SECS)).await;
    let total = passed.load(Ordering::Relaxed) - before;
    let elapsed = t0.elapsed().as_secs_f64();
    for t in tasks {
        t.abort();
    }
    println!(
        "etcd-floor ring members={RING_MEMBERS} slots={RING_SLOTS} handoffs_per_s={:.0} costs={costs:?}",
        total as f64 / elapsed
    );
}
