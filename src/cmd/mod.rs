//! The subcommands' entry points: each parses nothing (clap did), runs, and maps the outcome
//! to the contract's exit status.

pub mod check_config;
pub mod diagnose;
pub mod generate;
pub mod npd_check;
pub mod run;
pub mod status;

use std::path::Path;
use std::process::ExitCode;

use crate::config;

/// The exit status for a configuration that cannot be used (and for usage errors).
pub const EXIT_CONFIG: u8 = 2;

/// Load the configuration, or say why not on stderr (the journal, under the unit) and return
/// the exit status for it.
pub fn load_config(path: Option<&Path>) -> Result<config::Loaded, ExitCode> {
    config::load(path).map_err(|e| {
        eprintln!("pleg-guard: {e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

/// A current-thread tokio runtime: pleg-guard needs no parallelism, and one thread keeps the
/// footprint small on every node. On failure, says why and returns `failure` as the status.
pub fn runtime(failure: u8) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("pleg-guard: cannot start the async runtime: {e}");
            ExitCode::from(failure)
        })
}
