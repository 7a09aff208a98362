//! The connection to etcd and the few calls the fleet makes, each bounded by the request
//! timeout (its TLS: [`super::tls`]; its errors and transactions in etcd's types:
//! [`super::wire`]).

use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, SortOrder, SortTarget, TlsOptions, Txn, TxnOp,
    TxnOpResponse, WatchFilterType, WatchOptions, WatchStream,
};

use super::group::{
    HANDOFF_CANDIDATES, Head, Held, Keys, Snapshot, Successors, WatchPlan, delete_plan,
    free_slot_plan, grant_plan, handoff_plan, successors_wanted,
};
use super::tls::{TlsMaterial, preflight};
use super::wire::{bounded, classify, handed_over, op_answers, raw, txn_of, txn_reading};
use crate::fleet::{FleetError, FleetSettings, MaxDisruptive, Urgency, Urgency as U};

/// Whether a slot's release handed it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Handed to the head of the queue in the same revision.
    HandedOver,
    /// Deleted (nobody waited, the head changed meanwhile, the budget shrank), or no longer
    /// this node's.
    Freed,
}

/// The `tracing` target of a slot turn's steps (debug level, off unless a subscriber asks for
/// it: `benches/fleet.rs` with `PLEG_BENCH_STEPS=1`): `node`, `step`, `revision`.
pub const TURN: &str = "pleg_guard::fleet::turn";

/// One step of a slot turn, for [`TURN`].
macro_rules! turn_step {
    ($node:expr, $step:literal, $revision:expr) => {
        tracing::debug!(target: "pleg_guard::fleet::turn", node = $node, step = $step, revision = $revision)
    };
}
pub(crate) use turn_step;

/// A connected client.
pub struct Connection {
    client: Client,
    timeout: Duration,
    /// This node (for [`TURN`] only).
    node: String,
}

/// This node's place in the queue: its queue key's urgency and create revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Me {
    /// The queue the key is in.
    pub urgency: Urgency,
    /// The key's create revision: its place in the queue.
    pub create_revision: i64,
}

/// A lease's keep-alive stream.
pub struct KeepAlive {
    /// Sends keep-alives.
    pub keeper: LeaseKeeper,
    /// Their answers.
    pub answers: LeaseKeepAliveStream,
}

impl Connection {
    /// Check TLS ahead (so a certificate etcd rejects is told apart from a network fault),
    /// connect and, with a user, authenticate.
    pub async fn open(s: &FleetSettings, tls: &TlsMaterial) -> Result<Connection, FleetError> {
        let mut options = ConnectOptions::new()
            .with_require_leader(true)
            .with_connect_timeout(s.request_timeout)
            .with_keep_alive(Duration::from_secs(10), s.request_timeout)
            .with_keep_alive_while_idle(false);
        let live = preflight(&s.endpoints, tls.0.as_ref(), s.request_timeout).await?;
        if let Some(pem) = &tls.0 {
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(&pem.ca));
            if let Some((cert, key)) = &pem.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(t);
        }
        let authenticating = s.auth.is_some();
        if let Some((user, password)) = &s.auth {
            options = options.with_user(user.clone(), password.clone());
        }
        let client =
            match tokio::time::timeout(s.request_timeout, Client::connect(&live, Some(options)))
                .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(classify(&e, authenticating)),
                Err(_) => {
                    return Err(FleetError::Unreachable(format!(
                        "connect: no answer within {}",
                        humantime::format_duration(s.request_timeout)
                    )));
                }
            };
        Ok(Connection {
            client,
            timeout: s.request_timeout,
            node: s.node.clone(),
        })
    }

    /// A new lease of `ttl` and its keep-alive stream.
    pub async fn new_lease(&mut self, ttl: Duration) -> Result<(i64, KeepAlive), FleetError> {
        let t = self.timeout;
        let ttl_s = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let grant = bounded(t, "grant a lease", self.client.lease_grant(ttl_s, None)).await?;
        let id = grant.id();
        match self.keep_alive(id).await? {
            Some(k) => Ok((id, k)),
            None => Err(FleetError::Protocol(format!(
                "lease {id:x} gone right after its grant"
            ))),
        }
    }

    /// The keep-alive stream of lease `id` (None: the lease is gone).
    pub async fn keep_alive(&mut self, id: i64) -> Result<Option<KeepAlive>, FleetError> {
        match tokio::time::timeout(self.timeout, self.client.lease_keep_alive(id)).await {
            Ok(Ok((keeper, answers))) => Ok(Some(KeepAlive { keeper, answers })),
            // the crate's word for a keep-alive answered with TTL 0: the lease expired
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => Ok(None),
            Ok(Err(e)) => Err(classify(&e, false)),
            Err(_) => Err(FleetError::Unreachable(
                "lease keep-alive: no answer".to_owned(),
            )),
        }
    }

    /// Write `key` on `lease`.
    pub async fn put(&mut self, key: &str, value: Vec<u8>, lease: i64) -> Result<i64, FleetError> {
        let t = self.timeout;
        let resp = bounded(
            t,
            "write",
            self.client
                .put(key, value, Some(PutOptions::new().with_lease(lease))),
        )
        .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// What a node needs of its group, in one read: see [`Connection::snapshot`].
    ///
    /// etcd 3.4 applies a range's create-revision filters after counting, so a count-only
    /// read cannot count the waiters ahead: the keys ahead are read instead, nearest first
    /// and at most `depth + 1` of them. The answer stays small, but etcd 3.4 reads every key
    /// of a range it sorts or filters by create revision before it sorts and cuts, so the
    /// member answering (every member, for a join's transaction) does work in proportion to
    /// the waiters: a few µs a key (docs/fleet-scale.md, issue 28's eighth look).
    fn snapshot_ops(keys: &Keys, me: Option<&Me>, node: &str, depth: usize) -> Vec<TxnOp> {
        let count = |prefix: String| {
            TxnOp::get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
        };
        let nearest = |prefix: String, below: Option<i64>| {
            // joining in this very transaction (`create_revision` 0): this node's own key is
            // the newest, one more to read
            let limit = depth + if below.is_none() { 2 } else { 1 };
            let mut o = GetOptions::new()
                .with_prefix()
                .with_keys_only()
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
            if let Some(rev) = below.filter(|r| *r > 0) {
                o = o.with_max_create_revision(rev - 1);
            }
            TxnOp::get(prefix, Some(o))
        };
        let mut ops = vec![
            count(keys.members()),
            TxnOp::get(keys.holders(), Some(GetOptions::new().with_prefix())),
            count(keys.queues()),
        ];
        if let Some(me) = me {
            ops.push(nearest(
                keys.queue(me.urgency),
                (me.create_revision > 0).then_some(me.create_revision),
            ));
            ops.push(count(keys.queue(Urgency::Emergency)));
            ops.push(nearest(keys.queue(Urgency::Emergency), Some(0)));
            ops.push(TxnOp::get(
                keys.queued(me.urgency, node),
                Some(GetOptions::new().with_keys_only()),
            ));
            ops.extend(Self::successors_ops(keys, me, depth));
        }
        ops
    }

    /// The waiters right behind `me` (values and leases, at most
    /// [`successors_wanted`]`(depth)`, in queue order): those after it in its own queue and,
    /// behind an emergency, the head of the planned queue. None for a node joining in the same
    /// transaction (nobody is behind its brand-new key but, for an emergency, planned waiters
    /// it will learn of at its next read).
    fn successors_ops(keys: &Keys, me: &Me, depth: usize) -> Vec<TxnOp> {
        if me.create_revision <= 0 {
            return Vec::new();
        }
        let limit = i64::try_from(successors_wanted(depth)).unwrap_or(i64::MAX);
        let after = |u: U, revision: i64| {
            let mut o = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(limit);
            if revision > 0 {
                o = o.with_min_create_revision(revision + 1);
            }
            TxnOp::get(keys.queue(u), Some(o))
        };
        let mut ops = vec![after(me.urgency, me.create_revision)];
        if me.urgency == U::Emergency {
            ops.push(after(U::Planned, 0));
        }
        ops
    }

    /// Read the answers of [`Connection::successors_ops`].
    fn successors_of(answers: &[TxnOpResponse], depth: usize) -> Successors {
        let heads = answers
            .iter()
            .filter_map(|a| match a {
                TxnOpResponse::Get(g) => Some(g.kvs()),
                _ => None,
            })
            .flatten()
            .filter_map(|kv| Head::of(raw(kv)))
            .take(successors_wanted(depth))
            .collect();
        Successors {
            heads,
            read_at: std::time::Instant::now(),
        }
    }

    /// Read the answers of [`Connection::snapshot_ops`].
    fn snapshot_of(
        keys: &Keys,
        me: Option<&Me>,
        node: &str,
        depth: usize,
        revision: i64,
        answers: &[TxnOpResponse],
    ) -> Result<Snapshot, FleetError> {
        let get = |i: usize| match answers.get(i) {
            Some(TxnOpResponse::Get(g)) => Ok(g),
            _ => Err(FleetError::Protocol(format!(
                "the group read's answer {i} is missing"
            ))),
        };
        let n = |i: usize| get(i).map(|g| usize::try_from(g.count()).unwrap_or(0));
        let holders = get(1)?
            .kvs()
            .iter()
            .filter_map(|kv| Held::parse(keys, raw(kv)))
            .collect();
        let mut s = Snapshot {
            revision,
            members: n(0)?,
            holders,
            waiting: n(2)?,
            ..Snapshot::default()
        };
        if let Some(me) = me {
            let own = keys.queued(me.urgency, node);
            s.nearest_ahead = get(3)?
                .kvs()
                .iter()
                .map(|kv| kv.key())
                .filter(|k| *k != own.as_bytes())
                .map(<[u8]>::to_vec)
                .collect();
            s.ahead = s.nearest_ahead.len();
            // the read stops at `depth + 1` keys ahead (a join's at `depth + 2` with its own)
            s.ahead_at_least = me.create_revision > 0 && s.ahead > depth;
            if me.urgency == Urgency::Planned {
                s.ahead += n(4)?;
                s.nearest_ahead
                    .extend(get(5)?.kvs().iter().map(|kv| kv.key().to_vec()));
            }
            s.queued = Some(!get(6)?.kvs().is_empty());
            if me.create_revision > 0 {
                s.behind = Some(Self::successors_of(answers.get(7..).unwrap_or(&[]), depth));
            } else {
                // joined in this very transaction: its key is the newest of its queue, so
                // every other key of it (and for a planned request every emergency) is ahead:
                // counted, not only read
                let behind = match me.urgency {
                    Urgency::Planned => s.waiting.saturating_sub(1),
                    Urgency::Emergency => n(4)?.saturating_sub(1),
                };
                s.joined_behind = Some(behind);
                s.ahead = s.ahead.max(behind);
            }
        }
        Ok(s)
    }

    /// The group as a node needs it, at one revision: the live members and waiters (counted,
    /// not read), the holders (at most `max` keys), and for a waiter (`me`) how many wait
    /// ahead of it and the `depth` queue keys nearest ahead. Its size does not grow with the
    /// group.
    pub async fn snapshot(
        &mut self,
        keys: &Keys,
        node: &str,
        me: Option<&Me>,
        depth: usize,
    ) -> Result<Snapshot, FleetError> {
        let t = self.timeout;
        let txn = Txn::new().and_then(Self::snapshot_ops(keys, me, node, depth));
        let resp = bounded(t, "read the group", self.client.txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        Self::snapshot_of(keys, me, node, depth, revision, &op_answers(&resp)?)
    }

    /// Join the queue in one transaction: write this node's queue key unless it is there
    /// already, and read the group in the same call. The key's create revision (its place in
    /// the queue) and the snapshot.
    pub async fn join(
        &mut self,
        keys: &Keys,
        node: &str,
        urgency: Urgency,
        value: Vec<u8>,
        lease: i64,
        depth: usize,
    ) -> Result<(Me, Snapshot), FleetError> {
        let t = self.timeout;
        let key = keys.queued(urgency, node);
        // the read rides along: this node's key is the newest of its queue (create revision
        // not known before the answer)
        let joining = Me {
            urgency,
            create_revision: 0,
        };
        let mut ops = vec![TxnOp::put(
            key.as_str(),
            value,
            Some(PutOptions::new().with_lease(lease)),
        )];
        ops.extend(Self::snapshot_ops(keys, Some(&joining), node, depth));
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then(ops)
            .or_else([TxnOp::get(key.as_str(), None)]);
        let resp = bounded(t, "join the queue", self.client.txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let answers = op_answers(&resp)?;
        if resp.succeeded() {
            let me = Me {
                urgency,
                create_revision: revision,
            };
            let snapshot = Self::snapshot_of(
                keys,
                Some(&joining),
                node,
                depth,
                revision,
                answers.get(1..).unwrap_or(&[]),
            )?;
            return Ok((me, snapshot));
        }
        let create_revision = match answers.first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map_or(0, |kv| kv.create_revision()),
            _ => 0,
        };
        if create_revision == 0 {
            return Err(FleetError::Protocol(format!(
                "{key}: gone right after it was written"
            )));
        }
        let me = Me {
            urgency,
            create_revision,
        };
        let snapshot = self.snapshot(keys, node, Some(&me), depth).await?;
        Ok((me, snapshot))
    }

    /// The grant: take slot `index` of `max` in one transaction, if and only if the slot is
    /// free, no holder sits at an index `>= max`, this node's queue key is still the one it
    /// created, and (for a planned request) no emergency joined since `read_revision`.
    /// Granted: the revision, and the waiters right behind this node at that revision (read
    /// in the same call, for the release). Not granted: a fresh snapshot (read in the same
    /// call).
    #[allow(clippy::too_many_arguments)]
    pub async fn grant(
        &mut self,
        keys: &Keys,
        node: &str,
        me: &Me,
        index: usize,
        max: usize,
        value: Vec<u8>,
        lease: i64,
        read_revision: i64,
        depth: usize,
        behind: &[Head],
    ) -> Result<Result<(i64, Successors), Snapshot>, FleetError> {
        let t = self.timeout;
        let queued = keys.queued(me.urgency, node);
        // failed, the slot still free goes to the waiters behind (`free_slot_plan`)
        let offer = free_slot_plan(keys, index, max, behind, std::time::SystemTime::now());
        let plan = grant_plan(
            keys,
            &queued,
            me.urgency,
            me.create_revision,
            index,
            max,
            value,
            lease,
            read_revision,
        );
        let writes = plan.then.len();
        let mut otherwise: Vec<TxnOp> = offer.iter().map(|o| TxnOp::txn(txn_of(o))).collect();
        let read_from = otherwise.len();
        // after the offers: the read shows what they did
        otherwise.extend(Self::snapshot_ops(keys, Some(me), node, depth));
        let txn = txn_reading(&plan, Self::successors_ops(keys, me, depth)).or_else(otherwise);
        let resp = bounded(t, "grant transaction", self.client.txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let answers = op_answers(&resp)?;
        if resp.succeeded() {
            let behind = Self::successors_of(answers.get(writes..).unwrap_or(&[]), depth);
            return Ok(Ok((revision, behind)));
        }
        if read_from > 0 && handed_over(&answers) {
            turn_step!(node, "free_slot_handed", revision);
        }
        let read = answers.get(read_from..).unwrap_or(&[]);
        Self::snapshot_of(keys, Some(me), node, depth, revision, read).map(Err)
    }

    /// Delete queue key `key` if it is still the one created at `create_revision` (a
    /// withdrawn request: never someone else's key of the same name).
    pub async fn delete_own(&mut self, key: &str, create_revision: i64) -> Result<(), FleetError> {
        let t = self.timeout;
        let txn = txn_of(&delete_plan(key, create_revision, false));
        bounded(t, "delete", self.client.txn(txn)).await.map(|_| ())
    }

    /// Rewrite queue key `key` (its place kept) if it is still the one created at
    /// `create_revision`.
    pub async fn requeue(
        &mut self,
        key: &str,
        create_revision: i64,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<(), FleetError> {
        let t = self.timeout;
        let txn = Txn::new()
            .when([Compare::create_revision(
                key,
                CompareOp::Equal,
                create_revision,
            )])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        bounded(t, "rewrite the request", self.client.txn(txn))
            .await
            .map(|_| ())
    }

    /// This node's requests in the queue on `lease` (at most one a queue), in one read: what
    /// a join whose answer was lost left behind.
    pub async fn own_requests(
        &mut self,
        keys: &Keys,
        node: &str,
        lease: i64,
    ) -> Result<Vec<Me>, FleetError> {
        let t = self.timeout;
        let queues = [Urgency::Emergency, Urgency::Planned];
        let txn = Txn::new().and_then(queues.map(|u| {
            TxnOp::get(
                keys.queued(u, node),
                Some(GetOptions::new().with_keys_only()),
            )
        }));
        let resp = bounded(t, "read this node's requests", self.client.txn(txn)).await?;
        let answers = op_answers(&resp)?;
        Ok(queues
            .into_iter()
            .zip(answers.iter())
            .filter_map(|(urgency, a)| match a {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| (urgency, kv)),
                _ => None,
            })
            .filter(|(_, kv)| kv.lease() == lease && kv.create_revision() > 0)
            .map(|(urgency, kv)| Me {
                urgency,
                create_revision: kv.create_revision(),
            })
            .collect())
    }

    /// Withdraw this node's request: delete its queue key if it is still `me`'s; if it is
    /// gone, a releasing holder may have handed this node its slot meanwhile: that slot (on
    /// `lease`), read in the same call.
    pub async fn withdraw(
        &mut self,
        keys: &Keys,
        node: &str,
        me: &Me,
        lease: i64,
    ) -> Result<Option<Held>, FleetError> {
        let t = self.timeout;
        let key = keys.queued(me.urgency, node);
        let txn = txn_of(&delete_plan(&key, me.create_revision, false)).or_else([TxnOp::get(
            keys.holders(),
            Some(GetOptions::new().with_prefix()),
        )]);
        let resp = bounded(t, "withdraw", self.client.txn(txn)).await?;
        if resp.succeeded() {
            return Ok(None);
        }
        let answers = op_answers(&resp)?;
        let Some(TxnOpResponse::Get(g)) = answers.first() else {
            return Err(FleetError::Protocol(
                "the withdrawal's read has no answer".to_owned(),
            ));
        };
        let snap = Snapshot {
            holders: g
                .kvs()
                .iter()
                .filter_map(|kv| Held::parse(keys, raw(kv)))
                .collect(),
            ..Snapshot::default()
        };
        Ok(snap.held_by(node, lease).cloned())
    }

    /// The waiters at the head of the queue (at most `n`, emergencies first) and the live
    /// members (counted), in one read. Linearizable: a serializable read saves the leader's
    /// round but a member that lags by as many handoffs as there are candidates makes every
    /// offer fail and the release fall back to a plain delete (measured: 2-3 % of releases at
    /// 50/5/0 instead of none, and the fall-backs set the handoff's p99).
    pub async fn heads(&mut self, keys: &Keys, n: usize) -> Result<(usize, Vec<Head>), FleetError> {
        let t = self.timeout;
        let first = |u: U| {
            TxnOp::get(
                keys.queue(u),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend)
                        .with_limit(i64::try_from(n).unwrap_or(i64::MAX)),
                ),
            )
        };
        let txn = Txn::new().and_then([
            first(U::Emergency),
            first(U::Planned),
            TxnOp::get(
                keys.members(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            ),
        ]);
        let resp = bounded(t, "read the queue's head", self.client.txn(txn)).await?;
        let answers = op_answers(&resp)?;
        let (Some(TxnOpResponse::Get(e)), Some(TxnOpResponse::Get(p)), Some(TxnOpResponse::Get(m))) =
            (answers.first(), answers.get(1), answers.get(2))
        else {
            return Err(FleetError::Protocol(
                "the queue's read has no answer".to_owned(),
            ));
        };
        let members = usize::try_from(m.count()).unwrap_or(0);
        let heads = e
            .kvs()
            .iter()
            .chain(p.kvs())
            .take(n)
            .filter_map(|kv| Head::of(raw(kv)))
            .collect();
        Ok((members, heads))
    }

    /// Give slot `index` (granted at `grant_revision`) back: read the head of the queue (or
    /// take the waiters read behind this node, `behind`, when they may still be used:
    /// [`Successors::usable`]) and, in one transaction, hand the slot straight to the first
    /// waiter there still waiting ([`handoff_plan`]), or, when none can take it (nobody waits,
    /// the waiters read were served or left meanwhile, someone joined ahead of them, the
    /// budget shrank), delete the holder key if it is still this grant's.
    pub async fn release(
        &mut self,
        keys: &Keys,
        index: usize,
        grant_revision: i64,
        budget: MaxDisruptive,
        behind: Option<&Successors>,
    ) -> Result<Released, FleetError> {
        if let Some((max, heads)) = behind.and_then(|b| b.usable(budget, std::time::Instant::now()))
        {
            turn_step!(self.node.as_str(), "heads_known", grant_revision);
            return self
                .release_to(keys, index, grant_revision, max, heads)
                .await;
        }
        turn_step!(self.node.as_str(), "heads_sent", grant_revision);
        let (members, heads) = self.heads(keys, HANDOFF_CANDIDATES).await?;
        turn_step!(self.node.as_str(), "heads_answered", grant_revision);
        self.release_to(keys, index, grant_revision, budget.slots(members), &heads)
            .await
    }

    /// The release's transaction, to the waiters `heads` as read (in queue order) with the
    /// budget at `max` slots: see [`Connection::release`].
    pub async fn release_to(
        &mut self,
        keys: &Keys,
        index: usize,
        grant_revision: i64,
        max: usize,
        heads: &[Head],
    ) -> Result<Released, FleetError> {
        let t = self.timeout;
        let plan = handoff_plan(
            keys,
            index,
            grant_revision,
            max,
            heads,
            std::time::SystemTime::now(),
        );
        let handing = plan.is_some();
        let plan = plan.unwrap_or_else(|| delete_plan(&keys.holder(index), grant_revision, true));
        turn_step!(self.node.as_str(), "release_sent", grant_revision);
        let resp = bounded(t, "release", self.client.txn(txn_of(&plan))).await?;
        turn_step!(
            self.node.as_str(),
            "release_answered",
            resp.header().map_or(0, |h| h.revision())
        );
        Ok(if handing && handed_over(&op_answers(&resp)?) {
            Released::HandedOver
        } else {
            Released::Freed
        })
    }

    /// Every member key's node and value, and the revision of the read (the storm guard's
    /// count; read only while a disruptive repair asks).
    pub async fn members(
        &mut self,
        keys: &Keys,
    ) -> Result<(i64, Vec<(String, Vec<u8>)>), FleetError> {
        let t = self.timeout;
        let prefix = keys.members();
        let resp = bounded(
            t,
            "read the members",
            self.client
                .get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let members = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let node = keys.node_of(&prefix, kv.key())?;
                Some((node.to_owned(), kv.value().to_vec()))
            })
            .collect();
        Ok((revision, members))
    }

    /// Watch every member key from `since` on (puts and deletes): what keeps a
    /// [`MemberCache`](super::member_cache::MemberCache) read at `since - 1` up to date.
    /// etcd 3.4 serves a watch from a passed revision from its catch-up loop, so its first
    /// events may come up to 100 ms late; none is missed.
    pub async fn watch_members(
        &mut self,
        keys: &Keys,
        since: i64,
    ) -> Result<WatchStream, FleetError> {
        let t = self.timeout;
        let options = WatchOptions::new().with_prefix().with_start_revision(since);
        bounded(
            t,
            "watch the members",
            self.client.watch(keys.members(), Some(options)),
        )
        .await
    }

    /// Watch what `plan` names (deletes only, but the holder keys' puts for the head of the
    /// queue), nothing else of the group, from revision `since`, or from now (None).
    ///
    /// etcd 3.4 serves a watch whose start revision has passed from its unsynced group, which
    /// it catches up every 100 ms, so every event of such a watch may come up to 100 ms late
    /// (the p99 of the handoffs measured when every waiter watched from its read). A watch
    /// from now is in sync at once, and the caller reads again when the created answer's
    /// revision is past its read (nothing is missed between); a waiter far enough back that
    /// its next event cannot come within 100 ms watches from its read instead
    /// ([`watches_from_read`]), and needs no second read.
    pub async fn watch(
        &mut self,
        keys: &Keys,
        plan: &WatchPlan,
        since: Option<i64>,
    ) -> Result<Option<WatchStream>, FleetError> {
        let t = self.timeout;
        let from = |o: WatchOptions| match since {
            Some(revision) => o.with_start_revision(revision),
            None => o,
        };
        let deletes = || from(WatchOptions::new().with_filters([WatchFilterType::NoPut]));
        let mut targets: Vec<(Vec<u8>, WatchOptions)> = Vec::new();
        if plan.handoffs {
            // a slot handed over is a put: every change of the holder keys
            targets.push((
                keys.holders().into_bytes(),
                from(WatchOptions::new().with_prefix()),
            ));
        } else if plan.releases {
            targets.push((keys.holders().into_bytes(), deletes().with_prefix()));
        }
        if let Some(key) = &plan.key {
            targets.push((key.clone(), deletes()));
        }
        let mut targets = targets.into_iter();
        let Some((key, options)) = targets.next() else {
            return Ok(None);
        };
        let mut stream = bounded(t, "watch", self.client.watch(key, Some(options))).await?;
        for (key, options) in targets {
            bounded(t, "watch", stream.watch(key, Some(options))).await?;
        }
        Ok(Some(stream))
    }

    /// Revoke `lease` (its keys go at once).
    pub async fn revoke(&mut self, lease: i64) -> Result<(), FleetError> {
        let t = self.timeout;
        bounded(t, "revoke the lease", self.client.lease_revoke(lease))
            .await
            .map(|_| ())
    }
}
