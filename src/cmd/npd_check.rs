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

/// The cursor file of `rule` in the cursor directory (`npd_cursor_directory`).
pub fn cursor_path(cursor_directory: &Path, rule: Temporary) -> PathBuf {
    cursor_directory.join(format!("{}.json", rule.name()))
}

/// Where releases before `npd_cursor_directory` kept the cursor (in the state directory): read
/// once when the new file does not exist yet, so an upgrade reports nothing twice.
pub fn legacy_cursor_path(state_directory: &Path, rule: Temporary) -> PathBuf {
    state_directory
        .join("npd")
        .join(format!("{}.json", rule.name()))
}

/// A temporary rule: the oldest unreported run, the cursor saved before it is printed.
fn temporary(args: &NpdCheckArgs, rule: Temporary) -> Verdict {
    let (state_directory, cursor_directory) = match config::load(args.config.config.as_deref()) {
        Ok(l) => (l.config.state_directory, l.config.npd_cursor_directory),
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
    let path = cursor_path(&cursor_directory, rule);
    let legacy = legacy_cursor_path(&state_directory, rule);
    let read = match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::read(&legacy).map(|b| (b, legacy.clone()))
        }
        other => other.map(|b| (b, path.clone())),
    };
    let cursor = match read.map(|(bytes, from)| (events::parse_cursor(&bytes), from)) {
        Ok((Ok(c), _)) => c,
        Ok((Err(e), from)) => {
            return Verdict::unknown(format!(
                "{} corrupt, remove it to reset: {e}",
                from.display()
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ConfigArg;

    /// The cursors live in their own directory (the state directory may be mounted
    /// read-only in NPD's DaemonSet: nothing is written there), and a cursor left in the old
    /// place by an earlier release is read once, so an upgrade reports nothing twice.
    #[test]
    fn cursors_live_apart_from_the_state_and_the_old_ones_are_honoured() {
        let d = std::env::temp_dir().join(format!("pg-npd-cursor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (state, cursors) = (d.join("state"), d.join("npd-cursors"));
        std::fs::create_dir_all(&state).unwrap();
        let config = d.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "state_directory = \"{}\"\nnpd_cursor_directory = \"{}\"\n",
                state.display(),
                cursors.display()
            ),
        )
        .unwrap();
        let now = crate::clock::time_format::rfc3339(SystemTime::now());
        std::fs::write(
            state.join(ledger::LEDGER_FILE),
            format!(
                r#"{{"format":1,"next_id":2,"entries":[{{"id":1,"action":"daemon-reexec","at":"{now}","outcome":"succeeded","detail":"x"}}]}}"#
            ),
        )
        .unwrap();
        let args = NpdCheckArgs {
            config: ConfigArg {
                config: Some(config),
            },
            condition: "PlegGuardRepaired".into(),
        };
        let state_before: Vec<_> = std::fs::read_dir(&state).unwrap().collect();
        let v = check(&args);
        assert_eq!(v.exit, 1, "{}", v.message);
        assert_eq!(check(&args).exit, 0, "reported once");
        let cursor = cursor_path(&cursors, Temporary::Repaired);
        assert!(cursor.is_file());
        assert_eq!(
            std::fs::read_dir(&state).unwrap().count(),
            state_before.len(),
            "nothing written in the state directory"
        );
        // an earlier release's cursor, in the state directory: honoured
        let legacy = legacy_cursor_path(&state, Temporary::Repaired);
        std::fs::create_dir_all(legacy.parent().unwrap()).unwrap();
        std::fs::rename(&cursor, &legacy).unwrap();
        assert_eq!(check(&args).exit, 0, "the old cursor counts");
        let _ = std::fs::remove_dir_all(&d);
    }
}
