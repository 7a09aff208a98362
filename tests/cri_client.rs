//! Runs the CRI client's unit tests (src/client/cri/tests.rs, a fake runtime, no root) until
//! src/client/ is wired into the binary; then `cargo test --bin pleg-guard client::cri` does.
#[allow(dead_code, unused_imports)]
#[path = "../src/client/cri/mod.rs"]
mod cri;
