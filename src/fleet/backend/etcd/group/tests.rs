//! The group's pure core on a fake store: the plans run as etcd would run them.

use super::*;
use crate::fleet::{MaxDisruptive, Urgency};
use std::num::NonZeroU32;
use std::time::Duration;
use std::time::{Instant, SystemTime};

const P: &str = "/pg/default/";

fn count(n: u32) -> MaxDisruptive {
    MaxDisruptive::Count(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

fn holder(node: &str, index: usize, lease: i64) -> Held {
    Held {
        index,
        value: Some(HolderValue {
            node: node.to_owned(),
            action: "restart-kubelet".to_owned(),
            urgency: Urgency::Planned,
            since: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            granted_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_001),
        }),
        create_revision: 9,
        mod_revision: 9,
        lease,
        stray_key: None,
    }
}

fn snap(members: usize, holders: Vec<Held>, ahead: usize) -> Snapshot {
    Snapshot {
        revision: 100,
        members,
        holders,
        waiting: ahead + 1,
        ahead,
        nearest_ahead: (0..ahead.min(5))
            .map(|i| format!("{P}queue/planned/w{}", ahead - 1 - i).into_bytes())
            .collect(),
        queued: Some(true),
        behind: None,
        joined_behind: None,
        ahead_at_least: false,
    }
}

/// A key under `holders/` that no node of this version wrote blocks every grant in etcd (the
/// compare "no holder at an index `>= max`" covers it), so the waiters see it as such a
/// holder and wait instead of trying grants that fail.
#[test]
fn a_stray_key_under_holders_blocks_grants_as_etcd_sees_it() {
    let k = Keys::new(P.trim_end_matches('/'));
    let kv = |key: &'static str| RawKv {
        key: key.as_bytes(),
        value: b"junk",
        create_revision: 5,
        mod_revision: 5,
        lease: 0,
    };
    assert_eq!(k.index_of(b"/pg/default/holders/12"), None);
    assert_eq!(k.index_of(b"/pg/default/holders/+00012"), None);
    assert_eq!(k.index_of(b"/pg/default/holders/000012"), Some(12));
    let stray = Held::parse(&k, kv("/pg/default/holders/x"));
    assert_eq!(stray.as_ref().map(|h| h.index), Some(usize::MAX));
    assert_eq!(
        stray.as_ref().and_then(|h| h.stray_key.as_deref()),
        Some("/pg/default/holders/x"),
        "named, for the operator"
    );
    let bell = Held::parse(&k, kv("/pg/default/holders/a\n\u{1b}[2Jb"));
    assert_eq!(
        bell.and_then(|h| h.stray_key).as_deref(),
        Some("/pg/default/holders/a\\n\\u{1b}[2Jb"),
        "control characters escaped"
    );
    let slot = Held::parse(&k, kv("/pg/default/holders/000001"));
    assert_eq!(slot.and_then(|h| h.stray_key), None);
    assert!(Held::parse(&k, kv("/pg/default/queue/planned/x")).is_none());
    let s = snap(10, stray.into_iter().collect(), 0);
    assert!(matches!(s.next(count(2)), Next::Wait { .. }));
}

/// A read that stopped counting at its limit while a share budget had grown past the depth
/// it read with: it cannot place the waiter among the free slots, so it reads deeper instead
/// of taking one (it might pass waiters it did not see); a read that saw fewer free slots
/// than its floor waits as before.
#[test]
fn a_read_that_stopped_counting_reads_deeper_before_taking_a_slot() {
    // 10 % of 100 members: 10 slots, one held; the read counted 3 ahead and stopped there
    let mut s = snap(100, vec![holder("h", 0, 1)], 3);
    s.ahead_at_least = true;
    assert_eq!(
        s.next(MaxDisruptive::Percent(10)),
        Next::ReadDeeper { depth: 10 }
    );
    // the deeper read counts them all: 7 ahead, the 8th free slot (index 8) is this one's
    let mut deeper = snap(100, vec![holder("h", 0, 1)], 7);
    deeper.ahead_at_least = false;
    assert_eq!(
        deeper.next(MaxDisruptive::Percent(10)),
        Next::Take { index: 8, max: 10 }
    );
    // a floor at or past the free slots: wait, no deeper read needed
    let mut full = snap(100, (0..8).map(|i| holder("h", i, 1)).collect(), 3);
    full.ahead_at_least = true;
    assert!(matches!(
        full.next(MaxDisruptive::Percent(10)),
        Next::Wait { .. }
    ));
}

#[test]
fn keys_sort_and_parse() {
    let k = Keys::new("/pg/default");
    assert_eq!(k.holder(3), "/pg/default/holders/000003");
    assert_eq!(k.index_of(b"/pg/default/holders/000012"), Some(12));
    assert_eq!(k.index_of(b"/pg/other/holders/000012"), None);
    assert!(k.holder(9) < k.holder(10), "indices sort as numbers");
    assert_eq!(
        k.queued(Urgency::Emergency, "n1"),
        "/pg/default/queue/emergency/n1"
    );
    assert_eq!(prefix_end("/pg/default/holders/"), b"/pg/default/holders0");
    assert_eq!(
        k.node_of(&k.members(), b"/pg/default/members/n7"),
        Some("n7")
    );
}

#[test]
fn the_nth_waiter_takes_the_nth_free_slot() {
    let s = snap(10, vec![holder("h", 1, 7)], 0);
    assert_eq!(s.next(count(3)), Next::Take { index: 0, max: 3 });
    let s = snap(10, vec![holder("h", 1, 7)], 1);
    assert_eq!(s.next(count(3)), Next::Take { index: 2, max: 3 });
    let s = snap(10, vec![holder("h", 1, 7)], 2);
    assert!(matches!(
        s.next(count(3)),
        Next::Wait {
            position: 2,
            holders: 1,
            max: 3,
            ..
        }
    ));
}

#[test]
fn a_full_group_makes_the_next_in_line_watch_releases_and_the_rest_their_predecessor() {
    let full = vec![holder("a", 0, 7), holder("b", 1, 7)];
    let Next::Wait { watch, .. } = snap(10, full.clone(), 0).next(count(2)) else {
        panic!()
    };
    assert_eq!(
        watch,
        WatchPlan {
            releases: true,
            key: None,
            handoffs: true,
        }
    );
    // second in line: woken when the first is served, not by every release
    let Next::Wait { watch, .. } = snap(10, full.clone(), 1).next(count(2)) else {
        panic!()
    };
    assert!(!watch.releases);
    assert_eq!(
        watch.key.as_deref(),
        Some(&b"/pg/default/queue/planned/w0"[..])
    );
    // far back: its predecessor only
    let Next::Wait { watch, .. } = snap(10, full, 4).next(count(2)) else {
        panic!()
    };
    assert!(!watch.releases);
    assert_eq!(
        watch.key.as_deref(),
        Some(&b"/pg/default/queue/planned/w3"[..])
    );
}

#[test]
fn with_slots_free_the_first_waiter_behind_their_takers_watches_the_releases() {
    // 3 slots, 1 held: the two waiters ahead take indices 0 and 2; this one is next
    let s = snap(10, vec![holder("h", 1, 7)], 2);
    let Next::Wait { watch, .. } = s.next(count(3)) else {
        panic!()
    };
    assert!(watch.releases);
    assert_eq!(
        watch.key.as_deref(),
        Some(&b"/pg/default/queue/planned/w1"[..])
    );
    let Next::Wait { watch, .. } = snap(10, vec![holder("h", 1, 7)], 3).next(count(3)) else {
        panic!()
    };
    assert!(!watch.releases);
    // a holder above a shrunk budget: the first waiter watches the releases
    let s = snap(2, vec![holder("b", 1, 7)], 0);
    let Next::Wait { watch, .. } = s.next(MaxDisruptive::Percent(50)) else {
        panic!()
    };
    assert!(watch.releases);
}

#[test]
fn a_holder_above_a_shrunk_budget_blocks_every_grant() {
    // 50% of 4 members was 2 slots; two members left: 1 slot, and index 1 still held
    let s = snap(2, vec![holder("b", 1, 7)], 0);
    assert!(matches!(
        s.next(MaxDisruptive::Percent(50)),
        Next::Wait { max: 1, .. }
    ));
    let s = snap(4, vec![holder("b", 1, 7)], 0);
    assert_eq!(
        s.next(MaxDisruptive::Percent(50)),
        Next::Take { index: 0, max: 2 }
    );
    assert_eq!(snap(0, vec![], 0).max(MaxDisruptive::Percent(5)), 1);
}

#[test]
fn a_lost_grant_is_found_by_node_and_lease() {
    let s = snap(3, vec![holder("a", 0, 7), holder("b", 1, 8)], 0);
    assert_eq!(s.held_by("b", 8).map(|h| h.index), Some(1));
    assert_eq!(s.held_by("b", 7), None, "another lease: not this daemon's");
    let unreadable = Held {
        index: 2,
        value: None,
        create_revision: 1,
        mod_revision: 1,
        lease: 8,
        stray_key: None,
    };
    let s = snap(3, vec![unreadable], 0);
    assert_eq!(s.held_by("b", 8), None);
    assert!(
        matches!(s.next(count(1)), Next::Wait { .. }),
        "an unreadable holder at index 2 still blocks a budget of 1"
    );
}

#[test]
fn member_findings_are_read_leniently() {
    let f = MemberFindings::parse(br#"{"node":"n1","findings":["logind-unresponsive"]}"#);
    assert_eq!(f.findings, ["logind-unresponsive"]);
    assert!(
        MemberFindings::parse(br#"{"node":"n1"}"#)
            .findings
            .is_empty()
    );
    assert!(MemberFindings::parse(b"garbage").findings.is_empty());
}

/// etcd's transactions on an in-memory store: one revision per transaction that writes,
/// a put keeps a key's create revision, an empty range compares a missing key.
#[derive(Default)]
struct Fake {
    rev: i64,
    kvs: std::collections::BTreeMap<Vec<u8>, (Vec<u8>, i64, i64, i64)>,
    /// The most holder keys at any revision.
    most: usize,
}

impl Fake {
    fn holds(&self, c: &Cond) -> bool {
        match c {
            Cond::CreateRevision {
                key,
                end,
                cmp,
                revision,
            } => {
                let mut found: Vec<i64> = match end {
                    None => self.kvs.get(key).map(|v| v.1).into_iter().collect(),
                    Some(end) => self
                        .kvs
                        .range(key.clone()..end.clone())
                        .map(|(_, v)| v.1)
                        .collect(),
                };
                if found.is_empty() {
                    found.push(0);
                }
                found.iter().all(|v| match cmp {
                    Cmp::Equal => v == revision,
                    Cmp::Less => v < revision,
                    Cmp::Greater => v > revision,
                })
            }
            Cond::ModRevision { key, revision } => {
                self.kvs.get(key).map_or(0, |v| v.2) == *revision
            }
        }
    }

    /// The writes `plan` makes, every compare (nested ones too) read before any write,
    /// as etcd does.
    fn writes<'p>(&self, plan: &'p TxnPlan, out: &mut Vec<&'p Op>) {
        let mut p = plan;
        while !p.when.iter().all(|c| self.holds(c)) {
            match p.otherwise.as_deref() {
                Some(o) => p = o,
                None => return,
            }
        }
        for op in &p.then {
            match op {
                Op::Txn(inner) => self.writes(inner, out),
                op => out.push(op),
            }
        }
    }

    /// Run `plan`: the revision it wrote (None: it wrote nothing).
    fn txn(&mut self, plan: &TxnPlan) -> Option<i64> {
        let mut ops = Vec::new();
        self.writes(plan, &mut ops);
        if ops.is_empty() {
            return None;
        }
        self.rev += 1;
        for op in ops {
            match op {
                Op::Put { key, value, lease } => {
                    let create = self.kvs.get(key).map_or(self.rev, |v| v.1);
                    self.kvs
                        .insert(key.clone(), (value.clone(), create, self.rev, *lease));
                }
                Op::Delete { key } => {
                    self.kvs.remove(key);
                }
                Op::Txn(_) => {}
            }
        }
        let holders = self
            .kvs
            .keys()
            .filter(|k| k.starts_with(b"/pg/default/holders/"))
            .count();
        self.most = self.most.max(holders);
        Some(self.rev)
    }

    fn join(&mut self, k: &Keys, node: &str, urgency: Urgency, lease: i64) -> i64 {
        let value = serde_json::to_vec(&QueueValue {
            node: node.to_owned(),
            action: "daemon-reexec".to_owned(),
            urgency,
            since: SystemTime::UNIX_EPOCH,
        })
        .unwrap_or_default();
        let key = k.queued(urgency, node).into_bytes();
        let plan = TxnPlan {
            when: vec![],
            then: vec![Op::Put { key, value, lease }],
            otherwise: None,
        };
        self.txn(&plan).unwrap_or(0)
    }

    fn expire(&mut self, lease: i64) {
        self.rev += 1;
        self.kvs.retain(|_, v| v.3 != lease);
    }

    /// What a releasing holder reads: the first `n` waiters, emergencies first.
    fn heads(&self, k: &Keys, n: usize) -> Vec<Head> {
        let mut out = Vec::new();
        for u in [Urgency::Emergency, Urgency::Planned] {
            let prefix = k.queue(u).into_bytes();
            let mut q: Vec<_> = self
                .kvs
                .iter()
                .filter(|(key, _)| key.starts_with(&prefix))
                .collect();
            q.sort_by_key(|(_, v)| v.1);
            out.extend(q.into_iter().filter_map(|(key, v)| {
                Head::of(RawKv {
                    key,
                    value: &v.0,
                    create_revision: v.1,
                    mod_revision: v.2,
                    lease: v.3,
                })
            }));
        }
        out.truncate(n);
        out
    }

    fn holder(&self, k: &Keys, index: usize) -> Option<(String, i64, i64, i64)> {
        let v = self.kvs.get(k.holder(index).as_bytes())?;
        let node = serde_json::from_slice::<HolderValue>(&v.0).ok()?.node;
        Some((node, v.1, v.2, v.3))
    }

    fn grant(&mut self, k: &Keys, node: &str, lease: i64, index: usize, max: usize) -> Option<i64> {
        self.grant_as(k, node, Urgency::Planned, lease, index, max)
    }

    fn grant_as(
        &mut self,
        k: &Keys,
        node: &str,
        urgency: Urgency,
        lease: i64,
        index: usize,
        max: usize,
    ) -> Option<i64> {
        let queued = k.queued(urgency, node);
        let create = self.kvs.get(queued.as_bytes()).map_or(-1, |v| v.1);
        let value = serde_json::to_vec(&HolderValue {
            node: node.to_owned(),
            action: "daemon-reexec".to_owned(),
            urgency,
            since: SystemTime::UNIX_EPOCH,
            granted_at: SystemTime::UNIX_EPOCH,
        })
        .unwrap_or_default();
        let rev = self.rev;
        self.txn(&grant_plan(
            k, &queued, urgency, create, index, max, value, lease, rev,
        ))
    }
}

fn keys() -> Keys {
    Keys::new("/pg/default")
}

/// A store where node `a` (lease 1) holds slot 0 of `max`: the grant's revision.
fn a_holds_slot_0_of(max: usize) -> (Keys, Fake, i64) {
    let k = keys();
    let mut f = Fake::default();
    f.join(&k, "a", Urgency::Planned, 1);
    let a = f.grant(&k, "a", 1, 0, max).unwrap_or(0);
    (k, f, a)
}

#[test]
fn a_release_hands_its_slot_to_the_head_in_one_revision() {
    let (k, mut f, a) = a_holds_slot_0_of(1);
    f.join(&k, "w1", Urgency::Planned, 11);
    f.join(&k, "w2", Urgency::Planned, 12);
    let heads = f.heads(&k, HANDOFF_CANDIDATES);
    let plan = handoff_plan(&k, 0, a, 1, &heads, SystemTime::UNIX_EPOCH);
    let Some(plan) = plan else {
        panic!("no handoff")
    };
    let rev = f.txn(&plan).unwrap_or(0);
    let (node, create, modified, lease) = f.holder(&k, 0).unwrap_or_default();
    assert_eq!((node.as_str(), modified, lease), ("w1", rev, 11));
    assert_eq!(create, a, "the key's create revision is the first grant's");
    assert!(
        !f.kvs
            .contains_key(k.queued(Urgency::Planned, "w1").as_bytes())
    );
    assert!(
        f.kvs
            .contains_key(k.queued(Urgency::Planned, "w2").as_bytes())
    );
    // the old holder's release, sent again (its answer lost): not w1's slot
    assert_eq!(f.txn(&delete_plan(&k.holder(0), a, true)), None);
    assert_eq!(f.holder(&k, 0).map(|h| h.0).as_deref(), Some("w1"));
    // w1's own release is recognised by the handoff's revision
    assert!(f.txn(&delete_plan(&k.holder(0), rev, true)).is_some());
    assert_eq!(f.most, 1);
}

#[test]
fn a_handoff_and_the_waiters_own_grant_never_both_commit() {
    for handoff_first in [true, false] {
        let (k, mut f, a) = a_holds_slot_0_of(2);
        f.join(&k, "w1", Urgency::Planned, 11);
        // a reads w1 as the head; w1 read slot 1 free
        let heads = f.heads(&k, HANDOFF_CANDIDATES);
        let Some(plan) = handoff_plan(&k, 0, a, 2, &heads, SystemTime::UNIX_EPOCH) else {
            panic!("no handoff")
        };
        let (handed, own) = if handoff_first {
            let h = f.txn(&plan);
            (h, f.grant(&k, "w1", 11, 1, 2))
        } else {
            let own = f.grant(&k, "w1", 11, 1, 2);
            (f.txn(&plan), own)
        };
        assert!(handed.is_some(), "the release commits either way");
        let held_by_w1 = [0, 1]
            .iter()
            .filter(|i| f.holder(&k, **i).is_some_and(|h| h.0 == "w1"))
            .count();
        assert_eq!(held_by_w1, 1, "handoff first: {handoff_first}");
        if !handoff_first {
            assert!(own.is_some());
            assert_eq!(f.holder(&k, 0), None, "fell back to a plain release");
        } else {
            assert!(own.is_none());
        }
    }
}

#[test]
fn a_burst_of_releases_that_read_the_same_head_serves_the_next_waiters_in_order() {
    let k = keys();
    let mut f = Fake::default();
    let mut grants = Vec::new();
    for (i, n) in ["a", "b", "c"].iter().enumerate() {
        f.join(&k, n, Urgency::Planned, 1 + i as i64);
        grants.push(f.grant(&k, n, 1 + i as i64, i, 3).unwrap_or(0));
    }
    for (i, n) in ["w1", "w2", "w3", "w4"].iter().enumerate() {
        f.join(&k, n, Urgency::Planned, 11 + i as i64);
    }
    let heads = f.heads(&k, HANDOFF_CANDIDATES);
    for (i, g) in grants.iter().enumerate() {
        let Some(plan) = handoff_plan(&k, i, *g, 3, &heads, SystemTime::UNIX_EPOCH) else {
            panic!("no handoff")
        };
        f.txn(&plan);
    }
    let got: Vec<String> = (0..3)
        .filter_map(|i| f.holder(&k, i).map(|h| h.0))
        .collect();
    assert_eq!(got, ["w1", "w2", "w3"]);
    assert!(
        f.kvs
            .contains_key(k.queued(Urgency::Planned, "w4").as_bytes())
    );
    assert_eq!(f.most, 3);
}

#[test]
fn a_handoff_to_a_waiter_that_died_or_withdrew_is_a_plain_release() {
    for withdrew in [false, true] {
        let (k, mut f, a) = a_holds_slot_0_of(1);
        let w1 = f.join(&k, "w1", Urgency::Planned, 11);
        let heads = f.heads(&k, HANDOFF_CANDIDATES);
        if withdrew {
            let key = k.queued(Urgency::Planned, "w1");
            assert!(f.txn(&delete_plan(&key, w1, false)).is_some());
        } else {
            f.expire(11);
        }
        let Some(plan) = handoff_plan(&k, 0, a, 1, &heads, SystemTime::UNIX_EPOCH) else {
            panic!("no handoff")
        };
        assert!(f.txn(&plan).is_some());
        assert_eq!(f.holder(&k, 0), None, "withdrew: {withdrew}");
    }
}

/// The offers in `plan` (branches that put a holder key), nested ones too.
fn offered(plan: &TxnPlan) -> usize {
    let here = plan.then.iter().any(|op| matches!(op, Op::Put { .. }));
    let nested: usize = plan
        .then
        .iter()
        .map(|op| match op {
            Op::Txn(inner) => offered(inner),
            _ => 0,
        })
        .sum();
    usize::from(here) + nested + plan.otherwise.as_deref().map_or(0, offered)
}

#[test]
fn a_release_offers_its_slot_to_max_plus_two_waiters_of_those_it_read() {
    let (k, mut f, a) = a_holds_slot_0_of(5);
    for i in 0..12 {
        f.join(&k, &format!("w{i:02}"), Urgency::Planned, 100 + i);
    }
    let heads = f.heads(&k, MAX_OFFERS);
    assert_eq!(heads.len(), 12);
    let Some(plan) = handoff_plan(&k, 0, a, 5, &heads, SystemTime::UNIX_EPOCH) else {
        panic!("no handoff")
    };
    assert_eq!(offered(&plan), 7, "max 5 + OFFERS_PAST_MAX");
    // the first seven served meanwhile (by the other holders, or they left): a plain
    // release, the slot free for the eighth's own grant
    for i in 0..7 {
        f.expire(100 + i);
    }
    assert!(f.txn(&plan).is_some());
    assert_eq!(f.holder(&k, 0), None);
    let Some(plan) = handoff_plan(&k, 0, a, 1, &heads, SystemTime::UNIX_EPOCH) else {
        panic!("no handoff")
    };
    assert_eq!(offered(&plan), 3, "max 1 + OFFERS_PAST_MAX");
    assert_eq!(offers_for(100), MAX_OFFERS);
}

#[test]
fn a_withdrawal_that_races_a_handoff_finds_the_slot_on_its_lease() {
    let (k, mut f, a) = a_holds_slot_0_of(1);
    let w1 = f.join(&k, "w1", Urgency::Planned, 11);
    let heads = f.heads(&k, HANDOFF_CANDIDATES);
    let Some(plan) = handoff_plan(&k, 0, a, 1, &heads, SystemTime::UNIX_EPOCH) else {
        panic!("no handoff")
    };
    f.txn(&plan);
    // w1 withdraws (max_wait, the storm guard): its key is gone, the compare fails ...
    let key = k.queued(Urgency::Planned, "w1");
    assert_eq!(f.txn(&delete_plan(&key, w1, false)), None);
    // ... and the holders it reads then (the withdrawal's else) show its slot
    let (_, _, modified, lease) = f.holder(&k, 0).unwrap_or_default();
    let raw = f
        .kvs
        .get(k.holder(0).as_bytes())
        .cloned()
        .unwrap_or_default();
    let held = Held::parse(
        &k,
        RawKv {
            key: k.holder(0).as_bytes(),
            value: &raw.0,
            create_revision: raw.1,
            mod_revision: modified,
            lease,
        },
    );
    let snap = Snapshot {
        holders: held.into_iter().collect(),
        ..Snapshot::default()
    };
    let found = snap.held_by("w1", 11).map(|h| (h.index, h.mod_revision));
    assert_eq!(found, Some((0, modified)));
    // which it releases by that revision
    assert!(f.txn(&delete_plan(&k.holder(0), modified, true)).is_some());
    assert_eq!(f.holder(&k, 0), None);
}

#[test]
fn emergencies_come_first_and_one_that_joined_after_the_read_is_not_overtaken() {
    let (k, mut f, a) = a_holds_slot_0_of(1);
    f.join(&k, "p1", Urgency::Planned, 11);
    let heads = f.heads(&k, HANDOFF_CANDIDATES);
    f.join(&k, "e1", Urgency::Emergency, 12);
    let Some(plan) = handoff_plan(&k, 0, a, 1, &heads, SystemTime::UNIX_EPOCH) else {
        panic!("no handoff")
    };
    f.txn(&plan);
    assert_eq!(
        f.holder(&k, 0),
        None,
        "p1 is not handed the emergency's slot"
    );
    // a fresh read: the emergency first, before p1 who asked earlier
    let e1 = f
        .grant_as(&k, "e1", Urgency::Emergency, 12, 0, 1)
        .unwrap_or(0);
    f.join(&k, "b", Urgency::Emergency, 2);
    let heads = f.heads(&k, HANDOFF_CANDIDATES);
    let order: Vec<&str> = heads.iter().map(|h| h.value.node.as_str()).collect();
    assert_eq!(order, ["b", "p1"]);
    let Some(plan) = handoff_plan(&k, 0, e1, 1, &heads, SystemTime::UNIX_EPOCH) else {
        panic!("no handoff")
    };
    f.txn(&plan);
    assert_eq!(f.holder(&k, 0).map(|h| h.0).as_deref(), Some("b"));
}

#[test]
fn a_free_slot_a_failed_grant_could_not_take_goes_to_the_waiter_behind() {
    // two slots: a holds slot 0, slot 1 is free; w1 heads the queue, w2 waits behind it
    let (k, mut f, a) = a_holds_slot_0_of(2);
    f.join(&k, "w1", Urgency::Planned, 11);
    f.join(&k, "w2", Urgency::Planned, 12);
    let heads = f.heads(&k, HANDOFF_CANDIDATES);
    let behind_w1: Vec<Head> = heads.iter().skip(1).cloned().collect();
    // a hands slot 0 to w1 before w1's grant of slot 1 arrives: that grant fails
    let Some(handoff) = handoff_plan(&k, 0, a, 2, &heads, SystemTime::UNIX_EPOCH) else {
        panic!("no handoff")
    };
    f.txn(&handoff);
    assert_eq!(f.grant(&k, "w1", 11, 1, 2), None);
    // the failed grant's else branch gives the free slot to w2, in one revision
    let Some(offer) = free_slot_plan(&k, 1, 2, &behind_w1, SystemTime::UNIX_EPOCH) else {
        panic!("no offer")
    };
    let rev = f.txn(&offer);
    assert!(rev.is_some());
    let h1 = f.holder(&k, 1);
    assert_eq!(h1.as_ref().map(|h| (h.0.as_str(), h.3)), Some(("w2", 12)));
    assert_eq!(h1.map(|h| h.2), rev);
    assert!(
        !f.kvs
            .contains_key(k.queued(Urgency::Planned, "w2").as_bytes())
    );
    assert_eq!(f.most, 2, "never more holders than slots");
    // the slot taken (or nobody left to take it): the offer writes nothing
    assert_eq!(f.txn(&offer), None);
    // a slot above the budget, or nobody behind: no offer at all
    assert_eq!(
        free_slot_plan(&k, 2, 2, &behind_w1, SystemTime::UNIX_EPOCH),
        None
    );
    assert_eq!(free_slot_plan(&k, 1, 2, &[], SystemTime::UNIX_EPOCH), None);
}

#[test]
fn a_free_slot_is_offered_to_nobody_an_emergency_is_owed() {
    let (k, mut f, _) = a_holds_slot_0_of(2);
    let w1 = f.join(&k, "w1", Urgency::Planned, 11);
    f.join(&k, "w2", Urgency::Planned, 12);
    let behind_w1: Vec<Head> = f
        .heads(&k, HANDOFF_CANDIDATES)
        .into_iter()
        .skip(1)
        .collect();
    // w1 leaves, and an emergency joins after the read that listed w2
    assert!(
        f.txn(&delete_plan(&k.queued(Urgency::Planned, "w1"), w1, false))
            .is_some()
    );
    f.join(&k, "e", Urgency::Emergency, 21);
    let Some(offer) = free_slot_plan(&k, 1, 2, &behind_w1, SystemTime::UNIX_EPOCH) else {
        panic!("no offer")
    };
    assert_eq!(f.txn(&offer), None, "w2 may not pass the emergency by");
    assert_eq!(f.holder(&k, 1), None);
}

#[test]
fn a_shrunk_budget_gets_no_handoff() {
    let (k, mut f, a) = a_holds_slot_0_of(2);
    f.join(&k, "b", Urgency::Planned, 2);
    let b = f.grant(&k, "b", 2, 1, 2).unwrap_or(0);
    f.join(&k, "w1", Urgency::Planned, 11);
    let heads = f.heads(&k, HANDOFF_CANDIDATES);
    // the budget is 1 now: slot 1 is above it, and slot 0 may not go while 1 is held
    assert_eq!(
        handoff_plan(&k, 1, b, 1, &heads, SystemTime::UNIX_EPOCH),
        None
    );
    let Some(plan) = handoff_plan(&k, 0, a, 1, &heads, SystemTime::UNIX_EPOCH) else {
        panic!("no handoff")
    };
    f.txn(&plan);
    assert_eq!(f.holder(&k, 0), None);
    assert!(
        f.kvs
            .contains_key(k.queued(Urgency::Planned, "w1").as_bytes())
    );
    assert_eq!(handoff_plan(&k, 0, a, 1, &[], SystemTime::UNIX_EPOCH), None);
}

#[test]
fn only_a_waiter_eight_turns_of_every_slot_back_watches_from_its_read() {
    assert!(!watches_from_read(0, 5));
    assert!(!watches_from_read(39, 5));
    assert!(watches_from_read(40, 5));
    assert!(watches_from_read(199, 5));
    // one slot: eight waiters ahead; a budget of 0 counts as one slot
    assert!(!watches_from_read(7, 1));
    assert!(watches_from_read(8, 1));
    assert!(watches_from_read(8, 0));
}

#[test]
fn the_waiters_read_behind_a_node_serve_only_a_quick_release_under_a_count_budget() {
    let (k, mut f, _) = a_holds_slot_0_of(1);
    f.join(&k, "w1", Urgency::Planned, 11);
    let read_at = Instant::now();
    let behind = Successors {
        heads: f.heads(&k, MAX_OFFERS),
        read_at,
    };
    let soon = read_at + Duration::from_millis(50);
    assert_eq!(
        behind.usable(count(3), soon).map(|(max, h)| (max, h.len())),
        Some((3, 1))
    );
    // a share needs the members counted at the release
    assert_eq!(behind.usable(MaxDisruptive::Percent(20), soon), None);
    // held longer: read the head again
    assert_eq!(
        behind.usable(count(3), read_at + SUCCESSORS_FRESH_FOR),
        None
    );
    // nobody was behind: someone may be now
    let nobody = Successors {
        heads: Vec::new(),
        read_at,
    };
    assert_eq!(nobody.usable(count(3), soon), None);
    assert_eq!(successors_wanted(5), 5 + HANDOFF_CANDIDATES);
    assert_eq!(successors_wanted(1000), MAX_OFFERS);
}

/// Many waiters, grants from stale reads (a failed one offering its slot to a stale list of
/// waiters), handoffs from stale heads, withdrawals and lease expiries in a pseudo-random
/// order: never more than `max` holder keys, never two
/// slots for one node, and every slot handed over went to a waiter with nobody ahead.
#[test]
fn random_interleavings_never_exceed_the_budget() {
    let k = keys();
    let max = 3;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut f = Fake::default();
    let mut stale_heads: Vec<Vec<Head>> = Vec::new();
    for step in 0..4000 {
        let node = format!("n{}", next(12));
        let lease = 100 + node[1..].parse::<i64>().unwrap_or(0);
        let urgency = if next(5) == 0 {
            Urgency::Emergency
        } else {
            Urgency::Planned
        };
        match next(6) {
            0 => {
                let holds = (0..max + 1).any(|i| f.holder(&k, i).is_some_and(|h| h.0 == node));
                // one request per node (the actor withdraws a planned one for an emergency)
                let asks = [Urgency::Emergency, Urgency::Planned]
                    .iter()
                    .any(|u| f.kvs.contains_key(k.queued(*u, &node).as_bytes()));
                if !holds && !asks {
                    f.join(&k, &node, urgency, lease);
                }
            }
            1 => {
                let i = next(max as u64) as usize;
                // a failed grant offers the slot to the waiters it read behind it
                if f.grant_as(&k, &node, urgency, lease, i, max).is_none() {
                    if let Some(heads) = stale_heads.pop() {
                        let plan = free_slot_plan(&k, i, max, &heads, SystemTime::UNIX_EPOCH);
                        if let Some(plan) = plan {
                            f.txn(&plan);
                        }
                    }
                }
            }
            2 => {
                // as a release reads the head, or as a waiter read those behind it (a
                // longer list that need not start at the head)
                let mut heads = f.heads(&k, MAX_OFFERS + 3);
                let skip = (next(4) as usize).min(heads.len());
                heads.drain(..skip);
                heads.truncate(if next(2) == 0 {
                    HANDOFF_CANDIDATES
                } else {
                    MAX_OFFERS
                });
                stale_heads.push(heads);
            }
            3 => {
                let i = next(max as u64) as usize;
                if let (Some(h), Some(heads)) = (f.holder(&k, i), stale_heads.pop()) {
                    let plan = handoff_plan(&k, i, h.2, max, &heads, SystemTime::UNIX_EPOCH);
                    if let Some(plan) = plan {
                        f.txn(&plan);
                    }
                }
            }
            4 => {
                let queued = k.queued(urgency, &node);
                if let Some(create) = f.kvs.get(queued.as_bytes()).map(|v| v.1) {
                    f.txn(&delete_plan(&queued, create, false));
                }
            }
            _ => {
                if next(20) == 0 {
                    f.expire(lease);
                }
            }
        }
        let mut nodes: Vec<String> = (0..max + 1)
            .filter_map(|i| f.holder(&k, i).map(|h| h.0))
            .collect();
        let held = nodes.len();
        nodes.sort();
        nodes.dedup();
        assert_eq!(nodes.len(), held, "a node with two slots at step {step}");
        for n in &nodes {
            for u in [Urgency::Emergency, Urgency::Planned] {
                assert!(
                    !f.kvs.contains_key(k.queued(u, n).as_bytes()),
                    "{n} holds a slot and waits at step {step}"
                );
            }
        }
    }
    assert!(f.most <= max, "{} holders", f.most);
}
