//! The decision whether a systemd build suffers from issue 11809 ([`assess`], [`Verdict`]),
//! and [`identify`], which parses, combines and assesses in one step.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::{
    FIXED_UPSTREAM, FixedBuild, SystemdBuild, combine, parse_manager_version,
    parse_package_version, rpmvercmp,
};

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
    fn verdict_serializes_with_tag() {
        let v = Verdict::NotAffected {
            reason: "x".to_owned(),
        };
        assert_eq!(
            serde_json::to_string(&v).ok().as_deref(),
            Some(r#"{"verdict":"not_affected","reason":"x"}"#)
        );
    }

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
