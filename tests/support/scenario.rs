//! A daemon scenario's set-up and waits, said once for every bed test that runs pleg-guard as
//! a service: the fast-round config they all start from (with what a test changes merged
//! over it, table by table), installing and starting pleg-guard with it, and waiting for an
//! action's whole journey (succeeded, then its symptom cleared).

use serde_json::{Map, Value};
use std::time::Duration;

use super::{Bed, field};

/// The settings every daemon scenario starts from: a round a second, no startup grace, a
/// target unhealthy after two failed one-second calls, the stand-in kubelet's PLEG lines
/// counted for 8 s and a kubelet restart settled after 5 s.
pub const FAST_ROUNDS: &str = r#"interval = "1s"
startup_grace = "0s"

[probe]
timeout = "1s"
slow_after = "500ms"
unhealthy_after = 2

[kubelet]
pleg_log_window = "8s"

[actions.restart_kubelet]
settle = "5s"
"#;

/// [`FAST_ROUNDS`] with `changes` (a TOML document: top-level keys and tables) merged over
/// it: a key in `changes` replaces the same key, a table is merged key by key, so a test
/// writes only what it changes. Panics on TOML that does not parse (a test's own typo).
pub fn fast_config(changes: &str) -> String {
    let parse = |what: &str, text: &str| -> toml::Table {
        text.parse()
            .unwrap_or_else(|e| panic!("{what} is not TOML: {e}\n{text}"))
    };
    let mut config = parse("FAST_ROUNDS", FAST_ROUNDS);
    merge(&mut config, parse("the test's config", changes));
    toml::to_string(&config).unwrap_or_else(|e| panic!("the merged config: {e}"))
}

/// `over` merged into `base`: tables recursively, everything else replaced.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

impl Bed {
    /// pleg-guard installed with `config` and started (`systemctl start` returns after its
    /// first round).
    pub fn run_pleg_guard(&self, config: &str) {
        self.install_pleg_guard(config);
        self.start_pleg_guard();
    }

    /// Waits for `action` to succeed (within `timeout`) and then for its symptom to clear
    /// (within `settle_timeout`); returns the `action-succeeded` entry.
    pub fn wait_cured(
        &self,
        action: &str,
        timeout: Duration,
        settle_timeout: Duration,
    ) -> Map<String, Value> {
        let ok = self.wait_event(
            "action-succeeded",
            &[("PLEG_GUARD_ACTION", action)],
            timeout,
        );
        self.wait_event(
            "symptom-cleared",
            &[("PLEG_GUARD_ACTION", action)],
            settle_timeout,
        );
        ok
    }

    /// [`wait_cured`](Self::wait_cured) for `daemon-reexec`, which must have gone through
    /// PID 1's private socket (its message says so).
    pub fn wait_reexec_cured(
        &self,
        timeout: Duration,
        settle_timeout: Duration,
    ) -> Map<String, Value> {
        let ok = self.wait_cured("daemon-reexec", timeout, settle_timeout);
        assert!(
            field(&ok, "MESSAGE")
                .unwrap_or("")
                .contains("via private socket"),
            "{ok:?}"
        );
        ok
    }
}
