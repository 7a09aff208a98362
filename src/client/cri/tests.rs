//! The client against a fake CRI runtime: a tonic server on a unix socket in a temporary
//! directory, answering normally, hanging on one call, or sending hostile shapes. No root.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use super::proto::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use super::proto::{self, ContainerStatusRequest};
use super::*;

// ------------------------------------------------------------------------------------------------
// the fake runtime
// ------------------------------------------------------------------------------------------------

#[derive(Default)]
struct Counters {
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// handlers whose future was dropped while hanging (the client abandoned the call)
    abandoned: AtomicUsize,
}

#[derive(Clone)]
struct Fake {
    version: proto::VersionResponse,
    sandboxes: Vec<proto::PodSandbox>,
    containers: Vec<proto::Container>,
    /// None: ContainerStatus answers NotFound
    status: Option<proto::ContainerStatusResponse>,
    hang_on: Option<Call>,
    counters: Arc<Counters>,
}

fn sandbox(id: &str, name: &str, state: i32) -> proto::PodSandbox {
    proto::PodSandbox {
        id: id.into(),
        metadata: Some(proto::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{id}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        state,
        ..Default::default()
    }
}

fn container(id: &str, sandbox: &str, name: &str, state: i32) -> proto::Container {
    proto::Container {
        id: id.into(),
        pod_sandbox_id: sandbox.into(),
        metadata: Some(proto::ContainerMetadata {
            name: name.into(),
            attempt: 1,
        }),
        state,
        ..Default::default()
    }
}

fn status_of(id: &str, state: i32) -> proto::ContainerStatusResponse {
    proto::ContainerStatusResponse {
        status: Some(proto::ContainerStatus {
            id: id.into(),
            state,
            reason: String::new(),
            ..Default::default()
        }),
    }
}

impl Fake {
    /// A node with one ready pod and one running container.
    fn healthy() -> Fake {
        Fake {
            version: proto::VersionResponse {
                version: "0.1.0".into(),
                runtime_name: "containerd".into(),
                runtime_version: "1.6.20~ds1".into(),
                runtime_api_version: "v1".into(),
            },
            sandboxes: vec![sandbox("sb1", "web", 0)],
            containers: vec![container("c1", "sb1", "nginx", 1)],
            status: Some(status_of("c1", 1)),
            hang_on: None,
            counters: Arc::default(),
        }
    }

    async fn answer<T>(&self, call: Call, reply: Result<T, Status>) -> Result<Response<T>, Status> {
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::SeqCst);
        let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight.fetch_max(now, Ordering::SeqCst);
        struct Leave<'a>(&'a Counters, bool);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
                if self.1 {
                    self.0.abandoned.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let hang = self.hang_on == Some(call);
        let _leave = Leave(c, hang);
        if hang {
            std::future::pending::<()>().await;
        }
        // let a second call overlap if the client ever sent two at once
        tokio::time::sleep(Duration::from_millis(5)).await;
        reply.map(Response::new)
    }
}

#[tonic::async_trait]
impl RuntimeService for Fake {
    async fn version(
        &self,
        _: Request<proto::VersionRequest>,
    ) -> Result<Response<proto::VersionResponse>, Status> {
        self.answer(Call::Version, Ok(self.version.clone())).await
    }
    async fn list_pod_sandbox(
        &self,
        _: Request<proto::ListPodSandboxRequest>,
    ) -> Result<Response<proto::ListPodSandboxResponse>, Status> {
        let r = proto::ListPodSandboxResponse {
            items: self.sandboxes.clone(),
        };
        self.answer(Call::ListPodSandbox, Ok(r)).await
    }
    async fn list_containers(
        &self,
        _: Request<proto::ListContainersRequest>,
    ) -> Result<Response<proto::ListContainersResponse>, Status> {
        let r = proto::ListContainersResponse {
            containers: self.containers.clone(),
        };
        self.answer(Call::ListContainers, Ok(r)).await
    }
    async fn container_status(
        &self,
        req: Request<ContainerStatusRequest>,
    ) -> Result<Response<proto::ContainerStatusResponse>, Status> {
        let id = req.into_inner().container_id;
        let r = self
            .status
            .clone()
            .ok_or_else(|| Status::not_found(format!("container {id} not found")));
        self.answer(Call::ContainerStatus, r).await
    }
}

/// A fake runtime serving on a fresh unix socket; dropping it stops the server and removes
/// the directory.
struct Served {
    socket: PathBuf,
    dir: PathBuf,
    counters: Arc<Counters>,
    server: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pleg-guard-cri-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn serve(fake: Fake) -> Served {
    let dir = temp_dir();
    let socket = dir.join("cri.sock");
    let listener = UnixListener::bind(&socket).expect("bind fake CRI socket");
    let counters = fake.counters.clone();
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::new(fake))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    });
    Served {
        socket,
        dir,
        counters,
        server,
    }
}

const DEADLINE: Duration = Duration::from_secs(2);

// ------------------------------------------------------------------------------------------------
// normal replies
// ------------------------------------------------------------------------------------------------

#[tokio::test]
async fn fake_healthy_runtime_gives_version_pods_containers_and_one_status() {
    let served = serve(Fake::healthy());
    let r = relist(&served.socket, DEADLINE).await.expect("relist");
    assert_eq!(r.version.runtime_name, "containerd");
    assert_eq!(r.version.runtime_version, "1.6.20~ds1");
    assert_eq!(r.version.runtime_api_version, "v1");
    assert_eq!(
        r.sandboxes,
        vec![Sandbox {
            id: "sb1".into(),
            name: Some("web".into()),
            namespace: Some("default".into()),
            attempt: 0,
            state: SandboxState::Ready,
        }]
    );
    assert_eq!(r.sandboxes[0].display_name(), "default/web");
    assert_eq!(
        r.containers,
        vec![Container {
            id: "c1".into(),
            sandbox_id: "sb1".into(),
            name: Some("nginx".into()),
            attempt: 1,
            state: ContainerState::Running,
        }]
    );
    assert_eq!(
        r.status_check,
        Some(ContainerStatusCheck::Found {
            id: "c1".into(),
            state: ContainerState::Running,
            reason: None
        })
    );
    assert_eq!(r.unknown_containers().count(), 0);
    assert_eq!(r.unknown_sandboxes().count(), 0);
    assert!(r.timings.container_status.is_some());
    assert!(r.timings.total < DEADLINE);
    assert_eq!(served.counters.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn fake_calls_are_made_one_at_a_time() {
    let served = serve(Fake::healthy());
    for _ in 0..3 {
        relist(&served.socket, DEADLINE).await.expect("relist");
    }
    assert_eq!(served.counters.calls.load(Ordering::SeqCst), 12);
    assert_eq!(served.counters.max_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn fake_unknown_container_is_listed_and_is_the_one_status_asks_about() {
    let mut fake = Fake::healthy();
    fake.containers = vec![
        container("c1", "sb1", "nginx", 1),
        container("c2", "sb1", "sidecar", 3),
    ];
    fake.status = Some(status_of("c2", 3));
    let served = serve(fake);
    let r = relist(&served.socket, DEADLINE).await.expect("relist");
    let unknown: Vec<String> = r
        .unknown_containers()
        .map(Container::display_name)
        .collect();
    assert_eq!(unknown, vec!["sidecar".to_string()]);
    assert!(matches!(
        r.status_check,
        Some(ContainerStatusCheck::Found { ref id, state: ContainerState::Unknown, .. }) if id == "c2"
    ));
}

#[tokio::test]
async fn fake_container_gone_before_its_status_is_not_an_error() {
    let mut fake = Fake::healthy();
    fake.status = None;
    let served = serve(fake);
    let r = relist(&served.socket, DEADLINE).await.expect("relist");
    assert_eq!(
        r.status_check,
        Some(ContainerStatusCheck::Gone { id: "c1".into() })
    );
}

// ------------------------------------------------------------------------------------------------
// hung replies
// ------------------------------------------------------------------------------------------------

async fn hung_on(call: Call) {
    let mut fake = Fake::healthy();
    fake.hang_on = Some(call);
    let served = serve(fake);
    let deadline = Duration::from_millis(300);
    let t = Instant::now();
    let err = relist(&served.socket, deadline)
        .await
        .expect_err("must time out");
    let took = t.elapsed();
    match err {
        CriError::Timeout {
            call: c,
            deadline: d,
            ..
        } => {
            assert_eq!(c, call);
            assert_eq!(d, deadline);
        }
        other => panic!("expected Timeout on {call}, got {other:?}"),
    }
    assert!(
        took < deadline + Duration::from_millis(200),
        "relist took {took:?} for a {deadline:?} deadline"
    );
    // the abandoned call's stream is reset: the server drops the hanging handler
    let t = Instant::now();
    while served.counters.abandoned.load(Ordering::SeqCst) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the server still runs the abandoned {call} handler"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(served.counters.in_flight.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn fake_hung_version_times_out_within_the_deadline_and_is_abandoned() {
    hung_on(Call::Version).await;
}

#[tokio::test]
async fn fake_hung_list_containers_times_out_within_the_deadline_and_is_abandoned() {
    hung_on(Call::ListContainers).await;
}

#[tokio::test]
async fn fake_hung_container_status_times_out_within_the_deadline_and_is_abandoned() {
    hung_on(Call::ContainerStatus).await;
}

#[tokio::test]
async fn fake_socket_that_never_accepts_times_out_or_is_refused() {
    // a listener that is bound but never accepted: the kernel queues the connection, the
    // HTTP/2 exchange never starts
    let dir = temp_dir();
    let socket = dir.join("cri.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let t = Instant::now();
    let err = relist(&socket, Duration::from_millis(300))
        .await
        .expect_err("no answer");
    assert!(
        matches!(
            err,
            CriError::Timeout {
                call: Call::Version | Call::Connect,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(t.elapsed() < Duration::from_millis(500));
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------------------------------
// no runtime
// ------------------------------------------------------------------------------------------------

#[tokio::test]
async fn missing_socket_is_not_installed() {
    let dir = temp_dir();
    let socket = dir.join("absent.sock");
    let err = relist(&socket, DEADLINE).await.expect_err("no socket");
    assert!(
        matches!(err, CriError::NotInstalled { ref path } if *path == socket),
        "{err:?}"
    );
    assert_eq!(err.call(), Call::Connect);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn stale_socket_file_is_refused() {
    let dir = temp_dir();
    let socket = dir.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    let err = relist(&socket, DEADLINE).await.expect_err("nobody listens");
    assert!(matches!(err, CriError::Refused { .. }), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------------------------------
// hostile shapes
// ------------------------------------------------------------------------------------------------

#[tokio::test]
async fn fake_empty_lists_are_a_node_without_pods() {
    let mut fake = Fake::healthy();
    fake.sandboxes.clear();
    fake.containers.clear();
    let served = serve(fake);
    let r = relist(&served.socket, DEADLINE).await.expect("relist");
    assert!(r.sandboxes.is_empty() && r.containers.is_empty());
    assert_eq!(r.status_check, None);
    assert_eq!(r.timings.container_status, None);
    assert_eq!(served.counters.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn fake_unrecognized_enum_values_count_as_unknown() {
    let mut fake = Fake::healthy();
    fake.sandboxes = vec![sandbox("sb1", "web", 0), sandbox("sb2", "odd", 7)];
    fake.containers = vec![container("c1", "sb1", "nginx", 99)];
    fake.status = Some(status_of("c1", 99));
    let served = serve(fake);
    let r = relist(&served.socket, DEADLINE).await.expect("relist");
    let sb: Vec<_> = r.unknown_sandboxes().map(|s| s.state).collect();
    assert_eq!(sb, vec![SandboxState::Unrecognized(7)]);
    let c: Vec<_> = r.unknown_containers().map(|c| c.state).collect();
    assert_eq!(c, vec![ContainerState::Unrecognized(99)]);
    assert_eq!(
        ContainerState::from_wire(-1),
        ContainerState::Unrecognized(-1)
    );
}

#[tokio::test]
async fn fake_missing_metadata_names_by_id() {
    let mut fake = Fake::healthy();
    fake.sandboxes = vec![proto::PodSandbox {
        id: "sb1".into(),
        metadata: None,
        state: 1,
        ..Default::default()
    }];
    fake.containers = vec![proto::Container {
        id: "c1".into(),
        metadata: None,
        state: 3,
        ..Default::default()
    }];
    let served = serve(fake);
    let r = relist(&served.socket, DEADLINE).await.expect("relist");
    assert_eq!(r.sandboxes[0].name, None);
    assert_eq!(r.sandboxes[0].display_name(), "sb1");
    assert_eq!(r.sandboxes[0].state, SandboxState::NotReady);
    assert_eq!(r.containers[0].display_name(), "c1");
    assert_eq!(r.containers[0].sandbox_id, "");
}

#[tokio::test]
async fn fake_nonsense_replies_are_protocol_errors() {
    let mut fake = Fake::healthy();
    fake.version.runtime_name.clear();
    let served = serve(fake);
    let err = relist(&served.socket, DEADLINE).await.expect_err("no name");
    assert!(
        matches!(
            err,
            CriError::Protocol {
                call: Call::Version,
                ..
            }
        ),
        "{err:?}"
    );

    let mut fake = Fake::healthy();
    fake.containers = vec![container("", "sb1", "x", 1)];
    let served = serve(fake);
    let err = relist(&served.socket, DEADLINE).await.expect_err("no id");
    assert!(
        matches!(
            err,
            CriError::Protocol {
                call: Call::ListContainers,
                ..
            }
        ),
        "{err:?}"
    );

    let mut fake = Fake::healthy();
    fake.status = Some(proto::ContainerStatusResponse { status: None });
    let served = serve(fake);
    let err = relist(&served.socket, DEADLINE)
        .await
        .expect_err("no status");
    assert!(
        matches!(
            err,
            CriError::Protocol {
                call: Call::ContainerStatus,
                ..
            }
        ),
        "{err:?}"
    );

    let mut fake = Fake::healthy();
    fake.status = Some(status_of("someone-else", 1));
    let served = serve(fake);
    let err = relist(&served.socket, DEADLINE)
        .await
        .expect_err("wrong id");
    assert!(
        matches!(
            err,
            CriError::Protocol {
                call: Call::ContainerStatus,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn fake_runtime_without_cri_v1_is_an_rpc_error() {
    // a server with no RuntimeService at all answers Unimplemented
    let dir = temp_dir();
    let socket = dir.join("cri.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::new(Bare))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    });
    let err = relist(&socket, DEADLINE).await.expect_err("unimplemented");
    assert!(
        matches!(
            err,
            CriError::Rpc {
                call: Call::Version,
                code: tonic::Code::Unimplemented,
                ..
            }
        ),
        "{err:?}"
    );
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A RuntimeService that implements nothing (every call: Unimplemented).
struct Bare;
#[tonic::async_trait]
impl RuntimeService for Bare {}

#[tokio::test]
async fn fake_not_grpc_at_all_is_an_error_not_a_hang() {
    // something that accepts and closes at once
    let dir = temp_dir();
    let socket = dir.join("cri.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let server = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    let t = Instant::now();
    let err = relist(&socket, DEADLINE).await.expect_err("closed");
    assert!(!matches!(err, CriError::Timeout { .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(1));
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
