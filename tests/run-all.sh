#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine, as root (CI runs exactly this).
#
# Installs and starts everything the tests need: Debian packages (docker.io, containerd,
# systemd-container, debootstrap, rpm, lintian, prometheus, ...), dockerd, the bed's own
# containerd, the busybox test image, the cached bed root filesystems (bookworm, bullseye,
# trixie) and the affected libsystemd of the real-bug beds (tests/bed/prepare.sh; under
# CI=true a missing affected library fails here), the packaging tools (cargo-deb,
# cargo-generate-rpm, the glibc 2.17 toolchain); then checks formatting and lints, builds the
# .deb and .rpm once, and runs every unit and integration test. Integration tests boot real
# systemd containers; with CI=true a bed that cannot start fails the run instead of skipping.
#
# Time on a fresh 2-core machine is kept down by overlapping: the packaging tools compile in
# the background while apt and debootstrap fetch, and the integration tests run as two groups
# of test binaries side by side (each two tests at a time).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s (%ds)\n' "$1" "$SECONDS"; }
LOGS=target/run-all
mkdir -p "$LOGS"

if [ "$(id -u)" != 0 ]; then
    echo "tests/run-all.sh: run as root (the test bed boots system containers)" >&2
    exit 2
fi

# The real Kubernetes components of tests/real_node.rs' default node (kubelet 1.34,
# kube-apiserver, etcd, node-problem-detector; tests/k8s/build-v134.sh, pinned in
# tests/k8s/v134/go.mod): the longest single step on a fresh machine (a cold Go build), so it
# starts first and overlaps everything up to the integration tests; cached
# (/var/cache/pleg-guard-test/k8s-v134-<key>), a no-op afterwards. (tests/k8s/build.sh builds
# the kubelet 1.37 node of `node-up.sh --kubelet 1.37`, not run here.)
K8S_BUILD=tests/k8s/build-v134.sh
step "real Kubernetes components, in the background ($K8S_BUILD)"
"$K8S_BUILD" >"$LOGS/k8s-build.log" 2>&1 &
k8s_build=$!

step "Debian packages for packaging, metrics and the fleet budget: rpm, lintian, rpmlint, binutils, python3-venv, prometheus, node_exporter, etcd, socat, openssl"
need=()
# etcd-server/etcd-client: tests/fleet.rs and benches/fleet.rs start their own 3-member TLS
# cluster on free loopback ports (tests/support/etcd.rs, certificates by openssl)
for tool in rpm:rpm lintian:lintian rpmlint:rpmlint systemd-analyze:systemd objdump:binutils \
    python3:python3 promtool:prometheus prometheus-node-exporter:prometheus-node-exporter \
    etcd:etcd-server etcdctl:etcd-client socat:socat openssl:openssl; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
# (no protoc: etcd-client's build script runs the one Cargo.toml brings from crates.io)
# tests/k8s/node-up.sh: the pod network of the real node bed, and the API server from the host
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v curl >/dev/null || need+=(curl)
# tests/clock_jumps.rs preloads libfaketime into the bed's pleg-guard (copied in from the host)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(libfaketime)
# packaging/zig-toolchain.sh puts zig (PyPI's ziglang) into a venv
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -qq
    # prometheus and node_exporter: only their binaries are used (tests/metrics.rs runs them on
    # loopback or in a bed's network namespace)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# Debian's etcd-server starts its own single-member etcd (etcd.service, 127.0.0.1:2379): the
# tests need none of it (they start their own clusters); without systemd this just fails
systemctl disable --now etcd >/dev/null 2>&1 || true

step "packaging tools, in the background: cargo-deb, cargo-generate-rpm, cargo-zigbuild + zig"
(
    set -e
    missing=()
    cargo deb --version >/dev/null 2>&1 || missing+=(cargo-deb)
    cargo generate-rpm --version >/dev/null 2>&1 || missing+=(cargo-generate-rpm)
    # one build directory for the three tools, so what they share compiles once (measured
    # 105 s for all three, unoptimised, against ~9 min separately with cargo-zigbuild optimised)
    export PLEG_GUARD_TOOLS_TARGET_DIR="$PWD/target/tools-build"
    if [ "${#missing[@]}" -gt 0 ]; then
        # unoptimised: they package one small binary, and this halves their build time
        cargo install --locked --debug --target-dir "$PLEG_GUARD_TOOLS_TARGET_DIR" "${missing[@]}"
    fi
    packaging/zig-toolchain.sh
) >"$LOGS/tools.log" 2>&1 &
tools=$!

step "test bed: packages, dockerd, containerd, image, rootfs (bookworm; bullseye and trixie for tests/old_distros.rs), affected libsystemd"
tests/bed/prepare.sh bookworm bullseye trixie

step "waiting for the packaging tools"
if ! wait "$tools"; then
    tail -40 "$LOGS/tools.log" >&2
    echo "tests/run-all.sh: installing the packaging tools failed (log $LOGS/tools.log)" >&2
    exit 1
fi

step "format and lints"
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings

step "packages: .deb and .rpm (release binary against glibc 2.17)"
rm -rf target/ci-packages
PLEG_GUARD_DEB=$(packaging/build-deb.sh --output target/ci-packages | tail -n 1)
PLEG_GUARD_RPM=$(packaging/build-rpm.sh -o target/ci-packages | tail -n 1)
export PLEG_GUARD_DEB PLEG_GUARD_RPM
ls -l "$PLEG_GUARD_DEB" "$PLEG_GUARD_RPM"

step "build the tests"
cargo test --locked --no-run

step "unit tests"
cargo test --locked --lib --bins

# Two groups of integration test binaries side by side, each binary two tests at a time:
# about four beds at once on two cores. Balanced by their measured run times (2026-12-04, s):
# a = 80 + 68 + 36 + 17 + 33 + 45 + 130 + 56 + 1 ~ 470, b = 220 + 42 + 30 + 31 + 35 + 27 + 33 ~ 420
# (real_bug's sweep of every fast-forward value is two tests on two beds, side by side).
group_a=(daemon_scenarios serial_forecast faults metrics containerd layout npd_config fleet docker_hostile packaging npd)
group_b=(real_bug systemd_citizen bed_smoke diagnose old_distros fleet_beds fleet_kubernetes clock_jumps soak)
# real_node: one node bed after another (a lock), ~25 min, beside the two groups once the Go
# build is done; without the components (a failed build off CI) it is left out
group_c=(real_node)
known=" ${group_a[*]} ${group_b[*]} ${group_c[*]} "
for f in tests/*.rs; do
    t=$(basename "$f" .rs)
    case "$known" in
        *" $t "*) ;;
        *) group_b+=("$t") ;; # a new test file runs too, even before it is placed
    esac
done
run_group() { # NAME TEST...
    local name=$1 args=()
    shift
    for t in "$@"; do args+=(--test "$t"); done
    cargo test --locked --no-fail-fast "${args[@]}" -- --test-threads=2 >"$LOGS/$name.log" 2>&1
}

step "waiting for the real Kubernetes components ($K8S_BUILD)"
groups=(a b)
if wait "$k8s_build"; then
    tail -n 2 "$LOGS/k8s-build.log"
    groups+=(c)
else
    tail -40 "$LOGS/k8s-build.log" >&2
    if [ "${CI:-}" = true ]; then
        echo "tests/run-all.sh: building the Kubernetes components failed (log $LOGS/k8s-build.log)" >&2
        exit 1
    fi
    echo "tests/run-all.sh: no Kubernetes components: ${group_c[*]} left out (log $LOGS/k8s-build.log)" >&2
fi

step "integration tests against the beds: ${group_a[*]} | ${group_b[*]} | ${group_c[*]}"
run_group a "${group_a[@]}" &
pid_a=$!
run_group b "${group_b[@]}" &
pid_b=$!
pid_c=
if [[ " ${groups[*]} " == *" c "* ]]; then
    run_group c "${group_c[@]}" &
    pid_c=$!
fi
rc=0
wait "$pid_a" || rc=1
wait "$pid_b" || rc=1
if [ -n "$pid_c" ]; then wait "$pid_c" || rc=1; fi
for g in "${groups[@]}"; do
    printf '\n---- group %s ----\n' "$g"
    cat "$LOGS/$g.log"
done
step "done"
exit "$rc"
