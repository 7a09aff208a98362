#!/bin/bash
# Build the Debian package: target/debian/pleg-guard_<version>-1_<arch>.deb (path printed last).
#
#   packaging/build-deb.sh [cargo-deb options...]    e.g. --deb-version 0.1.1-1  --output DIR
#
# Installs cargo-deb if missing, builds the release binary, generates the man page and the
# completions (packaging/gen-assets.sh), then packages without rebuilding.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo deb --version >/dev/null 2>&1; then
    echo "build-deb: installing cargo-deb (cargo install --locked cargo-deb)" >&2
    cargo install --locked cargo-deb
fi
packaging/gen-assets.sh
# --no-build: gen-assets.sh built it; the binary is already stripped (profile.release).
cargo deb --no-build --locked "$@"
