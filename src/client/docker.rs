//! The docker engine on its unix socket: connect (agreeing on an API version), the relist
//! kubelet's PLEG does (`docker ps -a`, then an inspect), which containers are dead, the
//! calls the actions make (remove, restart), and the newest line of a container's log that
//! holds a marker (kubelet's own log, when kubelet runs as a container). Failures are [`super::Error`]s classified by
//! bollard's error variant (and the I/O error under it), never by text.
//!
//! bollard's own timeout covers only the response headers, so callers bound each whole call
//! with their deadline; an abandoned call drops the client and its connection. What an answer
//! may take is capped by the transport ([`super::docker_transport`]): a listing past 6 MiB is
//! the error "docker listing larger than 6 MiB: refused", not a buffer that grows until the
//! deadline.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerStateStatusEnum, ContainerSummary, ContainerSummaryStateEnum};
use bollard::query_parameters::{
    ListContainersOptions, LogsOptions, RemoveContainerOptions, RestartContainerOptions,
};
use futures_util::StreamExt;

use super::log_lines::{LastMatch, LineAssembler, LineMatch};
use super::{Error, ErrorKind};
use crate::target::ContainerRef;

/// What one relist saw.
#[derive(Debug, Default)]
pub struct Listing {
    /// Containers listed (all states).
    pub total: usize,
    /// Those whose inspected state is `dead`.
    pub dead: Vec<ContainerRef>,
}

/// Connect to the engine at `socket` and agree on an API version (`_ping` tells the engine's;
/// an old engine refuses a client that asks for a newer one). Every answer is read through
/// [`super::docker_transport`], which caps its size.
pub async fn connect(socket: &Path) -> Result<Docker, Error> {
    let docker = super::docker_transport::client(socket, 120)?;
    Ok(docker.negotiate_version().await?)
}

/// `docker ps -a`.
pub async fn list_all(docker: &Docker) -> Result<Vec<ContainerSummary>, Error> {
    Ok(docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            ..Default::default()
        }))
        .await?)
}

/// `docker ps -a`, then inspect the newest container (as PLEG's relist does), noting the dead.
pub async fn relist(docker: &Docker) -> Result<Listing, Error> {
    let containers = list_all(docker).await?;
    if let Some(id) = containers.first().and_then(|c| c.id.as_deref()) {
        docker.inspect_container(id, None).await?;
    }
    let mut dead = Vec::new();
    for c in containers.iter().filter(|c| may_be_dead(c)) {
        if let Some(id) = c.id.as_deref() {
            if is_dead(docker, id).await? {
                dead.push(container_ref(c));
            }
        }
    }
    Ok(Listing {
        total: containers.len(),
        dead,
    })
}

/// Whether a listed container may be dead. The listing is not enough either way: after a
/// failed removal docker (20.10 at least) keeps listing the container as `removing`
/// ("Removal In Progress") while its inspected state is `dead`, so both are candidates and
/// [`is_dead`] decides.
pub fn may_be_dead(c: &ContainerSummary) -> bool {
    matches!(
        c.state,
        Some(ContainerSummaryStateEnum::DEAD) | Some(ContainerSummaryStateEnum::REMOVING)
    )
}

/// Whether the container's inspected state is `dead`.
pub async fn is_dead(docker: &Docker, id: &str) -> Result<bool, Error> {
    let info = docker.inspect_container(id, None).await?;
    Ok(info.state.as_ref().and_then(|s| s.status) == Some(ContainerStateStatusEnum::DEAD))
}

/// Remove a container by force (its volumes stay).
pub async fn remove_forced(docker: &Docker, id: &str) -> Result<(), Error> {
    let options = RemoveContainerOptions {
        force: true,
        v: false,
        link: false,
    };
    Ok(docker.remove_container(id, Some(options)).await?)
}

/// Restart a container, giving it `grace_secs` to stop.
pub async fn restart(docker: &Docker, name: &str, grace_secs: i32) -> Result<(), Error> {
    Ok(docker
        .restart_container(
            name,
            Some(RestartContainerOptions {
                t: Some(grace_secs),
                ..Default::default()
            }),
        )
        .await?)
}

/// The newest line of container `name`'s log (stdout and stderr) written since `since` that
/// holds `marker` (its first 400 characters).
pub async fn last_log_line(
    docker: &Docker,
    name: &str,
    since: SystemTime,
    matches: LineMatch,
) -> Result<Option<String>, Error> {
    // docker's `since` is whole seconds: round up, so that the last lines of a wedged instance
    // written in the second kubelet was restarted do not count against the new one.
    let since_s = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
    // ... and stop at the present: after the clock went back, lines written before the jump
    // are stamped "in the future" and must not count as fresh (0 = no limit, past 2038).
    let until_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() + 1);
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        since: i32::try_from(since_s).unwrap_or(i32::MAX),
        until: i32::try_from(until_s).unwrap_or(0),
        tail: "all".to_owned(),
        ..Default::default()
    };
    let mut stream = docker.logs(name, Some(options));
    let mut scan = LogScan::new(matches);
    while let Some(chunk) = stream.next().await {
        scan.push(&chunk?);
    }
    Ok(scan.finish())
}

/// Finds the last line holding a marker in docker's log stream, whose frames split lines
/// anywhere: each stream (stdout, stderr, a TTY's console) is joined into whole lines on its
/// own.
pub struct LogScan {
    streams: [LineAssembler; 4],
    last: LastMatch,
}

impl LogScan {
    /// Nothing read yet.
    pub fn new(matches: LineMatch) -> Self {
        LogScan {
            streams: Default::default(),
            last: LastMatch::new(matches),
        }
    }

    /// Feed one frame.
    pub fn push(&mut self, chunk: &LogOutput) {
        let (i, bytes) = match chunk {
            LogOutput::StdOut { message } => (0, message),
            LogOutput::StdErr { message } => (1, message),
            LogOutput::Console { message } => (2, message),
            LogOutput::StdIn { message } => (3, message),
        };
        let last = &mut self.last;
        self.streams[i].push(bytes, |line| last.note(line));
    }

    /// The last matching line, counting lines the stream ended in the middle of.
    pub fn finish(mut self) -> Option<String> {
        let last = &mut self.last;
        for s in &mut self.streams {
            s.finish(|line| last.note(line));
        }
        self.last.into_last()
    }
}

/// Short id and name of a listed container.
pub fn container_ref(c: &ContainerSummary) -> ContainerRef {
    let id = c.id.as_deref().unwrap_or("?");
    let name = c
        .names
        .as_ref()
        .and_then(|n| n.first())
        .map(|n| n.trim_start_matches('/').to_owned())
        .unwrap_or_default();
    ContainerRef {
        id: id.get(..12).unwrap_or(id).to_owned(),
        name,
    }
}

/// The kind of a bollard error, by its variant (and the I/O error under a transport error).
pub fn kind_of(e: &BollardError) -> ErrorKind {
    match e {
        BollardError::RequestTimeoutError => ErrorKind::Timeout,
        BollardError::SocketNotFoundError(_) => ErrorKind::NotInstalled,
        BollardError::IOError { err } => super::io_kind(err).unwrap_or(ErrorKind::Failed),
        BollardError::JsonDataError { .. }
        | BollardError::JsonSerdeError { .. }
        | BollardError::StrParseError { .. }
        | BollardError::APIVersionParseError {}
        | BollardError::HttpHeaderNotFoundError(_)
        | BollardError::HttpHeaderToStrError { .. } => ErrorKind::Protocol,
        BollardError::HyperResponseError { err } => hyper_kind(err),
        BollardError::HyperLegacyError { err } => {
            let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
            while let Some(e) = next {
                if let Some(h) = e.downcast_ref::<hyper::Error>() {
                    return hyper_kind(h);
                }
                if let Some(io) = e.downcast_ref::<std::io::Error>() {
                    return super::io_kind(io).unwrap_or(ErrorKind::Failed);
                }
                next = e.source();
            }
            ErrorKind::Failed
        }
        _ => ErrorKind::Failed,
    }
}

/// The kind of an HTTP failure: the I/O error under it, else what hyper says it was.
fn hyper_kind(err: &hyper::Error) -> ErrorKind {
    match super::io_kind_in_chain(err) {
        Some(k) => k,
        None if err.is_incomplete_message() || err.is_closed() => ErrorKind::Disconnected,
        None if err.is_parse() || err.is_parse_status() => ErrorKind::Protocol,
        None if err.is_timeout() => ErrorKind::Timeout,
        None => ErrorKind::Failed,
    }
}
