#!/bin/bash
# Prepare the pleg-guard integration test bed on this host (run as root; idempotent; fast when
# everything is already there). Installs the packages, makes sure dockerd answers, imports the
# busybox image, removes what killed test runs left behind, and builds (once) the bed root
# filesystem per Debian suite asked for (default bookworm; `prepare.sh bookworm bullseye trixie`
# builds them in parallel) and, with bookworm, (once) the affected libsystemd of systemd#11809
# (affected-libsystemd.sh; printed as AFFECTED_LIBSYSTEMD=<path>). The last line printed is
# ROOTFS=<path of the first suite's rootfs>; bookworm's path is also written to
# /var/cache/pleg-guard-test/current-rootfs, another suite's to current-rootfs-<suite>.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=/var/cache/pleg-guard-test
IMAGE=pleg-guard-test/busybox:latest
PACKAGES=(docker.io containerd systemd-container debootstrap busybox-static e2fsprogs)
INCLUDE=systemd,systemd-sysv,dbus,libpam-systemd,procps,busybox
DOCKER_LOCK=/run/pleg-guard-test-docker.lock
export DEBIAN_FRONTEND=noninteractive

die() { echo "prepare.sh: ERROR: $*" >&2; exit 1; }
T0=$(date +%s.%N)
step_start() { STEP=$1; S0=$(date +%s.%N); }
step_done() { awk -v a="$S0" -v b="$(date +%s.%N)" -v s="$STEP" -v w="$1" 'BEGIN{printf "prepare: %-22s %-44s %6.1fs\n", s, w, b-a}'; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages, starts dockerd, builds a rootfs)"

# --- packages -----------------------------------------------------------------------------------
step_start packages
missing=()
for p in "${PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq >/tmp/pleg-guard-test-apt.log 2>&1 || { cat /tmp/pleg-guard-test-apt.log >&2; die "apt-get update failed"; }
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/pleg-guard-test-apt.log 2>&1 \
        || { tail -30 /tmp/pleg-guard-test-apt.log >&2; die "apt-get install ${missing[*]} failed"; }
    step_done "installed ${missing[*]}"
else
    step_done "all present"
fi
for c in docker dockerd systemd-nspawn debootstrap chattr nsenter flock; do
    command -v "$c" >/dev/null || die "$c not found after installing packages"
done
[ -x /bin/busybox ] || die "/bin/busybox (busybox-static) missing"

# --- dockerd ------------------------------------------------------------------------------------
step_start dockerd
# a killed test run may have left dockerd/containerd SIGSTOPped: resume them (under the docker
# lock so we never resume a dockerd that a running test stopped on purpose).
resume_docker() {
    # (docker's containerd only: the bed's own one, tests/bed/containerd.sh, has its own lock;
    # and the host's only: a containerd inside a bed, e.g. the real node's of tests/k8s, is that
    # bed's, and tests/real_node.rs stops it on purpose)
    local host_pidns
    host_pidns=$(readlink /proc/self/ns/pid)
    for pid in $(pgrep -x dockerd) $(pgrep -x containerd | while read -r p; do [[ "$({ tr '\0' ' ' </proc/"$p"/cmdline; } 2>/dev/null)" == *pleg-guard-test-containerd* ]] || echo "$p"; done); do
        [ "$(readlink /proc/"$pid"/ns/pid 2>/dev/null)" = "$host_pidns" ] || continue
        [ "$(awk '{print $3}' /proc/$pid/stat 2>/dev/null)" = T ] && { kill -CONT "$pid"; echo "prepare: resumed stopped pid $pid ($(cat /proc/$pid/comm))"; }
    done
    return 0
}
touch "$DOCKER_LOCK"
exec 9>"$DOCKER_LOCK"
# Never without the lock: a test holds it while it stops or restarts dockerd, and a prepare.sh
# that went on without it (after 60 s, as it once did) found dockerd "not answering" and failed,
# or started a second one. Tests take the lock only after their bed is prepared, so waiting is
# safe; the bound only turns a lock that is never released into a clear error.
LOCK_WAIT=900
flock -w "$LOCK_WAIT" 9 || die "the docker lock $DOCKER_LOCK was held by another test for $LOCK_WAIT s; nothing touched"
resume_docker
if timeout 10 docker info >/dev/null 2>&1; then
    step_done "already answering"
else
    if pgrep -x dockerd >/dev/null; then
        echo "prepare: dockerd runs but does not answer; waiting for it"
    else
        setsid dockerd >>/var/log/pleg-guard-test-dockerd.log 2>&1 </dev/null 9>&- &
    fi
    ok=0
    for _ in $(seq 1 60); do
        if timeout 5 docker info >/dev/null 2>&1; then ok=1; break; fi
        sleep 1
    done
    [ $ok = 1 ] || { tail -20 /var/log/pleg-guard-test-dockerd.log >&2; die "dockerd does not answer after 60 s (log: /var/log/pleg-guard-test-dockerd.log)"; }
    step_done "started (log /var/log/pleg-guard-test-dockerd.log)"
fi

# --- image --------------------------------------------------------------------------------------
step_start image
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    step_done "$IMAGE present"
else
    tmp=$(mktemp -d)
    mkdir -p "$tmp/bin" "$tmp/tmp" "$tmp/etc"
    cp /bin/busybox "$tmp/bin/busybox"
    for a in $(/bin/busybox --list); do [ -e "$tmp/bin/$a" ] || ln -s busybox "$tmp/bin/$a"; done
    tar -C "$tmp" -c . | docker import -c 'ENV PATH=/bin' - "$IMAGE" >/dev/null || { rm -rf "$tmp"; die "docker import failed"; }
    rm -rf "$tmp"
    step_done "imported $IMAGE"
fi

# --- leftovers of killed test runs ----------------------------------------------------------------
# Names are pgt-<pid>-<n>; only those whose test process is gone are removed.
step_start cleanup
stale() { local pid=${1#pgt-}; pid=${pid%%-*}; [[ $pid =~ ^[0-9]+$ ]] && [ ! -d /proc/$pid ]; }
removed=0
for name in $(docker ps -a --filter name=pgt- --format '{{.Names}}'); do
    stale "$name" || continue
    upper=$(docker inspect -f '{{.GraphDriver.Data.UpperDir}}' "$name" 2>/dev/null || true)
    [ -n "$upper" ] && [ -d "$upper" ] && chattr -R -i "$upper" 2>/dev/null || true
    docker rm -f "$name" >/dev/null 2>&1 && removed=$((removed + 1)) || echo "prepare: could not remove stale container $name" >&2
done
flock -u 9 2>/dev/null || true
exec 9>&-
# stale beds: systemd-nspawn --machine=pgt-<pid>-<n> whose test process is gone
for pid in $(pgrep -x systemd-nspawn || true); do
    # (a process may end between pgrep and this read: no cmdline is no stale bed, not a failure)
    m=$({ tr '\0' '\n' </proc/"$pid"/cmdline; } 2>/dev/null | sed -n 's/^--machine=\(pgt-.*\)/\1/p' || true)
    [ -n "$m" ] && stale "$m" || continue
    for c in $(pgrep -P "$pid"); do kill -KILL "$c" 2>/dev/null || true; done
    kill -KILL "$pid" 2>/dev/null || true
    removed=$((removed + 1))
done
# stale beds' own cgroups (tests/support/mod.rs, BedCgroup): children first; a cgroup that still
# holds a process stays
for h in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do
    for d in "$h"/pleg-guard-test/pgt-*; do
        [ -d "$d" ] && stale "${d##*/}" || continue
        find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
done
step_done "removed $removed stale container(s)/bed(s)"

# --- the bed's own containerd with CRI (tests/bed/containerd.sh) --------------------------------
step_start containerd
out=$("$HERE/containerd.sh") || die "tests/bed/containerd.sh failed"
echo "$out" | grep -v '^CONTAINERD_SOCKET=' | sed 's/^/prepare: /' || true
step_done "answers at ${out##*CONTAINERD_SOCKET=}"

# --- bed root filesystems, one per suite (built in parallel) --------------------------------------
# bookworm keeps its historical place and key ($CACHE/rootfs-<key>, current-rootfs) that other
# checkouts rely on; every other suite is $CACHE/bed-<suite>-<key> (key includes the suite) with
# current-rootfs-<suite>, so the two never remove each other's builds.
mkdir -p "$CACHE"
mirror=""
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^[a-z]+:\/\//){print $i; exit}}' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

rootfs_path() { # SUITE -> path of its (possibly not yet built) rootfs
    local suite=$1 key
    if [ "$suite" = bookworm ]; then
        key=$( { cat "$HERE/customize-rootfs.sh"; echo "$INCLUDE"; } | sha256sum | cut -c1-16)
        echo "$CACHE/rootfs-$key"
    else
        key=$( { cat "$HERE/customize-rootfs.sh"; echo "$INCLUDE"; echo "$suite"; } | sha256sum | cut -c1-16)
        echo "$CACHE/bed-$suite-$key"
    fi
}

build_rootfs() { # SUITE: builds it unless cached; prints one summary line; exit status 0 = usable
    local suite=$1 rootfs lockfile tmpdir log s0
    s0=$(date +%s.%N)
    rootfs=$(rootfs_path "$suite")
    done_line() { awk -v a="$s0" -v b="$(date +%s.%N)" -v s="rootfs $suite" -v w="$1" 'BEGIN{printf "prepare: %-22s %-44s %6.1fs\n", s, w, b-a}'; }
    if [ -x "$rootfs/lib/systemd/systemd" ] && [ -e "$rootfs/.pleg-guard-bed-complete" ]; then
        done_line "cached $rootfs"; return 0
    fi
    if [ "$suite" = bookworm ]; then lockfile=$CACHE/.build.lock; else lockfile=$CACHE/.build-$suite.lock; fi
    exec {lk}>"$lockfile"
    flock -w 600 "$lk" || { echo "prepare.sh: ERROR: another prepare.sh holds $lockfile for 10 minutes" >&2; return 1; }
    if [ -e "$rootfs/.pleg-guard-bed-complete" ]; then
        done_line "built meanwhile by another run: $rootfs"; return 0
    fi
    tmpdir=$(mktemp -d "$CACHE/.build-$suite-XXXXXX")
    if [ "$suite" = bookworm ]; then log=$CACHE/debootstrap.log; else log=$CACHE/debootstrap-$suite.log; fi
    echo "prepare: debootstrap $suite from $mirror into $tmpdir (about 70 s; log $log)"
    if ! debootstrap --variant=minbase --include="$INCLUDE" "$suite" "$tmpdir" "$mirror" >"$log" 2>&1; then
        tail -30 "$log" >&2
        [ -f "$tmpdir/debootstrap/debootstrap.log" ] && tail -30 "$tmpdir/debootstrap/debootstrap.log" >&2
        rm -rf "$tmpdir"
        echo "prepare.sh: ERROR: debootstrap $suite failed (log $log)" >&2; return 1
    fi
    "$HERE/customize-rootfs.sh" "$tmpdir" >>"$log" 2>&1 \
        || { tail -20 "$log" >&2; rm -rf "$tmpdir"; echo "prepare.sh: ERROR: customize-rootfs.sh ($suite) failed" >&2; return 1; }
    rm -rf "$tmpdir/var/cache/apt/archives/"*.deb
    touch "$tmpdir/.pleg-guard-bed-complete"
    rm -rf "$rootfs"
    mv -T "$tmpdir" "$rootfs" || { rm -rf "$tmpdir"; echo "prepare.sh: ERROR: could not rename $tmpdir to $rootfs" >&2; return 1; }
    # builds for older customisations are ~250 MB each: drop this suite's old ones
    local old pattern
    if [ "$suite" = bookworm ]; then pattern="$CACHE/rootfs-*"; else pattern="$CACHE/bed-$suite-*"; fi
    for old in $pattern; do
        [ -e "$old" ] && [ "$old" != "$rootfs" ] && { rm -rf "$old" && echo "prepare: removed old $old"; }
    done
    done_line "built $rootfs"
}

# prepare.sh [SUITE...]   (default: bookworm; e.g. `prepare.sh bookworm bullseye trixie`)
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || SUITES=(bookworm)
for suite in "${SUITES[@]}"; do
    [[ $suite =~ ^[a-z]+$ ]] || die "not a Debian suite name: $suite"
    [ -e "/usr/share/debootstrap/scripts/$suite" ] || die "debootstrap does not know the suite $suite"
done
pids=()
for suite in "${SUITES[@]}"; do
    build_rootfs "$suite" &
    pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "prepare.sh: ERROR: rootfs ${SUITES[$i]} could not be built" >&2; failed=1; }
done
[ $failed = 0 ] || exit 1
for suite in "${SUITES[@]}"; do
    rootfs=$(rootfs_path "$suite")
    if [ "$suite" = bookworm ]; then echo "$rootfs" > "$CACHE/current-rootfs"; else echo "$rootfs" > "$CACHE/current-rootfs-$suite"; fi
    echo "ROOTFS_$suite=$rootfs"
done
# --- affected libsystemd (systemd#11809) ------------------------------------------------------------
# The pre-v242 sd-bus that affected beds bind over PID 1's libsystemd-shared-252.so (cached; a
# checked byte patch for bookworm's build, a source build otherwise). Under CI=true it must exist:
# the affected-bed tests never run against a fixed PID 1. Only with bookworm (the library is
# bookworm's 252).
if [[ " ${SUITES[*]} " == *" bookworm "* ]]; then
    ROOTFS=$(rootfs_path bookworm)
    step_start affected-lib
    AFFECTED=""
    if out=$("$HERE/affected-libsystemd.sh" "$ROOTFS" 2>&1); then
        AFFECTED=$(echo "$out" | sed -n 's/^AFFECTED_LIBSYSTEMD=//p' | tail -1)
        step_done "$(echo "$out" | grep -v '^AFFECTED_LIBSYSTEMD=' | tail -1 | cut -c1-44)"
    else
        echo "$out" >&2
        step_done "FAILED"
    fi
    if [ -z "$AFFECTED" ]; then
        case "${CI:-}" in
            true|TRUE|True|1|yes) die "no affected libsystemd-shared-252.so for $ROOTFS (affected-libsystemd.sh above); required under CI=true" ;;
            *) echo "prepare: WARNING: no affected libsystemd; affected-bed tests will be SKIPPED" >&2 ;;
        esac
    fi
    echo "AFFECTED_LIBSYSTEMD=$AFFECTED"
fi
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "prepare: total %.1fs\n", b-a}'
# the last line names the first suite's rootfs (tests/support reads it)
echo "ROOTFS=$(rootfs_path "${SUITES[0]}")"
