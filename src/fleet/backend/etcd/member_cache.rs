//! The member keys as a node that consults the storm guard knows them: read once, then kept
//! up to date by a watch of `members/` from the revision after that read, as a Kubernetes
//! informer lists once and then watches. Pure: the actor feeds it the read and the watch's
//! events ([`super::actor`]).
//!
//! Reading every member key again to see whether any changed costs etcd 3.4 a look at every
//! key however the read is narrowed (a range filtered by mod revision is read whole before it
//! is cut), so a node whose repair waits on the guard would cost the group's size in work on
//! every look. With the cache it costs one read when it first asks, and then one watch
//! message per member key that changes, nothing while none does.

use std::collections::BTreeMap;

/// One change the watch reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// `node`'s member key was written with `value` (a member joined, or its findings changed).
    Put {
        /// The member's node name.
        node: String,
        /// The key's value.
        value: Vec<u8>,
    },
    /// `node`'s member key went (the node said goodbye, or its lease ran out).
    Delete {
        /// The member's node name.
        node: String,
    },
}

/// The member keys, by node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberCache {
    members: BTreeMap<String, Vec<u8>>,
    changed: bool,
}

impl MemberCache {
    /// The cache of a full read (the watch that keeps it starts at the revision after it, so
    /// every change it reports is newer than the read).
    pub fn new(members: Vec<(String, Vec<u8>)>) -> MemberCache {
        MemberCache {
            members: members.into_iter().collect(),
            changed: true,
        }
    }

    /// Apply the changes of one watch answer, in order.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = MemberChange>) {
        for change in changes {
            match change {
                MemberChange::Put { node, value } => {
                    if self.members.get(&node) != Some(&value) {
                        self.members.insert(node, value);
                        self.changed = true;
                    }
                }
                MemberChange::Delete { node } => {
                    if self.members.remove(&node).is_some() {
                        self.changed = true;
                    }
                }
            }
        }
    }

    /// Whether a member was added, changed or removed since the last call (true after
    /// [`MemberCache::new`]).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Every member key's node and value, by node.
    pub fn members(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.members.iter().map(|(n, v)| (n.as_str(), v.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(node: &str, value: &str) -> MemberChange {
        MemberChange::Put {
            node: node.to_owned(),
            value: value.as_bytes().to_vec(),
        }
    }

    fn delete(node: &str) -> MemberChange {
        MemberChange::Delete {
            node: node.to_owned(),
        }
    }

    fn nodes(c: &MemberCache) -> Vec<(String, String)> {
        c.members()
            .map(|(n, v)| (n.to_owned(), String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    #[test]
    fn a_read_then_its_changes_give_the_members_now() {
        let mut c = MemberCache::new(vec![
            ("a".into(), b"ok".to_vec()),
            ("b".into(), b"ok".to_vec()),
        ]);
        assert!(c.take_changed(), "a fresh read is news");
        assert!(!c.take_changed());
        c.apply([put("b", "sick"), put("c", "ok")]);
        c.apply([delete("a")]);
        assert_eq!(
            nodes(&c),
            [("b".into(), "sick".into()), ("c".into(), "ok".into())]
        );
        assert_eq!(c.members().count(), 2);
        assert!(c.take_changed());
    }

    #[test]
    fn the_same_value_again_or_a_stranger_going_is_no_change() {
        let mut c = MemberCache::new(vec![("a".into(), b"ok".to_vec())]);
        c.take_changed();
        // the same value written again (a keep-alive never writes; a restart may), a member
        // that was never there going
        c.apply([put("a", "ok"), delete("zz")]);
        assert!(!c.take_changed());
        assert_eq!(nodes(&c), [("a".into(), "ok".into())]);
        c.apply([delete("a")]);
        assert_eq!(c.members().count(), 0);
        assert!(c.take_changed());
    }
}
