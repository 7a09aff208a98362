#!/usr/bin/env bash
# Coverage-guided fuzzing of pleg-guard's parsers of outside input: every target (or those
# named in TARGETS) for SECONDS each (default 300), at the lowest CPU priority, one job at a
# time. Not part of CI: run by hand, on a machine with time to spare.
#
#   fuzz/run.sh [SECONDS]            needs: rustup nightly, `cargo install cargo-fuzz`
#   TARGETS="config p2p_message" fuzz/run.sh 60
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET) and grows a working corpus
# in fuzz/corpus/TARGET (not committed). A crash stops that target and leaves its input in
# fuzz/artifacts/TARGET/: reproduce with `cargo +nightly fuzz run TARGET FILE`, fix it, and
# add the input as a regression unit test beside the parser.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-300}
targets=${TARGETS:-$(cargo +nightly fuzz list)}
nice -n 19 cargo +nightly fuzz build
failed=()
for t in $targets; do
    mkdir -p "corpus/$t"
    echo "== $t: ${secs}s"
    start=$(date +%s)
    # CPU seconds (user+system) of the run, as /usr/bin/time measures them
    if ! nice -n 19 /usr/bin/time -f "== $t: %U s user + %S s system CPU, %e s wall" \
        cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -max_len=16384 -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 2>&1 | grep -v '^#[0-9]' | tail -n 25; then
        failed+=("$t")
    fi
    echo "== $t: $(( $(date +%s) - start ))s, corpus $(ls "corpus/$t" | wc -l) inputs"
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz/run.sh: crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz/run.sh: no crashes"
