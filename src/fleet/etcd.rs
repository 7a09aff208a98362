//! The typed edge to etcd: TLS material, a pre-flight TLS handshake, the connection and the
//! few calls the fleet makes, each bounded by the request timeout, with errors sorted into
//! [`FleetError`] kinds by their types and gRPC codes (never by their text).

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{PbTxnOpResponse, PbTxnResponse};
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, Event, GetOptions, Identity,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, SortOrder, SortTarget, TlsOptions, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions, WatchStream,
};
use tokio::io::AsyncReadExt;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::Urgency;
use super::group::{
    Cmp, Cond, HANDOFF_CANDIDATES, Head, Held, Keys, Op, RawKv, Snapshot, Successors, TxnPlan,
    WatchPlan, delete_plan, free_slot_plan, grant_plan, handoff_plan, successors_wanted,
};
use super::{FleetError, FleetSettings, TlsFiles};
use super::{MaxDisruptive, Urgency as U};

/// Where the system's CA bundle lives (Debian, then RHEL), used when `ca_file` is not set.
const SYSTEM_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// How long the pre-flight handshake waits for the server's verdict on this node's
/// certificate (TLS 1.3 servers reject a client certificate after the handshake).
const VERDICT_WAIT: Duration = Duration::from_millis(300);

/// TLS files read into memory (checked once at start, so a missing file is a clear error).
#[derive(Debug, Clone, Default)]
pub struct TlsMaterial(Option<Pem>);

#[derive(Clone)]
struct Pem {
    ca: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Sizes only: the key's bytes are never printed.
impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pem")
            .field("ca", &format_args!("{} bytes", self.ca.len()))
            .field(
                "identity",
                &self
                    .identity
                    .as_ref()
                    .map(|(cert, _)| format!("certificate {} bytes, key redacted", cert.len())),
            )
            .finish()
    }
}

fn read_file(path: &std::path::Path, what: &str) -> Result<Vec<u8>, FleetError> {
    std::fs::read(path).map_err(|e| FleetError::Config(format!("{what} {}: {e}", path.display())))
}

impl TlsMaterial {
    /// Read the files (None: no TLS).
    pub fn load(files: Option<&TlsFiles>) -> Result<TlsMaterial, FleetError> {
        let Some(f) = files else {
            return Ok(TlsMaterial(None));
        };
        let ca = match &f.ca_file {
            Some(p) => read_file(p, "fleet.ca_file")?,
            None => SYSTEM_BUNDLES
                .iter()
                .find_map(|p| std::fs::read(p).ok())
                .ok_or_else(|| {
                    FleetError::Config(
                        "no fleet.ca_file and no system CA bundle to trust etcd's certificate"
                            .to_owned(),
                    )
                })?,
        };
        if CertificateDer::pem_slice_iter(&ca).next().is_none() {
            return Err(FleetError::Config(
                "fleet.ca_file holds no PEM certificate".to_owned(),
            ));
        }
        let identity = match (&f.cert_file, &f.key_file) {
            (Some(c), Some(k)) => {
                let cert = read_file(c, "fleet.cert_file")?;
                let key = read_file(k, "fleet.key_file")?;
                if CertificateDer::pem_slice_iter(&cert).next().is_none() {
                    return Err(FleetError::Config(format!(
                        "fleet.cert_file {}: no PEM certificate",
                        c.display()
                    )));
                }
                if PrivateKeyDer::from_pem_slice(&key).is_err() {
                    return Err(FleetError::Config(format!(
                        "fleet.key_file {}: no PEM private key",
                        k.display()
                    )));
                }
                Some((cert, key))
            }
            _ => None,
        };
        Ok(TlsMaterial(Some(Pem { ca, identity })))
    }

    fn rustls_config(pem: &Pem) -> Result<rustls::ClientConfig, FleetError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem.ca) {
            let cert = cert.map_err(|e| FleetError::Config(format!("fleet.ca_file: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| FleetError::Config(format!("fleet.ca_file: {e}")))?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| FleetError::Tls(e.to_string()))?
        .with_root_certificates(roots);
        let mut config = match &pem.identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| FleetError::Config(format!("fleet.cert_file: {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| FleetError::Config(format!("fleet.key_file: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| FleetError::Tls(format!("client certificate: {e}")))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// Whether a rustls error is somewhere in `e`'s chain (also inside `io::Error`s, whose
/// `source()` skips the error they wrap).
fn tls_in_chain(mut e: Option<&(dyn StdError + 'static)>) -> bool {
    while let Some(err) = e {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if tls_in_chain(Some(inner)) {
                    return true;
                }
            }
        }
        e = err.source();
    }
    false
}

/// Sort an etcd client error; `authenticating`: the call was the connect's authentication.
pub fn classify(e: &etcd_client::Error, authenticating: bool) -> FleetError {
    use etcd_client::Error as E;
    use tonic::Code;
    match e {
        E::GRpcStatus(s) => {
            let msg = format!("{:?}: {}", s.code(), s.message());
            match s.code() {
                Code::Unauthenticated | Code::PermissionDenied => FleetError::Auth(msg),
                Code::InvalidArgument if authenticating => FleetError::Auth(msg),
                _ if tls_in_chain(s.source()) => FleetError::Tls(msg),
                Code::InvalidArgument | Code::OutOfRange | Code::Unimplemented => {
                    FleetError::Protocol(msg)
                }
                _ => FleetError::Unreachable(msg),
            }
        }
        E::TransportError(t) if tls_in_chain(t.source()) => FleetError::Tls(t.to_string()),
        E::TransportError(t) => FleetError::Unreachable(t.to_string()),
        E::IoError(io) if io.get_ref().is_some_and(|i| tls_in_chain(Some(i))) => {
            FleetError::Tls(io.to_string())
        }
        E::IoError(io) => FleetError::Unreachable(io.to_string()),
        E::InvalidArgs(m) | E::EndpointError(m) => FleetError::Config(m.clone()),
        E::InvalidUri(u) => FleetError::Config(u.to_string()),
        E::LeaseKeepAliveError(m) | E::WatchError(m) => FleetError::Unreachable(m.clone()),
        other => FleetError::Protocol(other.to_string()),
    }
}

/// What one endpoint's pre-flight handshake showed.
enum Preflight {
    Ok,
    Tls(String),
    Net(String),
}

/// The host and port of an endpoint URL (etcd's 2379 when none is given).
fn host_port(endpoint: &str) -> Result<(String, u16), Preflight> {
    let uri = endpoint
        .parse::<http::Uri>()
        .map_err(|_| Preflight::Net(format!("{endpoint}: not a URL")))?;
    let host = uri
        .host()
        .ok_or_else(|| Preflight::Net(format!("{endpoint}: no host")))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok((host, uri.port_u16().unwrap_or(2379)))
}

/// Shake hands with one `https://host:port` endpoint the way the gRPC channel will, and wait
/// a moment for the server's verdict on this node's certificate.
async fn preflight_one(
    endpoint: &str,
    config: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Preflight {
    let (host, port) = match host_port(endpoint) {
        Ok(hp) => hp,
        Err(e) => return e,
    };
    let Ok(name) = ServerName::try_from(host.clone()) else {
        return Preflight::Net(format!("{endpoint}: bad host name"));
    };
    let tcp = match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Preflight::Net(format!("{endpoint}: {e}")),
        Err(_) => return Preflight::Net(format!("{endpoint}: no TCP answer within {timeout:?}")),
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    let mut tls = match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if e.get_ref().is_some_and(|i| tls_in_chain(Some(i))) => {
            return Preflight::Tls(format!("{endpoint}: {e}"));
        }
        Ok(Err(e)) => return Preflight::Net(format!("{endpoint}: {e}")),
        Err(_) => {
            return Preflight::Net(format!("{endpoint}: no TLS handshake within {timeout:?}"));
        }
    };
    let mut byte = [0u8; 1];
    match tokio::time::timeout(VERDICT_WAIT, tls.read(&mut byte)).await {
        Err(_) | Ok(Ok(1..)) => Preflight::Ok,
        Ok(Ok(_)) => Preflight::Tls(format!(
            "{endpoint}: etcd closed the connection after the handshake (does it trust this node's client certificate?)"
        )),
        Ok(Err(e)) if e.get_ref().is_some_and(|i| tls_in_chain(Some(i))) => {
            Preflight::Tls(format!("{endpoint}: {e}"))
        }
        Ok(Err(e)) => Preflight::Net(format!("{endpoint}: {e}")),
    }
}

/// A plain endpoint's pre-flight: does it take a TCP connection?
async fn reachable_one(endpoint: &str, timeout: Duration) -> Preflight {
    let (host, port) = match host_port(endpoint) {
        Ok(hp) => hp,
        Err(e) => return e,
    };
    match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_)) => Preflight::Ok,
        Ok(Err(e)) => Preflight::Net(format!("{endpoint}: {e}")),
        Err(_) => Preflight::Net(format!("{endpoint}: no TCP answer within {timeout:?}")),
    }
}

/// The pre-flight over every endpoint at once: the endpoints that answer (with TLS: that
/// shake hands and keep the connection), so the channel never balances calls onto a member
/// that is down; a TLS error when every endpoint that answered refused TLS.
async fn preflight(
    endpoints: &[String],
    pem: Option<&Pem>,
    timeout: Duration,
) -> Result<Vec<String>, FleetError> {
    let config = match pem {
        Some(p) => Some(Arc::new(TlsMaterial::rustls_config(p)?)),
        None => None,
    };
    let checks = endpoints.iter().map(|e| {
        let config = config.clone();
        async move {
            match config {
                Some(c) => preflight_one(e, c, timeout).await,
                None => reachable_one(e, timeout).await,
            }
        }
    });
    let results = futures_util::future::join_all(checks).await;
    let mut live = Vec::new();
    let mut tls_error = None;
    let mut net_error = None;
    for (e, r) in endpoints.iter().zip(results) {
        match r {
            Preflight::Ok => live.push(e.clone()),
            Preflight::Tls(m) => tls_error = tls_error.or(Some(m)),
            Preflight::Net(m) => net_error = net_error.or(Some(m)),
        }
    }
    if !live.is_empty() {
        return Ok(live);
    }
    match (tls_error, net_error) {
        (Some(m), _) => Err(FleetError::Tls(m)),
        (None, Some(m)) => Err(FleetError::Unreachable(m)),
        (None, None) => Err(FleetError::Config("no etcd endpoints".to_owned())),
    }
}

/// Bound one call by the request timeout.
async fn bounded<T>(
    timeout: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, FleetError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(&e, false)),
        Err(_) => Err(FleetError::Unreachable(format!(
            "{what}: no answer within {}",
            humantime::format_duration(timeout)
        ))),
    }
}

/// A transaction of [`super::group`] as etcd takes it.
fn txn_of(plan: &TxnPlan) -> Txn {
    txn_reading(plan, Vec::new())
}

/// [`txn_of`], with reads `also` after the writes when the compares hold.
fn txn_reading(plan: &TxnPlan, also: Vec<TxnOp>) -> Txn {
    let when: Vec<Compare> = plan
        .when
        .iter()
        .map(|c| match c {
            Cond::CreateRevision {
                key,
                end,
                cmp,
                revision,
            } => {
                let op = match cmp {
                    Cmp::Equal => CompareOp::Equal,
                    Cmp::Less => CompareOp::Less,
                    Cmp::Greater => CompareOp::Greater,
                };
                let c = Compare::create_revision(key.clone(), op, *revision);
                match end {
                    Some(end) => c.with_range(end.clone()),
                    None => c,
                }
            }
            Cond::ModRevision { key, revision } => {
                Compare::mod_revision(key.clone(), CompareOp::Equal, *revision)
            }
        })
        .collect();
    let then: Vec<TxnOp> = plan
        .then
        .iter()
        .map(|op| match op {
            Op::Put { key, value, lease } => TxnOp::put(
                key.clone(),
                value.clone(),
                (*lease != 0).then(|| PutOptions::new().with_lease(*lease)),
            ),
            Op::Delete { key } => TxnOp::delete(key.clone(), None),
            Op::Txn(inner) => TxnOp::txn(txn_of(inner)),
        })
        .chain(also)
        .collect();
    let txn = Txn::new().when(when).and_then(then);
    match &plan.otherwise {
        Some(other) => txn.or_else([TxnOp::txn(txn_of(other))]),
        None => txn,
    }
}

/// Whether a slot's release handed it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Handed to the head of the queue in the same revision.
    HandedOver,
    /// Deleted (nobody waited, the head changed meanwhile, the budget shrank), or no longer
    /// this node's.
    Freed,
}

/// A transaction's answers, each first checked to carry its response, a nested
/// transaction's too: etcd-client's `op_responses` panics on one without, which etcd never
/// sends but a proxy or another server speaking its protocol might.
pub fn op_answers(resp: &TxnResponse) -> Result<Vec<TxnOpResponse>, FleetError> {
    fn whole(r: &PbTxnResponse) -> bool {
        r.responses.iter().all(|op| match &op.response {
            None => false,
            Some(PbTxnOpResponse::ResponseTxn(inner)) => whole(inner),
            Some(_) => true,
        })
    }
    if whole(&resp.0) {
        Ok(resp.op_responses())
    } else {
        Err(FleetError::Protocol(
            "a transaction's answer lacks one of its responses".to_owned(),
        ))
    }
}

/// Whether a watch event is a put (`Some(false)`), a delete (`Some(true)`) or of a type
/// etcd does not send (None; etcd-client's `event_type` panics on it).
pub fn is_delete(ev: &Event) -> Option<bool> {
    match ev.0.r#type {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Whether a handoff's transaction ([`handoff_plan`]: the offers nested in the branch the
/// shared compares lead to, each else the next waiter, the last a plain release) handed the
/// slot over: the branch taken put the holder key.
fn handed_over(answers: &[TxnOpResponse]) -> bool {
    // the answers of the branch taken: first a put (a handoff), a delete (the plain release)
    // or the nested transaction it went on to
    match answers.first() {
        Some(TxnOpResponse::Put(_)) => true,
        Some(TxnOpResponse::Txn(inner)) => op_answers(inner).is_ok_and(|a| handed_over(&a)),
        _ => false,
    }
}

/// A key of a range's answer.
fn raw(kv: &etcd_client::KeyValue) -> RawKv<'_> {
    RawKv {
        key: kv.key(),
        value: kv.value(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    }
}

/// The `tracing` target of a slot turn's steps (debug level, off unless a subscriber asks for
/// it: `benches/fleet.rs` with `PLEG_BENCH_STEPS=1`): `node`, `step`, `revision`.
pub const TURN: &str = "pleg_guard::fleet::turn";

/// One step of a slot turn, for [`TURN`].
macro_rules! turn_step {
    ($node:expr, $step:literal, $revision:expr) => {
        tracing::debug!(target: "pleg_guard::fleet::turn", node = $node, step = $step, revision = $revision)
    };
}
pub(crate) use turn_step;

/// A connected client.
pub struct Connection {
    client: Client,
    timeout: Duration,
    /// This node (for [`TURN`] only).
    node: String,
}

/// This node's place in the queue: its queue key's urgency and create revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Me {
    /// The queue the key is in.
    pub urgency: Urgency,
    /// The key's create revision: its place in the queue.
    pub create_revision: i64,
}

/// A lease's keep-alive stream.
pub struct KeepAlive {
    /// Sends keep-alives.
    pub keeper: LeaseKeeper,
    /// Their answers.
    pub answers: LeaseKeepAliveStream,
}

impl Connection {
    /// Check TLS ahead (so a certificate etcd rejects is told apart from a network fault),
    /// connect and, with a user, authenticate.
    pub async fn open(s: &FleetSettings, tls: &TlsMaterial) -> Result<Connection, FleetError> {
        let mut options = ConnectOptions::new()
            .with_require_leader(true)
            .with_connect_timeout(s.request_timeout)
            .with_keep_alive(Duration::from_secs(10), s.request_timeout)
            .with_keep_alive_while_idle(false);
        let live = preflight(&s.endpoints, tls.0.as_ref(), s.request_timeout).await?;
        if let Some(pem) = &tls.0 {
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(&pem.ca));
            if let Some((cert, key)) = &pem.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(t);
        }
        let authenticating = s.auth.is_some();
        if let Some((user, password)) = &s.auth {
            options = options.with_user(user.clone(), password.clone());
        }
        let client =
            match tokio::time::timeout(s.request_timeout, Client::connect(&live, Some(options)))
                .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(classify(&e, authenticating)),
                Err(_) => {
                    return Err(FleetError::Unreachable(format!(
                        "connect: no answer within {}",
                        humantime::format_duration(s.request_timeout)
                    )));
                }
            };
        Ok(Connection {
            client,
            timeout: s.request_timeout,
            node: s.node.clone(),
        })
    }

    /// A new lease of `ttl` and its keep-alive stream.
    pub async fn new_lease(&mut self, ttl: Duration) -> Result<(i64, KeepAlive), FleetError> {
        let t = self.timeout;
        let ttl_s = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let grant = bounded(t, "grant a lease", self.client.lease_grant(ttl_s, None)).await?;
        let id = grant.id();
        match self.keep_alive(id).await? {
            Some(k) => Ok((id, k)),
            None => Err(FleetError::Protocol(format!(
                "lease {id:x} gone right after its grant"
            ))),
        }
    }

    /// The keep-alive stream of lease `id` (None: the lease is gone).
    pub async fn keep_alive(&mut self, id: i64) -> Result<Option<KeepAlive>, FleetError> {
        match tokio::time::timeout(self.timeout, self.client.lease_keep_alive(id)).await {
            Ok(Ok((keeper, answers))) => Ok(Some(KeepAlive { keeper, answers })),
            // the crate's word for a keep-alive answered with TTL 0: the lease expired
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => Ok(None),
            Ok(Err(e)) => Err(classify(&e, false)),
            Err(_) => Err(FleetError::Unreachable(
                "lease keep-alive: no answer".to_owned(),
            )),
        }
    }

    /// Write `key` on `lease`.
    pub async fn put(&mut self, key: &str, value: Vec<u8>, lease: i64) -> Result<i64, FleetError> {
        let t = self.timeout;
        let resp = bounded(
            t,
            "write",
            self.client
                .put(key, value, Some(PutOptions::new().with_lease(lease))),
        )
        .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// What a node needs of its group, in one read: see [`Connection::snapshot`].
    ///
    /// etcd 3.4 applies a range's create-revision filters after counting, so a count-only
    /// read cannot count the waiters ahead: the keys ahead are read instead, nearest first
    /// and at most `depth + 1` of them. The answer stays small, but etcd 3.4 reads every key
    /// of a range it sorts or filters by create revision before it sorts and cuts, so the
    /// member answering (every member, for a join's transaction) does work in proportion to
    /// the waiters: a few µs a key (docs/fleet-scale.md, issue 28's eighth look).
    fn snapshot_ops(keys: &Keys, me: Option<&Me>, node: &str, depth: usize) -> Vec<TxnOp> {
        let count = |prefix: String| {
            TxnOp::get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
        };
        let nearest = |prefix: String, below: Option<i64>| {
            // joining in this very transaction (`create_revision` 0): this node's own key is
            // the newest, one more to read
            let limit = depth + if below.is_none() { 2 } else { 1 };
            let mut o = GetOptions::new()
                .with_prefix()
                .with_keys_only()
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
            if let Some(rev) = below.filter(|r| *r > 0) {
                o = o.with_max_create_revision(rev - 1);
            }
            TxnOp::get(prefix, Some(o))
        };
        let mut ops = vec![
            count(keys.members()),
            TxnOp::get(keys.holders(), Some(GetOptions::new().with_prefix())),
            count(keys.queues()),
        ];
        if let Some(me) = me {
            ops.push(nearest(
                keys.queue(me.urgency),
                (me.create_revision > 0).then_some(me.create_revision),
            ));
            ops.push(count(keys.queue(Urgency::Emergency)));
            ops.push(nearest(keys.queue(Urgency::Emergency), Some(0)));
            ops.push(TxnOp::get(
                keys.queued(me.urgency, node),
                Some(GetOptions::new().with_keys_only()),
            ));
            ops.extend(Self::successors_ops(keys, me, depth));
        }
        ops
    }

    /// The waiters right behind `me` (values and leases, at most
    /// [`successors_wanted`]`(depth)`, in queue order): those after it in its own queue and,
    /// behind an emergency, the head of the planned queue. None for a node joining in the same
    /// transaction (nobody is behind its brand-new key but, for an emergency, planned waiters
    /// it will learn of at its next read).
    fn successors_ops(keys: &Keys, me: &Me, depth: usize) -> Vec<TxnOp> {
        if me.create_revision <= 0 {
            return Vec::new();
        }
        let limit = i64::try_from(successors_wanted(depth)).unwrap_or(i64::MAX);
        let after = |u: U, revision: i64| {
            let mut o = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(limit);
            if revision > 0 {
                o = o.with_min_create_revision(revision + 1);
            }
            TxnOp::get(keys.queue(u), Some(o))
        };
        let mut ops = vec![after(me.urgency, me.create_revision)];
        if me.urgency == U::Emergency {
            ops.push(after(U::Planned, 0));
        }
        ops
    }

    /// Read the answers of [`Connection::successors_ops`].
    fn successors_of(answers: &[TxnOpResponse], depth: usize) -> Successors {
        let heads = answers
            .iter()
            .filter_map(|a| match a {
                TxnOpResponse::Get(g) => Some(g.kvs()),
                _ => None,
            })
            .flatten()
            .filter_map(|kv| Head::of(raw(kv)))
            .take(successors_wanted(depth))
            .collect();
        Successors {
            heads,
            read_at: std::time::Instant::now(),
        }
    }

    /// Read the answers of [`Connection::snapshot_ops`].
    fn snapshot_of(
        keys: &Keys,
        me: Option<&Me>,
        node: &str,
        depth: usize,
        revision: i64,
        answers: &[TxnOpResponse],
    ) -> Result<Snapshot, FleetError> {
        let get = |i: usize| match answers.get(i) {
            Some(TxnOpResponse::Get(g)) => Ok(g),
            _ => Err(FleetError::Protocol(format!(
                "the group read's answer {i} is missing"
            ))),
        };
        let n = |i: usize| get(i).map(|g| usize::try_from(g.count()).unwrap_or(0));
        let holders = get(1)?
            .kvs()
            .iter()
            .filter_map(|kv| Held::parse(keys, raw(kv)))
            .collect();
        let mut s = Snapshot {
            revision,
            members: n(0)?,
            holders,
            waiting: n(2)?,
            ..Snapshot::default()
        };
        if let Some(me) = me {
            let own = keys.queued(me.urgency, node);
            s.nearest_ahead = get(3)?
                .kvs()
                .iter()
                .map(|kv| kv.key())
                .filter(|k| *k != own.as_bytes())
                .map(<[u8]>::to_vec)
                .collect();
            s.ahead = s.nearest_ahead.len();
            // the read stops at `depth + 1` keys ahead (a join's at `depth + 2` with its own)
            s.ahead_at_least = me.create_revision > 0 && s.ahead > depth;
            if me.urgency == Urgency::Planned {
                s.ahead += n(4)?;
                s.nearest_ahead
                    .extend(get(5)?.kvs().iter().map(|kv| kv.key().to_vec()));
            }
            s.queued = Some(!get(6)?.kvs().is_empty());
            if me.create_revision > 0 {
                s.behind = Some(Self::successors_of(answers.get(7..).unwrap_or(&[]), depth));
            } else {
                // joined in this very transaction: its key is the newest of its queue, so
                // every other key of it (and for a planned request every emergency) is ahead:
                // counted, not only read
                let behind = match me.urgency {
                    Urgency::Planned => s.waiting.saturating_sub(1),
                    Urgency::Emergency => n(4)?.saturating_sub(1),
                };
                s.joined_behind = Some(behind);
                s.ahead = s.ahead.max(behind);
            }
        }
        Ok(s)
    }

    /// The group as a node needs it, at one revision: the live members and waiters (counted,
    /// not read), the holders (at most `max` keys), and for a waiter (`me`) how many wait
    /// ahead of it and the `depth` queue keys nearest ahead. Its size does not grow with the
    /// group.
    pub async fn snapshot(
        &mut self,
        keys: &Keys,
        node: &str,
        me: Option<&Me>,
        depth: usize,
    ) -> Result<Snapshot, FleetError> {
        let t = self.timeout;
        let txn = Txn::new().and_then(Self::snapshot_ops(keys, me, node, depth));
        let resp = bounded(t, "read the group", self.client.txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        Self::snapshot_of(keys, me, node, depth, revision, &op_answers(&resp)?)
    }

    /// Join the queue in one transaction: write this node's queue key unless it is there
    /// already, and read the group in the same call. The key's create revision (its place in
    /// the queue) and the snapshot.
    pub async fn join(
        &mut self,
        keys: &Keys,
        node: &str,
        urgency: Urgency,
        value: Vec<u8>,
        lease: i64,
        depth: usize,
    ) -> Result<(Me, Snapshot), FleetError> {
        let t = self.timeout;
        let key = keys.queued(urgency, node);
        // the read rides along: this node's key is the newest of its queue (create revision
        // not known before the answer)
        let joining = Me {
            urgency,
            create_revision: 0,
        };
        let mut ops = vec![TxnOp::put(
            key.as_str(),
            value,
            Some(PutOptions::new().with_lease(lease)),
        )];
        ops.extend(Self::snapshot_ops(keys, Some(&joining), node, depth));
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then(ops)
            .or_else([TxnOp::get(key.as_str(), None)]);
        let resp = bounded(t, "join the queue", self.client.txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let answers = op_answers(&resp)?;
        if resp.succeeded() {
            let me = Me {
                urgency,
                create_revision: revision,
            };
            let snapshot = Self::snapshot_of(
                keys,
                Some(&joining),
                node,
                depth,
                revision,
                answers.get(1..).unwrap_or(&[]),
            )?;
            return Ok((me, snapshot));
        }
        let create_revision = match answers.first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map_or(0, |kv| kv.create_revision()),
            _ => 0,
        };
        if create_revision == 0 {
            return Err(FleetError::Protocol(format!(
                "{key}: gone right after it was written"
            )));
        }
        let me = Me {
            urgency,
            create_revision,
        };
        let snapshot = self.snapshot(keys, node, Some(&me), depth).await?;
        Ok((me, snapshot))
    }

    /// The grant: take slot `index` of `max` in one transaction, if and only if the slot is
    /// free, no holder sits at an index `>= max`, this node's queue key is still the one it
    /// created, and (for a planned request) no emergency joined since `read_revision`.
    /// Granted: the revision, and the waiters right behind this node at that revision (read
    /// in the same call, for the release). Not granted: a fresh snapshot (read in the same
    /// call).
    #[allow(clippy::too_many_arguments)]
    pub async fn grant(
        &mut self,
        keys: &Keys,
        node: &str,
        me: &Me,
        index: usize,
        max: usize,
        value: Vec<u8>,
        lease: i64,
        read_revision: i64,
        depth: usize,
        behind: &[Head],
    ) -> Result<Result<(i64, Successors), Snapshot>, FleetError> {
        let t = self.timeout;
        let queued = keys.queued(me.urgency, node);
        // failed, the slot still free goes to the waiters behind (`free_slot_plan`)
        let offer = free_slot_plan(keys, index, max, behind, std::time::SystemTime::now());
        let plan = grant_plan(
            keys,
            &queued,
            me.urgency,
            me.create_revision,
            index,
            max,
            value,
            lease,
            read_revision,
        );
        let writes = plan.then.len();
        let mut otherwise: Vec<TxnOp> = offer.iter().map(|o| TxnOp::txn(txn_of(o))).collect();
        let read_from = otherwise.len();
        // after the offers: the read shows what they did
        otherwise.extend(Self::snapshot_ops(keys, Some(me), node, depth));
        let txn = txn_reading(&plan, Self::successors_ops(keys, me, depth)).or_else(otherwise);
        let resp = bounded(t, "grant transaction", self.client.txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let answers = op_answers(&resp)?;
        if resp.succeeded() {
            let behind = Self::successors_of(answers.get(writes..).unwrap_or(&[]), depth);
            return Ok(Ok((revision, behind)));
        }
        if read_from > 0 && handed_over(&answers) {
            turn_step!(node, "free_slot_handed", revision);
        }
        let read = answers.get(read_from..).unwrap_or(&[]);
        Self::snapshot_of(keys, Some(me), node, depth, revision, read).map(Err)
    }

    /// Delete queue key `key` if it is still the one created at `create_revision` (a
    /// withdrawn request: never someone else's key of the same name).
    pub async fn delete_own(&mut self, key: &str, create_revision: i64) -> Result<(), FleetError> {
        let t = self.timeout;
        let txn = txn_of(&delete_plan(key, create_revision, false));
        bounded(t, "delete", self.client.txn(txn)).await.map(|_| ())
    }

    /// Rewrite queue key `key` (its place kept) if it is still the one created at
    /// `create_revision`.
    pub async fn requeue(
        &mut self,
        key: &str,
        create_revision: i64,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<(), FleetError> {
        let t = self.timeout;
        let txn = Txn::new()
            .when([Compare::create_revision(
                key,
                CompareOp::Equal,
                create_revision,
            )])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        bounded(t, "rewrite the request", self.client.txn(txn))
            .await
            .map(|_| ())
    }

    /// This node's requests in the queue on `lease` (at most one a queue), in one read: what
    /// a join whose answer was lost left behind.
    pub async fn own_requests(
        &mut self,
        keys: &Keys,
        node: &str,
        lease: i64,
    ) -> Result<Vec<Me>, FleetError> {
        let t = self.timeout;
        let queues = [Urgency::Emergency, Urgency::Planned];
        let txn = Txn::new().and_then(queues.map(|u| {
            TxnOp::get(
                keys.queued(u, node),
                Some(GetOptions::new().with_keys_only()),
            )
        }));
        let resp = bounded(t, "read this node's requests", self.client.txn(txn)).await?;
        let answers = op_answers(&resp)?;
        Ok(queues
            .into_iter()
            .zip(answers.iter())
            .filter_map(|(urgency, a)| match a {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| (urgency, kv)),
                _ => None,
            })
            .filter(|(_, kv)| kv.lease() == lease && kv.create_revision() > 0)
            .map(|(urgency, kv)| Me {
                urgency,
                create_revision: kv.create_revision(),
            })
            .collect())
    }

    /// Withdraw this node's request: delete its queue key if it is still `me`'s; if it is
    /// gone, a releasing holder may have handed this node its slot meanwhile: that slot (on
    /// `lease`), read in the same call.
    pub async fn withdraw(
        &mut self,
        keys: &Keys,
        node: &str,
        me: &Me,
        lease: i64,
    ) -> Result<Option<Held>, FleetError> {
        let t = self.timeout;
        let key = keys.queued(me.urgency, node);
        let txn = txn_of(&delete_plan(&key, me.create_revision, false)).or_else([TxnOp::get(
            keys.holders(),
            Some(GetOptions::new().with_prefix()),
        )]);
        let resp = bounded(t, "withdraw", self.client.txn(txn)).await?;
        if resp.succeeded() {
            return Ok(None);
        }
        let answers = op_answers(&resp)?;
        let Some(TxnOpResponse::Get(g)) = answers.first() else {
            return Err(FleetError::Protocol(
                "the withdrawal's read has no answer".to_owned(),
            ));
        };
        let snap = Snapshot {
            holders: g
                .kvs()
                .iter()
                .filter_map(|kv| Held::parse(keys, raw(kv)))
                .collect(),
            ..Snapshot::default()
        };
        Ok(snap.held_by(node, lease).cloned())
    }

    /// The waiters at the head of the queue (at most `n`, emergencies first) and the live
    /// members (counted), in one read. Linearizable: a serializable read saves the leader's
    /// round but a member that lags by as many handoffs as there are candidates makes every
    /// offer fail and the release fall back to a plain delete (measured: 2-3 % of releases at
    /// 50/5/0 instead of none, and the fall-backs set the handoff's p99).
    pub async fn heads(&mut self, keys: &Keys, n: usize) -> Result<(usize, Vec<Head>), FleetError> {
        let t = self.timeout;
        let first = |u: U| {
            TxnOp::get(
                keys.queue(u),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend)
                        .with_limit(i64::try_from(n).unwrap_or(i64::MAX)),
                ),
            )
        };
        let txn = Txn::new().and_then([
            first(U::Emergency),
            first(U::Planned),
            TxnOp::get(
                keys.members(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            ),
        ]);
        let resp = bounded(t, "read the queue's head", self.client.txn(txn)).await?;
        let answers = op_answers(&resp)?;
        let (Some(TxnOpResponse::Get(e)), Some(TxnOpResponse::Get(p)), Some(TxnOpResponse::Get(m))) =
            (answers.first(), answers.get(1), answers.get(2))
        else {
            return Err(FleetError::Protocol(
                "the queue's read has no answer".to_owned(),
            ));
        };
        let members = usize::try_from(m.count()).unwrap_or(0);
        let heads = e
            .kvs()
            .iter()
            .chain(p.kvs())
            .take(n)
            .filter_map(|kv| Head::of(raw(kv)))
            .collect();
        Ok((members, heads))
    }

    /// Give slot `index` (granted at `grant_revision`) back: read the head of the queue (or
    /// take the waiters read behind this node, `behind`, when they may still be used:
    /// [`Successors::usable`]) and, in one transaction, hand the slot straight to the first
    /// waiter there still waiting ([`handoff_plan`]), or, when none can take it (nobody waits,
    /// the waiters read were served or left meanwhile, someone joined ahead of them, the
    /// budget shrank), delete the holder key if it is still this grant's.
    pub async fn release(
        &mut self,
        keys: &Keys,
        index: usize,
        grant_revision: i64,
        budget: MaxDisruptive,
        behind: Option<&Successors>,
    ) -> Result<Released, FleetError> {
        if let Some((max, heads)) = behind.and_then(|b| b.usable(budget, std::time::Instant::now()))
        {
            turn_step!(self.node.as_str(), "heads_known", grant_revision);
            return self
                .release_to(keys, index, grant_revision, max, heads)
                .await;
        }
        turn_step!(self.node.as_str(), "heads_sent", grant_revision);
        let (members, heads) = self.heads(keys, HANDOFF_CANDIDATES).await?;
        turn_step!(self.node.as_str(), "heads_answered", grant_revision);
        self.release_to(keys, index, grant_revision, budget.slots(members), &heads)
            .await
    }

    /// The release's transaction, to the waiters `heads` as read (in queue order) with the
    /// budget at `max` slots: see [`Connection::release`].
    pub async fn release_to(
        &mut self,
        keys: &Keys,
        index: usize,
        grant_revision: i64,
        max: usize,
        heads: &[Head],
    ) -> Result<Released, FleetError> {
        let t = self.timeout;
        let plan = handoff_plan(
            keys,
            index,
            grant_revision,
            max,
            heads,
            std::time::SystemTime::now(),
        );
        let handing = plan.is_some();
        let plan = plan.unwrap_or_else(|| delete_plan(&keys.holder(index), grant_revision, true));
        turn_step!(self.node.as_str(), "release_sent", grant_revision);
        let resp = bounded(t, "release", self.client.txn(txn_of(&plan))).await?;
        turn_step!(
            self.node.as_str(),
            "release_answered",
            resp.header().map_or(0, |h| h.revision())
        );
        Ok(if handing && handed_over(&op_answers(&resp)?) {
            Released::HandedOver
        } else {
            Released::Freed
        })
    }

    /// Every member key's node and value, and the revision of the read (the storm guard's
    /// count; read only while a disruptive repair asks).
    pub async fn members(
        &mut self,
        keys: &Keys,
    ) -> Result<(i64, Vec<(String, Vec<u8>)>), FleetError> {
        let t = self.timeout;
        let prefix = keys.members();
        let resp = bounded(
            t,
            "read the members",
            self.client
                .get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let members = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let node = keys.node_of(&prefix, kv.key())?;
                Some((node.to_owned(), kv.value().to_vec()))
            })
            .collect();
        Ok((revision, members))
    }

    /// Watch every member key from `since` on (puts and deletes): what keeps a
    /// [`MemberCache`](super::member_cache::MemberCache) read at `since - 1` up to date.
    /// etcd 3.4 serves a watch from a passed revision from its catch-up loop, so its first
    /// events may come up to 100 ms late; none is missed.
    pub async fn watch_members(
        &mut self,
        keys: &Keys,
        since: i64,
    ) -> Result<WatchStream, FleetError> {
        let t = self.timeout;
        let options = WatchOptions::new().with_prefix().with_start_revision(since);
        bounded(
            t,
            "watch the members",
            self.client.watch(keys.members(), Some(options)),
        )
        .await
    }

    /// Watch what `plan` names (deletes only, but the holder keys' puts for the head of the
    /// queue), nothing else of the group, from revision `since`, or from now (None).
    ///
    /// etcd 3.4 serves a watch whose start revision has passed from its unsynced group, which
    /// it catches up every 100 ms, so every event of such a watch may come up to 100 ms late
    /// (the p99 of the handoffs measured when every waiter watched from its read). A watch
    /// from now is in sync at once, and the caller reads again when the created answer's
    /// revision is past its read (nothing is missed between); a waiter far enough back that
    /// its next event cannot come within 100 ms watches from its read instead
    /// ([`watches_from_read`]), and needs no second read.
    pub async fn watch(
        &mut self,
        keys: &Keys,
        plan: &WatchPlan,
        since: Option<i64>,
    ) -> Result<Option<WatchStream>, FleetError> {
        let t = self.timeout;
        let from = |o: WatchOptions| match since {
            Some(revision) => o.with_start_revision(revision),
            None => o,
        };
        let deletes = || from(WatchOptions::new().with_filters([WatchFilterType::NoPut]));
        let mut targets: Vec<(Vec<u8>, WatchOptions)> = Vec::new();
        if plan.handoffs {
            // a slot handed over is a put: every change of the holder keys
            targets.push((
                keys.holders().into_bytes(),
                from(WatchOptions::new().with_prefix()),
            ));
        } else if plan.releases {
            targets.push((keys.holders().into_bytes(), deletes().with_prefix()));
        }
        if let Some(key) = &plan.key {
            targets.push((key.clone(), deletes()));
        }
        let mut targets = targets.into_iter();
        let Some((key, options)) = targets.next() else {
            return Ok(None);
        };
        let mut stream = bounded(t, "watch", self.client.watch(key, Some(options))).await?;
        for (key, options) in targets {
            bounded(t, "watch", stream.watch(key, Some(options))).await?;
        }
        Ok(Some(stream))
    }

    /// Revoke `lease` (its keys go at once).
    pub async fn revoke(&mut self, lease: i64) -> Result<(), FleetError> {
        let t = self.timeout;
        bounded(t, "revoke the lease", self.client.lease_revoke(lease))
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key's bytes never reach a Debug print (a log line, a panic message).
    #[test]
    fn debug_of_tls_material_leaves_the_key_out() {
        let pem = Pem {
            ca: b"-----BEGIN CERTIFICATE-----CA".to_vec(),
            identity: Some((
                b"-----BEGIN CERTIFICATE-----CERT".to_vec(),
                b"-----BEGIN PRIVATE KEY-----SECRETKEYBYTES".to_vec(),
            )),
        };
        let shown = format!("{:?}", TlsMaterial(Some(pem)));
        assert!(!shown.contains("SECRETKEYBYTES"), "{shown}");
        assert!(shown.contains("key redacted"), "{shown}");
    }

    /// An answer etcd never sends but a proxy might (a response op without its response, a
    /// watch event of an unknown type) is an error or skipped, not a panic of the task.
    #[test]
    fn a_malformed_answer_is_an_error_not_a_panic() {
        use etcd_client::proto::{PbEvent, PbResponseOp};
        let op = |response| PbResponseOp { response };
        let txn = |responses| {
            TxnResponse(PbTxnResponse {
                header: None,
                succeeded: true,
                responses,
            })
        };
        let nested = |responses| {
            Some(PbTxnOpResponse::ResponseTxn(PbTxnResponse {
                header: None,
                succeeded: true,
                responses,
            }))
        };
        assert!(op_answers(&txn(vec![op(None)])).is_err());
        assert!(op_answers(&txn(vec![op(nested(vec![op(None)]))])).is_err());
        assert_eq!(
            op_answers(&txn(vec![op(nested(Vec::new()))]))
                .map(|a| a.len())
                .ok(),
            Some(1)
        );
        let event = |r#type| {
            Event(PbEvent {
                r#type,
                kv: None,
                prev_kv: None,
            })
        };
        assert_eq!(is_delete(&event(0)), Some(false));
        assert_eq!(is_delete(&event(1)), Some(true));
        assert_eq!(is_delete(&event(7)), None);
    }

    #[test]
    fn codes_sort_errors_not_their_text() {
        let status = |code| etcd_client::Error::GRpcStatus(tonic::Status::new(code, "x"));
        assert!(matches!(
            classify(&status(tonic::Code::PermissionDenied), false),
            FleetError::Auth(_)
        ));
        assert!(matches!(
            classify(&status(tonic::Code::InvalidArgument), true),
            FleetError::Auth(_)
        ));
        assert!(matches!(
            classify(&status(tonic::Code::Unavailable), false),
            FleetError::Unreachable(_)
        ));
        assert!(matches!(
            classify(&etcd_client::Error::InvalidArgs("e".into()), false),
            FleetError::Config(_)
        ));
    }

    #[test]
    fn a_rustls_error_inside_an_io_error_is_found() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert!(tls_in_chain(Some(&io)));
        let plain = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone");
        assert!(!tls_in_chain(Some(&plain)));
    }

    #[test]
    fn missing_tls_files_are_a_config_error() {
        let files = TlsFiles {
            ca_file: Some("/nonexistent/ca.pem".into()),
            cert_file: None,
            key_file: None,
        };
        assert!(matches!(
            TlsMaterial::load(Some(&files)),
            Err(FleetError::Config(_))
        ));
        assert!(TlsMaterial::load(None).is_ok());
    }
}
