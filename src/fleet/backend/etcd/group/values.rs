//! The values of a group's keys (JSON), and a key as etcd returned it.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::keys::Keys;
use crate::fleet::Urgency;

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

/// What the storm guard reads from a member key (it is the storm guard's).
pub use crate::fleet::storm::MemberFindings;

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
    /// For a key under `holders/` that is no slot this version writes: the key, so that an
    /// operator can be told what to delete (None: a slot).
    pub stray_key: Option<String>,
}

/// A key as an operator may be shown it (in status and the journal): anyone who may write
/// the group's keys may name one, so its control characters are escaped.
fn shown(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for c in String::from_utf8_lossy(key).chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl Held {
    /// From a key under `holders/` (None: not under it). A key there that is no holder index
    /// this protocol writes (written by hand, or by another version) counts as a holder
    /// beyond any budget (`usize::MAX`), as the grants' compare of "no holder at an index
    /// `>= max`" sees it: waiters then wait for it to go instead of trying grants that fail.
    pub fn parse(keys: &Keys, kv: RawKv<'_>) -> Option<Held> {
        if !kv.key.starts_with(keys.holders().as_bytes()) {
            return None;
        }
        let index = keys.index_of(kv.key);
        Some(Held {
            index: index.unwrap_or(usize::MAX),
            value: serde_json::from_slice(kv.value).ok(),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            lease: kv.lease,
            stray_key: index.is_none().then(|| shown(kv.key)),
        })
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
