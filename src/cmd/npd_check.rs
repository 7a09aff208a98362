//! `pleg-guard npd-check CONDITION`: a node-problem-detector custom-plugin rule, answered from
//! the running daemon's status.json with no probing (no bus, socket or D-Bus call); or a
//! temporary rule (an Event), answered from the action ledger and this rule's cursor file
//! `<state_directory>/npd/<RULE>.json`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use crate::cli::NpdCheckArgs;
use crate::config;
use crate::ledger;
use crate::npd::events::{self, Cursor, Temporary};
use crate::npd::{self, Condition, Verdict};
use crate::report::status_file;

/// Exit 0 condition false, 1 true, 2 unknown (no daemon, stale or unreadable status, bad
/// configuration, unknown condition); the message is the first line of standard output.
pub fn main(args: NpdCheckArgs) -> ExitCode {
    let verdict = check(&args);
    println!("{}", verdict.message);
    ExitCode::from(verdict.exit)
}

fn check(args: &NpdCheckArgs) -> Verdict {
    if let Some(rule) = Temporary::from_name(&args.condition) {
        return temporary(args, rule);
    }
    let Some(condition) = Condition::from_name(&args.condition) else {
        let known: Vec<&str> = Condition::ALL
            .iter()
            .map(|(_, n)| *n)
            .chain(Temporary::ALL.iter().map(|(_, n)| *n))
            .collect();
        return Verdict::unknown(format!(
            "unknown condition {:?}; known: {}",
            args.condition,
            known.join(", ")
        ));
    };
    let runtime_directory = match config::load(args.config.config.as_deref()) {
        Ok(l) => l.config.runtime_directory,
        Err(e) => return Verdict::unknown(format!("pleg-guard config: {e}")),
    };
    let snapshot = match status_file::read(&runtime_directory) {
        Ok(s) => s,
        Err(e) => return Verdict::unknown(format!("pleg-guard status: {e}")),
    };
    let alive = snapshot.pid.is_some_and(super::status::pid_alive);
    npd::verdict(condition, &snapshot, SystemTime::now(), alive)
}

/// The cursor file of `rule` in the state directory.
pub fn cursor_path(state_directory: &Path, rule: Temporary) -> PathBuf {
    state_directory
        .join("npd")
        .join(format!("{}.json", rule.name()))
}

/// A temporary rule: the oldest unreported run, the cursor saved before it is printed.
fn temporary(args: &NpdCheckArgs, rule: Temporary) -> Verdict {
    let state_directory = match config::load(args.config.config.as_deref()) {
        Ok(l) => l.config.state_directory,
        Err(e) => return Verdict::unknown(format!("pleg-guard config: {e}")),
    };
    let ledger_path = state_directory.join(ledger::LEDGER_FILE);
    let ledger = match std::fs::read(&ledger_path) {
        Ok(bytes) => match events::parse_ledger(&bytes) {
            Ok(l) => Some(l),
            Err(e) => {
                return Verdict::unknown(format!("{}: corrupt: {e}", ledger_path.display()));
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Verdict::unknown(format!("{}: {e}", ledger_path.display())),
    };
    let path = cursor_path(&state_directory, rule);
    let cursor = match std::fs::read(&path) {
        Ok(bytes) => match events::parse_cursor(&bytes) {
            Ok(c) => c,
            Err(e) => {
                return Verdict::unknown(format!(
                    "{} corrupt, remove it to reset: {e}",
                    path.display()
                ));
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Cursor::default(),
        Err(e) => return Verdict::unknown(format!("{}: {e}", path.display())),
    };
    let report = events::report(rule, ledger.as_ref(), &cursor);
    if let Some(next) = report.cursor {
        let saved = serde_json::to_vec(&next)
            .map_err(std::io::Error::other)
            .and_then(|json| crate::state_file::write(&path, &json, crate::state_file::KEPT));
        if let Err(e) = saved {
            return Verdict::unknown(format!("{}: cannot save: {e}", path.display()));
        }
    }
    report.verdict
}
