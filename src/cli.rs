//! The command line: the clap definitions, which also generate the man page and the shell
//! completions (`pleg-guard generate ...`, used by the packaging).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Keeps Kubernetes nodes out of the "PLEG is not healthy" NotReady trap, and repairs them
/// when they fall in.
///
/// pleg-guard probes the D-Bus system bus, PID 1 (over the bus and over its private socket),
/// systemd-logind, the docker engine and kubelet with hard timeouts, diagnoses which known
/// cause of a PLEG stall it sees, and applies the lowest repair that fits: remove dead
/// containers, `systemctl daemon-reexec`, restart kubelet. Every repair is rate-limited by a
/// ledger that survives restarts.
#[derive(Debug, Parser)]
#[command(name = "pleg-guard", version, about, long_about, max_term_width = 100)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (what pleg-guard.service starts).
    ///
    /// Exits 0 on SIGTERM, non-zero on a configuration it cannot use. SIGHUP re-reads the
    /// configuration; an invalid one is logged and the old one kept.
    Run(RunArgs),
    /// Probe everything once and print each target and finding; act on nothing.
    ///
    /// Exit status: 0 healthy, 1 a problem found, 2 usage or configuration error.
    Diagnose(DiagnoseArgs),
    /// Show the running daemon's view: targets, findings, recent actions, rate-limit budget.
    ///
    /// Exit status: 0 daemon healthy, 1 degraded, 3 no (or stale) daemon state.
    Status(StatusArgs),
    /// Validate a configuration file and its drop-ins.
    ///
    /// Exit status: 0 valid, 2 invalid.
    CheckConfig(CheckConfigArgs),
    /// node-problem-detector custom-plugin rule: answer CONDITION from the daemon's
    /// status.json, with no probing.
    ///
    /// Conditions: SystemdBusWedged, SystemdSerialExhaustion, ContainerRuntimeUnresponsive,
    /// LogindUnresponsive, PLEGUnhealthy. Exit status: 0 condition false, 1 condition true,
    /// 2 unknown (no daemon, stale or unreadable status); the first line of output is the
    /// condition's message (at most 80 characters).
    NpdCheck(NpdCheckArgs),
    /// Write the man page or shell completions to standard output (for packagers).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// `--config PATH`, shared by the commands that read the configuration.
#[derive(Debug, Args)]
pub struct ConfigArg {
    /// Configuration file; drop-ins are read from `config.d/` beside it.
    /// [default: /etc/pleg-guard/config.toml, built-in defaults when missing]
    #[arg(long, short = 'c', value_name = "PATH")]
    pub config: Option<PathBuf>,
}

/// Arguments of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Detect and log what would be done, but act on nothing (as `mode = "observe"`).
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `diagnose`.
#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print the daemon's status.json as it is.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `npd-check`.
#[derive(Debug, Args)]
pub struct NpdCheckArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The NPD condition to answer, e.g. SystemdBusWedged.
    #[arg(value_name = "CONDITION")]
    pub condition: String,
}

/// Arguments of `check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The file to check. [default: /etc/pleg-guard/config.toml]
    #[arg(value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Also connect to `[fleet] etcd_endpoints` with the configured TLS files and credentials
    /// and read the group: the TLS, auth and reachability errors the daemon would meet.
    /// Exit 3 when that fails.
    #[arg(long)]
    pub connect: bool,
}

/// Arguments of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// What to generate.
    #[arg(value_enum)]
    pub what: Generated,
}

/// What `generate` can write.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Generated {
    /// The man page pleg-guard(8), in roff.
    Man,
    /// bash completions.
    Bash,
    /// zsh completions.
    Zsh,
}
