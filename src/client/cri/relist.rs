//! The relist sequence: Version, ListPodSandbox, ListContainers, one ContainerStatus, one call
//! at a time, all under one deadline.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::channel::connect;
use super::error::{Call, CriError};
use super::facts::{self, ContainerStatusCheck, Relist, Timings};
use super::proto;

/// Does what kubelet's PLEG does against the CRI runtime at `socket`, the whole bounded by
/// `deadline`. Calls are made one after the other (never two in flight); the one unanswered at
/// the deadline is abandoned with the connection and reported as [`CriError::Timeout`].
pub async fn relist(socket: &Path, deadline: Duration) -> Result<Relist, CriError> {
    let start = Instant::now();
    let until = start + deadline;
    let bounded = |call: Call| Step {
        call,
        until,
        start,
        deadline,
    };

    let t = Instant::now();
    let channel = bounded(Call::Connect).run(connect(socket)).await??;
    let connect_time = t.elapsed();
    let mut client = channel.runtime_service();

    let t = Instant::now();
    let reply = bounded(Call::Version)
        .rpc(client.version(proto::VersionRequest {
            version: "v1".into(),
        }))
        .await?;
    let version = facts::runtime_version(reply).map_err(|detail| CriError::Protocol {
        call: Call::Version,
        detail,
    })?;
    let version_time = t.elapsed();

    let t = Instant::now();
    let reply = bounded(Call::ListPodSandbox)
        .rpc(client.list_pod_sandbox(proto::ListPodSandboxRequest { filter: None }))
        .await?;
    let sandboxes = facts::sandboxes(reply).map_err(|detail| CriError::Protocol {
        call: Call::ListPodSandbox,
        detail,
    })?;
    let list_pod_sandbox_time = t.elapsed();

    let t = Instant::now();
    let reply = bounded(Call::ListContainers)
        .rpc(client.list_containers(proto::ListContainersRequest { filter: None }))
        .await?;
    let containers = facts::containers(reply).map_err(|detail| CriError::Protocol {
        call: Call::ListContainers,
        detail,
    })?;
    let list_containers_time = t.elapsed();

    let (status_check, container_status_time) = match facts::container_to_check(&containers) {
        None => (None, None),
        Some(c) => {
            let id = c.id.clone();
            let t = Instant::now();
            let reply = bounded(Call::ContainerStatus)
                .run(client.container_status(proto::ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                }))
                .await?;
            let check = match reply {
                Ok(r) => facts::status_check(&id, r.into_inner()).map_err(|detail| {
                    CriError::Protocol {
                        call: Call::ContainerStatus,
                        detail,
                    }
                })?,
                Err(s) if s.code() == tonic::Code::NotFound => ContainerStatusCheck::Gone { id },
                Err(s) => return Err(CriError::rpc(Call::ContainerStatus, s)),
            };
            (Some(check), Some(t.elapsed()))
        }
    };

    Ok(Relist {
        version,
        sandboxes,
        containers,
        status_check,
        timings: Timings {
            connect: connect_time,
            version: version_time,
            list_pod_sandbox: list_pod_sandbox_time,
            list_containers: list_containers_time,
            container_status: container_status_time,
            total: start.elapsed(),
        },
    })
}

/// One step under the relist's deadline.
#[derive(Clone, Copy)]
struct Step {
    call: Call,
    until: Instant,
    start: Instant,
    deadline: Duration,
}

impl Step {
    /// Runs `fut` until the deadline; past it `fut` is dropped (abandoned) and this is Timeout.
    async fn run<T>(self, fut: impl Future<Output = T>) -> Result<T, CriError> {
        tokio::time::timeout_at(self.until, fut)
            .await
            .map_err(|_| CriError::Timeout {
                call: self.call,
                deadline: self.deadline,
                elapsed: self.start.elapsed(),
            })
    }

    /// [`run`](Self::run) for a unary gRPC call: a status reply becomes [`CriError::Rpc`].
    async fn rpc<T>(
        self,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CriError> {
        self.run(fut)
            .await?
            .map(tonic::Response::into_inner)
            .map_err(|s| CriError::rpc(self.call, s))
    }
}
