//! `pleg-guard generate man|bash|zsh`: the man page and completions, from the clap
//! definitions, for the packaging.

use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::{Cli, GenerateArgs, Generated};

/// Write the requested file to standard output.
pub fn main(args: GenerateArgs) -> ExitCode {
    let mut cmd = Cli::command();
    let mut out = std::io::stdout();
    let result = match args.what {
        Generated::Man => clap_mangen::Man::new(cmd).section("8").render(&mut out),
        Generated::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "pleg-guard", &mut out);
            Ok(())
        }
        Generated::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "pleg-guard", &mut out);
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pleg-guard generate: {e}");
            ExitCode::FAILURE
        }
    }
}
