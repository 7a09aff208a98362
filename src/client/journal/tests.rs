//! The journal readers against real `journalctl` output (`fixtures/journal/`, captured from
//! journald by `capture.sh`, no root needed here): kubelet's PLEG line in both historical
//! formats among other lines, lines with invalid UTF-8, a 60,000-byte line journald split in
//! two, read in every chunking a pipe may deliver — never a panic, the PLEG line found,
//! memory bounded.

use super::follow::{newest_match_for_test, parse_short_unix};
use super::last_match_of;
use crate::client::kubelet_log::is_pleg_complaint;
use crate::client::log_lines::{LastMatch, LineAssembler, MAX_LINE, MAX_MATCH_CHARS};

const MARKER: &str = "PLEG is not healthy";
const CAT: &[u8] = include_bytes!("../fixtures/journal/kubelet.cat");
const SHORT_UNIX: &[u8] = include_bytes!("../fixtures/journal/kubelet.short-unix");
/// The same journal with `--all`, as the follower reads it.
const SHORT_UNIX_ALL: &[u8] = include_bytes!("../fixtures/journal/kubelet.short-unix-all");
const JSON: &[u8] = include_bytes!("../fixtures/journal/kubelet.json");

/// kubelet < 1.21 (klog text).
const OLD: &str = "I1105 09:50:27.583544  548093 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active 58h29m3.043779855s ago; threshold is 3m0s]";
/// kubelet >= 1.21 (structured), the newest PLEG line of the fixtures.
const NEW: &str = r#"I1105 09:50:31.000000  548093 kubelet.go:2412] "Skipping pod synchronization" err="[PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s]""#;

/// The lines of `bytes` fed in `chunk`-byte reads, and the most bytes held meanwhile.
fn lines_in_chunks(bytes: &[u8], chunk: usize) -> (Vec<String>, usize) {
    let mut a = LineAssembler::new();
    let mut out = Vec::new();
    let mut most = 0;
    for c in bytes.chunks(chunk) {
        a.push(c, |l| out.push(l.to_owned()));
        most = most.max(a.pending());
    }
    a.finish(|l| out.push(l.to_owned()));
    (out, most)
}

fn last_match(bytes: &[&[u8]]) -> Option<String> {
    let mut a = LineAssembler::new();
    let mut last = LastMatch::new(is_pleg_complaint);
    for c in bytes {
        a.push(c, |l| last.note(l));
    }
    a.finish(|l| last.note(l));
    last.into_last()
}

#[test]
fn the_cat_fixture_is_what_the_tests_say() {
    let (lines, _) = lines_in_chunks(CAT, CAT.len());
    // 7 entries written, the 60,000-byte one split by journald's LineMax (48 KiB) in two.
    assert_eq!(
        lines.len(),
        8,
        "{:?}",
        lines.iter().map(String::len).collect::<Vec<_>>()
    );
    assert_eq!(lines[1], OLD);
    assert_eq!(lines[6], NEW);
    assert!(lines[2].contains('\u{fffd}'), "{}", lines[2]);
    assert!(lines[3].contains(MARKER) && lines[3].contains('\u{fffd}'));
    assert!(lines[4].len() > 40_000);
}

/// `-o cat` (the one-shot read) in every read size a pipe might deliver up to 64 bytes, and
/// in 16 KiB reads as `last_match_of` does: the newest PLEG line is found, and no more than
/// one line is ever held.
#[tokio::test]
async fn the_newest_pleg_line_of_real_cat_output_is_found() {
    for chunk in (1..=64).chain([4096, 16 * 1024, CAT.len()]) {
        let (lines, most) = lines_in_chunks(CAT, chunk);
        assert_eq!(lines.len(), 8, "chunk {chunk}");
        assert!(most <= MAX_LINE, "chunk {chunk}: held {most}");
        let chunks: Vec<&[u8]> = CAT.chunks(chunk).collect();
        assert_eq!(last_match(&chunks).as_deref(), Some(NEW), "chunk {chunk}");
    }
    let found = last_match_of(CAT, is_pleg_complaint).await;
    assert_eq!(found.ok().flatten().as_deref(), Some(NEW));
}

/// The newest PLEG line split in two reads at every byte (inside the marker too): found.
#[test]
fn a_pleg_line_split_across_reads_is_found() {
    let Some(start) = CAT.windows(NEW.len()).position(|w| w == NEW.as_bytes()) else {
        panic!("the fixture lacks the structured PLEG line")
    };
    for cut in start..=start + NEW.len() + 1 {
        let (a, b) = CAT.split_at(cut);
        assert_eq!(last_match(&[a, b]).as_deref(), Some(NEW), "cut at {cut}");
    }
}

/// A PLEG line with invalid UTF-8 in it (the runtime's error text is kubelet's to quote) is
/// still a PLEG line in `-o cat`: the bad bytes become U+FFFD.
#[test]
fn a_pleg_line_with_invalid_utf8_is_found_in_cat_output() {
    let Some(at) = CAT.windows(NEW.len()).position(|w| w == NEW.as_bytes()) else {
        panic!("the fixture lacks the structured PLEG line")
    };
    // The fixture up to the newest PLEG line: the newest is the one with the bad bytes.
    let Some(found) = last_match(&[&CAT[..at]]) else {
        panic!("no PLEG line found before the newest")
    };
    assert!(
        found.contains("3m0.1s ago") && found.contains('\u{fffd}'),
        "{found}"
    );
}

/// A line far longer than any journald writes (a stream without newlines: a broken pipe
/// peer, a misparsed binary) is cut at MAX_LINE while it streams, and the PLEG line after it
/// is still found; the kept match is at most MAX_MATCH_CHARS characters.
#[test]
fn a_huge_line_is_bounded_and_the_line_after_it_is_found() {
    let huge = vec![b'x'; 4 << 20];
    let mut a = LineAssembler::new();
    let mut last = LastMatch::new(is_pleg_complaint);
    let mut longest = 0;
    for c in [CAT, &huge[..], b"\n", CAT, &huge[..]] {
        for piece in c.chunks(64 * 1024 + 7) {
            a.push(piece, |l| {
                longest = longest.max(l.len());
                last.note(l);
            });
            assert!(a.pending() <= MAX_LINE);
        }
    }
    a.finish(|l| last.note(l));
    assert!(longest <= MAX_LINE, "{longest}");
    assert_eq!(last.into_last().as_deref(), Some(NEW));

    let mut last = LastMatch::new(is_pleg_complaint);
    last.note(&format!(
        "E0703 19:59:01.292918 1946644 kubelet.go:1879] skipping pod synchronization - PLEG is not healthy: {}",
        "é".repeat(10_000)
    ));
    let kept = last.into_last().unwrap_or_default();
    assert_eq!(kept.chars().count(), MAX_MATCH_CHARS);
}

/// `-o short-unix` without `--all`: journalctl shows entries holding invalid UTF-8 as
/// `[NNNB blob data]`, so a PLEG line with one bad byte would be lost. That is why the
/// follower asks for `--all` (next test).
#[test]
fn without_all_journalctl_hides_a_pleg_line_with_bad_bytes() {
    let (lines, _) = lines_in_chunks(SHORT_UNIX, SHORT_UNIX.len());
    assert_eq!(lines.len(), 8);
    for l in &lines {
        assert!(parse_short_unix(l).is_some(), "unstamped: {l:.80}");
    }
    assert!(lines[3].ends_with("]: [181B blob data]"), "{}", lines[3]);
}

/// `--all -o short-unix` (the daemon's follower), in several read sizes: every entry is
/// stamped, the PLEG line with invalid UTF-8 is there, and the follower keeps the newest PLEG
/// line.
#[test]
fn the_follower_keeps_the_newest_pleg_line_of_real_short_unix_output() {
    let (lines, _) = lines_in_chunks(SHORT_UNIX_ALL, SHORT_UNIX_ALL.len());
    assert_eq!(lines.len(), 8);
    for l in &lines {
        assert!(parse_short_unix(l).is_some(), "unstamped: {l:.80}");
    }
    assert!(lines[3].contains(MARKER), "{}", lines[3]);
    assert!(lines[6].ends_with(NEW), "{}", lines[6]);
    for chunk in [1, 7, 100, 4096, 16 * 1024] {
        assert_eq!(
            newest_match_for_test(SHORT_UNIX_ALL, chunk, is_pleg_complaint).as_deref(),
            Some(NEW),
            "chunk {chunk}"
        );
    }
}

/// `-o json`: one JSON object per line; MESSAGE is a string, an array of bytes (invalid
/// UTF-8) or null (over 4096 bytes, without `--all`). The assembler handles it as any other
/// output, and both PLEG formats are found in the decoded messages.
#[test]
fn real_json_output_is_whole_lines_of_json() {
    let (lines, most) = lines_in_chunks(JSON, 13);
    assert_eq!(lines.len(), 8);
    assert!(most <= MAX_LINE);
    let messages: Vec<Option<String>> = lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
            match &v["MESSAGE"] {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Array(bytes) => {
                    let bytes: Vec<u8> = bytes
                        .iter()
                        .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                        .collect();
                    Some(String::from_utf8_lossy(&bytes).into_owned())
                }
                _ => None,
            }
        })
        .collect();
    assert_eq!(messages[1].as_deref(), Some(OLD));
    assert_eq!(messages[6].as_deref(), Some(NEW));
    assert!(messages[3].as_deref().is_some_and(|m| m.contains(MARKER)));
    assert_eq!((&messages[4], &messages[5]), (&None, &None));
}

/// The one-shot read streams: 3 MiB of log with the PLEG line in the middle of it and a
/// 1 MiB line without a newline at the end; the line is found.
#[tokio::test]
async fn the_last_pleg_line_is_found_in_a_large_stream() {
    let mut log = Vec::new();
    for i in 0..40_000 {
        log.extend_from_slice(
            format!(
                "I1105 line {i} of kubelet's chatter, nothing to see here at all, move on please\n"
            )
            .as_bytes(),
        );
        if i == 20_000 {
            log.extend_from_slice(NEW.as_bytes());
            log.push(b'\n');
        }
    }
    log.extend(std::iter::repeat_n(b'x', 1 << 20));
    let found = last_match_of(&log[..], is_pleg_complaint).await;
    assert_eq!(found.ok().flatten().as_deref(), Some(NEW));
    assert_eq!(super::head_of(&log[..], 10).await.len(), 10);
}

/// kubelet logs a failing probe's output (`"Probe failed" ... output="..."`): a pod whose
/// probe prints kubelet's PLEG line must not be taken for kubelet's own complaint, in the
/// one-shot read (`-o cat`) nor in the follower (`-o short-unix`).
#[tokio::test]
async fn a_probe_output_quoting_the_pleg_line_is_not_a_pleg_line() {
    let probe = r#"I1202 14:00:00.000000    2913 prober.go:107] "Probe failed" probeType="Liveness" pod="tenant/evil" podUID="0c0a" containerName="c" probeResult="failure" output="I1202 14:00:00.000000 1 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active 3m45s ago; threshold is 3m0s]""#;
    let cat = format!("I1202 starting\n{probe}\n");
    let found = last_match_of(cat.as_bytes(), is_pleg_complaint).await;
    assert_eq!(found.ok().flatten(), None);
    let short = format!("1733150000.000001 h kubelet[2913]: {probe}\n");
    assert_eq!(
        newest_match_for_test(short.as_bytes(), 4096, is_pleg_complaint),
        None
    );
}
