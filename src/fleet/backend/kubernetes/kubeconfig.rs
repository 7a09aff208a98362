//! The kubeconfig backend kubernetes reads its API server and identity from (`[fleet]
//! kubeconfig`), resolved once at start into what the client needs (pure but for reading the
//! files it names).
//!
//! What is read, as client-go reads it: `current-context` → its cluster's `server`,
//! `certificate-authority` or `certificate-authority-data` (neither: the system's CA bundle),
//! `tls-server-name`; its user's `token` or `tokenFile` (the file wins, as in client-go, and is
//! read again while the daemon runs: a rotated projected token is picked up), and
//! `client-certificate(-data)` with `client-key(-data)`. Relative paths are relative to the
//! kubeconfig's own folder.
//!
//! What is refused, with a message that says so: `exec` plugins and `auth-provider` (not
//! supported yet), `username`/`password` (the API server dropped basic auth in 1.19),
//! impersonation (`as`), `proxy-url`, a plain `http://` server (the token would cross the
//! network in cleartext), and `insecure-skip-tls-verify` (anyone on the path could then hand
//! out or take slots in this node's name). A kubeconfig without a user credential is refused too:
//! anonymous requests cannot write Leases.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use yaml_rust2::{Yaml, YamlLoader};

/// The largest kubeconfig (and file it names) read: a kubeconfig with a few inline
/// certificates is a few KiB.
pub const MAX_FILE: u64 = 1024 * 1024;

/// Why a kubeconfig cannot be used, by kind; every message names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    /// The kubeconfig, or a file it names, cannot be read.
    #[error("kubeconfig {path}: cannot read {what}: {reason}")]
    Unreadable {
        /// The kubeconfig.
        path: PathBuf,
        /// What was read (`the file`, `certificate-authority /x`, ...).
        what: String,
        /// Why not.
        reason: String,
    },
    /// Not YAML, or not the shape of a kubeconfig.
    #[error("kubeconfig {path}: {what}")]
    Invalid {
        /// The kubeconfig.
        path: PathBuf,
        /// What is wrong, naming the field.
        what: String,
    },
    /// A way to authenticate or connect this version does not support yet.
    #[error("kubeconfig {path}: {what} is not supported yet: {hint}")]
    Unsupported {
        /// The kubeconfig.
        path: PathBuf,
        /// The field (`users[].user.exec`, ...).
        what: String,
        /// What to use instead.
        hint: String,
    },
    /// `insecure-skip-tls-verify`, or a plain `http://` server.
    #[error("kubeconfig {path}: {what}: refused")]
    Insecure {
        /// The kubeconfig.
        path: PathBuf,
        /// What is insecure.
        what: String,
    },
}

/// The API server: `https://host:port/base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The URL as written (for messages).
    pub url: String,
    /// Host name or IP address (without brackets).
    pub host: String,
    /// Port (443 unless the URL says).
    pub port: u16,
    /// A path the API is served under (`""` for none; never ends with `/`).
    pub base_path: String,
    /// The name the server's certificate is checked against (`tls-server-name`, else the host).
    pub tls_server_name: String,
}

/// The bearer token: inline, or a file read again while the daemon runs.
#[derive(Clone, PartialEq, Eq)]
pub enum Token {
    /// `token`.
    Inline(String),
    /// `tokenFile`.
    File(PathBuf),
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Inline(_) => f.write_str("Inline(redacted)"),
            Token::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

/// A client certificate chain and its key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    /// The certificate chain.
    pub cert: Vec<u8>,
    /// The private key.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Identity(certificate {} bytes, key redacted)",
            self.cert.len()
        )
    }
}

/// A kubeconfig resolved: what the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubeconfig {
    /// The file it came from.
    pub source: PathBuf,
    /// `current-context`.
    pub context: String,
    /// Its cluster's API server.
    pub server: Server,
    /// The CA bundle the server's certificate is checked against, PEM (None: the system's).
    pub ca: Option<Vec<u8>>,
    /// The user's bearer token.
    pub token: Option<Token>,
    /// The user's client certificate.
    pub identity: Option<Identity>,
}

/// Read a file a kubeconfig uses, at most [`MAX_FILE`] bytes.
pub fn read_capped(file: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let f = std::fs::File::open(file).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!("larger than {MAX_FILE} bytes"));
    }
    Ok(bytes)
}

/// Read a token file: its first line, trimmed; empty is an error.
pub fn read_token_file(file: &Path) -> Result<String, String> {
    let bytes = read_capped(file)?;
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    let token = text.trim();
    if token.is_empty() {
        return Err("empty".to_owned());
    }
    if token.contains(['\n', '\r']) || !token.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err("not one line of printable characters".to_owned());
    }
    Ok(token.to_owned())
}

impl Kubeconfig {
    /// Read and resolve the kubeconfig at `path`.
    pub fn load(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
        let bytes = read_capped(path).map_err(|reason| KubeconfigError::Unreadable {
            path: path.to_owned(),
            what: "the file".to_owned(),
            reason,
        })?;
        let text = String::from_utf8(bytes).map_err(|_| KubeconfigError::Invalid {
            path: path.to_owned(),
            what: "not UTF-8 text".to_owned(),
        })?;
        let dir = path.parent().unwrap_or(Path::new("/"));
        Reader { path, dir }.resolve(&text)
    }

    /// Resolve kubeconfig `text` as if read from `path` (relative paths in it are relative to
    /// `path`'s folder).
    pub fn parse(path: &Path, text: &str) -> Result<Kubeconfig, KubeconfigError> {
        let dir = path.parent().unwrap_or(Path::new("/"));
        Reader { path, dir }.resolve(text)
    }
}

/// One kubeconfig being resolved.
struct Reader<'a> {
    path: &'a Path,
    dir: &'a Path,
}

impl Reader<'_> {
    fn invalid(&self, what: impl Into<String>) -> KubeconfigError {
        KubeconfigError::Invalid {
            path: self.path.to_owned(),
            what: what.into(),
        }
    }

    fn unsupported(&self, what: &str, hint: &str) -> KubeconfigError {
        KubeconfigError::Unsupported {
            path: self.path.to_owned(),
            what: what.to_owned(),
            hint: hint.to_owned(),
        }
    }

    fn resolve(&self, text: &str) -> Result<Kubeconfig, KubeconfigError> {
        let docs =
            YamlLoader::load_from_str(text).map_err(|e| self.invalid(format!("not YAML: {e}")))?;
        let doc = match docs.as_slice() {
            [doc] if doc.is_hash() => doc,
            [] => return Err(self.invalid("empty")),
            [_] => return Err(self.invalid("not a mapping of kubeconfig fields")),
            _ => return Err(self.invalid("more than one YAML document")),
        };
        if let Some(kind) = self.string(doc, "kind", "kind")? {
            if kind != "Config" {
                return Err(self.invalid(format!("`kind` is \"{kind}\", not \"Config\"")));
            }
        }
        let context = self
            .string(doc, "current-context", "current-context")?
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                self.invalid("no `current-context`: pleg-guard uses the current context only")
            })?;
        let ctx = self.named(doc, "contexts", "context", &context)?;
        let cluster_name = self
            .string(ctx, "cluster", "contexts[].context.cluster")?
            .filter(|c| !c.is_empty())
            .ok_or_else(|| self.invalid(format!("context \"{context}\" names no cluster")))?;
        let user_name = self
            .string(ctx, "user", "contexts[].context.user")?
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                self.invalid(format!(
                    "context \"{context}\" names no user: anonymous requests cannot write Leases"
                ))
            })?;
        let cluster = self.named(doc, "clusters", "cluster", &cluster_name)?;
        let (server, ca) = self.cluster(cluster, &cluster_name)?;
        let user = self.named(doc, "users", "user", &user_name)?;
        let (token, identity) = self.user(user, &user_name)?;
        Ok(Kubeconfig {
            source: self.path.to_owned(),
            context,
            server,
            ca,
            token,
            identity,
        })
    }

    /// `node[key]` as a string (None: absent or null); another type is an error naming
    /// `field`.
    fn string(
        &self,
        node: &Yaml,
        key: &str,
        field: &str,
    ) -> Result<Option<String>, KubeconfigError> {
        match &node[key] {
            Yaml::BadValue | Yaml::Null => Ok(None),
            Yaml::String(s) => Ok(Some(s.clone())),
            _ => Err(self.invalid(format!("`{field}` is not a string"))),
        }
    }

    /// The `inner` mapping of the entry of list `list` whose `name` is `name`.
    fn named<'y>(
        &self,
        doc: &'y Yaml,
        list: &str,
        inner: &str,
        name: &str,
    ) -> Result<&'y Yaml, KubeconfigError> {
        let entries = match &doc[list] {
            Yaml::Array(a) => a.as_slice(),
            Yaml::BadValue | Yaml::Null => &[],
            _ => return Err(self.invalid(format!("`{list}` is not a list"))),
        };
        let mut found = entries.iter().filter(|e| e["name"].as_str() == Some(name));
        let entry = found
            .next()
            .ok_or_else(|| self.invalid(format!("no entry named \"{name}\" in `{list}`")))?;
        if found.next().is_some() {
            return Err(self.invalid(format!("two entries named \"{name}\" in `{list}`")));
        }
        match &entry[inner] {
            v @ Yaml::Hash(_) => Ok(v),
            _ => Err(self.invalid(format!(
                "`{list}` entry \"{name}\" has no `{inner}` mapping"
            ))),
        }
    }

    /// A path field, relative to the kubeconfig's folder.
    fn path_field(
        &self,
        node: &Yaml,
        key: &str,
        field: &str,
    ) -> Result<Option<PathBuf>, KubeconfigError> {
        Ok(self
            .string(node, key, field)?
            .filter(|p| !p.is_empty())
            .map(|p| self.dir.join(p)))
    }

    fn read(&self, file: &Path, field: &str) -> Result<Vec<u8>, KubeconfigError> {
        read_capped(file).map_err(|reason| KubeconfigError::Unreadable {
            path: self.path.to_owned(),
            what: format!("`{field}` {}", file.display()),
            reason,
        })
    }

    fn base64(
        &self,
        node: &Yaml,
        key: &str,
        field: &str,
    ) -> Result<Option<Vec<u8>>, KubeconfigError> {
        let Some(text) = self.string(node, key, field)?.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let compact: String = text.split_ascii_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map(Some)
            .map_err(|e| self.invalid(format!("`{field}` is not base64: {e}")))
    }

    /// Inline `<key>-data` or the file `<key>`: at most one of them.
    fn data_or_file(
        &self,
        node: &Yaml,
        key: &str,
        section: &str,
    ) -> Result<Option<Vec<u8>>, KubeconfigError> {
        let data_key = format!("{key}-data");
        let data_field = format!("{section}.{data_key}");
        let file_field = format!("{section}.{key}");
        let data = self.base64(node, &data_key, &data_field)?;
        let file = self.path_field(node, key, &file_field)?;
        match (data, file) {
            (Some(_), Some(_)) => Err(self.invalid(format!(
                "both `{data_field}` and `{file_field}` are set: keep one"
            ))),
            (Some(d), None) => Ok(Some(d)),
            (None, Some(f)) => self.read(&f, &file_field).map(Some),
            (None, None) => Ok(None),
        }
    }

    fn cluster(&self, c: &Yaml, name: &str) -> Result<(Server, Option<Vec<u8>>), KubeconfigError> {
        match &c["insecure-skip-tls-verify"] {
            Yaml::Boolean(true) => {
                return Err(KubeconfigError::Insecure {
                    path: self.path.to_owned(),
                    what: format!(
                        "cluster \"{name}\" sets `insecure-skip-tls-verify`: anyone on the path could hand out this node's slots or take them in its name; give its CA in `certificate-authority(-data)`"
                    ),
                });
            }
            Yaml::Boolean(false) | Yaml::BadValue | Yaml::Null => {}
            _ => {
                return Err(self.invalid(
                    "`clusters[].cluster.insecure-skip-tls-verify` is not true or false",
                ));
            }
        }
        if self
            .string(c, "proxy-url", "clusters[].cluster.proxy-url")?
            .is_some_and(|p| !p.is_empty())
        {
            return Err(self.unsupported(
                "`clusters[].cluster.proxy-url`",
                "reach the API server directly",
            ));
        }
        let url = self
            .string(c, "server", "clusters[].cluster.server")?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| self.invalid(format!("cluster \"{name}\" has no `server`")))?;
        let tls_name = self
            .string(c, "tls-server-name", "clusters[].cluster.tls-server-name")?
            .filter(|s| !s.is_empty());
        let server = self.server(&url, tls_name)?;
        let ca = self.data_or_file(c, "certificate-authority", "clusters[].cluster")?;
        if let Some(pem) = &ca {
            if CertificateDer::pem_slice_iter(pem).next().is_none() {
                return Err(self.invalid(format!(
                    "cluster \"{name}\": the certificate authority holds no PEM certificate"
                )));
            }
        }
        Ok((server, ca))
    }

    fn server(&self, url: &str, tls_name: Option<String>) -> Result<Server, KubeconfigError> {
        let uri = url
            .parse::<http::Uri>()
            .map_err(|e| self.invalid(format!("`server` \"{url}\" is not a URL: {e}")))?;
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") => {
                return Err(KubeconfigError::Insecure {
                    path: self.path.to_owned(),
                    what: format!(
                        "`server` \"{url}\" is plain http: the token would cross the network in cleartext; use the API server's https:// URL"
                    ),
                });
            }
            _ => return Err(self.invalid(format!("`server` \"{url}\" is not an https:// URL"))),
        }
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| self.invalid(format!("`server` \"{url}\" has no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if uri.query().is_some() {
            return Err(self.invalid(format!("`server` \"{url}\" has a query")));
        }
        let base_path = uri.path().trim_end_matches('/').to_owned();
        Ok(Server {
            url: url.to_owned(),
            tls_server_name: tls_name.unwrap_or_else(|| host.clone()),
            host,
            port: uri.port_u16().unwrap_or(443),
            base_path,
        })
    }

    fn user(
        &self,
        u: &Yaml,
        name: &str,
    ) -> Result<(Option<Token>, Option<Identity>), KubeconfigError> {
        if !matches!(u["exec"], Yaml::BadValue | Yaml::Null) {
            return Err(self.unsupported(
                &format!("user \"{name}\": `exec` (a credential plugin)"),
                "give the user a ServiceAccount token (`token` or `tokenFile`) or a client certificate; see packaging/kubernetes/",
            ));
        }
        if !matches!(u["auth-provider"], Yaml::BadValue | Yaml::Null) {
            return Err(self.unsupported(
                &format!("user \"{name}\": `auth-provider`"),
                "give the user a ServiceAccount token (`token` or `tokenFile`) or a client certificate; see packaging/kubernetes/",
            ));
        }
        for key in ["username", "password"] {
            if self
                .string(u, key, &format!("users[].user.{key}"))?
                .is_some_and(|v| !v.is_empty())
            {
                return Err(self.unsupported(
                    &format!("user \"{name}\": `{key}` (basic authentication)"),
                    "the API server removed basic authentication in 1.19; use a token or a client certificate",
                ));
            }
        }
        for key in ["as", "as-uid", "as-groups", "as-user-extra"] {
            if !matches!(u[key], Yaml::BadValue | Yaml::Null) {
                return Err(self.unsupported(
                    &format!("user \"{name}\": `{key}` (impersonation)"),
                    "give pleg-guard an identity of its own",
                ));
            }
        }
        let token_file = self.path_field(u, "tokenFile", "users[].user.tokenFile")?;
        let token = match token_file {
            Some(file) => {
                read_token_file(&file).map_err(|reason| KubeconfigError::Unreadable {
                    path: self.path.to_owned(),
                    what: format!("`users[].user.tokenFile` {}", file.display()),
                    reason,
                })?;
                Some(Token::File(file))
            }
            None => match self.string(u, "token", "users[].user.token")? {
                Some(t) if !t.trim().is_empty() => {
                    let t = t.trim();
                    if !t.bytes().all(|b| (0x21..0x7f).contains(&b)) {
                        return Err(self.invalid(format!(
                            "user \"{name}\": `token` is not one line of printable characters"
                        )));
                    }
                    Some(Token::Inline(t.to_owned()))
                }
                _ => None,
            },
        };
        let cert = self.data_or_file(u, "client-certificate", "users[].user")?;
        let key = self.data_or_file(u, "client-key", "users[].user")?;
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                if CertificateDer::pem_slice_iter(&cert).next().is_none() {
                    return Err(self.invalid(format!(
                        "user \"{name}\": the client certificate holds no PEM certificate"
                    )));
                }
                if PrivateKeyDer::from_pem_slice(&key).is_err() {
                    return Err(self.invalid(format!(
                        "user \"{name}\": the client key holds no PEM private key"
                    )));
                }
                Some(Identity { cert, key })
            }
            (None, None) => None,
            _ => {
                return Err(self.invalid(format!(
                    "user \"{name}\": `client-certificate(-data)` and `client-key(-data)` go together: set both or neither"
                )));
            }
        };
        if token.is_none() && identity.is_none() {
            return Err(self.invalid(format!(
                "user \"{name}\" has no credential (`token`, `tokenFile` or a client certificate): anonymous requests cannot write Leases"
            )));
        }
        Ok((token, identity))
    }
}

#[cfg(test)]
#[path = "kubeconfig_tests.rs"]
mod tests;
