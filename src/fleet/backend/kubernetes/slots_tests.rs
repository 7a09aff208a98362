//! The slot protocol's unit tests: reads, clocks and writes by hand, and a property test over
//! random reads and clock steps.

use super::*;

const TTL: Duration = Duration::from_secs(60);
const G: &str = "pool";
const ME: &str = "node-a";

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn lease(name: &str, rv: &str, holder: &str, duration: Option<i64>) -> Lease {
    let mut l = Lease::new(name);
    l.metadata.resource_version = Some(rv.to_owned());
    l.metadata
        .labels
        .insert(names::GROUP_LABEL.to_owned(), G.to_owned());
    l.spec.holder_identity = Some(holder.to_owned());
    l.spec.lease_duration_seconds = duration;
    // Another host's clock, far in the past: never compared with ours.
    l.spec.renew_time = Some("1970-01-01T00:00:00.000000Z".to_owned());
    l
}

fn slot(i: usize, rv: &str, holder: &str) -> Lease {
    lease(&names::slot_lease(G, i), rv, holder, Some(60))
}

/// Observe `leases` at `at` and plan at the same moment.
fn plan_at(budget: usize, leases: &[Lease], obs: &mut Observations, at: Instant) -> Plan {
    obs.observe_all(leases, at);
    Plan::make(G, ME, budget, leases, obs, TTL, at)
}

#[test]
fn an_empty_group_takes_slot_zero_by_a_create() {
    let mut obs = Observations::default();
    let p = plan_at(2, &[], &mut obs, Instant::now());
    assert_eq!(p.take, Some(Take::Create { index: 0 }));
    assert_eq!(p.holders(), 0);
    assert!(p.mine.is_none());
}

#[test]
fn a_live_holder_leaves_the_next_slot_and_a_full_budget_none() {
    let t0 = Instant::now();
    let mut obs = Observations::default();
    let read = [slot(0, "10", "node-b")];
    let p = plan_at(2, &read, &mut obs, t0);
    assert_eq!(p.take, Some(Take::Create { index: 1 }));
    assert_eq!(p.others.len(), 1);
    assert_eq!(p.others[0].node, "node-b");
    assert_eq!(p.others[0].left, TTL);
    let p = plan_at(1, &read, &mut obs, t0 + secs(1));
    assert_eq!(p.take, None, "the budget is full");
    assert_eq!(p.holders(), 1);
}

/// Free is judged on this reader's clock: the same resourceVersion seen for longer than the
/// Lease's duration. The holder's renewTime (1970 here) is never looked at.
#[test]
fn a_slot_expires_only_after_it_stayed_unchanged_on_our_clock() {
    let t0 = Instant::now();
    let mut obs = Observations::default();
    let read = [slot(0, "10", "node-b")];
    let p = plan_at(1, &read, &mut obs, t0);
    assert_eq!(p.take, None, "a first sight is live for a whole duration");
    let p = plan_at(1, &read, &mut obs, t0 + TTL);
    assert_eq!(p.take, None, "exactly the duration: still live");
    assert_eq!(p.others[0].left, Duration::ZERO);
    let p = plan_at(1, &read, &mut obs, t0 + TTL + Duration::from_millis(1));
    match &p.take {
        Some(Take::Replace { index: 0, lease }) => assert_eq!(lease.resource_version(), "10"),
        other => panic!("{other:?}"),
    }
    assert!(p.others.is_empty(), "an expired holder is no holder");
}

#[test]
fn a_renewal_restarts_the_count() {
    let t0 = Instant::now();
    let mut obs = Observations::default();
    plan_at(1, &[slot(0, "10", "node-b")], &mut obs, t0);
    plan_at(1, &[slot(0, "11", "node-b")], &mut obs, t0 + secs(50));
    let p = plan_at(1, &[slot(0, "11", "node-b")], &mut obs, t0 + secs(100));
    assert_eq!(p.take, None, "renewed at +50: live until +110");
    assert_eq!(p.others[0].left, secs(10));
    let p = plan_at(1, &[slot(0, "11", "node-b")], &mut obs, t0 + secs(111));
    assert!(matches!(p.take, Some(Take::Replace { index: 0, .. })));
}

/// A reader that starts late has seen nothing for long: however old the Lease's renewTime,
/// it waits a whole duration from its own first sight.
#[test]
fn a_new_reader_waits_a_whole_duration() {
    let t0 = Instant::now();
    let mut old = Observations::default();
    plan_at(1, &[slot(0, "10", "node-b")], &mut old, t0);
    let mut new = Observations::default();
    let late = t0 + secs(59);
    let p = plan_at(1, &[slot(0, "10", "node-b")], &mut new, late);
    assert_eq!(p.take, None);
    let p = plan_at(1, &[slot(0, "10", "node-b")], &mut old, t0 + secs(61));
    assert!(p.take.is_some(), "the reader that saw it first may take it");
    let p = plan_at(1, &[slot(0, "10", "node-b")], &mut new, t0 + secs(61));
    assert_eq!(
        p.take, None,
        "the late reader counts from its own first sight"
    );
}

/// A grant whose answer was lost: the read shows this node as holder, whatever our clock
/// says of the Lease, and no second slot is taken.
#[test]
fn a_lost_grant_is_recognised_by_the_holder_identity() {
    let t0 = Instant::now();
    let mut obs = Observations::default();
    let read = [slot(0, "10", "node-b"), slot(1, "12", ME)];
    let p = plan_at(3, &read, &mut obs, t0);
    let mine = p.mine.as_ref().unwrap();
    assert_eq!(mine.index, 1);
    assert_eq!(mine.lease.resource_version(), "12");
    assert_eq!(p.take, None, "no second slot");
    let p = plan_at(3, &read, &mut obs, t0 + secs(600));
    assert_eq!(
        p.mine.as_ref().map(|m| m.index),
        Some(1),
        "ours even when stale"
    );
    assert!(p.take.is_none());
    assert_eq!(p.holders(), 1, "node-b expired, ours counts");
}

#[test]
fn a_second_slot_of_ours_is_surplus() {
    let mut obs = Observations::default();
    let read = [slot(2, "5", ME), slot(0, "3", ME)];
    let p = plan_at(3, &read, &mut obs, Instant::now());
    assert_eq!(
        p.mine.as_ref().map(|m| m.index),
        Some(0),
        "the lowest is kept"
    );
    assert_eq!(p.surplus.len(), 1);
    assert_eq!(p.surplus[0].index, 2);
    assert_eq!(p.holders(), 2);
}

#[test]
fn an_empty_holder_is_free_and_replaced_at_its_version() {
    let mut obs = Observations::default();
    let read = [slot(0, "7", "")];
    let p = plan_at(1, &read, &mut obs, Instant::now());
    match p.take {
        Some(Take::Replace { index: 0, lease }) => assert_eq!(lease.resource_version(), "7"),
        other => panic!("{other:?}"),
    }
    let mut none = slot(0, "8", "");
    none.spec.holder_identity = None;
    let p = plan_at(1, &[none], &mut obs, Instant::now());
    assert!(matches!(p.take, Some(Take::Replace { index: 0, .. })));
}

/// The lowest free slot is taken, whether it is a gap, empty or expired.
#[test]
fn the_lowest_free_slot_is_taken() {
    let t0 = Instant::now();
    let mut obs = Observations::default();
    let read = [slot(0, "1", "b"), slot(1, "2", ""), slot(3, "4", "c")];
    let p = plan_at(5, &read, &mut obs, t0);
    assert!(matches!(p.take, Some(Take::Replace { index: 1, .. })));
    let read = [slot(0, "1", "b"), slot(1, "2", "d"), slot(3, "4", "c")];
    let p = plan_at(5, &read, &mut obs, t0);
    assert_eq!(p.take, Some(Take::Create { index: 2 }));
}

/// The budget shrank: a live slot above it still counts; free slots above it are no slots.
#[test]
fn slots_above_the_budget_count_while_held_and_are_never_taken() {
    let t0 = Instant::now();
    let mut obs = Observations::default();
    let read = [slot(1, "2", "b")];
    let p = plan_at(1, &read, &mut obs, t0);
    assert_eq!(
        p.take, None,
        "slot 0 is free, but one holder fills a budget of 1"
    );
    assert_eq!(p.holders(), 1);
    let read = [slot(0, "1", "b"), slot(1, "2", "")];
    let p = plan_at(1, &read, &mut obs, t0);
    assert_eq!(p.take, None, "an empty slot above the budget is no slot");
    let read = [slot(0, "1", "b"), slot(1, "2", "c")];
    let p = plan_at(2, &read, &mut obs, t0);
    assert_eq!(p.take, None, "no gap within the budget");
    let p = plan_at(usize::MAX, &read, &mut obs, t0);
    assert_eq!(
        p.take,
        Some(Take::Create { index: 2 }),
        "a huge budget is fine"
    );
}

#[test]
fn other_leases_are_not_slots() {
    let mut obs = Observations::default();
    let read = [
        lease("pool-finding-b", "1", "b", Some(60)),
        lease("other-slot-0", "2", "c", Some(60)),
        lease("pool-slot-00", "3", "d", Some(60)),
    ];
    let p = plan_at(1, &read, &mut obs, Instant::now());
    assert_eq!(p.take, Some(Take::Create { index: 0 }));
    assert_eq!(p.holders(), 0);
}

#[test]
fn durations_are_bounded() {
    let l = |d| lease("x", "1", "b", d);
    assert_eq!(duration_of(&l(Some(15)), TTL), secs(15));
    assert_eq!(duration_of(&l(None), TTL), TTL);
    assert_eq!(duration_of(&l(Some(0)), TTL), TTL);
    assert_eq!(duration_of(&l(Some(-5)), TTL), TTL);
    assert_eq!(duration_of(&l(Some(i64::MAX)), TTL), MAX_DURATION);
    // A short duration a holder claims is honoured: it renews that often.
    let t0 = Instant::now();
    let mut obs = Observations::default();
    let short = [lease(&names::slot_lease(G, 0), "1", "b", Some(10))];
    obs.observe_all(&short, t0);
    assert_eq!(
        liveness(&obs, &short[0], TTL, t0 + secs(11)),
        Liveness::Expired
    );
}

#[test]
fn observations_follow_the_reads() {
    let t0 = Instant::now();
    let mut obs = Observations::default();
    let a = slot(0, "1", "b");
    let b = slot(1, "2", "c");
    obs.observe_all(&[a.clone(), b.clone()], t0);
    assert_eq!(obs.len(), 2);
    obs.observe_all(std::slice::from_ref(&a), t0 + secs(5));
    assert_eq!(obs.len(), 1, "a Lease not listed is gone");
    assert_eq!(obs.unchanged_for(&a, t0 + secs(5)), secs(5));
    assert_eq!(
        obs.unchanged_for(&b, t0 + secs(5)),
        Duration::ZERO,
        "not seen"
    );
    obs.observe_one(&a.metadata.name, None, t0 + secs(6));
    assert!(obs.is_empty());
    // Gone and back at the same version (it never is; resourceVersions only grow): counted
    // again from the new sight.
    obs.observe_one(&a.metadata.name, Some(&a), t0 + secs(7));
    assert_eq!(obs.unchanged_for(&a, t0 + secs(8)), secs(1));
    // A clock read earlier than the sight counts zero, never panics.
    assert_eq!(obs.unchanged_for(&a, t0), Duration::ZERO);
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Node".to_owned(),
        name: ME.to_owned(),
        uid: "uid-1".to_owned(),
    }
}

#[test]
fn a_claim_writes_the_contracts_lease() {
    let wall = SystemTime::UNIX_EPOCH + secs(1_765_101_600);
    let claim = Claim {
        group: G,
        node: ME,
        action: "daemon-reexec",
        ttl: TTL,
        owner: Some(owner()),
    };
    let l = claim.lease(&Take::Create { index: 3 }, wall);
    assert_eq!(l.metadata.name, "pool-slot-3");
    assert_eq!(l.metadata.labels[names::GROUP_LABEL], G);
    assert_eq!(l.metadata.annotations[ACTION_ANNOTATION], "daemon-reexec");
    assert_eq!(
        l.metadata.resource_version, None,
        "a create names no version"
    );
    assert_eq!(l.metadata.owner_references, vec![owner()]);
    assert_eq!(l.holder(), Some(ME));
    assert_eq!(l.spec.lease_duration_seconds, Some(60));
    assert_eq!(
        l.spec.acquire_time.as_deref(),
        Some("2025-12-07T10:00:00.000000Z")
    );
    assert_eq!(l.spec.renew_time, l.spec.acquire_time);

    let mut expired = slot(0, "41", "node-b");
    expired.spec.lease_transitions = Some(2);
    expired.metadata.owner_references = vec![OwnerReference {
        name: "node-b".to_owned(),
        ..owner()
    }];
    let take = Take::Replace {
        index: 0,
        lease: Box::new(expired),
    };
    let l = Claim {
        owner: None,
        ..claim
    }
    .lease(&take, wall);
    assert_eq!(
        l.resource_version(),
        "41",
        "the replace names the version read"
    );
    assert_eq!(l.holder(), Some(ME));
    assert_eq!(l.spec.lease_transitions, Some(3));
    assert!(
        l.metadata.owner_references.is_empty(),
        "node-b no longer owns it"
    );

    let later = wall + secs(20);
    let r = renewal(&l, later);
    assert_eq!(r.resource_version(), "41");
    assert_eq!(r.spec.acquire_time, l.spec.acquire_time);
    assert_eq!(
        r.spec.renew_time.as_deref(),
        Some("2025-12-07T10:00:20.000000Z")
    );
}

#[test]
fn a_tenure_runs_from_the_confirmed_write_sent() {
    let t0 = Instant::now();
    let t = Tenure {
        sent: t0,
        duration: TTL,
    };
    assert_eq!(t.deadline(), t0 + TTL);
    assert_eq!(t.renew_at(), t0 + secs(20));
    assert!(t.valid(t0 + secs(50), secs(5)));
    assert!(!t.valid(t0 + secs(55), secs(5)));
    assert!(!t.valid(t0 + secs(61), Duration::ZERO));
}

#[test]
fn live_finding_leases_are_the_members_reporting() {
    let t0 = Instant::now();
    let wall = SystemTime::UNIX_EPOCH;
    let mine = finding_lease(
        G,
        ME,
        &[
            "systemd-bus-wedge".to_owned(),
            "bus-unresponsive".to_owned(),
        ],
        TTL,
        wall,
        None,
    );
    assert_eq!(mine.metadata.name, "pool-finding-node-a");
    assert_eq!(
        mine.metadata.annotations[names::FINDINGS_ANNOTATION],
        "systemd-bus-wedge,bus-unresponsive"
    );
    assert_eq!(mine.holder(), Some(ME));
    let mut mine = mine;
    mine.metadata.resource_version = Some("1".to_owned());
    let renewed = finding_lease(G, ME, &[], TTL, wall + secs(5), Some(&mine));
    assert_eq!(renewed.resource_version(), "1");
    assert_eq!(renewed.spec.acquire_time, mine.spec.acquire_time);

    let mut by_hand = lease("pool-finding-node-c", "2", "someone-else", Some(30));
    by_hand.metadata.annotations.insert(
        names::FINDINGS_ANNOTATION.to_owned(),
        " kubelet-pleg-unhealthy , ".to_owned(),
    );
    let mut other_group = lease("pool-finding-node-d", "3", "node-d", Some(30));
    other_group
        .metadata
        .labels
        .insert(names::GROUP_LABEL.to_owned(), "other".to_owned());
    let stale = lease("pool-finding-node-e", "4", "node-e", Some(10));
    let nobody = lease("pool-finding-node-f", "5", "", Some(30));
    let read = [
        mine,
        by_hand,
        other_group,
        stale,
        nobody,
        slot(0, "6", "node-b"),
    ];
    let mut obs = Observations::default();
    obs.observe_all(&read, t0);
    let live = live_findings(G, &read, &obs, TTL, t0 + secs(11));
    assert_eq!(
        live,
        vec![
            (
                "node-a".to_owned(),
                vec![
                    "systemd-bus-wedge".to_owned(),
                    "bus-unresponsive".to_owned()
                ]
            ),
            (
                "node-c".to_owned(),
                vec!["kubelet-pleg-unhealthy".to_owned()]
            ),
        ]
    );
}

proptest::proptest! {
    /// Whatever the read and however time passes: a plan takes a slot only within the budget,
    /// only while the live holders leave room, never one a live other node holds, and never a
    /// second one for this node.
    #[test]
    fn a_plan_never_exceeds_the_budget(
        budget in 1usize..5,
        reads in proptest::collection::vec(
            (proptest::collection::vec((0usize..7, 0u8..4, 0u8..3), 0..6), 0u64..40),
            1..8,
        ),
    ) {
        let t0 = Instant::now();
        let mut at = t0;
        let mut obs = Observations::default();
        for (read, step) in reads {
            at += secs(step);
            let mut by_index = BTreeMap::new();
            for (i, rv, who) in read {
                let holder = ["", ME, "node-b"][usize::from(who)];
                by_index.insert(i, slot(i, &rv.to_string(), holder));
            }
            let leases: Vec<Lease> = by_index.into_values().collect();
            let p = plan_at(budget, &leases, &mut obs, at);
            if let Some(take) = &p.take {
                proptest::prop_assert!(take.index() < budget);
                proptest::prop_assert!(p.mine.is_none());
                proptest::prop_assert!(p.holders() < budget);
                let name = names::slot_lease(G, take.index());
                let target = leases.iter().find(|l| l.metadata.name == name);
                match take {
                    Take::Create { .. } => proptest::prop_assert!(target.is_none()),
                    Take::Replace { lease, .. } => {
                        let t = target.expect("a replace targets a Lease read");
                        proptest::prop_assert_eq!(lease.resource_version(), t.resource_version());
                        let view = SlotView::of(Some(t), ME, &obs, TTL, at);
                        let free = matches!(view, SlotView::Empty(_) | SlotView::Expired { .. });
                        proptest::prop_assert!(free, "{:?}", view);
                    }
                }
            }
            let mine = leases.iter().filter(|l| l.holder() == Some(ME)).count();
            proptest::prop_assert_eq!(usize::from(p.mine.is_some()) + p.surplus.len(), mine);
        }
    }
}
