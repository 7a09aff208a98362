//! The metrics file for node_exporter's textfile collector: written whole each round so that
//! node_exporter never reads half of one, readable by node_exporter's user (0644 whatever the
//! umask), and not written at all while the directory does not exist (node_exporter not
//! installed: not a problem). The writing is [`crate::state_file`]'s: a random temp name
//! created exclusively, never following a link that node_exporter's user planted there.
//!
//! No fsync: a metrics file that a crash leaves out of date is rewritten one round after the
//! restart, and syncing every round would cost every node a disk flush every 10 s.

use std::path::{Path, PathBuf};

use crate::state_file;

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The file holds the new text.
    Written,
    /// The directory does not exist: nothing written.
    NoDirectory,
}

/// Why the file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TextfileError {
    /// The directory exists but the file could not be written there.
    #[error("cannot write {path}: {source}{hint}")]
    Write {
        /// The metrics file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
        /// What to do about it, when known.
        hint: &'static str,
    },
}

/// Write `text` to `path` atomically; nothing (and no error) when its directory is missing.
pub fn write(path: &Path, text: &str) -> Result<Written, TextfileError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Ok(Written::NoDirectory);
    }
    let result = state_file::write(path, text.as_bytes(), state_file::METRICS);
    result.map(|()| Written::Written).map_err(|source| {
        let hint = if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem {
            " (the directory appeared after pleg-guard started: restart it so that the unit's ReadWritePaths= covers it)"
        } else {
            ""
        };
        TextfileError::Write {
            path: path.to_path_buf(),
            source,
            hint,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tempdir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn missing_directory_writes_nothing_and_is_no_error() {
        let d = tempdir("missing");
        let path = d.join("not-there/pleg-guard.prom");
        assert_eq!(write(&path, "x 1\n").unwrap(), Written::NoDirectory);
        assert!(!d.join("not-there").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn writes_whole_file_0644_and_leaves_no_temp_file() {
        let d = tempdir("write");
        let path = d.join("pleg-guard.prom");
        assert_eq!(write(&path, "a 1\n").unwrap(), Written::Written);
        assert_eq!(write(&path, "a 2\n").unwrap(), Written::Written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["pleg-guard.prom"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_unwritable_directory_is_an_error_naming_the_file() {
        let d = tempdir("unwritable");
        // A directory at the file's name: the rename cannot replace it.
        let path = d.join("pleg-guard.prom");
        std::fs::create_dir_all(d.join("pleg-guard.prom/blocker")).unwrap();
        let e = write(&path, "a 1\n").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot write {}", path.display())),
            "{e}"
        );
        assert!(path.is_dir());
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            1,
            "the temp file was removed"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// node_exporter's user owns the directory on Debian and could point the old fixed temp
    /// name (`.pleg-guard.prom.tmp`) at the ledger: it is not followed.
    #[test]
    fn a_link_at_the_old_temp_name_does_not_clobber_its_target() {
        let d = tempdir("link");
        let ledger = d.join("ledger.json");
        std::fs::write(&ledger, b"{\"runs\":[]}").unwrap();
        std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&ledger, d.join(".pleg-guard.prom.tmp")).unwrap();
        let path = d.join("pleg-guard.prom");
        assert_eq!(write(&path, "a 1\n").unwrap(), Written::Written);
        assert_eq!(std::fs::read(&ledger).unwrap(), b"{\"runs\":[]}");
        let mode = std::fs::metadata(&ledger).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 1\n");
        let _ = std::fs::remove_dir_all(&d);
    }
}
