//! Is the running systemd affected by the bus bug (systemd#11809)? The version policy
//! ([`crate::systemd::version`]) reads version strings; this module weighs its verdict against
//! what this boot has *shown*, because evidence beats version strings:
//!
//! - a `systemd-bus-wedge` (the bus answers, PID 1 on it does not, PID 1 on its private socket
//!   does) is the bug's own signature: it proves the running build affected, whatever its
//!   version says (an unknown or mis-patched build). The proof is remembered for the rest of
//!   the boot in the state directory ([`ProofFile`]), so later decisions (the serial forecast,
//!   the next wedge) do not wait for it again;
//! - a bus serial that wrapped proves the running sd-bus fixed (since v242 it continues at 2^31
//!   instead of refusing to send).
//!
//! [`weigh`] is pure; [`ProofFile`] and [`boot_id`] are the thin file edge.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::systemd::version::Verdict;

/// The file in the state directory that holds the proof.
pub const PROOF_FILE: &str = "bus-bug-proof.json";

/// Where `/proc` tells the current boot's id.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// A `systemd-bus-wedge` seen on this boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WedgeProof {
    /// The boot it was seen on (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// When the wedge was first seen.
    #[serde(with = "crate::clock::time_format")]
    pub seen_at: SystemTime,
    /// The build the version policy looked at, if known.
    #[serde(default)]
    pub systemd_version: Option<String>,
    /// What the probes saw.
    #[serde(default)]
    pub detail: String,
}

/// What decided whether the build is affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// Only the version policy.
    #[default]
    VersionPolicy,
    /// A `systemd-bus-wedge` was seen on this boot: affected.
    BusWedgeSeen,
    /// PID 1's bus serial wrapped: fixed.
    SerialWrapped,
}

/// The weighed verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weighed {
    /// Affected or not, with the reason in words.
    pub verdict: Verdict,
    /// What decided it.
    pub evidence: Evidence,
}

/// Weigh the version policy's verdict against this boot's evidence. A wrapped serial is the
/// stronger proof (it cannot happen on an affected build; a wedge-like signature could in
/// principle come from a PID 1 busy on the bus for another reason).
pub fn weigh(policy: Verdict, proof: Option<&WedgeProof>, serial_wrapped: bool) -> Weighed {
    if serial_wrapped {
        return Weighed {
            verdict: Verdict::NotAffected {
                reason: "PID 1's bus serial wrapped past 2^32: its sd-bus is fixed".to_owned(),
            },
            evidence: Evidence::SerialWrapped,
        };
    }
    match (proof, &policy) {
        (Some(p), Verdict::NotAffected { reason }) => Weighed {
            verdict: Verdict::Affected {
                reason: format!(
                    "the systemd-bus-wedge signature was seen on this boot at {} (the version policy alone says: {reason})",
                    crate::clock::time_format::rfc3339(p.seen_at)
                ),
            },
            evidence: Evidence::BusWedgeSeen,
        },
        (Some(_), Verdict::Affected { .. }) => Weighed {
            verdict: policy,
            evidence: Evidence::BusWedgeSeen,
        },
        (None, _) => Weighed {
            verdict: policy,
            evidence: Evidence::VersionPolicy,
        },
    }
}

/// Why the proof file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a proof.
    #[error("{path}: not a bus-bug proof ({source}); it is ignored and replaced at the next wedge")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
}

/// The proof's file in the state directory.
#[derive(Debug, Clone)]
pub struct ProofFile {
    path: PathBuf,
}

impl ProofFile {
    /// The proof file in `state_directory`.
    pub fn new(state_directory: &Path) -> Self {
        ProofFile {
            path: state_directory.join(PROOF_FILE),
        }
    }

    /// Where the proof is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The proof for `boot_id`, if one was saved on this boot. A proof from another boot is
    /// no proof (the build may have been upgraded since).
    pub fn load(&self, boot_id: &str) -> Result<Option<WedgeProof>, ProofError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ProofError::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let proof: WedgeProof =
            serde_json::from_slice(&bytes).map_err(|source| ProofError::Corrupt {
                path: self.path.clone(),
                source,
            })?;
        Ok((proof.boot_id == boot_id).then_some(proof))
    }

    /// Save the proof atomically.
    pub fn save(&self, proof: &WedgeProof) -> Result<(), ProofError> {
        let io = |source| ProofError::Io {
            path: self.path.clone(),
            source,
        };
        let json = serde_json::to_vec_pretty(proof)
            .map_err(std::io::Error::other)
            .map_err(io)?;
        crate::ledger::write_atomically(&self.path, &json).map_err(io)
    }
}

/// This boot's id, or None when `/proc` does not tell it (a proof is then kept for the
/// daemon's lifetime only).
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string(BOOT_ID_PATH)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn fixed() -> Verdict {
        Verdict::NotAffected {
            reason: "252.39-1~deb12u2 >= 242".into(),
        }
    }

    fn proof(boot: &str) -> WedgeProof {
        WedgeProof {
            boot_id: boot.into(),
            seen_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            systemd_version: Some("252.39-1~deb12u2".into()),
            detail: "bus unresponsive, private ok".into(),
        }
    }

    #[test]
    fn a_wedge_seen_on_this_boot_overrides_a_fixed_version() {
        let w = weigh(fixed(), Some(&proof("b")), false);
        assert!(w.verdict.is_affected());
        assert_eq!(w.evidence, Evidence::BusWedgeSeen);
        assert!(w.verdict.reason().contains("systemd-bus-wedge"), "{w:?}");
        assert!(w.verdict.reason().contains(">= 242"), "{w:?}");
    }

    #[test]
    fn without_evidence_the_policy_stands() {
        assert_eq!(weigh(fixed(), None, false).verdict, fixed());
        let affected = Verdict::Affected {
            reason: "219 < 242".into(),
        };
        let w = weigh(affected.clone(), None, false);
        assert_eq!((w.verdict, w.evidence), (affected, Evidence::VersionPolicy));
    }

    #[test]
    fn a_wrapped_serial_proves_the_build_fixed() {
        let affected = Verdict::Affected {
            reason: "version unknown".into(),
        };
        let w = weigh(affected, Some(&proof("b")), true);
        assert!(!w.verdict.is_affected());
        assert_eq!(w.evidence, Evidence::SerialWrapped);
    }

    #[test]
    fn proof_file_round_trips_and_keeps_to_its_boot() {
        let dir = std::env::temp_dir().join(format!("pg-proof-{}", std::process::id()));
        let file = ProofFile::new(&dir);
        assert!(file.load("b1").unwrap().is_none(), "no file: no proof");
        file.save(&proof("b1")).unwrap();
        assert_eq!(file.load("b1").unwrap(), Some(proof("b1")));
        assert!(file.load("b2").unwrap().is_none(), "another boot: no proof");
        std::fs::write(dir.join(PROOF_FILE), b"{\"boot_id\": 7").unwrap();
        let e = file.load("b1").unwrap_err();
        assert!(matches!(e, ProofError::Corrupt { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
