#!/bin/bash
# The test bed's own containerd, with the CRI plugin, for the containerd tests (run as root by
# prepare.sh; idempotent; ~0.1 s when it already answers). Not the containerd that dockerd
# uses: its own root, state and socket, so a test can SIGSTOP it without touching docker.
#
#   socket     /run/pleg-guard-test-containerd/sock/containerd.sock  (beds bind the directory
#              onto /run/containerd, so pleg-guard finds it at its default path)
#   root       /var/lib/pleg-guard-test-containerd
#   log        /var/log/pleg-guard-test-containerd.log
#   sandbox    docker.io/pleg-guard-test/pause:latest: the bed's busybox with `sleep` as its
#              command, imported with `ctr -n k8s.io images import` (pods use host networking:
#              no CNI, no registry)
#
# A killed test run may have left it (or one of its shims) SIGSTOPped: under the containerd
# lock they are resumed. Last line: CONTAINERD_SOCKET=<path>.
set -euo pipefail

BASE=/run/pleg-guard-test-containerd
SOCK=$BASE/sock/containerd.sock
ROOT=/var/lib/pleg-guard-test-containerd
CONF=$BASE/config.toml
LOG=/var/log/pleg-guard-test-containerd.log
LOCK=/run/pleg-guard-test-containerd.lock
DOCKER_LOCK=/run/pleg-guard-test-docker.lock
IMAGE=pleg-guard-test/busybox:latest
PAUSE=pleg-guard-test/pause:latest
NS=k8s.io

die() { echo "containerd.sh: ERROR: $*" >&2; exit 1; }
ctr_() { timeout 20 ctr --address "$SOCK" "$@"; }
# Whether the image is in containerd. Never `ctr ... | grep -q` under pipefail: grep exits at
# its first match, ctr's next write gets SIGPIPE and the pipeline fails although the image is
# there (~1 in 100 calls here, more under load: "... not in containerd after import", the
# fresh-machine failure of issue 31). Read the whole answer first, then look in it.
has_image() {
    local images
    images=$(ctr_ -n $NS images ls -q) || return 1
    grep -qxF "$1" <<<"$images"
}
answers() { [ -S "$SOCK" ] && timeout 5 ctr --address "$SOCK" version >/dev/null 2>&1; }
ours() { pgrep -f "^containerd --config $CONF\$" || true; }

for c in containerd ctr containerd-shim-runc-v2 runc docker; do
    command -v "$c" >/dev/null || die "$c not found (prepare.sh installs containerd and docker.io)"
done
mkdir -p "$BASE/sock" "$BASE/state" "$ROOT"

# Everything below runs under the containerd lock, and only under it: tests hold it while they
# SIGSTOP or restart this containerd, so an instance that went on without it (as this script
# once did after waiting 60 s) started a second containerd, or imported into one that was going
# away ("... not in containerd after import"). A test that holds the lock itself and runs this
# script to restart containerd says so with PLEG_GUARD_TEST_CONTAINERD_LOCK_HELD=1.
LOCK_WAIT=900
touch "$LOCK"
exec 7>"$LOCK"
if [ "${PLEG_GUARD_TEST_CONTAINERD_LOCK_HELD:-}" != 1 ]; then
    flock -w "$LOCK_WAIT" 7 \
        || die "the containerd lock $LOCK was held by another test for $LOCK_WAIT s; nothing touched"
fi

# the configuration: written to a name of this instance's own and compared under the lock, so
# no instance sees another's half-written file as a "changed" configuration
new_conf=$(mktemp "$BASE/config.toml.XXXXXX")
cat >"$new_conf" <<EOF
version = 2
root = "$ROOT"
state = "$BASE/state"

[grpc]
  address = "$SOCK"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/$PAUSE"
  # sandboxes ask for oom_score_adj -998; a root without CAP_SYS_RESOURCE (some CI sandboxes)
  # cannot lower it and runc fails: keep every container at containerd's own score
  restrict_oom_score_adj = true
  # test containers need no AppArmor profile (and a host with AppArmor but without
  # apparmor_parser would fail every container otherwise)
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$BASE/no-cni"
    conf_dir = "$BASE/no-cni"
EOF
# a changed configuration (a newer containerd.sh) restarts containerd below
changed=0
cmp -s "$new_conf" "$CONF" || changed=1
chmod 0644 "$new_conf"
mv -f "$new_conf" "$CONF"

# resume what a killed test left stopped (a test that stopped it on purpose holds the lock, so
# none is running now)
for pid in $(ours) $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do
    [ "$(awk '{print $3}' /proc/"$pid"/stat 2>/dev/null)" = T ] && { kill -CONT "$pid"; echo "containerd.sh: resumed stopped pid $pid ($(cat /proc/"$pid"/comm))"; }
done

if [ $changed = 1 ] && [ -n "$(ours)" ]; then
    echo "containerd.sh: configuration changed: restarting the bed's containerd"
    kill $(ours) 2>/dev/null || true
    for _ in $(seq 1 50); do [ -z "$(ours)" ] && break; sleep 0.2; done
    [ -z "$(ours)" ] || kill -KILL $(ours) 2>/dev/null || true
    sleep 0.2
fi
if ! answers; then
    if [ -n "$(ours)" ]; then
        echo "containerd.sh: the bed's containerd runs but does not answer; waiting for it"
    else
        setsid containerd --config "$CONF" >>"$LOG" 2>&1 </dev/null 7>&- 9>&- &
    fi
    ok=0
    for _ in $(seq 1 60); do
        if answers; then ok=1; break; fi
        sleep 0.5
    done
    [ $ok = 1 ] || { tail -20 "$LOG" >&2; die "the bed's containerd does not answer after 30 s (log $LOG)"; }
    echo "containerd.sh: started containerd (log $LOG)"
fi
plugins=$(ctr_ plugins ls) || die "ctr plugins ls failed (log $LOG)"
grep -Eq 'io\.containerd\.grpc\.v1 +cri .* ok' <<<"$plugins" \
    || { grep cri <<<"$plugins" >&2 || true; tail -20 "$LOG" >&2; die "containerd's CRI plugin is not ok (log $LOG)"; }

# the sandbox (and container) image
if ! has_image "docker.io/$PAUSE"; then
    # it comes from the host's dockerd, which tests stop and restart under the docker lock
    # (taken after the containerd lock, the order the tests take them in)
    exec 9>>"$DOCKER_LOCK"
    if [ "${PLEG_GUARD_TEST_DOCKER_LOCK_HELD:-}" != 1 ]; then
        flock -w "$LOCK_WAIT" 9 \
            || die "the docker lock $DOCKER_LOCK was held by another test for $LOCK_WAIT s; $PAUSE not imported"
    fi
    if ! docker image inspect "$PAUSE" >/dev/null 2>&1; then
        # the bed's busybox image with a command, so it can be a pod's sandbox container
        docker image inspect "$IMAGE" >/dev/null 2>&1 || die "$IMAGE missing (prepare.sh imports it)"
        cid=$(docker create "$IMAGE" true)
        docker commit -c 'CMD ["/bin/sleep", "2147483647"]' "$cid" "$PAUSE" >/dev/null \
            || { docker rm -f "$cid" >/dev/null; die "docker commit $PAUSE failed"; }
        docker rm -f "$cid" >/dev/null
    fi
    docker save "$PAUSE" | ctr_ -n $NS images import - >/dev/null || die "ctr images import $PAUSE failed"
    has_image "docker.io/$PAUSE" || die "docker.io/$PAUSE not in containerd after import"
    echo "containerd.sh: imported docker.io/$PAUSE into containerd ($NS)"
    exec 9>&-
fi
flock -u 7 2>/dev/null || true
exec 7>&-
echo "CONTAINERD_SOCKET=$SOCK"
