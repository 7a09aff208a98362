//! The fleet budget (issue 21) against a real 3-member TLS etcd cluster on loopback
//! (`tests/support/etcd.rs`): the harness itself first, then the fleet module's guarantees
//! read from etcd's own revision history.

mod support;

use std::time::{Duration, Instant};

use support::etcd::*;

/// The harness does what the fleet tests rely on: a TLS cluster that keeps quorum with one
/// member gone, loses it with two gone, and comes back when they return on their data dirs.
#[test]
fn etcd_harness_keeps_quorum_with_one_member_lost_not_two() {
    let Some(mut etcd) = require_etcd(3) else {
        return;
    };
    assert_eq!(etcd.endpoints().len(), 3);
    assert!(
        etcd.endpoints()
            .iter()
            .all(|e| e.starts_with("https://127.0.0.1:"))
    );
    etcd.put("/pgt/a", "1").unwrap();
    assert_eq!(etcd.get("/pgt/a").unwrap().as_deref(), Some("1"));
    // what benches/fleet.rs counts
    let metrics = etcd.metrics(0).unwrap();
    for name in [
        "etcd_server_has_leader",
        "grpc_server_msg_received_total",
        "etcd_mvcc_put_total",
        "etcd_mvcc_txn_total",
    ] {
        assert!(metrics.contains(name), "no {name} in /metrics");
    }

    etcd.kill_member(0);
    let took = etcd
        .put_within("/pgt/b", "2", Duration::from_secs(20))
        .expect("writable with 2 of 3 members");
    eprintln!("writable again {took:?} after one member was killed");

    etcd.kill_member(1);
    let t = Instant::now();
    let err = etcd.put("/pgt/c", "3");
    assert!(err.is_err(), "a write without quorum succeeded");
    assert!(t.elapsed() < Duration::from_secs(20), "etcdctl hung");

    etcd.start_members(&[0, 1]).expect("members rejoin");
    etcd.put_within("/pgt/d", "4", Duration::from_secs(20))
        .expect("writable again");
    assert_eq!(etcd.get("/pgt/b").unwrap().as_deref(), Some("2"));
    // A write that timed out without quorum may still commit once the members return (the
    // leader had it in its log): a client must treat a timed-out write as "unknown", not
    // "failed". So /pgt/c is either there or not; drop it for the checks below.
    etcd.etcdctl(&["del", "/pgt/c"]).unwrap();

    let kvs = etcd.get_prefix("/pgt/").unwrap();
    let keys: Vec<&str> = kvs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["/pgt/a", "/pgt/b", "/pgt/d"]);

    etcd.etcdctl(&["del", "/pgt/a"]).unwrap();
    let h = etcd.history("/pgt/").unwrap();
    let seen: Vec<(&str, bool)> = h
        .iter()
        .filter(|e| e.key != "/pgt/c")
        .map(|e| (e.key.as_str(), e.delete))
        .collect();
    assert_eq!(
        seen,
        [
            ("/pgt/a", false),
            ("/pgt/b", false),
            ("/pgt/d", false),
            ("/pgt/a", true)
        ]
    );
    assert!(h.windows(2).all(|w| w[0].revision < w[1].revision));
    assert_eq!(h[0].value, "1");
}

/// Bad client material is refused by the servers, and auth works as the fleet tests need.
#[test]
fn etcd_harness_refuses_foreign_certificates_and_wrong_passwords() {
    let Some(mut etcd) = require_etcd(3) else {
        return;
    };
    let ep = etcd.endpoint(0);
    let ctl = |ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path| {
        run_limited(
            std::process::Command::new(ETCDCTL)
                .arg(format!("--endpoints={ep}"))
                .arg(format!("--cacert={}", ca.display()))
                .arg(format!("--cert={}", cert.display()))
                .arg(format!("--key={}", key.display()))
                .args(["--dial-timeout=2s", "--command-timeout=3s", "get", "/x"]),
            Duration::from_secs(20),
        )
        .unwrap()
        .status
        .success()
    };
    assert!(ctl(&etcd.ca(), &etcd.client_cert(), &etcd.client_key()));
    assert!(!ctl(
        &etcd.wrong_ca(),
        &etcd.client_cert(),
        &etcd.client_key()
    ));
    assert!(!ctl(
        &etcd.ca(),
        &etcd.foreign_client_cert(),
        &etcd.foreign_client_key()
    ));
    assert!(!ctl(
        &etcd.ca(),
        &etcd.self_signed_cert(),
        &etcd.self_signed_key()
    ));

    etcd.enable_auth("fleet", "s3cret", "/pleg-guard/").unwrap();
    // the harness itself goes on as root
    etcd.put("/pleg-guard/t", "1").unwrap();
    let as_user =
        |user: &str| etcd.etcdctl(&[&format!("--user={user}"), "put", "/pleg-guard/u", "1"]);
    as_user("fleet:s3cret").expect("the fleet user may write its prefix");
    assert!(as_user("fleet:wrong").is_err());
    assert!(
        etcd.etcdctl(&["--user=fleet:s3cret", "put", "/elsewhere", "1"])
            .is_err(),
        "the fleet user may write only its prefix"
    );
}

/// The harness's certificates suit the Rust client the fleet module uses (etcd-client over
/// tonic + rustls): ECDSA P-256 keys, an IP SAN for 127.0.0.1, a client certificate with
/// clientAuth. A client trusting another CA cannot connect.
#[test]
fn etcd_harness_certificates_suit_the_rust_client() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let tls_with = |ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path| {
        let read = |p: &std::path::Path| std::fs::read(p).expect("a harness file");
        etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(read(ca)))
            .identity(etcd_client::Identity::from_pem(read(cert), read(key)))
    };
    let tls = |ca: &std::path::Path| tls_with(ca, &etcd.client_cert(), &etcd.client_key());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let opts = etcd_client::ConnectOptions::new()
            .with_tls(tls(&etcd.ca()))
            .with_timeout(Duration::from_secs(5))
            .with_connect_timeout(Duration::from_secs(5));
        let mut c = etcd_client::Client::connect(etcd.endpoints(), Some(opts))
            .await
            .expect("connect with the harness's certificates");
        c.put("/pgt/rust", "ok", None).await.expect("put");
        let r = c.get("/pgt/rust", None).await.expect("get");
        assert_eq!(r.kvs().first().map(|kv| kv.value()), Some(&b"ok"[..]));

        let opts = etcd_client::ConnectOptions::new()
            .with_tls(tls(&etcd.wrong_ca()))
            .with_timeout(Duration::from_secs(3))
            .with_connect_timeout(Duration::from_secs(3));
        let r = match etcd_client::Client::connect(etcd.endpoints(), Some(opts)).await {
            Ok(mut c) => c.get("/pgt/rust", None).await.map(|_| ()),
            Err(e) => Err(e),
        };
        eprintln!("a client trusting another CA: {r:?}");
        assert!(r.is_err(), "a client trusting another CA read the cluster");

        let opts = etcd_client::ConnectOptions::new()
            .with_tls(tls_with(
                &etcd.ca(),
                &etcd.foreign_client_cert(),
                &etcd.foreign_client_key(),
            ))
            .with_timeout(Duration::from_secs(3))
            .with_connect_timeout(Duration::from_secs(3));
        let r = match etcd_client::Client::connect(etcd.endpoints(), Some(opts)).await {
            Ok(mut c) => c.get("/pgt/rust", None).await.map(|_| ()),
            Err(e) => Err(e),
        };
        eprintln!("a client with a certificate of another CA: {r:?}");
        assert!(
            r.is_err(),
            "a client with a foreign certificate read the cluster"
        );
    });
    assert_eq!(etcd.get("/pgt/rust").unwrap().as_deref(), Some("ok"));
}

// ------------------------------------------------------------------------------------------------
// the fleet module against the cluster
// ------------------------------------------------------------------------------------------------

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pleg_guard::fleet::{Fleet, FleetError, FleetSettings, SlotState, TlsFiles, Urgency};
use pleg_guard::target::ActionKind;

const PREFIX: &str = "/pleg-guard";

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Settings for `node` in `group` against the whole cluster, with the cluster's good TLS files.
fn settings(etcd: &EtcdCluster, group: &str, node: &str, max: &str) -> FleetSettings {
    etcd.fleet_settings(group, node, max, secs(5), secs(2))
}

/// A current-thread runtime like the daemon's.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Waits (on the fleet's own change notifications) until `cond` holds for its state.
async fn wait_state(
    fleet: &mut Fleet,
    what: &str,
    within: Duration,
    cond: impl Fn(&SlotState) -> bool,
) -> Result<Duration, String> {
    let start = tokio::time::Instant::now();
    let deadline = start + within;
    loop {
        let s = fleet.state();
        if cond(&s) {
            return Ok(start.elapsed());
        }
        if tokio::time::timeout_at(deadline, fleet.changed())
            .await
            .is_err()
        {
            return Err(format!("{what}: still {s:?} after {within:?}"));
        }
    }
}

/// Waits until etcd holds `n` member keys of `group`.
async fn members_in_etcd(etcd: &EtcdCluster, group: &str, n: usize, within: Duration) {
    let prefix = format!("{PREFIX}/{group}/members/");
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let have = etcd.get_prefix(&prefix).map(|kvs| kvs.len()).unwrap_or(0);
        if have == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{have} member keys in etcd, not {n}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Watches `fleet` for `during` and fails if it is ever Granted.
async fn never_granted(fleet: &mut Fleet, during: Duration) -> Result<(), String> {
    match wait_state(fleet, "", during, |s| {
        matches!(s, SlotState::Granted { .. })
    })
    .await
    {
        Ok(after) => Err(format!("granted after {after:?}: {:?}", fleet.state())),
        Err(_) => Ok(()),
    }
}

/// The holders after each revision, replayed from etcd's history of
/// `<prefix>/<group>/holders/` (one key per slot index, its value naming the node).
struct Replay {
    /// (revision, nodes holding after it), one entry per revision that touched holders/.
    holders: Vec<(i64, Vec<String>)>,
    /// For each node, the revisions at which it became a holder.
    grants: BTreeMap<String, Vec<i64>>,
    /// For each node, the revisions at which its holder key went away (release or expiry)
    /// or was handed to the next waiter.
    ends: BTreeMap<String, Vec<i64>>,
    /// Releases that handed their slot straight over (a put over a held holder key).
    handoffs: usize,
}

impl Replay {
    fn of(etcd: &EtcdCluster, group: &str) -> Replay {
        let prefix = format!("{PREFIX}/{group}/holders/");
        let events = etcd.history(&prefix).expect("etcd's revision history");
        // slot index -> node
        let mut slots: BTreeMap<String, String> = BTreeMap::new();
        let mut r = Replay {
            holders: Vec::new(),
            grants: BTreeMap::new(),
            ends: BTreeMap::new(),
            handoffs: 0,
        };
        let mut i = 0;
        while i < events.len() {
            let rev = events[i].revision;
            while i < events.len() && events[i].revision == rev {
                let e = &events[i];
                if e.delete {
                    if let Some(node) = slots.remove(&e.key) {
                        r.ends.entry(node).or_default().push(rev);
                    }
                } else {
                    let node = serde_json::from_str::<serde_json::Value>(&e.value)
                        .ok()
                        .and_then(|v| v["node"].as_str().map(str::to_string))
                        .unwrap_or_else(|| format!("? {}", e.key));
                    r.grants.entry(node.clone()).or_default().push(rev);
                    // a put over a held slot: a release that handed it over (issue 28)
                    if let Some(before) = slots.insert(e.key.clone(), node) {
                        r.ends.entry(before).or_default().push(rev);
                        r.handoffs += 1;
                    }
                }
                i += 1;
            }
            let mut held: Vec<String> = slots.values().cloned().collect();
            held.sort();
            r.holders.push((rev, held));
        }
        r
    }

    /// The most holders at any revision, and the first revision where that many held.
    fn max_holders(&self) -> (usize, i64) {
        self.holders
            .iter()
            .map(|(rev, h)| (h.len(), -rev))
            .max()
            .map(|(n, r)| (n, -r))
            .unwrap_or((0, 0))
    }

    /// The most holders at any revision after `rev`.
    fn max_holders_after(&self, rev: i64) -> usize {
        self.holders
            .iter()
            .filter(|(r, _)| *r > rev)
            .map(|(_, h)| h.len())
            .max()
            .unwrap_or(0)
    }

    fn grants_of(&self, node: &str) -> &[i64] {
        self.grants.get(node).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// One client's turn in the contention test.
#[derive(Debug, Clone, Copy)]
struct Turn {
    wait: Duration,
    held: Duration,
}

/// 24 clients, max_disruptive "2", each takes the slot three times: etcd's own history never
/// shows more than 2 holders, every client is served every round, and none waits much longer
/// than a FIFO queue of its peers takes.
#[test]
fn contention_never_more_than_two_holders_and_none_starves() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    const CLIENTS: usize = 24;
    const ROUNDS: usize = 3;
    let group = "contention";
    let rt = runtime();
    let local = tokio::task::LocalSet::new();
    let started = Instant::now();
    let turns: Vec<Vec<Turn>> = local.block_on(&rt, async {
        let mut fleets = Vec::new();
        for i in 0..CLIENTS {
            let s = settings(&etcd, group, &format!("node-{i:02}"), "2");
            fleets.push(Fleet::start(s).expect("Fleet::start"));
        }
        // every member registered before the first request, so the first round is fair too
        // (an idle member reads nothing: etcd itself says who is registered)
        members_in_etcd(&etcd, group, CLIENTS, secs(30)).await;
        let mut tasks = Vec::new();
        for (i, mut fleet) in fleets.into_iter().enumerate() {
            tasks.push(tokio::task::spawn_local(async move {
                let mut turns = Vec::new();
                for round in 0..ROUNDS {
                    let asked = Instant::now();
                    fleet.request(ActionKind::RestartKubelet, Urgency::Planned);
                    let granted = fleet.wait_granted(secs(120)).await;
                    assert!(granted, "node-{i:02} round {round}: {:?}", fleet.state());
                    let wait = asked.elapsed();
                    let hold_ms = 200 + ((i * 7 + round * 13) % 4) as u64 * 100;
                    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                    fleet.release();
                    wait_state(&mut fleet, "idle after release", secs(20), |s| {
                        matches!(s, SlotState::Idle)
                    })
                    .await
                    .unwrap_or_else(|e| panic!("node-{i:02}: {e}"));
                    turns.push(Turn {
                        wait,
                        held: asked.elapsed() - wait,
                    });
                }
                fleet.shutdown().await;
                turns
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.expect("a client task"));
        }
        all
    });
    let elapsed = started.elapsed();

    let replay = Replay::of(&etcd, group);
    let (max, at) = replay.max_holders();
    assert!(
        max <= 2,
        "{max} holders at revision {at}: {:?}",
        replay.holders
    );
    assert_eq!(max, 2, "the two slots were never both used: no contention");
    for i in 0..CLIENTS {
        let node = format!("node-{i:02}");
        assert_eq!(
            replay.grants_of(&node).len(),
            ROUNDS,
            "{node}'s grants in etcd's history: {:?}",
            replay.grants_of(&node)
        );
    }

    let waits: Vec<Duration> = turns.iter().flatten().map(|t| t.wait).collect();
    let max_wait = waits.iter().max().copied().unwrap_or_default();
    let mean_wait = waits.iter().sum::<Duration>() / waits.len() as u32;
    let mean_held = turns.iter().flatten().map(|t| t.held).sum::<Duration>() / waits.len() as u32;
    // the time one grant keeps a slot busy, handoff included: run time per grant per slot
    let turn = elapsed * 2 / (CLIENTS * ROUNDS) as u32;
    let bound = turn * (CLIENTS as u32 / 2 + 2);
    eprintln!(
        "contention: {CLIENTS} clients x {ROUNDS} rounds, 2 slots, {elapsed:?}; wait mean \
         {mean_wait:?} max {max_wait:?}; held (hold + release) mean {mean_held:?}; slot turn \
         {turn:?}; fairness bound {bound:?}; {} revisions touched holders/",
        replay.holders.len()
    );
    assert!(
        max_wait <= bound,
        "a client waited {max_wait:?}, more than {} slot turns ({bound:?})",
        CLIENTS / 2 + 2
    );
}

/// The child half of [`sigkilled_holder_frees_its_slot_within_lease_ttl`]: does nothing unless
/// the parent re-executes this binary with `PLEG_FLEET_CHILD` set; then it takes the slot,
/// says `GRANTED` on stdout and sleeps until it is killed.
#[test]
fn fleet_child_holds_a_slot() {
    let Ok(spec) = std::env::var("PLEG_FLEET_CHILD") else {
        return;
    };
    // endpoints|ca|cert|key|group|node
    let parts: Vec<&str> = spec.split('|').collect();
    assert_eq!(parts.len(), 6, "PLEG_FLEET_CHILD: {spec}");
    let s = FleetSettings {
        endpoints: parts[0].split(',').map(str::to_string).collect(),
        group: parts[4].to_string(),
        prefix: PREFIX.to_string(),
        node: parts[5].to_string(),
        max_disruptive: "1".parse().expect("max_disruptive"),
        lease_ttl: secs(5),
        request_timeout: secs(2),
        tls: Some(TlsFiles {
            ca_file: Some(parts[1].into()),
            cert_file: Some(parts[2].into()),
            key_file: Some(parts[3].into()),
        }),
        auth: None,
        max_unhealthy: Default::default(),
        storm_exempt: Vec::new(),
        kubernetes: None,
    };
    runtime().block_on(async {
        let mut fleet = Fleet::start(s).expect("Fleet::start");
        fleet.request(ActionKind::DaemonReexec, Urgency::Emergency);
        assert!(fleet.wait_granted(secs(30)).await, "{:?}", fleet.state());
        println!("GRANTED");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        tokio::time::sleep(secs(600)).await;
    });
}

/// A holder SIGKILLed mid-action: its slot frees through the lease within lease_ttl (5 s), the
/// waiter gets it only then, and etcd's history never shows both holding.
#[test]
fn sigkilled_holder_frees_its_slot_within_lease_ttl() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let group = "sigkill";
    let spec = [
        etcd.endpoints().join(","),
        etcd.ca().display().to_string(),
        etcd.client_cert().display().to_string(),
        etcd.client_key().display().to_string(),
        group.to_string(),
        "doomed".to_string(),
    ]
    .join("|");
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = if std::path::Path::new("/usr/bin/setpriv").exists() {
        let mut c = std::process::Command::new("/usr/bin/setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(&exe);
        c
    } else {
        std::process::Command::new(&exe)
    };
    cmd.args([
        "--exact",
        "fleet_child_holds_a_slot",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("PLEG_FLEET_CHILD", spec)
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::inherit());
    let mut child = cmd.spawn().expect("re-executing the test binary");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            // libtest may print the test's name on the same line first
            if line.trim().ends_with("GRANTED") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(secs(60)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child never held the slot");
    }

    let rt = runtime();
    let (since_kill, kill_rev) = rt.block_on(async {
        let mut waiter = Fleet::start(settings(&etcd, group, "survivor", "1")).expect("start");
        waiter.request(ActionKind::DaemonReexec, Urgency::Emergency);
        wait_state(&mut waiter, "waiting", secs(20), |s| {
            matches!(s, SlotState::Waiting { .. })
        })
        .await
        .unwrap();
        never_granted(&mut waiter, secs(2))
            .await
            .expect("granted while the child held the only slot");
        let kill_rev = etcd.revision().expect("revision");
        let killed = Instant::now();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            waiter.wait_granted(secs(15)).await,
            "not granted 15 s after the holder died: {:?}",
            waiter.state()
        );
        let since_kill = killed.elapsed();
        waiter.release();
        waiter.shutdown().await;
        (since_kill, kill_rev)
    });
    eprintln!("the slot of a SIGKILLed holder went to the waiter {since_kill:?} after the kill");
    assert!(
        since_kill <= secs(5) + Duration::from_millis(2500),
        "granted {since_kill:?} after the kill, lease_ttl is 5 s"
    );

    let replay = Replay::of(&etcd, group);
    let (max, at) = replay.max_holders();
    assert_eq!(
        max, 1,
        "{max} holders at revision {at}: {:?}",
        replay.holders
    );
    let doomed_end = replay.ends.get("doomed").and_then(|e| e.first().copied());
    let survivor = replay.grants_of("survivor").first().copied();
    let (Some(end), Some(granted)) = (doomed_end, survivor) else {
        panic!(
            "history lacks the expiry or the grant: {:?}",
            replay.holders
        );
    };
    assert!(
        end > kill_rev,
        "the child's slot went before the kill (rev {end} <= {kill_rev})"
    );
    assert!(
        granted > end,
        "granted at rev {granted}, before the expiry at {end}"
    );
}

/// One member killed: a client is still granted. Two killed (no quorum): it becomes
/// Unreachable within a few request timeouts and its standing request is not granted. The
/// members return: it recovers on its own and is granted.
#[test]
fn quorum_loss_makes_clients_unreachable_and_they_recover() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let group = "quorum";
    let s = settings(&etcd, group, "lonely", "1");
    let etcd = Arc::new(Mutex::new(etcd));
    let ctl = |f: Box<dyn FnOnce(&mut EtcdCluster) + Send>| {
        let etcd = etcd.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut e = etcd.lock().unwrap_or_else(|p| p.into_inner());
                f(&mut e)
            })
            .await
            .expect("cluster control");
        }
    };
    let rt = runtime();
    rt.block_on(async {
        let mut fleet = Fleet::start(s).expect("start");
        wait_state(&mut fleet, "idle", secs(20), |s| {
            matches!(s, SlotState::Idle)
        })
        .await
        .unwrap();

        ctl(Box::new(|e| e.kill_member(0))).await;
        fleet.request(ActionKind::RestartKubelet, Urgency::Emergency);
        assert!(
            fleet.wait_granted(secs(20)).await,
            "not granted with 2 of 3 members: {:?}",
            fleet.state()
        );
        fleet.release();
        wait_state(&mut fleet, "idle", secs(20), |s| {
            matches!(s, SlotState::Idle)
        })
        .await
        .unwrap();

        ctl(Box::new(|e| e.kill_member(1))).await;
        let lost = Instant::now();
        fleet.request(ActionKind::RestartKubelet, Urgency::Emergency);
        // request_timeout is 2 s: a few of them, and the lease's keep-alive failing
        let took = wait_state(&mut fleet, "unreachable", secs(12), |s| {
            matches!(s, SlotState::Unreachable { .. })
        })
        .await
        .unwrap();
        eprintln!("unreachable {took:?} after quorum was lost");
        never_granted(&mut fleet, secs(4))
            .await
            .expect("granted without quorum");
        assert!(!fleet.view().reachable, "{:?}", fleet.view());

        ctl(Box::new(|e| {
            e.start_members(&[0, 1]).expect("the members return")
        }))
        .await;
        let back = Instant::now();
        assert!(
            fleet.wait_granted(secs(40)).await,
            "no recovery 40 s after the members returned: {:?}",
            fleet.state()
        );
        eprintln!(
            "recovered and granted {:?} after the members returned ({:?} after quorum was lost)",
            back.elapsed(),
            lost.elapsed()
        );
        assert!(fleet.view().reachable);
        fleet.release();
        fleet.shutdown().await;
    });
    let etcd = etcd.lock().unwrap_or_else(|p| p.into_inner());
    let replay = Replay::of(&etcd, group);
    assert_eq!(replay.max_holders().0, 1, "{:?}", replay.holders);
    assert_eq!(replay.grants_of("lonely").len(), 2, "{:?}", replay.holders);
}

/// "50%" of 4 live members is 2 slots; when 2 members shut down it is 1.
#[test]
fn share_budget_follows_the_live_members() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let group = "share";
    let rt = runtime();
    let shrunk_at = rt.block_on(async {
        let mut f: Vec<Fleet> = (0..4)
            .map(|i| Fleet::start(settings(&etcd, group, &format!("n{i}"), "50%")).expect("start"))
            .collect();
        members_in_etcd(&etcd, group, 4, secs(30)).await;
        for fl in &f[..3] {
            fl.request(ActionKind::RestartKubelet, Urgency::Planned);
        }
        // two granted, the third waits with max 2
        let deadline = Instant::now() + secs(30);
        let granted = loop {
            let g: Vec<usize> = (0..3)
                .filter(|&i| matches!(f[i].state(), SlotState::Granted { .. }))
                .collect();
            if g.len() >= 2 || Instant::now() > deadline {
                break g;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            granted.len(),
            2,
            "states: {:?}",
            f.iter().map(Fleet::state).collect::<Vec<_>>()
        );
        let third = (0..3).find(|i| !granted.contains(i)).unwrap_or(2);
        assert_eq!(
            f[third].view().max_disruptive,
            Some(2),
            "{:?}",
            f[third].view()
        );
        never_granted(&mut f[third], secs(1))
            .await
            .expect("a third holder under 50% of 4");
        assert!(
            matches!(f[third].state(), SlotState::Waiting { max: 2, .. }),
            "{:?}",
            f[third].state()
        );
        // everyone done; then two members leave
        for &g in &granted {
            f[g].release();
        }
        assert!(
            f[third].wait_granted(secs(20)).await,
            "{:?}",
            f[third].state()
        );
        f[third].release();
        for fl in f.iter_mut() {
            wait_state(fl, "idle", secs(20), |s| matches!(s, SlotState::Idle))
                .await
                .unwrap();
        }
        let n3 = f.pop().expect("n3");
        let n2 = f.pop().expect("n2");
        n3.shutdown().await;
        n2.shutdown().await;
        members_in_etcd(&etcd, group, 2, secs(20)).await;
        let shrunk_at = etcd.revision().expect("revision");
        f[0].request(ActionKind::RestartKubelet, Urgency::Planned);
        assert!(f[0].wait_granted(secs(20)).await, "{:?}", f[0].state());
        // the asking member read the group: a share of 2 members
        assert_eq!(f[0].view().members_alive, Some(2), "{:?}", f[0].view());
        assert_eq!(f[0].view().max_disruptive, Some(1), "{:?}", f[0].view());
        f[1].request(ActionKind::RestartKubelet, Urgency::Planned);
        never_granted(&mut f[1], secs(2))
            .await
            .expect("a second holder under 50% of 2");
        assert!(
            matches!(f[1].state(), SlotState::Waiting { max: 1, .. }),
            "{:?}",
            f[1].state()
        );
        f[0].release();
        assert!(f[1].wait_granted(secs(20)).await, "{:?}", f[1].state());
        f[1].release();
        for fl in f {
            fl.shutdown().await;
        }
        shrunk_at
    });
    let replay = Replay::of(&etcd, group);
    assert_eq!(replay.max_holders().0, 2, "{:?}", replay.holders);
    assert_eq!(
        replay.max_holders_after(shrunk_at),
        1,
        "after 2 members left: {:?}",
        replay.holders
    );
}

/// A client with the wrong CA, or with a certificate from another CA, gets FleetError::Tls from
/// check, and a started one is Rejected and never Granted (nothing of it reaches etcd).
#[test]
fn bad_tls_is_rejected_and_never_granted() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let group = "badtls";
    let mut wrong_ca = settings(&etcd, group, "wrong-ca", "1");
    if let Some(t) = wrong_ca.tls.as_mut() {
        t.ca_file = Some(etcd.wrong_ca());
    }
    let mut foreign = settings(&etcd, group, "foreign-cert", "1");
    if let Some(t) = foreign.tls.as_mut() {
        t.cert_file = Some(etcd.foreign_client_cert());
        t.key_file = Some(etcd.foreign_client_key());
    }
    let mut self_signed = settings(&etcd, group, "self-signed", "1");
    if let Some(t) = self_signed.tls.as_mut() {
        t.cert_file = Some(etcd.self_signed_cert());
        t.key_file = Some(etcd.self_signed_key());
    }
    let good = settings(&etcd, group, "good", "1");
    runtime().block_on(async {
        assert!(Fleet::check(&good).await.is_ok(), "the good settings fail");
        for bad in [&wrong_ca, &foreign, &self_signed] {
            let r = Fleet::check(bad).await;
            assert!(matches!(r, Err(FleetError::Tls(_))), "{}: {r:?}", bad.node);
        }
        for bad in [wrong_ca.clone(), foreign.clone(), self_signed.clone()] {
            let node = bad.node.clone();
            let mut fleet = Fleet::start(bad).expect("start validates files only");
            fleet.request(ActionKind::RestartKubelet, Urgency::Emergency);
            wait_state(&mut fleet, &node, secs(20), |s| {
                matches!(s, SlotState::Rejected { .. })
            })
            .await
            .unwrap();
            never_granted(&mut fleet, secs(3)).await.expect(&node);
            fleet.shutdown().await;
        }
    });
    let keys = etcd.get_prefix(&format!("{PREFIX}/{group}/")).unwrap();
    assert!(keys.is_empty(), "rejected clients wrote {keys:?}");
    let replay = Replay::of(&etcd, group);
    assert!(replay.holders.is_empty(), "{:?}", replay.holders);
}

/// With etcd's auth enabled, a wrong password gets FleetError::Auth from check, and a started
/// client is Rejected and never Granted; the right password is granted.
#[test]
fn bad_auth_is_rejected_and_never_granted() {
    let Some(mut etcd) = require_etcd(3) else {
        return;
    };
    let group = "badauth";
    etcd.enable_auth("fleet", "s3cret", &format!("{PREFIX}/"))
        .expect("enable auth");
    let mut wrong = settings(&etcd, group, "wrong-pw", "1");
    wrong.auth = Some(("fleet".to_string(), "nope".to_string()));
    let mut nobody = settings(&etcd, group, "no-user", "1");
    nobody.auth = Some(("nobody".to_string(), "s3cret".to_string()));
    let mut right = settings(&etcd, group, "right-pw", "1");
    right.auth = Some(("fleet".to_string(), "s3cret".to_string()));
    runtime().block_on(async {
        for bad in [&wrong, &nobody] {
            let r = Fleet::check(bad).await;
            assert!(matches!(r, Err(FleetError::Auth(_))), "{}: {r:?}", bad.node);
        }
        let r = Fleet::check(&right).await;
        assert!(r.is_ok(), "the right password: {r:?}");

        let mut fleet = Fleet::start(wrong.clone()).expect("start");
        fleet.request(ActionKind::RestartKubelet, Urgency::Emergency);
        wait_state(&mut fleet, "rejected", secs(20), |s| {
            matches!(s, SlotState::Rejected { .. })
        })
        .await
        .unwrap();
        never_granted(&mut fleet, secs(3))
            .await
            .expect("wrong password");
        fleet.shutdown().await;

        let mut fleet = Fleet::start(right.clone()).expect("start");
        fleet.request(ActionKind::RestartKubelet, Urgency::Emergency);
        assert!(fleet.wait_granted(secs(20)).await, "{:?}", fleet.state());
        fleet.release();
        fleet.shutdown().await;
    });
    let replay = Replay::of(&etcd, group);
    assert!(
        replay.grants_of("wrong-pw").is_empty(),
        "{:?}",
        replay.holders
    );
    assert_eq!(
        replay.grants_of("right-pw").len(),
        1,
        "{:?}",
        replay.holders
    );
}

/// `check-config --connect`: with the cluster's files it reads the group (exit 0); with a
/// wrong CA it says TLS failed (exit 3); with a member list of dead ports, unreachable (3).
#[test]
fn check_config_connect_reports_tls_and_reachability() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let dir = etcd.dir().join("check-config");
    std::fs::create_dir_all(&dir).expect("config dir");
    let write = |name: &str, endpoints: &[String], ca: &std::path::Path| {
        let list: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "[fleet]\netcd_endpoints = [{}]\ngroup = \"cc\"\nnode = \"checker\"\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
                list.join(", "),
                ca.display(),
                etcd.client_cert().display(),
                etcd.client_key().display()
            ),
        )
        .expect("write config");
        path
    };
    let run = |path: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pleg-guard"))
            .args(["check-config", "--connect"])
            .arg(path)
            .output()
            .expect("pleg-guard check-config");
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let good = write("good.toml", &etcd.endpoints(), &etcd.ca());
    let (code, out) = run(&good);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("etcd ok; group cc"), "{out}");
    // diagnose shows the group beside the node's own targets (it only reads)
    let diag = std::process::Command::new(env!("CARGO_BIN_EXE_pleg-guard"))
        .args(["diagnose", "--json", "--config"])
        .arg(&good)
        .output()
        .expect("pleg-guard diagnose");
    let report: serde_json::Value =
        serde_json::from_slice(&diag.stdout).expect("diagnose --json is JSON");
    assert_eq!(report["fleet"]["group"], "cc", "{}", report["fleet"]);
    assert_eq!(report["fleet"]["reachable"], true, "{}", report["fleet"]);
    assert_eq!(
        report["fleet"]["this_node"]["state"], "idle",
        "{}",
        report["fleet"]
    );

    let bad_ca = write("bad-ca.toml", &etcd.endpoints(), &etcd.wrong_ca());
    let (code, out) = run(&bad_ca);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("TLS with etcd failed"), "{out}");

    let dead = write(
        "dead.toml",
        &["https://127.0.0.1:1".to_string()],
        &etcd.ca(),
    );
    let started = Instant::now();
    let (code, out) = run(&dead);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("etcd unreachable"), "{out}");
    assert!(started.elapsed() < secs(10), "took {:?}", started.elapsed());
}

/// The sum of `grpc_server_msg_received_total` per gRPC method over every member, as etcd
/// itself counts what its clients sent.
fn received_by_method(etcd: &EtcdCluster) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for i in 0..etcd.len() {
        let text = etcd.metrics(i).expect("a member's /metrics");
        add_received_by_method(&text, &mut out);
    }
    out
}

/// An idle member (no request) costs etcd its lease's keep-alives and nothing else: no watch,
/// no read, no write, however long it stays idle, as etcd's own counters show.
#[test]
fn an_idle_member_makes_no_request_but_its_keep_alives() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let group = "idle";
    let rt = runtime();
    let (before, after) = rt.block_on(async {
        let mut fleet = Fleet::start(settings(&etcd, group, "sleeper", "1")).expect("start");
        members_in_etcd(&etcd, group, 1, secs(20)).await;
        // the start-up's calls (connect, lease, member key, one read) are over
        wait_state(&mut fleet, "idle", secs(10), |s| {
            matches!(s, SlotState::Idle)
        })
        .await
        .unwrap();
        tokio::time::sleep(secs(2)).await;
        let before = received_by_method(&etcd);
        // lease_ttl 5 s: a keep-alive every ~1.7 s
        tokio::time::sleep(secs(12)).await;
        let after = received_by_method(&etcd);
        fleet.shutdown().await;
        (before, after)
    });
    let grew: BTreeMap<&String, f64> = after
        .iter()
        .map(|(m, v)| (m, v - before.get(m).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    eprintln!("an idle member for 12 s, messages etcd received by method: {grew:?}");
    let keep_alives = grew
        .get(&"LeaseKeepAlive".to_string())
        .copied()
        .unwrap_or(0.0);
    assert!(
        keep_alives >= 4.0,
        "too few keep-alives for a 5 s lease in 12 s: {grew:?}"
    );
    assert!(
        grew.keys().all(|m| m.as_str() == "LeaseKeepAlive"),
        "an idle member asked etcd for more than keep-alives: {grew:?}"
    );
}

/// The watchers etcd serves now, over every member (its own gauge).
fn watchers(etcd: &EtcdCluster) -> f64 {
    (0..etcd.len())
        .map(|i| {
            let text = etcd.metrics(i).expect("a member's /metrics");
            text.lines()
                .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        })
        .sum()
}

/// Waits until the group's health as `fleet` sees it satisfies `cond`.
async fn wait_health(
    fleet: &mut Fleet,
    what: &str,
    within: Duration,
    cond: impl Fn(&pleg_guard::fleet::GroupHealth) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if fleet.view().health.as_ref().is_some_and(&cond) {
            return;
        }
        if tokio::time::timeout_at(deadline, fleet.changed())
            .await
            .is_err()
        {
            panic!(
                "{what}: the health is {:?} after {within:?}",
                fleet.view().health
            );
        }
    }
}

/// The storm guard at scale: a node that consults it reads the member keys once, then keeps
/// them by a watch. Asked again and again while nothing changes, it sends etcd nothing (a
/// read that asks whether any member key changed costs etcd 3.4 a look at every member key);
/// a member reporting findings, or going, reaches it through the watch, without a read; once
/// the guard stops asking, it watches nothing again. Against the real cluster, by etcd's own
/// counters.
#[test]
fn the_storm_guard_reads_the_members_once_then_hears_only_their_changes() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let group = "storm-cache";
    let member = |n: &str| format!("{PREFIX}/{group}/members/{n}");
    let rt = runtime();
    rt.block_on(async {
        let mut fleet = Fleet::start(settings(&etcd, group, "guard", "1")).expect("start");
        for n in ["n1", "n2", "n3", "n4", "n5", "n6"] {
            etcd.put(&member(n), &format!(r#"{{"node":"{n}","findings":[]}}"#))
                .unwrap();
        }
        members_in_etcd(&etcd, group, 7, secs(20)).await;
        let watching_before = watchers(&etcd);
        fleet.read_health();
        wait_health(&mut fleet, "the first read", secs(10), |h| h.members == 7).await;
        let ask = |fleet: &Fleet| fleet.read_health();

        // asked every 0.5 s while nothing changes: no read, no new watch
        let before = received_by_method(&etcd);
        for _ in 0..6 {
            ask(&fleet);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let quiet = received_by_method(&etcd);
        // a member reports a finding, another goes: the watch brings both
        etcd.put(
            &member("n1"),
            r#"{"node":"n1","findings":["logind-unresponsive"]}"#,
        )
        .unwrap();
        etcd.etcdctl(&["del", &member("n6")]).unwrap();
        wait_health(&mut fleet, "n1 sick, n6 gone", secs(5), |h| {
            h.members == 6 && h.unhealthy == ["n1"]
        })
        .await;
        ask(&fleet);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = received_by_method(&etcd);
        assert!(
            watchers(&etcd) > watching_before,
            "the member keys are watched while the guard asks"
        );
        let grew = |from: &BTreeMap<String, f64>, to: &BTreeMap<String, f64>| -> Vec<String> {
            to.iter()
                .filter(|(m, v)| **v > from.get(*m).copied().unwrap_or(0.0))
                .map(|(m, _)| m.clone())
                .filter(|m| m != "LeaseKeepAlive")
                .collect()
        };
        assert_eq!(
            grew(&before, &quiet),
            Vec::<String>::new(),
            "asked while nothing changed, the node sent etcd more than keep-alives"
        );
        // the two writes above are etcdctl's own (Put, DeleteRange), not the node's
        let node_sent: Vec<String> = grew(&quiet, &after)
            .into_iter()
            .filter(|m| m != "Put" && m != "DeleteRange")
            .collect();
        assert_eq!(
            node_sent,
            Vec::<String>::new(),
            "the changes reached the node through its watch, not a read"
        );

        // the guard no longer asks: after 30 s the node watches nothing again
        let deadline = tokio::time::Instant::now() + secs(45);
        while watchers(&etcd) > watching_before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the member keys are still watched 45 s after the guard last asked"
            );
            tokio::time::sleep(secs(1)).await;
        }
        fleet.shutdown().await;
    });
}

/// `a` asks for the group's one slot and is granted it, then `b` asks and waits behind it.
async fn a_holds_the_slot_b_waits(a: &mut Fleet, b: &mut Fleet) {
    a.request(ActionKind::RestartKubelet, Urgency::Planned);
    wait_state(a, "a granted", secs(20), |s| {
        matches!(s, SlotState::Granted { .. })
    })
    .await
    .unwrap();
    b.request(ActionKind::RestartKubelet, Urgency::Planned);
    wait_state(b, "b waiting", secs(20), |s| {
        matches!(s, SlotState::Waiting { .. })
    })
    .await
    .unwrap();
}

/// A connection of the fleet module's own to `group`, for tests that drive the protocol's
/// calls one by one, and the group's keys.
async fn direct_connection(
    etcd: &EtcdCluster,
    group: &str,
) -> (
    pleg_guard::fleet::backend::etcd::Connection,
    pleg_guard::fleet::backend::etcd::group::Keys,
) {
    use pleg_guard::fleet::backend::etcd::{Connection, TlsMaterial};
    let s = settings(etcd, group, "x", "1");
    let tls = TlsMaterial::load(s.tls.as_ref()).unwrap();
    let conn = Connection::open(&s, &tls).await.unwrap();
    (
        conn,
        pleg_guard::fleet::backend::etcd::group::Keys::new(&s.group_prefix()),
    )
}

/// `node` asks for a planned kubelet restart through `conn` (a read one key deep): its queue
/// key, and the read that came with the join.
async fn join_planned(
    conn: &mut pleg_guard::fleet::backend::etcd::Connection,
    keys: &pleg_guard::fleet::backend::etcd::group::Keys,
    node: &str,
    lease: i64,
) -> (
    pleg_guard::fleet::backend::etcd::Me,
    pleg_guard::fleet::backend::etcd::group::Snapshot,
) {
    conn.join(
        keys,
        node,
        Urgency::Planned,
        queue_value(node, Urgency::Planned),
        lease,
        1,
    )
    .await
    .unwrap()
}

/// A queue key's value: `node` asks for a kubelet restart.
fn queue_value(node: &str, urgency: Urgency) -> Vec<u8> {
    serde_json::to_vec(&pleg_guard::fleet::backend::etcd::group::QueueValue {
        node: node.to_owned(),
        action: "restart-kubelet".to_owned(),
        urgency,
        since: std::time::SystemTime::now(),
    })
    .unwrap()
}

/// A holder key's value: `node` holds a slot for a kubelet restart.
fn holder_value(node: &str) -> Vec<u8> {
    format!(r#"{{"node":"{node}","action":"restart-kubelet","urgency":"planned","since":"2026-12-05T00:00:00Z","granted_at":"2026-12-05T00:00:00Z"}}"#).into_bytes()
}

/// Issue 28's direct handoff: a release hands its slot to the waiter at the head of the queue
/// in the same revision (a put over the held key, no delete between), and the waiter learns
/// of it; a handoff to a waiter that withdrew or whose lease ended after the release read it
/// falls back to a plain release (no key on the dead lease, nothing held); etcd's history
/// never shows more than `max` holders.
#[test]
fn a_release_hands_its_slot_over_or_falls_back_to_a_plain_release() {
    use pleg_guard::fleet::backend::etcd::Released;

    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "handoff";
        let mut a = Fleet::start(settings(&etcd, group, "a", "1")).expect("fleet a");
        let mut b = Fleet::start(settings(&etcd, group, "b", "1")).expect("fleet b");
        members_in_etcd(&etcd, group, 2, secs(20)).await;
        a_holds_the_slot_b_waits(&mut a, &mut b).await;
        let granted = |s: &SlotState| matches!(s, SlotState::Granted { .. });
        a.release();
        wait_state(&mut b, "b handed the slot", secs(20), granted)
            .await
            .unwrap();
        let replay = Replay::of(&etcd, group);
        assert_eq!(replay.handoffs, 1, "{:?}", replay.holders);
        assert_eq!(replay.max_holders().0, 1, "{:?}", replay.holders);
        // b's release (nobody waits) is a plain one, recognised by the handoff's revision
        b.release();
        wait_state(&mut b, "b idle", secs(20), |s| matches!(s, SlotState::Idle))
            .await
            .unwrap();
        // the state says Idle at once; the release reaches etcd just after
        let deadline = Instant::now() + secs(10);
        loop {
            let holders = etcd
                .get_prefix(&format!("{PREFIX}/{group}/holders/"))
                .unwrap();
            if holders.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "{holders:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        a.shutdown().await;
        b.shutdown().await;

        // a waiter that withdrew, or whose lease was revoked, after the release read it
        for (n, revoke) in [(0, false), (1, true)] {
            let group = format!("handoff-fallback-{n}");
            let (mut conn, keys) = direct_connection(&etcd, &group).await;
            let value = |node: &str| queue_value(node, Urgency::Planned);
            let (x_lease, _x_alive) = conn.new_lease(secs(30)).await.unwrap();
            let (me, snap) = conn
                .join(&keys, "x", Urgency::Planned, value("x"), x_lease, 1)
                .await
                .unwrap();
            let x_grant = conn
                .grant(
                    &keys,
                    "x",
                    &me,
                    0,
                    1,
                    holder_value("x"),
                    x_lease,
                    snap.revision,
                    1,
                    &[],
                )
                .await
                .unwrap()
                .expect("x granted")
                .0;
            let (g_lease, _g_alive) = conn.new_lease(secs(30)).await.unwrap();
            let (g_me, _) = conn
                .join(&keys, "g", Urgency::Planned, value("g"), g_lease, 1)
                .await
                .unwrap();
            let (_, heads) = conn.heads(&keys, 5).await.unwrap();
            assert_eq!(heads.len(), 1, "{heads:?}");
            if revoke {
                conn.revoke(g_lease).await.unwrap();
            } else {
                let key = keys.queued(Urgency::Planned, "g");
                conn.delete_own(&key, g_me.create_revision).await.unwrap();
            }
            let released = conn.release_to(&keys, 0, x_grant, 1, &heads).await.unwrap();
            assert_eq!(released, Released::Freed, "revoked: {revoke}");
            let left = etcd
                .get_prefix(&format!("{PREFIX}/{group}/holders/"))
                .unwrap();
            assert!(left.is_empty(), "revoked {revoke}: {left:?}");
            let replay = Replay::of(&etcd, &group);
            assert!(replay.grants_of("g").is_empty(), "{:?}", replay.holders);
            assert_eq!(replay.max_holders().0, 1, "{:?}", replay.holders);
            assert_eq!(replay.handoffs, 0, "{:?}", replay.holders);
            conn.revoke(x_lease).await.unwrap();
        }
    });
}

/// The waiters a node reads behind it (with its reads while it waits, and with its own grant)
/// are those after it in queue order, and a release through them hands the slot to the first
/// still waiting without a read of the queue's head; an emergency that joined after they were
/// read still goes first: the offers to the planned waiters fail and the slot is freed.
#[test]
fn a_release_through_the_waiters_read_behind_it_keeps_the_queue_order() {
    use pleg_guard::fleet::MaxDisruptive;
    use pleg_guard::fleet::backend::etcd::Released;

    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "successors";
        let (mut conn, keys) = direct_connection(&etcd, group).await;
        let mut leases = Vec::new();
        let mut me = BTreeMap::new();
        for node in ["x", "y", "z"] {
            let (lease, alive) = conn.new_lease(secs(30)).await.unwrap();
            let (m, _) = join_planned(&mut conn, &keys, node, lease).await;
            leases.push((node, lease, alive));
            me.insert(node, (m, lease));
        }
        let names = |b: &pleg_guard::fleet::backend::etcd::group::Successors| {
            b.heads
                .iter()
                .map(|h| h.value.node.clone())
                .collect::<Vec<_>>()
        };
        let (x_me, x_lease) = me["x"];
        let snap = conn.snapshot(&keys, "x", Some(&x_me), 1).await.unwrap();
        let read = snap
            .behind
            .expect("a waiter's read brings the waiters behind it");
        assert_eq!(names(&read), ["y", "z"]);
        let (x_grant, behind) = conn
            .grant(
                &keys,
                "x",
                &x_me,
                0,
                1,
                holder_value("x"),
                x_lease,
                snap.revision,
                1,
                &[],
            )
            .await
            .unwrap()
            .expect("x granted");
        assert_eq!(names(&behind), ["y", "z"], "read with the grant");

        let count = MaxDisruptive::Count(std::num::NonZeroU32::MIN);
        let released = conn
            .release(&keys, 0, x_grant, count, Some(&behind))
            .await
            .unwrap();
        assert_eq!(released, Released::HandedOver);

        // y holds; an emergency joins; y's release through what it read behind it (z) must
        // not pass the emergency by
        let (y_me, y_lease) = me["y"];
        let y_snap = conn.snapshot(&keys, "y", Some(&y_me), 1).await.unwrap();
        let y_behind = y_snap.behind.clone().expect("the waiters behind y");
        assert_eq!(names(&y_behind), ["z"]);
        let y_grant = y_snap
            .held_by("y", y_lease)
            .expect("y holds the slot handed to it")
            .mod_revision;
        let (e_lease, _e_alive) = conn.new_lease(secs(30)).await.unwrap();
        let (e_me, _) = conn
            .join(
                &keys,
                "e",
                Urgency::Emergency,
                queue_value("e", Urgency::Emergency),
                e_lease,
                1,
            )
            .await
            .unwrap();
        let e_snap = conn.snapshot(&keys, "e", Some(&e_me), 1).await.unwrap();
        assert_eq!(
            names(&e_snap.behind.expect("the waiters behind e")),
            ["z"],
            "behind an emergency: the planned queue's head"
        );
        let released = conn
            .release(&keys, 0, y_grant, count, Some(&y_behind))
            .await
            .unwrap();
        assert_eq!(released, Released::Freed, "z is behind the emergency");
        // one Replay at the end (it marks the history's end in the group's holder keys)
        let replay = Replay::of(&etcd, group);
        assert_eq!(replay.handoffs, 1, "{:?}", replay.holders);
        assert_eq!(replay.grants_of("y").len(), 1, "{:?}", replay.holders);
        assert!(replay.grants_of("z").is_empty(), "{:?}", replay.holders);
        assert_eq!(replay.max_holders().0, 1, "{:?}", replay.holders);
        for (_, lease, _) in &leases {
            conn.revoke(*lease).await.unwrap();
        }
        conn.revoke(e_lease).await.unwrap();
    });
}

/// A loopback TCP proxy to one etcd member that the test can cut: every open connection is
/// shut and new ones are closed at once until it heals (a node's network gone, etcd's not).
struct Cuttable {
    url: String,
    cut: Arc<std::sync::atomic::AtomicBool>,
    open: Arc<Mutex<Vec<std::net::TcpStream>>>,
}

impl Cuttable {
    fn to(endpoint: &str) -> Cuttable {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::Ordering;
        let upstream = endpoint
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!(
            "https://{}",
            listener.local_addr().expect("the proxy's address")
        );
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (cut2, open2) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let pipe = |from: &TcpStream, to: &TcpStream| -> Option<()> {
                    let (mut from, mut to) = (from.try_clone().ok()?, to.try_clone().ok()?);
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                    Some(())
                };
                if pipe(&client, &server)
                    .and_then(|_| pipe(&server, &client))
                    .is_none()
                {
                    continue;
                }
                let mut open = open2.lock().unwrap_or_else(|e| e.into_inner());
                open.push(client);
                open.push(server);
            }
        });
        Cuttable { url, cut, open }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A grant the node could not hear: a waiter cut off from etcd (its lease still alive) is
/// handed the slot by the holder's release meanwhile; once its network is back it finds the
/// holder key on its own lease and counts it as its grant, not a new request, and etcd's
/// history never shows two holders of the one slot.
#[test]
fn a_slot_handed_over_while_the_waiter_was_cut_off_is_its_grant_after_reconnect() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "handed-while-cut";
        let proxy = Cuttable::to(&etcd.endpoint(0));
        let mut a = Fleet::start(settings(&etcd, group, "a", "1")).expect("fleet a");
        // b reaches etcd through the proxy only; a 20 s lease outlives the cut
        let mut b_settings = etcd.fleet_settings(group, "b", "1", secs(20), secs(2));
        b_settings.endpoints = vec![proxy.url.clone()];
        let mut b = Fleet::start(b_settings).expect("fleet b");
        members_in_etcd(&etcd, group, 2, secs(20)).await;
        a_holds_the_slot_b_waits(&mut a, &mut b).await;
        let granted = |s: &SlotState| matches!(s, SlotState::Granted { .. });

        proxy.cut();
        a.release();
        // the handoff lands in etcd while b hears nothing
        let holder = format!("{PREFIX}/{group}/holders/");
        let deadline = Instant::now() + secs(10);
        loop {
            let held = etcd.get_prefix(&holder).unwrap();
            if held.iter().any(|(_, v)| v.contains(r#""node":"b""#)) {
                break;
            }
            assert!(Instant::now() < deadline, "no handoff to b: {held:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !granted(&b.state()),
            "b counted a grant it could not hear: {:?}",
            b.state()
        );
        tokio::time::sleep(secs(3)).await;
        proxy.heal();
        let after = wait_state(&mut b, "b's grant after reconnect", secs(30), granted)
            .await
            .unwrap();
        eprintln!("MEASURE b found its handed-over slot {after:?} after the network returned");

        let replay = Replay::of(&etcd, group);
        assert_eq!(replay.grants_of("b").len(), 1, "{:?}", replay.holders);
        assert_eq!(replay.handoffs, 1, "{:?}", replay.holders);
        assert_eq!(replay.max_holders().0, 1, "{:?}", replay.holders);
        // b's release frees the slot it found
        b.release();
        let deadline = Instant::now() + secs(15);
        while !etcd.get_prefix(&holder).unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "b's release did not free the slot: {:?}",
                etcd.get_prefix(&holder)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        a.shutdown().await;
        b.shutdown().await;
    });
}

/// A raw etcd client of the test's own (the harness's certificates), for what no member of a
/// group does: read the lease a key is on, write on another node's lease, keep it alive.
async fn raw_client(etcd: &EtcdCluster) -> etcd_client::Client {
    let read = |p: &std::path::Path| std::fs::read(p).expect("a harness file");
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(&etcd.ca())))
        .identity(etcd_client::Identity::from_pem(
            read(&etcd.client_cert()),
            read(&etcd.client_key()),
        ));
    let opts = etcd_client::ConnectOptions::new()
        .with_tls(tls)
        .with_timeout(secs(5))
        .with_connect_timeout(secs(5));
    etcd_client::Client::connect(etcd.endpoints(), Some(opts))
        .await
        .expect("a raw client")
}

/// A node of one-slot `group` that reaches etcd only through a proxy the test can cut (a 6 s
/// lease, 1 s requests).
fn node_behind_a_proxy(etcd: &EtcdCluster, group: &str, node: &str) -> (Cuttable, Fleet) {
    let proxy = Cuttable::to(&etcd.endpoint(0));
    let mut s = etcd.fleet_settings(group, node, "1", secs(6), secs(1));
    s.endpoints = vec![proxy.url.clone()];
    let fleet = Fleet::start(s).expect("fleet");
    (proxy, fleet)
}

/// A node's lease, kept alive from the test whatever the node does (as etcd may keep a lease
/// through a node's cut: one shorter than its time, or a leader election renewing them all):
/// the raw client, the lease (that of the node's member key) and the task renewing it.
struct LeaseKeptFromOutside {
    raw: etcd_client::Client,
    lease: i64,
    keeper: tokio::task::JoinHandle<()>,
}

impl LeaseKeptFromOutside {
    async fn of(etcd: &EtcdCluster, group: &str, node: &str) -> Self {
        let mut raw = raw_client(etcd).await;
        let member = format!("{PREFIX}/{group}/members/{node}");
        let r = raw.get(member.as_str(), None).await.expect("get");
        let lease = r.kvs().first().map_or(0, |kv| kv.lease());
        assert_ne!(lease, 0, "{member} is on no lease");
        let (mut keeper, mut answers) = raw.lease_keep_alive(lease).await.expect("keep-alive");
        let keeper = tokio::spawn(async move {
            loop {
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                if !matches!(answers.message().await, Ok(Some(_))) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        LeaseKeptFromOutside { raw, lease, keeper }
    }
}

impl Drop for LeaseKeptFromOutside {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Waits until etcd holds no key under `prefix`.
async fn none_under(etcd: &EtcdCluster, prefix: &str, within: Duration, what: &str) -> Duration {
    let start = Instant::now();
    while !etcd.get_prefix(prefix).unwrap().is_empty() {
        assert!(
            start.elapsed() < within,
            "{what}: {:?} after {within:?}",
            etcd.get_prefix(prefix)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

/// A slot the node presumed lost while cut off, though etcd kept its lease (here the test
/// keeps it alive; in a fleet a cut shorter than the lease's time from etcd's last renewal,
/// or a leader election renewing every lease): released while cut off, it is handed on once
/// the network returns, not held on the node's live lease until the daemon stops.
#[test]
fn a_slot_presumed_lost_while_cut_off_is_released_after_reconnect() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "presumed-lost";
        let (proxy, mut b) = node_behind_a_proxy(&etcd, group, "b");
        b.request(ActionKind::RestartKubelet, Urgency::Planned);
        let granted = |s: &SlotState| matches!(s, SlotState::Granted { .. });
        wait_state(&mut b, "b granted", secs(20), granted)
            .await
            .unwrap();
        let kept = LeaseKeptFromOutside::of(&etcd, group, "b").await;

        proxy.cut();
        wait_state(&mut b, "b presumes its slot lost", secs(30), |s| {
            !granted(s)
        })
        .await
        .unwrap();
        b.release();
        let holder = format!("{PREFIX}/{group}/holders/");
        assert_eq!(
            etcd.get_prefix(&holder).unwrap().len(),
            1,
            "the slot is still b's in etcd"
        );
        proxy.heal();
        let took = none_under(&etcd, &holder, secs(30), "b's slot after reconnect").await;
        eprintln!(
            "MEASURE the slot b presumed lost was released {took:?} after the network returned"
        );
        drop(kept);
        b.shutdown().await;
    });
}

/// A join whose answer was lost (committed, its news cut off) leaves a queue key on the
/// node's lease that the node does not know of. When the node no longer asks, it goes at
/// reconnect; left there, it would stand at the head of the queue for ever (no one behind
/// it would take the free slot) or be handed a slot no one releases.
#[test]
fn a_join_whose_answer_was_lost_is_withdrawn_at_reconnect() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "lost-join";
        let (proxy, b) = node_behind_a_proxy(&etcd, group, "b");
        members_in_etcd(&etcd, group, 1, secs(20)).await;
        let mut kept = LeaseKeptFromOutside::of(&etcd, group, "b").await;
        // b's join, as etcd committed it
        let queued = format!("{PREFIX}/{group}/queue/planned/b");
        let value = r#"{"node":"b","action":"restart-kubelet","urgency":"planned","since":"2026-12-06T03:00:00Z"}"#;
        kept.raw
            .put(
                queued.as_str(),
                value,
                Some(etcd_client::PutOptions::new().with_lease(kept.lease)),
            )
        .await
        .expect("put");

        proxy.cut();
        tokio::time::sleep(secs(3)).await;
        proxy.heal();
        let took = none_under(&etcd, &queued, secs(30), "b's lost join after reconnect").await;
        eprintln!("MEASURE b's lost join was withdrawn {took:?} after the network returned");

        // the queue's head is free again: the next node to ask is granted the slot
        let mut a = Fleet::start(settings(&etcd, group, "a", "1")).expect("fleet a");
        a.request(ActionKind::RestartKubelet, Urgency::Planned);
        wait_state(&mut a, "a granted", secs(20), |s| {
            matches!(s, SlotState::Granted { .. })
        })
        .await
        .unwrap();
        drop(kept);
        a.shutdown().await;
        b.shutdown().await;
    });
}

/// Issue 28's far waiters: a node that joins behind at least `8 × max` waiters watches from the
/// revision after its join's read, not from now, and so needs no second read. This checks what
/// that relies on, against the real cluster: the join's read counts every waiter ahead of the
/// new key; a watch from a passed revision delivers a delete made before the watch existed
/// (from etcd's catch-up); a watch from now does not (which is why a waiter nearer the head
/// reads again when its watch started after its read).
#[test]
fn a_far_waiters_watch_from_its_join_misses_nothing_since() {
    use pleg_guard::fleet::backend::etcd::group::{WatchPlan, watches_from_read};

    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "far-waiter";
        let (mut conn, keys) = direct_connection(&etcd, group).await;
        let (lease, _alive) = conn.new_lease(secs(30)).await.unwrap();
        let mut joined = Vec::new();
        for i in 0..10 {
            let node = format!("w{i}");
            let (me, snap) = join_planned(&mut conn, &keys, &node, lease).await;
            assert_eq!(
                snap.joined_behind,
                Some(i),
                "{node}'s join counts who is ahead"
            );
            // its own place counted, not only the keys it read (max + 1 of them)
            assert_eq!(snap.ahead, i, "{node}: ahead");
            assert!(
                snap.nearest_ahead.len() <= 2,
                "{node}: {:?}",
                snap.nearest_ahead
            );
            joined.push((node, me, snap));
        }
        let (_, _, last) = &joined[9];
        assert!(watches_from_read(9, 1), "9 ahead of 1 slot is far");
        assert!(!watches_from_read(7, 1));

        // the waiter right ahead of w9 leaves after w9's read and before w9 watches it
        let (w8, w8_me, _) = &joined[8];
        let w8_key = keys.queued(Urgency::Planned, w8);
        conn.delete_own(&w8_key, w8_me.create_revision)
            .await
            .unwrap();
        let plan = WatchPlan {
            key: Some(w8_key.clone().into_bytes()),
            ..WatchPlan::default()
        };

        let mut from_now = conn
            .watch(&keys, &plan, None)
            .await
            .unwrap()
            .expect("a watch");
        let mut from_read = conn
            .watch(&keys, &plan, Some(last.revision + 1))
            .await
            .unwrap()
            .expect("a watch");
        let deleted = tokio::time::timeout(secs(5), async {
            loop {
                let resp = from_read
                    .message()
                    .await
                    .unwrap()
                    .expect("the watch goes on");
                if let Some(e) = resp.events().first() {
                    break (e.event_type(), e.kv().map(|kv| kv.key().to_vec()));
                }
            }
        })
        .await
        .expect("the delete made before the watch, from its start revision");
        assert_eq!(
            deleted,
            (etcd_client::EventType::Delete, Some(w8_key.into_bytes()))
        );
        let nothing = tokio::time::timeout(Duration::from_millis(500), async {
            loop {
                let resp = from_now
                    .message()
                    .await
                    .unwrap()
                    .expect("the watch goes on");
                if !resp.events().is_empty() {
                    break;
                }
            }
        })
        .await;
        assert!(
            nothing.is_err(),
            "a watch from now saw a delete made before it"
        );
    });
}

/// A head of the queue that tries a free slot while a releasing holder hands it another: its
/// grant fails on its own queue key, and the same transaction gives the free slot to the
/// waiter behind it (before, the slot stayed free for the next head, which met the same race:
/// at quick turns 15–25 heads in a row). Against the real cluster: two slots, `a` holds slot
/// 0, slot 1 free, `w1` heads the queue with `w2` behind; `a`'s release hands slot 0 to `w1`
/// between `w1`'s read and its grant of slot 1; that grant's answer shows `w1` holding slot 0,
/// and etcd holds `w1` in slot 0 and `w2` in slot 1 (on `w2`'s lease, its queue key gone),
/// never more than two holders in its history.
#[test]
fn a_failed_grant_gives_the_free_slot_to_the_waiter_behind() {
    use pleg_guard::fleet::MaxDisruptive;
    use pleg_guard::fleet::backend::etcd::Released;

    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "free-slot";
        let (mut conn, keys) = direct_connection(&etcd, group).await;
        let two = MaxDisruptive::Count(std::num::NonZeroU32::new(2).expect("2"));
        let mut lease = BTreeMap::new();
        for n in ["a", "w1", "w2"] {
            let (l, alive) = conn.new_lease(secs(30)).await.unwrap();
            lease.insert(n, (l, alive));
        }
        let (a_me, a_snap) = join_planned(&mut conn, &keys, "a", lease["a"].0).await;
        let a_grant = conn
            .grant(
                &keys,
                "a",
                &a_me,
                0,
                2,
                holder_value("a"),
                lease["a"].0,
                a_snap.revision,
                1,
                &[],
            )
            .await
            .unwrap()
            .expect("a granted")
            .0;
        let (w1_me, _) = join_planned(&mut conn, &keys, "w1", lease["w1"].0).await;
        let (w2_me, _) = join_planned(&mut conn, &keys, "w2", lease["w2"].0).await;
        let w1_read = conn.snapshot(&keys, "w1", Some(&w1_me), 2).await.unwrap();
        assert_eq!(w1_read.ahead, 0, "w1 heads the queue");
        let behind = w1_read.behind.clone().expect("the waiters behind w1");
        assert_eq!(behind.heads.len(), 1);
        assert_eq!(behind.heads[0].create_revision, w2_me.create_revision);

        // a's release reads the head and hands slot 0 to w1
        let released = conn.release(&keys, 0, a_grant, two, None).await.unwrap();
        assert_eq!(released, Released::HandedOver);
        // w1 tries slot 1, free at its read: its queue key is gone, so slot 1 goes to w2
        let answer = conn
            .grant(
                &keys,
                "w1",
                &w1_me,
                1,
                2,
                holder_value("w1"),
                lease["w1"].0,
                w1_read.revision,
                2,
                &behind.heads,
            )
            .await
            .unwrap();
        let Err(after) = answer else {
            panic!("w1's grant of slot 1 held though slot 0 was handed to it")
        };
        let held = after.held_by("w1", lease["w1"].0).expect("w1 holds slot 0");
        assert_eq!(held.index, 0);
        let held = after.held_by("w2", lease["w2"].0).expect("w2 holds slot 1");
        assert_eq!(held.index, 1);
        assert_eq!(after.waiting, 0, "nobody waits");
        let replay = Replay::of(&etcd, group);
        assert_eq!(replay.max_holders().0, 2, "{:?}", replay.holders);
        assert_eq!(
            etcd.get(&keys.queued(Urgency::Planned, "w2")).unwrap(),
            None,
            "w2's request went with its grant"
        );
    });
}

/// A key under `holders/` that no node of this version wrote (by hand, as kured's lock
/// annotation is, or by another version) blocks every grant, as etcd's compares see it: the
/// node waits instead of trying grants that fail, names the key in its view (status and the
/// journal show it), and is granted once the key is deleted.
#[test]
fn a_stray_holder_key_blocks_grants_is_named_and_frees_them_when_deleted() {
    let Some(etcd) = require_etcd(3) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let group = "stray-holder";
        let stray = format!("{PREFIX}/{group}/holders/lock");
        etcd.etcdctl(&["put", &stray, "held by hand"]).expect("put");
        let mut a = Fleet::start(settings(&etcd, group, "a", "1")).expect("fleet a");
        a.request(ActionKind::RestartKubelet, Urgency::Planned);
        never_granted(&mut a, secs(4)).await.unwrap();
        let named: Vec<Option<String>> = a
            .view()
            .holders
            .iter()
            .map(|h| h.stray_key.clone())
            .collect();
        assert_eq!(named, vec![Some(stray.clone())], "{:?}", a.view());

        etcd.etcdctl(&["del", &stray]).expect("del");
        let took = wait_state(
            &mut a,
            "a granted after the stray key went",
            secs(15),
            |s| matches!(s, SlotState::Granted { .. }),
        )
        .await
        .unwrap();
        eprintln!("MEASURE a was granted {took:?} after the stray holder key was deleted");
        a.shutdown().await;
    });
}
