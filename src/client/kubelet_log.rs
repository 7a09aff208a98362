//! Which of kubelet's log lines are kubelet's own PLEG complaint.
//!
//! kubelet's log also carries text that others wrote: a failing probe's output
//! (`"Probe failed" ... output="..."`, logged at verbosity 1 by `pkg/kubelet/prober`), event
//! messages, a runtime's error text. A pod whose exec probe prints `PLEG is not healthy` must
//! not make pleg-guard restart kubelet, so a line counts only when kubelet's sync loop itself
//! wrote it (`pkg/kubelet/kubelet.go`, `syncLoop`, on `runtimeState.runtimeErrors()`):
//!
//! - klog text, kubelet < 1.21 (`klog.Infof`/`Errorf("skipping pod synchronization - %v", ..)`):
//!   `I1105 09:50:27.583544  548093 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: ...]`
//!   (a one-element aggregate prints without the brackets);
//! - klog structured, kubelet >= 1.21 (`klog.ErrorS(err, "Skipping pod synchronization")`):
//!   `E0826 17:00:14.128025    1445 kubelet.go:1882] "Skipping pod synchronization" err="[container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful]"`;
//! - kubelet's JSON format (`--logging-format=json`): `{"msg":"Skipping pod synchronization","err":"PLEG is not healthy: ..."}`.
//!
//! The message must follow the klog header (`Lmmdd hh:mm:ss.uuuuuu threadid file:line] `)
//! directly, and the PLEG error must be one element of the `err` value: text inside another
//! message's quoted fields never starts a message, and a multi-line value (klog indents its
//! continuation lines with a tab) never starts a line with a header.
//!
//! Left for the threat model (docs/security.md): a kubelet old enough to log probe output
//! unquoted (printf-style, before structured logging) lets a probe print a whole forged
//! line after a newline; nothing in the line tells it from kubelet's own.

use std::borrow::Cow;

/// The message kubelet's sync loop logs (structured form) when it skips a sync.
const STRUCTURED: &str = "\"Skipping pod synchronization\"";
/// The message before structured logging (klog text, lower-case, the errors after ` - `).
const TEXT: &str = "skipping pod synchronization - ";
/// How the PLEG health check's error starts (`fmt.Errorf("%s is not healthy: %v", "PLEG", ..)`).
const PLEG: &str = "PLEG is not healthy:";

/// The part of kubelet's own PLEG complaint from `PLEG is not healthy` on, when `message` (one
/// log line as kubelet wrote it, without a journal prefix) is one; `None` for every other line.
pub fn pleg_complaint(message: &str) -> Option<Cow<'_, str>> {
    if message.starts_with('{') {
        return json_pleg_complaint(message).map(Cow::Owned);
    }
    let body = klog_body(message)?;
    let errors = if let Some(rest) = body.strip_prefix(STRUCTURED) {
        let rest = rest.strip_prefix(" err=\"")?;
        quoted_prefix(rest)?
    } else {
        body.strip_prefix(TEXT)?
    };
    pleg_element(errors).map(Cow::Borrowed)
}

/// Whether `message` is kubelet's own PLEG complaint (see [`pleg_complaint`]).
pub fn is_pleg_complaint(message: &str) -> bool {
    pleg_complaint(message).is_some()
}

/// The message of a `journalctl -o short-unix` line
/// (`1733150000.123456 host kubelet[1]: MESSAGE`; the host is left out when the entry has
/// none). `None` when the line has no such prefix (`-- No entries --`, say).
pub fn short_unix_message(line: &str) -> Option<&str> {
    let (stamp, rest) = line.split_once(' ')?;
    if stamp.is_empty() || !stamp.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    // `[host ]identifier[pid]: `: neither a host name nor kubelet's identifier holds ": ".
    rest.split_once(": ").map(|(_, message)| message)
}

/// The message after a klog header at the very start of `line`.
fn klog_body(line: &str) -> Option<&str> {
    let b = line.as_bytes();
    let mut at = 0;
    let byte = |i: usize| b.get(i).copied();
    if !matches!(byte(0)?, b'I' | b'W' | b'E' | b'F') {
        return None;
    }
    at += 1;
    // mmdd hh:mm:ss.uuuuuu
    for want in "0000 00:00:00.000000".bytes() {
        let got = byte(at)?;
        let fits = if want == b'0' {
            got.is_ascii_digit()
        } else {
            got == want
        };
        if !fits {
            return None;
        }
        at += 1;
    }
    // ' ' then the thread id, space-padded to 7 digits (wider when it does not fit)
    if byte(at)? != b' ' {
        return None;
    }
    while byte(at)? == b' ' {
        at += 1;
    }
    let digits = at;
    while byte(at)?.is_ascii_digit() {
        at += 1;
    }
    if at == digits || byte(at)? != b' ' {
        return None;
    }
    at += 1;
    // file:line] (the file may carry its directory with -add_dir_header)
    let file = at;
    while !matches!(byte(at)?, b':' | b' ' | b']') {
        at += 1;
    }
    if at == file || byte(at)? != b':' {
        return None;
    }
    at += 1;
    let number = at;
    while byte(at)?.is_ascii_digit() {
        at += 1;
    }
    if at == number || byte(at)? != b']' || byte(at + 1)? != b' ' {
        return None;
    }
    line.get(at + 2..)
}

/// The content of a Go-quoted string (`strconv.Quote`, as klog writes values) whose opening
/// quote is already consumed: everything up to the first unescaped `"`, still escaped.
fn quoted_prefix(s: &str) -> Option<&str> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(&s[..i]),
            _ => {}
        }
    }
    None
}

/// What PLEG's health check says before its first relist has completed
/// (`pleg has yet to be successful`): every kubelet logs it for a moment at start (the real
/// kubelet 1.34 of tests/real_node.rs, at every start), so it is no stall.
const NOT_YET: &str = "PLEG is not healthy: pleg has yet to be successful";

/// The PLEG element of kubelet's error list (the whole value, or one of the `, `-separated
/// elements of a bracketed aggregate), unless it is kubelet's start-up [`NOT_YET`].
fn pleg_element(errors: &str) -> Option<&str> {
    any_pleg_element(errors).filter(|e| !e.starts_with(NOT_YET))
}

fn any_pleg_element(errors: &str) -> Option<&str> {
    if errors.starts_with(PLEG) {
        return Some(errors.trim_end_matches(']'));
    }
    let inner = errors.strip_prefix('[')?.strip_suffix(']')?;
    if inner.starts_with(PLEG) {
        return Some(inner);
    }
    let at = inner.find(&format!(", {PLEG}"))?;
    Some(&inner[at + 2..])
}

/// kubelet's JSON format: the top-level `msg` is the sync loop's and `err` names PLEG.
fn json_pleg_complaint(line: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    let object = value.as_object()?;
    if object.get("msg")?.as_str()? != "Skipping pod synchronization" {
        return None;
    }
    pleg_element(object.get("err")?.as_str()?).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real kubelet lines, both formats (see the module doc for where each comes from).
    /// kubelet < 1.21, klog text, the aggregate in brackets (as in the fixtures).
    const TEXT_BRACKETED: &str = "I1105 09:50:27.583544  548093 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active 58h29m3.043779855s ago; threshold is 3m0s]";
    /// kubelet 1.14-1.20, klog text, one error (no brackets), at error level.
    const TEXT_BARE: &str = "E0703 19:59:01.292918 1946644 kubelet.go:1879] skipping pod synchronization - PLEG is not healthy: pleg was last seen active 3m36.462980645s ago; threshold is 3m0s";
    /// kubelet >= 1.21, structured (as in the fixtures and the stand-in kubelet).
    const STRUCTURED_ONE: &str = r#"I1105 09:50:27.583544     123 kubelet.go:2412] "Skipping pod synchronization" err="[PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s]""#;
    /// kubelet 1.34 (`klog.ErrorS`), one error: no brackets.
    const STRUCTURED_BARE: &str = r#"E1202 14:00:00.000000    2913 kubelet.go:2593] "Skipping pod synchronization" err="PLEG is not healthy: pleg was last seen active 3m0.5s ago; threshold is 3m0s""#;
    /// A freshly started kubelet: two errors in the aggregate.
    const STRUCTURED_TWO: &str = r#"E0826 17:00:14.128025    1445 kubelet.go:1882] "Skipping pod synchronization" err="[container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful]""#;
    /// With `-add_dir_header`.
    const WITH_DIR: &str = r#"E0826 17:00:14.128025    1445 pkg/kubelet/kubelet.go:1882] "Skipping pod synchronization" err="PLEG is not healthy: pleg has yet to be successful""#;
    /// `--logging-format=json`.
    /// kubelet v1.34.12 of tests/real_node.rs, containerd frozen for 3 min (its journal).
    const REAL_134_RUNTIME_DOWN: &str = r#"E1204 22:28:51.228365 186 kubelet.go:2457] "Skipping pod synchronization" err="[container runtime is down, PLEG is not healthy: pleg was last seen active 3m3.153220259s ago; threshold is 3m0s]""#;
    /// The same kubelet at its start, on a healthy node.
    const REAL_134_START: &str = r#"E1204 21:40:37.061696 263 kubelet.go:2457] "Skipping pod synchronization" err="[container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful]""#;
    const JSON: &str = r#"{"ts":1733150000123.4,"caller":"kubelet/kubelet.go:2593","msg":"Skipping pod synchronization","v":0,"err":"PLEG is not healthy: pleg was last seen active 3m0.5s ago; threshold is 3m0s"}"#;

    #[test]
    fn kubelets_own_lines_match_in_every_format() {
        for line in [
            TEXT_BRACKETED,
            TEXT_BARE,
            STRUCTURED_ONE,
            STRUCTURED_BARE,
            REAL_134_RUNTIME_DOWN,
            JSON,
        ] {
            let got = pleg_complaint(line);
            assert!(
                got.as_deref().is_some_and(|e| e.starts_with(PLEG)),
                "{line}: {got:?}"
            );
        }
        assert_eq!(
            pleg_complaint(TEXT_BRACKETED).as_deref(),
            Some(
                "PLEG is not healthy: pleg was last seen active 58h29m3.043779855s ago; threshold is 3m0s"
            )
        );
        assert_eq!(
            pleg_complaint(REAL_134_RUNTIME_DOWN).as_deref(),
            Some(
                "PLEG is not healthy: pleg was last seen active 3m3.153220259s ago; threshold is 3m0s"
            )
        );
    }

    /// kubelet's sync-loop line before PLEG's first relist completed (`pleg has yet to be
    /// successful`): the real kubelet 1.34 logs it at every start, and pleg-guard once
    /// restarted a fresh, healthy kubelet on it. No stall, in any format.
    #[test]
    fn kubelets_start_up_line_is_no_stall() {
        for line in [STRUCTURED_TWO, WITH_DIR, REAL_134_START] {
            assert_eq!(pleg_complaint(line), None, "{line}");
        }
        assert_eq!(
            pleg_complaint(
                r#"{"msg":"Skipping pod synchronization","err":"PLEG is not healthy: pleg has yet to be successful"}"#
            ),
            None
        );
    }

    /// `klog.V(1).InfoS("Probe failed", ..., "output", output)` in pkg/kubelet/prober: a
    /// tenant's probe output, quoted, inside kubelet's line. It is not kubelet's complaint,
    /// whatever the output says.
    #[test]
    fn a_probe_output_quoting_kubelets_line_does_not_match() {
        let forged = [
            // the PLEG text alone
            r#"I1202 14:00:00.000000    2913 prober.go:107] "Probe failed" probeType="Liveness" pod="tenant/evil" podUID="0c0a" containerName="c" probeResult="failure" output="PLEG is not healthy: pleg was last seen active 3m45s ago; threshold is 3m0s""#,
            // kubelet's whole structured line, quoted (klog escapes the inner quotes)
            r#"I1202 14:00:00.000000    2913 prober.go:107] "Probe failed" probeType="Readiness" pod="tenant/evil" podUID="0c0a" containerName="c" probeResult="failure" output="\"Skipping pod synchronization\" err=\"PLEG is not healthy: x\"""#,
            // kubelet's whole text line
            r#"I1202 14:00:00.000000    2913 prober.go:107] "Probe failed" probeType="Liveness" pod="tenant/evil" podUID="0c0a" containerName="c" probeResult="failure" output="I1202 14:00:00.000000 1 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: x]""#,
            // a multi-line output: klog writes it as `output=<` and tab-indented lines
            "\tI1202 14:00:00.000000    2913 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: x]",
            // an event message or error text that only mentions it
            r#"E1202 14:00:00.000000    2913 pod_workers.go:1301] "Error syncing pod, skipping" err="PLEG is not healthy: x" pod="tenant/evil""#,
            // after a PLEG-free err, in a later field
            r#"E1202 14:00:00.000000    2913 kubelet.go:2593] "Skipping pod synchronization" err="container runtime is down" note="PLEG is not healthy: x""#,
            // the text form whose err does not start the error list
            "E0703 19:59:01.292918 1946644 kubelet.go:1879] skipping pod synchronization - container runtime is down; PLEG is not healthy: x",
            // no header, a broken header, a space before it
            "skipping pod synchronization - [PLEG is not healthy: x]",
            "I1202 14:00:00.000000 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: x]",
            " I1202 14:00:00.000000 1 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: x]",
            "X1202 14:00:00.000000 1 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: x]",
            "PLEG is not healthy: pleg was last seen active 3m45s ago",
            // JSON with the text in another field
            r#"{"msg":"Probe failed","output":"{\"msg\":\"Skipping pod synchronization\",\"err\":\"PLEG is not healthy: x\"}"}"#,
            "",
        ];
        for line in forged {
            assert!(pleg_complaint(line).is_none(), "{line}");
        }
    }

    #[test]
    fn short_unix_prefixes_are_stripped() {
        assert_eq!(
            short_unix_message(&format!(
                "1733150000.123456 host kubelet[7]: {STRUCTURED_ONE}"
            )),
            Some(STRUCTURED_ONE)
        );
        assert_eq!(
            short_unix_message("1733150000.123456 kubelet[7]: I1202 msg: with colon"),
            Some("I1202 msg: with colon")
        );
        assert_eq!(short_unix_message("-- No entries --"), None);
        assert_eq!(short_unix_message(""), None);
    }
}
