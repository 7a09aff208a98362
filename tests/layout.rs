//! Rules of the code's layout that a compiler does not check for a binary crate (its
//! `missing_docs` lint sees nothing exported): every module says what it is for in a `//!`
//! doc, and nothing in `src/` uses `unsafe` (the `nix` crate's safe wrappers instead).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("cannot read {}", dir.display())
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn all_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 20, "found only {files:?}");
    files
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

#[test]
fn every_module_has_a_doc_comment() {
    let missing: Vec<String> = all_sources()
        .into_iter()
        // generated code is documented by the module that includes it
        .filter(|(_, text)| !text.starts_with("// @generated"))
        .filter(|(_, text)| !text.starts_with("//!"))
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a //! doc: {missing:#?}"
    );
}

#[test]
fn no_unsafe_in_the_daemon() {
    let offenders: Vec<String> = all_sources()
        .into_iter()
        .filter(|(_, text)| {
            text.lines()
                .map(str::trim_start)
                .filter(|l| !l.starts_with("//"))
                .any(|l| {
                    l.contains("unsafe {") || l.contains("unsafe fn") || l.contains("unsafe impl")
                })
        })
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "unsafe code in: {offenders:#?}");
}

/// Code lines of the files under `src/<dir>` that mention `path` (comments aside).
fn mentions(dir: &str, path: &str, skip_tests: bool) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    all_sources()
        .into_iter()
        .filter(|(p, _)| p.starts_with(&root))
        .filter(|(p, _)| {
            !(skip_tests
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with("tests.rs")))
        })
        .flat_map(|(p, text)| {
            text.lines()
                .filter(|l| !l.trim_start().starts_with("//") && l.contains(path))
                .map(|l| format!("{}: {}", p.display(), l.trim()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn probes_and_actions_stand_on_the_client_layer_and_not_on_each_other() {
    let mut wrong = mentions("action", "crate::probe", false);
    wrong.extend(mentions("probe", "crate::action", false));
    // The clients' fixture tests too drive the clients themselves, not the probes.
    wrong.extend(mentions("client", "crate::probe", false));
    wrong.extend(mentions("client", "crate::action", false));
    assert!(wrong.is_empty(), "layering broken: {wrong:#?}");
}

/// Whether a top-level line may stand after a test module: blank, indented, a comment, an
/// attribute or a module declared in its own file (`mod tests;`).
fn test_or_blank(line: &str) -> bool {
    line.is_empty()
        || line.starts_with(char::is_whitespace)
        || line.starts_with("//")
        || line.starts_with("#[")
        || (line.starts_with("mod ") && line.ends_with(';'))
}

/// Lines of `text` at the top level that come after an inline test module (`#[cfg(test)]` then
/// `mod name {`, closed by a `}` in column 0): only further test modules (inline or in their own
/// file) may follow one.
fn code_after_tests(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut in_tests = false;
    let mut after_tests = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let opens_tests = line == "#[cfg(test)]"
            && lines.get(i + 1).is_some_and(|next| {
                let next = next.trim_start_matches("pub(crate) ");
                next.starts_with("mod ") && next.ends_with('{')
            });
        if in_tests {
            in_tests = line != "}";
        } else if opens_tests {
            in_tests = true;
            after_tests = true;
            i += 1;
        } else if after_tests && !test_or_blank(line) {
            found.push(format!("{}: {line}", i + 1));
        }
        i += 1;
    }
    found
}

#[test]
fn test_modules_come_last() {
    assert_eq!(
        code_after_tests("fn a() {}\n\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n"),
        Vec::<String>::new()
    );
    assert_eq!(
        code_after_tests("#[cfg(test)]\nmod tests {\n}\n\npub fn late() {}\n"),
        vec!["5: pub fn late() {}".to_owned()]
    );
    let offenders: Vec<String> = all_sources()
        .into_iter()
        .flat_map(|(p, text)| {
            code_after_tests(&text)
                .into_iter()
                .map(move |l| format!("{}:{l}", p.display()))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "code after a test module (tests belong at the end): {offenders:#?}"
    );
}

// ---- the module graph: rooms, floors, arrows, circles --------------------------------------
//
// A room is a module down to a depth (`config`, `systemd/window`, `client/kubelet`), an arrow
// is a path to another room named in non-test code (`use crate::…`, `crate::…::x`,
// `super::…`), a circle is a set of rooms that reach each other, and a room's floor is the
// longest chain of arrows below it. `cargo test --test layout -- --nocapture module_graph`
// prints it; `LAYOUT_SRC=/other/tree/src` measures another checkout (e.g. an older commit's
// `git worktree`). It looks at rooms one level deep (top-level modules) and two levels deep;
// `LAYOUT_DEPTH=N` looks at one depth only.

use std::collections::{BTreeMap, BTreeSet};

/// How deep a room goes at most: `client/kubelet` is a room, `client/kubelet/url` part of it.
const ROOM_DEPTH: usize = 2;

/// The module path of a source file (`src/a/mod.rs` and `src/a.rs` are `a`), None for the roots.
fn module_of(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts.is_empty() {
        return None;
    }
    Some(parts)
}

/// Test-only code: `*tests.rs` files and the test helpers' modules.
fn test_only(module: &[String]) -> bool {
    module.last().is_some_and(|m| m.ends_with("tests"))
        || module
            .first()
            .is_some_and(|m| m == "property_tests" || m == "testing")
}

/// A file's code without comments and without its test modules (they come last).
fn code_without_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = String::new();
    for (i, line) in lines.iter().enumerate() {
        let opens_tests = *line == "#[cfg(test)]"
            && lines.get(i + 1).is_some_and(|next| {
                let next = next.trim_start_matches("pub(crate) ");
                next.starts_with("mod ") && next.ends_with('{')
            });
        if opens_tests {
            break;
        }
        if !line.trim_start().starts_with("//") {
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `a::b::c` at the start of `s`: the segments, and the rest after them (at a `::{` group the
/// rest starts with `{`).
fn segments(s: &str) -> (Vec<String>, &str) {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let n = rest.find(|c: char| !ident_char(c)).unwrap_or(rest.len());
        if n == 0 {
            return (out, rest);
        }
        out.push(rest[..n].to_owned());
        rest = &rest[n..];
        match rest.strip_prefix("::") {
            Some(r) if r.starts_with(|c: char| ident_char(c)) => rest = r,
            Some(r) if r.starts_with('{') => return (out, r),
            _ => return (out, rest),
        }
    }
}

/// Every path that starts with `crate::`, `super::` or `pleg_guard::` in `code`, as its head
/// and segments; a `::{a, b::c}` group gives one path per item.
fn paths_in(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for head in ["crate::", "super::", "pleg_guard::"] {
        for (at, _) in code.match_indices(head) {
            if code[..at].ends_with(|c: char| ident_char(c) || c == ':') {
                continue;
            }
            let (base, rest) = segments(&code[at + head.len()..]);
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            let (segs, _) = segments(item.trim());
                            out.push((head.to_owned(), [base.clone(), segs].concat()));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                let (segs, _) = segments(item.trim());
                out.push((head.to_owned(), [base.clone(), segs].concat()));
            } else {
                out.push((head.to_owned(), base));
            }
        }
    }
    out
}

/// Rooms and the arrows between them.
struct Graph {
    arrows: BTreeMap<String, BTreeSet<String>>,
    rooms: BTreeSet<String>,
}

fn module_graph(src: &Path, depth: usize) -> Graph {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut modules = BTreeMap::new();
    for f in files {
        let Ok(rel) = f.strip_prefix(src) else {
            continue;
        };
        if let Some(m) = module_of(rel) {
            modules.insert(m, f);
        }
    }
    let room = |m: &[String]| m[..m.len().min(depth)].join("/");
    let resolve = |path: &[String]| {
        (1..=path.len())
            .rev()
            .map(|k| &path[..k])
            .find(|p| modules.contains_key(*p))
            .map(<[String]>::to_vec)
    };
    let mut g = Graph {
        arrows: BTreeMap::new(),
        rooms: BTreeSet::new(),
    };
    for (m, file) in &modules {
        if test_only(m) || m == &["main"] {
            continue;
        }
        let from = room(m);
        g.rooms.insert(from.clone());
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (head, segs) in paths_in(&code_without_tests(&text)) {
            let full = if head == "super::" {
                // `super` of `a/b.rs` (module a::b) is `a`; of `a/mod.rs` (module a) the root
                [&m[..m.len() - 1], &segs[..]].concat()
            } else {
                segs
            };
            let Some(to) = resolve(&full) else { continue };
            if test_only(&to) {
                continue;
            }
            let to = room(&to);
            if to != from {
                g.arrows.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    g
}

/// The circles (rooms that reach each other) and each room's floor.
fn circles_and_floors(g: &Graph) -> (Vec<Vec<String>>, BTreeMap<String, usize>) {
    let reach = |start: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.clone()];
        while let Some(r) = todo.pop() {
            for next in g.arrows.get(&r).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        g.rooms.iter().map(|r| (r, reach(r))).collect();
    let mut circles: Vec<Vec<String>> = Vec::new();
    for r in &g.rooms {
        let mut circle: Vec<String> = g
            .rooms
            .iter()
            .filter(|o| reaches[r].contains(*o) && reaches[*o].contains(r))
            .cloned()
            .collect();
        circle.sort();
        if circle.len() > 1 && !circles.contains(&circle) {
            circles.push(circle);
        }
    }
    // floors: a room stands one above the highest room it reaches outside its own circle
    let mut floors: BTreeMap<String, usize> = BTreeMap::new();
    while floors.len() < g.rooms.len() {
        for r in &g.rooms {
            if floors.contains_key(r) {
                continue;
            }
            let below: Vec<&String> = reaches[r]
                .iter()
                .filter(|o| !reaches[*o].contains(r))
                .collect();
            if below.iter().all(|o| floors.contains_key(*o)) {
                let floor = below.iter().map(|o| floors[*o] + 1).max().unwrap_or(0);
                floors.insert(r.clone(), floor);
            }
        }
    }
    (circles, floors)
}

#[test]
fn module_graph_has_no_circle() {
    let src = std::env::var_os("LAYOUT_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let depths: Vec<usize> = match std::env::var("LAYOUT_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
    {
        Some(d) => vec![d],
        None => vec![1, ROOM_DEPTH],
    };
    let mut found = Vec::new();
    for depth in depths {
        let g = module_graph(&src, depth);
        let (circles, floors) = circles_and_floors(&g);
        let arrows: usize = g.arrows.values().map(BTreeSet::len).sum();
        let top = floors.values().copied().max().unwrap_or(0);
        println!(
            "{} (rooms {depth} deep): {} rooms, {} floors, {arrows} arrows, {} circles",
            src.display(),
            g.rooms.len(),
            top + 1,
            circles.len()
        );
        for floor in (0..=top).rev() {
            let rooms: Vec<&str> = floors
                .iter()
                .filter(|(_, f)| **f == floor)
                .map(|(r, _)| r.as_str())
                .collect();
            println!("  floor {floor}: {}", rooms.join(" "));
        }
        for c in &circles {
            println!("  circle: {}", c.join(" "));
        }
        assert!(g.rooms.len() > 10, "found only {:?}", g.rooms);
        found.extend(circles);
    }
    assert!(
        found.is_empty(),
        "modules that import each other: {found:#?}"
    );
}

#[test]
fn module_paths_are_read_as_written() {
    assert_eq!(
        paths_in("use crate::systemd::{forecast::Thresholds, window::Window};\n"),
        vec![
            (
                "crate::".to_owned(),
                vec!["systemd".into(), "forecast".into(), "Thresholds".into()]
            ),
            (
                "crate::".to_owned(),
                vec!["systemd".into(), "window".into(), "Window".into()]
            ),
        ]
    );
    assert_eq!(
        paths_in("#[serde(with = \"crate::clock::time_format\")]"),
        vec![(
            "crate::".to_owned(),
            vec!["clock".into(), "time_format".into()]
        )]
    );
    assert!(paths_in("let x = other_crate::a;").is_empty());
    assert_eq!(
        module_of(Path::new("client/kubelet/mod.rs")),
        Some(vec!["client".to_owned(), "kubelet".to_owned()])
    );
}

/// The pure cores decide; they name no module that does I/O (probes, actions, clients, the
/// daemon, the commands), only the vocabulary below them.
#[test]
fn pure_cores_name_no_io_module() {
    let io = [
        "crate::probe",
        "crate::action",
        "crate::client",
        "crate::daemon",
        "crate::cmd",
    ];
    let cores = [
        "diagnosis.rs",
        "ladder.rs",
        "target.rs",
        "systemd/forecast.rs",
        "systemd/window.rs",
        "systemd/preempt.rs",
        "systemd/version",
        "fleet/backend/etcd/group",
        "fleet/backend/kubernetes/names.rs",
        "fleet/backend/kubernetes/slots.rs",
        "fleet/backend/kubernetes/types.rs",
        "fleet/policy.rs",
    ];
    let mut wrong = Vec::new();
    for core in cores {
        for module in io {
            wrong.extend(mentions(core, module, true));
        }
    }
    assert!(
        wrong.is_empty(),
        "pure cores reaching into I/O modules: {wrong:#?}"
    );
}

/// Every shell script of the repository (tests, packaging, CI, the protoc wrapper).
fn shell_scripts() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut dirs = vec![
        root.join("tests"),
        root.join("packaging"),
        root.join(".ci"),
        root.join("fuzz"),
    ];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if std::fs::read_to_string(&p).is_ok_and(|t| {
                p.extension().is_some_and(|x| x == "sh")
                    || t.starts_with("#!/bin/bash")
                    || t.starts_with("#!/usr/bin/env bash")
            }) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Under `set -o pipefail`, `producer | grep -q` fails whenever grep exits at its first match
/// before the producer's last write (SIGPIPE): an image that is there reads as missing. That
/// was the fresh-machine failure of issue 31 (`ctr images ls -q | grep -qx`, about one call in
/// a hundred). Scripts read the producer's whole output first (`x=$(...)`, `grep -q <<<"$x"`).
#[test]
fn no_script_pipes_into_an_early_exiting_grep_under_pipefail() {
    let scripts = shell_scripts();
    assert!(
        scripts
            .iter()
            .any(|p| p.ends_with("tests/bed/containerd.sh")),
        "{scripts:?}"
    );
    let mut bad = Vec::new();
    for p in scripts {
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        if !text.contains("pipefail") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split(" #").next().unwrap_or(line);
            if code.trim_start().starts_with('#') {
                continue;
            }
            for piece in code.split('|').skip(1) {
                let words: Vec<&str> = piece.split_whitespace().collect();
                let early = match words.first() {
                    Some(&"grep") => words.iter().any(|w| {
                        w.starts_with('-')
                            && !w.starts_with("--")
                            && (w.contains('q') || w.contains('m'))
                    }),
                    Some(&"head") => true,
                    _ => false,
                };
                // `... | head -n 1 || true` says it does not mind
                if early && !code.contains("|| true") {
                    bad.push(format!("{}:{}: {}", p.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "early-exiting reader in a pipeline under pipefail:\n{}",
        bad.join("\n")
    );
}
