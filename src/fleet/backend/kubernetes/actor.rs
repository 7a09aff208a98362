//! The task of backend kubernetes: takes, renews and gives back this node's slot Lease when
//! the handle asks, keeps its finding Lease while it reports findings, and reads the group's
//! health for the storm guard (the protocol: [`super::slots`]).
//!
//! What it costs the API server, by state:
//! - idle (no request, no finding): nothing at all — no watch, no periodic read;
//! - asking: one list of the group's Leases (by its label) and, when a slot is free, one
//!   create or replace; a waiter lists again every [`WAIT_RECHECK`] (a planned reexec every
//!   [`PLANNED_RECHECK`], so emergencies find free slots first); with a share budget, the
//!   group's Nodes are counted at most every [`MEMBERS_FRESH_FOR`];
//! - holding: one replace every third of `lease_ttl` (the renewal), one delete at release;
//! - reporting findings: its finding Lease written when they change and renewed every third
//!   of `lease_ttl`, deleted when they are gone.
//!
//! A call that fails is tried again after a backoff of 1 s doubling to 10 s. A held slot
//! stays `Granted` only within its tenure ([`Tenure`]): when no renewal was confirmed for
//! `lease_ttl`, it counts as lost (`expired`), and the next read shows whether it is still
//! this node's (then a confirmed renewal makes it `Granted` again).

use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::client::Client;
use super::names;
use super::slots::{self, Claim, Observations, Plan, Take, Tenure};
use super::types::{KubeError, Lease, OwnerReference};
use crate::fleet::backend::{Command, Shared};
use crate::fleet::{
    FleetError, FleetSettings, FleetView, GroupHealth, Holder, MaxDisruptive, SlotState, Urgency,
    storm,
};
use crate::target::ActionKind;

/// How often a node waiting for an emergency cure reads the group.
pub const WAIT_RECHECK: Duration = Duration::from_secs(5);
/// How often a node waiting for a planned reexec reads the group.
pub const PLANNED_RECHECK: Duration = Duration::from_secs(15);
/// How long a count of the group's Nodes is used.
pub const MEMBERS_FRESH_FOR: Duration = Duration::from_secs(300);
/// The longest pause before a failed call is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A grant stops counting this long before its tenure ends (the hosts' clocks may run at
/// slightly different rates; lease_ttl is at least 5 s).
const TENURE_MARGIN: Duration = Duration::from_secs(1);
/// Takes tried in one step (each refused one brings a fresh read).
const TAKE_ATTEMPTS: usize = 3;

#[derive(Debug, Clone)]
struct Want {
    action: ActionKind,
    urgency: Urgency,
    since: SystemTime,
}

#[derive(Debug, Clone)]
struct Grant {
    index: usize,
    /// The Lease as the server last confirmed it.
    lease: Lease,
    since: SystemTime,
    tenure: Tenure,
}

/// The task's state.
pub(crate) struct Actor {
    s: FleetSettings,
    client: Client,
    tx: watch::Sender<Shared>,
    want: Option<Want>,
    granted: Option<Grant>,
    /// Slot Leases of this node to delete.
    to_release: Vec<Lease>,
    obs: Observations,
    plan: Option<Plan>,
    /// The group's Nodes, counted then.
    members: Option<(usize, Instant)>,
    /// This node's Node as owner (None: not looked up yet; Some(None): none usable).
    owner: Option<Option<OwnerReference>>,
    down: Option<(SystemTime, FleetError)>,
    expired: u64,
    findings: Vec<String>,
    /// This node's finding Lease as last written.
    finding: Option<Lease>,
    findings_due: Option<Instant>,
    health_wanted: bool,
    health: Option<GroupHealth>,
    /// When a waiter reads the group next.
    recheck_at: Option<Instant>,
    /// After a failure: not before then.
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Actor {
    pub(crate) fn new(s: FleetSettings, client: Client, tx: watch::Sender<Shared>) -> Actor {
        Actor {
            s,
            client,
            tx,
            want: None,
            granted: None,
            to_release: Vec::new(),
            obs: Observations::default(),
            plan: None,
            members: None,
            owner: None,
            down: None,
            expired: 0,
            findings: Vec::new(),
            finding: None,
            findings_due: None,
            health_wanted: false,
            health: None,
            recheck_at: None,
            retry_at: None,
            backoff: Duration::from_secs(1),
        }
    }

    /// The task: until the handle shuts it down or goes away.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        loop {
            let now = Instant::now();
            if self.retry_at.is_none_or(|at| at <= now) {
                match self.work().await {
                    Ok(()) => {
                        self.down = None;
                        self.retry_at = None;
                        self.backoff = Duration::from_secs(1);
                    }
                    Err(e) => self.failed(e),
                }
            }
            self.check_tenure();
            self.publish();
            let wake = self.next_wake();
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    None => {
                        self.goodbye().await;
                        return;
                    }
                    Some(Command::Shutdown(ack)) => {
                        self.goodbye().await;
                        let _ = ack.send(());
                        return;
                    }
                    Some(c) => self.command(c),
                },
                () = sleep_until(wake) => {}
            }
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
                    self.recheck_at = Some(Instant::now());
                }
                Some(w) if self.granted.is_none() => {
                    if urgency == Urgency::Emergency || w.action != action {
                        w.action = action;
                        w.urgency = urgency;
                    }
                }
                Some(_) => {}
            },
            Command::Release => {
                self.want = None;
                self.recheck_at = None;
                if let Some(g) = self.granted.take() {
                    self.to_release.push(g.lease);
                }
            }
            Command::Findings(findings) => {
                if findings != self.findings {
                    self.findings = findings;
                    self.findings_due = Some(Instant::now());
                }
            }
            Command::ReadHealth => self.health_wanted = true,
            Command::Shutdown(_) => {}
        }
    }

    /// When the loop must run again without a command (None: never; idle).
    fn next_wake(&self) -> Option<Instant> {
        // a tenure ends on time, also while calls fail and wait for their retry
        let deadline = self
            .granted
            .as_ref()
            .map(|g| g.tenure.deadline() - TENURE_MARGIN);
        if let Some(at) = self.retry_at {
            return Some(deadline.map_or(at, |d| d.min(at)));
        }
        let renew = self.granted.as_ref().map(|g| g.tenure.renew_at());
        let recheck = self.recheck_at.filter(|_| self.granted.is_none());
        let due = (!self.to_release.is_empty() || self.health_wanted).then(Instant::now);
        [renew, deadline, recheck, self.findings_due, due]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whatever is due now.
    async fn work(&mut self) -> Result<(), FleetError> {
        let now = Instant::now();
        self.release_due().await?;
        if self
            .granted
            .as_ref()
            .is_some_and(|g| g.tenure.renew_at() <= now)
        {
            self.renew().await?;
        }
        if self.findings_due.is_some_and(|at| at <= now) {
            self.write_findings().await?;
        }
        if self.want.is_some()
            && self.granted.is_none()
            && self.recheck_at.is_some_and(|at| at <= now)
        {
            self.acquire().await?;
            let every = match self.want.as_ref().map(|w| w.urgency) {
                Some(Urgency::Planned) => PLANNED_RECHECK,
                _ => WAIT_RECHECK,
            };
            self.recheck_at = self.granted.is_none().then(|| Instant::now() + every);
        }
        if self.health_wanted {
            self.read_health().await?;
            self.health_wanted = false;
        }
        Ok(())
    }

    fn failed(&mut self, e: FleetError) {
        tracing::debug!(node = %self.s.node, error = %e, "fleet (kubernetes): call failed");
        let since = self
            .down
            .as_ref()
            .map_or_else(SystemTime::now, |(since, _)| *since);
        self.down = Some((since, e));
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// A slot whose tenure ran out is no longer this node's to act on.
    fn check_tenure(&mut self) {
        let now = Instant::now();
        if self
            .granted
            .as_ref()
            .is_some_and(|g| !g.tenure.valid(now, TENURE_MARGIN))
        {
            self.granted = None;
            self.expired += 1;
            self.recheck_at = self.want.as_ref().map(|_| now);
        }
    }

    fn selector(&self) -> String {
        names::group_selector(&self.s.group)
    }

    /// List the group's Leases and fold them into the observations.
    async fn read_group(&mut self) -> Result<Vec<Lease>, FleetError> {
        let list = self.client.list(&self.selector()).await?;
        self.obs.observe_all(&list.items, Instant::now());
        Ok(list.items)
    }

    /// The group's Nodes (counted again after [`MEMBERS_FRESH_FOR`]).
    async fn members(&mut self) -> Result<usize, FleetError> {
        if let Some((n, at)) = self.members {
            if at.elapsed() < MEMBERS_FRESH_FOR {
                return Ok(n);
            }
        }
        let n = self.client.count_nodes(&self.selector()).await?;
        self.members = Some((n, Instant::now()));
        Ok(n)
    }

    async fn budget(&mut self) -> Result<usize, FleetError> {
        Ok(match self.s.max_disruptive {
            MaxDisruptive::Count(_) => self.s.max_disruptive.slots(0),
            MaxDisruptive::Percent(_) => {
                let n = self.members().await?;
                self.s.max_disruptive.slots(n)
            }
        })
    }

    /// This node's Node as the owner of its Leases (looked up once; none when it is not a
    /// Node's name or the identity may not read Nodes: the Leases then expire instead).
    async fn owner(&mut self) -> Option<OwnerReference> {
        if let Some(o) = &self.owner {
            return o.clone();
        }
        match self.client.node_uid(&self.s.node).await {
            Ok(uid) => {
                let o = uid.map(|uid| OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "Node".to_owned(),
                    name: self.s.node.clone(),
                    uid,
                });
                self.owner = Some(o.clone());
                o
            }
            Err(e) if e.is_rejection() => {
                tracing::warn!(node = %self.s.node, error = %e, "fleet (kubernetes): this node's Node cannot be read; its Leases will not go with a deleted Node (they expire instead)");
                self.owner = Some(None);
                None
            }
            Err(_) => None,
        }
    }

    fn grant(&mut self, index: usize, lease: Lease, sent: Instant) {
        let since = self
            .granted
            .as_ref()
            .filter(|g| g.index == index)
            .map_or_else(SystemTime::now, |g| g.since);
        let duration = slots::duration_of(&lease, self.s.lease_ttl);
        self.granted = Some(Grant {
            index,
            lease,
            since,
            tenure: Tenure { sent, duration },
        });
        self.recheck_at = None;
    }

    /// Read the group and take a slot if one is free (or find this node's own).
    async fn acquire(&mut self) -> Result<(), FleetError> {
        for _ in 0..TAKE_ATTEMPTS {
            let leases = self.read_group().await?;
            let budget = self.budget().await?;
            let plan = Plan::make(
                &self.s.group,
                &self.s.node,
                budget,
                &leases,
                &self.obs,
                self.s.lease_ttl,
                Instant::now(),
            );
            self.plan = Some(plan.clone());
            self.to_release
                .extend(plan.surplus.iter().map(|h| h.lease.clone()));
            if let Some(mine) = plan.mine {
                // this node's own slot (a grant whose answer was lost, or a restart): a
                // confirmed renewal makes it a grant
                let sent = Instant::now();
                match self
                    .client
                    .replace(&slots::renewal(&mine.lease, SystemTime::now()))
                    .await
                {
                    Ok(l) => {
                        self.grant(mine.index, l, sent);
                        return Ok(());
                    }
                    Err(KubeError::Conflict { .. } | KubeError::NotFound { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let Some(take) = plan.take else {
                return Ok(());
            };
            let action = self
                .want
                .as_ref()
                .map_or("?", |w| w.action.name())
                .to_owned();
            let owner = self.owner().await;
            let claim = Claim {
                group: &self.s.group,
                node: &self.s.node,
                action: &action,
                ttl: self.s.lease_ttl,
                owner,
            };
            let lease = claim.lease(&take, SystemTime::now());
            let sent = Instant::now();
            let written = match &take {
                Take::Create { .. } => self.client.create(&lease).await,
                Take::Replace { .. } => self.client.replace(&lease).await,
            };
            match written {
                Ok(l) => {
                    tracing::debug!(node = %self.s.node, slot = take.index(), "fleet (kubernetes): slot taken");
                    self.grant(take.index(), l, sent);
                    return Ok(());
                }
                // another member was first: read again
                Err(KubeError::Conflict { .. } | KubeError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Renew the held slot. A conflict may be this node's own renewal whose answer was lost:
    /// the Lease is read, and kept when it still names this node.
    async fn renew(&mut self) -> Result<(), FleetError> {
        let Some(g) = self.granted.as_ref() else {
            return Ok(());
        };
        let (index, mut lease) = (g.index, g.lease.clone());
        for _ in 0..2 {
            let sent = Instant::now();
            match self
                .client
                .replace(&slots::renewal(&lease, SystemTime::now()))
                .await
            {
                Ok(l) => {
                    self.grant(index, l, sent);
                    return Ok(());
                }
                Err(KubeError::Conflict { .. }) => {
                    match self.client.get(&lease.metadata.name).await? {
                        Some(l) if l.holder() == Some(self.s.node.as_str()) => lease = l,
                        _ => break,
                    }
                }
                Err(KubeError::NotFound { .. }) => break,
                Err(e) => return Err(e.into()),
            }
        }
        // taken over or deleted: lost
        self.granted = None;
        self.expired += 1;
        self.recheck_at = self.want.as_ref().map(|_| Instant::now());
        Ok(())
    }

    /// Delete this node's Lease `lease` if it is still this node's.
    async fn delete_mine(&self, lease: &Lease) -> Result<(), FleetError> {
        let mut rv = lease.resource_version().to_owned();
        for _ in 0..2 {
            match self.client.delete(&lease.metadata.name, &rv).await {
                Ok(()) | Err(KubeError::NotFound { .. }) => return Ok(()),
                Err(KubeError::Conflict { .. }) => {
                    match self.client.get(&lease.metadata.name).await? {
                        Some(l) if l.holder() == Some(self.s.node.as_str()) => {
                            rv = l.resource_version().to_owned();
                        }
                        _ => return Ok(()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn release_due(&mut self) -> Result<(), FleetError> {
        while let Some(lease) = self.to_release.last().cloned() {
            self.delete_mine(&lease).await?;
            self.to_release.pop();
        }
        Ok(())
    }

    /// Write (or delete, when there are none) this node's finding Lease.
    async fn write_findings(&mut self) -> Result<(), FleetError> {
        if self.findings.is_empty() {
            if let Some(l) = self.finding.clone() {
                self.delete_mine(&l).await?;
            }
            self.finding = None;
            self.findings_due = None;
            return Ok(());
        }
        let owner = self.owner().await;
        for _ in 0..2 {
            let mut lease = slots::finding_lease(
                &self.s.group,
                &self.s.node,
                &self.findings,
                self.s.lease_ttl,
                SystemTime::now(),
                self.finding.as_ref(),
            );
            lease.metadata.owner_references = owner.iter().cloned().collect();
            let written = match self.finding {
                Some(_) => self.client.replace(&lease).await,
                None => self.client.create(&lease).await,
            };
            match written {
                Ok(l) => {
                    self.finding = Some(l);
                    self.findings_due = Some(Instant::now() + self.s.lease_ttl / 3);
                    return Ok(());
                }
                Err(KubeError::Conflict { .. } | KubeError::NotFound { .. }) => {
                    let name = names::finding_lease(&self.s.group, &self.s.node);
                    self.finding = self.client.get(&name).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The group's health: its live finding Leases against its Nodes.
    async fn read_health(&mut self) -> Result<(), FleetError> {
        let leases = self.read_group().await?;
        let members = self.members().await?;
        self.health = Some(health_of(
            &self.s,
            &leases,
            &self.obs,
            members,
            Instant::now(),
        ));
        Ok(())
    }

    /// Shut down: give back the slot and the finding Lease (best effort, within the
    /// handle's wait).
    async fn goodbye(&mut self) {
        if let Some(g) = self.granted.take() {
            self.to_release.push(g.lease);
        }
        if let Some(l) = self.finding.take() {
            self.to_release.push(l);
        }
        let _ = self.release_due().await;
        self.want = None;
    }

    fn state(&self) -> SlotState {
        if let Some(g) = &self.granted {
            return SlotState::Granted {
                since: g.since,
                revision: g.lease.resource_version().parse().unwrap_or(0),
            };
        }
        if let Some((since, e)) = &self.down {
            if self.want.is_some() {
                return SlotState::down(*since, e);
            }
        }
        match (&self.want, &self.plan) {
            (Some(w), Some(p)) => SlotState::Waiting {
                since: w.since,
                position: 0,
                holders: p.holders(),
                max: p.budget,
            },
            _ => SlotState::Idle,
        }
    }

    fn publish(&self) {
        let reachable = self.down.is_none();
        let last_error = self.down.as_ref().map(|(_, e)| e.to_string());
        let mut view = match &self.plan {
            Some(p) => view_of(&self.s, p, self.members.map(|(n, _)| n)),
            None => FleetView {
                group: self.s.group.clone(),
                ..FleetView::default()
            },
        };
        // this node holds what it knows it holds (the plan may be older than a grant or a
        // release)
        view.holders.retain(|h| h.node != self.s.node);
        if let Some(g) = &self.granted {
            view.holders.push(holder_of(&g.lease, &self.s.node));
        }
        view.reachable = reachable;
        view.last_error = last_error;
        view.expired = self.expired;
        view.health = self.health.clone();
        let state = self.state();
        Shared::publish(&self.tx, state, view);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A slot Lease as a [`Holder`].
fn holder_of(l: &Lease, node: &str) -> Holder {
    Holder {
        node: node.to_owned(),
        action: l
            .metadata
            .annotations
            .get(slots::ACTION_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| "?".to_owned()),
        since: l
            .spec
            .acquire_time
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .unwrap_or(SystemTime::UNIX_EPOCH),
        stray_key: None,
    }
}

/// The group as a [`FleetView`], from a plan (no queue: `waiting` is unknown, 0).
pub(crate) fn view_of(s: &FleetSettings, p: &Plan, members: Option<usize>) -> FleetView {
    let mut holders: Vec<Holder> = Vec::new();
    for h in p.mine.iter().chain(&p.surplus) {
        holders.push(holder_of(&h.lease, &s.node));
    }
    for o in &p.others {
        holders.push(Holder {
            node: o.node.clone(),
            action: o.action.clone(),
            since: SystemTime::UNIX_EPOCH,
            stray_key: None,
        });
    }
    FleetView {
        group: s.group.clone(),
        members_alive: members,
        max_disruptive: Some(p.budget),
        holders,
        waiting: 0,
        reachable: true,
        last_error: None,
        expired: 0,
        health: None,
    }
}

/// The group's health: the live finding Leases of `leases` against `nodes` members (at
/// least as many as report findings).
pub(crate) fn health_of(
    s: &FleetSettings,
    leases: &[Lease],
    obs: &Observations,
    nodes: usize,
    now: Instant,
) -> GroupHealth {
    let live = slots::live_findings(&s.group, leases, obs, s.lease_ttl, now);
    let unhealthy: Vec<String> = live
        .iter()
        .filter(|(_, f)| !f.is_empty() && !storm::exempt(f, &s.storm_exempt))
        .map(|(n, _)| n.clone())
        .collect();
    let members = nodes.max(live.len());
    GroupHealth {
        storming: s.max_unhealthy.storming(members, unhealthy.len()),
        members,
        unhealthy,
        read_at: SystemTime::now(),
    }
}
