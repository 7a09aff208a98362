//! Goroutine stacks out of what a Go daemon wrote, and the one line a post-mortem starts from.
//! Pure: text in, text out.
//!
//! - containerd logs its dump (SIGUSR1) as one logrus message, `msg="=== BEGIN goroutine
//!   stack dump ===\ngoroutine 1 [running]:\n..."`, quoted with Go's escapes; journald splits
//!   a line that long into entries of `LineMax` bytes, so the entries are joined without a
//!   separator before the markers are looked for ([`between_markers`]).
//! - Any Go program's runtime prints the dump of SIGQUIT to stderr line by line, from
//!   `SIGQUIT: quit` on, and exits ([`from_sigquit`]).
//! - dockerd writes its dump (SIGUSR1) to a file and logs `goroutine stacks written to PATH`
//!   ([`dockerd_dump_path`]).

use std::path::PathBuf;

/// containerd's (and old dockerd's) markers around a dump.
const BEGIN: &str = "=== BEGIN goroutine stack dump ===";
const END: &str = "=== END goroutine stack dump ===";
/// The first line of the Go runtime's dump on SIGQUIT.
const SIGQUIT_LINE: &str = "SIGQUIT: quit";
/// dockerd's log line naming its dump file.
const DOCKERD_WRITTEN: &str = "goroutine stacks written to ";

/// A dump between the BEGIN and END markers of `entries` (the journal's messages, one a line,
/// as `journalctl -o cat` prints them), its escapes undone when it was logged quoted. None
/// until the END marker is there (the dump is still being written, or was cut short).
pub fn between_markers(entries: &str) -> Option<String> {
    // quoted (logrus's text format): `\n` is two characters, and journald cut the one long
    // message into entries (anywhere, the marker too), which are joined as they were; plain:
    // one line an entry
    let unsplit: String = entries.lines().collect();
    let at = unsplit.find(BEGIN)? + BEGIN.len();
    let quoted = unsplit[at..].starts_with("\\n");
    let joined = if quoted {
        unsplit
    } else {
        entries.lines().collect::<Vec<_>>().join("\n")
    };
    let start = joined.find(BEGIN)? + BEGIN.len();
    let end = start + joined[start..].find(END)?;
    let body = &joined[start..end];
    let text = if quoted {
        unquote_go(body)
    } else {
        body.to_owned()
    };
    Some(text.trim_matches('\n').to_owned())
}

/// The Go runtime's SIGQUIT dump in `lines` (one message a line): from `SIGQUIT: quit` to the
/// end. None when the line is not there.
pub fn from_sigquit(lines: &str) -> Option<String> {
    let start = lines.find(SIGQUIT_LINE)?;
    Some(lines[start..].trim_end().to_owned())
}

/// The file dockerd says it wrote its dump to (an absolute path), the newest such line.
pub fn dockerd_dump_path(lines: &str) -> Option<PathBuf> {
    lines.lines().rev().find_map(|l| {
        let at = l.find(DOCKERD_WRITTEN)? + DOCKERD_WRITTEN.len();
        let path = l[at..]
            .split(|c: char| c == '"' || c.is_whitespace())
            .next()?;
        path.starts_with('/').then(|| PathBuf::from(path))
    })
}

/// Undo Go's `%q` escapes (`\n`, `\t`, `\"`, `\\`, `\xHH`, `\uHHHH`, `\UHHHHHHHH`, ...);
/// anything malformed is kept as it stands.
pub fn unquote_go(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match e {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            '\'' => Some('\''),
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'v' => Some('\u{b}'),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let digits = match e {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        let hex: String = (0..digits).filter_map(|_| chars.next()).collect();
        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
            Some(c) if hex.len() == digits => out.push(c),
            _ => {
                out.push('\\');
                out.push(e);
                out.push_str(&hex);
            }
        }
    }
    out
}

/// Frames that mark a goroutine as serving a call (a gRPC method, an HTTP request) or as
/// kubelet's relist: what a hang holds up. A daemon's longest waits are otherwise its idle
/// ones (`main` waiting for a signal, listeners, tickers), which say nothing.
const SERVING_FRAMES: [&str; 5] = [
    "google.golang.org/grpc.(*Server).processUnaryRPC",
    "google.golang.org/grpc.(*Server).processStreamingRPC",
    "net/http.(*conn).serve",
    "/pkg/kubelet/pleg.(*GenericPLEG).",
    "/pkg/kubelet/pleg.(*EventedPLEG).",
];

/// One goroutine of a dump, as [`summary`] ranks it.
#[derive(Debug, Default)]
struct Goroutine {
    /// `goroutine 7 [select, 58 minutes]`
    header: String,
    /// The minutes Go printed (0 below a minute).
    minutes: u64,
    /// The first frame outside Go's runtime, sync and internal packages.
    own_frame: Option<String>,
    /// A frame of [`SERVING_FRAMES`] is on its stack.
    serving: bool,
    /// `goroutine 1`: main, in a daemon usually waiting for its end.
    main: bool,
}

impl Goroutine {
    fn add_frame(&mut self, line: &str) {
        if line.starts_with('\t') || line.is_empty() {
            return;
        }
        if SERVING_FRAMES.iter().any(|f| line.contains(f)) {
            self.serving = true;
        }
        let go_own = ["runtime.", "sync.", "internal/", "created by "]
            .iter()
            .any(|p| line.starts_with(p));
        if self.own_frame.is_none() && !go_own {
            let name = line.rsplit_once('(').map_or(line, |(f, _)| f);
            self.own_frame = Some(name.to_owned());
        }
    }

    /// The order of interest: serving a call, then not main, then the longer wait.
    fn rank(&self) -> (bool, bool, u64) {
        (self.serving, !self.main, self.minutes)
    }
}

/// What a dump says at a glance: how many goroutines, how many of those serving a call have
/// waited a minute or more (Go prints `goroutine 7 [select, 58 minutes]:` from a minute on),
/// and the one to start a post-mortem from ("relist was blocked in ..."): the longest waiting
/// goroutine that serves a call, else the longest waiting one other than main, else main;
/// with its first frame outside Go's own runtime, sync and internal packages. None for a text
/// with no goroutine.
pub fn summary(dump: &str) -> Option<String> {
    let mut goroutines: Vec<Goroutine> = Vec::new();
    for line in dump.lines() {
        if let Some(rest) = line.strip_prefix("goroutine ") {
            if line.ends_with("]:") {
                let minutes = rest
                    .split_once('[')
                    .and_then(|(_, s)| s.strip_suffix("]:"))
                    .and_then(|s| s.split(", ").find_map(|p| p.strip_suffix(" minutes")))
                    .and_then(|m| m.trim().parse().ok())
                    .unwrap_or(0);
                goroutines.push(Goroutine {
                    header: line.trim_end_matches(':').to_owned(),
                    minutes,
                    main: rest.starts_with("1 "),
                    ..Goroutine::default()
                });
                continue;
            }
        }
        if let Some(g) = goroutines.last_mut() {
            g.add_frame(line);
        }
    }
    if goroutines.is_empty() {
        return None;
    }
    let count = goroutines.len();
    let blocked_serving = goroutines
        .iter()
        .filter(|g| g.serving && g.minutes > 0)
        .count();
    // max_by_key keeps the last of equals; the first in the dump is wanted
    let mut best: Option<&Goroutine> = None;
    for g in goroutines.iter().filter(|g| g.minutes > 0) {
        if best.is_none_or(|b| g.rank() > b.rank()) {
            best = Some(g);
        }
    }
    let serving = if blocked_serving > 0 {
        format!(", {blocked_serving} serving a call blocked a minute or more")
    } else {
        String::new()
    };
    Some(match best {
        Some(g) => format!(
            "{count} goroutines{serving}; longest wait: {}{}",
            g.header,
            g.own_frame
                .as_ref()
                .map_or(String::new(), |f| format!(" in {f}"))
        ),
        None => format!("{count} goroutines, none waiting a minute or more"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "goroutine 1 [running]:\nmain.main()\n\t/src/main.go:10 +0x1\n\n\
goroutine 77 [select, 3 minutes]:\nruntime.gopark(0x1)\n\t/go/src/runtime/proc.go:1 +0x2\n\
k8s.io/kubernetes/pkg/kubelet/pleg.(*GenericPLEG).Relist(0xc000)\n\t/k/pleg/generic.go:240 +0x3\n\n\
goroutine 9 [chan receive, 1 minutes]:\nsync.(*WaitGroup).Wait(0x1)\n\t/go/src/sync/wg.go:1\n\
github.com/containerd/containerd/v2/internal/cri.(*criService).ListContainers(0x2)\n";

    #[test]
    fn containerd_logrus_dump_split_by_journald_is_joined_and_unquoted() {
        let quoted = format!(
            "time=\"2026-12-07T03:00:00Z\" level=info msg=\"{BEGIN}\\n{}\\n{END}\"",
            DUMP.replace('\\', "\\\\")
                .replace('\n', "\\n")
                .replace('\t', "\\t")
                .replace('"', "\\\"")
        );
        // journald's LineMax split the line into three entries, mid-escape too
        let (a, rest) = quoted.split_at(70);
        let (b, c) = rest.split_at(rest.find("\\n").unwrap() + 1);
        let entries =
            format!("time=\"x\" level=info msg=\"starting\"\n{a}\n{b}\n{c}\nlater line\n");
        assert_eq!(between_markers(&entries).as_deref(), Some(DUMP.trim_end()));
        // a dump still being written (no END yet) is not taken
        assert_eq!(between_markers(&format!("{a}\n{b}")), None);
    }

    #[test]
    fn plain_marked_dump_is_taken_as_it_stands() {
        let text = format!("INFO[0000] {BEGIN}\n{DUMP}{END}\n");
        assert_eq!(between_markers(&text).as_deref(), Some(DUMP.trim_end()));
    }

    #[test]
    fn sigquit_dump_runs_to_the_end() {
        let lines =
            format!("I1207 kubelet.go:1] Starting\nSIGQUIT: quit\nPC=0x4 m=0 sigcode=0\n\n{DUMP}");
        let d = from_sigquit(&lines).unwrap();
        assert!(
            d.starts_with("SIGQUIT: quit\nPC=") && d.contains("goroutine 77"),
            "{d}"
        );
        assert_eq!(from_sigquit("nothing here"), None);
    }

    #[test]
    fn dockerd_names_its_dump_file() {
        let lines = "time=\"2026\" level=info msg=\"goroutine stacks written to /var/run/docker/goroutine-stacks-2026-12-07T030000Z.log\"\n";
        assert_eq!(
            dockerd_dump_path(lines),
            Some(PathBuf::from(
                "/var/run/docker/goroutine-stacks-2026-12-07T030000Z.log"
            ))
        );
        assert_eq!(
            dockerd_dump_path("goroutine stacks written to relative.log"),
            None
        );
        assert_eq!(dockerd_dump_path(""), None);
    }

    #[test]
    fn go_escapes_are_undone_and_malformed_ones_kept() {
        assert_eq!(
            unquote_go(r#"a\nb\t\"c\"\\d\x41\u00e9\U0001F600"#),
            "a\nb\t\"c\"\\dAé😀"
        );
        assert_eq!(
            unquote_go(r"bad \q \xZZ \u12 end\"),
            r"bad \q \xZZ \u12 end\"
        );
    }

    #[test]
    fn summary_names_the_longest_wait_and_its_own_frame() {
        assert_eq!(
            summary(DUMP).as_deref(),
            Some(
                "3 goroutines, 1 serving a call blocked a minute or more; longest wait: goroutine 77 [select, 3 minutes] in k8s.io/kubernetes/pkg/kubelet/pleg.(*GenericPLEG).Relist"
            )
        );
        assert_eq!(
            summary("goroutine 1 [running]:\nmain.main()\n").as_deref(),
            Some("1 goroutines, none waiting a minute or more")
        );
        assert_eq!(summary("no dump"), None);
    }

    /// containerd's dump in CI: main had waited longest (for its signal) and was named, while
    /// the CRI calls kubelet was waiting on sat further down.
    #[test]
    fn summary_prefers_a_blocked_call_to_mains_idle_wait() {
        let dump = "goroutine 1 [chan receive, 12 minutes]:\n\
github.com/containerd/containerd/v2/cmd/containerd/command.App.func1(0x1)\n\t/c/main.go:1\n\n\
goroutine 40 [IO wait, 12 minutes]:\ninternal/poll.runtime_pollWait(0x1)\n\
net.(*netFD).accept(0x2)\n\n\
goroutine 311 [sync.Mutex.Lock, 2 minutes]:\nsync.runtime_SemacquireMutex(0x1)\n\
sync.(*Mutex).Lock(0x2)\n\
github.com/containerd/containerd/v2/internal/cri/server.(*criService).ListContainers(0x3)\n\t/c/list.go:9\n\
google.golang.org/grpc.(*Server).processUnaryRPC(0x4)\n\t/g/server.go:1\n\n\
goroutine 312 [sync.Mutex.Lock, 1 minutes]:\nsync.(*Mutex).Lock(0x2)\n\
github.com/containerd/containerd/v2/internal/cri/server.(*criService).ListPodSandbox(0x3)\n\
google.golang.org/grpc.(*Server).processUnaryRPC(0x4)\n";
        assert_eq!(
            summary(dump).as_deref(),
            Some(
                "4 goroutines, 2 serving a call blocked a minute or more; longest wait: goroutine 311 [sync.Mutex.Lock, 2 minutes] in github.com/containerd/containerd/v2/internal/cri/server.(*criService).ListContainers"
            )
        );
        // no call blocked: the longest wait other than main's
        let idle = dump.split("goroutine 311").next().unwrap_or_default();
        assert_eq!(
            summary(idle).as_deref(),
            Some(
                "2 goroutines; longest wait: goroutine 40 [IO wait, 12 minutes] in net.(*netFD).accept"
            )
        );
        // only main waits: main it is
        let main_only = dump.split("goroutine 40").next().unwrap_or_default();
        assert!(
            summary(main_only).is_some_and(|s| s.ends_with(
                "in github.com/containerd/containerd/v2/cmd/containerd/command.App.func1"
            )),
            "{main_only}"
        );
    }
}
