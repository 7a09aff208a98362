//! The programs pleg-guard runs (`journalctl`, `rpm`, `dpkg-query`), by absolute path in the
//! system's own directories, never looked up through `PATH`: a root daemon (or `diagnose` run
//! by an operator whose PATH holds a user-writable directory) must not run whatever a PATH
//! entry offers under that name. `/usr/bin` first (merged-/usr systems, RHEL), then `/bin`
//! (Debian before the /usr merge keeps journalctl there).

use std::path::{Path, PathBuf};

/// Where system programs live, in the order they are looked for.
const SYSTEM_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/// `journalctl`.
pub const JOURNALCTL: &str = "journalctl";
/// `rpm`.
pub const RPM: &str = "rpm";
/// `dpkg-query`.
pub const DPKG_QUERY: &str = "dpkg-query";

/// The absolute path of system program `name`: the first of [`SYSTEM_DIRS`] holding it, else
/// `/usr/bin/NAME` (starting that fails as not installed, as it should).
pub fn path_of(name: &str) -> PathBuf {
    SYSTEM_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| Path::new(SYSTEM_DIRS[0]).join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_absolute_paths_in_system_directories() {
        for name in [JOURNALCTL, RPM, DPKG_QUERY, "no-such-program-pleg-guard"] {
            let p = path_of(name);
            assert!(p.is_absolute(), "{}", p.display());
            assert!(
                SYSTEM_DIRS.iter().any(|d| p.parent() == Some(Path::new(d))),
                "{}",
                p.display()
            );
        }
    }
}
