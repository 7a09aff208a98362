//! pleg-guard: keeps Kubernetes nodes out of the "PLEG is not healthy" NotReady trap.
//!
//! Data flows one way: probe round (I/O, bounded) → observations → diagnosis (pure) →
//! findings → ladder (pure, with the ledger) → action (I/O) → report (journal, status.json,
//! sd_notify). See README.md for the picture.

mod action;
mod assessment;
mod bug_evidence;
mod cli;
mod cmd;
mod config;
mod daemon;
mod dbus_p2p;
mod diagnosis;
mod forecast;
mod ladder;
mod ledger;
mod pid1;
mod probe;
mod report;
mod systemd_version;
mod systemd_watch;
mod target;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Run(args) => cmd::run::main(args),
        cli::Command::Diagnose(args) => cmd::diagnose::main(args),
        cli::Command::Status(args) => cmd::status::main(args),
        cli::Command::CheckConfig(args) => cmd::check_config::main(args),
        cli::Command::Generate(args) => cmd::generate::main(args),
    }
}
