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
//! Checked for a backport besides RHEL (docs/packaging.md, "Supported distributions"): Ubuntu 18.04
//! (`237-3ubuntu10.*`) and Debian 10 (`241-7~deb10u*`): no backport found, so no rule, and both
//! stay affected. Amazon Linux 2: `219-57.amzn2.0.12`'s changelog has no backport; the later
//! `219-78.amzn2.0.x` rebuilds of RHEL 7.9 could not be placed, so RHEL's rules do not apply to
//! `.amzn` releases ([`UNPLACED_RELEASE_TAGS`]) and they stay affected unless a rule names one.
//!
//! Everything here is pure: no I/O, no panics on any input.
//!
//! Split by concern: [`build`] parses versions into a [`SystemdBuild`], [`rpmvercmp`] compares
//! version strings like rpm does, [`fixed`] holds the known-fixed build rules ([`FixedBuild`])
//! and [`verdict`] decides (and [`identify`] combines all of it).

mod build;
mod fixed;
mod rpmvercmp;
mod verdict;

pub use build::{SystemdBuild, combine, parse_manager_version, parse_package_version};
pub use fixed::FixedBuild;
pub use rpmvercmp::rpmvercmp;
pub use verdict::{Verdict, assess, identify};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
