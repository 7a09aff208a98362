//! A group's keys, their values, a group as one read shows it, and what a waiter does next.
//! Pure.
//!
//! Keys under `<prefix>/<group>/`, all on the lease of the node that wrote them:
//! - `members/<node>`: one per live daemon ([`MemberValue`], JSON); it carries the findings the
//!   node acts on (the storm guard counts them, [`crate::fleet::storm`]);
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

mod keys;
mod plan;
mod snapshot;
#[cfg(test)]
mod tests;
mod values;

pub use keys::*;
pub use plan::*;
pub use snapshot::*;
pub use values::*;
