#!/bin/bash
# Builds the real Kubernetes components the real-node tests run -- kubelet, kube-apiserver, the
# etcd they are tested with, kube-controller-manager (its node lifecycle controller marks a silent
# kubelet's Node Unknown), node-problem-detector -- from the pinned modules in tests/k8s/go.mod
# and tests/k8s/npd/go.mod, into a cache keyed by those pins, this script and the cache frame
# it shares with build-v123.sh (cached-build.sh):
#   /var/cache/pleg-guard-test/k8s-<key>/bin/
# A no-op when that directory is complete. Prints `K8S_BIN=<dir>` as its last line.
# Versions and why: docs/real-node.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${PLEG_GUARD_K8S_CACHE:-/var/cache/pleg-guard-test}
kube_version=v1.34.12
. "$here/cached-build.sh"

key=$(cat "$here/go.mod" "$here/go.sum" "$here/npd/go.mod" "$here/npd/go.sum" "$0" \
    "$here/cached-build.sh" | sha256sum | cut -c1-16)

build() {
    local bin=$1
    echo "building kubelet, kube-apiserver, kube-controller-manager, etcd ($kube_version pins) ..."
    (cd "$here" && go build -trimpath -ldflags "-s -w $version_flags" -o "$bin/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager)
    (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
    echo "building node-problem-detector ..."
    (cd "$here/npd" && go build -trimpath -tags disable_stackdriver_exporter \
        -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=v1.36.0" \
        -o "$bin/node-problem-detector" k8s.io/node-problem-detector/cmd/nodeproblemdetector)
}

cached_build "k8s components" "$cache_root/k8s-$key" build \
    kubelet kube-apiserver kube-controller-manager etcd node-problem-detector
