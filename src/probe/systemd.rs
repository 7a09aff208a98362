//! The `systemd` target: PID 1, asked for its `Version` two ways — over the system bus, and
//! over its private socket `/run/systemd/private` (a peer-to-peer D-Bus connection that needs
//! no bus daemon: the way root's `systemctl` reaches PID 1).
//!
//! The two paths together tell the systemd bus bug (issue 11809) apart from a dead bus: with
//! the bug, the bus answers, PID 1 on the bus does not, PID 1 on the private socket does.
//!
//! On the bus PID 1 gets only an ordinary call (`Manager.GetUnit`). Its `Version` comes from
//! the private socket; over the bus it is read (`Properties.Get`) only on a node without a
//! private socket, once per PID 1, and never while the serial is within
//! [`BUS_VERSION_MARGIN`] of 2^32 or once a bus call to PID 1 has gone unanswered in this
//! process's life (which lies within one boot).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::time::Instant;
use zbus::Connection;

use std::future::Future;

use super::{BusState, Probe, RoundContext, bounded, timed};
use crate::client::pid1::{Pid1, Route};
use crate::client::{self, pid1};
use crate::system_program;
use crate::target::{Facts, Observation, PathResult, Target, TargetState};

/// How far below 2^32 PID 1's bus serial must be for a `Version` read over the bus: far
/// more than any node sends between our `GetUnit` reply and the read that follows it.
pub const BUS_VERSION_MARGIN: u32 = 1 << 24;

/// Set once a bus call to PID 1 went unanswered: from then on, this process sends PID 1
/// nothing but ordinary calls on the bus (shared by every probe instance, re-asks included).
static BUS_CALL_UNANSWERED: AtomicBool = AtomicBool::new(false);

/// Whether a bus call to PID 1 has gone unanswered in this process's life.
pub fn bus_call_unanswered() -> bool {
    BUS_CALL_UNANSWERED.load(Ordering::Relaxed)
}

/// Whether the `Version` may be read over the bus after a `GetUnit` reply with `serial`:
/// only without a private socket, with the serial outside the margin, no bus call ever
/// unanswered, and the version not known yet.
pub fn may_read_version_on_bus(
    socket_exists: bool,
    serial: u32,
    unanswered: bool,
    known: bool,
) -> bool {
    !socket_exists && !unanswered && !known && serial < u32::MAX - BUS_VERSION_MARGIN
}

/// Probes PID 1 and keeps the private-socket connection between rounds.
pub struct SystemdProbe {
    private_socket: PathBuf,
    private: Option<Pid1>,
    /// The version read over the bus (no private socket), with the serial of the reply it
    /// followed: read again only after the serial dropped (a new PID 1).
    bus_version: Option<(String, u32)>,
    /// Whether the `Version` may be read over the bus at all (never for a re-ask: it only
    /// confirms a hang, with ordinary calls).
    version_on_bus: bool,
}

impl SystemdProbe {
    /// A probe of PID 1 whose private socket is at `private_socket`.
    pub fn new(private_socket: PathBuf) -> Self {
        SystemdProbe {
            private_socket,
            private: None,
            bus_version: None,
            version_on_bus: true,
        }
    }

    /// The same probe that never reads `Version` over the bus: only `GetUnit` goes to PID 1
    /// there (the re-ask's, [`super::reask`]).
    pub fn without_version_on_bus(mut self) -> Self {
        self.version_on_bus = false;
        self
    }

    /// Probe both paths concurrently. `bus` yields the round's shared system bus connection
    /// (the private path does not wait for it).
    pub async fn probe(
        &mut self,
        deadline: Instant,
        slow_after: Duration,
        start: Instant,
        bus: impl Future<Output = BusState>,
    ) -> Observation {
        let socket_exists = self.private_socket.exists();
        let mut bus_serial: Option<u32> = None;
        let mut bus_version: Option<String> = None;
        let mut private_version: Option<String> = None;
        let serial_slot = &mut bus_serial;
        let bus_version_slot = &mut bus_version;
        let private_version_slot = &mut private_version;
        let known = &mut self.bus_version;
        let version_on_bus = self.version_on_bus;
        let bus_path = async move {
            match bus.await {
                BusState::Up(conn) => {
                    let path = timed(
                        deadline,
                        slow_after,
                        ask_on_bus(
                            conn,
                            socket_exists,
                            version_on_bus,
                            known,
                            serial_slot,
                            bus_version_slot,
                        ),
                    )
                    .await;
                    if path.state == TargetState::Unresponsive {
                        BUS_CALL_UNANSWERED.store(true, Ordering::Relaxed);
                    }
                    Some(path)
                }
                BusState::Failed(f) => Some(f.into_path(start, "the system bus")),
                BusState::Absent => None,
            }
        };
        let private_socket = self.private_socket.clone();
        let mut cached = self.private.take();
        let private_path = async {
            if !socket_exists {
                return None;
            }
            let path = timed(deadline, slow_after, async {
                let conn = match cached.as_mut() {
                    Some(c) => c,
                    None => cached.insert(
                        Pid1::connect(Route::Private, &private_socket, Path::new("")).await?,
                    ),
                };
                let v = conn.version().await?;
                let detail = format!("version {v}");
                *private_version_slot = Some(v);
                Ok::<_, client::Error>(detail)
            })
            .await;
            Some(path)
        };
        let (bus_result, private_result) = tokio::join!(bus_path, private_path);

        // Keep the connection only after a good answer: an abandoned call may leave a reply
        // in flight, and a fresh connection is cheap.
        if private_result
            .as_ref()
            .is_some_and(|p| !p.state.is_failure())
        {
            self.private = cached;
        }
        // The version as the typed answer of whichever path gave one (the private socket first).
        let version = private_version.or(bus_version);
        let mut observation = summarize(bus_result, private_result, version);
        observation.facts.bus_serial = bus_serial;
        observation
    }
}

/// The unit asked for by the bus probe: the root slice, loaded on every systemd since 205.
const PROBE_UNIT: &str = "-.slice";

/// Ask PID 1 over the bus with an ordinary method call (`Manager.GetUnit`), keeping the serial
/// of its reply in `serial`; only where [`may_read_version_on_bus`] allows it (and
/// `version_on_bus`: never for a re-ask), read `Version`
/// after it (kept in `known` for later rounds, reported in `version`).
///
/// Why an ordinary call: on a PID 1 wedged by systemd#11809 an ordinary call just gets no
/// reply, while `Properties.Get`, `Introspect` or `Peer.Ping` make it fail inside its I/O
/// callback and drop its bus connection, which blurs the very signature we look for. Even a
/// `Properties.Get` right after a reply can meet that edge (the reply may have taken PID 1's
/// last good serial), hence the margin. An error reply (`NoSuchUnit`) is an answer too: PID 1
/// sent it.
async fn ask_on_bus(
    conn: Connection,
    socket_exists: bool,
    version_on_bus: bool,
    known: &mut Option<(String, u32)>,
    serial: &mut Option<u32>,
    version: &mut Option<String>,
) -> Result<String, client::Error> {
    let s = pid1::get_unit_reply_serial(&conn, PROBE_UNIT).await?;
    *serial = Some(s);
    // A lower serial is a new PID 1 (re-executed or restarted): its version may differ.
    if known.as_ref().is_some_and(|(_, at)| s < *at) {
        *known = None;
    }
    if version_on_bus
        && may_read_version_on_bus(socket_exists, s, bus_call_unanswered(), known.is_some())
    {
        let v = Pid1::Bus(conn).version().await?;
        *known = Some((v, s));
    }
    match known.as_ref() {
        Some((v, _)) if !socket_exists => {
            *version = Some(v.clone());
            Ok(format!("reply serial {s}; version {v}"))
        }
        _ => Ok(format!("reply serial {s}")),
    }
}

/// Combine the two paths into one observation: the target is as bad as its worse path (a
/// wedged bus path is a problem even when the private socket answers); `version` is what a
/// path that answered said (typed, never read back from a path's text).
fn summarize(
    bus: Option<PathResult>,
    private: Option<PathResult>,
    version: Option<String>,
) -> Observation {
    let describe = |name: &str, p: &Option<PathResult>| match p {
        Some(p) => format!(
            "{name}: {} {}ms",
            p.state,
            super::round_ms(p.latency).as_millis()
        ),
        None => format!("{name}: absent"),
    };
    let (state, latency) = match (&bus, &private) {
        (None, None) => {
            return Observation::absent(Target::Systemd, "no system bus and no private socket");
        }
        (Some(b), None) => (b.state, b.latency),
        (None, Some(p)) => (p.state, p.latency),
        (Some(b), Some(p)) => {
            if severity(b.state) >= severity(p.state) {
                (b.state, b.latency)
            } else {
                (p.state, p.latency)
            }
        }
    };
    let mut detail = format!(
        "{}; {}",
        describe("bus", &bus),
        describe("private", &private)
    );
    if let Some(v) = &version {
        detail = format!("{detail}; version {v}");
    }
    for p in [&bus, &private].into_iter().flatten() {
        if p.state.is_failure() {
            detail = format!("{detail}; {}", p.detail);
            break;
        }
    }
    Observation {
        target: Target::Systemd,
        state,
        latency,
        detail,
        facts: Facts {
            bus,
            private,
            systemd_version: version,
            ..Facts::default()
        },
    }
}

fn severity(s: TargetState) -> u8 {
    match s {
        TargetState::Absent => 0,
        TargetState::Ok => 1,
        TargetState::Slow => 2,
        TargetState::Error => 3,
        TargetState::Unresponsive => 4,
    }
}

/// The systemd package version from the package database (`rpm` or `dpkg-query`), or None
/// when neither knows it. Bounded by `timeout`; the child is killed if abandoned.
pub async fn package_version(timeout: Duration) -> Option<String> {
    let deadline = crate::clock::deadline_in(timeout);
    let queries: [(&str, &[&str]); 2] = [
        (
            system_program::RPM,
            &["-q", "--qf", "%{VERSION}-%{RELEASE}", "systemd"],
        ),
        (
            system_program::DPKG_QUERY,
            &["-W", "-f", "${Version}", "systemd"],
        ),
    ];
    for (program, args) in queries {
        let mut cmd = tokio::process::Command::new(system_program::path_of(program));
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Ok(Ok(out)) = bounded(deadline, cmd.output()).await {
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if out.status.success() && !text.is_empty() && !text.contains(' ') {
                return Some(text);
            }
        }
    }
    None
}

impl Probe for SystemdProbe {
    fn target(&self) -> Target {
        Target::Systemd
    }

    fn uses_bus(&self) -> bool {
        true
    }

    fn observe<'a>(&'a mut self, round: &'a RoundContext<'_>) -> BoxFuture<'a, Observation> {
        self.probe(
            round.deadline,
            round.slow_after,
            round.start,
            round.bus.clone(),
        )
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(state: TargetState, detail: &str) -> PathResult {
        PathResult {
            state,
            latency: Duration::from_millis(3),
            detail: detail.into(),
        }
    }

    #[test]
    fn bus_bug_signature_is_unresponsive_with_version_from_private() {
        let o = summarize(
            Some(path(TargetState::Unresponsive, "no answer")),
            Some(path(TargetState::Ok, "version 219")),
            Some("219".into()),
        );
        assert_eq!(o.state, TargetState::Unresponsive);
        assert_eq!(o.facts.systemd_version.as_deref(), Some("219"));
        assert!(o.detail.contains("bus: unresponsive"), "{}", o.detail);
        assert!(o.detail.contains("private: ok"), "{}", o.detail);
    }

    #[test]
    fn both_ok_is_ok() {
        let o = summarize(
            Some(path(TargetState::Ok, "version 252.38-1~deb12u1")),
            Some(path(TargetState::Slow, "version 252.38-1~deb12u1")),
            Some("252.38-1~deb12u1".into()),
        );
        assert_eq!(o.state, TargetState::Slow);
        assert_eq!(o.facts.systemd_version.as_deref(), Some("252.38-1~deb12u1"));
    }

    #[test]
    fn version_over_the_bus_only_without_socket_far_from_the_edge_and_never_after_silence() {
        let far = 1_000_000;
        assert!(may_read_version_on_bus(false, far, false, false));
        // the private socket exists: it gives the version
        assert!(!may_read_version_on_bus(true, far, false, false));
        // already known for this PID 1
        assert!(!may_read_version_on_bus(false, far, false, true));
        // a bus call went unanswered once
        assert!(!may_read_version_on_bus(false, far, true, false));
        // within the margin of 2^32, at every value up to the last serial
        for left in 0..=BUS_VERSION_MARGIN {
            if left % 65_536 == 0 || left < 64 {
                assert!(!may_read_version_on_bus(
                    false,
                    u32::MAX - left,
                    false,
                    false
                ));
            }
        }
        assert!(may_read_version_on_bus(
            false,
            u32::MAX - BUS_VERSION_MARGIN - 1,
            false,
            false
        ));
    }

    #[test]
    fn nothing_is_absent() {
        assert_eq!(summarize(None, None, None).state, TargetState::Absent);
    }
}
