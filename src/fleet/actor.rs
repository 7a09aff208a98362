//! The fleet task: keeps this node's lease alive, its member key written, a copy of the group
//! current from a watch, and takes or gives back its slot when the handle asks.
//!
//! One connection at a time. Any failure drops it and the task reconnects with a backoff of
//! 1 s doubling to 10 s; on reconnect it keeps its old lease when etcd still has it (so a
//! held slot survives a blip shorter than the lease), else it takes a new one and a held slot
//! counts as lost (`expired`). Every call is bounded by the request timeout, so the handle's
//! state turns `Unreachable` within a few of them when etcd is gone. A grant whose answer never
//! came is not assumed failed: the group is read again after reconnecting, and the slot key
//! says whether it holds.

use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::etcd::{Connection, KeepAlive, TlsMaterial, classify};
use super::group::{
    Admission, GUARD, GroupCopy, GroupRead, MEMBERS, MemberValue, Phase, SLOTS, SlotValue,
};
use super::{Command, FleetError, FleetSettings, FleetView, Holder, Shared, SlotState, Urgency};
use crate::target::ActionKind;

/// The longest pause between reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often a waiting node looks at its copy of the group without an event.
const WAIT_POLL: Duration = Duration::from_secs(1);
/// How often an idle node reads the whole group again (the watch keeps it current between).
const IDLE_REFRESH: Duration = Duration::from_secs(300);

/// The group as a [`FleetView`].
pub(crate) fn view_of(
    s: &FleetSettings,
    read: &GroupRead,
    reachable: bool,
    last_error: Option<String>,
    expired: u64,
) -> FleetView {
    FleetView {
        group: s.group.clone(),
        members_alive: Some(read.members.len()),
        max_disruptive: Some(read.max(s.max_disruptive)),
        holders: read
            .holders()
            .map(|slot| Holder {
                node: slot.node.clone(),
                action: slot
                    .value
                    .as_ref()
                    .map_or_else(|| "?".to_owned(), |v| v.action.clone()),
                since: slot
                    .value
                    .as_ref()
                    .map_or(SystemTime::UNIX_EPOCH, |v| v.granted_at.unwrap_or(v.since)),
            })
            .collect(),
        waiting: read.queue().len(),
        reachable,
        last_error,
        expired,
    }
}

/// What this node asks for.
#[derive(Debug, Clone)]
struct Want {
    action: ActionKind,
    urgency: Urgency,
    since: SystemTime,
}

/// One live connection.
struct Session {
    conn: Connection,
    keep_alive: KeepAlive,
    watch: etcd_client::WatchStream,
}

/// The task's state.
pub(crate) struct Actor {
    s: FleetSettings,
    tls: TlsMaterial,
    tx: watch::Sender<Shared>,
    want: Option<Want>,
    /// The value of the slot key must be written again (the request changed).
    rewrite: bool,
    granted: Option<(SystemTime, i64)>,
    release_pending: bool,
    queue: Option<(usize, usize, usize)>,
    lease: Option<i64>,
    last_ack: Instant,
    copy: Option<GroupCopy>,
    down: Option<(SystemTime, FleetError)>,
    expired: u64,
    member_since: SystemTime,
}

impl Actor {
    pub(crate) fn new(s: FleetSettings, tls: TlsMaterial, tx: watch::Sender<Shared>) -> Actor {
        Actor {
            s,
            tls,
            tx,
            want: None,
            rewrite: false,
            granted: None,
            release_pending: false,
            queue: None,
            lease: None,
            last_ack: Instant::now(),
            copy: None,
            down: None,
            expired: 0,
            member_since: SystemTime::now(),
        }
    }

    fn slot_key(&self) -> String {
        format!("{}{SLOTS}{}", self.s.group_prefix(), self.s.node)
    }

    fn member_key(&self) -> String {
        format!("{}{MEMBERS}{}", self.s.group_prefix(), self.s.node)
    }

    fn guard_key(&self) -> String {
        format!("{}{GUARD}", self.s.group_prefix())
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
        let mut next_refresh = Instant::now() + IDLE_REFRESH;
        let mut next_poll = Instant::now() + WAIT_POLL;
        let mut dirty = true;
        loop {
            if dirty {
                self.step(session).await?;
                self.publish();
                dirty = false;
            }
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
                msg = session.watch.message() => match msg {
                    Ok(Some(resp)) if resp.canceled() => {
                        return Err(FleetError::Unreachable("etcd cancelled the watch".to_owned()));
                    }
                    Ok(Some(resp)) => {
                        self.apply(&resp);
                        dirty = true;
                    }
                    Ok(None) => return Err(FleetError::Unreachable("the watch ended".to_owned())),
                    Err(e) => return Err(classify(&e, false)),
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
                () = tokio::time::sleep_until(next_poll) => {
                    next_poll = Instant::now() + WAIT_POLL;
                    dirty = self.want.is_some() && self.granted.is_none();
                },
                () = tokio::time::sleep_until(next_refresh) => {
                    next_refresh = Instant::now() + IDLE_REFRESH;
                    let prefix = self.s.group_prefix();
                    self.copy = Some(session.conn.read_group(&prefix).await?);
                    dirty = true;
                },
            }
        }
    }

    /// Connect, keep or take a lease, write the member key, read the group, watch it.
    async fn connect(&mut self) -> Result<Session, FleetError> {
        let mut conn = Connection::open(&self.s, &self.tls).await?;
        let kept = match self.lease {
            Some(id) => conn.keep_alive(id).await?.map(|k| (id, k)),
            None => None,
        };
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
        let member = MemberValue {
            node: self.s.node.clone(),
            since: self.member_since,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let member =
            serde_json::to_vec(&member).map_err(|e| FleetError::Protocol(e.to_string()))?;
        let key = self.member_key();
        conn.put(&key, member, lease).await?;
        let prefix = self.s.group_prefix();
        let copy = conn.read_group(&prefix).await?;
        let watch = conn.watch(&prefix, copy.revision + 1).await?;
        self.copy = Some(copy);
        self.down = None;
        Ok(Session {
            conn,
            keep_alive,
            watch,
        })
    }

    /// The lease is gone: a held slot went with it.
    fn lease_lost(&mut self) {
        self.lease = None;
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
                        self.rewrite = true;
                    }
                }
                Some(_) => {}
            },
            Command::Release => {
                if self.want.take().is_some() || self.granted.is_some() {
                    self.release_pending = true;
                }
                self.granted = None;
                self.queue = None;
                self.rewrite = false;
            }
            Command::Shutdown(_) => {}
        }
    }

    fn apply(&mut self, resp: &etcd_client::WatchResponse) {
        let Some(copy) = self.copy.as_mut() else {
            return;
        };
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            match ev.event_type() {
                etcd_client::EventType::Put => copy.put(
                    kv.key().to_vec(),
                    super::group::StoredKv {
                        value: kv.value().to_vec(),
                        create_revision: kv.create_revision(),
                        mod_revision: kv.mod_revision(),
                        lease: kv.lease(),
                    },
                ),
                etcd_client::EventType::Delete => copy.delete(kv.key(), kv.mod_revision()),
            }
        }
        if let Some(h) = resp.header() {
            copy.revision = copy.revision.max(h.revision());
        }
    }

    /// Bring etcd in line with what the handle asked: release, request, take.
    async fn step(&mut self, session: &mut Session) -> Result<(), FleetError> {
        let Some(lease) = self.lease else {
            return Err(FleetError::Protocol("no lease".to_owned()));
        };
        let key = self.slot_key();
        let guard = self.guard_key();
        if self.release_pending {
            let rev = session.conn.delete(&key).await?;
            if let Some(c) = self.copy.as_mut() {
                c.delete(key.as_bytes(), rev);
            }
            self.release_pending = false;
        }
        for _ in 0..4 {
            let Some(copy) = self.copy.as_mut() else {
                return Ok(());
            };
            let admission = copy
                .read()
                .admission(&self.s.node, lease, self.s.max_disruptive);
            if self.granted.is_some() && admission != Admission::Holding {
                // the slot key went (lease expiry) or was taken back: the grant is lost
                self.granted = None;
                self.expired += 1;
            }
            let Some(want) = self.want.clone() else {
                return Ok(());
            };
            let value = |state: Phase, granted_at: Option<SystemTime>| {
                serde_json::to_vec(&SlotValue {
                    node: self.s.node.clone(),
                    action: want.action.name().to_owned(),
                    urgency: want.urgency,
                    since: want.since,
                    state,
                    granted_at,
                })
                .map_err(|e| FleetError::Protocol(e.to_string()))
            };
            // no slot key yet, or one to rewrite (a new action or urgency): write it waiting,
            // then read back its create revision (the queue's order) and look again
            if admission == Admission::Missing || (self.rewrite && self.granted.is_none()) {
                session
                    .conn
                    .put(&key, value(Phase::Waiting, None)?, lease)
                    .await?;
                self.rewrite = false;
                if let Some(kv) = session.conn.get(&key).await? {
                    copy.put(key.clone().into_bytes(), kv);
                }
                continue;
            }
            match admission {
                Admission::Take {
                    guard_mod_revision,
                    create_revision,
                } => {
                    let now = SystemTime::now();
                    let holding = value(Phase::Holding, Some(now))?;
                    match session
                        .conn
                        .grant(
                            &key,
                            holding.clone(),
                            lease,
                            &guard,
                            guard_mod_revision,
                            create_revision,
                        )
                        .await?
                    {
                        Some(rev) => {
                            copy.put(
                                key.clone().into_bytes(),
                                super::group::StoredKv {
                                    value: holding,
                                    create_revision,
                                    mod_revision: rev,
                                    lease,
                                },
                            );
                            copy.put(
                                guard.clone().into_bytes(),
                                super::group::StoredKv {
                                    value: Vec::new(),
                                    create_revision: rev,
                                    mod_revision: rev,
                                    lease: 0,
                                },
                            );
                            self.granted = Some((now, rev));
                            self.queue = None;
                            return Ok(());
                        }
                        None => {
                            // another grant came first: look again at the group as it is
                            let prefix = self.s.group_prefix();
                            let fresh = session.conn.read_group(&prefix).await?;
                            self.copy = Some(fresh);
                        }
                    }
                }
                Admission::Wait {
                    position,
                    holders,
                    max,
                } => {
                    self.queue = Some((position, holders, max));
                    return Ok(());
                }
                Admission::Missing => {} // written just above
                Admission::Holding => {
                    if self.granted.is_none() {
                        let slot = copy
                            .read()
                            .slots
                            .into_iter()
                            .find(|s| s.node == self.s.node);
                        let since = slot
                            .as_ref()
                            .and_then(|s| s.value.as_ref())
                            .and_then(|v| v.granted_at)
                            .unwrap_or_else(SystemTime::now);
                        let rev = copy.kvs.get(key.as_bytes()).map_or(0, |v| v.mod_revision);
                        self.granted = Some((since, rev));
                    }
                    self.queue = None;
                    return Ok(());
                }
            }
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
        self.want = None;
    }

    fn state(&self) -> SlotState {
        if let Some((since, rev)) = self.granted {
            return SlotState::Granted {
                since,
                revision: rev,
            };
        }
        if let Some((since, e)) = &self.down {
            return if e.is_rejection() {
                SlotState::Rejected {
                    error: e.to_string(),
                }
            } else {
                SlotState::Unreachable {
                    since: *since,
                    error: e.to_string(),
                }
            };
        }
        match (&self.want, self.queue) {
            (Some(w), Some((position, holders, max))) => SlotState::Waiting {
                since: w.since,
                position,
                holders,
                max,
            },
            _ => SlotState::Idle,
        }
    }

    fn publish(&self) {
        let reachable = self.down.is_none();
        let last_error = self.down.as_ref().map(|(_, e)| e.to_string());
        let view = match &self.copy {
            Some(c) => view_of(&self.s, &c.read(), reachable, last_error, self.expired),
            None => FleetView {
                group: self.s.group.clone(),
                reachable,
                last_error,
                expired: self.expired,
                ..FleetView::default()
            },
        };
        let state = self.state();
        self.tx.send_if_modified(|shared| {
            if shared.state == state && shared.view == view {
                return false;
            }
            shared.state = state;
            shared.view = view;
            true
        });
    }
}
