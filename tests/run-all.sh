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

step "test bed: packages, dockerd, image, rootfs, affected libsystemd"
tests/bed/prepare.sh

step "packaging tools: rpm, lintian, rpmlint, systemd-analyze"
need=()
for tool in rpm:rpm lintian:lintian rpmlint:rpmlint systemd-analyze:systemd; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

step "metrics tools: prometheus (promtool), prometheus-node-exporter"
# Only the binaries are used (tests/metrics.rs runs them on loopback or in a bed's network
# namespace); without systemd as PID 1 the packages' services do not start.
need=()
for tool in promtool:prometheus prometheus-node-exporter:prometheus-node-exporter; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

step "format and lints"
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings

step "tests (unit, then integration against the bed)"
# Two at a time: these machines have two cores and each bed is a whole booted system.
cargo test --locked -- --test-threads=2
