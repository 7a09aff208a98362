//! The CRI client: talks CRI v1 (the Kubernetes Container Runtime Interface) to a container
//! runtime such as containerd over its unix socket, the way kubelet's PLEG does when it relists.
//!
//! [`relist`] connects, asks `Version`, then makes PLEG's calls — `ListPodSandbox`,
//! `ListContainers` and one `ContainerStatus` — one at a time, the whole bounded by the deadline
//! the caller gives. A call still unanswered at the deadline is abandoned: its future and the
//! connection are dropped (the HTTP/2 stream and the socket are closed), nothing is left
//! running. The answer is typed facts ([`Relist`]) or a typed error ([`CriError`]).
//!
//! Layout: [`proto`] is the prost/tonic code generated from `proto/cri-api-v1.proto` (committed;
//! `proto/regen.sh` regenerates it, so building needs no `protoc`), `facts` turns replies into
//! facts (pure), `channel` is the HTTP/2 connection over the unix socket, `relist` the sequence.

mod channel;
mod error;
mod facts;
mod relist;

/// Code generated from `proto/cri-api-v1.proto` by `proto/regen.sh` (do not edit).
#[allow(
    clippy::all,
    clippy::pedantic,
    dead_code,
    unreachable_pub,
    missing_docs
)]
pub mod proto {
    include!("generated.rs");
}

// The channel is what the bed tests (tests/containerd.rs) make pods and containers with.
#[allow(unused_imports)]
pub use channel::{CriChannel, connect};
pub use error::{Call, CriError};
pub use facts::Relist;
#[cfg(test)]
pub use facts::{
    Container, ContainerState, ContainerStatusCheck, RuntimeVersion, Sandbox, SandboxState, Timings,
};
pub use relist::relist;

#[cfg(test)]
mod tests;
