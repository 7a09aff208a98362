//! A group's keys, their values, a group as one read shows it, and what a waiter does next.
//! Pure.
//!
//! Keys under `<prefix>/<group>/`, all on the lease of the node that wrote them:
//! - `members/<node>`: one per live daemon ([`MemberValue`], JSON); it carries the findings the
//!   node acts on (the storm guard counts them, [`super::storm`]);
//! - `queue/emergency/<node>`, `queue/planned/<node>`: one per node that waits for a slot
//!   ([`QueueValue`]); the queue's order is (emergency first, then the key's create revision);
//! - `holders/<index>`: one per slot held, `index` zero-padded in `0..max`
//!   ([`HolderValue`]).
//!
//! A grant is one transaction that succeeds only if `holders/<index>` does not exist, no
//! `holders/` key at an index `>= max` exists, the waiter's queue key is still the one it
//! created, and (for a planned request) no emergency joined the queue since the read the
//! grant was decided on; it writes `holders/<index>` and deletes the queue key. Since every
//! index below `max` can be held by one key only, etcd's history never shows more than `max`
//! holders, whatever the waiters believed; a shrunk budget (a share of fewer members) blocks
//! every grant until the holders above it are gone. Nothing is rewritten by every grant, so
//! grants of different slots never fail each other's transactions.
//!
//! A release hands its slot straight to the first waiter at the head of the queue still
//! waiting, in one transaction ([`handoff_plan`]): it rewrites `holders/<index>` with that
//! waiter's request on that waiter's lease and deletes its queue key. A holder key's create
//! revision may so be an earlier grant's: a grant is known by the revision that wrote the key
//! (with its lease and node). The transactions are data ([`TxnPlan`]), so the tests run them
//! on a fake store.

use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::MaxDisruptive;
use super::Urgency;

/// The key segment of member keys.
pub const MEMBERS: &str = "members/";
/// The key segment of holder keys.
pub const HOLDERS: &str = "holders/";
/// The key segment of every queue key.
pub const QUEUE: &str = "queue/";
/// The digits of a holder key's index.
const INDEX_WIDTH: usize = 6;

/// The keys of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys under `group_prefix` (`<prefix>/<group>/`).
    pub fn new(group_prefix: &str) -> Keys {
        let mut prefix = group_prefix.to_owned();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Keys { prefix }
    }

    /// `<prefix>/<group>/`.
    pub fn group(&self) -> &str {
        &self.prefix
    }

    /// Every member key's prefix.
    pub fn members(&self) -> String {
        format!("{}{MEMBERS}", self.prefix)
    }

    /// `node`'s member key.
    pub fn member(&self, node: &str) -> String {
        format!("{}{MEMBERS}{node}", self.prefix)
    }

    /// Every holder key's prefix.
    pub fn holders(&self) -> String {
        format!("{}{HOLDERS}", self.prefix)
    }

    /// The holder key of slot `index`.
    pub fn holder(&self, index: usize) -> String {
        format!("{}{HOLDERS}{index:0INDEX_WIDTH$}", self.prefix)
    }

    /// The queue of one urgency (a prefix).
    pub fn queue(&self, urgency: Urgency) -> String {
        match urgency {
            Urgency::Emergency => format!("{}{QUEUE}emergency/", self.prefix),
            Urgency::Planned => format!("{}{QUEUE}planned/", self.prefix),
        }
    }

    /// Every queue key's prefix.
    pub fn queues(&self) -> String {
        format!("{}{QUEUE}", self.prefix)
    }

    /// `node`'s queue key for `urgency`.
    pub fn queued(&self, urgency: Urgency, node: &str) -> String {
        format!("{}{node}", self.queue(urgency))
    }

    /// The index of a holder key (None: not a holder key of this group).
    pub fn index_of(&self, key: &[u8]) -> Option<usize> {
        let rest = key.strip_prefix(self.holders().as_bytes())?;
        std::str::from_utf8(rest).ok()?.parse().ok()
    }

    /// The node of a key under a prefix of this group (`members/`, a queue).
    pub fn node_of<'a>(&self, prefix: &str, key: &'a [u8]) -> Option<&'a str> {
        std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()
    }
}

/// The end of the range of every key starting with `prefix` (etcd's `WithPrefix`).
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The value of a queue key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueValue {
    /// The node.
    pub node: String,
    /// The action the slot is for (the contract's name).
    pub action: String,
    /// Emergency cure or planned reexec.
    pub urgency: Urgency,
    /// Since when the node asks.
    #[serde(with = "crate::clock::time_format")]
    pub since: SystemTime,
}

/// The value of a holder key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderValue {
    /// The node.
    pub node: String,
    /// The action the slot is for.
    pub action: String,
    /// Emergency cure or planned reexec.
    pub urgency: Urgency,
    /// Since when the node asked.
    #[serde(with = "crate::clock::time_format")]
    pub since: SystemTime,
    /// When the slot was granted.
    #[serde(with = "crate::clock::time_format")]
    pub granted_at: SystemTime,
}

/// The value of `members/<node>` as this daemon writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberValue {
    /// The node.
    pub node: String,
    /// Since when this daemon is a member.
    #[serde(with = "crate::clock::time_format")]
    pub since: SystemTime,
    /// pleg-guard's version.
    pub version: String,
    /// The findings this node acts on now (the storm guard counts members that report any).
    pub findings: Vec<String>,
}

/// What the storm guard reads from any member key: `{"node":"n1","findings":[...]}` is all a
/// member needs to write (other fields are ignored; no `findings`: none).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct MemberFindings {
    /// The findings the member acts on.
    #[serde(default)]
    pub findings: Vec<String>,
}

impl MemberFindings {
    /// A member key's value (an unreadable one reports nothing).
    pub fn parse(value: &[u8]) -> MemberFindings {
        serde_json::from_slice(value).unwrap_or_default()
    }
}

/// One key as etcd returned it.
#[derive(Debug, Clone, Copy)]
pub struct RawKv<'a> {
    /// The full key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// The revision that created the key.
    pub create_revision: i64,
    /// The revision that last wrote it.
    pub mod_revision: i64,
    /// Its lease (0: none).
    pub lease: i64,
}

/// A slot held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The slot's index.
    pub index: usize,
    /// The value, or None when it cannot be read (still a held slot).
    pub value: Option<HolderValue>,
    /// The key's create revision.
    pub create_revision: i64,
    /// The revision that wrote it: the grant's revision (a handoff overwrites a holder key,
    /// keeping its create revision, so only this tells one grant of a slot from the next).
    pub mod_revision: i64,
    /// Its lease.
    pub lease: i64,
}

impl Held {
    /// From a key under `holders/` (None: not a holder key).
    pub fn parse(keys: &Keys, kv: RawKv<'_>) -> Option<Held> {
        Some(Held {
            index: keys.index_of(kv.key)?,
            value: serde_json::from_slice(kv.value).ok(),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            lease: kv.lease,
        })
    }
}

/// The group at one revision, as far as one waiter (or an idle member) needs it: counts, the
/// holders (at most `max` of them), and the few queue keys just ahead of the waiter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// The revision of the read.
    pub revision: i64,
    /// Live members.
    pub members: usize,
    /// The slots held, by index.
    pub holders: Vec<Held>,
    /// Every waiter in the group.
    pub waiting: usize,
    /// Waiters ahead of this node (0 when it does not wait); a lower bound when more wait
    /// ahead than were read (`nearest_ahead` full).
    pub ahead: usize,
    /// The queue keys ahead of this node, nearest first (at most as many as were asked for).
    pub nearest_ahead: Vec<Vec<u8>>,
    /// Whether this node's queue key is there (None: it was not asked about).
    pub queued: Option<bool>,
    /// The waiters right behind this node, as this read showed them (None: not asked): the
    /// ones the release of a slot it is granted next would hand on to.
    pub behind: Option<Successors>,
    /// For a node that joined the queue in this read's own transaction: every waiter ahead
    /// of it, counted (its key is the newest, so all the others of its queue are ahead, and
    /// for a planned request every emergency). None for any other read, whose `ahead` stops
    /// at the keys it read.
    pub joined_behind: Option<usize>,
}

/// What a waiter watches until something may have changed for it: etcd sends it a message
/// only for these (deletes only), never for the rest of the group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchPlan {
    /// The holder keys (a slot freed).
    pub releases: bool,
    /// One queue key ahead (its waiter was served or left).
    pub key: Option<Vec<u8>>,
    /// The holder keys' puts too (this waiter heads the queue): a releasing holder hands
    /// its slot straight to it by rewriting its holder key ([`handoff_plan`]); the put names
    /// this node on its lease, so it learns of its grant without a read.
    pub handoffs: bool,
}

/// How many slots' worth of waiters ahead make a waiter far enough back to watch from its
/// read ([`watches_from_read`]).
pub const WATCH_FROM_READ_SLOTS: usize = 8;

/// Whether a waiter with `position` waiters ahead of it, in a group of `max` slots, watches
/// from the revision after its read rather than from now.
///
/// A watch from now may start after the read (the group moved meanwhile), so its waiter reads
/// again: one more request (~1 ms of etcd CPU where it was measured) for nearly every waiter
/// that joins a busy queue. A watch from a passed revision misses nothing, but etcd 3.4
/// delivers its events only once its catch-up loop has synced it, up to 100 ms after it was
/// made. A waiter with at least `8 × max` waiters ahead hears its first event (its
/// predecessor served) only after that many grants, eight full turns of every slot (~130 ms
/// at the quickest turns measured, hold 0): by then its watch is in sync, and the second read
/// is saved. Nearer the head a late event would leave a slot handed to it idle, so it watches
/// from now and reads again. Where turns are quicker still, the worst a far waiter meets is
/// its event up to 100 ms late, never a lost one.
pub fn watches_from_read(position: usize, max: usize) -> bool {
    position >= WATCH_FROM_READ_SLOTS * max.max(1)
}

/// What a waiter does next, by one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Take slot `index` (the budget is `max` now).
    Take {
        /// The free index that goes to this waiter.
        index: usize,
        /// The slots in the group now.
        max: usize,
    },
    /// Wait, watching `watch`.
    Wait {
        /// Waiters ahead of this node.
        position: usize,
        /// Slots held.
        holders: usize,
        /// Slots in the group.
        max: usize,
        /// What to watch meanwhile.
        watch: WatchPlan,
    },
}

impl Snapshot {
    /// The group's slots now: a share is of the live members.
    pub fn max(&self, budget: MaxDisruptive) -> usize {
        budget.slots(self.members)
    }

    /// The slot `node` holds on `lease` (a grant whose answer was lost shows here).
    pub fn held_by(&self, node: &str, lease: i64) -> Option<&Held> {
        self.holders
            .iter()
            .find(|h| h.lease == lease && h.value.as_ref().is_some_and(|v| v.node == node))
    }

    /// What a waiter `ahead` of whom this snapshot counted does next. The free indices below
    /// `max` go to the first waiters in order, the `n`-th waiter taking the `n`-th free index,
    /// so waiters with the same snapshot never race for one slot. While any holder sits at an
    /// index `>= max` (the budget shrank) nobody takes a slot.
    ///
    /// A waiter that cannot take one watches as little as will wake it in time (like etcd's
    /// `Mutex.waitDeletes`): the first waiter behind those the free slots go to watches the
    /// releases (the next freed slot is its) and its predecessor; every waiter further back
    /// watches its predecessor only, woken when that one is served or leaves. A release so
    /// wakes one waiter and a grant the one behind it, however many wait: the watch messages
    /// per grant do not grow with the slots or the queue.
    pub fn next(&self, budget: MaxDisruptive) -> Next {
        let max = self.max(budget);
        let blocked = self.holders.iter().any(|h| h.index >= max);
        let free: Vec<usize> = (0..max)
            .filter(|i| !self.holders.iter().any(|h| h.index == *i))
            .take(self.ahead + 1)
            .collect();
        if !blocked {
            if let Some(&index) = free.get(self.ahead) {
                return Next::Take { index, max };
            }
        }
        // the waiters ahead take what is free now; the next release is this waiter's if
        // exactly that many wait ahead of it
        let free_now = if blocked { 0 } else { free.len() };
        let watch = WatchPlan {
            releases: self.ahead == free_now,
            key: self.nearest_ahead.first().cloned(),
            handoffs: self.ahead == 0,
        };
        Next::Wait {
            position: self.ahead,
            holders: self.holders.len(),
            max,
            watch,
        }
    }
}

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
/// transaction with compares of its own; None: nothing). [`super::etcd`] sends it as it is;
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

/// How long the waiters read behind a node stay good enough to hand its slot to without
/// reading the queue's head again. A slot turned over within it (a burst of short repairs)
/// is released in one round trip instead of two; one held longer reads the head first, since
/// by then the waiters read are likely served, and a release whose offers all fail frees its
/// slot instead of handing it over.
pub const SUCCESSORS_FRESH_FOR: Duration = Duration::from_secs(1);

/// How many waiters behind it a waiter reads, with a budget of `depth` slots as last seen:
/// the other holders may each hand a slot on to one of them before this node releases, and
/// [`HANDOFF_CANDIDATES`] more are left to offer its own slot to.
pub fn successors_wanted(depth: usize) -> usize {
    depth.saturating_add(HANDOFF_CANDIDATES).min(MAX_OFFERS)
}

/// The waiters right behind a node, in queue order, and when they were read: read with the
/// node's own reads while it waits (and with its grant), so its release can hand the slot on
/// without a read of the queue's head first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Successors {
    /// The waiters, nearest first.
    pub heads: Vec<Head>,
    /// When they were read.
    pub read_at: Instant,
}

impl Successors {
    /// The waiters to offer a slot to at `now`, and the budget the offers compare against,
    /// if a release may use them instead of reading the head again: only with a fixed count
    /// budget (a share needs the members counted at the release), only when someone was
    /// behind, and only within [`SUCCESSORS_FRESH_FOR`] of the read.
    pub fn usable(&self, budget: MaxDisruptive, now: Instant) -> Option<(usize, &[Head])> {
        let MaxDisruptive::Count(_) = budget else {
            return None;
        };
        let fresh = now.saturating_duration_since(self.read_at) < SUCCESSORS_FRESH_FOR;
        (fresh && !self.heads.is_empty()).then(|| (budget.slots(0), self.heads.as_slice()))
    }
}

/// A waiter at the head of the queue as a releasing holder read it (emergencies first, then
/// by create revision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Its queue key.
    pub key: Vec<u8>,
    /// The key's create revision (its place).
    pub create_revision: i64,
    /// The waiter's lease: a slot handed over is put on it, so it goes when the waiter dies.
    pub lease: i64,
    /// Its request.
    pub value: QueueValue,
}

impl Head {
    /// From a queue key (None: it cannot take a slot handed to it: no lease, an unreadable
    /// value; it still blocks the handoffs to waiters behind it).
    pub fn of(kv: RawKv<'_>) -> Option<Head> {
        let value: QueueValue = serde_json::from_slice(kv.value).ok()?;
        (kv.lease != 0 && kv.create_revision > 0).then(|| Head {
            key: kv.key.to_vec(),
            create_revision: kv.create_revision,
            lease: kv.lease,
            value,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;
    use std::time::Duration;

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
        }
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

        fn grant(
            &mut self,
            k: &Keys,
            node: &str,
            lease: i64,
            index: usize,
            max: usize,
        ) -> Option<i64> {
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
}
