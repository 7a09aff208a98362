//! Parsing of systemd versions (PID 1's `Version` property, package versions) into a
//! [`SystemdBuild`], and [`combine`], which picks the best description of the running systemd.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{VersionError, malformed};

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
pub(super) fn parse_token(
    tok: &str,
    raw: &str,
    allow_epoch: bool,
) -> Result<SystemdBuild, VersionError> {
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
}
