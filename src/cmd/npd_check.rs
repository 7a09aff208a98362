//! `pleg-guard npd-check CONDITION`: a node-problem-detector custom-plugin rule, answered from
//! the running daemon's status.json with no probing (no bus, socket or D-Bus call).

use std::process::ExitCode;
use std::time::SystemTime;

use crate::cli::NpdCheckArgs;
use crate::config;
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
    let Some(condition) = Condition::from_name(&args.condition) else {
        let known: Vec<&str> = Condition::ALL.iter().map(|(_, n)| *n).collect();
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
