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
//!   through a watch can take (p50/p99 ms).

#[path = "../tests/support/etcd.rs"]
mod etcd;
mod support {
    pub mod client;
}

use std::time::{Duration, Instant};

use etcd::EtcdCluster;
use etcd_client::{Compare, CompareOp, Txn, TxnOp, WatchOptions};
use support::client::client;

const SEQ: usize = 500;
const CONC_SECS: u64 = 5;
const CHAIN: usize = 300;

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
    });
}
