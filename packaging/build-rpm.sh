#!/bin/bash
# Build the RPM package: target/<host triple>/generate-rpm/pleg-guard-<version>-1.<arch>.rpm
# (path printed last).
#
#   packaging/build-rpm.sh [cargo-generate-rpm options...]
#       e.g. -s 'version = "0.1.1"'   -o DIR
#
# Installs cargo-generate-rpm if missing (about 7 minutes); builds the binary against glibc 2.17
# with cargo-zigbuild and generates the man page and the completions (packaging/gen-assets.sh);
# packages with a gzip payload: rpm 4.11 (RHEL/CentOS 7, Amazon Linux 2) cannot read the
# default zstd (it would also add `rpmlib(PayloadIsZstd)`). Requirements are generated from the
# binary (`libc.so.6(GLIBC_2.17)(64bit)` at most).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo generate-rpm --version >/dev/null 2>&1; then
    echo "build-rpm: installing cargo-generate-rpm (cargo install --locked cargo-generate-rpm)" >&2
    cargo install --locked cargo-generate-rpm
fi
packaging/gen-assets.sh >/dev/null
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# --target: the binary is target/<triple>/release/pleg-guard (the `target/release/` asset
# paths are looked up there) and the rpm goes to target/<triple>/generate-rpm/.
cargo generate-rpm --target "$TRIPLE" --payload-compress gzip "$@" | tee "$out" >&2 || exit 1
# cargo-generate-rpm prints nothing on success: print the newest rpm it wrote.
dir=target/$TRIPLE/generate-rpm
for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = -o ] || [ "${!i}" = --output ]; then j=$((i + 1)); dir=${!j}; fi
done
if [ -d "$dir" ]; then
    # the newest (ls's whole answer read first: no early-exiting reader under pipefail)
    rpms=$(ls -t "$dir"/*.rpm)
    echo "${rpms%%$'\n'*}"
else
    echo "$dir"
fi
