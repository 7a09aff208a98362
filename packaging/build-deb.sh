#!/bin/bash
# Build the Debian package: target/debian/pleg-guard_<version>-1_<arch>.deb (path printed last).
#
#   packaging/build-deb.sh [cargo-deb options...]    e.g. --deb-version 0.1.1-1  --output DIR
#
# Installs cargo-deb if missing; builds the binary against glibc 2.17 with cargo-zigbuild and
# generates the man page and completions (packaging/gen-assets.sh); packages without rebuilding,
# xz-compressed (dpkg 1.18 reads it: Debian 10, Ubuntu 18.04). Depends (Cargo.toml) is fixed
# text, not dpkg-shlibdeps' view from the build host: `libc6 (>= 2.17)` and no libgcc-s1 (which
# Debian 10 and Ubuntu 18.04 lack). This script checks it against the binary it packages: the
# libc6 version must be the binary's highest GLIBC_ symbol version, and a binary that links
# libgcc_s needs a libgcc dependency the line does not have.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo deb --version >/dev/null 2>&1; then
    echo "build-deb: installing cargo-deb (cargo install --locked cargo-deb)" >&2
    cargo install --locked cargo-deb >&2
fi
BIN=$(packaging/gen-assets.sh | tail -n 1)
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')

glibc=$(objdump -T "$BIN" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
depends=$(sed -n 's/^depends = "\(.*\)"$/\1/p;T;q' Cargo.toml)
case "$depends" in
    *"libc6 (>= $glibc)"*) ;;
    *) echo "build-deb: Cargo.toml's Depends \"$depends\" does not say libc6 (>= $glibc), what $BIN needs" >&2; exit 1 ;;
esac
# (the dynamic section read whole first: `readelf | grep -q` under pipefail fails whenever grep
# exits before readelf's last write)
dynamic=$(readelf -d "$BIN")
if grep -q '\[libgcc_s\.so\.1\]' <<<"$dynamic" && [[ $depends != *libgcc1* ]]; then
    echo "build-deb: $BIN links libgcc_s: add \"libgcc-s1 | libgcc1\" to Depends in Cargo.toml" >&2
    exit 1
fi

# --no-build: gen-assets.sh built it; --no-strip: it is stripped already (profile.release), and
# the .deb and the .rpm carry the same bytes. --target maps the `target/release/` asset paths
# to target/<triple>/release/.
cargo deb --no-build --no-strip --locked --target "$TRIPLE" --compress-type xz "$@"
