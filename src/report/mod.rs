//! What pleg-guard tells the outside world: journal events, `sd_notify`, status.json, and the
//! human-readable tables of `diagnose` and `status`.

pub mod event;
pub mod journal;
pub mod notify;
pub mod status_file;
pub mod table;
