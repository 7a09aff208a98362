//! The journal, read through `journalctl`: the newest line of a unit that a
//! [`LineMatch`] accepts (kubelet's own `PLEG is not healthy` complaint), either once ([`last_matching_line`], `-o cat`, for a
//! one-shot `diagnose`) or continuously ([`follow::JournalFollower`], `-o short-unix`, for
//! the daemon).
//!
//! The output is streamed through the bounded line assembler
//! ([`super::log_lines::LineAssembler`]): however much the unit logged, one line (at most
//! 64 KiB of it) and the last match are held. Failures are [`super::Error`]s: `journalctl`
//! missing is `NotInstalled`, anything else `Failed` (or the kind of the I/O error).
//!
//! The fixture tests beside it (`tests.rs`) read real `journalctl` output captured from
//! journald (`fixtures/journal/capture.sh`), without root.

pub mod follow;
#[cfg(test)]
mod tests;

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::log_lines::{LastMatch, LineAssembler, LineMatch};
use super::{Error, ErrorKind};

/// Why reading the journal failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// `journalctl` could not be started (not installed, say).
    #[error("journalctl: {source}")]
    Spawn {
        /// The error from starting it.
        source: std::io::Error,
    },
    /// The child came without the pipe asked for.
    #[error("journalctl: no {0}")]
    NoPipe(&'static str),
    /// Reading its output or waiting for it failed.
    #[error("{source}")]
    Io {
        /// The error.
        source: std::io::Error,
    },
    /// It exited unsuccessfully.
    #[error("journalctl failed: {stderr}")]
    Failed {
        /// The start of what it wrote to stderr.
        stderr: String,
    },
}

impl JournalError {
    /// What kind of failure this is (by the type of what failed).
    pub fn kind(&self) -> ErrorKind {
        match self {
            JournalError::Spawn { source } if source.kind() == std::io::ErrorKind::NotFound => {
                ErrorKind::NotInstalled
            }
            JournalError::Io { source } => super::io_kind(source).unwrap_or(ErrorKind::Failed),
            _ => ErrorKind::Failed,
        }
    }
}

impl From<JournalError> for Error {
    fn from(e: JournalError) -> Self {
        Error::new(e.kind(), e)
    }
}

/// The newest message of `unit`'s journal since `since` that `matches` accepts (its first 400
/// characters), read with one `journalctl -o cat`.
pub async fn last_matching_line(
    unit: &str,
    since: SystemTime,
    matches: LineMatch,
) -> Result<Option<String>, Error> {
    let since_s = since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut child = tokio::process::Command::new(crate::system_program::path_of(
        crate::system_program::JOURNALCTL,
    ))
    .args(["--no-pager", "--quiet", "-o", "cat", "-u", unit])
    .arg(format!("--since=@{since_s}"))
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true)
    .spawn()
    .map_err(|source| JournalError::Spawn { source })?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(JournalError::NoPipe("output pipes").into());
    };
    // Streamed line by line: however much kubelet logged in the window, only one line and
    // the last match are held (and the first 4 KiB of an error message).
    let (last, err) = tokio::join!(last_match_of(stdout, matches), head_of(stderr, 4096));
    let status = child
        .wait()
        .await
        .map_err(|source| JournalError::Io { source })?;
    if !status.success() {
        return Err(JournalError::Failed {
            stderr: String::from_utf8_lossy(&err).trim().to_owned(),
        }
        .into());
    }
    Ok(last.map_err(|source| JournalError::Io { source })?)
}

/// What process `pid` wrote to the journal since `since` (whole seconds, so a second before
/// is included), one message a line (`-o cat`), at most `max` bytes of it (the rest is read
/// and dropped). For the goroutine stacks a Go daemon writes on a signal.
pub async fn process_output(pid: u32, since: SystemTime, max: usize) -> Result<Vec<u8>, Error> {
    let since_s = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().saturating_sub(1));
    let mut child = tokio::process::Command::new(crate::system_program::path_of(
        crate::system_program::JOURNALCTL,
    ))
    .args(["--no-pager", "--quiet", "-o", "cat"])
    .arg(format!("_PID={pid}"))
    .arg(format!("--since=@{since_s}"))
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true)
    .spawn()
    .map_err(|source| JournalError::Spawn { source })?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(JournalError::NoPipe("output pipes").into());
    };
    let (out, err) = tokio::join!(head_of(stdout, max), head_of(stderr, 4096));
    let status = child
        .wait()
        .await
        .map_err(|source| JournalError::Io { source })?;
    if !status.success() {
        return Err(JournalError::Failed {
            stderr: String::from_utf8_lossy(&err).trim().to_owned(),
        }
        .into());
    }
    Ok(out)
}

/// The last line of a byte stream that `matches` accepts, read in bounded memory.
pub async fn last_match_of(
    mut r: impl AsyncRead + Unpin,
    matches: LineMatch,
) -> std::io::Result<Option<String>> {
    let mut lines = LineAssembler::new();
    let mut last = LastMatch::new(matches);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        lines.push(&chunk[..n], |line| last.note(line));
    }
    lines.finish(|line| last.note(line));
    Ok(last.into_last())
}

/// The first `max` bytes of a stream, reading (and dropping) the rest so the writer never
/// blocks on a full pipe.
async fn head_of(mut r: impl AsyncRead + Unpin, max: usize) -> Vec<u8> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = r.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let room = max.saturating_sub(head.len());
        head.extend_from_slice(&chunk[..n.min(room)]);
    }
    head
}
