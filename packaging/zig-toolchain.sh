#!/bin/bash
# Make the glibc-2.17 cross toolchain available: cargo-zigbuild (crates.io, 0.24.x) and zig
# (the `ziglang` package on PyPI, in a venv). Prints the directory to put first on PATH.
#
#   PATH="$(packaging/zig-toolchain.sh):$PATH" cargo zigbuild --release --target x86_64-unknown-linux-gnu.2.17
#
# Idempotent and quick once done. The venv lives in ${PLEG_GUARD_ZIG_VENV:-target/zig-venv};
# cargo-zigbuild is installed with `cargo install --locked` like cargo-deb. Used by
# packaging/build-deb.sh and packaging/build-rpm.sh (through gen-assets.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ZIGBUILD_VERSION=${PLEG_GUARD_ZIGBUILD_VERSION:-~0.24}
ZIG_VERSION=${PLEG_GUARD_ZIG_VERSION:-0.15.2}
VENV=${PLEG_GUARD_ZIG_VENV:-${CARGO_TARGET_DIR:-target}/zig-venv}

die() { echo "zig-toolchain: $*" >&2; exit 1; }

# (`cargo zigbuild --version` is an error: ask the binary itself)
if [[ "$(cargo-zigbuild --version 2>/dev/null || true)" != "cargo-zigbuild 0.24."* ]]; then
    echo "zig-toolchain: installing cargo-zigbuild $ZIGBUILD_VERSION (cargo install --locked)" >&2
    # unoptimised: it only runs cargo and zig, and this cuts its build to a fraction;
    # PLEG_GUARD_TOOLS_TARGET_DIR lets tests/run-all.sh share one build directory between
    # the packaging tools, so their common dependencies compile once
    cargo install --locked --force --debug \
        ${PLEG_GUARD_TOOLS_TARGET_DIR:+--target-dir "$PLEG_GUARD_TOOLS_TARGET_DIR"} \
        --version "$ZIGBUILD_VERSION" cargo-zigbuild >&2 \
        || die "cargo install cargo-zigbuild failed"
fi

have_zig() { "$VENV/bin/python3" -m ziglang version 2>/dev/null; }
if [ "$(have_zig || true)" != "$ZIG_VERSION" ]; then
    command -v python3 >/dev/null || die "python3 is needed for zig (PyPI's ziglang package)"
    echo "zig-toolchain: installing zig $ZIG_VERSION (pip: ziglang) into $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2 || die "python3 -m venv $VENV failed (Debian: apt-get install python3-venv)"
    "$VENV/bin/pip" install --quiet "ziglang==$ZIG_VERSION" >&2 || die "pip install ziglang==$ZIG_VERSION failed"
    [ "$(have_zig || true)" = "$ZIG_VERSION" ] || die "zig from $VENV does not report $ZIG_VERSION"
fi
# cargo-zigbuild runs `python3 -m ziglang` when no `zig` is on PATH: the venv's python3 first.
cd "$VENV/bin" && pwd
