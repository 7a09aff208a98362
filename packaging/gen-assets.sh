#!/bin/bash
# Build the release binary and generate what the packages ship beside it into target/assets/:
# the man page pleg-guard(8) (gzipped) and the bash/zsh completions, all from the clap
# definitions (`pleg-guard generate man|bash|zsh`). Used by build-deb.sh and build-rpm.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for f in README.md LICENSE packaging/config.toml systemd/pleg-guard.service systemd/pleg-guard.catalog; do
    [ -f "$f" ] || { echo "gen-assets: $f is missing" >&2; exit 1; }
done

cargo build --release --locked --bin pleg-guard
BIN=${CARGO_TARGET_DIR:-target}/release/pleg-guard
[ -x "$BIN" ] || { echo "gen-assets: $BIN not built" >&2; exit 1; }

mkdir -p target/assets
"$BIN" generate man | gzip -9n > target/assets/pleg-guard.8.gz.tmp
"$BIN" generate bash > target/assets/pleg-guard.bash.tmp
"$BIN" generate zsh > target/assets/_pleg-guard.tmp
for f in pleg-guard.8.gz pleg-guard.bash _pleg-guard; do
    [ -s "target/assets/$f.tmp" ] || { echo "gen-assets: pleg-guard generate wrote nothing for $f" >&2; exit 1; }
    mv -f "target/assets/$f.tmp" "target/assets/$f"
done
echo "gen-assets: $BIN, target/assets/{pleg-guard.8.gz,pleg-guard.bash,_pleg-guard}" >&2
