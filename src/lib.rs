//! pleg-guard: keeps Kubernetes nodes out of the "PLEG is not healthy" NotReady trap.
//!
//! Data flows one way: probe round (I/O, bounded) → observations → diagnosis (pure) →
//! findings → ladder (pure, with the ledger) → action (I/O) → report (journal, status.json,
//! sd_notify). See README.md for the picture and docs/layout.md for where each part lives.
//!
//! The library holds every module; `src/main.rs` is only the entry. Integration tests and
//! benchmarks use the library directly (e.g. many fleet clients in one process).

pub mod action;
pub mod assessment;
pub mod cli;
pub mod client;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod daemon;
pub mod diagnosis;
pub mod fleet;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_entry;
pub mod ladder;
pub mod ledger;
pub mod metrics;
pub mod npd;
pub mod probe;
#[cfg(test)]
pub mod property_tests;
pub mod report;
pub mod state_file;
pub mod system_program;
pub mod systemd;
pub mod target;
#[cfg(test)]
pub mod testing;
