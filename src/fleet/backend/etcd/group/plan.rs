//! The transactions, as data: the grant, the guarded deletes, and a release that hands its
//! slot to the first waiter still waiting (its offers).

use std::time::SystemTime;

use super::keys::{Keys, prefix_end};
use super::values::{Head, HolderValue};
use crate::fleet::Urgency;

/// How a compare compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Equal,
    /// `<`
    Less,
    /// `>`
    Greater,
}

/// One compare of a transaction as etcd runs it: on one key, or on every key of
/// `[key, end)` (each must hold; an empty range compares one missing key, whose revisions
/// are 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// The key's (or keys') create revision.
    CreateRevision {
        /// The key, or the start of the range.
        key: Vec<u8>,
        /// The end of the range (None: the one key).
        end: Option<Vec<u8>>,
        /// How.
        cmp: Cmp,
        /// Against what.
        revision: i64,
    },
    /// The key's last write was at `revision`.
    ModRevision {
        /// The key.
        key: Vec<u8>,
        /// The revision.
        revision: i64,
    },
}

/// One write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Put `value` on `lease` (0: none).
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// The lease.
        lease: i64,
    },
    /// Delete the key.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// A nested transaction, its compares read at the same revision as the outer ones (so a
    /// compare every branch shares is made once, outside).
    Txn(Box<TxnPlan>),
}

/// A write transaction: `then` if every compare holds, else `otherwise` (a nested
/// transaction with compares of its own; None: nothing). [`super::super::connection`] sends it as it is;
/// the tests below run it on a fake store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnPlan {
    /// The compares.
    pub when: Vec<Cond>,
    /// The writes when they all hold.
    pub then: Vec<Op>,
    /// Else.
    pub otherwise: Option<Box<TxnPlan>>,
}

fn create_is(key: &str, revision: i64) -> Cond {
    Cond::CreateRevision {
        key: key.as_bytes().to_vec(),
        end: None,
        cmp: Cmp::Equal,
        revision,
    }
}

/// No holder key at an index `>= max` (a shrunk budget blocks every grant and handoff).
fn none_at_or_above(keys: &Keys, max: usize) -> Cond {
    Cond::CreateRevision {
        key: keys.holder(max).into_bytes(),
        end: Some(prefix_end(&keys.holders())),
        cmp: Cmp::Equal,
        revision: 0,
    }
}

/// The grant: slot `index` of `max` to the waiter whose queue key `queued` was created at
/// `create_revision`, if the slot is free, no holder sits at an index `>= max`, the queue key
/// is still that one (a handoff to it deletes it: a waiter's own grant and a handoff to it
/// never both commit), and, for a planned request, no emergency joined since `read_revision`.
#[allow(clippy::too_many_arguments)]
pub fn grant_plan(
    keys: &Keys,
    queued: &str,
    urgency: Urgency,
    create_revision: i64,
    index: usize,
    max: usize,
    value: Vec<u8>,
    lease: i64,
    read_revision: i64,
) -> TxnPlan {
    let holder = keys.holder(index);
    let mut when = vec![
        create_is(&holder, 0),
        none_at_or_above(keys, max),
        create_is(queued, create_revision),
    ];
    if urgency == Urgency::Planned {
        let (emergencies, emergencies_end) = queue_range(keys, Urgency::Emergency);
        when.push(Cond::CreateRevision {
            key: emergencies,
            end: Some(emergencies_end),
            cmp: Cmp::Less,
            revision: read_revision + 1,
        });
    }
    TxnPlan {
        when,
        then: vec![
            Op::Put {
                key: holder.into_bytes(),
                value,
                lease,
            },
            Op::Delete {
                key: queued.as_bytes().to_vec(),
            },
        ],
        otherwise: None,
    }
}

/// Delete `key` if it is still the one written at `revision` (by its create revision for a
/// queue key, by its last write for a holder key: a handoff rewrites a holder key).
pub fn delete_plan(key: &str, revision: i64, holder: bool) -> TxnPlan {
    let when = if holder {
        Cond::ModRevision {
            key: key.as_bytes().to_vec(),
            revision,
        }
    } else {
        create_is(key, revision)
    };
    TxnPlan {
        when: vec![when],
        then: vec![Op::Delete {
            key: key.as_bytes().to_vec(),
        }],
        otherwise: None,
    }
}

/// How many waiters at the head of the queue a release offers its slot to, in order, in one
/// transaction: releases that read the same head at once (a burst of them) each hand their
/// slot to the first of these still waiting instead of all but one falling back to a plain
/// release.
pub const HANDOFF_CANDIDATES: usize = 5;

/// The most waiters one release offers its slot to (the nested transaction's depth).
pub const MAX_OFFERS: usize = 16;

/// How many waiters past `max` a release offers its slot to, of those it read. The other
/// `max - 1` holders may each have handed a slot to one of them since the read, and a slot
/// may have turned over once more meanwhile. Every offer rides in the release's transaction
/// through raft to every member's log whether it is tried or not (~0.6 KB each), so the list
/// is cut there (issue 28's ninth look: at 50/5/0, of 2,000 releases offering 10, the slot
/// went at the 1st to 6th offer in all but 10, at the 7th in 9 and the 8th in 1).
pub const OFFERS_PAST_MAX: usize = 2;

/// How many waiters a release offers its slot to with `max` slots in the group.
pub fn offers_for(max: usize) -> usize {
    max.saturating_add(OFFERS_PAST_MAX).min(MAX_OFFERS)
}

/// The release of slot `index` (granted at `grant_revision`) that hands it straight to the
/// first of `heads` (waiters at the head of the queue, in queue order, at most
/// [`offers_for`]`(max)` used) still waiting, in the same revision: offered to a waiter if
/// and only if this node's holder key is still its grant, the waiter's queue key is still the
/// one read, nobody is ahead of it (no older emergency; for a planned waiter no emergency at
/// all and no older planned request: so the waiters before it in `heads` are gone),
/// `index < max` and no holder sits at an index `>= max`. It puts the holder key with the
/// waiter's request on the waiter's lease and deletes the waiter's queue key. When no waiter
/// qualifies it is the plain release (a guarded delete). None: no handoff is possible (nobody
/// waits, or `index >= max`: the budget shrank); release plainly.
pub fn handoff_plan(
    keys: &Keys,
    index: usize,
    grant_revision: i64,
    max: usize,
    heads: &[Head],
    granted_at: SystemTime,
) -> Option<TxnPlan> {
    if index >= max || heads.is_empty() {
        return None;
    }
    let holder = keys.holder(index);
    let still_mine = Cond::ModRevision {
        key: holder.as_bytes().to_vec(),
        revision: grant_revision,
    };
    Some(offers(
        keys,
        &holder,
        &still_mine,
        max,
        heads,
        granted_at,
        Some(delete_plan(&holder, grant_revision, true)),
    ))
}

/// For a waiter whose grant of the free slot `index` fails: that slot, still free, offered to
/// the waiters read behind it (`heads`, in queue order), each only with nobody ahead of it, as
/// a release offers its slot ([`handoff_plan`]); nothing if none qualifies.
///
/// A waiter at the head that sees a slot freed (a release whose offers all failed) tries it,
/// but at quick turns a releasing holder mostly hands it another slot first: its grant fails
/// on its own queue key, and without this the free slot waited for the next head, which met
/// the same race (measured at hold 0: one freed slot stayed free ~300–500 ms while 15–25
/// heads in a row failed). With it the failed grant's transaction gives the slot to the next
/// waiter in the same revision. None: nobody behind, or `index >= max`.
pub fn free_slot_plan(
    keys: &Keys,
    index: usize,
    max: usize,
    heads: &[Head],
    granted_at: SystemTime,
) -> Option<TxnPlan> {
    if index >= max || heads.is_empty() {
        return None;
    }
    let holder = keys.holder(index);
    Some(offers(
        keys,
        &holder,
        &create_is(&holder, 0),
        max,
        heads,
        granted_at,
        None,
    ))
}

/// Offers of the slot at `holder` to each of `heads` in turn (the first [`offers_for`]`(max)`
/// of them), each while `slot` holds, and `last` when none qualifies: see [`handoff_plan`].
///
/// The compares every offer shares are made once (issue 28's ninth look: each offer rides in
/// the transaction to every member's log, tried or not): `slot` and no holder at an index
/// `>= max` around them all, and, around the planned waiters' offers, no emergency waiting.
/// So it is: if `slot` and none `>= max` then (the emergencies' offers in turn, else if no
/// emergency waits then the planned waiters' offers in turn, else `last`), else `last`. Each
/// offer compares its waiter's queue key (still the one read) first, as it fails when that
/// waiter was served meanwhile, before the range compare that reads its whole queue (nobody
/// older). `heads` is in queue order, emergencies first, as every read lists them.
fn offers(
    keys: &Keys,
    holder: &str,
    slot: &Cond,
    max: usize,
    heads: &[Head],
    granted_at: SystemTime,
    last: Option<TxnPlan>,
) -> TxnPlan {
    let offered = &heads[..heads.len().min(offers_for(max))];
    let (emergencies, planned): (Vec<&Head>, Vec<&Head>) = offered
        .iter()
        .partition(|h| h.value.urgency == Urgency::Emergency);
    let planned_part = if planned.is_empty() {
        last.clone()
    } else {
        let (queue, queue_end) = queue_range(keys, Urgency::Emergency);
        Some(TxnPlan {
            when: vec![Cond::CreateRevision {
                key: queue,
                end: Some(queue_end),
                cmp: Cmp::Equal,
                revision: 0,
            }],
            then: vec![Op::Txn(Box::new(
                offers_in_turn(keys, holder, &planned, granted_at, last.clone())
                    .unwrap_or_default(),
            ))],
            otherwise: last.clone().map(Box::new),
        })
    };
    let in_turn = offers_in_turn(keys, holder, &emergencies, granted_at, planned_part);
    TxnPlan {
        when: vec![slot.clone(), none_at_or_above(keys, max)],
        then: in_turn.map(|t| Op::Txn(Box::new(t))).into_iter().collect(),
        otherwise: last.map(Box::new),
    }
}

/// The key range of queue `urgency`.
fn queue_range(keys: &Keys, urgency: Urgency) -> (Vec<u8>, Vec<u8>) {
    let prefix = keys.queue(urgency);
    (prefix.as_bytes().to_vec(), prefix_end(&prefix))
}

/// The slot at `holder` offered to each of `heads` (one queue's, in its order) in turn, each
/// only while that waiter still waits with nobody older in its queue; else `tail`.
fn offers_in_turn(
    keys: &Keys,
    holder: &str,
    heads: &[&Head],
    granted_at: SystemTime,
    tail: Option<TxnPlan>,
) -> Option<TxnPlan> {
    let mut plan = tail;
    for head in heads.iter().rev() {
        let Ok(value) = serde_json::to_vec(&HolderValue {
            node: head.value.node.clone(),
            action: head.value.action.clone(),
            urgency: head.value.urgency,
            since: head.value.since,
            granted_at,
        }) else {
            continue;
        };
        let (own, own_end) = queue_range(keys, head.value.urgency);
        plan = Some(TxnPlan {
            when: vec![
                Cond::CreateRevision {
                    key: head.key.clone(),
                    end: None,
                    cmp: Cmp::Equal,
                    revision: head.create_revision,
                },
                // the waiter's queue holds the waiter, so the range is not empty: nobody older
                Cond::CreateRevision {
                    key: own,
                    end: Some(own_end),
                    cmp: Cmp::Greater,
                    revision: head.create_revision - 1,
                },
            ],
            then: vec![
                Op::Put {
                    key: holder.as_bytes().to_vec(),
                    value,
                    lease: head.lease,
                },
                Op::Delete {
                    key: head.key.clone(),
                },
            ],
            otherwise: plan.map(Box::new),
        });
    }
    plan
}
