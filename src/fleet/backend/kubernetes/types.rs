//! The API objects backend kubernetes reads and writes, with only the fields it needs
//! (`coordination.k8s.io/v1` Lease, a list of them, `meta/v1` Status), and the errors of its
//! client by kind, decided on the HTTP status and the Status object's machine fields, never on
//! a message's text (pure).

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// The Lease's API group and version.
pub const LEASE_API_VERSION: &str = "coordination.k8s.io/v1";
/// The resource, as RBAC names it.
pub const LEASES: &str = "leases";
/// The API group, as RBAC names it.
pub const COORDINATION: &str = "coordination.k8s.io";

/// A `coordination.k8s.io/v1` Lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Always [`LEASE_API_VERSION`] when written.
    #[serde(default = "lease_api_version")]
    pub api_version: String,
    /// Always `Lease` when written.
    #[serde(default = "lease_kind")]
    pub kind: String,
    /// Name, labels, annotations, resourceVersion.
    pub metadata: ObjectMeta,
    /// Holder and times.
    #[serde(default)]
    pub spec: LeaseSpec,
}

fn lease_api_version() -> String {
    LEASE_API_VERSION.to_owned()
}

fn lease_kind() -> String {
    "Lease".to_owned()
}

/// The part of `metadata` backend kubernetes uses.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// Its namespace (the URL's when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The version a write must name to replace or delete this object (None: a create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// The server's id of the object (never written).
    #[serde(default, skip_serializing)]
    pub uid: Option<String>,
    /// Owners: the holder's Node, so the garbage collector deletes the Lease with the Node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// An owner of an object (here: a Node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// `v1`.
    pub api_version: String,
    /// `Node`.
    pub kind: String,
    /// The Node's name.
    pub name: String,
    /// The Node's uid (a recreated Node of the same name is another owner).
    pub uid: String,
}

/// The Lease's `spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Who holds it (None or empty: nobody).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// How long a holder's claim lasts after its latest renewal, on the reader's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i64>,
    /// When the holder took it (the holder's clock; shown, never compared to ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<String>,
    /// When the holder last renewed it (the holder's clock; shown, never compared to ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// How often the holder changed (kept as read, incremented on a takeover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i64>,
}

impl Lease {
    /// A new Lease `name` (no resourceVersion: for a create).
    pub fn new(name: &str) -> Lease {
        Lease {
            api_version: lease_api_version(),
            kind: lease_kind(),
            metadata: ObjectMeta {
                name: name.to_owned(),
                ..ObjectMeta::default()
            },
            spec: LeaseSpec::default(),
        }
    }

    /// The holder, if any (an empty holderIdentity is nobody).
    pub fn holder(&self) -> Option<&str> {
        self.spec
            .holder_identity
            .as_deref()
            .filter(|h| !h.is_empty())
    }

    /// The resourceVersion ("" when the server gave none).
    pub fn resource_version(&self) -> &str {
        self.metadata.resource_version.as_deref().unwrap_or("")
    }
}

/// A list of Leases.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseList {
    /// The list's own metadata.
    #[serde(default)]
    pub metadata: ListMeta,
    /// The Leases.
    #[serde(default)]
    pub items: Vec<Lease>,
}

/// A list's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    /// The store's version at the read.
    #[serde(default)]
    pub resource_version: Option<String>,
    /// Set when the list is cut by `limit`.
    #[serde(default, rename = "continue")]
    pub continue_token: Option<String>,
}

/// A Kubernetes time with microseconds, as `acquireTime` and `renewTime` take it.
pub fn micro_time(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(crate::clock::printable(t)).to_string()
}

/// The API server's `meta/v1` Status, the body of an error answer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// What the server says (shown only).
    #[serde(default)]
    pub message: String,
    /// The machine-readable reason (`Conflict`, `AlreadyExists`, `Forbidden`, ...).
    #[serde(default)]
    pub reason: String,
    /// Which object.
    #[serde(default)]
    pub details: Option<StatusDetails>,
}

/// `Status.details`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// Its API group.
    #[serde(default)]
    pub group: String,
    /// Its resource (`leases`).
    #[serde(default)]
    pub kind: String,
}

/// What a call asked, for the errors that name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The RBAC verb: `get`, `list`, `create`, `update`, `delete`.
    pub verb: &'static str,
    /// The resource (`leases`, `nodes`).
    pub resource: &'static str,
    /// Its API group (`""` for the core group).
    pub group: &'static str,
    /// The namespace (None: cluster-scoped).
    pub namespace: Option<String>,
    /// The object (None: a list).
    pub name: Option<String>,
}

impl std::fmt::Display for Call {
    /// `update leases.coordination.k8s.io "g-slot-0" in namespace "pleg-guard"`: as RBAC
    /// speaks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(name) = &self.name {
            write!(f, " \"{name}\"")?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, " in namespace \"{ns}\"")?;
        }
        Ok(())
    }
}

/// What went wrong with an API call, by kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    /// 409: the object exists (a create), or it changed since it was read (a stale
    /// resourceVersion): another writer was first.
    #[error("{call}: conflict ({reason}): {message}")]
    Conflict {
        /// The call.
        call: Box<Call>,
        /// `AlreadyExists` for a create, `Conflict` for a stale resourceVersion.
        reason: String,
        /// The server's message.
        message: String,
    },
    /// 404: no such object (or no such namespace).
    #[error("{call}: not found: {message}")]
    NotFound {
        /// The call.
        call: Box<Call>,
        /// The server's message.
        message: String,
    },
    /// 403: the identity may not make this call (RBAC, or an admission webhook).
    #[error("the API server refused {call} to this identity (RBAC: grant the verb \"{verb}\" on \"{resource}\"): {message}", verb = .call.verb, resource = .call.resource)]
    Forbidden {
        /// The call, whose verb and resource RBAC refused.
        call: Box<Call>,
        /// The server's message.
        message: String,
    },
    /// 401: the token or certificate is not accepted (expired, revoked, unknown).
    #[error("the API server does not accept this identity's credentials for {call}: {message}")]
    Unauthorized {
        /// The call.
        call: Box<Call>,
        /// The server's message.
        message: String,
    },
    /// No answer: connect refused, TLS never finished, or no answer within the timeout.
    #[error("API server unreachable for {call}: {message}")]
    Unreachable {
        /// The call.
        call: Box<Call>,
        /// What failed.
        message: String,
    },
    /// 429 or 5xx: the server answered but cannot serve now.
    #[error("API server unavailable for {call} (HTTP {code}): {message}")]
    Unavailable {
        /// The call.
        call: Box<Call>,
        /// The HTTP status.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// TLS failed: the server's certificate is not trusted, or it refused this client's.
    #[error("TLS with the API server failed for {call}: {message}")]
    Tls {
        /// The call.
        call: Box<Call>,
        /// What rustls said.
        message: String,
    },
    /// The credential could not be read (the token file).
    #[error("credentials for {call}: {message}")]
    Credentials {
        /// The call.
        call: Box<Call>,
        /// What failed.
        message: String,
    },
    /// Any other answer (400, 422, ...), or one that is not the JSON asked for.
    #[error("API server answered {call} with HTTP {code}: {message}")]
    Protocol {
        /// The call.
        call: Box<Call>,
        /// The HTTP status (0: the body did not parse).
        code: u16,
        /// What was wrong.
        message: String,
    },
}

impl KubeError {
    /// The error an answer with HTTP status `code` and `body` makes, for `call`.
    pub fn from_answer(call: Call, code: u16, body: &[u8]) -> KubeError {
        let call = Box::new(call);
        let status: Status = serde_json::from_slice(body).unwrap_or_default();
        let message = if status.message.is_empty() {
            String::from_utf8_lossy(body.get(..200).unwrap_or(body)).into_owned()
        } else {
            status.message
        };
        match code {
            409 => KubeError::Conflict {
                call,
                reason: if status.reason.is_empty() {
                    "Conflict".to_owned()
                } else {
                    status.reason
                },
                message,
            },
            404 => KubeError::NotFound { call, message },
            403 => KubeError::Forbidden { call, message },
            401 => KubeError::Unauthorized { call, message },
            429 | 500..=599 => KubeError::Unavailable {
                call,
                code,
                message,
            },
            _ => KubeError::Protocol {
                call,
                code,
                message,
            },
        }
    }

    /// Whether an operator must act (credentials, RBAC, TLS), as opposed to waiting for the
    /// server or trying again.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            KubeError::Forbidden { .. }
                | KubeError::Unauthorized { .. }
                | KubeError::Tls { .. }
                | KubeError::Credentials { .. }
        )
    }

    /// Whether the write may or may not have happened (no answer came back): read before
    /// acting on it.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            KubeError::Unreachable { .. } | KubeError::Unavailable { .. }
        )
    }
}

impl From<KubeError> for crate::fleet::FleetError {
    fn from(e: KubeError) -> Self {
        use crate::fleet::FleetError;
        let text = e.to_string();
        match e {
            KubeError::Forbidden { .. } | KubeError::Unauthorized { .. } => FleetError::Auth(text),
            KubeError::Tls { .. } => FleetError::Tls(text),
            KubeError::Credentials { .. } => FleetError::Config(text),
            KubeError::Unreachable { .. } | KubeError::Unavailable { .. } => {
                FleetError::Unreachable(text)
            }
            KubeError::Conflict { .. }
            | KubeError::NotFound { .. }
            | KubeError::Protocol { .. } => FleetError::Protocol(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(verb: &'static str) -> Call {
        Call {
            verb,
            resource: LEASES,
            group: COORDINATION,
            namespace: Some("pleg-guard".to_owned()),
            name: Some("pool-slot-0".to_owned()),
        }
    }

    /// A Lease as `kubectl get lease -o json` shows it: the fields read, the rest ignored.
    #[test]
    fn a_lease_from_the_api_server_is_read() {
        let json = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"creationTimestamp":"2026-12-07T10:00:00Z","labels":{"pleg-guard.io/group":"pool"},"name":"pool-slot-0","namespace":"pleg-guard","resourceVersion":"4711","uid":"0b0e","managedFields":[{"manager":"x"}]},"spec":{"acquireTime":"2026-12-07T10:00:00.123456Z","holderIdentity":"node-1","leaseDurationSeconds":60,"renewTime":"2026-12-07T10:00:20.000001Z","strategy":"OldestEmulationVersion"}}"#;
        let l: Lease = serde_json::from_str(json).unwrap();
        assert_eq!(l.metadata.name, "pool-slot-0");
        assert_eq!(l.resource_version(), "4711");
        assert_eq!(l.holder(), Some("node-1"));
        assert_eq!(l.spec.lease_duration_seconds, Some(60));
        assert_eq!(l.metadata.uid.as_deref(), Some("0b0e"));
        assert_eq!(l.metadata.labels["pleg-guard.io/group"], "pool");
        let mut empty = l.clone();
        empty.spec.holder_identity = Some(String::new());
        assert_eq!(empty.holder(), None);
        let list: LeaseList = serde_json::from_str(&format!(
            r#"{{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{{"resourceVersion":"4800"}},"items":[{json}]}}"#
        ))
        .unwrap();
        assert_eq!(list.items, vec![l]);
        assert_eq!(list.metadata.resource_version.as_deref(), Some("4800"));
    }

    /// What is written: apiVersion and kind, no empty maps, no uid, the resourceVersion when
    /// replacing.
    #[test]
    fn a_lease_is_written_with_only_what_it_sets() {
        let mut l = Lease::new("pool-slot-1");
        l.metadata.uid = Some("never-written".to_owned());
        l.spec.holder_identity = Some("n1".to_owned());
        l.spec.lease_duration_seconds = Some(30);
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "pool-slot-1"},
                "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 30}
            })
        );
        l.metadata.resource_version = Some("9".to_owned());
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "9");
    }

    #[test]
    fn micro_times_are_what_the_api_takes() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_765_101_600_123_456);
        assert_eq!(micro_time(t), "2025-12-07T10:00:00.123456Z");
    }

    /// Errors by HTTP status and Status.reason; a 403 names the verb and resource this
    /// client asked for.
    #[test]
    fn answers_are_errors_by_kind() {
        let conflict = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Operation cannot be fulfilled on leases.coordination.k8s.io \"pool-slot-0\": the object has been modified","reason":"Conflict","details":{"name":"pool-slot-0","group":"coordination.k8s.io","kind":"leases"},"code":409}"#;
        let e = KubeError::from_answer(call("update"), 409, conflict);
        assert!(
            matches!(&e, KubeError::Conflict { reason, .. } if reason == "Conflict"),
            "{e:?}"
        );
        let exists =
            br#"{"kind":"Status","reason":"AlreadyExists","message":"already exists","code":409}"#;
        assert!(matches!(
            KubeError::from_answer(call("create"), 409, exists),
            KubeError::Conflict { reason, .. } if reason == "AlreadyExists"
        ));
        let forbidden = br#"{"kind":"Status","message":"leases.coordination.k8s.io \"pool-slot-0\" is forbidden: User \"system:serviceaccount:pleg-guard:x\" cannot update resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"pleg-guard\"","reason":"Forbidden","details":{"name":"pool-slot-0","group":"coordination.k8s.io","kind":"leases"},"code":403}"#;
        let e = KubeError::from_answer(call("update"), 403, forbidden);
        assert!(matches!(e, KubeError::Forbidden { .. }));
        assert!(e.is_rejection());
        let text = e.to_string();
        assert!(
            text.contains(
                "update leases.coordination.k8s.io \"pool-slot-0\" in namespace \"pleg-guard\""
            ) && text.contains("grant the verb \"update\" on \"leases\""),
            "{text}"
        );
        assert!(matches!(
            crate::fleet::FleetError::from(e),
            crate::fleet::FleetError::Auth(_)
        ));
        let e = KubeError::from_answer(call("get"), 401, b"Unauthorized");
        assert!(matches!(&e, KubeError::Unauthorized { message, .. } if message == "Unauthorized"));
        assert!(matches!(
            KubeError::from_answer(call("get"), 404, b"{}"),
            KubeError::NotFound { .. }
        ));
        for code in [429, 500, 503, 504] {
            let e = KubeError::from_answer(call("get"), code, b"");
            assert!(e.outcome_unknown() && !e.is_rejection(), "{code}");
        }
        let e = KubeError::from_answer(call("create"), 422, b"{\"message\":\"bad name\"}");
        assert!(
            matches!(&e, KubeError::Protocol { code: 422, message, .. } if message == "bad name")
        );
        let long = vec![b'x'; 5000];
        let e = KubeError::from_answer(call("get"), 400, &long);
        assert!(e.to_string().len() < 400, "a long body is cut");
    }

    #[test]
    fn a_call_reads_as_rbac_speaks() {
        let list = Call {
            verb: "list",
            resource: "nodes",
            group: "",
            namespace: None,
            name: None,
        };
        assert_eq!(list.to_string(), "list nodes");
        assert_eq!(
            call("delete").to_string(),
            "delete leases.coordination.k8s.io \"pool-slot-0\" in namespace \"pleg-guard\""
        );
    }
}
