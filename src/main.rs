//! The `pleg-guard` binary: parses the command line and hands over to [`pleg_guard::cmd`].

use std::process::ExitCode;

use clap::Parser;
use pleg_guard::{cli, cmd};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Run(args) => cmd::run::main(args),
        cli::Command::Diagnose(args) => cmd::diagnose::main(args),
        cli::Command::Status(args) => cmd::status::main(args),
        cli::Command::CheckConfig(args) => cmd::check_config::main(args),
        cli::Command::NpdCheck(args) => cmd::npd_check::main(args),
        cli::Command::Generate(args) => cmd::generate::main(args),
    }
}
