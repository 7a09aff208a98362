//! A long-running `journalctl --follow` of one unit, for the daemon: kubelet's `PLEG is not
//! healthy` lines are seen as they are written, without starting a `journalctl` every round
//! (each start opens every journal file: ~8 ms of CPU on a small journal, far more on a node
//! with gigabytes of it — the difference between a daemon that costs seconds of CPU an hour
//! and one that costs almost nothing).
//!
//! One child process, read by one task; if it exits (journald restarted, say) the next probe
//! starts another. Dropping the follower kills the child.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

use super::JournalError;
use crate::client::Error;
use crate::client::kubelet_log::short_unix_message;
use crate::client::log_lines::{LineAssembler, LineMatch, MAX_MATCH_CHARS};

/// The newest matching message, its journal timestamp and when it was read (monotonic: a wall
/// clock that jumps must not make an old line look new).
type Latest = Arc<Mutex<Option<Seen>>>;

/// One matching message (without the `-o short-unix` prefix).
#[derive(Debug, Clone)]
struct Seen {
    at: SystemTime,
    read_at: Instant,
    line: String,
}

/// Follows one unit's journal, remembering the newest message that `matches` accepts.
pub struct JournalFollower {
    unit: String,
    matches: LineMatch,
    latest: Latest,
    task: Option<JoinHandle<()>>,
}

impl JournalFollower {
    /// A follower of `unit` for messages `matches` accepts (not started yet).
    pub fn new(unit: &str, matches: LineMatch) -> Self {
        JournalFollower {
            unit: unit.to_owned(),
            matches,
            latest: Arc::new(Mutex::new(None)),
            task: None,
        }
    }

    /// Start `journalctl --follow` (from `since`) unless it is running. Must be called inside
    /// the tokio runtime.
    pub async fn ensure_running(&mut self, since: SystemTime) -> Result<(), Error> {
        if self.task.as_ref().is_some_and(|t| !t.is_finished()) {
            return Ok(());
        }
        let since_s = since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let boot = journald_boot_id().await;
        let mut child = tokio::process::Command::new(crate::system_program::path_of(
            crate::system_program::JOURNALCTL,
        ))
        .args(follow_args(&self.unit, since_s, boot.as_deref()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| JournalError::Spawn { source })?;
        let stdout = child.stdout.take().ok_or(JournalError::NoPipe("stdout"))?;
        let latest = Arc::clone(&self.latest);
        let matches = self.matches;
        self.task = Some(tokio::spawn(async move {
            let _child = child; // killed when the task ends or is aborted
            let mut stdout = stdout;
            let mut lines = LineAssembler::new();
            let mut chunk = vec![0u8; 16 * 1024];
            while let Ok(n) = stdout.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                lines.push(&chunk[..n], |line| {
                    note_line(&latest, matches, line, Instant::now());
                });
            }
        }));
        Ok(())
    }

    /// The newest matching line written at or after `since` and read within the last
    /// `max_age` (by the monotonic clock: after the wall clock went back, an old line's stamp
    /// is "after" `since` for as long as the jump, and must not count that long).
    pub fn latest_since(&self, since: SystemTime, max_age: Duration) -> Option<String> {
        let l = self.latest.lock().ok()?;
        l.as_ref()
            .filter(|s| s.at >= since && s.read_at.elapsed() <= max_age)
            .map(|s| s.line.clone())
    }
}

/// The arguments of the follower's `journalctl`. Never `--merge`: that reads every journal
/// file under /var/log/journal, other machines' among them (containers' and VMs' journals
/// linked there), whose every field their guest writes. Without it `--follow` keeps to one
/// boot — by default the id journalctl reads from /proc, which inside a sandboxed unit in a
/// container may not be the one journald stamps entries with (seen under systemd-nspawn with
/// ProtectKernelTunables: it would follow nothing, silently) — so the boot journald writes
/// is named explicitly when known ([`journald_boot_id`]).
pub(crate) fn follow_args(unit: &str, since_s: u64, boot: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--no-pager",
        "--quiet",
        "--follow",
        // `--all`: without it an entry holding invalid UTF-8 (a PLEG line among them) is
        // shown as `[NNNB blob data]` and never matched.
        "--all",
        "-o",
        "short-unix",
        "-u",
        unit,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(format!("--since=@{since_s}"));
    if let Some(id) = boot {
        args.push(format!("--boot={id}"));
    }
    args
}

/// The boot id of the newest entry of this machine's journal: the boot journald writes now.
/// None when it cannot be told (the follower then keeps journalctl's own idea).
async fn journald_boot_id() -> Option<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::process::Command::new(crate::system_program::path_of(
            crate::system_program::JOURNALCTL,
        ))
        .args(["--no-pager", "--quiet", "-n", "1", "-o", "json"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output(),
    )
    .await
    .ok()?
    .ok()?;
    boot_id_of(&String::from_utf8_lossy(&out.stdout))
}

/// `_BOOT_ID` of a `journalctl -o json` line, if it is a boot id (32 hex digits).
pub(crate) fn boot_id_of(json: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json.lines().next()?).ok()?;
    let id = v.get("_BOOT_ID")?.as_str()?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_owned())
}

impl Drop for JournalFollower {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Remember the message of `line` (read at `read_at`) if `matches` accepts it and it is the
/// newest such message. Only the message is matched: the `-o short-unix` prefix (stamp, host,
/// identifier) is no part of what kubelet wrote. A line stamped in the future (a clock that was ahead when it was written) counts as written
/// now. A kept line stamped after the current time (the clock has gone back since) is
/// replaced by any new one, or new lines would be ignored until the clock caught up.
fn note_line(latest: &Latest, matches: LineMatch, line: &str, read_at: Instant) {
    let Some(message) = short_unix_message(line).filter(|m| matches(m)) else {
        return;
    };
    let now = SystemTime::now();
    let at = parse_short_unix(line).map_or(now, |t| t.min(now));
    if let Ok(mut l) = latest.lock() {
        if l.as_ref().is_none_or(|s| s.at <= at || s.at > now) {
            *l = Some(Seen {
                at,
                read_at,
                line: message.chars().take(MAX_MATCH_CHARS).collect(),
            });
        }
    }
}

/// [`note_line`] on a fresh follower state; checks that what it keeps is not in the future.
#[cfg(test)]
pub(crate) fn note_line_for_test(line: &str) {
    let latest: Latest = Arc::new(Mutex::new(None));
    note_line(&latest, is_pleg_complaint, line, Instant::now());
    let kept = latest.lock().ok().and_then(|l| l.clone());
    if let Some(s) = kept {
        assert!(s.at <= SystemTime::now());
        assert!(s.line.chars().count() <= MAX_MATCH_CHARS);
    }
}

/// What a follower keeps after reading `output` (`-o short-unix` bytes) in `chunk`-byte
/// reads: the newest message `matches` accepts.
#[cfg(test)]
pub(super) fn newest_match_for_test(
    output: &[u8],
    chunk: usize,
    matches: LineMatch,
) -> Option<String> {
    let latest: Latest = Arc::new(Mutex::new(None));
    let mut lines = LineAssembler::new();
    for c in output.chunks(chunk.max(1)) {
        lines.push(c, |line| note_line(&latest, matches, line, Instant::now()));
    }
    lines.finish(|line| note_line(&latest, matches, line, Instant::now()));
    let kept = latest.lock().ok().and_then(|l| l.clone());
    kept.map(|s| s.line)
}

#[cfg(test)]
use crate::client::kubelet_log::is_pleg_complaint;

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

    const PLEG_LINE: &str = r#"E1202 14:00:00.000000    2913 kubelet.go:2593] "Skipping pod synchronization" err="PLEG is not healthy: pleg was last seen active 3m0.5s ago; threshold is 3m0s""#;

    /// A pod's probe output quoting kubelet's PLEG line, as kubelet logs it: the follower
    /// keeps nothing (a tenant must not make pleg-guard restart kubelet).
    #[test]
    fn a_probe_failure_quoting_the_pleg_text_is_not_kept() {
        let latest: Latest = Arc::new(Mutex::new(None));
        let probe = r#"1733150000.123456 h kubelet[2913]: I1202 14:00:00.000000    2913 prober.go:107] "Probe failed" probeType="Liveness" pod="tenant/evil" podUID="0c0a" containerName="c" probeResult="failure" output="PLEG is not healthy: pleg was last seen active 3m45s ago; threshold is 3m0s""#;
        note_line(&latest, is_pleg_complaint, probe, Instant::now());
        assert!(latest.lock().unwrap().is_none());
        let own = format!("1733150000.123456 h kubelet[2913]: {PLEG_LINE}");
        note_line(&latest, is_pleg_complaint, &own, Instant::now());
        let kept = latest.lock().unwrap().clone().map(|s| s.line);
        assert_eq!(kept.as_deref(), Some(PLEG_LINE));
    }

    /// Never `--merge` (other machines' journals), always an absolute journalctl, and the
    /// boot journald writes when it is known.
    #[test]
    fn the_follower_reads_this_machines_journal_only() {
        let args = follow_args("kubelet.service", 1_733_150_000, None);
        assert!(!args.iter().any(|a| a == "--merge"), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--boot")), "{args:?}");
        let id = "d229503bb2174dd899875965319c56bc";
        let args = follow_args("kubelet.service", 1_733_150_000, Some(id));
        assert!(!args.iter().any(|a| a == "--merge"), "{args:?}");
        assert!(args.contains(&format!("--boot={id}")), "{args:?}");
        assert!(args.contains(&"--since=@1733150000".to_owned()), "{args:?}");
        let line = r#"{"_BOOT_ID":"d229503bb2174dd899875965319c56bc","MESSAGE":"x"}"#;
        assert_eq!(boot_id_of(line).as_deref(), Some(id));
        assert_eq!(boot_id_of(r#"{"_BOOT_ID":"--merge"}"#), None);
        assert_eq!(boot_id_of("-- No entries --"), None);
        assert_eq!(boot_id_of(""), None);
    }

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
            is_pleg_complaint,
            &format!("{secs}.000000 h kubelet[1]: {PLEG_LINE}"),
            Instant::now(),
        );
        let s = latest.lock().unwrap().clone().unwrap();
        assert!(s.at <= SystemTime::now());
        let f = follower(latest);
        let window = Duration::from_secs(60);
        assert!(f.latest_since(SystemTime::now() - window, window).is_some());
        assert!(
            f.latest_since(SystemTime::now() + Duration::from_secs(60), window)
                .is_none()
        );
    }

    fn follower(latest: Latest) -> JournalFollower {
        JournalFollower {
            unit: "kubelet.service".into(),
            matches: is_pleg_complaint,
            latest,
            task: None,
        }
    }

    fn stamped(t: SystemTime) -> String {
        let d = t.duration_since(UNIX_EPOCH).unwrap();
        format!(
            "{}.{:06} h kubelet[1]: {PLEG_LINE}",
            d.as_secs(),
            d.subsec_micros()
        )
    }

    /// The wall clock goes back an hour after a PLEG episode: the old line's stamp is now
    /// "in the future", within any window measured by the wall clock. It must age out by the
    /// monotonic clock (no hour of false findings, no kubelet restarts for nothing), and new
    /// lines written after the jump must still be taken.
    #[test]
    fn a_clock_that_goes_back_neither_keeps_old_lines_nor_hides_new_ones() {
        let window = Duration::from_secs(60);
        let hour = Duration::from_secs(3600);
        let now = SystemTime::now();
        let latest: Latest = Arc::new(Mutex::new(None));
        // Written and read 2 minutes ago (monotonic), stamped by the clock before the jump;
        // the "clock" since went back an hour, so `since` is an hour and a minute earlier.
        let two_min_ago = Instant::now() - Duration::from_secs(120);
        note_line(&latest, is_pleg_complaint, &stamped(now), two_min_ago);
        let f = follower(Arc::clone(&latest));
        let since_after_jump = now - hour - window;
        assert!(
            f.latest_since(since_after_jump, window).is_none(),
            "an old line counted after the clock went back"
        );
        // A line stamped an hour "earlier" than the kept one, i.e. written after the jump,
        // replaces it — when the kept stamp is past the current clock. Here the current clock
        // is the real one, so simulate the kept stamp being ahead of it.
        {
            let mut l = latest.lock().unwrap();
            if let Some(s) = l.as_mut() {
                s.at = now + hour;
            }
        }
        note_line(&latest, is_pleg_complaint, &stamped(now), Instant::now());
        let s = latest.lock().unwrap().clone().unwrap();
        assert_eq!(s.at, stamped_at(now));
        assert!(f.latest_since(now - window, window).is_some());
    }

    fn stamped_at(t: SystemTime) -> SystemTime {
        parse_short_unix(&stamped(t)).unwrap()
    }
}
