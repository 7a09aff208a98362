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
