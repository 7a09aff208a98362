#!/bin/bash
# Builds the older node's Kubernetes components (node-up.sh --kubelet 1.34, and the control plane
# of node-up.sh --dockershim) -- kubelet, kube-apiserver, kube-controller-manager v1.34.12, the
# etcd they pair with (3.6.4), node-problem-detector -- from the pinned modules in
# tests/k8s/v134/go.mod and tests/k8s/npd/go.mod, into a cache keyed by those pins, this script
# and the cache frame it shares with build.sh and build-v123.sh (cached-build.sh):
#   /var/cache/pleg-guard-test/k8s-v134-<key>/bin/
# A no-op when that directory is complete. Prints `K8S_BIN=<dir>` as its last line. This was
# tests/k8s/build.sh until the default node moved to kubelet 1.37 (build.sh now); a script of its
# own so that CI, which runs only the default node, never builds it. The node runs Debian's
# containerd 1.6 and runc. Versions and why: docs/real-node.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${PLEG_GUARD_K8S_CACHE:-/var/cache/pleg-guard-test}
kube_version=v1.34.12
. "$here/cached-build.sh"

key=$(cat "$here/v134/go.mod" "$here/v134/go.sum" "$here/npd/go.mod" "$here/npd/go.sum" "$0" \
    "$here/cached-build.sh" | sha256sum | cut -c1-16)

build() {
    local bin=$1
    echo "building kubelet, kube-apiserver, kube-controller-manager, etcd ($kube_version pins) ..."
    (cd "$here/v134" && go build -trimpath -ldflags "-s -w $version_flags" -o "$bin/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager)
    (cd "$here/v134" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
    echo "building node-problem-detector ..."
    (cd "$here/npd" && go build -trimpath -tags disable_stackdriver_exporter \
        -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=v1.36.0" \
        -o "$bin/node-problem-detector" k8s.io/node-problem-detector/cmd/nodeproblemdetector)
}

cached_build "k8s $kube_version components" "$cache_root/k8s-v134-$key" build \
    kubelet kube-apiserver kube-controller-manager etcd node-problem-detector
