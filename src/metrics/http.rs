//! The `/metrics` endpoint (`[metrics] listen`): a minimal HTTP/1.1 responder on tokio that
//! hands out the latest pre-rendered metrics.
//!
//! It never blocks the daemon loop and the loop never blocks it: the loop replaces the text in
//! a watch channel (no await, no lock held across I/O), and each connection is its own task
//! that clones the current text and writes it. Every connection is bounded: at most
//! [`MAX_CONNECTIONS`] at once and [`MAX_PER_PEER`] from one peer (an IPv4 address or an IPv6
//! /64; more are closed at once), a request head of at most [`MAX_REQUEST_HEAD`] bytes that
//! must arrive within [`HEAD_TIMEOUT`], and [`CONNECTION_DEADLINE`] for the whole exchange: a
//! peer holding idle connections can neither fill every slot nor keep one long, so it cannot
//! starve a real scrape from elsewhere. With `[metrics] bearer_token_file` every request must
//! carry `Authorization: Bearer <token>` (as node_exporter's web config asks), or gets 401.
//! One request per connection (`Connection: close`); `GET` and `HEAD` only.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use super::Rendered;
use crate::fleet::Secret;

/// Connections served at once; more are closed without an answer.
pub const MAX_CONNECTIONS: usize = 16;
/// Connections served at once from one peer (an IPv4 address, an IPv6 /64).
pub const MAX_PER_PEER: usize = 4;
/// How long a connection may take to send its whole request head (a scraper sends it at once).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest request head (request line and headers) read.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// The whole exchange, from accept to the last byte written.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);

/// Content type of the Prometheus text format 0.0.4.
const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of OpenMetrics 1.0.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr} (`metrics.listen`): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// Not inside the daemon's async runtime.
    #[error("cannot serve {0}: no async runtime")]
    NoRuntime(SocketAddr),
}

/// A running `/metrics` server; dropping it stops accepting.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    tx: watch::Sender<Arc<Rendered>>,
    task: JoinHandle<()>,
}

/// The bounds of one server (see the module doc).
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_connections: usize,
    per_peer: usize,
    head_timeout: Duration,
    deadline: Duration,
}

const LIMITS: Limits = Limits {
    max_connections: MAX_CONNECTIONS,
    per_peer: MAX_PER_PEER,
    head_timeout: HEAD_TIMEOUT,
    deadline: CONNECTION_DEADLINE,
};

impl Server {
    /// Bind `addr` and serve `initial` until [`update`](Self::update) replaces it, asking for
    /// `token` when one is given. Must be called inside a tokio runtime (the daemon's).
    pub fn start(
        addr: SocketAddr,
        initial: Arc<Rendered>,
        token: Option<Secret>,
    ) -> Result<Server, ServeError> {
        Self::start_with(addr, initial, token, LIMITS)
    }

    fn start_with(
        addr: SocketAddr,
        initial: Arc<Rendered>,
        token: Option<Secret>,
        limits: Limits,
    ) -> Result<Server, ServeError> {
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| ServeError::NoRuntime(addr))?;
        let bind = |source| ServeError::Bind { addr, source };
        let std_listener = std::net::TcpListener::bind(addr).map_err(bind)?;
        std_listener.set_nonblocking(true).map_err(bind)?;
        let listener = {
            let _guard = handle.enter();
            TcpListener::from_std(std_listener).map_err(bind)?
        };
        let addr = listener.local_addr().map_err(bind)?;
        let (tx, rx) = watch::channel(initial);
        let task = handle.spawn(accept_loop(listener, rx, token.map(Arc::new), limits));
        Ok(Server { addr, tx, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve `rendered` from now on. Never waits.
    pub fn update(&self, rendered: Arc<Rendered>) {
        self.tx.send_replace(rendered);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The key a peer's connections are counted under: its IPv4 address, its IPv6 /64 (one host
/// commonly holds a whole /64).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

/// Connections per peer; an entry leaves when its last connection ends.
type PeerCounts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// One peer's connection, counted until dropped.
struct PeerSlot {
    counts: PeerCounts,
    key: IpAddr,
}

impl PeerSlot {
    fn take(counts: &PeerCounts, key: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut map = counts.lock().ok()?;
        let n = map.entry(key).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: Arc::clone(counts),
            key,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        if let Ok(mut map) = self.counts.lock() {
            if let Some(n) = map.get_mut(&self.key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(&self.key);
                }
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    rx: watch::Receiver<Arc<Rendered>>,
    token: Option<Arc<Secret>>,
    limits: Limits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let peers: PeerCounts = Arc::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                tracing::debug!("metrics: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(peer_slot) = PeerSlot::take(&peers, peer_key(peer.ip()), limits.per_peer) else {
            drop(stream); // this peer holds its share: close at once
            continue;
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream); // busy: close at once
            continue;
        };
        let current = rx.borrow().clone();
        let token = token.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(
                limits.deadline,
                handle(stream, current, token.as_deref(), limits.head_timeout),
            )
            .await;
            drop(permit);
            drop(peer_slot);
        });
    }
}

/// One exchange: read the request head (within `head_timeout`), answer, close.
async fn handle(
    mut stream: TcpStream,
    rendered: Arc<Rendered>,
    token: Option<&Secret>,
    head_timeout: Duration,
) -> std::io::Result<()> {
    let Ok(head) = tokio::time::timeout(head_timeout, read_head(&mut stream)).await else {
        return Ok(()); // too slow to say what it wants: closed
    };
    let response = match head? {
        None => return Ok(()), // closed before a whole request
        Some(Err(())) => respond(431, "text/plain", "request head too large\n", &[], false),
        Some(Ok(head)) => match token {
            Some(t) if !authorized(&head, t) => respond(
                401,
                "text/plain",
                "unauthorized\n",
                &[("WWW-Authenticate", "Bearer")],
                false,
            ),
            _ => answer(&head, &rendered),
        },
    };
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// The request head (`Err`: longer than [`MAX_REQUEST_HEAD`]); `None` when the peer closed
/// before sending a whole one.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Result<String, ()>>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&buf) {
            return Ok(Some(Ok(String::from_utf8_lossy(&buf[..end]).into_owned())));
        }
        if buf.len() >= MAX_REQUEST_HEAD {
            return Ok(Some(Err(())));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the head carries `Authorization: Bearer <token>` (compared in constant time).
fn authorized(head: &str, token: &Secret) -> bool {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .filter_map(|(_, v)| {
            let v = v.trim();
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .any(|given| constant_time_eq(given.as_bytes(), token.expose().as_bytes()))
}

/// Equal, in a time that depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Where the request head ends (after the blank line), if it has.
fn head_end(buf: &[u8]) -> Option<usize> {
    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
        return Some(i + 4);
    }
    buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
}

/// The whole response to a request head.
fn answer(head: &str, rendered: &Rendered) -> Vec<u8> {
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return respond(400, "text/plain", "bad request\n", &[], false);
    };
    if !version.starts_with("HTTP/1.") {
        return respond(400, "text/plain", "HTTP/1.x only\n", &[], false);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => {
            return respond(
                405,
                "text/plain",
                "GET or HEAD\n",
                &[("Allow", "GET, HEAD")],
                false,
            );
        }
    };
    let path = target.split('?').next().unwrap_or_default();
    match path {
        "/metrics" => {
            let openmetrics = lines
                .filter_map(|l| l.split_once(':'))
                .filter(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
                .any(|(_, v)| v.contains("application/openmetrics-text"));
            if openmetrics {
                respond(
                    200,
                    OPENMETRICS_CONTENT_TYPE,
                    &rendered.openmetrics,
                    &[],
                    head_only,
                )
            } else {
                respond(200, TEXT_CONTENT_TYPE, &rendered.text, &[], head_only)
            }
        }
        "/" => respond(
            200,
            "text/plain; charset=utf-8",
            "pleg-guard: metrics at /metrics\n",
            &[],
            head_only,
        ),
        _ => respond(
            404,
            "text/plain",
            "not found; try /metrics\n",
            &[],
            head_only,
        ),
    }
}

fn respond(
    status: u16,
    content_type: &str,
    body: &str,
    extra: &[(&str, &str)],
    head_only: bool,
) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(body.as_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::AsyncReadExt;

    fn rendered(n: u32) -> Arc<Rendered> {
        Arc::new(Rendered {
            text: format!("# TYPE x gauge\nx {n}\n"),
            openmetrics: format!("# TYPE x gauge\nx {n}\n# EOF\n"),
        })
    }

    async fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn serves_the_latest_text_in_the_format_asked_for() {
        runtime().block_on(async {
            let server = Server::start("127.0.0.1:0".parse().unwrap(), rendered(1), None).unwrap();
            let addr = server.addr();
            let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
            assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
            assert!(r.ends_with("\r\n\r\n# TYPE x gauge\nx 1\n"), "{r}");
            server.update(rendered(2));
            let r = get(
                addr,
                "GET /metrics?x=1 HTTP/1.1\r\naccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
            )
            .await;
            assert!(r.contains("Content-Type: application/openmetrics-text"), "{r}");
            assert!(r.ends_with("x 2\n# EOF\n"), "{r}");
            let r = get(addr, "HEAD /metrics HTTP/1.0\r\n\r\n").await;
            assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\n"), "{r}");
            assert!(r.contains("Content-Length: 19\r\n"), "{r}");
            for (req, status) in [
                ("GET /nope HTTP/1.1\r\n\r\n", "404"),
                ("POST /metrics HTTP/1.1\r\n\r\n", "405"),
                ("garbage\r\n\r\n", "400"),
                ("GET /metrics SPDY/3\r\n\r\n", "400"),
            ] {
                let r = get(addr, req).await;
                assert!(r.starts_with(&format!("HTTP/1.1 {status} ")), "{req:?}: {r}");
            }
            let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(big.as_bytes()).await;
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out).await;
            assert!(
                String::from_utf8_lossy(&out).starts_with("HTTP/1.1 431 "),
                "{}",
                String::from_utf8_lossy(&out)
            );
        });
    }

    /// Scrapers that connect and never send a request (or never finish one) fill the
    /// connection slots for at most the deadline; meanwhile publishing never waits, a scraper
    /// that comes in with a free slot is served, and one beyond the limit is closed at once.
    #[test]
    fn slow_scrapers_block_neither_publishing_nor_other_scrapers() {
        runtime().block_on(async {
            let deadline = Duration::from_millis(1500);
            let server = Server::start_with(
                "127.0.0.1:0".parse().unwrap(),
                rendered(0),
                None,
                Limits {
                    max_connections: MAX_CONNECTIONS,
                    per_peer: MAX_CONNECTIONS,
                    head_timeout: deadline,
                    deadline,
                },
            )
            .unwrap();
            let addr = server.addr();
            let mut stuck = Vec::new();
            for _ in 0..MAX_CONNECTIONS - 1 {
                let mut s = TcpStream::connect(addr).await.unwrap();
                s.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap(); // never finished
                stuck.push(s);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let t = Instant::now();
            for n in 0..1000 {
                server.update(rendered(n));
            }
            assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
            // The last free slot still serves, with the latest text.
            let r = tokio::time::timeout(
                Duration::from_secs(2),
                get(addr, "GET /metrics HTTP/1.1\r\n\r\n"),
            )
            .await
            .unwrap();
            assert!(r.ends_with("x 999\n"), "{r}");
            // All slots taken: a further connection is closed at once, not queued.
            let mut more = Vec::new();
            more.push(TcpStream::connect(addr).await.unwrap());
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut over = TcpStream::connect(addr).await.unwrap();
            let _ = over.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await;
            let mut out = Vec::new();
            let closed = tokio::time::timeout(Duration::from_secs(2), over.read_to_end(&mut out))
                .await
                .is_ok();
            assert!(
                closed && out.is_empty(),
                "{}",
                String::from_utf8_lossy(&out)
            );
            // After the deadline the stuck ones are cut off and their slots serve again.
            tokio::time::sleep(deadline).await;
            for mut s in stuck {
                let mut out = Vec::new();
                let n = tokio::time::timeout(Duration::from_secs(1), s.read_to_end(&mut out))
                    .await
                    .unwrap();
                assert!(
                    n.is_ok() && out.is_empty(),
                    "{}",
                    String::from_utf8_lossy(&out)
                );
            }
            let r = get(addr, "GET /metrics HTTP/1.1\r\n\r\n").await;
            assert!(r.ends_with("x 999\n"), "{r}");
            drop(more);
            drop(server);
        });
    }

    /// A connection from `source` (any address of 127/8 is this host) to `addr`.
    async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
        socket.connect(addr).await.unwrap()
    }

    /// One peer opening many idle connections (the issue: eight made a real scrape fail,
    /// renewable every 10 s) holds at most its share of the slots, each for at most the head
    /// timeout: a scrape from another address is served meanwhile.
    #[test]
    fn idle_connections_from_one_peer_do_not_starve_a_real_scrape() {
        runtime().block_on(async {
            let head_timeout = Duration::from_millis(400);
            let server = Server::start_with(
                "127.0.0.1:0".parse().unwrap(),
                rendered(7),
                None,
                Limits {
                    head_timeout,
                    ..LIMITS
                },
            )
            .unwrap();
            let addr = server.addr();
            let mut idle = Vec::new();
            for _ in 0..2 * MAX_CONNECTIONS {
                idle.push(connect_from("127.0.0.2", addr).await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let r = tokio::time::timeout(
                Duration::from_secs(2),
                get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            )
            .await
            .unwrap();
            assert!(
                r.starts_with("HTTP/1.1 200 OK") && r.ends_with("x 7\n"),
                "{r}"
            );
            // The idle ones are closed after the head timeout, not the whole deadline.
            let t = Instant::now();
            for mut s in idle {
                let mut out = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out))
                    .await
                    .unwrap();
                assert!(out.is_empty());
            }
            assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        });
    }

    #[test]
    fn peers_are_counted_by_address_and_ipv6_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(peer_key(a), peer_key(b));
        assert_ne!(peer_key(a), peer_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(peer_key(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    /// With a token file, /metrics answers only a request bearing the token.
    #[test]
    fn a_configured_bearer_token_is_required() {
        let dir = crate::testing::tempdir("pg-metrics-token");
        std::fs::write(dir.join("token"), "t0ken\n").unwrap();
        let token = Secret::read_for("metrics.bearer_token_file", &dir.join("token")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        runtime().block_on(async {
            let server =
                Server::start("127.0.0.1:0".parse().unwrap(), rendered(3), Some(token)).unwrap();
            let addr = server.addr();
            for req in [
                "GET /metrics HTTP/1.1\r\n\r\n",
                "GET /metrics HTTP/1.1\r\nAuthorization: Bearer wrong\r\n\r\n",
                "GET /metrics HTTP/1.1\r\nAuthorization: Basic dDBrZW4=\r\n\r\n",
                "GET /metrics HTTP/1.1\r\nAuthorization: Bearer t0ke\r\n\r\n",
            ] {
                let r = get(addr, req).await;
                assert!(r.starts_with("HTTP/1.1 401 "), "{req:?}: {r}");
                assert!(r.contains("WWW-Authenticate: Bearer\r\n"), "{r}");
                assert!(!r.contains("x 3"), "{r}");
            }
            let r = get(
                addr,
                "GET /metrics HTTP/1.1\r\nauthorization: bearer t0ken\r\n\r\n",
            )
            .await;
            assert!(
                r.starts_with("HTTP/1.1 200 OK") && r.ends_with("x 3\n"),
                "{r}"
            );
        });
    }

    #[test]
    fn binding_a_taken_address_is_an_error_naming_the_key() {
        runtime().block_on(async {
            let first = Server::start("127.0.0.1:0".parse().unwrap(), rendered(0), None).unwrap();
            let e = Server::start(first.addr(), rendered(0), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("`metrics.listen`"), "{e}");
        });
    }
}
