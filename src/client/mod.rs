//! Clients of what pleg-guard talks to: the system bus ([`bus`]), PID 1 on both paths
//! ([`pid1`], over [`p2p`] or the bus), logind ([`logind`]), the docker engine ([`docker`],
//! also a container's log), a CRI v1 runtime such as containerd ([`cri`], with its own typed
//! errors), kubelet's healthz ([`kubelet`]) and the journal ([`journal`]); kubelet's log
//! reaches both log readers in chunks joined by [`log_lines`]. Probes and actions both stand
//! on this layer and import neither each other.
//!
//! Every client reports failures as one [`Error`] whose [`ErrorKind`] is decided by the type
//! of what failed — an `io::ErrorKind`, a zbus or bollard error variant — never by its text.
//! Its `Display` is exactly the underlying error's, so messages read as before.
//!
//! Fixture tests beside each client (`*/tests` modules, `fixtures/`) run without root: real
//! D-Bus replies captured from PID 1 and from logind, docker JSON served by a fake engine,
//! healthz answers from a fake kubelet, real `journalctl` output captured from journald.

pub mod authority;
pub mod bus;
pub mod cri;
pub mod docker;
pub mod docker_transport;
pub mod journal;
pub mod kubelet;
pub mod kubelet_log;
pub mod log_lines;
pub mod logind;
pub mod p2p;
pub mod pid1;

#[cfg(test)]
mod dbus_fixture_tests;
#[cfg(test)]
mod docker_mock_tests;

use std::fmt;

/// What kind of failure a client call ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No answer in time.
    Timeout,
    /// Nobody accepts on the socket (the service is stopped; a stale socket file).
    Refused,
    /// The peer closed the connection instead of answering (how PID 1 answers `Reexecute`).
    Disconnected,
    /// The service is not there: no socket, or no owner of its bus name.
    NotInstalled,
    /// The peer answered something this client cannot read.
    Protocol,
    /// Any other failure (an error reply, a permission problem, ...).
    Failed,
}

/// A client call's failure: its kind, and the underlying error (shown as is).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl Error {
    /// An error of `kind` caused by `source`.
    pub fn new(
        kind: ErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error {
            kind,
            source: source.into(),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether the peer closed the connection instead of answering.
    pub fn is_disconnect(&self) -> bool {
        self.kind == ErrorKind::Disconnected
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// The kind of an I/O failure, by its `io::ErrorKind`; `None` when it says nothing more
/// specific than "failed".
pub fn io_kind(e: &std::io::Error) -> Option<ErrorKind> {
    use std::io::ErrorKind as Io;
    match e.kind() {
        Io::TimedOut | Io::WouldBlock => Some(ErrorKind::Timeout),
        Io::ConnectionRefused => Some(ErrorKind::Refused),
        Io::NotFound => Some(ErrorKind::NotInstalled),
        Io::UnexpectedEof | Io::ConnectionReset | Io::BrokenPipe | Io::ConnectionAborted => {
            Some(ErrorKind::Disconnected)
        }
        Io::InvalidData => Some(ErrorKind::Protocol),
        _ => None,
    }
}

/// The kind of the first I/O error in `e`'s chain of sources (by type: a downcast), if any.
pub fn io_kind_in_chain(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io_kind(io).unwrap_or(ErrorKind::Failed));
        }
        next = err.source();
    }
    None
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(io_kind(&e).unwrap_or(ErrorKind::Failed), e)
    }
}

impl From<zbus::Error> for Error {
    fn from(e: zbus::Error) -> Self {
        Error::new(bus::kind_of(&e), e)
    }
}

impl From<zbus::fdo::Error> for Error {
    fn from(e: zbus::fdo::Error) -> Self {
        Error::from(zbus::Error::FDO(Box::new(e)))
    }
}

impl From<p2p::P2pError> for Error {
    fn from(e: p2p::P2pError) -> Self {
        Error::new(e.kind(), e)
    }
}

impl From<bollard::errors::Error> for Error {
    fn from(e: bollard::errors::Error) -> Self {
        // An answer past its cap says so plainly, whatever layer the read failed in.
        match docker_transport::too_large(&e) {
            Some(t) => Error::new(ErrorKind::Protocol, t),
            None => Error::new(docker::kind_of(&e), e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_told_by_their_kind() {
        use std::io::ErrorKind as Io;
        for (io, kind) in [
            (Io::TimedOut, ErrorKind::Timeout),
            (Io::ConnectionRefused, ErrorKind::Refused),
            (Io::NotFound, ErrorKind::NotInstalled),
            (Io::UnexpectedEof, ErrorKind::Disconnected),
            (Io::ConnectionReset, ErrorKind::Disconnected),
            (Io::BrokenPipe, ErrorKind::Disconnected),
            (Io::InvalidData, ErrorKind::Protocol),
            (Io::PermissionDenied, ErrorKind::Failed),
        ] {
            assert_eq!(Error::from(std::io::Error::from(io)).kind(), kind, "{io:?}");
        }
    }

    #[test]
    fn the_text_is_the_underlying_errors() {
        let e = Error::from(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "refused, timed out and disconnected",
        ));
        assert_eq!(e.to_string(), "refused, timed out and disconnected");
        assert_eq!(e.kind(), ErrorKind::Failed);
    }

    #[test]
    fn an_io_error_deep_in_a_chain_is_found_by_type() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let outer = Outer(std::io::ErrorKind::ConnectionRefused.into());
        assert_eq!(io_kind_in_chain(&outer), Some(ErrorKind::Refused));
        let plain = std::fmt::Error;
        assert_eq!(io_kind_in_chain(&plain), None);
    }
}
