//! The HTTP transport under the docker client: one HTTP/1.1 connection per request on the
//! engine's unix socket, and a cap on how many bytes an answer may take.
//!
//! bollard reads an answer whole before it parses it (a listing, an inspect), so an engine that
//! streams a huge (or endless) answer would be buffered until the round's deadline: hundreds of
//! MiB in a guard that should stay small. Here each connection counts what it reads and fails
//! the read past the cap ([`cap_for`]: 6 MiB for a container listing, 1 MiB for any other answer; a
//! log stream, which the client scans line by line in bounded memory, is not capped). The
//! failure carries [`TooLarge`], found again by type ([`too_large`]), never by text.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use bollard::errors::Error as BollardError;
use bollard::{BollardRequest, Docker};
use http::{HeaderValue, Response, Uri};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

/// One MiB.
const MIB: u64 = 1024 * 1024;

/// The most a container listing (`docker ps -a`) may take: about 3000 containers of docker's
/// usual 2 KiB each (kubelet runs at most a few hundred), and small enough that the shipped
/// binary, buffering a hostile engine's answer up to the cap, stays under 16 MiB of RSS
/// (tests/docker_hostile.rs: ~8 MiB at rest, +1 MiB per MiB buffered).
pub const LISTING_CAP: u64 = 6 * MIB;

/// The most any other answer (version, inspect, an error body) may take: they are a few KiB.
pub const ANSWER_CAP: u64 = MIB;

/// An answer that ran past its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("docker {what} larger than {} MiB: refused", .cap / MIB)]
pub struct TooLarge {
    /// What was asked for: `listing` or `answer`.
    pub what: &'static str,
    /// The cap, in bytes.
    pub cap: u64,
}

/// The cap for a request to `path` (`/v1.41/containers/json`, ...): `None` for a log stream.
pub fn cap_for(path: &str) -> Option<TooLarge> {
    if path.ends_with("/logs") {
        None
    } else if path.ends_with("/containers/json") {
        Some(TooLarge {
            what: "listing",
            cap: LISTING_CAP,
        })
    } else {
        Some(TooLarge {
            what: "answer",
            cap: ANSWER_CAP,
        })
    }
}

/// A client of the engine at `socket` that asks through this transport.
pub fn client(socket: &Path, timeout_s: u64) -> Result<Docker, BollardError> {
    let socket = socket.to_path_buf();
    Docker::connect_with_custom_transport(
        move |req: BollardRequest| send(socket.clone(), req),
        Some("http://localhost"),
        timeout_s,
        bollard::API_DEFAULT_VERSION,
    )
}

/// Send one request on a connection of its own, capped as [`cap_for`] says.
async fn send(socket: PathBuf, req: BollardRequest) -> Result<Response<Incoming>, BollardError> {
    let (mut parts, body) = req.into_parts();
    let cap = cap_for(parts.uri.path());
    // On its own connection a request names its path only; the host is docker's own.
    let origin = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str)
        .to_owned();
    parts.uri = origin.parse::<Uri>().map_err(BollardError::from)?;
    parts
        .headers
        .insert(http::header::HOST, HeaderValue::from_static("docker"));
    let stream = UnixStream::connect(&socket).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(Capped::new(stream, cap))).await?;
    // The connection lives as long as the answer's body: it ends when the body is read or
    // dropped (an abandoned call), or when the engine hangs up.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender
        .send_request(http::Request::from_parts(parts, body))
        .await?)
}

/// The [`TooLarge`] behind a bollard error, if a capped read is what failed.
pub fn too_large(e: &BollardError) -> Option<TooLarge> {
    if let BollardError::IOError { err } = e {
        if let Some(t) = err.get_ref().and_then(|i| i.downcast_ref::<TooLarge>()) {
            return Some(*t);
        }
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(t) = err.downcast_ref::<TooLarge>() {
            return Some(*t);
        }
        if let Some(t) = err
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
            .and_then(|i| i.downcast_ref::<TooLarge>())
        {
            return Some(*t);
        }
        next = err.source();
    }
    None
}

/// A stream that fails its reads once more than the cap has been read.
struct Capped<S> {
    inner: S,
    cap: Option<TooLarge>,
    read: u64,
}

impl<S> Capped<S> {
    fn new(inner: S, cap: Option<TooLarge>) -> Self {
        Capped {
            inner,
            cap,
            read: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(cap) = this.cap.filter(|c| this.read > c.cap) {
            return Poll::Ready(Err(io::Error::other(cap)));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let got = buf.filled().len().saturating_sub(before);
        this.read = this
            .read
            .saturating_add(u64::try_from(got).unwrap_or(u64::MAX));
        match this.cap {
            // Refuse the read that crosses the cap: what it brought is not handed on.
            Some(cap) if this.read > cap.cap => {
                buf.set_filled(before);
                Poll::Ready(Err(io::Error::other(cap)))
            }
            _ => polled,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn caps_by_route() {
        assert_eq!(
            cap_for("/v1.41/containers/json").map(|c| c.what),
            Some("listing")
        );
        assert_eq!(
            cap_for("/v1.41/containers/abc/json").map(|c| c.what),
            Some("answer")
        );
        assert_eq!(cap_for("/v1.41/containers/kubelet/logs"), None);
        assert_eq!(
            cap_for("/containers/json")
                .map(|c| c.to_string())
                .as_deref(),
            Some("docker listing larger than 6 MiB: refused")
        );
    }

    #[tokio::test]
    async fn a_capped_stream_refuses_the_read_past_its_cap() {
        let data = [b'x'; 100];
        let cap = TooLarge {
            what: "listing",
            cap: 64,
        };
        let mut s = Capped::new(&data[..], Some(cap));
        let mut out = Vec::new();
        let err = s.read_to_end(&mut out).await.err();
        assert!(out.len() <= 64, "{}", out.len());
        let inner = err
            .as_ref()
            .and_then(io::Error::get_ref)
            .and_then(|e| e.downcast_ref::<TooLarge>());
        assert_eq!(inner, Some(&cap));
        let bollard = BollardError::from(err.unwrap_or_else(|| io::Error::other("none")));
        assert_eq!(too_large(&bollard), Some(cap));

        let mut s = Capped::new(&data[..], None);
        let mut out = Vec::new();
        assert!(s.read_to_end(&mut out).await.is_ok());
        assert_eq!(out.len(), 100);
    }
}
