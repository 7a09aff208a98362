# Sourced by tests/k8s/build.sh, build-v134.sh and build-v123.sh: the frame of a cached build of
# Kubernetes components from pinned Go modules. Each keys its cache directory on this file
# too, so an edit here rebuilds all three.
#
#   cached_build WHAT OUT BUILD_FN TOOL...
#
# Under the cache's lock ($cache_root/k8s-build.lock, one build at a time on the machine): when
# OUT/bin holds every TOOL (executable), says so; else calls `BUILD_FN <tmp>/bin` and moves the
# finished tree to OUT (a build cut short leaves no OUT behind). Either way prints
# `K8S_BIN=OUT/bin` as its last line. Needs $cache_root; puts Go on PATH, sets the Go build
# environment (GOFLAGS, CGO_ENABLED, GOTOOLCHAIN) and, from $kube_version (vMAJOR.MINOR.PATCH),
# $version_flags: the -X flags that stamp k8s.io/component-base's version.

# Go as the machines have it (/usr/local/go) even where PATH lacks it
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "tests/k8s/$(basename "$0"): no go on PATH nor in /usr/local/go/bin" >&2; exit 1; }

cached_build_tmp=
cached_build() {
    local what=$1 out=$2 build=$3
    shift 3
    local tool start minor complete=yes
    mkdir -p "$cache_root"
    exec 9>"$cache_root/k8s-build.lock"
    flock 9
    for tool in "$@"; do [ -x "$out/bin/$tool" ] || complete=; done
    if [ -n "$complete" ]; then
        echo "$what cached in $out"
        echo "K8S_BIN=$out/bin"
        return 0
    fi

    start=$(date +%s)
    cached_build_tmp="$out.tmp.$$"
    rm -rf "$cached_build_tmp"
    mkdir -p "$cached_build_tmp/bin"
    trap 'rm -rf "$cached_build_tmp"' EXIT

    export GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
    minor=${kube_version#v*.}
    minor=${minor%%.*}
    version_flags="-X k8s.io/component-base/version.gitVersion=$kube_version"
    version_flags+=" -X k8s.io/component-base/version.gitMajor=1"
    version_flags+=" -X k8s.io/component-base/version.gitMinor=$minor"
    version_flags+=" -X k8s.io/component-base/version.gitTreeState=clean"

    "$build" "$cached_build_tmp/bin"

    rm -rf "$out"
    mv "$cached_build_tmp" "$out"
    trap - EXIT
    echo "$what built in $(( $(date +%s) - start )) s into $out"
    echo "K8S_BIN=$out/bin"
}
