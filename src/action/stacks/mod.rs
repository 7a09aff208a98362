//! The evidence a restart would destroy: the goroutine stacks of the stuck Go daemon, taken
//! just before `restart-containerd`, `restart-docker` or `restart-kubelet` and kept under
//! pleg-guard's state (`<state_directory>/stacks/`, 0600, at most [`MAX_DUMP_BYTES`] each,
//! the newest [`KEEP`]).
//!
//! How each daemon gives its stacks ([`Dumper`]):
//! - containerd dumps them on SIGUSR1 into its log (journald) and keeps running;
//! - dockerd dumps them on SIGUSR1 into a file it names in its log and keeps running;
//! - kubelet (any Go program) prints them on SIGQUIT to stderr (journald) as it exits.
//!
//! A stopped process (SIGSTOP, state `T`) handles no signal, so SIGCONT follows the dump
//! signal (the restart that comes next sends SIGCONT too). Reading the journal rather than
//! the daemon's own file keeps this working under pleg-guard's `PrivateTmp=`. A capture that
//! fails is reported and never holds the cure back. Parsing lives in [`extract`], pure.

pub mod extract;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::client::journal;
use crate::state_file::{Durability, FileKind};

/// The largest dump kept (the rest is cut, and the file says so).
pub const MAX_DUMP_BYTES: usize = 4 << 20;
/// How many dumps are kept; older ones are removed after each capture.
pub const KEEP: usize = 10;
/// How long a daemon may take to write its dump.
const DUMP_WITHIN: Duration = Duration::from_secs(10);
/// How often the journal is read again while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Dumps: only root reads them (they name paths, images, arguments).
const STACKS: FileKind = FileKind {
    mode: 0o600,
    create_directory: Some(0o700),
    durability: Durability::Synced,
};

/// How a daemon gives its goroutine stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dumper {
    /// SIGUSR1, a dump between markers in its log (containerd).
    LogOnUsr1,
    /// SIGUSR1, a file it names in its log (dockerd).
    FileOnUsr1,
    /// SIGQUIT, the Go runtime's dump on stderr, and the process exits (kubelet).
    StderrOnQuit,
}

impl Dumper {
    fn signal(self) -> Signal {
        match self {
            Dumper::LogOnUsr1 | Dumper::FileOnUsr1 => Signal::SIGUSR1,
            Dumper::StderrOnQuit => Signal::SIGQUIT,
        }
    }
}

/// A dump kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Where it is.
    pub path: PathBuf,
    /// What it says at a glance ([`extract::summary`]).
    pub summary: Option<String>,
    /// Whether it was cut at [`MAX_DUMP_BYTES`].
    pub truncated: bool,
}

impl Kept {
    /// For an action's report: `goroutine stacks of PID 7 kept in PATH (summary)`.
    pub fn describe(&self, pid: u32) -> String {
        let mut s = format!(
            "goroutine stacks of PID {pid} kept in {}",
            self.path.display()
        );
        if let Some(sum) = &self.summary {
            s.push_str(&format!(" ({sum})"));
        }
        if self.truncated {
            s.push_str(&format!(" [cut at {} MiB]", MAX_DUMP_BYTES >> 20));
        }
        s
    }
}

/// Why no dump was kept.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The signal could not be sent.
    #[error("{signal} to PID {pid}: {source}")]
    Signal {
        /// Which.
        signal: Signal,
        /// To whom.
        pid: u32,
        /// Why not.
        source: nix::Error,
    },
    /// The dump did not appear in time.
    #[error("no dump from PID {pid} within {}s{}", DUMP_WITHIN.as_secs(), last.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    NotWritten {
        /// Whose.
        pid: u32,
        /// The last error reading it, if any.
        last: Option<String>,
    },
    /// Reading dockerd's dump file failed.
    #[error("reading {}: {source}", path.display())]
    ReadFile {
        /// The file dockerd named.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The dump could not be stored.
    #[error("storing {}: {source}", path.display())]
    Store {
        /// Where it was to go.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Where the dumps live under the state directory.
pub fn directory(state_directory: &Path) -> PathBuf {
    state_directory.join("stacks")
}

/// Have process `pid` of `unit` dump its goroutine stacks the `how` way, and keep the dump
/// in `dir` (then prune `dir` to the newest [`KEEP`]). Bounded by [`DUMP_WITHIN`].
pub async fn capture(how: Dumper, unit: &str, pid: u32, dir: &Path) -> Result<Kept, CaptureError> {
    let since = SystemTime::now();
    let target = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    let signal = how.signal();
    kill(target, signal).map_err(|source| CaptureError::Signal {
        signal,
        pid,
        source,
    })?;
    // a stopped process handles its pending signal only once continued
    let _ = kill(target, Signal::SIGCONT);
    let dump = wait_for_dump(how, pid, since).await?;
    let (body, truncated) = bounded(dump);
    let summary = extract::summary(&body);
    let path = dir.join(file_name(since, unit, pid));
    let mut text = format!(
        "# goroutine stacks of {unit} (PID {pid}), taken by pleg-guard before a restart at {}\n",
        humantime::format_rfc3339_seconds(since)
    );
    if truncated {
        text.push_str(&format!("# cut at {} MiB\n", MAX_DUMP_BYTES >> 20));
    }
    text.push_str(&body);
    text.push('\n');
    crate::state_file::write(&path, text.as_bytes(), STACKS).map_err(|source| {
        CaptureError::Store {
            path: path.clone(),
            source,
        }
    })?;
    if let Err(e) = prune(dir, KEEP) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not prune old goroutine dumps");
    }
    Ok(Kept {
        path,
        summary,
        truncated,
    })
}

/// Read the journal (or dockerd's file) until the dump is complete.
async fn wait_for_dump(how: Dumper, pid: u32, since: SystemTime) -> Result<String, CaptureError> {
    let deadline = tokio::time::Instant::now() + DUMP_WITHIN;
    let mut last = None;
    // a SIGQUIT dump counts once it has stopped growing (journald takes stderr in behind)
    let mut seen_len = None;
    loop {
        tokio::time::sleep(POLL).await;
        match journal::process_output(pid, since, 2 * MAX_DUMP_BYTES).await {
            Ok(out) => {
                let lines = String::from_utf8_lossy(&out);
                let found = match how {
                    Dumper::LogOnUsr1 => extract::between_markers(&lines),
                    // complete once the process is gone (it exits after its dump)
                    Dumper::StderrOnQuit if !alive(pid) => {
                        let d = extract::from_sigquit(&lines);
                        let len = d.as_ref().map(String::len);
                        if len.is_some() && len == seen_len {
                            d
                        } else {
                            seen_len = len;
                            None
                        }
                    }
                    Dumper::StderrOnQuit => None,
                    Dumper::FileOnUsr1 => match extract::dockerd_dump_path(&lines) {
                        Some(file) => return read_head(&file),
                        None => None,
                    },
                };
                if let Some(d) = found {
                    return Ok(d);
                }
            }
            Err(e) => last = Some(e.to_string()),
        }
        if tokio::time::Instant::now() >= deadline {
            // a SIGQUIT dump that is there although the process lingers (a zombie) is kept
            if how == Dumper::StderrOnQuit {
                if let Ok(out) = journal::process_output(pid, since, 2 * MAX_DUMP_BYTES).await {
                    if let Some(d) = extract::from_sigquit(&String::from_utf8_lossy(&out)) {
                        return Ok(d);
                    }
                }
            }
            return Err(CaptureError::NotWritten { pid, last });
        }
    }
}

/// Whether process `pid` still exists (signal 0).
fn alive(pid: u32) -> bool {
    let target = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    kill(target, None).is_ok()
}

/// The first [`MAX_DUMP_BYTES`] of dockerd's dump file.
fn read_head(path: &Path) -> Result<String, CaptureError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|source| CaptureError::ReadFile {
        path: path.to_owned(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_DUMP_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| CaptureError::ReadFile {
            path: path.to_owned(),
            source,
        })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `dump` cut at [`MAX_DUMP_BYTES`] (on a character boundary), and whether it was.
fn bounded(mut dump: String) -> (String, bool) {
    if dump.len() <= MAX_DUMP_BYTES {
        return (dump, false);
    }
    let mut at = MAX_DUMP_BYTES;
    while !dump.is_char_boundary(at) {
        at -= 1;
    }
    dump.truncate(at);
    (dump, true)
}

/// `20261207T052702Z-containerd.service-1234.txt`: sorts by time, says whose.
fn file_name(at: SystemTime, unit: &str, pid: u32) -> String {
    let stamp: String = humantime::format_rfc3339_seconds(at)
        .to_string()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let unit: String = unit
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{stamp}-{unit}-{pid}.txt")
}

/// Remove all but the newest `keep` dumps in `dir` (by name: they start with their time).
pub fn prune(dir: &Path, keep: usize) -> std::io::Result<usize> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    names.sort();
    let extra = names.len().saturating_sub(keep);
    let mut removed = 0;
    for old in &names[..extra] {
        if std::fs::remove_file(old).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_sort_by_time_and_name_the_unit_and_pid() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_620_022);
        let name = file_name(at, "containerd.service", 1234);
        assert!(name.ends_with("-containerd.service-1234.txt"), "{name}");
        assert!(
            name.chars().next().is_some_and(|c| c.is_ascii_digit()),
            "{name}"
        );
        let later = file_name(at + Duration::from_secs(1), "a b/c", 1);
        assert!(later > name);
        assert!(later.ends_with("-a_b_c-1.txt"), "{later}");
    }

    #[test]
    fn pruning_keeps_the_newest_dumps_and_nothing_else_is_touched() {
        let dir = std::env::temp_dir().join(format!("pleg-guard-stacks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..13 {
            std::fs::write(dir.join(format!("2026120{i:02}-x-1.txt")), "d").unwrap();
        }
        std::fs::write(dir.join("notes.md"), "mine").unwrap();
        assert_eq!(prune(&dir, KEEP).unwrap(), 3);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), KEEP + 1);
        assert_eq!(left[0], "202612003-x-1.txt");
        assert!(left.contains(&"notes.md".to_owned()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_oversized_dump_is_cut_on_a_character_boundary() {
        let (s, cut) = bounded("é".repeat(MAX_DUMP_BYTES / 2 + 1));
        assert!(cut);
        assert!(s.len() <= MAX_DUMP_BYTES);
        let (s, cut) = bounded("short".into());
        assert_eq!((s.as_str(), cut), ("short", false));
    }

    #[test]
    fn a_kept_dump_is_described_with_its_path_first() {
        let k = Kept {
            path: "/var/lib/pleg-guard/stacks/x.txt".into(),
            summary: Some("3 goroutines".into()),
            truncated: false,
        };
        assert_eq!(
            k.describe(7),
            "goroutine stacks of PID 7 kept in /var/lib/pleg-guard/stacks/x.txt (3 goroutines)"
        );
    }
}
