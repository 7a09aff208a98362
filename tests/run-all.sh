#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine, as root (CI runs exactly this).
#
# Installs and starts everything the tests need: Debian packages (docker.io,
# systemd-container, debootstrap, ...), dockerd, the busybox test image, the cached
# bed root filesystem and the affected libsystemd of the real-bug beds (tests/bed/prepare.sh;
# under CI=true a missing affected library fails here), then checks formatting and lints and runs
# every unit and integration test. Integration tests boot real systemd containers; with
# CI=true a bed that cannot start fails the run instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
    echo "tests/run-all.sh: run as root (the test bed boots system containers)" >&2
    exit 2
fi

step "test bed: packages, dockerd, image, rootfs (bookworm; bullseye and trixie for tests/old_distros.rs), affected libsystemd"
tests/bed/prepare.sh bookworm bullseye trixie

step "packaging tools: rpm, lintian, rpmlint, systemd-analyze, binutils, python3-venv"
need=()
for tool in rpm:rpm lintian:lintian rpmlint:rpmlint systemd-analyze:systemd objdump:binutils python3:python3; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
# packaging/zig-toolchain.sh puts zig (PyPI's ziglang) into a venv
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

step "glibc 2.17 toolchain: cargo-zigbuild and zig (packaging/zig-toolchain.sh; ~4 min the first time)"
packaging/zig-toolchain.sh >/dev/null

step "format and lints"
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings

step "tests (unit, then integration against the bed)"
# Two at a time: these machines have two cores and each bed is a whole booted system.
cargo test --locked -- --test-threads=2
