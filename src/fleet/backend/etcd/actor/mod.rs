//! The fleet task: keeps this node's lease alive and its member key written, and takes or
//! gives back its slot when the handle asks (the protocol: [`super::group`]).
//!
//! What it costs etcd, by state:
//! - idle (no request): the lease's keep-alives, nothing else — no watch, no periodic read;
//!   the member key is written at connect and when the findings it reports change;
//! - asking: one transaction joins the queue, one read shows the group (counts, the holders,
//!   the few queue keys just ahead), then a grant transaction or a narrow watch (the next in
//!   line: the holder keys' deletes and its predecessor; everyone further back: its
//!   predecessor only, [`Snapshot::next`](super::group::Snapshot::next)); each event the watch
//!   sends costs one read (the next in line tries a freed slot at once); a waiter among the
//!   first `max` also reads again every [`WAIT_RECHECK`] (a share budget grows with members
//!   that join, which no watch reports);
//! - holding: nothing until the release: one transaction that hands the slot to the first
//!   waiter at the head of the queue still waiting, or deletes it
//!   ([`handoff_plan`](super::group::handoff_plan)). The waiters it offers the slot to are
//!   those its own reads showed right behind it while it waited (and its grant, when it took
//!   the slot itself) if that was within
//!   [`SUCCESSORS_FRESH_FOR`](super::group::SUCCESSORS_FRESH_FOR) with a count budget
//!   ([`Successors::usable`]); else one read of the queue's head comes first. The head of the
//!   queue learns of a slot handed to it from its watch (the holder key's put names it on its
//!   lease), without a read.
//!
//! One connection at a time. Any failure drops it and the task reconnects with a backoff of
//! 1 s doubling to 10 s; on reconnect it keeps its old lease when etcd still has it (so a
//! held slot and its place in the queue survive a blip shorter than the lease), else it takes
//! a new one and a held slot counts as lost (`expired`). Every call is bounded by the request
//! timeout, so the handle's state turns `Unreachable` within a few of them when etcd is gone.
//! A grant whose answer never came is not assumed failed: after reconnecting, the read shows
//! whether a holder key carries this node's name on this node's lease.

use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::connection::{Connection, KeepAlive, Me, turn_step};
use super::group::{
    Held, HolderValue, Keys, MemberValue, Next, QueueValue, Snapshot, Successors, WatchPlan,
    watches_from_read,
};
use super::member_cache::{MemberCache, MemberChange};
use super::tls::TlsMaterial;
use super::wire::{classify, is_delete};
use crate::fleet::backend::{Command, Shared};
use crate::fleet::storm::Health;
use crate::fleet::{FleetError, FleetSettings, FleetView, GroupHealth, Holder, SlotState, Urgency};
use crate::target::ActionKind;

mod step;
mod view;
pub(crate) use view::{health_of, view_of};

/// The longest pause between reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often a waiting node reads the group without an event.
pub const WAIT_RECHECK: Duration = Duration::from_secs(5);
/// How long the member keys stay watched after the storm guard last asked for the group's
/// health (a repair that waits on it asks every 5 s); then the node watches nothing again.
const MEMBERS_WATCHED_FOR: Duration = Duration::from_secs(30);
/// Grant attempts in one step before waiting for an event (each failed one brings a fresh
/// read with it).
const GRANT_ATTEMPTS: usize = 8;

/// What this node asks for.
#[derive(Debug, Clone)]
struct Want {
    action: ActionKind,
    urgency: Urgency,
    since: SystemTime,
}

/// A slot this node holds.
#[derive(Debug, Clone, Copy)]
struct Grant {
    since: SystemTime,
    index: usize,
    /// The revision that wrote the holder key: the grant's (a handoff rewrites the key of a
    /// slot, so its create revision may be an earlier grant's).
    revision: i64,
}

impl Grant {
    /// The grant a holder key shows: known by the revision that wrote it.
    fn of(h: &Held) -> Grant {
        Grant {
            since: h
                .value
                .as_ref()
                .map_or_else(SystemTime::now, |v| v.granted_at),
            index: h.index,
            revision: h.mod_revision,
        }
    }
}

/// A slot to give back.
#[derive(Debug, Clone)]
struct ToRelease {
    index: usize,
    /// The grant's revision.
    revision: i64,
    /// The waiters read behind this node before the grant.
    behind: Option<Successors>,
}

/// One live connection.
struct Session {
    conn: Connection,
    keep_alive: KeepAlive,
    /// What a waiter watches (None: nothing).
    watch: Option<Watching>,
    /// The member keys, for the storm guard (None: not asked for lately).
    members: Option<MemberWatch>,
}

/// The member keys read once and watched since, while the storm guard is consulted.
struct MemberWatch {
    cache: MemberCache,
    stream: etcd_client::WatchStream,
    /// When the storm guard last asked.
    wanted_at: Instant,
}

/// A waiter's watch: what it watches, and from which revision.
struct Watching {
    plan: WatchPlan,
    /// The revision after the read the plan came from ([`watches_from_read`]); None: from
    /// when etcd made the watch, which its created answer tells.
    since: Option<i64>,
    stream: etcd_client::WatchStream,
}

/// The task's state.
pub(crate) struct Actor {
    s: FleetSettings,
    keys: Keys,
    tls: TlsMaterial,
    tx: watch::Sender<Shared>,
    want: Option<Want>,
    /// This node's queue key, and the action its value names.
    queued: Option<(Me, ActionKind)>,
    granted: Option<Grant>,
    /// The waiters read behind this node when it was granted its slot (for the release).
    behind: Option<Successors>,
    /// Slots to give back.
    to_release: Vec<ToRelease>,
    queue: Option<(usize, usize, usize)>,
    lease: Option<i64>,
    last_ack: Instant,
    snapshot: Option<Snapshot>,
    /// The group must be read before the next decision.
    stale: bool,
    /// Slots the watch saw freed since the latest read.
    freed: Vec<usize>,
    down: Option<(SystemTime, FleetError)>,
    expired: u64,
    member_since: SystemTime,
    /// The findings this node acts on, and whether its member key says so yet.
    findings: Vec<String>,
    findings_written: bool,
    /// The member keys must be read for the storm guard.
    health_wanted: bool,
    health: Option<GroupHealth>,
}

/// The next message of the watch, if there is one.
async fn next_event(
    watch: &mut Option<Watching>,
) -> Result<Option<etcd_client::WatchResponse>, etcd_client::Error> {
    match watch {
        Some(w) => w.stream.message().await,
        None => std::future::pending().await,
    }
}

/// The next message of the member keys' watch, if there is one.
async fn next_member_event(
    members: &mut Option<MemberWatch>,
) -> Result<Option<etcd_client::WatchResponse>, etcd_client::Error> {
    match members {
        Some(m) => m.stream.message().await,
        None => std::future::pending().await,
    }
}

/// The member key changes of one watch answer.
fn member_changes(keys: &Keys, resp: &etcd_client::WatchResponse) -> Vec<MemberChange> {
    let prefix = keys.members();
    resp.events()
        .iter()
        .filter_map(|ev| {
            let kv = ev.kv()?;
            let node = keys.node_of(&prefix, kv.key())?.to_owned();
            Some(match is_delete(ev)? {
                false => MemberChange::Put {
                    node,
                    value: kv.value().to_vec(),
                },
                true => MemberChange::Delete { node },
            })
        })
        .collect()
}

impl Actor {
    pub(crate) fn new(s: FleetSettings, tls: TlsMaterial, tx: watch::Sender<Shared>) -> Actor {
        Actor {
            keys: Keys::new(&s.group_prefix()),
            s,
            tls,
            tx,
            want: None,
            queued: None,
            granted: None,
            behind: None,
            to_release: Vec::new(),
            queue: None,
            lease: None,
            last_ack: Instant::now(),
            snapshot: None,
            stale: true,
            freed: Vec::new(),
            down: None,
            expired: 0,
            member_since: SystemTime::now(),
            findings: Vec::new(),
            findings_written: false,
            health_wanted: false,
            health: None,
        }
    }

    /// How many queue keys ahead a read brings: the budget as last seen.
    fn depth(&self) -> usize {
        self.snapshot
            .as_ref()
            .map_or_else(
                || self.s.max_disruptive.slots(0),
                |s| s.max(self.s.max_disruptive),
            )
            .max(1)
    }

    /// The task: until the handle shuts it down or goes away.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let mut session = match self.connect().await {
                Ok(session) => {
                    backoff = Duration::from_secs(1);
                    session
                }
                Err(e) => {
                    self.failed(e);
                    let until = Instant::now() + backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    loop {
                        tokio::select! {
                            cmd = rx.recv() => match cmd {
                                None => return,
                                Some(Command::Shutdown(ack)) => {
                                    let _ = ack.send(());
                                    return;
                                }
                                Some(c) => {
                                    self.command(c);
                                    self.publish();
                                }
                            },
                            () = tokio::time::sleep_until(until) => break,
                        }
                    }
                    continue;
                }
            };
            match self.serve(&mut session, &mut rx).await {
                Ok(()) => return,
                Err(e) => self.failed(e),
            }
        }
    }

    /// Work on one connection until it fails (Err) or the handle is done (Ok).
    async fn serve(
        &mut self,
        session: &mut Session,
        rx: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Result<(), FleetError> {
        let every = self.s.lease_ttl / 3;
        let mut next_keep_alive = Instant::now() + every;
        let mut next_recheck = Instant::now() + WAIT_RECHECK;
        let mut dirty = true;
        loop {
            if dirty {
                self.step(session).await?;
                self.publish();
                dirty = false;
            }
            // a waiter within reach of a slot reads again now and then (a share budget grows
            // with members that join, which no watch reports); one further back is woken by
            // the key it watches
            let waiting = self.want.is_some()
                && self.granted.is_none()
                && self.queue.is_none_or(|(position, _, max)| position < max);
            let members_idle_at = session
                .members
                .as_ref()
                .map_or(next_keep_alive, |m| m.wanted_at + MEMBERS_WATCHED_FOR);
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    None => {
                        self.goodbye(session).await;
                        return Ok(());
                    }
                    Some(Command::Shutdown(ack)) => {
                        self.goodbye(session).await;
                        let _ = ack.send(());
                        return Ok(());
                    }
                    Some(c) => {
                        self.command(c);
                        self.publish();
                        dirty = true;
                    }
                },
                msg = next_event(&mut session.watch) => match msg {
                    Ok(Some(resp)) if resp.canceled() => {
                        // e.g. its start revision was compacted: read and watch anew
                        session.watch = None;
                        self.stale = true;
                        dirty = true;
                    }
                    Ok(Some(resp)) => {
                        // a watch from now: anything between the read its plan came from
                        // and the watch's start is read again (a watch from the read's
                        // revision misses nothing)
                        let created_at = resp.header().map_or(0, |h| h.revision());
                        let from_now = session.watch.as_ref().is_some_and(|w| w.since.is_none());
                        if resp.created()
                            && from_now
                            && self.snapshot.as_ref().is_some_and(|s| created_at > s.revision)
                        {
                            turn_step!(self.s.node.as_str(), "watch_past_read", created_at);
                            self.stale = true;
                            dirty = true;
                        }
                        for ev in resp.events() {
                            self.stale = true;
                            dirty = true;
                            let Some(kv) = ev.kv() else { continue };
                            let Some(i) = self.keys.index_of(kv.key()) else { continue };
                            let Some(delete) = is_delete(ev) else { continue };
                            if delete {
                                self.freed.push(i);
                            } else if let Some(grant) = self.handed(i, kv) {
                                // a releasing holder handed this node its slot: no read
                                turn_step!(self.s.node.as_str(), "handed", grant.revision);
                                self.granted = Some(grant);
                                self.behind =
                                    self.snapshot.as_ref().and_then(|s| s.behind.clone());
                                self.queued = None;
                                self.queue = None;
                                self.stale = false;
                                session.watch = None;
                                self.publish();
                                break;
                            }
                        }
                    }
                    Ok(None) => return Err(FleetError::Unreachable("the watch ended".to_owned())),
                    Err(e) => return Err(classify(&e, false)),
                },
                msg = next_member_event(&mut session.members) => match msg {
                    Ok(Some(resp)) if resp.canceled() => {
                        // e.g. its start revision was compacted: read them again when asked
                        session.members = None;
                    }
                    Ok(Some(resp)) => {
                        if let Some(m) = session.members.as_mut() {
                            m.cache.apply(member_changes(&self.keys, &resp));
                            if self.health.is_some() {
                                self.health_from(m);
                                self.publish();
                            }
                        }
                    }
                    Ok(None) => {
                        return Err(FleetError::Unreachable("the members' watch ended".to_owned()))
                    }
                    Err(e) => return Err(classify(&e, false)),
                },
                () = tokio::time::sleep_until(members_idle_at), if session.members.is_some() => {
                    // the storm guard stopped asking: watch nothing again
                    session.members = None;
                },
                answer = session.keep_alive.answers.message() => match answer {
                    Ok(Some(a)) if a.ttl() > 0 => self.last_ack = Instant::now(),
                    Ok(Some(_)) => {
                        self.lease_lost();
                        return Err(FleetError::Unreachable("the lease expired".to_owned()));
                    }
                    Ok(None) => return Err(FleetError::Unreachable("the keep-alive stream ended".to_owned())),
                    Err(e) => return Err(classify(&e, false)),
                },
                () = tokio::time::sleep_until(next_keep_alive) => {
                    next_keep_alive = Instant::now() + every;
                    if self.last_ack.elapsed() > every * 2 + self.s.request_timeout {
                        return Err(FleetError::Unreachable("keep-alives unanswered".to_owned()));
                    }
                    if let Err(e) = session.keep_alive.keeper.keep_alive().await {
                        return Err(classify(&e, false));
                    }
                },
                () = tokio::time::sleep_until(next_recheck), if waiting => {
                    next_recheck = Instant::now() + WAIT_RECHECK;
                    self.stale = true;
                    dirty = true;
                },
            }
            if !waiting {
                next_recheck = Instant::now() + WAIT_RECHECK;
            }
        }
    }

    /// The group's health for the storm guard: the member keys read once, then kept up to
    /// date by a watch (no read while none changes: [`MemberCache`]).
    async fn read_health(&mut self, session: &mut Session) -> Result<(), FleetError> {
        let members = match session.members.as_mut() {
            Some(m) => m,
            None => {
                let (revision, members) = session.conn.members(&self.keys).await?;
                // every change after the read: none missed, none counted twice
                let stream = session.conn.watch_members(&self.keys, revision + 1).await?;
                session.members.insert(MemberWatch {
                    cache: MemberCache::new(members),
                    stream,
                    wanted_at: Instant::now(),
                })
            }
        };
        members.wanted_at = Instant::now();
        self.health_from(members);
        Ok(())
    }

    /// The health as `members` shows it now (worked out again only when a member changed).
    fn health_from(&mut self, members: &mut MemberWatch) {
        match self.health.as_mut() {
            Some(h) if !members.cache.take_changed() => h.read_at = SystemTime::now(),
            _ => self.health = Some(health_of(&self.s, members.cache.members())),
        }
    }

    fn member_value(&self) -> Result<Vec<u8>, FleetError> {
        serde_json::to_vec(&MemberValue {
            node: self.s.node.clone(),
            since: self.member_since,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            findings: self.findings.clone(),
        })
        .map_err(|e| FleetError::Protocol(e.to_string()))
    }

    /// Connect, keep or take a lease, write the member key, read the group once.
    async fn connect(&mut self) -> Result<Session, FleetError> {
        let mut conn = Connection::open(&self.s, &self.tls).await?;
        let kept = match self.lease {
            Some(id) => conn.keep_alive(id).await?.map(|k| (id, k)),
            None => None,
        };
        let lease_kept = kept.is_some();
        let (lease, keep_alive) = match kept {
            Some(k) => k,
            None => {
                if self.lease.is_some() {
                    self.lease_lost();
                }
                conn.new_lease(self.s.lease_ttl).await?
            }
        };
        self.lease = Some(lease);
        self.last_ack = Instant::now();
        conn.put(&self.keys.member(&self.s.node), self.member_value()?, lease)
            .await?;
        self.findings_written = true;
        let me = self.queued.map(|(me, _)| me);
        let snap = conn
            .snapshot(&self.keys, &self.s.node, me.as_ref(), self.depth())
            .await?;
        if self.granted.is_some() && snap.held_by(&self.s.node, lease).is_none() {
            // the holder key went (deleted by hand, or the lease ran out meanwhile)
            self.granted = None;
            self.expired += 1;
        }
        // what a lost answer left behind: slots first (taking one back ends a request), then
        // requests this node no longer makes
        let mut withdrew = false;
        if lease_kept {
            self.reclaim_unknown_slots(&mut conn, &snap, lease).await?;
            if self.queued.is_none() {
                withdrew = self.withdraw_lost_joins(&mut conn, lease).await?;
            }
        }
        self.snapshot = Some(snap);
        // a request withdrawn was counted in the read
        self.stale = withdrew;
        self.down = None;
        Ok(Session {
            conn,
            keep_alive,
            watch: None,
            members: None,
        })
    }

    /// A join whose answer was lost left its queue key on this lease, unknown to this node: it
    /// goes unless the node still waits in that queue (then the next join finds it and keeps
    /// its place). Left there, it would reach the head and be handed a slot no one here
    /// releases. Whether any went.
    async fn withdraw_lost_joins(
        &mut self,
        conn: &mut Connection,
        lease: i64,
    ) -> Result<bool, FleetError> {
        let mut withdrew = false;
        for me in conn.own_requests(&self.keys, &self.s.node, lease).await? {
            let waits_there = self.granted.is_none()
                && self.want.as_ref().is_some_and(|w| w.urgency == me.urgency);
            if waits_there {
                continue;
            }
            withdrew = true;
            turn_step!(
                self.s.node.as_str(),
                "lost_join_withdrawn",
                me.create_revision
            );
            if let Some(h) = conn.withdraw(&self.keys, &self.s.node, &me, lease).await? {
                self.release_unknown(&h);
            }
        }
        Ok(withdrew)
    }

    /// A holder key with this node's name on its lease that this node does not count as its
    /// own (a grant or a handoff whose news was lost, or a grant presumed gone while cut off
    /// though the lease lived): the slot is this node's again if it still waits for one,
    /// else it is released (handed on) at once. Left there, it would hold a slot until the
    /// daemon stops.
    async fn reclaim_unknown_slots(
        &mut self,
        conn: &mut Connection,
        snap: &Snapshot,
        lease: i64,
    ) -> Result<(), FleetError> {
        let node = self.s.node.clone();
        let mine = snap
            .holders
            .iter()
            .filter(|h| h.lease == lease && h.value.as_ref().is_some_and(|v| v.node == node));
        for h in mine {
            let known = self
                .granted
                .is_some_and(|g| g.index == h.index && g.revision == h.mod_revision)
                || self
                    .to_release
                    .iter()
                    .any(|r| r.index == h.index && r.revision == h.mod_revision);
            if known {
                continue;
            }
            if self.want.is_some() && self.granted.is_none() {
                turn_step!(self.s.node.as_str(), "slot_reclaimed", h.mod_revision);
                self.granted = Some(Grant::of(h));
                self.behind = snap.behind.clone();
                if let Some((me, _)) = self.queued.take() {
                    // a grant deletes its queue key; one left is a later request's
                    conn.delete_own(
                        &self.keys.queued(me.urgency, &self.s.node),
                        me.create_revision,
                    )
                    .await?;
                }
            } else {
                self.release_unknown(h);
            }
        }
        Ok(())
    }

    /// Queue the release of a slot this node holds but did not count as its own.
    fn release_unknown(&mut self, h: &Held) {
        turn_step!(
            self.s.node.as_str(),
            "unknown_slot_released",
            h.mod_revision
        );
        if !self
            .to_release
            .iter()
            .any(|r| r.index == h.index && r.revision == h.mod_revision)
        {
            self.to_release.push(ToRelease {
                index: h.index,
                revision: h.mod_revision,
                behind: None,
            });
        }
    }

    /// The lease is gone: a held slot and the place in the queue went with it.
    fn lease_lost(&mut self) {
        self.lease = None;
        self.queued = None;
        self.to_release.clear();
        if self.granted.take().is_some() {
            self.expired += 1;
        }
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Request(action, urgency) => match &mut self.want {
                None => {
                    self.want = Some(Want {
                        action,
                        urgency,
                        since: SystemTime::now(),
                    });
                }
                Some(w)
                    if self.granted.is_none() && (w.action != action || w.urgency != urgency) =>
                {
                    if urgency == Urgency::Emergency || w.action != action {
                        w.action = action;
                        w.urgency = urgency;
                    }
                }
                Some(_) => {}
            },
            Command::Release => {
                self.want = None;
                if let Some(g) = self.granted.take() {
                    turn_step!(self.s.node.as_str(), "release_asked", g.revision);
                    self.to_release.push(ToRelease {
                        index: g.index,
                        revision: g.revision,
                        behind: self.behind.take(),
                    });
                    if let Some(s) = self.snapshot.as_mut() {
                        s.holders.retain(|h| h.index != g.index);
                    }
                }
                self.queue = None;
            }
            Command::Findings(findings) => {
                if findings != self.findings {
                    self.findings = findings;
                    self.findings_written = false;
                }
            }
            Command::ReadHealth => self.health_wanted = true,
            Command::Shutdown(_) => {}
        }
    }

    /// Join the queue (or find this node's request there already): its snapshot.
    async fn join(
        &mut self,
        session: &mut Session,
        want: &Want,
        queue_value: &[u8],
        lease: i64,
        depth: usize,
    ) -> Result<Snapshot, FleetError> {
        let (me, snap) = session
            .conn
            .join(
                &self.keys,
                &self.s.node,
                want.urgency,
                queue_value.to_vec(),
                lease,
                depth,
            )
            .await?;
        self.queued = Some((me, want.action));
        Ok(snap)
    }

    /// Withdraw this node's request from the queue (it is forgotten once etcd answered); a
    /// slot a releasing holder handed it meanwhile comes back, for the caller to keep or give
    /// back.
    async fn withdraw(
        &mut self,
        session: &mut Session,
        me: &Me,
        lease: i64,
    ) -> Result<Option<Held>, FleetError> {
        let handed = session
            .conn
            .withdraw(&self.keys, &self.s.node, me, lease)
            .await?;
        self.queued = None;
        Ok(handed)
    }

    /// Give back every slot to release (each handed on to the head of the queue, or freed);
    /// one whose release failed stays, to be sent again after reconnecting.
    async fn release_all(&mut self, session: &mut Session) -> Result<(), FleetError> {
        while let Some(r) = self.to_release.last() {
            session
                .conn
                .release(
                    &self.keys,
                    r.index,
                    r.revision,
                    self.s.max_disruptive,
                    r.behind.as_ref(),
                )
                .await?;
            self.to_release.pop();
        }
        Ok(())
    }

    /// Note a failed connection.
    fn failed(&mut self, e: FleetError) {
        let since = self
            .down
            .as_ref()
            .map_or_else(SystemTime::now, |(since, _)| *since);
        self.down = Some((since, e));
        self.stale = true;
        // a held slot is presumed lost once the lease may have run out
        if self.granted.is_some() && self.last_ack.elapsed() > self.s.lease_ttl * 2 / 3 {
            self.granted = None;
            self.expired += 1;
        }
        self.publish();
    }

    async fn goodbye(&mut self, session: &mut Session) {
        if let Some(lease) = self.lease.take() {
            let _ = session.conn.revoke(lease).await;
        }
        self.granted = None;
        self.queued = None;
        self.want = None;
    }
}
