#![no_main]
// pleg-guard's fleet_answers parser under coverage-guided fuzzing (fuzz/run.sh; src/fuzz_entry.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pleg_guard::fuzz_entry::fleet_answers(data);
});
