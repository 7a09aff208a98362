//! `pleg-guard run`: the daemon.

use std::process::ExitCode;

use crate::cli::RunArgs;
use crate::config;
use crate::daemon::Daemon;
use crate::report::journal;

/// Exit 0 on SIGTERM, 2 on a configuration it cannot use, 1 on any other failure.
pub fn main(args: RunArgs) -> ExitCode {
    journal::init_daemon(std::env::var_os("PLEG_GUARD_DEBUG").is_some());
    let loaded = match config::load(args.config.config.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("configuration not usable: {e}");
            eprintln!("pleg-guard: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match super::runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pleg-guard: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let daemon = Daemon::new(loaded.config, args.config.config, args.dry_run);
    let result = runtime.block_on(daemon.run());
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("pleg-guard failed: {e:#}");
            eprintln!("pleg-guard: {e:#}");
            ExitCode::FAILURE
        }
    }
}
