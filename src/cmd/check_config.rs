//! `pleg-guard check-config [PATH]`: validate a configuration and its drop-ins.

use std::process::ExitCode;

use crate::cli::CheckConfigArgs;
use crate::config;

/// Exit 0 when valid, 2 when not.
pub fn main(args: CheckConfigArgs) -> ExitCode {
    match config::load(args.path.as_deref()) {
        Ok(loaded) => {
            if loaded.sources.is_empty() {
                println!(
                    "{}: not present; built-in defaults are valid",
                    config::DEFAULT_CONFIG_PATH
                );
            }
            for source in &loaded.sources {
                println!("{}: ok", source.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
