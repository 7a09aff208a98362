//! The subcommands' entry points: each parses nothing (clap did), runs, and maps the outcome
//! to the contract's exit status.

pub mod check_config;
pub mod diagnose;
pub mod generate;
pub mod run;
pub mod status;

/// A current-thread tokio runtime: pleg-guard needs no parallelism, and one thread keeps the
/// footprint small on every node.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
