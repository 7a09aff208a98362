#!/bin/bash
# Builds the real Kubernetes components the real-node tests run -- kubelet, kube-apiserver, the
# etcd they are tested with, kube-controller-manager (its node lifecycle controller marks a silent
# kubelet's Node Unknown), node-problem-detector -- from the pinned modules in tests/k8s/go.mod
# and tests/k8s/npd/go.mod, into a cache keyed by those pins and this script:
#   /var/cache/pleg-guard-test/k8s-<key>/bin/
# A no-op when that directory is complete. Prints `K8S_BIN=<dir>` as its last line.
# Versions and why: docs/real-node.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${PLEG_GUARD_K8S_CACHE:-/var/cache/pleg-guard-test}
kube_version=v1.34.12

key=$(cat "$here/go.mod" "$here/go.sum" "$here/npd/go.mod" "$here/npd/go.sum" "$0" \
    | sha256sum | cut -c1-16)
out="$cache_root/k8s-$key"
tools=(kubelet kube-apiserver kube-controller-manager etcd node-problem-detector)

complete() {
    local t
    for t in "${tools[@]}"; do [ -x "$out/bin/$t" ] || return 1; done
}

# Go as the machines have it (/usr/local/go) even where PATH lacks it
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "tests/k8s/build.sh: no go on PATH nor in /usr/local/go/bin" >&2; exit 1; }

mkdir -p "$cache_root"
exec 9>"$cache_root/k8s-build.lock"
flock 9
if complete; then
    echo "k8s components cached in $out"
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
version_flags+=" -X k8s.io/component-base/version.gitMinor=34"
version_flags+=" -X k8s.io/component-base/version.gitTreeState=clean"

echo "building kubelet, kube-apiserver, kube-controller-manager, etcd ($kube_version pins) ..."
(cd "$here" && go build -trimpath -ldflags "-s -w $version_flags" -o "$tmp/bin/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager)
(cd "$here" && go build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3)
echo "building node-problem-detector ..."
(cd "$here/npd" && go build -trimpath -tags disable_stackdriver_exporter \
    -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=v1.36.0" \
    -o "$tmp/bin/node-problem-detector" k8s.io/node-problem-detector/cmd/nodeproblemdetector)

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "k8s components built in $(( $(date +%s) - start )) s into $out"
echo "K8S_BIN=$out/bin"
