//! One step of the task while it asks for or holds a slot: read, grant, watch, release.

use super::*;

impl Actor {
    /// Bring etcd in line with what the handle asked: release, withdraw, report, ask, take.
    pub(super) async fn step(&mut self, session: &mut Session) -> Result<(), FleetError> {
        let Some(lease) = self.lease else {
            return Err(FleetError::Protocol("no lease".to_owned()));
        };
        self.release_all(session).await?;
        if !self.findings_written {
            session
                .conn
                .put(&self.keys.member(&self.s.node), self.member_value()?, lease)
                .await?;
            self.findings_written = true;
        }
        if self.health_wanted {
            self.read_health(session).await?;
            self.health_wanted = false;
        }
        let want = match (&self.want, self.granted) {
            (Some(w), None) => w.clone(),
            _ => {
                // nothing to wait for: withdraw a request, watch nothing
                session.watch = None;
                self.queue = None;
                if let Some((me, _)) = self.queued {
                    if let Some(h) = self.withdraw(session, &me, lease).await? {
                        // a releasing holder handed this node its slot as it withdrew: give
                        // it back at once (on to the next in line)
                        self.to_release.push(ToRelease {
                            index: h.index,
                            revision: h.mod_revision,
                            behind: None,
                        });
                        self.release_all(session).await?;
                    }
                }
                return Ok(());
            }
        };
        if let Some((me, _)) = self.queued.filter(|(me, _)| me.urgency != want.urgency) {
            // an emergency now: to the emergency queue, unless the planned request was handed
            // a slot meanwhile (then that slot is this node's)
            if let Some(h) = self.withdraw(session, &me, lease).await? {
                self.granted = Some(Grant::of(&h));
                self.behind = None;
                session.watch = None;
                self.queue = None;
                return Ok(());
            }
        }
        let queue_value = serde_json::to_vec(&QueueValue {
            node: self.s.node.clone(),
            action: want.action.name().to_owned(),
            urgency: want.urgency,
            since: want.since,
        })
        .map_err(|e| FleetError::Protocol(e.to_string()))?;
        let depth = self.depth();
        let mut snap = match self.queued {
            None => {
                self.join(session, &want, &queue_value, lease, depth)
                    .await?
            }
            Some((me, action)) => {
                if action != want.action {
                    let key = self.keys.queued(me.urgency, &self.s.node);
                    // a put keeps the key's create revision: the place in the queue; only
                    // while it is still this request's (a handoff may have deleted it: a put
                    // would make a second request); the read below tells
                    session
                        .conn
                        .requeue(&key, me.create_revision, queue_value.clone(), lease)
                        .await?;
                    self.queued = Some((me, want.action));
                    self.stale = true;
                }
                let freed = std::mem::take(&mut self.freed);
                match self.snapshot.clone() {
                    Some(s) if !self.stale => s,
                    // next in line and a slot freed: try it at once (no read first); a grant
                    // that fails brings the fresh read with it
                    Some(mut s) if s.ahead == 0 && !freed.is_empty() => {
                        s.holders.retain(|h| !freed.contains(&h.index));
                        s
                    }
                    _ => {
                        turn_step!(self.s.node.as_str(), "waiter_read", me.create_revision);
                        session
                            .conn
                            .snapshot(&self.keys, &self.s.node, Some(&me), depth)
                            .await?
                    }
                }
            }
        };
        self.stale = false;
        self.freed.clear();
        // whether this step ended in a decision (granted, or waiting with a watch)
        let mut settled = false;
        for _ in 0..GRANT_ATTEMPTS {
            let Some((me, _)) = self.queued else {
                break;
            };
            if let Some(h) = snap.held_by(&self.s.node, lease) {
                // granted, the answer lost on the way (or this read came first, or a
                // releasing holder handed it over)
                turn_step!(self.s.node.as_str(), "read_held", h.mod_revision);
                self.granted = Some(Grant::of(h));
                self.behind = snap.behind.clone();
                self.queued = None;
                break;
            }
            if snap.queued == Some(false) {
                // the queue key is gone (deleted by hand): ask again, at the end of the queue
                snap = self
                    .join(session, &want, &queue_value, lease, depth)
                    .await?;
                continue;
            }
            match snap.next(self.s.max_disruptive) {
                Next::Take { index, max } => {
                    let now = SystemTime::now();
                    let value = serde_json::to_vec(&HolderValue {
                        node: self.s.node.clone(),
                        action: want.action.name().to_owned(),
                        urgency: want.urgency,
                        since: want.since,
                        granted_at: now,
                    })
                    .map_err(|e| FleetError::Protocol(e.to_string()))?;
                    match session
                        .conn
                        .grant(
                            &self.keys,
                            &self.s.node,
                            &me,
                            index,
                            max,
                            value.clone(),
                            lease,
                            snap.revision,
                            depth,
                            snap.behind.as_ref().map_or(&[][..], |b| b.heads.as_slice()),
                        )
                        .await?
                    {
                        Ok((revision, behind)) => {
                            turn_step!(self.s.node.as_str(), "granted", revision);
                            self.behind = Some(behind);
                            snap.holders.push(Held {
                                index,
                                value: serde_json::from_slice(&value).ok(),
                                create_revision: revision,
                                mod_revision: revision,
                                lease,
                                stray_key: None,
                            });
                            snap.holders.sort_by_key(|h| h.index);
                            snap.waiting = snap.waiting.saturating_sub(1);
                            self.granted = Some(Grant {
                                since: now,
                                index,
                                revision,
                            });
                            self.queued = None;
                            break;
                        }
                        Err(fresh) => {
                            // the slot was taken or handed to this node meanwhile: a failed
                            // compare (the bench counts these against etcd's failed proposals)
                            turn_step!(self.s.node.as_str(), "grant_failed", fresh.revision);
                            snap = fresh
                        }
                    }
                }
                Next::Wait {
                    position,
                    holders,
                    max,
                    watch,
                } => {
                    self.queue = Some((position, holders, max));
                    let same = session.watch.as_ref().is_some_and(|w| w.plan == watch);
                    if !same {
                        // how far back: exact for a node that just joined, else what the
                        // read counted (it stops at the keys it read)
                        let far = snap.joined_behind.unwrap_or(position);
                        let since = watches_from_read(far, max).then_some(snap.revision + 1);
                        session.watch = None;
                        session.watch =
                            session
                                .conn
                                .watch(&self.keys, &watch, since)
                                .await?
                                .map(|stream| Watching {
                                    plan: watch,
                                    since,
                                    stream,
                                });
                    }
                    settled = true;
                    break;
                }
                Next::ReadDeeper { depth } => {
                    // more slots free than the keys this read brought could place it among:
                    // read as many as there are slots
                    snap = session
                        .conn
                        .snapshot(&self.keys, &self.s.node, Some(&me), depth)
                        .await?;
                }
            }
        }
        if self.granted.is_some() {
            session.watch = None;
            self.queue = None;
        } else if self.queued.is_some() && !settled {
            // every attempt failed (each on a slot taken meanwhile): no watch stands for this
            // read, so decide again at the next recheck with a fresh read
            session.watch = None;
            self.queue = None;
            self.stale = true;
        }
        self.snapshot = Some(snap);
        Ok(())
    }

    /// Whether a holder key's put is a slot handed to this waiter: this node's name on this
    /// node's lease.
    pub(super) fn handed(&self, index: usize, kv: &etcd_client::KeyValue) -> Option<Grant> {
        if self.want.is_none() || self.granted.is_some() || self.queued.is_none() {
            return None;
        }
        let held = Held::parse(
            &self.keys,
            crate::fleet::backend::etcd::group::RawKv {
                key: kv.key(),
                value: kv.value(),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
                lease: kv.lease(),
            },
        )?;
        let value = held.value.as_ref()?;
        (held.index == index && Some(held.lease) == self.lease && value.node == self.s.node)
            .then(|| Grant::of(&held))
    }
}
