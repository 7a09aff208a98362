#!/bin/bash
# Build the Debian package: target/debian/pleg-guard_<version>-1_<arch>.deb (path printed last).
#
#   packaging/build-deb.sh [cargo-deb options...]    e.g. --deb-version 0.1.1-1  --output DIR
#
# Installs cargo-deb if missing; builds the binary against glibc 2.17 with cargo-zigbuild and
# generates the man page and completions (packaging/gen-assets.sh); packages without rebuilding,
# xz-compressed (dpkg >= 1.15.6 reads it: Debian 10, Ubuntu 18.04), with a Depends line that is
# true on old releases: `libc6 (>= <highest GLIBC_ version the binary needs>)`, plus
# `libgcc-s1 | libgcc1` only if the binary links libgcc_s (Debian 10 and Ubuntu 18.04 have
# libgcc1 only; dpkg-shlibdeps on a newer build host would name libgcc-s1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo deb --version >/dev/null 2>&1; then
    echo "build-deb: installing cargo-deb (cargo install --locked cargo-deb)" >&2
    cargo install --locked cargo-deb >&2
fi
BIN=$(packaging/gen-assets.sh | tail -n 1)
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')

# Depends, from the binary itself
glibc=$(objdump -T "$BIN" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
[ -n "$glibc" ] || { echo "build-deb: no GLIBC_ symbol versions in $BIN" >&2; exit 1; }
depends="libc6 (>= $glibc)"
if readelf -d "$BIN" | grep -q 'NEEDED.*\[libgcc_s\.so\.1\]'; then
    depends="$depends, libgcc-s1 | libgcc1"
fi
depends="$depends, systemd"
echo "build-deb: Depends: $depends" >&2

# cargo-deb takes the package metadata from Cargo.toml; the computed Depends replaces the
# `$auto` there through a variant written into a copy of the manifest section.
# --no-build: gen-assets.sh built it; the binary is already stripped (profile.release).
# --target maps the `target/release/` asset paths to target/<triple>/release/.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cargo deb --no-build --locked --target "$TRIPLE" --compress-type xz \
    --deb-depends "$depends" "$@" | tee "$out"
