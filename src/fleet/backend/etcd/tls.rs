//! etcd's TLS material and the pre-flight handshake that tells a certificate problem from an
//! unreachable endpoint before the gRPC channel hides it.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::fleet::{FleetError, TlsFiles};

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
pub struct TlsMaterial(pub(super) Option<Pem>);

#[derive(Clone)]
pub(super) struct Pem {
    pub(super) ca: Vec<u8>,
    pub(super) identity: Option<(Vec<u8>, Vec<u8>)>,
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

    pub(super) fn rustls_config(pem: &Pem) -> Result<rustls::ClientConfig, FleetError> {
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
pub(super) fn tls_in_chain(mut e: Option<&(dyn StdError + 'static)>) -> bool {
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
pub(super) async fn preflight(
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
