//! Parsing of systemd versions and the decision whether a build suffers from systemd issue 11809.
//!
//! systemd issue 11809 (D-Bus message-serial overflow) makes PID 1 stop answering on the system
//! bus after a long uptime with heavy D-Bus traffic. It was fixed upstream in v242 (v242-rc2
//! already carries the fix) and backported by distributions: RHEL/CentOS 7 in `219-62.el7_6.8`
//! (and later 7.6.z builds) and in `219-65` onwards, RHEL 8 from `239-16` onwards. A bare
//! "version < 242" test is therefore wrong on patched RHEL builds, so this module parses both the
//! running manager's `Version` D-Bus property and the installed package version, and compares the
//! distribution release against a list of known-fixed builds using rpm's version comparison.
//!
//! Checked for a backport besides RHEL (README, "Supported distributions"): Ubuntu 18.04
//! (`237-3ubuntu10.*`) and Debian 10 (`241-7~deb10u*`): no backport found, so no rule, and both
//! stay affected. Amazon Linux 2: `219-57.amzn2.0.12`'s changelog has no backport; the later
//! `219-78.amzn2.0.x` rebuilds of RHEL 7.9 could not be placed, so RHEL's rules do not apply to
//! `.amzn` releases ([`UNPLACED_RELEASE_TAGS`]) and they stay affected unless a rule names one.
//!
//! Everything here is pure: no I/O, no panics on any input.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod rpmvercmp;
pub use rpmvercmp::rpmvercmp;

/// The first upstream systemd release that contains the fix for issue 11809.
pub const FIXED_UPSTREAM: u32 = 242;

/// Distribution builds known to carry a backport of the fix, in [`FixedBuild`] syntax.
///
/// * `219-62.el7_6.8`: the RHEL/CentOS 7.6 z-stream build with the backport (and later 7.6.z
///   builds such as `219-62.el7_6.9`).
/// * `219-65`: RHEL/CentOS 7.7 and later (`219-67.el7`, `219-73.el7_8.5`, `219-78.el7_9.9`, …).
/// * `239-16`: RHEL 8 (`239-58.el8`, `239-68.el8_7.4`, …).
pub const DEFAULT_FIXED_BUILDS: &[&str] = &["219-62.el7_6.8", "219-65", "239-16"];

/// Release tags of distributions that rebuild RHEL's systemd under the same version and release
/// numbers but whose changelogs could not be checked for the backport: a build whose release
/// carries such a tag matches only rules that carry it too (say `219-78.amzn2.0.22`), never a
/// plain RHEL rule such as `219-65`. So Amazon Linux 2's `219-78.amzn2.0.x` stays affected until
/// a build is known to be fixed.
pub const UNPLACED_RELEASE_TAGS: &[&str] = &[".amzn"];

/// Errors produced while parsing systemd versions or known-fixed build rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The input was empty or only whitespace.
    #[error("empty systemd version string")]
    Empty,
    /// The input is not a recognisable systemd version.
    #[error("malformed systemd version {input:?}: {reason}")]
    Malformed {
        /// The offending input, as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A known-fixed build rule (configuration) could not be parsed.
    #[error("invalid known-fixed systemd build {input:?}: {reason}")]
    BadFixedBuild {
        /// The offending rule string, as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn malformed(input: &str, reason: impl Into<String>) -> VersionError {
    VersionError::Malformed {
        input: input.to_owned(),
        reason: reason.into(),
    }
}

/// A parsed systemd build: upstream version plus, when known, the distribution release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemdBuild {
    /// Upstream major version, e.g. `219`, `252`.
    pub upstream: u32,
    /// Full upstream version including point release or pre-release, e.g. `"252.39"`,
    /// `"242-rc2"`, `"219"`.
    pub upstream_full: String,
    /// Distribution release part, e.g. `"62.el7_6.8"`, `"1~deb12u2"`; `None` when unknown.
    pub release: Option<String>,
    /// The trimmed input this build was parsed from.
    pub raw: String,
}

impl fmt::Display for SystemdBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.release {
            Some(r) => write!(f, "{}-{}", self.upstream_full, r),
            None => f.write_str(&self.upstream_full),
        }
    }
}

/// Characters allowed inside an upstream version or a release (besides ASCII alphanumerics).
fn is_version_punct(c: char) -> bool {
    matches!(c, '.' | '~' | '+' | '_' | '^')
}

/// Returns true when `s` starts with `rc` followed by at least one digit (a `-rcN` pre-release).
fn starts_with_rc(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    lower
        .strip_prefix("rc")
        .and_then(|r| r.chars().next())
        .is_some_and(|c| c.is_ascii_digit())
}

/// Parses one version token such as `219`, `242-rc2`, `252.39-1~deb12u2`, `v256.7-1.fc41` or
/// (with `allow_epoch`) `1:252.38-1`. `raw` is used for error messages and the `raw` field.
fn parse_token(tok: &str, raw: &str, allow_epoch: bool) -> Result<SystemdBuild, VersionError> {
    let mut tok = tok.trim();
    if tok.is_empty() {
        return Err(VersionError::Empty);
    }
    if tok.chars().any(char::is_whitespace) {
        return Err(malformed(raw, "unexpected whitespace inside the version"));
    }
    let epoch_split = if allow_epoch {
        tok.split_once(':')
    } else {
        None
    };
    if let Some((epoch, rest)) = epoch_split {
        if epoch.is_empty() || !epoch.chars().all(|c| c.is_ascii_digit()) {
            return Err(malformed(raw, "epoch before ':' is not a number"));
        }
        tok = rest;
    }
    if let Some(rest) = tok
        .strip_prefix(['v', 'V'])
        .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    {
        tok = rest;
    }
    let digits_end = tok.find(|c: char| !c.is_ascii_digit()).unwrap_or(tok.len());
    if digits_end == 0 {
        return Err(malformed(
            raw,
            "does not start with an upstream version number",
        ));
    }
    let upstream: u32 = tok[..digits_end]
        .parse()
        .map_err(|_| malformed(raw, "upstream version number is out of range"))?;

    // Find where the upstream version ends: at the first '-' that does not introduce "-rcN".
    let mut upstream_end = tok.len();
    let mut search_from = digits_end;
    while let Some(pos) = tok[search_from..].find('-') {
        let at = search_from + pos;
        if starts_with_rc(&tok[at + 1..]) {
            search_from = at + 1;
        } else {
            upstream_end = at;
            break;
        }
    }
    let upstream_full = &tok[..upstream_end];
    if let Some(bad) = upstream_full
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || is_version_punct(c) || c == '-'))
    {
        return Err(malformed(
            raw,
            format!("unexpected character {bad:?} in the upstream version"),
        ));
    }
    let release = if upstream_end < tok.len() {
        let rel = &tok[upstream_end + 1..];
        if rel.is_empty() {
            return Err(malformed(raw, "empty release after '-'"));
        }
        if let Some(bad) = rel
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || is_version_punct(c) || c == '-'))
        {
            return Err(malformed(
                raw,
                format!("unexpected character {bad:?} in the release"),
            ));
        }
        if !rel.chars().any(|c| c.is_ascii_alphanumeric()) {
            return Err(malformed(raw, "release contains no letters or digits"));
        }
        Some(rel.to_owned())
    } else {
        None
    };
    Ok(SystemdBuild {
        upstream,
        upstream_full: upstream_full.to_owned(),
        release,
        raw: raw.to_owned(),
    })
}

/// Returns the first non-blank line of `s`, trimmed.
fn first_line(s: &str) -> &str {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// Parses PID 1's `Version` D-Bus property (`org.freedesktop.systemd1.Manager.Version`).
///
/// Accepted forms include `219`, `241`, `242-rc2`, `239 (239-58.el8)`, `252.39-1~deb12u2`,
/// `255.4-1ubuntu8` and `v256.7-1.fc41`. The function is lenient: a leading `v` or `systemd `
/// is ignored, surrounding whitespace is trimmed and only the first non-blank line is used (so
/// the first line of `systemctl --version`, `systemd 252 (252.39-1~deb12u2)`, works too). In the
/// parenthesised form the part inside the parentheses supplies the distribution release when its
/// upstream major matches the outer version; otherwise (or if it cannot be parsed) the outer
/// version is used alone.
pub fn parse_manager_version(s: &str) -> Result<SystemdBuild, VersionError> {
    let line = first_line(s);
    if line.is_empty() {
        return Err(VersionError::Empty);
    }
    let mut body = line;
    if let Some(rest) = body
        .get(..8)
        .filter(|p| p.eq_ignore_ascii_case("systemd "))
        .and_then(|_| body.get(8..))
    {
        body = rest.trim_start();
    }
    match body.split_once('(') {
        Some((outer, rest)) => {
            let inner = rest
                .strip_suffix(')')
                .ok_or_else(|| malformed(line, "unbalanced parenthesis"))?;
            if inner.contains(['(', ')']) {
                return Err(malformed(line, "nested parentheses"));
            }
            if outer.trim().is_empty() {
                return Err(malformed(line, "no version before the parenthesis"));
            }
            let outer_build = parse_token(outer, line, false)?;
            match parse_token(inner, line, true) {
                Ok(inner_build) if inner_build.upstream == outer_build.upstream => Ok(inner_build),
                _ => Ok(outer_build),
            }
        }
        None => {
            if body.contains(')') {
                return Err(malformed(line, "unbalanced parenthesis"));
            }
            parse_token(body, line, true)
        }
    }
}

/// Parses the installed distribution package version of systemd.
///
/// This is what `rpm -q --qf '%{VERSION}-%{RELEASE}' systemd` (`219-62.el7_6.8`) or
/// `dpkg-query -W -f '${Version}' systemd` (`252.38-1~deb12u1`, possibly with an epoch such as
/// `1:252.38-1`, which is dropped) prints. Messages such as `package systemd is not installed`
/// are rejected as malformed.
pub fn parse_package_version(s: &str) -> Result<SystemdBuild, VersionError> {
    let line = first_line(s);
    if line.is_empty() {
        return Err(VersionError::Empty);
    }
    parse_token(line, line, true)
}

/// Combines the running manager's version and the installed package version into the best
/// description of the systemd that is actually running.
///
/// * The running manager's version is authoritative for *what is running*: the PID 1 binary may
///   predate a package upgrade that has not been re-executed yet. So if the upstream majors
///   differ, the manager's version wins.
/// * If the manager itself reports a distribution release (e.g. RHEL 8's `239 (239-58.el8)`),
///   that release describes the running binary precisely and is kept, even when the package
///   differs.
/// * Otherwise (e.g. RHEL 7 reports a bare `219`), the package version is preferred when its
///   upstream major equals the manager's, because it supplies the release needed to recognise a
///   backported fix. Caveat: a same-major package update not yet re-executed is then judged by
///   the package; daemon-reexec would load exactly that binary, so the verdict describes the
///   state after the (harmless) cure.
/// * If only one of the two is known, it is returned; if neither is, `None`.
pub fn combine(
    manager: Option<SystemdBuild>,
    package: Option<SystemdBuild>,
) -> Option<SystemdBuild> {
    match (manager, package) {
        (Some(m), Some(p)) => {
            if m.upstream != p.upstream || m.release.is_some() || p.release.is_none() {
                Some(m)
            } else {
                Some(p)
            }
        }
        (m, p) => m.or(p),
    }
}

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

/// Whether a systemd build is affected by issue 11809, with a human-readable reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The build is (or, for an unknown version, is assumed to be) affected.
    Affected {
        /// Why the build is considered affected.
        reason: String,
    },
    /// The build carries the fix.
    NotAffected {
        /// Why the build is considered fixed.
        reason: String,
    },
}

impl Verdict {
    /// True for [`Verdict::Affected`].
    pub fn is_affected(&self) -> bool {
        matches!(self, Verdict::Affected { .. })
    }

    /// The human-readable reason, whichever the verdict.
    pub fn reason(&self) -> &str {
        match self {
            Verdict::Affected { reason } | Verdict::NotAffected { reason } => reason,
        }
    }
}

/// Decides whether `build` is affected by systemd issue 11809.
///
/// * upstream `>=` [`FIXED_UPSTREAM`] (242, including `242-rc2`) → not affected;
/// * a rule in `fixed` matches (see [`FixedBuild`]) → not affected, the reason names the rule;
/// * upstream `< 242` without release information, or with no matching rule → affected;
/// * unknown build (`None`) → affected with reason `"version unknown"`.
///
/// The last point means a `when = "affected"` policy still allows `systemctl daemon-reexec` when
/// the version cannot be read: this deliberately fails towards the cure, because daemon-reexec
/// is harmless on any systemd while a wedged PID 1 is not.
pub fn assess(build: Option<&SystemdBuild>, fixed: &[FixedBuild]) -> Verdict {
    let Some(build) = build else {
        return Verdict::Affected {
            reason: "version unknown".to_owned(),
        };
    };
    if build.upstream >= FIXED_UPSTREAM {
        return Verdict::NotAffected {
            reason: format!("systemd {build} includes the upstream fix (systemd {FIXED_UPSTREAM})"),
        };
    }
    if let Some(rule) = fixed.iter().find(|r| r.matches(build)) {
        return Verdict::NotAffected {
            reason: format!(
                "systemd {build} carries the backported fix (known-fixed build {rule})"
            ),
        };
    }
    let same_upstream: Vec<String> = fixed
        .iter()
        .filter(|r| rpmvercmp(r.upstream(), &build.upstream_full) == Ordering::Equal)
        .map(ToString::to_string)
        .collect();
    let backports = if same_upstream.is_empty() {
        format!("no known backport for {}", build.upstream_full)
    } else {
        format!("backport {}", same_upstream.join(" / "))
    };
    let reason = if build.release.is_none() {
        format!(
            "systemd {build} predates the fix (upstream {FIXED_UPSTREAM}; {backports}) and its \
             distribution release is unknown, so a backport cannot be confirmed"
        )
    } else {
        format!("systemd {build} predates the fix (upstream {FIXED_UPSTREAM}; {backports})")
    };
    Verdict::Affected { reason }
}

/// Identify the running systemd from PID 1's `Version` property and the package database's
/// version (either may be unknown), and assess it. Unparsable strings count as unknown.
pub fn identify(
    manager_version: Option<&str>,
    package_version: Option<&str>,
    fixed: &[FixedBuild],
) -> (Option<SystemdBuild>, Verdict) {
    let manager = manager_version.and_then(|v| parse_manager_version(v).ok());
    let package = package_version.and_then(|v| parse_package_version(v).ok());
    let build = combine(manager, package);
    let verdict = assess(build.as_ref(), fixed);
    (build, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(upstream: u32, full: &str, release: Option<&str>, raw: &str) -> SystemdBuild {
        SystemdBuild {
            upstream,
            upstream_full: full.to_owned(),
            release: release.map(str::to_owned),
            raw: raw.to_owned(),
        }
    }

    #[test]
    fn manager_versions_parse() {
        let cases: &[(&str, u32, &str, Option<&str>)] = &[
            ("219", 219, "219", None),
            ("241", 241, "241", None),
            ("242", 242, "242", None),
            ("242-rc2", 242, "242-rc2", None),
            ("239 (239-58.el8)", 239, "239", Some("58.el8")),
            ("239 (239-68.el8_7.4)", 239, "239", Some("68.el8_7.4")),
            ("252.39-1~deb12u2", 252, "252.39", Some("1~deb12u2")),
            ("255.4-1ubuntu8", 255, "255.4", Some("1ubuntu8")),
            ("v256.7-1.fc41", 256, "256.7", Some("1.fc41")),
            ("256.7-1.fc41", 256, "256.7", Some("1.fc41")),
            (
                "systemd 252 (252.39-1~deb12u2)",
                252,
                "252.39",
                Some("1~deb12u2"),
            ),
            ("systemd 219", 219, "219", None),
            ("  243.1 \n", 243, "243.1", None),
            ("257.2-3", 257, "257.2", Some("3")),
            ("237-3ubuntu10.57", 237, "237", Some("3ubuntu10.57")),
            ("241-7~deb10u8", 241, "241", Some("7~deb10u8")),
            ("258~rc1-1", 258, "258~rc1", Some("1")),
            ("242-rc2-1.fc31", 242, "242-rc2", Some("1.fc31")),
            ("systemd 256 (256.7-1-arch)", 256, "256.7", Some("1-arch")),
            // Inner part disagrees with the outer major: the outer version wins.
            ("239 (240-1)", 239, "239", None),
            // Inner part is not a version: the outer version is used alone.
            ("252 (debian)", 252, "252", None),
            (
                "systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT +SELINUX",
                252,
                "252.39",
                Some("1~deb12u2"),
            ),
        ];
        for &(input, upstream, full, release) in cases {
            let got = parse_manager_version(input)
                .unwrap_or_else(|e| panic!("{input:?} failed to parse: {e}"));
            assert_eq!(got.upstream, upstream, "{input:?}");
            assert_eq!(got.upstream_full, full, "{input:?}");
            assert_eq!(got.release.as_deref(), release, "{input:?}");
            assert_eq!(got.raw, first_line(input), "{input:?}");
        }
    }

    #[test]
    fn manager_garbage_rejected() {
        let cases = [
            "",
            "   \n ",
            "garbage",
            "systemd",
            "v",
            "-1",
            "219-",
            "219 (239-58.el8",
            "219)",
            "2 19",
            "219 ((219-1))",
            "99999999999",
            "219-62.el7 extra",
            "219/62",
            "(219-62)",
            "systemdä",
            "ä219",
        ];
        for input in cases {
            assert!(
                parse_manager_version(input).is_err(),
                "{input:?} should be rejected"
            );
        }
        assert_eq!(parse_manager_version(" "), Err(VersionError::Empty));
        let msg = parse_manager_version("garbage")
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("\"garbage\""), "{msg}");
    }

    #[test]
    fn package_versions_parse() {
        let cases: &[(&str, SystemdBuild)] = &[
            (
                "219-62.el7_6.8",
                b(219, "219", Some("62.el7_6.8"), "219-62.el7_6.8"),
            ),
            (
                "252.38-1~deb12u1",
                b(252, "252.38", Some("1~deb12u1"), "252.38-1~deb12u1"),
            ),
            (
                "1:252.38-1~deb12u1\n",
                b(252, "252.38", Some("1~deb12u1"), "1:252.38-1~deb12u1"),
            ),
            (
                "245.4-4ubuntu3.24",
                b(245, "245.4", Some("4ubuntu3.24"), "245.4-4ubuntu3.24"),
            ),
            (
                "247.3-7+deb11u6",
                b(247, "247.3", Some("7+deb11u6"), "247.3-7+deb11u6"),
            ),
            (
                "252.30-1~bpo11+1",
                b(252, "252.30", Some("1~bpo11+1"), "252.30-1~bpo11+1"),
            ),
            ("239-58.el8", b(239, "239", Some("58.el8"), "239-58.el8")),
            ("242", b(242, "242", None, "242")),
        ];
        for (input, want) in cases {
            assert_eq!(parse_package_version(input).as_ref(), Ok(want), "{input:?}");
        }
        for bad in [
            "",
            "package systemd is not installed",
            "dpkg-query: no packages found matching systemd",
            ":252-1",
            "x:252-1",
            "252-1:2 3",
        ] {
            assert!(parse_package_version(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn display_roundtrips() {
        for s in ["219-62.el7_6.8", "242-rc2", "252.39-1~deb12u2", "219"] {
            let parsed = parse_package_version(s).map(|b| b.to_string());
            assert_eq!(parsed.as_deref(), Ok(s));
        }
    }

    #[test]
    fn combine_prefers_the_right_source() {
        let m219 = parse_manager_version("219").ok();
        let m239r = parse_manager_version("239 (239-13.el8)").ok();
        let p219 = parse_package_version("219-62.el7_6.8").ok();
        let p239 = parse_package_version("239-58.el8").ok();
        let p242 = parse_package_version("242-1").ok();
        let p219bare = parse_package_version("219").ok();

        // Same major, manager has no release: the package supplies it.
        assert_eq!(combine(m219.clone(), p219.clone()), p219);
        // Different majors: what is running wins.
        assert_eq!(combine(m219.clone(), p242.clone()), m219);
        // Manager reports its own release: it describes the running binary.
        assert_eq!(combine(m239r.clone(), p239.clone()), m239r);
        // Package without release adds nothing.
        assert_eq!(combine(m219.clone(), p219bare.clone()), m219);
        assert_eq!(combine(None, p239.clone()), p239);
        assert_eq!(combine(m219.clone(), None), m219);
        assert_eq!(combine(None, None), None);
    }

    #[test]
    fn rpmvercmp_matches_rpm_test_suite() {
        use Ordering::{Equal as E, Greater as G, Less as L};
        let cases: &[(&str, &str, Ordering)] = &[
            ("1.0", "1.0", E),
            ("1.0", "2.0", L),
            ("2.0", "1.0", G),
            ("2.0.1", "2.0.1", E),
            ("2.0", "2.0.1", L),
            ("2.0.1", "2.0", G),
            ("2.0.1a", "2.0.1a", E),
            ("2.0.1a", "2.0.1", G),
            ("2.0.1", "2.0.1a", L),
            ("5.5p1", "5.5p1", E),
            ("5.5p1", "5.5p2", L),
            ("5.5p2", "5.5p1", G),
            ("5.5p10", "5.5p10", E),
            ("5.5p1", "5.5p10", L),
            ("5.5p10", "5.5p1", G),
            ("10xyz", "10.1xyz", L),
            ("10.1xyz", "10xyz", G),
            ("xyz10", "xyz10", E),
            ("xyz10", "xyz10.1", L),
            ("xyz10.1", "xyz10", G),
            ("xyz.4", "xyz.4", E),
            ("xyz.4", "8", L),
            ("8", "xyz.4", G),
            ("xyz.4", "2", L),
            ("2", "xyz.4", G),
            ("5.5p2", "5.6p1", L),
            ("5.6p1", "5.5p2", G),
            ("5.6p1", "6.5p1", L),
            ("6.5p1", "5.6p1", G),
            ("6.0.rc1", "6.0", G),
            ("6.0", "6.0.rc1", L),
            ("10b2", "10a1", G),
            ("10a2", "10b2", L),
            ("1.0aa", "1.0aa", E),
            ("1.0a", "1.0aa", L),
            ("1.0aa", "1.0a", G),
            ("10.0001", "10.0001", E),
            ("10.0001", "10.1", E),
            ("10.1", "10.0001", E),
            ("10.0001", "10.0039", L),
            ("10.0039", "10.0001", G),
            ("010", "10", E),
            ("4.999.9", "5.0", L),
            ("5.0", "4.999.9", G),
            ("20101121", "20101121", E),
            ("20101121", "20101122", L),
            ("20101122", "20101121", G),
            ("2_0", "2_0", E),
            ("2.0", "2_0", E),
            ("2_0", "2.0", E),
            ("a", "a", E),
            ("a+", "a+", E),
            ("a+", "a_", E),
            ("a_", "a+", E),
            ("+a", "+a", E),
            ("+a", "_a", E),
            ("_a", "+a", E),
            ("+_", "+_", E),
            ("_+", "+_", E),
            ("_+", "_+", E),
            ("+", "_", E),
            ("_", "+", E),
            ("1.0a", "1.0", G),
            ("1.0", "1.0a", L),
            ("1.0~rc1", "1.0~rc1", E),
            ("1.0~rc1", "1.0", L),
            ("1.0", "1.0~rc1", G),
            ("1.0~rc1", "1.0~rc2", L),
            ("1.0~rc2", "1.0~rc1", G),
            ("1.0~rc1~git123", "1.0~rc1~git123", E),
            ("1.0~rc1~git123", "1.0~rc1", L),
            ("1.0~rc1", "1.0~rc1~git123", G),
            ("1.0^", "1.0^", E),
            ("1.0^", "1.0", G),
            ("1.0", "1.0^", L),
            ("1.0^git1", "1.0^git1", E),
            ("1.0^git1", "1.0", G),
            ("1.0", "1.0^git1", L),
            ("1.0^git1", "1.0^git2", L),
            ("1.0^git2", "1.0^git1", G),
            ("1.0^git1", "1.01", L),
            ("1.01", "1.0^git1", G),
            ("1.0^20160101", "1.0^20160101", E),
            ("1.0^20160101", "1.0.1", L),
            ("1.0.1", "1.0^20160101", G),
            ("1.0^20160101^git1", "1.0^20160101^git1", E),
            ("1.0^20160102", "1.0^20160101^git1", G),
            ("1.0^20160101^git1", "1.0^20160102", L),
            ("1.0~rc1^git1", "1.0~rc1^git1", E),
            ("1.0~rc1^git1", "1.0~rc1", G),
            ("1.0~rc1", "1.0~rc1^git1", L),
            ("1.0^git1~pre", "1.0^git1~pre", E),
            ("1.0^git1", "1.0^git1~pre", G),
            ("1.0^git1~pre", "1.0^git1", L),
            ("1b.fc17", "1b.fc17", E),
            ("1b.fc17", "1.fc17", L),
            ("1.fc17", "1b.fc17", G),
            ("1g.fc17", "1g.fc17", E),
            ("1g.fc17", "1.fc17", G),
            ("1.fc17", "1g.fc17", L),
            // Releases relevant to issue 11809.
            ("62.el7_6.10", "62.el7_6.8", G),
            ("62.el7", "65", L),
            ("67.el7", "65", G),
            ("62.el7_6.8", "65", L),
            ("58.el8", "16", G),
            ("13.el8", "16", L),
            ("242~rc2", "242", L),
            // Non-ASCII bytes are separators, as in rpm's C locale.
            ("1.ä0", "1.0", E),
        ];
        for &(a, b, want) in cases {
            assert_eq!(rpmvercmp(a, b), want, "rpmvercmp({a:?}, {b:?})");
        }
    }

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

    #[test]
    fn assess_verdicts() {
        let rules = FixedBuild::defaults();
        // (input, parsed as package?, affected?, rule expected in the reason)
        let cases: &[(&str, bool, bool, Option<&str>)] = &[
            ("219-62.el7_6.8", true, false, Some("219-62.el7_6.8")),
            ("219-62.el7_6.9", true, false, Some("219-62.el7_6.8")),
            ("219-62.el7_6.10", true, false, Some("219-62.el7_6.8")),
            ("219-65", true, false, Some("219-65")),
            ("219-67.el7", true, false, Some("219-65")),
            ("219-73.el7_8.5", true, false, Some("219-65")),
            ("219-78.el7_9.9", true, false, Some("219-65")),
            ("239-16", true, false, Some("239-16")),
            ("239-58.el8", true, false, Some("239-16")),
            ("239-68.el8_7.4", true, false, Some("239-16")),
            ("239 (239-58.el8)", false, false, Some("239-16")),
            ("219-62.el7", true, true, None),
            ("219-62.el7_6.7", true, true, None),
            ("219-57.el7", true, true, None),
            ("219-30.el7_3.9", true, true, None),
            ("239-13.el8", true, true, None),
            ("239 (239-13.el8)", false, true, None),
            ("241-7~deb10u8", true, true, None),
            ("237-3ubuntu10.57", true, true, None),
            ("219", false, true, None),
            ("241", false, true, None),
            ("242", false, false, None),
            ("242-rc2", false, false, None),
            ("243.1", false, false, None),
            ("252.39-1~deb12u2", true, false, None),
            ("255.4-1ubuntu8", false, false, None),
            ("257.2-3", true, false, None),
            ("v256.7-1.fc41", false, false, None),
        ];
        for &(input, package, affected, rule) in cases {
            let build = if package {
                parse_package_version(input)
            } else {
                parse_manager_version(input)
            }
            .unwrap_or_else(|e| panic!("{input:?}: {e}"));
            let v = assess(Some(&build), &rules);
            assert_eq!(v.is_affected(), affected, "{input:?}: {v:?}");
            if let Some(rule) = rule {
                assert!(v.reason().contains(rule), "{input:?}: {v:?}");
            }
        }

        let el7 = parse_package_version("219-62.el7").ok();
        assert_eq!(
            assess(el7.as_ref(), &rules),
            Verdict::Affected {
                reason: "systemd 219-62.el7 predates the fix (upstream 242; backport \
                         219-62.el7_6.8 / 219-65)"
                    .to_owned()
            }
        );
        let deb = parse_package_version("241-7~deb10u8").ok();
        assert!(
            assess(deb.as_ref(), &rules)
                .reason()
                .contains("no known backport for 241")
        );
        let bare = parse_manager_version("219").ok();
        assert!(
            assess(bare.as_ref(), &rules)
                .reason()
                .contains("release is unknown")
        );
        // Without rules even patched RHEL builds are affected.
        let patched = parse_package_version("219-78.el7_9.9").ok();
        assert!(assess(patched.as_ref(), &[]).is_affected());
        // Unknown version: assume affected, so the harmless cure stays available.
        assert_eq!(
            assess(None, &rules),
            Verdict::Affected {
                reason: "version unknown".to_owned()
            }
        );
    }

    #[test]
    fn old_distributions_without_a_placed_backport_stay_affected() {
        let fixed = FixedBuild::defaults();
        for pkg in [
            "237-3ubuntu10.57",
            "237-3ubuntu10",
            "241-7~deb10u10",
            "241-7~deb10u8",
            "219-78.amzn2.0.22",
            "219-57.amzn2.0.12",
        ] {
            let build = parse_package_version(pkg).unwrap();
            let verdict = assess(Some(&build), &fixed);
            assert!(verdict.is_affected(), "{pkg}: {verdict:?}");
        }
        // RHEL's own builds are unchanged
        for pkg in ["219-78.el7_9.9", "219-65.el7", "239-58.el8"] {
            let build = parse_package_version(pkg).unwrap();
            assert!(!assess(Some(&build), &fixed).is_affected(), "{pkg}");
        }
        // a rule that names the tag places Amazon Linux builds
        let amzn: FixedBuild = "219-78.amzn2.0.22".parse().unwrap();
        let newer = parse_package_version("219-78.amzn2.0.23").unwrap();
        let older = parse_package_version("219-78.amzn2.0.21").unwrap();
        assert!(amzn.matches(&newer));
        assert!(!amzn.matches(&older));
        assert!(!assess(Some(&newer), &[amzn]).is_affected());
    }

    #[test]
    fn combined_then_assessed() {
        let rules = FixedBuild::defaults();
        let m = parse_manager_version("219").ok();
        let p = parse_package_version("219-78.el7_9.9").ok();
        assert!(!assess(combine(m.clone(), p).as_ref(), &rules).is_affected());
        let p_other = parse_package_version("242-1").ok();
        assert!(assess(combine(m, p_other).as_ref(), &rules).is_affected());
    }

    #[test]
    fn odd_inputs_never_panic() {
        let odd = [
            "ä",
            "systemdä",
            "systemd ä",
            "v",
            "V1",
            "1:",
            ":",
            "1:v2",
            "((",
            "))",
            "()",
            "1 ()",
            "1 (ä)",
            "~",
            "^",
            "-",
            "1-~",
            "1-^",
            "1-rc",
            "1-rc1-",
            "0",
            "4294967295",
            "4294967296",
            "\u{0}",
            "1\u{0}2",
            "219-62.el7_6.8\u{200b}",
        ];
        for s in odd {
            let _ = parse_manager_version(s);
            let _ = parse_package_version(s);
            let _ = s.parse::<FixedBuild>();
            for t in odd {
                let _ = rpmvercmp(s, t);
            }
        }
    }

    #[test]
    fn verdict_serializes_with_tag() {
        let v = Verdict::NotAffected {
            reason: "x".to_owned(),
        };
        assert_eq!(
            serde_json::to_string(&v).ok().as_deref(),
            Some(r#"{"verdict":"not_affected","reason":"x"}"#)
        );
    }
}

#[cfg(test)]
mod identify_tests {
    use super::*;

    #[test]
    fn rhel7_bare_manager_version_is_refined_by_the_package() {
        let fixed = FixedBuild::defaults();
        let (b, v) = identify(Some("219"), Some("219-62.el7_6.9"), &fixed);
        assert_eq!(b.map(|b| b.to_string()).as_deref(), Some("219-62.el7_6.9"));
        assert!(!v.is_affected());
        let (_, v) = identify(Some("219"), Some("219-62.el7"), &fixed);
        assert!(v.is_affected());
        let (_, v) = identify(Some("219"), None, &fixed);
        assert!(v.is_affected());
        let (_, v) = identify(Some("252.38-1~deb12u1"), Some("garbage here"), &fixed);
        assert!(!v.is_affected());
        let (b, v) = identify(None, None, &fixed);
        assert!(b.is_none() && v.is_affected());
    }
}
