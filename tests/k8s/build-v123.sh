#!/bin/bash
# Builds kubelet v1.23.17 -- the last minor with dockershim (--container-runtime=docker), the
# seeds' era -- from the pinned module tests/k8s/v123/go.mod into a cache keyed by its pins,
# this script and the cache frame it shares with build.sh (cached-build.sh):
#   /var/cache/pleg-guard-test/k8s-v123-<key>/bin/kubelet
# A no-op when it is there. Prints `K8S_BIN=<dir>` as its last line. Only the dockershim scenario
# (tests/k8s/node-up-dockershim.sh) calls it, so run-all.sh's early build (tests/k8s/build.sh)
# does not pay for it; and it is a script of its own because build.sh's cache key includes
# build.sh itself (an edit there would rebuild the 1.34 components). Go 1.26 builds the 1.23
# tree as is; measured cost and the kube-apiserver 1.23 that does not build: docs/real-node.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${PLEG_GUARD_K8S_CACHE:-/var/cache/pleg-guard-test}
kube_version=v1.23.17
. "$here/cached-build.sh"

key=$(cat "$here/v123/go.mod" "$here/v123/go.sum" "$0" "$here/cached-build.sh" \
    | sha256sum | cut -c1-16)

build() {
    echo "building kubelet $kube_version (dockershim) ..."
    (cd "$here/v123" && go build -trimpath -ldflags "-s -w $version_flags" -o "$1/" \
        k8s.io/kubernetes/cmd/kubelet)
}

cached_build "kubelet $kube_version" "$cache_root/k8s-v123-$key" build kubelet
