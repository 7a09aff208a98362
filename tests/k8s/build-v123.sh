#!/bin/bash
# Builds kubelet v1.23.17 -- the last minor with dockershim (--container-runtime=docker), the
# seeds' era -- from the pinned module tests/k8s/v123/go.mod into a cache keyed by its pins and
# this script:   /var/cache/pleg-guard-test/k8s-v123-<key>/bin/kubelet
# A no-op when it is there. Prints `K8S_BIN=<dir>` as its last line. Only the dockershim scenario
# (tests/k8s/node-up-dockershim.sh) calls it, so run-all.sh's early build (tests/k8s/build.sh)
# does not pay for it; and it is a script of its own because build.sh's cache key includes
# build.sh itself (an edit there would rebuild the 1.34 components). Go 1.26 builds the 1.23
# tree as is; measured cost and the kube-apiserver 1.23 that does not build: docs/real-node.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${PLEG_GUARD_K8S_CACHE:-/var/cache/pleg-guard-test}
kube_version=v1.23.17

key=$(cat "$here/v123/go.mod" "$here/v123/go.sum" "$0" | sha256sum | cut -c1-16)
out="$cache_root/k8s-v123-$key"

command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "tests/k8s/build-v123.sh: no go on PATH nor in /usr/local/go/bin" >&2; exit 1; }

mkdir -p "$cache_root"
exec 9>"$cache_root/k8s-build.lock"
flock 9
if [ -x "$out/bin/kubelet" ]; then
    echo "kubelet $kube_version cached in $out"
    echo "K8S_BIN=$out/bin"
    exit 0
fi

start=$(date +%s)
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT

export GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
version_flags="-X k8s.io/component-base/version.gitVersion=$kube_version"
version_flags+=" -X k8s.io/component-base/version.gitMajor=1"
version_flags+=" -X k8s.io/component-base/version.gitMinor=23"
version_flags+=" -X k8s.io/component-base/version.gitTreeState=clean"

echo "building kubelet $kube_version (dockershim) ..."
(cd "$here/v123" && go build -trimpath -ldflags "-s -w $version_flags" -o "$tmp/bin/" \
    k8s.io/kubernetes/cmd/kubelet)

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "kubelet $kube_version built in $(( $(date +%s) - start )) s into $out"
echo "K8S_BIN=$out/bin"
