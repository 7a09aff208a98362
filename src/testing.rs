//! Helpers shared by the unit tests (compiled for tests only).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty directory for one test: `$TMPDIR/pleg-guard-test-<name>-<pid>-<n>`, unique
/// within the test run (a stale one a crashed run left behind is removed first).
pub fn tempdir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pleg-guard-test-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("create test directory {}: {e}", dir.display()));
    dir
}
