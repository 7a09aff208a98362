//! `pleg-guard run`: the daemon.

use std::process::ExitCode;

use crate::cli::RunArgs;
use crate::daemon::Daemon;
use crate::report::journal;

/// Exit 0 on SIGTERM, 2 on a configuration it cannot use, 1 on any other failure.
pub fn main(args: RunArgs) -> ExitCode {
    journal::init_daemon(std::env::var_os("PLEG_GUARD_DEBUG").is_some());
    let loaded = match super::load_config(args.config.config.as_deref()) {
        Ok(l) => l,
        Err(code) => return code,
    };
    for w in &loaded.warnings {
        tracing::warn!("configuration: {w}");
    }
    let runtime = match super::runtime(1) {
        Ok(r) => r,
        Err(code) => return code,
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
