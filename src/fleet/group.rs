//! A group as one etcd read shows it, and who may take a slot next. Pure.
//!
//! Keys under `<prefix>/<group>/`:
//! - `members/<node>`: one per live daemon, on its lease;
//! - `slots/<node>`: one per node that waits for or holds a slot, on the same lease
//!   ([`SlotValue`], JSON);
//! - `guard`: rewritten by every grant, so that a grant's transaction, compared on the guard's
//!   `mod_revision` from the read it was decided on, fails when any other grant came between.
//!
//! Releases and lease expiries only delete slot keys: they lower the count, so a grant decided
//! on an older read stays within the budget. A slot value that cannot be read is counted as
//! held (someone may be acting; never hand out its slot).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::MaxDisruptive;
use super::Urgency;

/// The key segment of member keys.
pub const MEMBERS: &str = "members/";
/// The key segment of slot keys.
pub const SLOTS: &str = "slots/";
/// The guard key's name.
pub const GUARD: &str = "guard";

/// Where a slot request stands, as written in its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Queued.
    Waiting,
    /// Granted: the node is in a disruptive repair.
    Holding,
}

/// The value of `slots/<node>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotValue {
    /// The node.
    pub node: String,
    /// The action the slot is for (the contract's name).
    pub action: String,
    /// Emergency cure or planned reexec.
    pub urgency: Urgency,
    /// Since when the node asks.
    #[serde(with = "crate::clock::time_format")]
    pub since: SystemTime,
    /// Waiting or holding.
    pub state: Phase,
    /// When the slot was granted.
    #[serde(default, with = "crate::clock::time_format::option")]
    pub granted_at: Option<SystemTime>,
}

/// The value of `members/<node>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberValue {
    /// The node.
    pub node: String,
    /// Since when this daemon is a member.
    #[serde(with = "crate::clock::time_format")]
    pub since: SystemTime,
    /// pleg-guard's version.
    pub version: String,
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
    /// The revision that last changed it.
    pub mod_revision: i64,
    /// Its lease (0: none).
    pub lease: i64,
}

/// A slot key.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// The node (from the key).
    pub node: String,
    /// The value, or None when it cannot be read (counted as holding).
    pub value: Option<SlotValue>,
    /// Its create revision: the queue order.
    pub create_revision: i64,
    /// Its lease.
    pub lease: i64,
}

impl Slot {
    /// Whether this slot counts against the budget.
    pub fn holding(&self) -> bool {
        self.value
            .as_ref()
            .is_none_or(|v| v.state == Phase::Holding)
    }

    fn urgency(&self) -> Urgency {
        self.value.as_ref().map_or(Urgency::Planned, |v| v.urgency)
    }
}

/// The group at one revision.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupRead {
    /// The revision of the read.
    pub revision: i64,
    /// The guard key's mod revision (0: no grant yet).
    pub guard_mod_revision: i64,
    /// Live members' names.
    pub members: Vec<String>,
    /// Every slot key.
    pub slots: Vec<Slot>,
}

/// What this node may do with its request, by one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Try to take a slot: a grant transaction compared on these revisions.
    Take {
        /// The guard's mod revision in the read.
        guard_mod_revision: i64,
        /// This node's slot key's create revision.
        create_revision: i64,
    },
    /// Wait: the group is full, or others are ahead.
    Wait {
        /// Waiters ahead of this node that the free slots go to first.
        position: usize,
        /// Slots held.
        holders: usize,
        /// Slots in the group.
        max: usize,
    },
    /// This node already holds its slot.
    Holding,
    /// This node's slot key is not there (or is on another lease): write it again.
    Missing,
}

impl GroupRead {
    /// Build from the keys under `group_prefix` (which ends in `/`); keys outside it are
    /// ignored.
    pub fn parse<'a>(
        group_prefix: &str,
        revision: i64,
        kvs: impl IntoIterator<Item = RawKv<'a>>,
    ) -> GroupRead {
        let mut read = GroupRead {
            revision,
            ..GroupRead::default()
        };
        for kv in kvs {
            let Some(rest) = kv.key.strip_prefix(group_prefix.as_bytes()) else {
                continue;
            };
            let Ok(rest) = std::str::from_utf8(rest) else {
                continue;
            };
            if rest == GUARD {
                read.guard_mod_revision = kv.mod_revision;
            } else if let Some(node) = rest.strip_prefix(MEMBERS) {
                read.members.push(node.to_owned());
            } else if let Some(node) = rest.strip_prefix(SLOTS) {
                read.slots.push(Slot {
                    node: node.to_owned(),
                    value: serde_json::from_slice(kv.value).ok(),
                    create_revision: kv.create_revision,
                    lease: kv.lease,
                });
            }
        }
        read.members.sort();
        read.slots.sort_by_key(|s| s.create_revision);
        read
    }

    /// The slots held now.
    pub fn holders(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().filter(|s| s.holding())
    }

    /// The waiters in the order slots go to them: emergency cures first, then first come.
    pub fn queue(&self) -> Vec<&Slot> {
        let mut q: Vec<&Slot> = self.slots.iter().filter(|s| !s.holding()).collect();
        q.sort_by_key(|s| (s.urgency() != Urgency::Emergency, s.create_revision));
        q
    }

    /// The group's slots now: a share is of the live members (this node counts once it is a
    /// member).
    pub fn max(&self, budget: MaxDisruptive) -> usize {
        budget.slots(self.members.len())
    }

    /// Whether `node` (whose keys are on `lease`) may take a slot now.
    pub fn admission(&self, node: &str, lease: i64, budget: MaxDisruptive) -> Admission {
        let Some(mine) = self
            .slots
            .iter()
            .find(|s| s.node == node && s.lease == lease)
        else {
            return Admission::Missing;
        };
        if mine.holding() {
            return Admission::Holding;
        }
        let holders = self.holders().count();
        let max = self.max(budget);
        let position = self
            .queue()
            .iter()
            .position(|s| s.node == node)
            .unwrap_or(0);
        if holders < max && position < max - holders {
            Admission::Take {
                guard_mod_revision: self.guard_mod_revision,
                create_revision: mine.create_revision,
            }
        } else {
            Admission::Wait {
                position,
                holders,
                max,
            }
        }
    }
}

/// One key as this node keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKv {
    /// The value.
    pub value: Vec<u8>,
    /// The revision that created the key.
    pub create_revision: i64,
    /// The revision that last changed it.
    pub mod_revision: i64,
    /// Its lease (0: none).
    pub lease: i64,
}

/// This node's copy of a group's keys: one read, then kept current from the watch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupCopy {
    /// `<prefix>/<group>/`.
    pub prefix: String,
    /// The newest revision applied.
    pub revision: i64,
    /// The keys.
    pub kvs: std::collections::BTreeMap<Vec<u8>, StoredKv>,
}

impl GroupCopy {
    /// An empty copy at `revision`.
    pub fn new(prefix: &str, revision: i64) -> GroupCopy {
        GroupCopy {
            prefix: prefix.to_owned(),
            revision,
            kvs: Default::default(),
        }
    }

    /// A key written (by a watch event, or by this node's own call): kept unless the copy
    /// already has a newer version of it.
    pub fn put(&mut self, key: Vec<u8>, kv: StoredKv) {
        self.revision = self.revision.max(kv.mod_revision);
        match self.kvs.get(&key) {
            Some(old) if old.mod_revision > kv.mod_revision => {}
            _ => {
                self.kvs.insert(key, kv);
            }
        }
    }

    /// A key deleted at `revision` (a release or a lease expiry).
    pub fn delete(&mut self, key: &[u8], revision: i64) {
        self.revision = self.revision.max(revision);
        if self
            .kvs
            .get(key)
            .is_some_and(|old| old.mod_revision <= revision)
        {
            self.kvs.remove(key);
        }
    }

    /// The group as the copy shows it now.
    pub fn read(&self) -> GroupRead {
        GroupRead::parse(
            &self.prefix,
            self.revision,
            self.kvs.iter().map(|(k, v)| RawKv {
                key: k,
                value: &v.value,
                create_revision: v.create_revision,
                mod_revision: v.mod_revision,
                lease: v.lease,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const P: &str = "/pg/default/";

    fn slot(node: &str, state: Phase, urgency: Urgency) -> Vec<u8> {
        serde_json::to_vec(&SlotValue {
            node: node.to_owned(),
            action: "restart-kubelet".to_owned(),
            urgency,
            since: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            state,
            granted_at: None,
        })
        .unwrap_or_default()
    }

    struct Keys(Vec<(String, Vec<u8>, i64, i64)>);

    impl Keys {
        fn new() -> Self {
            Keys(Vec::new())
        }
        fn member(mut self, n: &str) -> Self {
            self.0
                .push((format!("{P}members/{n}"), b"{}".to_vec(), 1, 1));
            self
        }
        fn slot(mut self, n: &str, rev: i64, state: Phase, u: Urgency) -> Self {
            self.0
                .push((format!("{P}slots/{n}"), slot(n, state, u), rev, 7));
            self
        }
        fn raw(mut self, key: &str, value: &[u8], rev: i64) -> Self {
            self.0.push((key.to_owned(), value.to_vec(), rev, 7));
            self
        }
        fn read(&self) -> GroupRead {
            GroupRead::parse(
                P,
                100,
                self.0.iter().map(|(k, v, r, l)| RawKv {
                    key: k.as_bytes(),
                    value: v,
                    create_revision: *r,
                    mod_revision: *r,
                    lease: *l,
                }),
            )
        }
    }

    fn count(n: u32) -> MaxDisruptive {
        MaxDisruptive::Count(std::num::NonZeroU32::new(n).unwrap_or(std::num::NonZeroU32::MIN))
    }

    #[test]
    fn first_come_takes_the_free_slot_and_the_next_waits() {
        let r = Keys::new()
            .member("a")
            .member("b")
            .slot("b", 11, Phase::Waiting, Urgency::Planned)
            .slot("a", 10, Phase::Waiting, Urgency::Planned)
            .raw("/pg/default/guard", b"", 5)
            .read();
        assert_eq!(
            r.admission("a", 7, count(1)),
            Admission::Take {
                guard_mod_revision: 5,
                create_revision: 10
            }
        );
        assert_eq!(
            r.admission("b", 7, count(1)),
            Admission::Wait {
                position: 1,
                holders: 0,
                max: 1
            }
        );
    }

    #[test]
    fn a_full_group_makes_everyone_wait_and_emergencies_go_first() {
        let r = Keys::new()
            .slot("h", 1, Phase::Holding, Urgency::Planned)
            .slot("p", 2, Phase::Waiting, Urgency::Planned)
            .slot("e", 3, Phase::Waiting, Urgency::Emergency)
            .read();
        assert_eq!(
            r.admission("e", 7, count(1)),
            Admission::Wait {
                position: 0,
                holders: 1,
                max: 1
            }
        );
        assert!(matches!(
            r.admission("e", 7, count(2)),
            Admission::Take { .. }
        ));
        assert!(matches!(
            r.admission("p", 7, count(2)),
            Admission::Wait { position: 1, .. }
        ));
        assert_eq!(r.admission("h", 7, count(2)), Admission::Holding);
    }

    #[test]
    fn an_unreadable_slot_counts_as_held() {
        let r = Keys::new()
            .raw("/pg/default/slots/x", b"not json", 1)
            .slot("a", 2, Phase::Waiting, Urgency::Emergency)
            .read();
        assert_eq!(r.holders().count(), 1);
        assert!(matches!(
            r.admission("a", 7, count(1)),
            Admission::Wait { holders: 1, .. }
        ));
    }

    #[test]
    fn a_share_is_of_the_live_members() {
        let mut k = Keys::new();
        for n in ["a", "b", "c", "d"] {
            k = k.member(n);
        }
        let r = k.read();
        assert_eq!(r.max(MaxDisruptive::Percent(50)), 2);
        let r = Keys::new().member("a").member("b").read();
        assert_eq!(r.max(MaxDisruptive::Percent(50)), 1);
        assert_eq!(Keys::new().read().max(MaxDisruptive::Percent(5)), 1);
    }

    #[test]
    fn a_key_on_another_lease_or_outside_the_group_is_not_mine() {
        let r = Keys::new()
            .slot("a", 2, Phase::Waiting, Urgency::Planned)
            .raw("/pg/other/slots/b", b"{}", 3)
            .read();
        assert_eq!(r.slots.len(), 1);
        assert_eq!(r.admission("a", 8, count(1)), Admission::Missing);
        assert_eq!(r.admission("b", 7, count(1)), Admission::Missing);
    }

    #[test]
    fn the_copy_keeps_the_newest_version_of_each_key() {
        let kv = |rev: i64| StoredKv {
            value: format!("v{rev}").into_bytes(),
            create_revision: 3,
            mod_revision: rev,
            lease: 7,
        };
        let mut c = GroupCopy::new(P, 2);
        c.put(b"/pg/default/members/a".to_vec(), kv(5));
        c.put(b"/pg/default/members/a".to_vec(), kv(4));
        assert_eq!(c.kvs[&b"/pg/default/members/a".to_vec()].mod_revision, 5);
        c.delete(b"/pg/default/members/a", 4);
        assert_eq!(
            c.kvs.len(),
            1,
            "a delete older than the key's version is stale"
        );
        c.delete(b"/pg/default/members/a", 6);
        assert!(c.kvs.is_empty());
        assert_eq!(c.revision, 6);
        c.put(b"/pg/default/members/b".to_vec(), kv(8));
        assert_eq!(c.read().members, vec!["b".to_owned()]);
    }
}
