//! A group as one read shows it, what a waiter does next by it, and the waiters read
//! behind a node.

use std::time::{Duration, Instant};

use super::plan::{HANDOFF_CANDIDATES, MAX_OFFERS};
use super::values::{Head, Held};
use crate::fleet::MaxDisruptive;

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
    /// `ahead` is a floor: the read stopped at as many keys ahead as it asked for, and more
    /// may wait (the budget grew since the depth it read with was set).
    pub ahead_at_least: bool,
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
    /// its slot straight to it by rewriting its holder key ([`super::handoff_plan`]); the put names
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
    /// Read again, `depth` keys ahead: more slots are free than the waiters this read
    /// counted ahead, and it stopped counting at its limit (a share budget grew since the
    /// last read): taking one now could pass waiters it did not see.
    ReadDeeper {
        /// The keys ahead to read: the slots in the group now.
        depth: usize,
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
                if self.ahead_at_least {
                    return Next::ReadDeeper { depth: max };
                }
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
