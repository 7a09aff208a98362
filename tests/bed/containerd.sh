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
IMAGE=pleg-guard-test/busybox:latest
PAUSE=pleg-guard-test/pause:latest
NS=k8s.io

die() { echo "containerd.sh: ERROR: $*" >&2; exit 1; }
ctr_() { timeout 20 ctr --address "$SOCK" "$@"; }
answers() { [ -S "$SOCK" ] && timeout 5 ctr --address "$SOCK" version >/dev/null 2>&1; }
ours() { pgrep -f "^containerd --config $CONF\$" || true; }

for c in containerd ctr containerd-shim-runc-v2 runc docker; do
    command -v "$c" >/dev/null || die "$c not found (prepare.sh installs containerd and docker.io)"
done
mkdir -p "$BASE/sock" "$BASE/state" "$ROOT"
cat >"$CONF.new" <<EOF
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
cmp -s "$CONF.new" "$CONF" || changed=1
mv -f "$CONF.new" "$CONF"

# resume what a killed test left stopped (never what a running test stopped on purpose)
touch "$LOCK"
exec 7>"$LOCK"
HAVE_LOCK=0
# a test that holds the lock itself and restarts containerd says so
if [ "${PLEG_GUARD_TEST_CONTAINERD_LOCK_HELD:-}" = 1 ] || flock -w 60 7; then
    HAVE_LOCK=1
    for pid in $(ours) $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do
        [ "$(awk '{print $3}' /proc/"$pid"/stat 2>/dev/null)" = T ] && { kill -CONT "$pid"; echo "containerd.sh: resumed stopped pid $pid ($(cat /proc/"$pid"/comm))"; }
    done
else
    echo "containerd.sh: containerd lock busy for 60 s; not touching its state"
fi

if [ $changed = 1 ] && [ $HAVE_LOCK = 1 ] && [ -n "$(ours)" ]; then
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
ctr_ plugins ls | grep -Eq 'io\.containerd\.grpc\.v1 +cri .* ok' \
    || { ctr_ plugins ls | grep cri >&2 || true; tail -20 "$LOG" >&2; die "containerd's CRI plugin is not ok (log $LOG)"; }

# the sandbox (and container) image
if ! ctr_ -n $NS images ls -q | grep -qx "docker.io/$PAUSE"; then
    if ! docker image inspect "$PAUSE" >/dev/null 2>&1; then
        # the bed's busybox image with a command, so it can be a pod's sandbox container
        docker image inspect "$IMAGE" >/dev/null 2>&1 || die "$IMAGE missing (prepare.sh imports it)"
        cid=$(docker create "$IMAGE" true)
        docker commit -c 'CMD ["/bin/sleep", "2147483647"]' "$cid" "$PAUSE" >/dev/null \
            || { docker rm -f "$cid" >/dev/null; die "docker commit $PAUSE failed"; }
        docker rm -f "$cid" >/dev/null
    fi
    docker save "$PAUSE" | ctr_ -n $NS images import - >/dev/null || die "ctr images import $PAUSE failed"
    ctr_ -n $NS images ls -q | grep -qx "docker.io/$PAUSE" || die "docker.io/$PAUSE not in containerd after import"
    echo "containerd.sh: imported docker.io/$PAUSE into containerd ($NS)"
fi
flock -u 7 2>/dev/null || true
exec 7>&-
echo "CONTAINERD_SOCKET=$SOCK"
