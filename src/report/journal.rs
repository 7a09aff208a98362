//! Logging: to journald with the contract's structured fields when the journal is there,
//! to stderr otherwise. One entry per target state change, finding and action outcome, each
//! with `PLEG_GUARD_EVENT`, its `MESSAGE_ID`, and the target/action/finding it is about.

use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use super::event::EventKind;
use crate::diagnosis::FindingId;
use crate::target::ActionKind;
use crate::target::Target;

/// Where journald listens for native-protocol messages.
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Set up logging for the daemon: journald when its socket exists (and `verbose` lowers the
/// level to debug), stderr otherwise.
pub fn init_daemon(verbose: bool) {
    let level = if verbose { Level::DEBUG } else { Level::INFO };
    let filter = tracing_subscriber::filter::LevelFilter::from_level(level);
    if std::path::Path::new(JOURNAL_SOCKET).exists() {
        if let Ok(layer) = tracing_journald::layer() {
            let layer = layer
                .with_field_prefix(None)
                .with_syslog_identifier("pleg-guard".to_owned());
            let _ = tracing_subscriber::registry()
                .with(layer.with_filter(filter))
                .try_init();
            return;
        }
    }
    init_stderr(level);
}

/// Set up logging to stderr only (the one-shot commands).
pub fn init_stderr(level: Level) {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .try_init();
}

/// One contract event.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    /// Which kind.
    pub kind: EventKind,
    /// The target it is about.
    pub target: Option<Target>,
    /// The action it is about.
    pub action: Option<ActionKind>,
    /// The finding it is about.
    pub finding: Option<FindingId>,
    /// The human-readable message.
    pub message: &'a str,
}

impl Event<'_> {
    /// The level an event kind is logged at: trouble as warning, cures as notice.
    fn level(&self) -> Level {
        match self.kind {
            EventKind::TargetUnhealthy
            | EventKind::ActionFailed
            | EventKind::SymptomPersisted
            | EventKind::ActionSuppressed
            | EventKind::FleetExpired
            | EventKind::FleetUnreachable
            | EventKind::FleetLocal => Level::WARN,
            EventKind::Finding => Level::WARN,
            _ => Level::INFO,
        }
    }
}

macro_rules! emit_at {
    ($level:expr, $e:expr) => {
        tracing::event!(
            $level,
            PLEG_GUARD_EVENT = $e.kind.name(),
            PLEG_GUARD_TARGET = $e.target.map(Target::name),
            PLEG_GUARD_ACTION = $e.action.map(ActionKind::name),
            PLEG_GUARD_FINDING = $e.finding.map(FindingId::name),
            MESSAGE_ID = $e.kind.message_id(),
            "{}",
            $e.message
        )
    };
}

/// Log one event.
pub fn emit(e: &Event<'_>) {
    match e.level() {
        Level::WARN => emit_at!(Level::WARN, e),
        Level::ERROR => emit_at!(Level::ERROR, e),
        _ => emit_at!(Level::INFO, e),
    }
}
