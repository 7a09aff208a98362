//! kubelet's `/healthz` endpoint: one plain HTTP/1.0 GET (kubelet's healthz is never TLS),
//! at most 64 KiB of answer read. `Ok` only for a 200; a refusal (nothing listens: no
//! kubelet, or not up yet) is `Refused`, an answer that is not HTTP `Protocol`, any other
//! status `Failed`, I/O failures the kind of their `io::ErrorKind`.
//!
//! The fixture tests beside it (`tests.rs`) serve healthz answers from a fake kubelet on
//! loopback, without root.

#[cfg(test)]
pub(crate) mod tests;
mod url;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Error, ErrorKind};

pub use url::HttpUrl;

/// Why kubelet's healthz did not say ok.
#[derive(Debug, thiserror::Error)]
pub enum HealthzError {
    /// Nothing listens there (no kubelet, or not up yet).
    #[error("connect to {url}: {source}")]
    Refused {
        /// The URL.
        url: String,
        /// The refusal.
        source: std::io::Error,
    },
    /// Connecting, sending or reading failed otherwise.
    #[error("{url}: {source}")]
    Io {
        /// The URL.
        url: String,
        /// The error.
        source: std::io::Error,
    },
    /// It answered with an HTTP status other than 200.
    #[error("{url} answered {status:?} {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status line.
        status: String,
        /// The start of the body.
        body: String,
    },
    /// It answered something that is not an HTTP status line.
    #[error("{url} answered {status:?} {body}")]
    NotHttp {
        /// The URL.
        url: String,
        /// The first line of the answer.
        status: String,
        /// The start of the body.
        body: String,
    },
}

impl HealthzError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            HealthzError::Refused { .. } => ErrorKind::Refused,
            HealthzError::Io { source, .. } => super::io_kind(source).unwrap_or(ErrorKind::Failed),
            HealthzError::Status { .. } => ErrorKind::Failed,
            HealthzError::NotHttp { .. } => ErrorKind::Protocol,
        }
    }
}

impl From<HealthzError> for Error {
    fn from(e: HealthzError) -> Self {
        Error::new(e.kind(), e)
    }
}

/// GET the healthz URL with plain HTTP/1.0: for a 200, the start of the body (or `200`
/// when it is empty).
pub async fn healthz(url: &HttpUrl) -> Result<String, Error> {
    Ok(get(url).await?)
}

async fn get(url: &HttpUrl) -> Result<String, HealthzError> {
    let io = |source| HealthzError::Io {
        url: url.to_string(),
        source,
    };
    let mut stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::ConnectionRefused {
                HealthzError::Refused {
                    url: url.to_string(),
                    source,
                }
            } else {
                io(source)
            }
        })?;
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: pleg-guard\r\n\r\n",
        url.path, url.host
    );
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    let mut response = Vec::with_capacity(512);
    (&mut stream)
        .take(64 * 1024)
        .read_to_end(&mut response)
        .await
        .map_err(io)?;
    let text = String::from_utf8_lossy(&response);
    let status_line = text.lines().next().unwrap_or("");
    let code = status_line.split_whitespace().nth(1).unwrap_or("");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).trim();
    if code == "200" {
        return Ok(if body.is_empty() {
            "200".to_owned()
        } else {
            body.chars().take(40).collect()
        });
    }
    let url = url.to_string();
    let status = status_line.to_owned();
    let body = body.chars().take(80).collect();
    if is_status_line(status_line) {
        Err(HealthzError::Status { url, status, body })
    } else {
        Err(HealthzError::NotHttp { url, status, body })
    }
}

/// Whether `line` is an HTTP status line: `HTTP/<version> <three digits>[ reason]`.
fn is_status_line(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let version = words.next().unwrap_or("");
    let code = words.next().unwrap_or("");
    version.starts_with("HTTP/") && code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit())
}
