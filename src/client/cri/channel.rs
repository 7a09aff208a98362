//! One HTTP/2 connection to a CRI runtime over its unix socket, usable by the generated tonic
//! client. No tonic transport, tower stack or connection pool: pleg-guard dials, makes its few
//! calls and drops the connection; dropping [`CriChannel`] aborts the connection task, so a
//! runtime that stopped answering keeps nothing of ours alive.

use std::future::Future;
use std::io::ErrorKind;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use super::error::CriError;
use super::proto::runtime_service_client::RuntimeServiceClient;

/// gRPC needs an origin for `:scheme`/`:authority`; over a unix socket any will do.
const ORIGIN: &str = "http://localhost";

/// A connected HTTP/2 channel; cheap to clone (all clones share the one connection).
#[derive(Clone)]
pub struct CriChannel {
    send: http2::SendRequest<tonic::body::Body>,
    _connection: Arc<ConnectionTask>,
}

/// The task that drives the connection; aborted when the last [`CriChannel`] goes.
struct ConnectionTask(JoinHandle<()>);

impl Drop for ConnectionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Dials `socket` and opens HTTP/2 on it. Does not wait for the runtime to say anything, so it
/// returns at once even when the runtime is stopped (the first call then hangs); bound it and
/// the calls with a deadline. Needs a tokio runtime (it spawns the connection task).
pub async fn connect(socket: &Path) -> Result<CriChannel, CriError> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => CriError::NotInstalled {
                path: socket.to_path_buf(),
            },
            ErrorKind::ConnectionRefused => CriError::Refused {
                path: socket.to_path_buf(),
                source: e,
            },
            _ => CriError::Connect {
                path: socket.to_path_buf(),
                source: e,
            },
        })?;
    let (send, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .map_err(|e| CriError::Connect {
            path: socket.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
    let task = tokio::spawn(async move {
        // Ends when the runtime closes the connection or the last channel is dropped; an error
        // here surfaces to the caller as the failed call.
        let _ = connection.await;
    });
    Ok(CriChannel {
        send,
        _connection: Arc::new(ConnectionTask(task)),
    })
}

impl CriChannel {
    /// The generated CRI `RuntimeService` client on this channel.
    pub fn runtime_service(&self) -> RuntimeServiceClient<CriChannel> {
        RuntimeServiceClient::with_origin(self.clone(), http::Uri::from_static(ORIGIN))
    }
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Incoming>, hyper::Error>> + Send>>;

impl tower_service::Service<http::Request<tonic::body::Body>> for CriChannel {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.send.send_request(req))
    }
}
