//! Serialise a `SystemTime` as RFC 3339 UTC with second precision (`2026-12-02T14:15:52Z`):
//! the one timestamp format of status.json, the ledger, the bus-bug proof and the fleet's keys
//! (`#[serde(with = "crate::clock::time_format")]`).

use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serializer};

/// Serialise.
pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}

/// RFC 3339 UTC, seconds; a time outside 1970..=9999 is clamped to that range (the
/// formatter would panic on it).
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(super::printable(t)).to_string()
}

/// Deserialise.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_rfc3339_weak(&s).map_err(serde::de::Error::custom)
}

/// The same for an optional time.
pub mod option {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialise.
    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::serialize(t, s),
            None => s.serialize_none(),
        }
    }

    /// Deserialise.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| humantime::parse_rfc3339_weak(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}
