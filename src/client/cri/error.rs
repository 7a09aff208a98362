//! What can go wrong talking CRI, as types (callers match on them, never on text).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// One step of a relist, named as in CRI (`Connect` is dialling the socket).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    Connect,
    Version,
    ListPodSandbox,
    ListContainers,
    ContainerStatus,
}

impl Call {
    /// The CRI method name (`Connect` for dialling).
    pub fn as_str(self) -> &'static str {
        match self {
            Call::Connect => "Connect",
            Call::Version => "Version",
            Call::ListPodSandbox => "ListPodSandbox",
            Call::ListContainers => "ListContainers",
            Call::ContainerStatus => "ContainerStatus",
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a relist gave no facts.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// Nothing at the socket path: no runtime installed there (the target is `absent`).
    #[error("no CRI socket at {}", path.display())]
    NotInstalled { path: PathBuf },
    /// The socket exists but nobody accepts on it (runtime stopped, stale socket file).
    #[error("CRI socket {} refused the connection", path.display())]
    Refused {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Dialling failed otherwise (permission, not a socket, ...).
    #[error("cannot connect to CRI socket {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `call` was still unanswered when the deadline for the whole relist passed; it was
    /// abandoned. `elapsed` is the time since the relist started.
    #[error(
        "CRI {call} did not answer within the {deadline:?} deadline (abandoned after {elapsed:?})"
    )]
    Timeout {
        call: Call,
        deadline: Duration,
        elapsed: Duration,
    },
    /// The runtime answered `call` with a gRPC error status (e.g. `Unimplemented`: it does not
    /// serve CRI v1), or the HTTP/2 exchange broke down mid-call.
    #[error("CRI {call} failed: {code:?}: {message}")]
    Rpc {
        call: Call,
        code: tonic::Code,
        message: String,
    },
    /// The runtime answered `call` with a reply that cannot be true (context in `detail`).
    #[error("CRI {call} answered nonsense: {detail}")]
    Protocol { call: Call, detail: String },
}

impl CriError {
    /// The step the error happened in (`Connect` for the dialling errors).
    #[cfg(test)]
    pub fn call(&self) -> Call {
        match self {
            CriError::NotInstalled { .. } | CriError::Refused { .. } | CriError::Connect { .. } => {
                Call::Connect
            }
            CriError::Timeout { call, .. }
            | CriError::Rpc { call, .. }
            | CriError::Protocol { call, .. } => *call,
        }
    }

    pub(crate) fn rpc(call: Call, status: tonic::Status) -> CriError {
        CriError::Rpc {
            call,
            code: status.code(),
            message: status.message().to_string(),
        }
    }
}
