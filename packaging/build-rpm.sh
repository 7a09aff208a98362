#!/bin/bash
# Build the RPM package: target/generate-rpm/pleg-guard-<version>-1.<arch>.rpm (path printed
# last).
#
#   packaging/build-rpm.sh [cargo-generate-rpm options...]
#       e.g. -s 'version = "0.1.1"'   -o DIR
#
# Installs cargo-generate-rpm if missing (about 7 minutes), builds the release binary,
# generates the man page and the completions (packaging/gen-assets.sh), then packages.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo generate-rpm --version >/dev/null 2>&1; then
    echo "build-rpm: installing cargo-generate-rpm (cargo install --locked cargo-generate-rpm)" >&2
    cargo install --locked cargo-generate-rpm
fi
packaging/gen-assets.sh
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cargo generate-rpm "$@" | tee "$out" >&2 || exit 1
# cargo-generate-rpm prints nothing on success: print the newest rpm it wrote.
dir=target/generate-rpm
for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = -o ] || [ "${!i}" = --output ]; then j=$((i + 1)); dir=${!j}; fi
done
if [ -d "$dir" ]; then
    ls -t "$dir"/*.rpm | head -n 1
else
    echo "$dir"
fi
