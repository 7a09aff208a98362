//! Whole log lines out of arbitrary chunks, in bounded memory.
//!
//! kubelet's log reaches pleg-guard in chunks that do not respect line ends: docker's log
//! stream frames and `journalctl`'s pipe reads can split a line anywhere (even inside a UTF-8
//! character). [`LineAssembler`] joins the pieces, hands out each line once it is complete,
//! and keeps at most [`MAX_LINE`] bytes of any one line (the rest of an overlong line is
//! dropped, so a stream without newlines cannot grow memory without bound). [`LastMatch`]
//! keeps the newest line a [`LineMatch`] accepts (kubelet's own PLEG complaint,
//! [`super::kubelet_log`]), the fact the kubelet log readers report.
//!
//! Shared by the journal ([`super::journal`]) and docker ([`super::docker`]) log readers.

/// The most bytes kept of one line (journald's default `LineMax` is 48 KiB).
pub const MAX_LINE: usize = 64 * 1024;

/// Joins chunks into lines.
#[derive(Debug, Default)]
pub struct LineAssembler {
    partial: Vec<u8>,
    /// The current line passed [`MAX_LINE`]: its remaining bytes are dropped.
    overlong: bool,
}

impl LineAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one chunk; `each` is called with every line it completes (without its `\n`, a
    /// trailing `\r` removed, invalid UTF-8 replaced).
    pub fn push(&mut self, chunk: &[u8], mut each: impl FnMut(&str)) {
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            self.append(&rest[..i]);
            self.emit(&mut each);
            rest = &rest[i + 1..];
        }
        self.append(rest);
    }

    /// The last line, if the stream ended without a newline.
    pub fn finish(&mut self, mut each: impl FnMut(&str)) {
        if !self.partial.is_empty() {
            self.emit(&mut each);
        }
    }

    /// Bytes held for the unfinished line (never more than [`MAX_LINE`]).
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    fn append(&mut self, bytes: &[u8]) {
        if self.overlong {
            return;
        }
        let room = MAX_LINE - self.partial.len();
        if bytes.len() > room {
            self.partial.extend_from_slice(&bytes[..room]);
            self.overlong = true;
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }

    fn emit(&mut self, each: &mut impl FnMut(&str)) {
        let line = String::from_utf8_lossy(&self.partial);
        each(line.strip_suffix('\r').unwrap_or(&line));
        self.partial.clear();
        self.overlong = false;
    }
}

/// The most characters kept of a matching line.
pub const MAX_MATCH_CHARS: usize = 400;

/// Whether one log line (as the program wrote it, without a journal prefix) is the one sought.
pub type LineMatch = fn(&str) -> bool;

/// The newest line a [`LineMatch`] accepts (its first [`MAX_MATCH_CHARS`] characters).
#[derive(Debug)]
pub struct LastMatch {
    matches: LineMatch,
    last: Option<String>,
}

impl LastMatch {
    /// Nothing matched yet.
    pub fn new(matches: LineMatch) -> Self {
        LastMatch {
            matches,
            last: None,
        }
    }

    /// Keep `line` if it matches.
    pub fn note(&mut self, line: &str) {
        if (self.matches)(line) {
            self.last = Some(line.chars().take(MAX_MATCH_CHARS).collect());
        }
    }

    /// The newest matching line, if any.
    pub fn into_last(self) -> Option<String> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines_of(chunks: &[&[u8]]) -> Vec<String> {
        let mut a = LineAssembler::new();
        let mut out = Vec::new();
        for c in chunks {
            a.push(c, |l| out.push(l.to_owned()));
        }
        a.finish(|l| out.push(l.to_owned()));
        out
    }

    #[test]
    fn a_line_split_across_chunks_is_whole() {
        let line = "I1105 kubelet.go:2412] \"Skipping pod synchronization\" err=\"[PLEG is not healthy: pleg was last seen active 3m45s ago]\"";
        let (a, b) = line.as_bytes().split_at(40); // inside "PLEG"?  No: inside the message
        assert_eq!(
            lines_of(&[b"first\n", a, b, b"\nlast"]),
            ["first", line, "last"]
        );
        // Split inside the marker itself, and inside a multi-byte character.
        let text = "x PLEG is not healthy é\n".as_bytes();
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(
                lines_of(&[a, b]),
                ["x PLEG is not healthy é"],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_endless_line_is_bounded() {
        let mut a = LineAssembler::new();
        let chunk = vec![b'x'; 1 << 20];
        let mut seen = Vec::new();
        for _ in 0..16 {
            a.push(&chunk, |l| seen.push(l.len()));
            assert!(a.pending() <= MAX_LINE);
        }
        a.push(b"\nnext\n", |l| seen.push(l.len()));
        assert_eq!(seen, [MAX_LINE, 4]);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// However a text is cut into chunks, the same lines come out.
        #[test]
        fn chunking_does_not_change_the_lines(
            text in proptest::collection::vec(any::<u8>(), 0..600),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let whole = lines_of(&[&text]);
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(text.len() + 1)).collect();
            at.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut from = 0;
            for c in at {
                chunks.push(&text[from..c]);
                from = c;
            }
            chunks.push(&text[from..]);
            prop_assert_eq!(lines_of(&chunks), whole);
        }
    }
}
