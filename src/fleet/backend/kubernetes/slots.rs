//! The protocol core of backend kubernetes, as data (pure): from a read of the group's Leases
//! and this reader's own observations, which slot is free, whether this node already holds
//! one, and which write takes a slot; the Leases it writes.
//!
//! How "free" is judged. A Lease has no expiry on the server, and another host's `renewTime`
//! is that host's clock, so it is never compared with ours (client-go's leader election judges
//! the same way). A slot `<group>-slot-<i>` (i below the budget) is free when it is
//! - absent (a release deletes it, with a resourceVersion precondition),
//! - held by nobody (`holderIdentity` empty: written by hand or by another writer), or
//! - expired: this reader has seen the same `resourceVersion` for longer than the Lease's
//!   `leaseDurationSeconds`, on its own monotonic clock, counted from when an answer showing
//!   that version first *arrived* ([`Observations`]). Every renewal writes a new
//!   resourceVersion, so a live holder's Lease never stays unchanged that long. The holder
//!   counts its own tenure from when it *sent* its latest confirmed renewal ([`Tenure`]); the
//!   write happened after that and the reader saw it after the write, so the reader's deadline
//!   is never before the holder's: a slot is never judged free while its holder may still be
//!   acting. A reader that has just started has seen nothing for long: it waits one whole
//!   duration before it takes over a held slot (safe; a dead holder's slot frees within
//!   `lease_ttl` of the reader's first read).
//!
//! A Lease without `leaseDurationSeconds` (or with 0) counts `lease_ttl`; a longer one than
//! [`MAX_DURATION`] counts that, so a hand-written Lease cannot block a slot for ever.
//!
//! How a grant whose answer was lost is recognised: the slot's `holderIdentity` is this
//! node's name. A create or replace whose answer never came back may or may not have
//! happened, so the next step is always a read; a slot this node holds, at any index, is
//! [`Plan::mine`]; a second one (only by a hand-written Lease) is [`Plan::surplus`], to
//! release.
//!
//! Never more holders than the budget: a slot is one Lease name, and a create of an existing
//! name or a replace naming a stale resourceVersion is refused (409), so two members racing
//! for one slot cannot both win, and there are only `budget` slot names. A slot above the
//! budget (the budget shrank, with a share of a group that got smaller) still counts while it
//! is held, and no slot is taken while the live holders fill the budget.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::names;
use super::types::{Lease, OwnerReference, micro_time};

/// The longest `leaseDurationSeconds` honoured (as `[fleet] lease_ttl`'s own bound).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// The annotation naming the holder's action (shown in the group's view).
pub const ACTION_ANNOTATION: &str = "pleg-guard.io/action";

/// When this reader first saw each Lease at its current resourceVersion, on its own
/// monotonic clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observations {
    seen: BTreeMap<String, Seen>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    resource_version: String,
    since: Instant,
}

impl Observations {
    /// Fold in a read of one Lease whose answer arrived at `now` (None: it does not exist).
    pub fn observe_one(&mut self, name: &str, lease: Option<&Lease>, now: Instant) {
        match lease {
            None => {
                self.seen.remove(name);
            }
            Some(l) => {
                let rv = l.resource_version();
                let same = self
                    .seen
                    .get(name)
                    .is_some_and(|s| s.resource_version == rv);
                if !same {
                    self.seen.insert(
                        name.to_owned(),
                        Seen {
                            resource_version: rv.to_owned(),
                            since: now,
                        },
                    );
                }
            }
        }
    }

    /// Fold in a complete read of the group's Leases (a list by its label) whose answer
    /// arrived at `now`: those not in it are gone.
    pub fn observe_all(&mut self, leases: &[Lease], now: Instant) {
        self.seen
            .retain(|name, _| leases.iter().any(|l| &l.metadata.name == name));
        for l in leases {
            self.observe_one(&l.metadata.name.clone(), Some(l), now);
        }
    }

    /// How long `lease` has been seen unchanged at `now` (zero: not seen at this version).
    pub fn unchanged_for(&self, lease: &Lease, now: Instant) -> Duration {
        self.seen
            .get(&lease.metadata.name)
            .filter(|s| s.resource_version == lease.resource_version())
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s.since))
    }

    /// How many Leases are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// The duration a Lease's holder claims: its `leaseDurationSeconds`, bounded by
/// [`MAX_DURATION`]; `ttl` when it names none.
pub fn duration_of(lease: &Lease, ttl: Duration) -> Duration {
    match lease.spec.lease_duration_seconds {
        Some(s) if s > 0 => Duration::from_secs(s.unsigned_abs()).min(MAX_DURATION),
        _ => ttl.min(MAX_DURATION),
    }
}

/// Whether a held Lease is still live on this reader's clock, and for how long at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its holder may still act: at least this long more.
    Live(Duration),
    /// Unchanged on this reader's clock for longer than its duration.
    Expired,
}

/// `lease`'s liveness at `now`.
pub fn liveness(obs: &Observations, lease: &Lease, ttl: Duration, now: Instant) -> Liveness {
    let d = duration_of(lease, ttl);
    let unchanged = obs.unchanged_for(lease, now);
    if unchanged > d {
        Liveness::Expired
    } else {
        Liveness::Live(d - unchanged)
    }
}

/// One slot as a read shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotView {
    /// No Lease.
    Absent,
    /// A Lease held by nobody, at this resourceVersion.
    Empty(String),
    /// Held by this node.
    Mine(String),
    /// Held by another node, live.
    Held {
        /// The holder.
        holder: String,
        /// At least this long more.
        left: Duration,
    },
    /// Held by another node, expired on this reader's clock.
    Expired {
        /// The holder it had.
        holder: String,
        /// Its resourceVersion.
        resource_version: String,
    },
}

impl SlotView {
    /// Of `lease` (None: absent) for `node`.
    pub fn of(
        lease: Option<&Lease>,
        node: &str,
        obs: &Observations,
        ttl: Duration,
        now: Instant,
    ) -> SlotView {
        let Some(l) = lease else {
            return SlotView::Absent;
        };
        let rv = l.resource_version().to_owned();
        match l.holder() {
            None => SlotView::Empty(rv),
            Some(h) if h == node => SlotView::Mine(rv),
            Some(h) => match liveness(obs, l, ttl, now) {
                Liveness::Live(left) => SlotView::Held {
                    holder: h.to_owned(),
                    left,
                },
                Liveness::Expired => SlotView::Expired {
                    holder: h.to_owned(),
                    resource_version: rv,
                },
            },
        }
    }
}

/// A slot this node holds, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The slot.
    pub index: usize,
    /// The Lease as read (what a renewal or release names).
    pub lease: Lease,
}

/// Another node's live slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherHolder {
    /// The slot.
    pub index: usize,
    /// The holder.
    pub node: String,
    /// Its action (`?` when the Lease does not say).
    pub action: String,
    /// At least this long more.
    pub left: Duration,
}

/// The write that takes a free slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// The slot has no Lease: create it.
    Create {
        /// The slot.
        index: usize,
    },
    /// The slot's Lease is empty or expired: replace it at the version read.
    Replace {
        /// The slot.
        index: usize,
        /// The Lease as read.
        lease: Box<Lease>,
    },
}

impl Take {
    /// The slot taken.
    pub fn index(&self) -> usize {
        match self {
            Take::Create { index } | Take::Replace { index, .. } => *index,
        }
    }
}

/// What a read of the group's slots means for this node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// The slot this node holds (the lowest, if it holds several).
    pub mine: Option<Held>,
    /// Further slots this node holds: release them.
    pub surplus: Vec<Held>,
    /// Other nodes' live slots, by index.
    pub others: Vec<OtherHolder>,
    /// The write to take a slot (None: this node holds one, or none is free within the
    /// budget).
    pub take: Option<Take>,
    /// The budget this plan was made for.
    pub budget: usize,
}

impl Plan {
    /// Slots held now, this node's included.
    pub fn holders(&self) -> usize {
        self.others.len() + usize::from(self.mine.is_some()) + self.surplus.len()
    }

    /// Make the plan: `leases` are the group's Leases as read (any kind: the slots are picked
    /// out by name), `budget` the slots the group has now.
    pub fn make(
        group: &str,
        node: &str,
        budget: usize,
        leases: &[Lease],
        obs: &Observations,
        ttl: Duration,
        now: Instant,
    ) -> Plan {
        let mut slots: BTreeMap<usize, &Lease> = BTreeMap::new();
        for l in leases {
            if let Some(i) = names::slot_index(group, &l.metadata.name) {
                slots.insert(i, l);
            }
        }
        let mut plan = Plan {
            budget,
            ..Plan::default()
        };
        // The lowest index without a Lease (a gap), within the budget, is one candidate;
        // empty and expired Leases within the budget are the others; the lowest one wins.
        let mut free_by_index: BTreeMap<usize, Take> = BTreeMap::new();
        let gap = (0..).find(|i| !slots.contains_key(i)).unwrap_or(usize::MAX);
        if gap < budget {
            free_by_index.insert(gap, Take::Create { index: gap });
        }
        for (&index, &l) in &slots {
            match SlotView::of(Some(l), node, obs, ttl, now) {
                SlotView::Absent => {}
                SlotView::Empty(_) | SlotView::Expired { .. } => {
                    if index < budget {
                        free_by_index.entry(index).or_insert_with(|| Take::Replace {
                            index,
                            lease: Box::new(l.clone()),
                        });
                    }
                }
                SlotView::Mine(_) => {
                    let held = Held {
                        index,
                        lease: l.clone(),
                    };
                    if plan.mine.is_none() {
                        plan.mine = Some(held);
                    } else {
                        plan.surplus.push(held);
                    }
                }
                SlotView::Held { holder, left } => plan.others.push(OtherHolder {
                    index,
                    node: holder,
                    action: l
                        .metadata
                        .annotations
                        .get(ACTION_ANNOTATION)
                        .cloned()
                        .unwrap_or_else(|| "?".to_owned()),
                    left,
                }),
            }
        }
        if plan.mine.is_none() && plan.holders() < budget {
            plan.take = free_by_index.into_values().next();
        }
        plan
    }
}

/// What a slot Lease says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The group.
    pub group: &'a str,
    /// This node.
    pub node: &'a str,
    /// The action the slot is for (the contract's name).
    pub action: &'a str,
    /// The duration written (`lease_ttl`).
    pub ttl: Duration,
    /// This node's Node, as owner (None: not known; the Lease then outlives a deleted Node
    /// until it expires).
    pub owner: Option<OwnerReference>,
}

impl Claim<'_> {
    /// The Lease that takes `take` at wall time `wall`: a new one to create, or the one read
    /// with its resourceVersion, holder and times replaced.
    pub fn lease(&self, take: &Take, wall: SystemTime) -> Lease {
        let (index, mut lease) = match take {
            Take::Create { index } => (*index, Lease::new(&names::slot_lease(self.group, *index))),
            Take::Replace { index, lease } => {
                let mut l = (**lease).clone();
                l.spec.lease_transitions =
                    Some(l.spec.lease_transitions.unwrap_or(0).saturating_add(1));
                (*index, l)
            }
        };
        debug_assert_eq!(lease.metadata.name, names::slot_lease(self.group, index));
        lease
            .metadata
            .labels
            .insert(names::GROUP_LABEL.to_owned(), self.group.to_owned());
        lease
            .metadata
            .annotations
            .insert(ACTION_ANNOTATION.to_owned(), self.action.to_owned());
        lease.metadata.owner_references = self.owner.iter().cloned().collect();
        lease.spec.holder_identity = Some(self.node.to_owned());
        lease.spec.lease_duration_seconds =
            Some(i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX));
        lease.spec.acquire_time = Some(micro_time(wall));
        lease.spec.renew_time = Some(micro_time(wall));
        lease
    }
}

/// `held`'s renewal at wall time `wall`: the same Lease at the version read, a new
/// `renewTime` (and so, once written, a new resourceVersion).
pub fn renewal(held: &Lease, wall: SystemTime) -> Lease {
    let mut l = held.clone();
    l.spec.renew_time = Some(micro_time(wall));
    l
}

/// This node's tenure of a slot, on its own monotonic clock: valid until the duration has
/// passed since the latest renewal was *sent* that the server confirmed (the reader's
/// deadline is never earlier, see the module's notes). A repair starts only within a fresh
/// tenure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenure {
    /// When the confirmed write was sent.
    pub sent: Instant,
    /// The duration written.
    pub duration: Duration,
}

impl Tenure {
    /// The latest moment this node may still act on the slot.
    pub fn deadline(&self) -> Instant {
        self.sent + self.duration
    }

    /// Whether the slot is still this node's at `now`, with `margin` to spare.
    pub fn valid(&self, now: Instant, margin: Duration) -> bool {
        now + margin < self.deadline()
    }

    /// When to renew: a third of the duration after the confirmed write (two renewals may
    /// fail before the tenure runs out).
    pub fn renew_at(&self) -> Instant {
        self.sent + self.duration / 3
    }
}

/// A member's finding Lease: `<group>-finding-<node>`, the findings in its annotation.
pub fn finding_lease(
    group: &str,
    node: &str,
    findings: &[String],
    ttl: Duration,
    wall: SystemTime,
    read: Option<&Lease>,
) -> Lease {
    let mut l = match read {
        Some(l) => l.clone(),
        None => Lease::new(&names::finding_lease(group, node)),
    };
    l.metadata
        .labels
        .insert(names::GROUP_LABEL.to_owned(), group.to_owned());
    l.metadata
        .annotations
        .insert(names::FINDINGS_ANNOTATION.to_owned(), findings.join(","));
    l.spec.holder_identity = Some(node.to_owned());
    l.spec.lease_duration_seconds = Some(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
    if l.spec.acquire_time.is_none() {
        l.spec.acquire_time = Some(micro_time(wall));
    }
    l.spec.renew_time = Some(micro_time(wall));
    l
}

/// The live finding Leases of `group` (another writer's count the same): each member's name
/// and findings. A finding Lease whose holder is not the node its name ends with counts under
/// its name's node (one Lease per node, whoever writes it).
pub fn live_findings(
    group: &str,
    leases: &[Lease],
    obs: &Observations,
    ttl: Duration,
    now: Instant,
) -> Vec<(String, Vec<String>)> {
    let prefix = format!("{group}-finding-");
    let mut out: Vec<(String, Vec<String>)> = leases
        .iter()
        .filter(|l| {
            l.metadata
                .labels
                .get(names::GROUP_LABEL)
                .map(String::as_str)
                == Some(group)
        })
        .filter_map(|l| {
            let node = l.metadata.name.strip_prefix(&prefix)?;
            if node.is_empty() || l.holder().is_none() {
                return None;
            }
            if liveness(obs, l, ttl, now) == Liveness::Expired {
                return None;
            }
            let findings = l
                .metadata
                .annotations
                .get(names::FINDINGS_ANNOTATION)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Some((node.to_owned(), findings))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;
