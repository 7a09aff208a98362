//! The re-ask: a target whose call failed (no answer within `probe.timeout`, or an error) is
//! asked again at once, off the round, back to back, until it answers or
//! `probe.unhealthy_after` calls in a row have failed. A hang is so confirmed in about
//! `unhealthy_after × probe.timeout` after the first failed call started, instead of
//! `unhealthy_after` intervals.
//!
//! The rules it keeps:
//! - **one call in flight per target**: a re-ask asks its targets with probes (and connections)
//!   of its own, one step at a time, and the round skips the targets a step holds, so a target
//!   is never asked twice at once; the other targets keep the round's timing;
//! - **the bus comes along**: when PID 1 or logind is re-asked, so is the bus daemon, in the
//!   same step, so a hung bus daemon is counted at the same pace as the calls that hang behind
//!   it and never taken for PID 1's (or logind's) own hang;
//! - **PID 1 on the bus gets ordinary calls only**: the re-ask's systemd probe never reads
//!   `Version` over the bus (only `GetUnit`), the process-wide unanswered flag of
//!   [`super::systemd`] still holds, and after a failed bus call the next step starts on a
//!   fresh bus connection, so a new call never queues behind an abandoned one;
//! - **an error is re-asked one timeout after the failed call started**, a timeout at once
//!   (it ended one timeout after it started): `unhealthy_after` failures always span at least
//!   `unhealthy_after − 1` timeouts, so a blip of a second (an engine restarting) is not
//!   confirmed in milliseconds;
//! - kubelet is not re-asked: its `PLEG is not healthy` lines are a standing report, not a
//!   call that hangs, and its cure comes last.
//!
//! A target that answers leaves the re-ask at once; its good answer is counted like a round's
//! (one good answer recovers it). The daemon counts each step's observations as a partial round
//! ([`crate::diagnosis::Diagnosis::update`]).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{Prober, Round};
use crate::config::Config;
use crate::target::Target;

/// The targets a failed call is re-asked for.
pub const REASKED: [Target; 5] = [
    Target::Dbus,
    Target::Systemd,
    Target::Logind,
    Target::Docker,
    Target::Containerd,
];

/// What asks targets once, concurrently, each call bounded by the timeout: the probes
/// ([`Prober`]), or a fake in tests.
pub trait Asker: Send + 'static {
    /// Ask `targets` once; the round holds their observations.
    fn ask(&mut self, targets: BTreeSet<Target>) -> impl Future<Output = Round> + Send + '_;
}

impl Asker for Prober {
    async fn ask(&mut self, targets: BTreeSet<Target>) -> Round {
        let round = self.round_of(|t| targets.contains(&t)).await;
        let bus_failed = round.observations.iter().any(|o| {
            matches!(o.target, Target::Dbus | Target::Systemd | Target::Logind)
                && o.state.is_failure()
        });
        if bus_failed {
            self.reset_bus();
        }
        round
    }
}

/// The targets the next step asks, from each target's consecutive failures so far: every
/// re-asked target that failed at least once and fewer than `unhealthy_after` times, and the
/// bus daemon with PID 1 or logind.
pub fn to_reask(failures: impl Fn(Target) -> u32, unhealthy_after: u32) -> BTreeSet<Target> {
    let mut set: BTreeSet<Target> = REASKED
        .into_iter()
        .filter(|t| {
            let f = failures(*t);
            f > 0 && f < unhealthy_after
        })
        .collect();
    if set.contains(&Target::Systemd) || set.contains(&Target::Logind) {
        set.insert(Target::Dbus);
    }
    set
}

/// A step's answers, to be counted.
#[derive(Debug)]
pub struct Reasked {
    /// The observations of the targets the step asked.
    pub round: Round,
    /// When the step's calls started.
    pub started: Instant,
}

struct Step<A> {
    targets: BTreeSet<Target>,
    task: JoinHandle<(A, Instant, Round)>,
}

/// The re-ask of failed targets: at most one step runs at a time, as a task of its own.
pub struct Reask<A: Asker> {
    timeout: Duration,
    unhealthy_after: u32,
    make: Box<dyn Fn() -> A + Send>,
    idle: Option<A>,
    step: Option<Step<A>>,
    /// When each target's latest counted call started.
    last_call: BTreeMap<Target, Instant>,
}

impl Reask<Prober> {
    /// The daemon's re-ask, with probes of its own ([`Prober::for_reask`]).
    pub fn for_config(config: &Config) -> Self {
        let config = config.clone();
        let timeout = config.probe.timeout;
        let unhealthy_after = config.probe.unhealthy_after.get();
        Reask::new(
            timeout,
            unhealthy_after,
            Box::new(move || Prober::for_reask(&config)),
        )
    }
}

impl<A: Asker> Reask<A> {
    /// A re-ask whose calls are bounded by `timeout` (the asker's own bound; used here for
    /// the spacing after an error), up to `unhealthy_after` failures in a row; `make` makes
    /// its asker (again after a step that did not come back).
    pub fn new(timeout: Duration, unhealthy_after: u32, make: Box<dyn Fn() -> A + Send>) -> Self {
        Reask {
            timeout,
            unhealthy_after: unhealthy_after.max(1),
            make,
            idle: None,
            step: None,
            last_call: BTreeMap::new(),
        }
    }

    /// Whether a step runs.
    pub fn running(&self) -> bool {
        self.step.is_some()
    }

    /// Whether a step holds `target` (the round skips it).
    pub fn holds(&self, target: Target) -> bool {
        self.step
            .as_ref()
            .is_some_and(|s| s.targets.contains(&target))
    }

    /// After `counted` (a round's or a step's observations, whose calls started at `started`)
    /// was counted, with `failures` each target's consecutive failures now: start the next
    /// step if targets need one and none runs.
    pub fn follow_up(
        &mut self,
        counted: &Round,
        started: Instant,
        failures: impl Fn(Target) -> u32,
    ) {
        for o in &counted.observations {
            self.last_call.insert(o.target, started);
        }
        if self.step.is_some() {
            return;
        }
        let targets = to_reask(failures, self.unhealthy_after);
        if targets.is_empty() {
            return;
        }
        let now = Instant::now();
        let not_before = targets
            .iter()
            .filter_map(|t| self.last_call.get(t))
            .map(|t| crate::clock::deadline(*t, self.timeout))
            .max()
            .unwrap_or(now)
            .max(now);
        tracing::debug!(?targets, "re-asking");
        let mut asker = self.idle.take().unwrap_or_else(|| (self.make)());
        let asked = targets.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(not_before).await;
            let started = Instant::now();
            let round = asker.ask(asked).await;
            (asker, started, round)
        });
        self.step = Some(Step { targets, task });
    }

    /// The running step's answers (pending for ever when none runs). Cancel-safe.
    pub async fn next(&mut self) -> Reasked {
        let Some(step) = self.step.as_mut() else {
            return std::future::pending().await;
        };
        let joined = (&mut step.task).await;
        self.step = None;
        match joined {
            Ok((asker, started, round)) => {
                self.idle = Some(asker);
                Reasked { round, started }
            }
            Err(e) => {
                tracing::warn!("a re-ask did not come back ({e}); the next one starts afresh");
                Reasked {
                    round: Round {
                        at: SystemTime::now(),
                        observations: Vec::new(),
                    },
                    started: Instant::now(),
                }
            }
        }
    }
}

impl<A: Asker> Drop for Reask<A> {
    /// A step never outlives its re-ask (a reload makes a new one): its calls are abandoned.
    fn drop(&mut self) {
        if let Some(step) = &self.step {
            step.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::diagnosis::{Diagnosis, FindingId, Transition};
    use crate::target::{Facts, Observation, PathResult, TargetState};

    const TIMEOUT: Duration = Duration::from_secs(5);
    const INTERVAL: Duration = Duration::from_secs(10);

    /// What the fake node does to a call to a target started at a given time.
    #[derive(Clone, Copy, PartialEq)]
    enum Fault {
        /// No answer: the call is abandoned at the timeout.
        Hang,
        /// An error at once.
        Error,
    }

    /// The fake node: a fault per target over a time span (seconds since `t0`), and a log of
    /// every call (target, start, end) to check one call in flight per target.
    #[derive(Default)]
    struct Node {
        faults: Vec<(Target, Fault, u64, u64)>,
        calls: Vec<(Target, Duration, Duration)>,
        in_flight: BTreeSet<Target>,
    }

    #[derive(Clone)]
    struct FakeAsker {
        node: Arc<Mutex<Node>>,
        t0: Instant,
    }

    impl FakeAsker {
        fn fault(&self, t: Target, at: Duration) -> Option<Fault> {
            let node = self.node.lock().unwrap();
            node.faults
                .iter()
                .find(|(ft, _, from, to)| {
                    *ft == t && at >= Duration::from_secs(*from) && at < Duration::from_secs(*to)
                })
                .map(|f| f.1)
        }

        async fn call(&self, t: Target) -> Observation {
            let start = self.t0.elapsed();
            {
                let mut node = self.node.lock().unwrap();
                assert!(
                    node.in_flight.insert(t),
                    "a second call to {t} while one is in flight (at {start:?})"
                );
            }
            let (state, took) = match self.fault(t, start) {
                Some(Fault::Hang) => (TargetState::Unresponsive, TIMEOUT),
                Some(Fault::Error) => (TargetState::Error, Duration::from_millis(1)),
                None => (TargetState::Ok, Duration::from_millis(3)),
            };
            tokio::time::sleep(took).await;
            let mut node = self.node.lock().unwrap();
            node.in_flight.remove(&t);
            node.calls.push((t, start, self.t0.elapsed()));
            let path = PathResult {
                state,
                latency: took,
                detail: String::new(),
            };
            let mut facts = Facts::default();
            if t == Target::Systemd {
                // PID 1 answers on its private socket: a failing bus path is the wedge
                facts.bus = Some(path.clone());
                facts.private = Some(PathResult {
                    state: TargetState::Ok,
                    ..path
                });
            }
            Observation {
                target: t,
                state,
                latency: took,
                detail: format!("{t} {state}"),
                facts,
            }
        }
    }

    impl Asker for FakeAsker {
        async fn ask(&mut self, targets: BTreeSet<Target>) -> Round {
            let at = SystemTime::UNIX_EPOCH + self.t0.elapsed();
            let calls = targets.iter().map(|t| self.call(*t));
            let observations = futures_util::future::join_all(calls).await;
            Round { at, observations }
        }
    }

    /// What the daemon saw: each transition and new finding with its time since `t0`.
    #[derive(Default, Debug)]
    struct Seen {
        transitions: Vec<(Duration, Transition)>,
        findings: Vec<(Duration, FindingId)>,
    }

    /// The daemon's loop in small: a round of the targets no step holds every interval (from
    /// t0), each step's answers counted as they come, the re-ask followed up after each, for
    /// `secs` of paused time.
    async fn run(
        faults: Vec<(Target, Fault, u64, u64)>,
        unhealthy_after: u32,
        secs: u64,
    ) -> (Seen, Node) {
        let t0 = Instant::now();
        let node = Arc::new(Mutex::new(Node {
            faults,
            ..Node::default()
        }));
        let fake = FakeAsker {
            node: node.clone(),
            t0,
        };
        let mut round_asker = fake.clone();
        let made = fake.clone();
        let mut reask = Reask::new(TIMEOUT, unhealthy_after, Box::new(move || made.clone()));
        let mut diagnosis = Diagnosis::new(unhealthy_after);
        let mut seen = Seen::default();
        let mut ticker = tokio::time::interval_at(t0, INTERVAL);
        let end = t0 + Duration::from_secs(secs);
        let mut count = |calls: Reasked, reask: &mut Reask<FakeAsker>, seen: &mut Seen| {
            let now = SystemTime::UNIX_EPOCH + t0.elapsed();
            let (transitions, new) = diagnosis.update(&calls.round, None, now);
            seen.transitions
                .extend(transitions.into_iter().map(|t| (t0.elapsed(), t)));
            seen.findings
                .extend(new.into_iter().map(|f| (t0.elapsed(), f.id)));
            reask.follow_up(&calls.round, calls.started, |t| diagnosis.failures(t));
        };
        loop {
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(end) => break,
                calls = reask.next(), if reask.running() => count(calls, &mut reask, &mut seen),
                _ = ticker.tick() => {
                    let started = Instant::now();
                    let asked: BTreeSet<Target> =
                        Target::ALL.into_iter().filter(|t| !reask.holds(*t)).collect();
                    let round = round_asker.ask(asked).await;
                    count(Reasked { round, started }, &mut reask, &mut seen);
                }
            }
        }
        drop(reask);
        let node = std::mem::take(&mut *node.lock().unwrap());
        (seen, node)
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn first_unhealthy(seen: &Seen, t: Target) -> Option<Duration> {
        seen.transitions
            .iter()
            .find(|(_, tr)| *tr == Transition::Unhealthy(t))
            .map(|(at, _)| *at)
    }

    fn calls_to(node: &Node, t: Target) -> Vec<Duration> {
        node.calls
            .iter()
            .filter(|c| c.0 == t)
            .map(|c| c.1)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_hang_is_confirmed_in_unhealthy_after_timeouts_and_the_others_keep_the_round() {
        // docker hangs from the first round on: round at 0 (no answer at 5), re-asks 5-10 and
        // 10-15: unhealthy at 15 s, not after three 10 s rounds
        let (seen, node) = run(vec![(Target::Docker, Fault::Hang, 0, 1000)], 3, 40).await;
        let at = first_unhealthy(&seen, Target::Docker).expect("docker unhealthy");
        assert!(at >= secs(15.0) && at <= secs(15.1), "{at:?}");
        assert!(
            seen.findings
                .iter()
                .any(|(t, id)| *id == FindingId::DockerUnresponsive && (*t - at) < secs(0.1))
        );
        let docker = calls_to(&node, Target::Docker);
        assert!(docker[0] < secs(0.1) && docker[1] >= secs(5.0) && docker[1] < secs(5.1));
        assert!(
            docker[2] >= secs(10.0) && docker[2] < secs(10.1),
            "{docker:?}"
        );
        // confirmed: back in the round (20, 30), never re-asked again
        assert!(
            docker[3] >= secs(20.0) && docker[3] < secs(20.1),
            "{docker:?}"
        );
        assert_eq!(docker.len(), 5, "{docker:?}");
        // the others are asked by the round, on the round's time, once each
        for t in [Target::Logind, Target::Kubelet, Target::Containerd] {
            let c = calls_to(&node, t);
            assert_eq!(c.len(), 4, "{t}: {c:?}");
            for (i, start) in c.iter().enumerate() {
                let due = secs(10.0 * i as f64);
                assert!(*start >= due && *start < due + secs(0.1), "{t}: {c:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hang_at_any_phase_is_confirmed_three_timeouts_after_the_first_failed_call() {
        // hang at 3 s: the round at 10 fails first (no answer at 15), confirmed at 25
        let (seen, _) = run(vec![(Target::Logind, Fault::Hang, 3, 1000)], 3, 40).await;
        let at = first_unhealthy(&seen, Target::Logind).expect("logind unhealthy");
        assert!(at >= secs(25.0) && at <= secs(25.1), "{at:?}");
        assert!(
            seen.findings
                .iter()
                .any(|(_, id)| *id == FindingId::LogindUnresponsive)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_a_re_ask_clears_the_count_at_once() {
        // docker hangs 0-7 s: round 0 fails, re-ask at 5 fails, re-ask at 10 answers
        let (seen, node) = run(vec![(Target::Docker, Fault::Hang, 0, 7)], 3, 40).await;
        assert!(seen.transitions.is_empty(), "{seen:?}");
        assert!(seen.findings.is_empty(), "{seen:?}");
        let docker = calls_to(&node, Target::Docker);
        // 0, 5, 10 (answered: out of the re-ask), then the round again at 20 and 30
        assert_eq!(docker.len(), 5, "{docker:?}");
        assert!(
            docker[3] >= secs(20.0) && docker[3] < secs(20.1),
            "{docker:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unhealthy_target_recovers_with_its_first_good_answer() {
        // confirmed at 15; the hang ends at 17; the round at 20 answers
        let (seen, _) = run(vec![(Target::Docker, Fault::Hang, 0, 17)], 3, 30).await;
        let recovered = seen
            .transitions
            .iter()
            .find(|(_, t)| *t == Transition::Recovered(Target::Docker))
            .map(|(at, _)| *at)
            .expect("recovered");
        assert!(
            recovered >= secs(20.0) && recovered < secs(20.1),
            "{seen:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn errors_are_re_asked_one_timeout_after_the_failed_call_started() {
        // errors at once: calls at 0, 5 and 10; unhealthy at 10 s, not within milliseconds
        let (seen, node) = run(vec![(Target::Docker, Fault::Error, 0, 1000)], 3, 30).await;
        let at = first_unhealthy(&seen, Target::Docker).expect("docker unhealthy");
        assert!(at >= secs(10.0) && at < secs(10.1), "{at:?}");
        let docker = calls_to(&node, Target::Docker);
        assert!(
            docker[1] >= secs(5.0) && docker[1] < secs(5.1),
            "{docker:?}"
        );
        assert!(
            docker[2] >= secs(10.0) && docker[2] < secs(10.1),
            "{docker:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_bus_daemon_is_never_taken_for_a_wedged_pid1_or_a_hung_logind() {
        // the bus daemon answered the round at 0 (it stops right after); PID 1's and logind's
        // calls of that round go unanswered. The bus is re-asked with them and confirmed at
        // the same pace: only bus-unresponsive, never systemd-bus-wedge or logind-unresponsive.
        let faults = vec![
            (Target::Dbus, Fault::Hang, 1, 1000),
            (Target::Systemd, Fault::Hang, 0, 1000),
            (Target::Logind, Fault::Hang, 0, 1000),
        ];
        let (seen, node) = run(faults, 3, 60).await;
        let ids: Vec<FindingId> = seen.findings.iter().map(|f| f.1).collect();
        assert!(ids.contains(&FindingId::BusUnresponsive), "{seen:?}");
        for id in [FindingId::SystemdBusWedge, FindingId::LogindUnresponsive] {
            assert!(!ids.contains(&id), "{seen:?}");
        }
        // the bus was asked with them, at 5 s
        let dbus = calls_to(&node, Target::Dbus);
        assert!(dbus[1] >= secs(5.0) && dbus[1] < secs(5.1), "{dbus:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wedged_pid1_is_confirmed_in_three_timeouts_with_the_bus_answering() {
        let (seen, node) = run(vec![(Target::Systemd, Fault::Hang, 0, 1000)], 3, 30).await;
        let at = first_unhealthy(&seen, Target::Systemd).expect("systemd unhealthy");
        assert!(at >= secs(15.0) && at <= secs(15.1), "{at:?}");
        assert!(
            seen.findings
                .iter()
                .any(|(_, id)| *id == FindingId::SystemdBusWedge)
        );
        // one call at a time to PID 1: each started after the previous one ended
        let mut ends = node.calls.iter().filter(|c| c.0 == Target::Systemd);
        let mut prev = ends.next().map(|c| c.2);
        for c in ends {
            assert!(prev.is_some_and(|p| c.1 >= p), "{:?}", node.calls);
            prev = Some(c.2);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn kubelet_is_not_re_asked_and_one_failure_is_enough_with_unhealthy_after_one() {
        let (_, node) = run(vec![(Target::Kubelet, Fault::Error, 0, 1000)], 3, 25).await;
        assert_eq!(calls_to(&node, Target::Kubelet).len(), 3);
        let (seen, node) = run(vec![(Target::Docker, Fault::Hang, 0, 1000)], 1, 25).await;
        assert_eq!(calls_to(&node, Target::Docker).len(), 3);
        assert!(first_unhealthy(&seen, Target::Docker).is_some_and(|t| t <= secs(5.1)));
    }

    #[test]
    fn the_bus_comes_along_with_pid1_and_logind() {
        let f = |failing: &'static [Target]| move |t: Target| u32::from(failing.contains(&t));
        assert_eq!(
            to_reask(f(&[Target::Systemd]), 3),
            BTreeSet::from([Target::Dbus, Target::Systemd])
        );
        assert_eq!(
            to_reask(f(&[Target::Logind, Target::Kubelet]), 3),
            BTreeSet::from([Target::Dbus, Target::Logind])
        );
        assert_eq!(
            to_reask(f(&[Target::Docker]), 3),
            BTreeSet::from([Target::Docker])
        );
        assert!(to_reask(f(&[Target::Kubelet]), 3).is_empty());
        assert!(to_reask(|_| 3, 3).is_empty(), "confirmed: no more re-asks");
    }
}
