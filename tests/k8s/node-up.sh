#!/bin/bash
# Boots a real single-node Kubernetes cluster in a systemd-nspawn bed, for the real-node tests
# (tests/real_node.rs) and for trying pleg-guard by hand (docs/real-node.md):
#
#   tests/k8s/node-up.sh [--affected] [--kubelet 1.37|1.34] [--dockershim]
#   ... then tests/k8s/node-down.sh
#
# Inside one booted Debian 12 bed (its own PID 1, journal and network namespace), each a systemd
# unit of that bed: etcd, kube-apiserver, kube-controller-manager (its node lifecycle controller
# only), containerd + runc (systemd cgroup driver: runc asks the bed's PID 1 over D-Bus), kubelet
# (kubelet.service: so pleg-guard's restart-kubelet goes through the bed's PID 1 and kubelet's
# log lands in the bed's journal), node-problem-detector with pleg-guard's shipped monitor
# config, and pleg-guard itself installed from the project's .deb ($PLEG_GUARD_DEB, else the
# newest target/**/pleg-guard_*.deb, else packaging/build-deb.sh) with its default
# configuration. A static pod and an API-created pod run on the node.
# --kubelet 1.37 (PLEG_GUARD_NODE_KUBELET=1.37): kubelet, kube-apiserver, kube-controller-manager
# v1.37.2 on containerd 2.3 (config version 3) and runc 1.5, all built from their pinned modules
# (tests/k8s/build.sh), with crictl 1.37 in the bed; a supported Kubernetes. --kubelet 1.34: the
# cgroup-v1-era node, kubelet v1.34.12 (tests/k8s/build-v134.sh) on Debian bookworm's containerd
# 1.6.20 and runc, as every real-node claim before kubelet 1.37 was shown. Both set
# failCgroupV1: false (this host is cgroup v1; kubelet >= 1.35 refuses it otherwise).
# PLEG_GUARD_NODE_KUBELET_WATCHDOG=<WatchdogSec> (1.37 only): kubelet.service with that
# WatchdogSec=, so kubelet's own systemd watchdog (1.35+) is armed.
# --affected: the bed's PID 1 runs the sd-bus of systemd before v242 (systemd#11809), as in the
# affected beds of tests/bed/README.md.
# --dockershim: the seeds' era: kubelet v1.23.17 (tests/k8s/build-v123.sh) with dockershim
# against dockerd 20.10 (Debian bookworm's docker.io, in a bed rootfs derived once from the
# bookworm one and cached as /var/cache/pleg-guard-test/bed-bookworm-docker-<key>), instead of
# kubelet 1.34 on containerd's CRI; the same 1.34 control plane (kube-apiserver 1.23 does not
# build from its module). tests/k8s/node-up-dockershim.sh is this with --dockershim.
#
# Waits until the Node is Ready and both pods Running, then prints as its LAST lines:
#   KUBECONFIG=<host path>  (token auth, reaches the API server through a loopback port)
#   NODE=<node name>
#   BED_PID=<host pid of the bed's PID 1>   (nsenter -t $BED_PID -a reaches the bed)
#   POD_IMAGE=<image in the node's containerd that has sleep>
#
# Only one node bed runs at a time (beds share the host's cgroup paths): a second node-up waits
# for the first to be removed (lock /run/pleg-guard-test-node.lock, held by the bed's nspawn).
# kubelet writes no sysctl itself (protectKernelDefaults): the three host values it insists on
# (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1) are set here and restored by
# node-down.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

affected=false dockershim=false
# the default node's kubelet minor (the contract's default node: docs/real-node.md)
kubelet=${PLEG_GUARD_NODE_KUBELET:-1.34}
while [ $# -gt 0 ]; do
    case "$1" in
        --affected) affected=true ;;
        --dockershim) dockershim=true ;;
        --kubelet) [ $# -ge 2 ] || { echo "node-up: --kubelet needs a version (1.37 or 1.34)" >&2; exit 2; }
            kubelet=$2; shift ;;
        --kubelet=*) kubelet=${1#--kubelet=} ;;
        -h | --help) sed -n '2,42p' "$0"; exit 0 ;;
        *) echo "node-up: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
case "$kubelet" in
    1.37 | 1.34) ;;
    *) echo "node-up: --kubelet $kubelet: this bed has kubelet 1.37 or 1.34 (--dockershim: 1.23)" >&2; exit 2 ;;
esac
# the dockershim node keeps the 1.34 control plane it was shown with (kube-apiserver 1.23 does
# not build from its module)
$dockershim && kubelet=1.34
[ "$(id -u)" = 0 ] || { echo "node-up: run as root" >&2; exit 2; }

NODE=pleg-guard-node
STATE=/run/pleg-guard-test-node
NODE_IP=10.255.0.1
API_PORT=6443
TOKEN_FILE_NAME=admin.token
LOCK=/run/pleg-guard-test-node.lock
# the runtime's root: a host ext4 dir (overlayfs, or docker's overlay2, on the bed's overlay root fails)
HOST_DATA=/var/lib/pleg-guard-test-node
CACHE=/var/cache/pleg-guard-test
if $dockershim; then
    RUNTIME=docker POD_IMAGE=pleg-guard-test/busybox:latest PAUSE_IMAGE=pleg-guard-test/pause:latest
else
    RUNTIME=containerd
    POD_IMAGE=docker.io/pleg-guard-test/busybox:latest PAUSE_IMAGE=docker.io/pleg-guard-test/pause:latest
fi
log() { printf 'node-up: %s (%ds)\n' "$*" "$SECONDS" >&2; }
die() { printf 'node-up: %s\n' "$*" >&2; exit 1; }

# --- prerequisites: the bed rootfs, the real components, the .deb ------------------------------
prep=$("$repo/tests/bed/prepare.sh" 2>&1) || { echo "$prep" >&2; die "tests/bed/prepare.sh failed"; }
ROOTFS=$(sed -n 's/^ROOTFS=//p' <<<"$prep" | tail -n 1)
AFFECTED_LIB=$(sed -n 's/^AFFECTED_LIBSYSTEMD=//p' <<<"$prep" | tail -n 1)
[ -x "$ROOTFS/lib/systemd/systemd" ] || die "no bed rootfs (prepare.sh printed ROOTFS=$ROOTFS)"
if $affected && [ ! -f "$AFFECTED_LIB" ]; then
    die "--affected: prepare.sh made no affected libsystemd (AFFECTED_LIBSYSTEMD=$AFFECTED_LIB)"
fi
if [ "$kubelet" = 1.37 ]; then build=build.sh; else build=build-v134.sh; fi
K8S_BIN=$("$here/$build" | sed -n 's/^K8S_BIN=//p' | tail -n 1)
[ -x "$K8S_BIN/kubelet" ] || die "tests/k8s/$build built no kubelet"
if $dockershim; then
    V123_BIN=$("$here/build-v123.sh" | sed -n 's/^K8S_BIN=//p' | tail -n 1)
    [ -x "$V123_BIN/kubelet" ] || die "tests/k8s/build-v123.sh built no kubelet"
fi
DEB=${PLEG_GUARD_DEB:-}
if [ -z "$DEB" ]; then
    DEB=$(ls -t "$repo"/target/ci-packages/pleg-guard_*.deb "$repo"/target/debian/pleg-guard_*.deb 2>/dev/null | head -n 1 || true)
fi
if [ -z "$DEB" ]; then
    log "no .deb given (PLEG_GUARD_DEB) or built: packaging/build-deb.sh"
    DEB=$("$repo/packaging/build-deb.sh" | tail -n 1)
fi
[ -f "$DEB" ] || die "no pleg-guard .deb at '$DEB'"
# the runtime the bed binds in at the same paths as Debian's: 1.37 runs the built containerd 2.x
# and runc (and crictl), 1.34 the host's Debian ones; the dockershim bed its rootfs's own
runtime_bins=(/usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr /usr/sbin/runc)
if [ "$kubelet" = 1.37 ]; then
    runtime_binds=("--bind-ro=$K8S_BIN/containerd:/usr/bin/containerd"
        "--bind-ro=$K8S_BIN/containerd-shim-runc-v2:/usr/bin/containerd-shim-runc-v2"
        "--bind-ro=$K8S_BIN/ctr:/usr/bin/ctr" "--bind-ro=$K8S_BIN/runc:/usr/sbin/runc"
        "--bind-ro=$K8S_BIN/crictl:/usr/bin/crictl")
    for b in containerd containerd-shim-runc-v2 ctr runc crictl; do
        [ -x "$K8S_BIN/$b" ] || die "tests/k8s/$build built no $b"
    done
    runtime_bins=()
else
    runtime_binds=()
    for b in "${runtime_bins[@]}"; do runtime_binds+=("--bind-ro=$b"); done
fi
for b in "${runtime_bins[@]}" \
    /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/bin/socat /usr/bin/curl; do
    [ -x "$b" ] || die "$b missing (Debian packages containerd runc containernetworking-plugins socat curl)"
done
docker image inspect pleg-guard-test/busybox:latest pleg-guard-test/pause:latest >/dev/null \
    || die "the test images are missing from the host's docker (tests/bed/prepare.sh makes them)"

# --dockershim: the docker bed rootfs, bookworm's bed rootfs + docker.io (dockerd 20.10, its
# containerd, runc) + iproute2 (dockershim reads a pod's IP with `nsenter ... ip`); docker not
# started at boot
if $dockershim; then
    ROOTFS_RECIPE='apt-get install -y -qq --no-install-recommends docker.io iproute2'
    key=$( { echo "$ROOTFS"; echo "$ROOTFS_RECIPE"; } | sha256sum | cut -c1-16)
    DOCKER_ROOTFS=$CACHE/bed-bookworm-docker-$key
    if [ ! -e "$DOCKER_ROOTFS/.pleg-guard-bed-complete" ]; then
        exec 8>"$CACHE/.build-bookworm-docker.lock"
        flock -w 600 8 || die "another run holds $CACHE/.build-bookworm-docker.lock"
        if [ ! -e "$DOCKER_ROOTFS/.pleg-guard-bed-complete" ]; then
            log "deriving the docker bed rootfs from $ROOTFS (about 30 s)"
            tmp=$(mktemp -d "$CACHE/.build-bookworm-docker-XXXXXX")
            cp -a "$ROOTFS/." "$tmp/"
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
            rm -rf "$DOCKER_ROOTFS"
            mv -T "$tmp" "$DOCKER_ROOTFS"
            for old in "$CACHE"/bed-bookworm-docker-*; do
                [ "$old" != "$DOCKER_ROOTFS" ] && [ -d "$old" ] && rm -rf "$old"
            done
        fi
        exec 8>&-
    fi
    ROOTFS=$DOCKER_ROOTFS
fi

# --- one node bed at a time ----------------------------------------------------------------------
exec 9>"$LOCK"
if ! flock -n 9; then
    log "another node bed is up; waiting for it to be removed (tests/k8s/node-down.sh)"
    flock -w 900 9 || die "another node bed held $LOCK for 15 min"
fi
# a teardown whose bed just freed the lock may still be restoring sysctls and deleting
# containerd's root: node-down.sh holds its own lock until it is done (it takes it again here)
"$here/node-down.sh" --quiet || true # leftovers of a killed run
mkdir -p "$STATE" "$HOST_DATA"
# a node-up that fails takes its half-made bed down again (and so frees the lock)
up=false
trap '$up || "$here/node-down.sh" --quiet' EXIT
rm -rf "$HOST_DATA/containerd" "$HOST_DATA/docker" "$STATE"/*
mkdir -p "$HOST_DATA/$RUNTIME"

# --- host sysctls kubelet insists on (restored by node-down.sh) ----------------------------------
: >"$STATE/sysctl.restore"
for kv in vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1 \
    kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000; do
    k=${kv%%=*} want=${kv#*=}
    have=$(sysctl -n "$k")
    if [ "$have" != "$want" ]; then
        echo "$k=$have" >>"$STATE/sysctl.restore"
        sysctl -q -w "$kv"
    fi
done

# --- the bed -------------------------------------------------------------------------------------
args=(-D "$ROOTFS" --volatile=overlay --boot --register=no --keep-unit --private-network
    "--machine=$NODE" "--hostname=$NODE"
    # runc brings up lo in each pod's network namespace
    --capability=CAP_NET_ADMIN
    # runc joins a session keyring for each container
    --system-call-filter=@keyring
    # kubelet's OOM watcher reads the kernel log: the device, and CAP_SYSLOG to open it
    # (kernel.dmesg_restrict; nspawn drops CAP_SYSLOG: "open /dev/kmsg: operation not permitted")
    --bind=/dev/kmsg --capability=CAP_SYSLOG
    "--bind=$HOST_DATA/$RUNTIME:/var/lib/$RUNTIME"
    "--bind-ro=$K8S_BIN:/opt/k8s/bin" --bind-ro=/usr/lib/cni
    "--bind-ro=$DEB:/root/pleg-guard.deb")
if $dockershim; then # the rootfs's own docker.io, containerd and runc
    args+=("--bind-ro=$V123_BIN:/opt/k8s-v123/bin")
else
    args+=("${runtime_binds[@]}")
fi
if $affected; then
    args+=("--bind-ro=$AFFECTED_LIB:/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so")
fi
SYSTEMD_LOG_COLOR=0 setsid systemd-nspawn "${args[@]}" </dev/null >"$STATE/console.log" 2>&1 &
NSPAWN_PID=$!
echo "$NSPAWN_PID" >"$STATE/nspawn.pid"
exec 9>&- # the bed's nspawn holds the lock now

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

# network: a dummy interface with the node's address and a default route, so kube-apiserver has
# an address to advertise and kubelet a node IP (a veth pair: the host may lack the dummy
# module; the host's ip, in the bed's netns only)
nsenter -t "$BED_PID" -n -- sh -ec "
    ip link add pgt0 type veth peer name pgt1; ip addr add $NODE_IP/24 dev pgt0
    ip link set pgt1 up; ip link set pgt0 up; ip link set lo up; ip route add default dev pgt0"

# --- files -----------------------------------------------------------------------------------
put() { # PATH (content on stdin)
    in_bed sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1"' sh "$1"
}
printf '127.0.0.1 localhost\n%s %s\n' "$NODE_IP" "$NODE" | put /etc/hosts # containerd copies it into each sandbox
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$TOKEN" >"$STATE/$TOKEN_FILE_NAME"
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
kubeconfig "https://$NODE_IP:$API_PORT" | put /etc/kubernetes/admin.kubeconfig

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
Description=kube-apiserver
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

# the node lifecycle controller alone (no taint-eviction-controller: the test pods are never
# evicted): it marks the Node's conditions Unknown when kubelet stops renewing its Lease for
# node-monitor-grace-period (50 s in 1.34), as on a real cluster
put /etc/systemd/system/kube-controller-manager.service <<EOF
[Unit]
Description=kube-controller-manager (node-lifecycle-controller)
After=kube-apiserver.service
Wants=kube-apiserver.service
[Service]
ExecStart=/opt/k8s/bin/kube-controller-manager --kubeconfig=/etc/kubernetes/admin.kubeconfig \\
  --controllers=node-lifecycle-controller --leader-elect=false --secure-port=0
Restart=always
RestartSec=1
EOF

# nspawn mounts the cgroup v1 controllers read-only; runc and kubelet create cgroups in them
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
Description=writable cgroup v1 controllers for the container runtime and kubelet
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
if $dockershim; then
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
    CNI_VERSION=0.4.0 # dockershim's CNI library (libcni 0.8) speaks CNI spec versions up to 0.4.0
else
if [ "$kubelet" = 1.37 ]; then
# containerd 2.x: config version 3, the CRI plugin split into its images and runtime plugins
put /etc/containerd/config.toml <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "$PAUSE_IMAGE"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = true
EOF
# upstream's containerd.service (containerd/containerd's own), so that a restart of the unit
# (pleg-guard's restart-containerd, through the bed's PID 1) stops containerd alone and the
# running containers' shims survive it (KillMode=process); without its OOMScoreAdjust=-999
# (the bed lacks CAP_SYS_RESOURCE: a negative value fails the unit) and modprobe (no modules)
put /etc/systemd/system/containerd.service <<'EOF'
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target dbus.service
[Service]
ExecStart=/usr/bin/containerd --config /etc/containerd/config.toml
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
[Install]
WantedBy=multi-user.target
EOF
printf '%s\n' 'runtime-endpoint: unix:///run/containerd/containerd.sock' \
    'image-endpoint: unix:///run/containerd/containerd.sock' 'timeout: 10' | put /etc/crictl.yaml
else
put /etc/containerd/config.toml <<EOF
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
EOF
put /etc/systemd/system/containerd.service <<'EOF'
[Unit]
Description=containerd
[Service]
ExecStart=/usr/bin/containerd --config /etc/containerd/config.toml
Type=notify
Delegate=yes
KillMode=process
Restart=always
LimitNOFILE=infinity
EOF
fi
    CNI_VERSION=1.0.0
fi
put /etc/cni/net.d/10-pleg-guard-node.conflist <<EOF
{
  "cniVersion": "$CNI_VERSION",
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
# (kubelet 1.23 knows neither containerRuntimeEndpoint nor failCgroupV1: the last two lines)
{ cat <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
staticPodPath: /etc/kubernetes/manifests
# kubelet must not write the host's sysctls through the bed (node-up.sh set the ones it checks)
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
# the host's disk is shared: never evict the test pods for it
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  $dockershim || printf '%s\n' 'containerRuntimeEndpoint: unix:///run/containerd/containerd.sock' 'failCgroupV1: false'
} | put /etc/kubernetes/kubelet.yaml
if $dockershim; then
    KUBELET="v1.23.17, dockershim"
    KUBELET_CMD="/opt/k8s-v123/bin/kubelet --container-runtime=docker --pod-infra-container-image=$PAUSE_IMAGE \\
  --network-plugin=cni --cni-bin-dir=/usr/lib/cni --cni-conf-dir=/etc/cni/net.d"
else
    KUBELET=v$kubelet KUBELET_CMD=/opt/k8s/bin/kubelet
fi
put /etc/systemd/system/kubelet.service <<EOF
[Unit]
Description=kubelet (real, k8s.io/kubernetes $KUBELET)
After=$RUNTIME.service kube-apiserver.service
Wants=$RUNTIME.service
[Service]
ExecStart=$KUBELET_CMD --config=/etc/kubernetes/kubelet.yaml \\
  --kubeconfig=/etc/kubernetes/kubelet.kubeconfig --node-ip=$NODE_IP --hostname-override=$NODE
Restart=always
RestartSec=2
EOF
# kubelet's own systemd watchdog (GA in 1.35, SystemdWatchdog): with WatchdogSec= on its unit,
# kubelet pings WATCHDOG=1 only while its /healthz checks pass and systemd restarts it
# otherwise; off unless asked for (PLEG_GUARD_NODE_KUBELET_WATCHDOG=20s, say)
if [ -n "${PLEG_GUARD_NODE_KUBELET_WATCHDOG:-}" ]; then
    [ "$kubelet" = 1.37 ] || die "PLEG_GUARD_NODE_KUBELET_WATCHDOG: kubelet $kubelet has no systemd watchdog (1.35+)"
    printf '[Service]\nWatchdogSec=%s\n' "$PLEG_GUARD_NODE_KUBELET_WATCHDOG" \
        | put /etc/systemd/system/kubelet.service.d/50-watchdog.conf
fi
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
kubeconfig "https://$NODE_IP:$API_PORT" | put /etc/kubernetes/npd.kubeconfig
put /etc/systemd/system/node-problem-detector.service <<EOF
[Unit]
Description=node-problem-detector with pleg-guard's monitor
After=kube-apiserver.service kubelet.service pleg-guard.service
[Service]
ExecStart=/opt/k8s/bin/node-problem-detector --hostname-override=$NODE \\
  --config.custom-plugin-monitor=/usr/share/pleg-guard/npd/pleg-guard-monitor.json \\
  --apiserver-override=https://$NODE_IP:$API_PORT?inClusterConfig=false&auth=/etc/kubernetes/npd.kubeconfig \\
  --enable-k8s-exporter=true
Restart=always
RestartSec=2
EOF

# --- start: control plane, runtime, images, pleg-guard, kubelet, NPD ------------------------------
in_bed systemctl daemon-reload
# the bed rootfs's stand-in kubelet started at boot: the real one replaced its unit
in_bed systemctl stop kubelet.service
in_bed systemctl start etcd.service kube-apiserver.service "$RUNTIME.service" \
    || { in_bed journalctl -u "$RUNTIME" -n 40 --no-pager >&2; die "etcd, kube-apiserver or $RUNTIME did not start"; }
if $dockershim; then
    for _ in $(seq 300); do
        in_bed docker version >/dev/null 2>&1 && break
        sleep 0.2
    done
    docker save "$POD_IMAGE" "$PAUSE_IMAGE" | in_bed docker load >/dev/null || die "docker load in the bed failed"
    log "dockerd $(in_bed docker version -f '{{.Server.Version}}') up, $POD_IMAGE and $PAUSE_IMAGE loaded"
else
    for _ in $(seq 300); do
        in_bed ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1 && break
        sleep 0.2
    done
    docker save pleg-guard-test/busybox:latest pleg-guard-test/pause:latest >"$STATE/images.tar"
    in_bed ctr --address /run/containerd/containerd.sock -n k8s.io images import - \
        <"$STATE/images.tar" >/dev/null || die "ctr images import failed"
    rm -f "$STATE/images.tar"
    log "containerd up, $POD_IMAGE and $PAUSE_IMAGE imported"
fi

# the API server, seen from the host through a loopback port into the bed's network namespace
HOST_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
setsid socat "TCP-LISTEN:$HOST_PORT,bind=127.0.0.1,reuseaddr,fork" \
    "EXEC:nsenter -t $BED_PID -n socat STDIO TCP\\:$NODE_IP\\:$API_PORT" </dev/null >/dev/null 2>&1 &
echo $! >"$STATE/socat.pid"
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
in_bed systemctl start kube-controller-manager.service

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
log "pods api-sleeper and static-sleeper-$NODE Running"

# pleg-guard joins a running node, as it is installed on one, once kubelet's start is more than
# its default kubelet.pleg_log_window (60 s) ago: at every start kubelet logs "PLEG is not
# healthy: pleg has yet to be successful" for about a second, which pleg-guard 0.1.0 takes for a
# PLEG stall and answers with a kubelet restart (docs/real-node.md)
kubelet_started=$(in_bed systemctl show -p ExecMainStartTimestamp --value kubelet.service)
wait_s=$(( 65 - ($(date +%s) - $(date -d "$kubelet_started" +%s)) ))
if [ "$wait_s" -gt 0 ]; then
    log "waiting ${wait_s} s: kubelet's start-up line out of pleg-guard's PLEG log window"
    sleep "$wait_s"
fi
in_bed dpkg -i /root/pleg-guard.deb >"$STATE/dpkg.log" 2>&1 || { cat "$STATE/dpkg.log" >&2; die "dpkg -i the .deb failed"; }
in_bed systemctl is-active --quiet pleg-guard.service || in_bed systemctl start pleg-guard.service
log "pleg-guard $(in_bed pleg-guard --version) installed from $(basename "$DEB")"
in_bed systemctl start node-problem-detector.service
for _ in $(seq 120); do
    n=$( { api GET "/api/v1/nodes/$NODE" 2>/dev/null | grep -o '"reason": *"\(SystemdBusOK\|PLEGOK\)"' || true; } | wc -l)
    [ "$n" -ge 2 ] && break
    sleep 1
done
[ "$n" -ge 2 ] || { in_bed journalctl -u node-problem-detector -n 40 --no-pager >&2; die "NPD put pleg-guard's conditions on no Node"; }
log "node-problem-detector reports pleg-guard's conditions on the Node"

up=true
echo "KUBECONFIG=$KUBECONFIG_PATH"
echo "NODE=$NODE"
echo "BED_PID=$BED_PID"
echo "POD_IMAGE=$POD_IMAGE"
