#!/bin/bash
# The seeds' era in a node bed: kubelet v1.23.17 with dockershim (--container-runtime=docker)
# against dockerd 20.10 (Debian bookworm's docker.io, installed in the bed's rootfs), registered
# with the v1.34.12 kube-apiserver + etcd 3.6.4 of tests/k8s/build.sh, pleg-guard installed from
# the project's .deb with its defaults. For tests/real_node.rs (the dockershim scenario) and by
# hand (docs/real-node.md "kubelet 1.23 (dockershim)"):
#
#   tests/k8s/node-up-dockershim.sh      then     tests/k8s/node-down.sh
#
# Shares node-up.sh's lock, state directory and node-down.sh (one node bed at a time; docker's
# data in /var/lib/pleg-guard-test-node/docker is left for the next run to remove). Differs
# from node-up.sh in: the bed's rootfs (bookworm's bed rootfs + docker.io + iproute2, derived once
# and cached as /var/cache/pleg-guard-test/bed-bookworm-docker-<key>), dockerd instead of
# containerd's CRI (docker's data on a host ext4 directory: overlay2 on the bed's overlay root
# fails), a runc wrapper for the sandboxes' oom_score_adj (below), CNI through dockershim, no
# node-problem-detector.
#
# Waits until the Node is Ready and both pods Running, then prints as its LAST lines (as
# node-up.sh does):  KUBECONFIG=  NODE=  BED_PID=  POD_IMAGE=
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "node-up-dockershim: run as root" >&2; exit 2; }

NODE=pleg-guard-node
STATE=/run/pleg-guard-test-node
NODE_IP=10.255.0.1
API_PORT=6443
LOCK=/run/pleg-guard-test-node.lock
HOST_DATA=/var/lib/pleg-guard-test-node
CACHE=/var/cache/pleg-guard-test
POD_IMAGE=pleg-guard-test/busybox:latest
PAUSE_IMAGE=pleg-guard-test/pause:latest
log() { printf 'node-up-dockershim: %s (%ds)\n' "$*" "$SECONDS" >&2; }
die() { printf 'node-up-dockershim: %s\n' "$*" >&2; exit 1; }

# --- prerequisites: bed rootfs, the components, the .deb ----------------------------------------
prep=$("$repo/tests/bed/prepare.sh" 2>&1) || { echo "$prep" >&2; die "tests/bed/prepare.sh failed"; }
BASE=$(sed -n 's/^ROOTFS=//p' <<<"$prep" | tail -n 1)
[ -x "$BASE/lib/systemd/systemd" ] || die "no bed rootfs (prepare.sh printed ROOTFS=$BASE)"
K8S_BIN=$("$here/build.sh" | sed -n 's/^K8S_BIN=//p' | tail -n 1)
[ -x "$K8S_BIN/kube-apiserver" ] || die "tests/k8s/build.sh built no kube-apiserver"
V123_BIN=$("$here/build-v123.sh" | sed -n 's/^K8S_BIN=//p' | tail -n 1)
[ -x "$V123_BIN/kubelet" ] || die "tests/k8s/build-v123.sh built no kubelet"
DEB=${PLEG_GUARD_DEB:-}
if [ -z "$DEB" ]; then
    DEB=$(ls -t "$repo"/target/ci-packages/pleg-guard_*.deb "$repo"/target/debian/pleg-guard_*.deb 2>/dev/null | head -n 1 || true)
fi
if [ -z "$DEB" ]; then
    log "no .deb given (PLEG_GUARD_DEB) or built: packaging/build-deb.sh"
    DEB=$("$repo/packaging/build-deb.sh" | tail -n 1)
fi
[ -f "$DEB" ] || die "no pleg-guard .deb at '$DEB'"
for b in /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/bin/socat /usr/bin/curl; do
    [ -x "$b" ] || die "$b missing (Debian packages containernetworking-plugins socat curl)"
done
docker image inspect "$POD_IMAGE" "$PAUSE_IMAGE" >/dev/null \
    || die "the test images are missing from the host's docker (tests/bed/prepare.sh makes them)"

# the docker bed rootfs: bookworm's bed rootfs + docker.io (dockerd 20.10, its containerd, runc)
# + iproute2 (dockershim reads a pod's IP with `nsenter ... ip`); docker not started at boot
ROOTFS_RECIPE='apt-get install -y -qq --no-install-recommends docker.io iproute2'
key=$( { echo "$BASE"; echo "$ROOTFS_RECIPE"; } | sha256sum | cut -c1-16)
ROOTFS=$CACHE/bed-bookworm-docker-$key
if [ ! -e "$ROOTFS/.pleg-guard-bed-complete" ]; then
    exec 8>"$CACHE/.build-bookworm-docker.lock"
    flock -w 600 8 || die "another run holds $CACHE/.build-bookworm-docker.lock"
    if [ ! -e "$ROOTFS/.pleg-guard-bed-complete" ]; then
        log "deriving the docker bed rootfs from $BASE (about 30 s)"
        tmp=$(mktemp -d "$CACHE/.build-bookworm-docker-XXXXXX")
        cp -a "$BASE/." "$tmp/"
        printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
        chmod 755 "$tmp/usr/sbin/policy-rc.d"
        if ! chroot "$tmp" env DEBIAN_FRONTEND=noninteractive sh -c "apt-get update -qq && $ROOTFS_RECIPE" \
            >"$CACHE/bed-bookworm-docker.log" 2>&1; then
            tail -20 "$CACHE/bed-bookworm-docker.log" >&2; rm -rf "$tmp"; die "apt-get in the docker rootfs failed"
        fi
        rm -f "$tmp/usr/sbin/policy-rc.d" "$tmp/var/cache/apt/archives/"*.deb
        rm -f "$tmp/etc/systemd/system/multi-user.target.wants/docker.service" \
            "$tmp/etc/systemd/system/sockets.target.wants/docker.socket"
        touch "$tmp/.pleg-guard-bed-complete"
        rm -rf "$ROOTFS"
        mv -T "$tmp" "$ROOTFS"
        for old in "$CACHE"/bed-bookworm-docker-*; do
            [ "$old" != "$ROOTFS" ] && [ -d "$old" ] && rm -rf "$old"
        done
    fi
    exec 8>&-
fi

# --- one node bed at a time ----------------------------------------------------------------------
exec 9>"$LOCK"
if ! flock -n 9; then
    log "another node bed is up; waiting for it to be removed (tests/k8s/node-down.sh)"
    flock -w 900 9 || die "another node bed held $LOCK for 15 min"
fi
"$here/node-down.sh" --quiet || true
mkdir -p "$STATE" "$HOST_DATA"
up=false
NSPAWN_PID= BED_PID= SOCAT_PID=
down_if_failed() { # (the pid files again first: see the end of this script)
    $up && return
    [ -n "$NSPAWN_PID" ] && echo "$NSPAWN_PID" >"$STATE/nspawn.pid"
    [ -n "$BED_PID" ] && echo "$BED_PID" >"$STATE/bed.pid"
    [ -n "$SOCAT_PID" ] && echo "$SOCAT_PID" >"$STATE/socat.pid"
    "$here/node-down.sh" --quiet
}
trap down_if_failed EXIT
rm -rf "$HOST_DATA/docker" "$STATE"/*
mkdir -p "$HOST_DATA/docker"

# the host sysctls kubelet insists on (restored by node-down.sh); applied again right before
# kubelet starts: a node-down.sh of the previous bed still running after its nspawn exited (and
# so freed the lock) restores the old values from the shared sysctl.restore, seen here as kubelet
# 1.23 exiting with "Failed to start ContainerManager" err="[invalid kernel flag:
# vm/overcommit_memory, expected value: 1, actual value: 0, ...]"
host_sysctls() {
    local kv k want have
    for kv in vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1 \
        kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000; do
        k=${kv%%=*} want=${kv#*=}
        have=$(sysctl -n "$k")
        if [ "$have" != "$want" ]; then
            grep -q "^$k=" "$STATE/sysctl.restore" || echo "$k=$have" >>"$STATE/sysctl.restore"
            sysctl -q -w "$kv"
        fi
    done
}
: >"$STATE/sysctl.restore"
host_sysctls

# --- the bed: node-up.sh's flags, docker's data instead of containerd's -------------------------
args=(-D "$ROOTFS" --volatile=overlay --boot --register=no --keep-unit --private-network
    "--machine=$NODE" "--hostname=$NODE"
    --capability=CAP_NET_ADMIN --system-call-filter=@keyring
    --bind=/dev/kmsg --capability=CAP_SYSLOG
    "--bind=$HOST_DATA/docker:/var/lib/docker"
    "--bind-ro=$K8S_BIN:/opt/k8s/bin" "--bind-ro=$V123_BIN:/opt/k8s-v123/bin"
    --bind-ro=/usr/lib/cni
    "--bind-ro=$DEB:/root/pleg-guard.deb")
SYSTEMD_LOG_COLOR=0 setsid systemd-nspawn "${args[@]}" </dev/null >"$STATE/console.log" 2>&1 &
NSPAWN_PID=$!
echo "$NSPAWN_PID" >"$STATE/nspawn.pid"
exec 9>&-

BED_PID=
for _ in $(seq 300); do
    for c in $(cat "/proc/$NSPAWN_PID/task/$NSPAWN_PID/children" 2>/dev/null); do
        if [ "$(awk '/^NSpid:/{print $NF}' "/proc/$c/status" 2>/dev/null)" = 1 ]; then BED_PID=$c; fi
    done
    [ -n "$BED_PID" ] && break
    kill -0 "$NSPAWN_PID" 2>/dev/null || { cat "$STATE/console.log" >&2; die "systemd-nspawn exited"; }
    sleep 0.1
done
[ -n "$BED_PID" ] || die "no PID 1 under systemd-nspawn $NSPAWN_PID"
echo "$BED_PID" >"$STATE/bed.pid"
in_bed() { nsenter -t "$BED_PID" -a -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SYSTEMD_PAGER= "$@"; }
for _ in $(seq 300); do
    s=$(in_bed systemctl is-system-running 2>/dev/null || true)
    [ "$s" = running ] || [ "$s" = degraded ] && break
    sleep 0.1
done
log "bed $NODE booted (PID 1 = host pid $BED_PID, $s)"
nsenter -t "$BED_PID" -n -- sh -ec "
    ip link add pgt0 type veth peer name pgt1; ip addr add $NODE_IP/24 dev pgt0
    ip link set pgt1 up; ip link set pgt0 up; ip link set lo up; ip route add default dev pgt0"

# --- files -----------------------------------------------------------------------------------
put() { in_bed sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1"' sh "$1"; }
printf '127.0.0.1 localhost\n%s %s\n' "$NODE_IP" "$NODE" | put /etc/hosts
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$TOKEN" >"$STATE/admin.token"
echo "$TOKEN,admin,admin,system:masters" | put /etc/kubernetes/tokens.csv
openssl genrsa -out "$STATE/sa.key" 2048 2>/dev/null
put /etc/kubernetes/sa.key <"$STATE/sa.key"
kubeconfig() { # SERVER
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: $1
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: node
  context: {cluster: node, user: admin}
current-context: node
EOF
}
put /etc/systemd/system/etcd.service <<EOF
[Unit]
Description=etcd for the node's kube-apiserver
[Service]
Type=notify
ExecStart=/opt/k8s/bin/etcd --name=$NODE --data-dir=/var/lib/etcd \\
  --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \\
  --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \\
  --initial-cluster=$NODE=http://127.0.0.1:2380 --log-level=warn
Restart=always
EOF
put /etc/systemd/system/kube-apiserver.service <<EOF
[Unit]
Description=kube-apiserver (v1.34; the 1.23 one does not build from its module)
After=etcd.service
Wants=etcd.service
[Service]
ExecStart=/opt/k8s/bin/kube-apiserver --etcd-servers=http://127.0.0.1:2379 \\
  --bind-address=0.0.0.0 --secure-port=$API_PORT --advertise-address=$NODE_IP \\
  --cert-dir=/var/lib/kube-apiserver --token-auth-file=/etc/kubernetes/tokens.csv \\
  --authorization-mode=AlwaysAllow --disable-admission-plugins=ServiceAccount \\
  --service-cluster-ip-range=10.96.0.0/24 \\
  --service-account-issuer=https://kubernetes.default.svc \\
  --service-account-key-file=/etc/kubernetes/sa.key \\
  --service-account-signing-key-file=/etc/kubernetes/sa.key
Restart=always
RestartSec=1
EOF
put /usr/local/sbin/cgroups-rw <<'EOF'
#!/bin/sh
for c in /sys/fs/cgroup/*; do
    [ -d "$c" ] && [ ! -L "$c" ] && mount -o remount,bind,rw "$c"
done
exit 0
EOF
in_bed chmod +x /usr/local/sbin/cgroups-rw
put /etc/systemd/system/cgroups-rw.service <<'EOF'
[Unit]
Description=writable cgroup v1 controllers for docker and kubelet
DefaultDependencies=no
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/cgroups-rw
EOF
for u in containerd docker; do
    put /etc/systemd/system/$u.service.d/50-cgroups-rw.conf <<'EOF'
[Unit]
After=cgroups-rw.service
Requires=cgroups-rw.service
EOF
done
# dockershim gives every pod sandbox oom_score_adj -998; runc init writing a negative value needs
# CAP_SYS_RESOURCE, which the host's own bounding set lacks (nspawn: "Some capabilities will not
# be set because they are not in the current bounding set"), and dockershim has no
# restrict_oom_score_adj as containerd's CRI has: docker's runtime is this wrapper, which raises
# a negative oomScoreAdj in the bundle to 0 before runc reads it (else "runc create failed: unable
# to start container process: can't get final child's PID from pipe: EOF")
put /usr/local/sbin/runc-bed <<'EOF'
#!/bin/sh
prev=
for a in "$@"; do
    case "$prev" in --bundle|-b) bundle=$a ;; esac
    case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
    prev=$a
done
if [ -n "${bundle:-}" ] && [ -f "$bundle/config.json" ]; then
    sed -i -E 's/"oomScoreAdj":-[0-9]+/"oomScoreAdj":0/' "$bundle/config.json"
fi
exec /usr/sbin/runc "$@"
EOF
in_bed chmod 755 /usr/local/sbin/runc-bed
# systemd cgroup driver (runc asks the bed's PID 1 over D-Bus, as on the seeds' nodes); no bridge,
# iptables or masquerading of docker's own: pods get their network from CNI through dockershim
put /etc/docker/daemon.json <<'EOF'
{
  "exec-opts": ["native.cgroupdriver=systemd"],
  "storage-driver": "overlay2",
  "bridge": "none",
  "iptables": false,
  "ip-masq": false,
  "runtimes": {"runc-bed": {"path": "/usr/local/sbin/runc-bed"}},
  "default-runtime": "runc-bed"
}
EOF
# dockershim's CNI library (libcni 0.8) speaks CNI spec versions up to 0.4.0
put /etc/cni/net.d/10-pleg-guard-node.conflist <<'EOF'
{
  "cniVersion": "0.4.0",
  "name": "pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
kubeconfig "https://$NODE_IP:$API_PORT" | put /etc/kubernetes/kubelet.kubeconfig
# node-up.sh's KubeletConfiguration less what 1.23 does not know (containerRuntimeEndpoint,
# failCgroupV1)
put /etc/kubernetes/kubelet.yaml <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
staticPodPath: /etc/kubernetes/manifests
protectKernelDefaults: true
makeIPTablesUtilChains: false
failSwapOn: false
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: ""
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
put /etc/systemd/system/kubelet.service <<EOF
[Unit]
Description=kubelet (real, k8s.io/kubernetes v1.23.17, dockershim)
After=docker.service kube-apiserver.service
Wants=docker.service
[Service]
ExecStart=/opt/k8s-v123/bin/kubelet --config=/etc/kubernetes/kubelet.yaml \\
  --kubeconfig=/etc/kubernetes/kubelet.kubeconfig --node-ip=$NODE_IP --hostname-override=$NODE \\
  --container-runtime=docker --pod-infra-container-image=$PAUSE_IMAGE \\
  --network-plugin=cni --cni-bin-dir=/usr/lib/cni --cni-conf-dir=/etc/cni/net.d
Restart=always
RestartSec=2
EOF
put /etc/kubernetes/manifests/static-sleeper.yaml <<EOF
apiVersion: v1
kind: Pod
metadata: {name: static-sleeper, namespace: default}
spec:
  containers:
  - name: sleep
    image: $POD_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sleep", "2147483647"]
EOF

# --- start: control plane, dockerd, images, kubelet, pleg-guard ---------------------------------
in_bed systemctl daemon-reload
in_bed systemctl stop kubelet.service # the rootfs's stand-in
in_bed systemctl start etcd.service kube-apiserver.service docker.service \
    || { in_bed journalctl -u docker -n 40 --no-pager >&2; die "etcd, kube-apiserver or dockerd did not start"; }
for _ in $(seq 300); do
    in_bed docker version >/dev/null 2>&1 && break
    sleep 0.2
done
docker save "$POD_IMAGE" "$PAUSE_IMAGE" | in_bed docker load >/dev/null || die "docker load in the bed failed"
log "dockerd $(in_bed docker version -f '{{.Server.Version}}') up, $POD_IMAGE and $PAUSE_IMAGE loaded"

HOST_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
setsid socat "TCP-LISTEN:$HOST_PORT,bind=127.0.0.1,reuseaddr,fork" \
    "EXEC:nsenter -t $BED_PID -n socat STDIO TCP\\:$NODE_IP\\:$API_PORT" </dev/null >/dev/null 2>&1 &
SOCAT_PID=$!
echo "$SOCAT_PID" >"$STATE/socat.pid"
KUBECONFIG_PATH=$STATE/kubeconfig
kubeconfig "https://127.0.0.1:$HOST_PORT" >"$KUBECONFIG_PATH"
api() { # METHOD PATH [BODY]
    curl -sSk --max-time 10 -X "$1" -H "Authorization: Bearer $TOKEN" \
        -H 'Content-Type: application/json' "https://127.0.0.1:$HOST_PORT$2" ${3:+--data "$3"}
}
for _ in $(seq 600); do
    [ "$(api GET /readyz 2>/dev/null)" = ok ] && break
    sleep 0.2
done
[ "$(api GET /readyz)" = ok ] || { in_bed journalctl -u kube-apiserver -n 40 --no-pager >&2; die "kube-apiserver not ready"; }
log "kube-apiserver ready"

host_sysctls
in_bed systemctl start kubelet.service
ready() {
    api GET "/api/v1/nodes/$NODE" 2>/dev/null | python3 -c '
import json, sys
n = json.load(sys.stdin)
print(next((c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"), "none"))' 2>/dev/null
}
for _ in $(seq 180); do
    [ "$(ready)" = True ] && break
    sleep 1
done
if [ "$(ready)" != True ]; then
    in_bed journalctl -u kubelet -n 60 --no-pager >&2
    die "Node $NODE not Ready after 180 s"
fi
log "Node $NODE Ready"
api POST /api/v1/namespaces/default/pods "{
  \"apiVersion\": \"v1\", \"kind\": \"Pod\",
  \"metadata\": {\"name\": \"api-sleeper\"},
  \"spec\": {\"nodeName\": \"$NODE\", \"automountServiceAccountToken\": false,
    \"containers\": [{\"name\": \"sleep\", \"image\": \"$POD_IMAGE\", \"imagePullPolicy\": \"Never\",
      \"command\": [\"/bin/sleep\", \"2147483647\"]}]}}" >/dev/null
phase() { api GET "/api/v1/namespaces/default/pods/$1" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"].get("phase",""))' 2>/dev/null; }
for _ in $(seq 120); do
    [ "$(phase api-sleeper)" = Running ] && [ "$(phase "static-sleeper-$NODE")" = Running ] && break
    sleep 1
done
for p in api-sleeper "static-sleeper-$NODE"; do
    [ "$(phase "$p")" = Running ] || { in_bed journalctl -u kubelet -n 60 --no-pager >&2; die "pod $p not Running"; }
done
log "pods api-sleeper and static-sleeper-$NODE Running (dockershim)"

# pleg-guard joins the running node once kubelet's start-up line is out of its log window
kubelet_started=$(in_bed systemctl show -p ExecMainStartTimestamp --value kubelet.service)
wait_s=$(( 65 - ($(date +%s) - $(date -d "$kubelet_started" +%s)) ))
if [ "$wait_s" -gt 0 ]; then
    log "waiting ${wait_s} s: kubelet's start-up line out of pleg-guard's PLEG log window"
    sleep "$wait_s"
fi
in_bed dpkg -i /root/pleg-guard.deb >"$STATE/dpkg.log" 2>&1 || { cat "$STATE/dpkg.log" >&2; die "dpkg -i the .deb failed"; }
in_bed systemctl is-active --quiet pleg-guard.service || in_bed systemctl start pleg-guard.service
log "pleg-guard $(in_bed pleg-guard --version) installed from $(basename "$DEB")"

# (again: the previous bed's node-down.sh, finishing after its nspawn freed the lock, removes
# these files of the shared state directory; without them node-down.sh cannot find this bed)
echo "$NSPAWN_PID" >"$STATE/nspawn.pid"
echo "$BED_PID" >"$STATE/bed.pid"
echo "$SOCAT_PID" >"$STATE/socat.pid"
up=true
echo "KUBECONFIG=$KUBECONFIG_PATH"
echo "NODE=$NODE"
echo "BED_PID=$BED_PID"
echo "POD_IMAGE=$POD_IMAGE"
