//! `pleg-guard check-config [PATH]`: validate a configuration and its drop-ins.

use std::process::ExitCode;

use crate::cli::CheckConfigArgs;
use crate::config::{self, Config};
use crate::fleet::{Fleet, FleetSettings};

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
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            if args.connect {
                return connect(&loaded.config);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

/// `--connect`: reach etcd as the daemon would and read the group. Exit 3 when that fails.
fn connect(config: &Config) -> ExitCode {
    let Some(settings) = FleetSettings::from_config(&config.fleet, config.etcd_request_timeout())
    else {
        println!(
            "[fleet]: not configured (no etcd_endpoints, or no kubeconfig with backend \"kubernetes\"): nothing to connect to"
        );
        return ExitCode::SUCCESS;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(Fleet::check(&settings)) {
        Ok(view) => {
            let (store, place) = match &settings.kubernetes {
                Some(k) => ("API server", format!("Leases in namespace {}", k.namespace)),
                None => ("etcd", settings.group_prefix()),
            };
            println!(
                "[fleet]: {store} ok; group {} ({place}): {} members alive, {} of {} slots held, {} waiting; this node is \"{}\"",
                view.group,
                view.members_alive.unwrap_or(0),
                view.holders.len(),
                view.max_disruptive.unwrap_or(0),
                view.waiting,
                settings.node
            );
            for h in &view.holders {
                if let Some(key) = &h.stray_key {
                    println!("  {}", crate::fleet::stray_holder_line(key));
                    continue;
                }
                println!(
                    "  holder {} {} since {}",
                    h.node,
                    h.action,
                    crate::clock::time_format::rfc3339(h.since)
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("[fleet]: {e}");
            ExitCode::from(3)
        }
    }
}
