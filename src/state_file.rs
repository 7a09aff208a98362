//! The one writer of every file pleg-guard keeps: the ledger, the wedge proof and the NPD
//! cursors (persistent), `status.json` (live) and the metrics textfile.
//!
//! A reader — or a crash — sees the old file or the new one, never a mix, and nobody else
//! who can write in the directory can turn the write against another file:
//! - the temp file has a random name and is created with `O_EXCL | O_NOFOLLOW` relative to
//!   a handle on the directory, so a symlink or file planted under any name is never
//!   followed, truncated or chmod-ed (a fixed temp name that followed symlinks let the owner
//!   of node_exporter's directory point it at the ledger);
//! - modes are set explicitly with `fchmod` on the new file and on directories created here,
//!   whatever the caller's umask (`npd-check` run under umask 000 once made its cursor
//!   world-writable);
//! - the file is fsync-ed before the rename and the directory after it ([`Durability::Synced`];
//!   the metrics textfile, rewritten every round, skips both);
//! - a directory that someone other than root can write in (or one of its parents, sticky
//!   directories aside) is named once in a warning: whoever that is can still remove or
//!   replace the file.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, openat, renameat};
use nix::sys::stat::{Mode, fchmod};
use nix::unistd::{UnlinkatFlags, fsync, unlinkat};

/// Whether a write is flushed to disk before it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file before the rename and the directory after it.
    Synced,
    /// Neither (a file rewritten every round, whose loss in a crash costs nothing).
    Unsynced,
}

/// How one kind of file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileKind {
    /// The file's mode (set exactly, umask or not).
    pub mode: u32,
    /// Missing directories are created with this mode; `None`: a missing directory is an
    /// error (`NotFound`).
    pub create_directory: Option<u32>,
    /// Flushed or not.
    pub durability: Durability,
}

/// Files that must survive a crash and that operators read (ledger, wedge proof, NPD
/// cursors, status.json): 0644 in 0755 directories, synced.
pub const KEPT: FileKind = FileKind {
    mode: 0o644,
    create_directory: Some(0o755),
    durability: Durability::Synced,
};

/// The metrics textfile: 0644 for node_exporter's user, in node_exporter's directory (never
/// created here), not synced.
pub const METRICS: FileKind = FileKind {
    mode: 0o644,
    create_directory: None,
    durability: Durability::Unsynced,
};

/// How many random temp names are tried before giving up (each taken name is someone
/// else's file, left alone).
const TEMP_ATTEMPTS: usize = 8;

/// Write `bytes` to `path` atomically as a file of `kind` (see the module doc).
pub fn write(path: &Path, bytes: &[u8], kind: FileKind) -> std::io::Result<()> {
    let (dir, name) = split(path)?;
    if let Some(mode) = kind.create_directory {
        create_directory(dir, mode)?;
    }
    let dir_fd = openat(
        AT_FDCWD,
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    warn_if_shared(dir);
    let (tmp_name, file) = create_temp(&dir_fd, name, kind.mode)?;
    let written = fill(file, bytes, kind.durability)
        .and_then(|()| Ok(renameat(&dir_fd, tmp_name.as_os_str(), &dir_fd, name)?));
    if let Err(e) = written {
        let _ = unlinkat(&dir_fd, tmp_name.as_os_str(), UnlinkatFlags::NoRemoveDir);
        return Err(e);
    }
    if kind.durability == Durability::Synced {
        let _ = fsync(&dir_fd);
    }
    Ok(())
}

/// The directory and file name of `path`.
fn split(path: &Path) -> std::io::Result<(&Path, &OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// `dir` and its missing parents, each created with `mode` exactly; existing ones untouched.
fn create_directory(dir: &Path, mode: u32) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_directory(parent, mode)?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
        Err(e) => return Err(e),
    }
    // DirBuilder's mode went through the umask: set it exactly, on the directory itself.
    let fd = openat(
        AT_FDCWD,
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    fchmod(&fd, mode_of(mode))?;
    Ok(())
}

/// A new temp file next to `name`, created exclusively (never an existing file or symlink).
fn create_temp(
    dir_fd: &OwnedFd,
    name: &OsStr,
    mode: u32,
) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut last = Errno::EEXIST;
    for _ in 0..TEMP_ATTEMPTS {
        let tmp = temp_name(name)?;
        match openat(
            dir_fd,
            tmp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            mode_of(mode),
        ) {
            Ok(fd) => {
                // The mode given to open went through the umask: set it exactly.
                if let Err(e) = fchmod(&fd, mode_of(mode)) {
                    let _ = unlinkat(dir_fd, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
                    return Err(e.into());
                }
                return Ok((tmp, std::fs::File::from(fd)));
            }
            Err(Errno::EEXIST) => last = Errno::EEXIST,
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.into())
}

/// `.NAME.RANDOM.tmp`: hidden, and never ending in `.prom` (node_exporter reads only those)
/// or `.json`.
fn temp_name(name: &OsStr) -> std::io::Result<PathBuf> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut tmp = Vec::with_capacity(name.len() + 24);
    tmp.push(b'.');
    tmp.extend_from_slice(name.as_bytes());
    tmp.push(b'.');
    for b in random {
        tmp.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    tmp.extend_from_slice(b".tmp");
    Ok(PathBuf::from(OsStr::from_bytes(&tmp)))
}

fn fill(mut file: std::fs::File, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    file.write_all(bytes)?;
    if durability == Durability::Synced {
        file.sync_all()?;
    }
    Ok(())
}

fn mode_of(mode: u32) -> Mode {
    Mode::from_bits_truncate(mode)
}

/// Who other than root can change entries of a directory with this owner, group and mode;
/// `None` when only root can.
pub fn writable_by_others(uid: u32, gid: u32, mode: u32) -> Option<String> {
    if uid != 0 {
        return Some(format!("owned by uid {uid}"));
    }
    if mode & 0o002 != 0 {
        return Some("writable by everyone".to_owned());
    }
    if mode & 0o020 != 0 && gid != 0 {
        return Some(format!("writable by group {gid}"));
    }
    None
}

/// Why entries of `dir` can be changed by someone other than root: the directory itself, or
/// a parent (a sticky parent such as /tmp excepted: others cannot rename root's entries in
/// it); `None` when only root can.
pub fn shared_directory(dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let mut child: Option<std::fs::Metadata> = None;
    for d in dir.ancestors() {
        let m = std::fs::metadata(d).ok()?;
        if let Some(who) = writable_by_others(m.uid(), m.gid(), m.mode()) {
            // In a sticky directory of root's, others cannot rename root's entries.
            let protected = child
                .as_ref()
                .is_some_and(|c| m.mode() & 0o1000 != 0 && m.uid() == 0 && c.uid() == 0);
            if !protected {
                return Some(match child {
                    None => format!("{} is {who}", d.display()),
                    Some(_) => format!("its parent {} is {who}", d.display()),
                });
            }
        }
        child = Some(m);
    }
    None
}

/// Directories already warned about (once per process).
static WARNED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn warn_if_shared(dir: &Path) {
    let Ok(mut warned) = WARNED.lock() else {
        return;
    };
    if warned.contains(dir) {
        return;
    }
    warned.insert(dir.to_path_buf());
    drop(warned);
    if let Some(why) = shared_directory(dir) {
        tracing::warn!(
            directory = %dir.display(),
            "{}: {why}: whoever that is can remove or replace pleg-guard's files there (they cannot make pleg-guard write elsewhere); give the directory to root or choose another",
            dir.display()
        );
    }
}

/// The directory of `path` as [`write`] uses it, for callers that check it beforehand.
pub fn directory_of(path: &Path) -> &Path {
    split(path).map_or(Path::new("."), |(d, _)| d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The shared fresh directory, with a known mode (the tests compare file modes).
    fn tempdir(name: &str) -> PathBuf {
        let d = crate::testing::tempdir(name);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_replace_the_file_whole_and_leave_no_temp_file() {
        let d = tempdir("replace");
        let path = d.join("ledger.json");
        write(&path, b"one", KEPT).unwrap();
        write(&path, b"two", KEPT).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(mode(&path), 0o644);
        assert_eq!(names(&d), ["ledger.json"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The temp names writers used before (fixed, or fixed per pid) pointed at a victim file
    /// by whoever can write in the directory: the victim is neither written nor chmod-ed, and
    /// the link stays a link.
    #[test]
    fn a_symlink_planted_at_a_temp_name_is_not_followed() {
        let d = tempdir("symlink");
        let victim = d.join("victim");
        std::fs::write(&victim, b"secret").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        for planted in [
            ".pleg-guard.prom.tmp".to_owned(),
            format!(".ledger.json.tmp-{}", std::process::id()),
        ] {
            std::os::unix::fs::symlink(&victim, d.join(planted)).unwrap();
        }
        write(&d.join("pleg-guard.prom"), b"metrics 1\n", METRICS).unwrap();
        write(&d.join("ledger.json"), b"{}", KEPT).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"secret");
        assert_eq!(mode(&victim), 0o600);
        assert_eq!(std::fs::read(d.join("ledger.json")).unwrap(), b"{}");
        // A symlink at the target name itself is replaced, not followed.
        std::os::unix::fs::symlink(&victim, d.join("status.json")).unwrap();
        write(&d.join("status.json"), b"{\"ok\":1}", KEPT).unwrap();
        assert!(
            !std::fs::symlink_metadata(d.join("status.json"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"secret");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_missing_directory_is_created_or_refused_as_asked() {
        let d = tempdir("missing");
        let e = write(&d.join("a/b.prom"), b"x", METRICS).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        write(&d.join("npd/deep/c.json"), b"x", KEPT).unwrap();
        assert_eq!(mode(&d.join("npd")), 0o755);
        assert_eq!(mode(&d.join("npd/deep")), 0o755);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Set by [`modes_are_exact_whatever_the_umask`] for the copy of this test binary it runs
    /// (the umask is per process: changing it here would race the other tests).
    const UMASK_CHILD: &str = "PLEG_GUARD_TEST_STATE_FILE_UMASK";

    /// Under umask 000 (as `npd-check` ran once) and 077 the modes are exactly the asked ones.
    #[test]
    fn modes_are_exact_whatever_the_umask() {
        if let Ok(spec) = std::env::var(UMASK_CHILD) {
            let (umask, dir) = spec.split_once(':').unwrap();
            nix::sys::stat::umask(Mode::from_bits_truncate(
                u32::from_str_radix(umask, 8).unwrap(),
            ));
            let dir = Path::new(dir);
            write(&dir.join("npd/cursor.json"), b"{}", KEPT).unwrap();
            write(&dir.join("npd/cursor.json"), b"{}", KEPT).unwrap();
            write(&dir.join("pleg-guard.prom"), b"x 1\n", METRICS).unwrap();
            return;
        }
        for umask in ["000", "077"] {
            let d = tempdir(&format!("umask{umask}"));
            let o = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "state_file::tests::modes_are_exact_whatever_the_umask",
                    "--test-threads=1",
                ])
                .env(UMASK_CHILD, format!("{umask}:{}", d.display()))
                .output()
                .unwrap();
            assert!(o.status.success(), "{o:?}");
            assert_eq!(mode(&d.join("npd")), 0o755, "umask {umask}");
            assert_eq!(mode(&d.join("npd/cursor.json")), 0o644, "umask {umask}");
            assert_eq!(mode(&d.join("pleg-guard.prom")), 0o644, "umask {umask}");
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[test]
    fn who_else_can_write_a_directory() {
        assert_eq!(writable_by_others(0, 0, 0o40755), None);
        assert_eq!(writable_by_others(0, 0, 0o40775), None);
        assert!(writable_by_others(0, 0, 0o40777).is_some());
        assert!(writable_by_others(0, 7, 0o40775).is_some());
        assert!(writable_by_others(105, 0, 0o40755).is_some());
        let d = tempdir("shared");
        if nix::unistd::geteuid().is_root() {
            assert_eq!(shared_directory(&d), None, "root's 0755 under sticky /tmp");
        }
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = shared_directory(&d).unwrap_or_default();
        assert!(why.contains("writable by everyone"), "{why}");
        std::fs::create_dir(d.join("sub")).unwrap();
        let why = shared_directory(&d.join("sub")).unwrap_or_default();
        assert!(why.contains("its parent"), "{why}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
