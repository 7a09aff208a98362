//! [`HttpUrl`]: the `kubelet.healthz_url` value, a plain `http://host:port/path` URL, parsed
//! once when the configuration is loaded so the client never meets a bad one.

use std::fmt;

/// A plain `http://host:port/path` URL (kubelet's healthz is never TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Path with query, starting with `/`.
    pub path: String,
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

impl std::str::FromStr for HttpUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| format!("`{s}` is not an http:// URL"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| format!("`{p}` in `{s}` is not a port number"))?;
                (h, port)
            }
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("`{s}` has no host"));
        }
        Ok(HttpUrl {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_url_forms() {
        let u: HttpUrl = "http://localhost:8080".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("localhost", 8080, "/")
        );
        let u: HttpUrl = "http://[::1]:10248/healthz".parse().unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 10248));
        assert!("http://:80/".parse::<HttpUrl>().is_err());
        assert!("http://h:99999/".parse::<HttpUrl>().is_err());
    }
}
