#!/bin/bash
# Builds what the default real node bed runs (tests/k8s/node-up.sh, tests/real_node.rs) from
# pinned Go modules, into a cache keyed by those pins, this script and the cache frame it shares
# with build-v134.sh and build-v123.sh (cached-build.sh):
#   /var/cache/pleg-guard-test/k8s-<key>/bin/
#   kubelet, kube-apiserver, kube-controller-manager   v1.37.2   tests/k8s/go.mod
#   etcd                                                v3.7.0    (the one k8s.io/kubernetes v1.37.2 pins)
#   containerd, containerd-shim-runc-v2, ctr            v2.3.7    tests/k8s/containerd/go.mod
#   runc (cgo, seccomp: Debian's libseccomp-dev)        v1.5.3    tests/k8s/runc/go.mod
#   crictl                                              v1.37.0   tests/k8s/cri-tools/go.mod
#   node-problem-detector, health-checker               v1.36.0   tests/k8s/npd/go.mod
# A no-op when that directory is complete. Prints `K8S_BIN=<dir>` as its last line. The older
# node's kubelet 1.34 (node-up.sh --kubelet 1.34) is tests/k8s/build-v134.sh, built only when
# asked for. Versions, why, and what the builds cost: docs/real-node.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${PLEG_GUARD_K8S_CACHE:-/var/cache/pleg-guard-test}
kube_version=v1.37.2
containerd_version=v2.3.7 runc_version=1.5.3 crictl_version=v1.37.0 npd_version=v1.36.0
. "$here/cached-build.sh"
die() { echo "tests/k8s/build.sh: $*" >&2; exit 1; }

mods=("$here" "$here/containerd" "$here/runc" "$here/cri-tools" "$here/npd")
key=$(for m in "${mods[@]}"; do cat "$m/go.mod" "$m/go.sum"; done | cat - "$0" "$here/cached-build.sh" \
    | sha256sum | cut -c1-16)

# runc's seccomp support is cgo against libseccomp, linked statically (as runc's own `make
# static`): the bed's rootfs needs no library of it. A build script installs nothing: CI's
# tests/run-all.sh installs these before it starts this script; elsewhere, apt-get install them.
runc_needs() {
    local p missing=()
    for p in gcc libc6-dev pkg-config libseccomp-dev; do
        [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] || die "runc's build (cgo, seccomp) needs the Debian packages ${missing[*]}: apt-get install them"
}

build() {
    local bin=$1 t0
    # the small builds first, runc's cgo one first of all: a missing library fails in seconds,
    # not after kubernetes' ten minutes
    t0=$(date +%s)
    runc_needs
    # runc's Makefile adds the tag libpathrs (cyphar's Rust path-resolution library, a C library
    # no distribution here packages); without it runc uses its pure-Go fallback (securejoin)
    echo "building runc $runc_version (seccomp, static) ..."
    (cd "$here/runc" && CGO_ENABLED=1 go build -trimpath -buildmode=pie \
        -tags "seccomp urfave_cli_no_docs netgo osusergo" \
        -ldflags "-s -w -X main.version=$runc_version -X main.gitCommit=v$runc_version -linkmode external -extldflags -static-pie" \
        -o "$bin/runc" github.com/opencontainers/runc)
    echo "runc: $(( $(date +%s) - t0 )) s"

    t0=$(date +%s)
    echo "building containerd $containerd_version (with its CRI plugin), containerd-shim-runc-v2, ctr ..."
    local cpkg=github.com/containerd/containerd/v2
    local cflags="-s -w -X $cpkg/version.Version=$containerd_version -X $cpkg/version.Revision=$containerd_version"
    cflags+=" -X $cpkg/version.Package=github.com/containerd/containerd/v2"
    (cd "$here/containerd" && go build -trimpath -tags urfave_cli_no_docs -ldflags "$cflags" \
        -o "$bin/" $cpkg/cmd/containerd $cpkg/cmd/ctr)
    (cd "$here/containerd" && go build -trimpath -tags "urfave_cli_no_docs no_grpc" -ldflags "$cflags" \
        -o "$bin/containerd-shim-runc-v2" $cpkg/cmd/containerd-shim-runc-v2)
    echo "containerd: $(( $(date +%s) - t0 )) s"

    t0=$(date +%s)
    echo "building crictl $crictl_version ..."
    (cd "$here/cri-tools" && go build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${crictl_version#v}" \
        -o "$bin/crictl" sigs.k8s.io/cri-tools/cmd/crictl)
    echo "crictl: $(( $(date +%s) - t0 )) s"

    t0=$(date +%s)
    echo "building kubelet, kube-apiserver, kube-controller-manager, etcd ($kube_version pins) ..."
    (cd "$here" && go build -trimpath -ldflags "-s -w $version_flags" -o "$bin/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager)
    (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
    echo "kubernetes and etcd: $(( $(date +%s) - t0 )) s"

    t0=$(date +%s)
    echo "building node-problem-detector and health-checker $npd_version ..."
    (cd "$here/npd" && go build -trimpath -tags disable_stackdriver_exporter \
        -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=$npd_version" \
        -o "$bin/node-problem-detector" k8s.io/node-problem-detector/cmd/nodeproblemdetector)
    (cd "$here/npd" && go build -trimpath \
        -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=$npd_version" \
        -o "$bin/health-checker" k8s.io/node-problem-detector/cmd/healthchecker)
    echo "node-problem-detector: $(( $(date +%s) - t0 )) s"
}

cached_build "k8s $kube_version components, containerd $containerd_version, runc $runc_version" \
    "$cache_root/k8s-$key" build \
    kubelet kube-apiserver kube-controller-manager etcd containerd containerd-shim-runc-v2 ctr \
    runc crictl node-problem-detector health-checker
