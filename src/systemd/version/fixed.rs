//! Known-fixed distribution builds ([`FixedBuild`]): rules such as `219-65` or
//! `219-62.el7_6.8` that say which builds carry the backported fix.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::build::parse_token;
use super::{DEFAULT_FIXED_BUILDS, SystemdBuild, UNPLACED_RELEASE_TAGS, VersionError, rpmvercmp};

/// A known-fixed distribution build, parsed from configuration strings such as
/// `"219-62.el7_6.8"`, `"219-65"` or `"239-16"` (`V-R`: upstream version, `-`, release).
///
/// Matching semantics (see [`FixedBuild::matches`]):
///
/// * A rule `V-R` matches a build with the same upstream version `V` whose release compares
///   `>= R` under [`rpmvercmp`]. So `219-65` matches `219-67.el7` and `219-78.el7_9.9` but not
///   `219-62.el7_6.8` or `219-57.el7`.
/// * When `R` names a z-stream, i.e. contains `_` followed later by a `.` (as in `62.el7_6.8`),
///   only builds of that same stream count: the build's release must start with the stream
///   prefix (`62.el7_6.`) and the remainder must compare `>=` the rule's remainder (`8`). So
///   `219-62.el7_6.8` matches `219-62.el7_6.10` but not `219-62.el7_6.7`, `219-62.el7` or
///   `219-30.el7_3.9`.
/// * A build without a known release matches no rule.
/// * A build whose release carries one of [`UNPLACED_RELEASE_TAGS`] (Amazon Linux 2's `.amzn`)
///   matches only rules that carry the same tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FixedBuild {
    upstream: String,
    release: String,
    /// For z-stream rules: the release prefix up to and including the `.` after the `_`, and
    /// the remainder that builds of the stream must reach.
    stream: Option<(String, String)>,
}

impl FixedBuild {
    /// Returns the parsed list of [`DEFAULT_FIXED_BUILDS`].
    pub fn defaults() -> Vec<FixedBuild> {
        DEFAULT_FIXED_BUILDS
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect()
    }

    /// The upstream version part of the rule, e.g. `"219"`.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The release part of the rule, e.g. `"62.el7_6.8"`.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// Whether `build` is at least this known-fixed build (see the type documentation).
    pub fn matches(&self, build: &SystemdBuild) -> bool {
        if rpmvercmp(&build.upstream_full, &self.upstream) != Ordering::Equal {
            return false;
        }
        let Some(release) = build.release.as_deref() else {
            return false;
        };
        if UNPLACED_RELEASE_TAGS
            .iter()
            .any(|tag| release.contains(tag) && !self.release.contains(tag))
        {
            return false;
        }
        match &self.stream {
            Some((prefix, rest)) => release
                .strip_prefix(prefix.as_str())
                .is_some_and(|r| rpmvercmp(r, rest) != Ordering::Less),
            None => rpmvercmp(release, &self.release) != Ordering::Less,
        }
    }
}

impl fmt::Display for FixedBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.upstream, self.release)
    }
}

impl FromStr for FixedBuild {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| VersionError::BadFixedBuild {
            input: s.to_owned(),
            reason: reason.to_owned(),
        };
        let t = s.trim();
        if t.is_empty() {
            return Err(bad("empty string"));
        }
        let build = parse_token(t, t, false).map_err(|e| match e {
            VersionError::Malformed { reason, .. } => bad(&reason),
            _ => bad("not a systemd version"),
        })?;
        let Some(release) = build.release else {
            return Err(bad(
                "missing distribution release (expected VERSION-RELEASE, e.g. 219-65)",
            ));
        };
        let stream = release.find('_').and_then(|u| {
            release[u..].find('.').map(|d| {
                let split = u + d + 1;
                (release[..split].to_owned(), release[split..].to_owned())
            })
        });
        if stream
            .as_ref()
            .is_some_and(|(_, rest)| !rest.chars().any(|c| c.is_ascii_alphanumeric()))
        {
            return Err(bad("z-stream release has no build number after the stream"));
        }
        Ok(FixedBuild {
            upstream: build.upstream_full,
            release,
            stream,
        })
    }
}

impl TryFrom<String> for FixedBuild {
    type Error = VersionError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<FixedBuild> for String {
    fn from(f: FixedBuild) -> String {
        f.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_build_parsing() {
        type Case<'a> = (&'a str, &'a str, &'a str, Option<(&'a str, &'a str)>);
        let ok: &[Case] = &[
            (
                "219-62.el7_6.8",
                "219",
                "62.el7_6.8",
                Some(("62.el7_6.", "8")),
            ),
            ("219-65", "219", "65", None),
            ("239-16", "239", "16", None),
            (" 239-16 ", "239", "16", None),
            (
                "219-73.el7_8.5",
                "219",
                "73.el7_8.5",
                Some(("73.el7_8.", "5")),
            ),
            ("219-62.el7_6", "219", "62.el7_6", None),
        ];
        for &(input, upstream, release, stream) in ok {
            let fb: FixedBuild = input
                .parse()
                .unwrap_or_else(|e| panic!("{input:?} failed: {e}"));
            assert_eq!(fb.upstream(), upstream);
            assert_eq!(fb.release(), release);
            assert_eq!(
                fb.stream.as_ref().map(|(p, r)| (p.as_str(), r.as_str())),
                stream
            );
            assert_eq!(fb.to_string(), input.trim());
        }
        for bad in [
            "",
            "  ",
            "219",
            "242-rc2",
            "abc-1",
            "219-",
            "-65",
            "219-6 5",
            "219-62.el7_6.",
        ] {
            match bad.parse::<FixedBuild>() {
                Err(e @ VersionError::BadFixedBuild { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains(&format!("{bad:?}")),
                        "{msg} should name {bad:?}"
                    );
                }
                other => panic!("{bad:?} should be rejected, got {other:?}"),
            }
        }
        assert_eq!(FixedBuild::defaults().len(), DEFAULT_FIXED_BUILDS.len());
    }

    #[test]
    fn fixed_build_serde() {
        let v: Result<Vec<FixedBuild>, _> = serde_json::from_str(r#"["219-65","239-16"]"#);
        let v = v.unwrap_or_default();
        assert_eq!(v.len(), 2);
        assert_eq!(
            serde_json::to_string(&v).ok().as_deref(),
            Some(r#"["219-65","239-16"]"#)
        );
        assert!(serde_json::from_str::<FixedBuild>(r#""nonsense""#).is_err());
    }
}
