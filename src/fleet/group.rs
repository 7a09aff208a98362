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

use std::time::SystemTime;

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
    /// The key's create revision: the grant's revision.
    pub create_revision: i64,
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
}

/// What a waiter watches until something may have changed for it: etcd sends it a message
/// only for these (deletes only), never for the rest of the group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchPlan {
    /// The holder keys (a slot freed).
    pub releases: bool,
    /// One queue key ahead (its waiter was served or left).
    pub key: Option<Vec<u8>>,
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
        };
        Next::Wait {
            position: self.ahead,
            holders: self.holders.len(),
            max,
            watch,
        }
    }
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
                key: None
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
}
