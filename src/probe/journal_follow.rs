//! A long-running `journalctl --follow` of one unit, for the daemon: kubelet's `PLEG is not
//! healthy` lines are seen as they are written, without starting a `journalctl` every round
//! (each start opens every journal file: ~8 ms of CPU on a small journal, far more on a node
//! with gigabytes of it — the difference between a daemon that costs seconds of CPU an hour
//! and one that costs almost nothing).
//!
//! One child process, read by one task; if it exits (journald restarted, say) the next probe
//! starts another. Dropping the follower kills the child.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

use super::log_lines::LineAssembler;

/// The newest matching line and its journal timestamp.
type Latest = Arc<Mutex<Option<(SystemTime, String)>>>;

/// Follows one unit's journal, remembering the newest line that holds `marker`.
pub struct JournalFollower {
    unit: String,
    marker: &'static str,
    latest: Latest,
    task: Option<JoinHandle<()>>,
}

impl JournalFollower {
    /// A follower of `unit` for lines holding `marker` (not started yet).
    pub fn new(unit: &str, marker: &'static str) -> Self {
        JournalFollower {
            unit: unit.to_owned(),
            marker,
            latest: Arc::new(Mutex::new(None)),
            task: None,
        }
    }

    /// Start `journalctl --follow` (from `since`) unless it is running. Must be called inside
    /// the tokio runtime.
    pub fn ensure_running(&mut self, since: SystemTime) -> Result<(), String> {
        if self.task.as_ref().is_some_and(|t| !t.is_finished()) {
            return Ok(());
        }
        let since_s = since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // `--merge`: journalctl --follow otherwise keeps to entries of the boot id it reads
        // from /proc, and inside a sandboxed unit in a container that file may not be the one
        // journald stamps entries with (seen under systemd-nspawn with ProtectKernelTunables):
        // it would follow nothing, silently.
        let mut child = tokio::process::Command::new("journalctl")
            .args([
                "--no-pager",
                "--quiet",
                "--follow",
                "--merge",
                "-o",
                "short-unix",
                "-u",
            ])
            .arg(&self.unit)
            .arg(format!("--since=@{since_s}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("journalctl: {e}"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| "journalctl: no stdout".to_owned())?;
        let latest = Arc::clone(&self.latest);
        let marker = self.marker;
        self.task = Some(tokio::spawn(async move {
            let _child = child; // killed when the task ends or is aborted
            let mut stdout = stdout;
            let mut lines = LineAssembler::new();
            let mut chunk = vec![0u8; 16 * 1024];
            while let Ok(n) = stdout.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                lines.push(&chunk[..n], |line| note_line(&latest, marker, line));
            }
        }));
        Ok(())
    }

    /// The newest matching line written at or after `since`.
    pub fn latest_since(&self, since: SystemTime) -> Option<String> {
        let l = self.latest.lock().ok()?;
        l.as_ref()
            .filter(|(t, _)| *t >= since)
            .map(|(_, line)| line.clone())
    }
}

impl Drop for JournalFollower {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Remember `line` if it holds `marker` and is the newest such line. A line stamped in the
/// future (a clock that was ahead when it was written) counts as written now: it must age out
/// of the window like any other, not stand for ever.
fn note_line(latest: &Latest, marker: &str, line: &str) {
    if !line.contains(marker) {
        return;
    }
    let now = SystemTime::now();
    let at = parse_short_unix(line).map_or(now, |t| t.min(now));
    if let Ok(mut l) = latest.lock() {
        if l.as_ref().is_none_or(|(t, _)| *t <= at) {
            *l = Some((at, line.chars().take(400).collect()));
        }
    }
}

/// [`note_line`] on a fresh follower state; checks that what it keeps is not in the future.
#[cfg(test)]
pub(crate) fn note_line_for_test(line: &str) {
    let latest: Latest = Arc::new(Mutex::new(None));
    note_line(&latest, PLEG_MARKER_FOR_TEST, line);
    let kept = latest.lock().ok().and_then(|l| l.clone());
    if let Some((at, text)) = kept {
        assert!(at <= SystemTime::now());
        assert!(text.chars().count() <= 400);
    }
}

#[cfg(test)]
const PLEG_MARKER_FOR_TEST: &str = "PLEG is not healthy";

/// The timestamp of a `-o short-unix` line (`1733150000.123456 host kubelet[1]: ...`).
pub(crate) fn parse_short_unix(line: &str) -> Option<SystemTime> {
    let stamp = line.split_whitespace().next()?;
    let (secs, frac) = stamp.split_once('.').unwrap_or((stamp, "0"));
    let secs: u64 = secs.parse().ok()?;
    let micros: u64 = format!("{frac:0<6}").get(..6)?.parse().ok()?;
    crate::clock::from_unix(secs, micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn short_unix_timestamps() {
        let t = parse_short_unix("1733150000.123456 bed kubelet[7]: I1105 PLEG is not healthy")
            .unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::from_micros(1_733_150_000_123_456));
        assert_eq!(
            parse_short_unix("1733150000 x").unwrap(),
            UNIX_EPOCH + Duration::from_secs(1_733_150_000)
        );
        assert!(parse_short_unix("-- No entries --").is_none());
        assert!(parse_short_unix("").is_none());
        // Seconds past year 9999 (or past what SystemTime holds) are no timestamp, not a panic.
        assert!(parse_short_unix("18446744073709551615.999999 x").is_none());
        assert!(parse_short_unix("253402300800 x").is_none());
    }

    /// A PLEG line stamped a year ahead (the clock was wrong when it was written) counts as
    /// written now, so it ages out of the window instead of standing for ever.
    #[test]
    fn a_future_stamped_line_counts_as_now() {
        let latest: Latest = Arc::new(Mutex::new(None));
        let ahead = SystemTime::now() + Duration::from_secs(365 * 86_400);
        let secs = ahead.duration_since(UNIX_EPOCH).unwrap().as_secs();
        note_line(
            &latest,
            "PLEG",
            &format!("{secs}.000000 h kubelet[1]: PLEG is not healthy"),
        );
        let (at, _) = latest.lock().unwrap().clone().unwrap();
        assert!(at <= SystemTime::now());
        let f = JournalFollower {
            unit: "kubelet.service".into(),
            marker: "PLEG",
            latest,
            task: None,
        };
        assert!(
            f.latest_since(SystemTime::now() + Duration::from_secs(60))
                .is_none()
        );
    }
}
