//! A typed Lease client on the stack the project already has (hyper 1 over tokio-rustls with
//! ring): get, create, replace (PUT naming the resourceVersion read), list by label selector,
//! delete with a resourceVersion precondition; and the two Node reads the backend needs (a
//! Node's uid for the Leases' ownerReference, the group's Nodes counted).
//!
//! One HTTP/1.1 connection, kept while it works and opened again when it does not; every call
//! has a timeout over all of it (connect, TLS, request, the whole answer) and an answer cap.
//! A call that timed out drops its connection: what was left on it is unknown. Errors are
//! [`KubeError`]s by kind ([`super::types`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::time::Instant;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::kubeconfig::{self, Kubeconfig, Server, Token};
use super::types::{COORDINATION, Call, KubeError, LEASES, Lease, LeaseList};

/// Where the system's CA bundle lives (Debian, then RHEL), used when the kubeconfig names no
/// certificate authority.
const SYSTEM_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// The largest answer to a list (about 10,000 Leases of a group); any other answer: 1 MiB.
pub const LIST_CAP: usize = 8 * 1024 * 1024;
/// The largest answer to any other call.
pub const ANSWER_CAP: usize = 1024 * 1024;
/// How long a token read from `tokenFile` is used before the file is read again (client-go
/// reads it every minute; a projected token is rotated well before it expires).
pub const TOKEN_REREAD: Duration = Duration::from_secs(60);

/// The TLS client configuration a kubeconfig asks for.
pub fn tls_config(k: &Kubeconfig) -> Result<rustls::ClientConfig, String> {
    let ca = match &k.ca {
        Some(pem) => pem.clone(),
        None => SYSTEM_BUNDLES
            .iter()
            .find_map(|p| kubeconfig::read_capped(std::path::Path::new(p)).ok())
            .ok_or_else(|| {
                "the kubeconfig names no certificate authority and there is no system CA bundle"
                    .to_owned()
            })?,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca) {
        let cert = cert.map_err(|e| format!("certificate authority: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("certificate authority: {e}"))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let mut config = match &k.identity {
        Some(id) => {
            let chain = CertificateDer::pem_slice_iter(&id.cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client certificate: {e}"))?;
            let key =
                PrivateKeyDer::from_pem_slice(&id.key).map_err(|e| format!("client key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Whether a rustls error is somewhere in `e`'s chain (also inside `io::Error`s, whose
/// `source()` skips the error they wrap).
fn tls_in_chain(mut e: Option<&(dyn std::error::Error + 'static)>) -> bool {
    while let Some(err) = e {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            if tls_in_chain(Some(inner)) {
                return true;
            }
        }
        e = err.source();
    }
    false
}

/// `s` percent-encoded for a URL's query or path segment (all but RFC 3986's unreserved).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The client of one API server, as one identity, for one namespace's Leases.
pub struct Client {
    server: Server,
    tls: Arc<rustls::ClientConfig>,
    token: Option<Token>,
    /// The token file's latest good read and when it was read.
    token_cache: Mutex<Option<(String, Instant)>>,
    namespace: String,
    timeout: Duration,
    conn: Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server.url)
            .field("namespace", &self.namespace)
            .field("token", &self.token)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A Node, the fields read.
#[derive(Debug, Clone, Default, Deserialize)]
struct NodeMeta {
    #[serde(default)]
    metadata: super::types::ObjectMeta,
}

/// A list of Nodes, metadata only.
#[derive(Debug, Clone, Default, Deserialize)]
struct NodeList {
    #[serde(default)]
    items: Vec<NodeMeta>,
}

/// A SelfSubjectAccessReview's answer, the field read.
#[derive(Debug, Clone, Default, Deserialize)]
struct AccessReview {
    #[serde(default)]
    status: AccessStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct AccessStatus {
    #[serde(default)]
    allowed: bool,
}

impl Client {
    /// A client for `kubeconfig`'s server and identity, for Leases in `namespace`; every call
    /// gives up after `timeout`.
    pub fn new(k: &Kubeconfig, namespace: &str, timeout: Duration) -> Result<Client, String> {
        Ok(Client {
            server: k.server.clone(),
            tls: Arc::new(tls_config(k)?),
            token: k.token.clone(),
            token_cache: Mutex::new(None),
            namespace: namespace.to_owned(),
            timeout,
            conn: Mutex::new(None),
        })
    }

    /// The namespace of the Leases.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn lease_call(&self, verb: &'static str, name: Option<&str>) -> Call {
        Call {
            verb,
            resource: LEASES,
            group: COORDINATION,
            namespace: Some(self.namespace.clone()),
            name: name.map(str::to_owned),
        }
    }

    fn leases_path(&self, name: Option<&str>) -> String {
        let mut path = format!(
            "{}/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.server.base_path,
            percent_encode(&self.namespace)
        );
        if let Some(n) = name {
            path.push('/');
            path.push_str(&percent_encode(n));
        }
        path
    }

    /// The Lease `name` (None: there is none).
    pub async fn get(&self, name: &str) -> Result<Option<Lease>, KubeError> {
        let call = self.lease_call("get", Some(name));
        let path = self.leases_path(Some(name));
        match self.send(&call, Method::GET, &path, None, ANSWER_CAP).await {
            Ok(body) => decode(&call, &body).map(Some),
            Err(KubeError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Create `lease` (a [`KubeError::Conflict`] with reason `AlreadyExists` when it exists).
    pub async fn create(&self, lease: &Lease) -> Result<Lease, KubeError> {
        let call = self.lease_call("create", Some(&lease.metadata.name));
        let mut body = lease.clone();
        body.metadata.resource_version = None;
        let json = encode(&call, &body)?;
        let path = self.leases_path(None);
        let answer = self
            .send(&call, Method::POST, &path, Some(json), ANSWER_CAP)
            .await?;
        decode(&call, &answer)
    }

    /// Replace `lease`, which must carry the resourceVersion it was read at: a
    /// [`KubeError::Conflict`] when it changed since.
    pub async fn replace(&self, lease: &Lease) -> Result<Lease, KubeError> {
        let call = self.lease_call("update", Some(&lease.metadata.name));
        if lease
            .metadata
            .resource_version
            .as_deref()
            .is_none_or(str::is_empty)
        {
            return Err(KubeError::Protocol {
                call: Box::new(call),
                code: 0,
                message: "a replace must name the resourceVersion it read".to_owned(),
            });
        }
        let json = encode(&call, lease)?;
        let path = self.leases_path(Some(&lease.metadata.name));
        let answer = self
            .send(&call, Method::PUT, &path, Some(json), ANSWER_CAP)
            .await?;
        decode(&call, &answer)
    }

    /// The namespace's Leases with label `selector` (`key=value`), every page.
    pub async fn list(&self, selector: &str) -> Result<LeaseList, KubeError> {
        let call = self.lease_call("list", None);
        let mut all = LeaseList::default();
        let mut next: Option<String> = None;
        loop {
            let mut path = format!(
                "{}?labelSelector={}&limit=500",
                self.leases_path(None),
                percent_encode(selector)
            );
            if let Some(token) = &next {
                path.push_str("&continue=");
                path.push_str(&percent_encode(token));
            }
            let body = self.send(&call, Method::GET, &path, None, LIST_CAP).await?;
            let page: LeaseList = decode(&call, &body)?;
            all.items.extend(page.items);
            if all.metadata.resource_version.is_none() {
                all.metadata.resource_version = page.metadata.resource_version;
            }
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(t) => next = Some(t),
                None => return Ok(all),
            }
        }
    }

    /// Delete the Lease `name` if it is still at `resource_version` (a
    /// [`KubeError::Conflict`] when it changed, [`KubeError::NotFound`] when it is gone).
    pub async fn delete(&self, name: &str, resource_version: &str) -> Result<(), KubeError> {
        let call = self.lease_call("delete", Some(name));
        let body = serde_json::json!({
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"resourceVersion": resource_version},
        });
        let json = encode(&call, &body)?;
        let path = self.leases_path(Some(name));
        self.send(&call, Method::DELETE, &path, Some(json), ANSWER_CAP)
            .await
            .map(drop)
    }

    /// The uid of Node `name` (None: no such Node).
    pub async fn node_uid(&self, name: &str) -> Result<Option<String>, KubeError> {
        let call = Call {
            verb: "get",
            resource: "nodes",
            group: "",
            namespace: None,
            name: Some(name.to_owned()),
        };
        let path = format!(
            "{}/api/v1/nodes/{}",
            self.server.base_path,
            percent_encode(name)
        );
        match self.send(&call, Method::GET, &path, None, ANSWER_CAP).await {
            Ok(body) => Ok(decode::<NodeMeta>(&call, &body)?.metadata.uid),
            Err(KubeError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// How many Nodes carry label `selector` (their metadata only is asked for).
    pub async fn count_nodes(&self, selector: &str) -> Result<usize, KubeError> {
        let call = Call {
            verb: "list",
            resource: "nodes",
            group: "",
            namespace: None,
            name: None,
        };
        let path = format!(
            "{}/api/v1/nodes?labelSelector={}",
            self.server.base_path,
            percent_encode(selector)
        );
        let body = self.send(&call, Method::GET, &path, None, LIST_CAP).await?;
        Ok(decode::<NodeList>(&call, &body)?.items.len())
    }

    /// Whether this identity may `verb` `resource` (of API group `group`, in `namespace` or
    /// cluster-wide), as the API server's authorizer says (a SelfSubjectAccessReview, which
    /// every authenticated identity may make).
    pub async fn may(
        &self,
        verb: &'static str,
        resource: &'static str,
        group: &'static str,
        namespace: Option<&str>,
    ) -> Result<bool, KubeError> {
        let call = Call {
            verb: "create",
            resource: "selfsubjectaccessreviews",
            group: "authorization.k8s.io",
            namespace: None,
            name: None,
        };
        let mut attributes =
            serde_json::json!({"verb": verb, "resource": resource, "group": group});
        if let Some(ns) = namespace {
            attributes["namespace"] = serde_json::Value::from(ns);
        }
        let body = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        });
        let json = encode(&call, &body)?;
        let path = format!(
            "{}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            self.server.base_path
        );
        let answer = self
            .send(&call, Method::POST, &path, Some(json), ANSWER_CAP)
            .await?;
        let review: AccessReview = decode(&call, &answer)?;
        Ok(review.status.allowed)
    }

    /// The bearer token to send now (the file's, read again after [`TOKEN_REREAD`]).
    fn bearer(&self, call: &Call) -> Result<Option<String>, KubeError> {
        match &self.token {
            None => Ok(None),
            Some(Token::Inline(t)) => Ok(Some(t.clone())),
            Some(Token::File(file)) => {
                let mut cache = self
                    .token_cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some((t, at)) = cache.as_ref() {
                    if at.elapsed() < TOKEN_REREAD {
                        return Ok(Some(t.clone()));
                    }
                }
                match kubeconfig::read_token_file(file) {
                    Ok(t) => {
                        *cache = Some((t.clone(), Instant::now()));
                        Ok(Some(t))
                    }
                    // A rotation in progress: the token read last is still good for a while.
                    Err(_) if cache.is_some() => Ok(cache.as_ref().map(|(t, _)| t.clone())),
                    Err(reason) => Err(KubeError::Credentials {
                        call: Box::new(call.clone()),
                        message: format!("tokenFile {}: {reason}", file.display()),
                    }),
                }
            }
        }
    }

    /// Forget the token file's read (after a 401: it may have been rotated).
    fn forget_token(&self) {
        *self
            .token_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    async fn connect(&self, call: &Call) -> Result<SendRequest<Full<Bytes>>, KubeError> {
        let unreachable = |message: String| KubeError::Unreachable {
            call: Box::new(call.clone()),
            message,
        };
        let tcp = tokio::net::TcpStream::connect((self.server.host.as_str(), self.server.port))
            .await
            .map_err(|e| unreachable(format!("{}: {e}", self.server.url)))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(self.server.tls_server_name.clone()).map_err(|_| {
            KubeError::Tls {
                call: Box::new(call.clone()),
                message: format!(
                    "\"{}\" is not a name a certificate can be checked against",
                    self.server.tls_server_name
                ),
            }
        })?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| {
                if e.get_ref().is_some_and(|i| tls_in_chain(Some(i))) {
                    KubeError::Tls {
                        call: Box::new(call.clone()),
                        message: format!("{}: {e}", self.server.url),
                    }
                } else {
                    unreachable(format!("{}: {e}", self.server.url))
                }
            })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| unreachable(format!("{}: {e}", self.server.url)))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// One call, within the timeout: the answer's body on a 2xx, the error by kind otherwise.
    async fn send(
        &self,
        call: &Call,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        cap: usize,
    ) -> Result<Bytes, KubeError> {
        let bearer = self.bearer(call)?;
        let fut = self.exchange(call, method, path, body, bearer, cap);
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => {
                if matches!(r, Err(KubeError::Unauthorized { .. })) {
                    self.forget_token();
                }
                r
            }
            Err(_) => Err(KubeError::Unreachable {
                call: Box::new(call.clone()),
                message: format!("no answer within {:?}", self.timeout),
            }),
        }
    }

    async fn exchange(
        &self,
        call: &Call,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        bearer: Option<String>,
        cap: usize,
    ) -> Result<Bytes, KubeError> {
        let kept = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let mut sender = match kept {
            Some(mut s) => {
                if s.ready().await.is_ok() {
                    s
                } else {
                    self.connect(call).await?
                }
            }
            None => self.connect(call).await?,
        };
        let host = if self.server.port == 443 {
            self.server.host.clone()
        } else if self.server.host.contains(':') {
            format!("[{}]:{}", self.server.host, self.server.port)
        } else {
            format!("{}:{}", self.server.host, self.server.port)
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, host)
            .header(http::header::ACCEPT, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("pleg-guard/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(t) = bearer {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| KubeError::Protocol {
                call: Box::new(call.clone()),
                code: 0,
                message: format!("request: {e}"),
            })?;
        let unreachable = |message: String| KubeError::Unreachable {
            call: Box::new(call.clone()),
            message,
        };
        let answer = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(format!("{}: {e}", self.server.url)))?;
        let status = answer.status();
        let bytes = Limited::new(answer.into_body(), cap)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    KubeError::Protocol {
                        call: Box::new(call.clone()),
                        code: status.as_u16(),
                        message: format!("the answer is larger than {cap} bytes: refused"),
                    }
                } else {
                    unreachable(format!("{}: the answer: {e}", self.server.url))
                }
            })?
            .to_bytes();
        // The connection served a whole exchange: keep it for the next call.
        *self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sender);
        if status.is_success() {
            return Ok(bytes);
        }
        Err(KubeError::from_answer(
            call.clone(),
            status.as_u16(),
            &bytes,
        ))
    }
}

fn encode<T: serde::Serialize>(call: &Call, value: &T) -> Result<Vec<u8>, KubeError> {
    serde_json::to_vec(value).map_err(|e| KubeError::Protocol {
        call: Box::new(call.clone()),
        code: 0,
        message: format!("cannot encode the request: {e}"),
    })
}

fn decode<T: serde::de::DeserializeOwned>(call: &Call, body: &[u8]) -> Result<T, KubeError> {
    serde_json::from_slice(body).map_err(|e| KubeError::Protocol {
        call: Box::new(call.clone()),
        code: 0,
        message: format!("the answer is not the JSON asked for: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_names_are_encoded() {
        assert_eq!(
            percent_encode("pleg-guard.io/group=pool-a"),
            "pleg-guard.io%2Fgroup%3Dpool-a"
        );
        assert_eq!(percent_encode("a b&c"), "a%20b%26c");
    }

    fn client(server: &str, token: Option<Token>, timeout: Duration) -> Client {
        let text = format!(
            "current-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: t\n",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                include_str!("testdata/client.pem")
            )
        );
        let mut k = Kubeconfig::parse(std::path::Path::new("/k"), &text).unwrap();
        k.token = token;
        Client::new(&k, "pleg-guard", timeout).unwrap()
    }

    #[test]
    fn paths_name_the_namespace_and_the_lease() {
        let c = client("https://h:6443/prefix/", None, Duration::from_secs(1));
        assert_eq!(
            c.leases_path(Some("pool-slot-0")),
            "/prefix/apis/coordination.k8s.io/v1/namespaces/pleg-guard/leases/pool-slot-0"
        );
        assert_eq!(
            c.leases_path(None),
            "/prefix/apis/coordination.k8s.io/v1/namespaces/pleg-guard/leases"
        );
    }

    /// A server that never answers is Unreachable within the timeout; a refused connect at
    /// once.
    #[tokio::test]
    async fn no_answer_is_unreachable_within_the_timeout() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let c = client(
            &format!("https://127.0.0.1:{port}"),
            None,
            Duration::from_millis(300),
        );
        let started = std::time::Instant::now();
        let e = c.get("x").await.unwrap_err();
        assert!(matches!(e, KubeError::Unreachable { .. }), "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        drop(silent);
        let e = c.list("a=b").await.unwrap_err();
        assert!(matches!(e, KubeError::Unreachable { .. }), "{e:?}");
    }

    /// A server whose certificate the CA did not sign is a TLS error, not unreachable.
    #[tokio::test]
    async fn an_untrusted_server_is_a_tls_error() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Not TLS at all: the handshake fails inside rustls.
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        let c = client(
            &format!("https://127.0.0.1:{port}"),
            None,
            Duration::from_secs(2),
        );
        let e = c.get("x").await.unwrap_err();
        assert!(matches!(e, KubeError::Tls { .. }), "{e:?}");
        assert!(e.is_rejection());
    }

    #[tokio::test]
    async fn a_missing_token_file_is_a_credentials_error() {
        let c = client(
            "https://127.0.0.1:1",
            Some(Token::File("/nonexistent/token".into())),
            Duration::from_secs(1),
        );
        let e = c.get("x").await.unwrap_err();
        assert!(matches!(e, KubeError::Credentials { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_replace_without_a_resource_version_is_refused_before_sending() {
        let c = client("https://127.0.0.1:1", None, Duration::from_secs(1));
        let e = c.replace(&Lease::new("x")).await.unwrap_err();
        assert!(matches!(e, KubeError::Protocol { code: 0, .. }), "{e:?}");
    }
}
