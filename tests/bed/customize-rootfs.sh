#!/bin/bash
# Customise a freshly debootstrapped Debian root filesystem into the pleg-guard test bed.
#
#   tests/bed/customize-rootfs.sh DIR
#
# Called by tests/bed/prepare.sh on a temporary directory. The bed rootfs is cached under a key
# that is a hash of THIS FILE, so any change here rebuilds the rootfs on the next prepare.sh run.
set -euo pipefail

DIR=${1:?usage: customize-rootfs.sh DIR}
[ -x "$DIR/lib/systemd/systemd" ] || { echo "customize-rootfs: $DIR has no systemd" >&2; exit 1; }
command -v busybox >/dev/null || true

# --- identity -------------------------------------------------------------------------------
echo pleg-guard-bed > "$DIR/etc/hostname"
# empty machine-id: systemd generates a transient one at boot (the rootfs stays read-only lower)
: > "$DIR/etc/machine-id"
rm -f "$DIR/var/lib/dbus/machine-id"

# --- logind: no watchdog ------------------------------------------------------------------------
# logind's WatchdogSec=3min would make systemd restart a SIGSTOPped logind and end a simulated
# hang early; tests decide when a hang ends.
mkdir -p "$DIR/etc/systemd/system/systemd-logind.service.d"
cat > "$DIR/etc/systemd/system/systemd-logind.service.d/50-pleg-guard-bed.conf" <<'UNIT'
[Service]
WatchdogSec=0
UNIT

# --- mask what slows boot or makes no sense in a container -------------------------------------
# (systemd-journald, dbus and systemd-logind are kept.)
for u in \
    console-getty.service container-getty@.service getty@.service serial-getty@.service \
    getty.target getty-static.service \
    apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service \
    dpkg-db-backup.timer dpkg-db-backup.service \
    e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer \
    systemd-networkd-wait-online.service systemd-timesyncd.service \
    systemd-firstboot.service systemd-hwdb-update.service \
    systemd-journal-flush.service \
    remote-fs.target cryptsetup.target \
    sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount \
    sys-fs-fuse-connections.mount dev-hugepages.mount dev-mqueue.mount
do
    ln -sfn /dev/null "$DIR/etc/systemd/system/$u"
done
# keep the journal in memory: fast, and nothing of a bed outlives it anyway
mkdir -p "$DIR/etc/systemd/journald.conf.d"
cat > "$DIR/etc/systemd/journald.conf.d/50-pleg-guard-bed.conf" <<'CONF'
[Journal]
Storage=volatile
RateLimitBurst=0
CONF
rm -rf "$DIR/var/log/journal"

# no root login needed: tests enter with nsenter. Lock the password anyway.
sed -i 's|^root:[^:]*:|root:*:|' "$DIR/etc/shadow"

# --- the stand-in kubelet -----------------------------------------------------------------------
mkdir -p "$DIR/usr/local/lib/standin-kubelet"
cat > "$DIR/usr/local/lib/standin-kubelet/standin-kubelet.sh" <<'SCRIPT'
#!/bin/bash
# STAND-IN KUBELET for the pleg-guard test bed. This is NOT the kubelet: no kubelet binary can be
# had on the machines that run these tests. It imitates only what pleg-guard looks at:
#   * GET http://127.0.0.1:10248/healthz answers "ok" (busybox httpd serving a static file);
#   * kubelet-like klog startup lines on stdout (the journal of kubelet.service);
#   * while /run/standin-kubelet/wedged exists: every 2 s the real kubelet's PLEG line, in both
#     historical formats alternately, with an "ago" growing from 3m0s since the wedge began;
#   * while /run/standin-kubelet/healthz-down exists: /healthz answers 404;
#   * a (re)start clears both flags: restarting the kubelet is the cure.
set -u
RUN=/run/standin-kubelet
WWW=$RUN/www
mkdir -p "$WWW"
rm -f "$RUN/wedged" "$RUN/healthz-down"
echo ok > "$WWW/healthz"

klog() { # LEVEL FILE:LINE MESSAGE...
    local lvl=$1 src=$2; shift 2
    printf '%s%s %7d %s] %s\n' "$lvl" "$(date -u '+%m%d %H:%M:%S.%6N')" "$$" "$src" "$*"
}
godur() { # nanoseconds -> Go time.Duration string, e.g. 3m45.252087921s
    local ns=$1 h m s frac out=""
    h=$((ns / 3600000000000)); ns=$((ns % 3600000000000))
    m=$((ns / 60000000000));   ns=$((ns % 60000000000))
    s=$((ns / 1000000000));    frac=$((ns % 1000000000))
    [ "$h" -gt 0 ] && out="${h}h"
    [ "$h" -gt 0 ] || [ "$m" -gt 0 ] && out="${out}${m}m"
    if [ "$frac" -eq 0 ]; then out="${out}${s}s"
    else frac=$(printf '%09d' "$frac"); frac=${frac%%+(0)}; out="${out}${s}.${frac}s"; fi
    echo "$out"
}
shopt -s extglob

klog I server.go:467 '"Kubelet version" kubeletVersion="v1.28.0-standin"'
klog I server.go:469 '"Golang settings" GOGC="" GOMAXPROCS="" GOTRACEBACK=""'
busybox httpd -f -p 127.0.0.1:10248 -h "$WWW" &
HTTPD=$!
trap 'kill $HTTPD 2>/dev/null; exit 0' TERM INT
klog I server.go:1289 '"Started kubelet"'
klog I kubelet.go:2303 '"Starting kubelet main sync loop"'
klog I healthz.go:83 '"Starting healthz server" healthzBindAddress="127.0.0.1" healthzPort=10248'

n=0
while :; do
    if ! kill -0 "$HTTPD" 2>/dev/null; then
        klog E server.go:179 '"Failed to start healthz server" err="httpd exited"'; exit 1
    fi
    if [ -e "$RUN/healthz-down" ]; then rm -f "$WWW/healthz"
    else [ -e "$WWW/healthz" ] || echo ok > "$WWW/healthz"; fi
    if [ -e "$RUN/wedged" ]; then
        [ -e "$RUN/wedged-since" ] || date +%s%N > "$RUN/wedged-since"
        since=$(cat "$RUN/wedged-since"); now=$(date +%s%N)
        ago=$(godur $((180000000000 + now - since)))
        if [ $((n % 2)) -eq 0 ]; then
            klog I kubelet.go:2412 "\"Skipping pod synchronization\" err=\"[PLEG is not healthy: pleg was last seen active ${ago} ago; threshold is 3m0s]\""
        else
            klog I kubelet.go:1829 "skipping pod synchronization - [PLEG is not healthy: pleg was last seen active ${ago} ago; threshold is 3m0s]"
        fi
        n=$((n + 1))
    else
        rm -f "$RUN/wedged-since"
    fi
    sleep 2 & wait $!
done
SCRIPT
chmod 755 "$DIR/usr/local/lib/standin-kubelet/standin-kubelet.sh"

cat > "$DIR/etc/systemd/system/kubelet.service" <<'UNIT'
# STAND-IN kubelet for the pleg-guard test bed (no kubelet binary can be had here):
# see /usr/local/lib/standin-kubelet/standin-kubelet.sh
[Unit]
Description=kubelet: The Kubernetes Node Agent (pleg-guard test bed stand-in)

[Service]
Type=simple
ExecStart=/usr/local/lib/standin-kubelet/standin-kubelet.sh
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
UNIT
ln -sfn /etc/systemd/system/kubelet.service "$DIR/etc/systemd/system/multi-user.target.wants/kubelet.service"

# --- stand-in for "systemd's bus bug that daemon-reexec cures" ------------------------------------
mkdir -p "$DIR/usr/local/lib/pleg-guard-bed"
cat > "$DIR/usr/local/lib/pleg-guard-bed/resume-logind-on-reexec.sh" <<'SCRIPT'
#!/bin/bash
# pleg-guard test bed: stand-in for the systemd bus bug that `systemctl daemon-reexec` cures.
# Waits until PID 1 logs one more "Reexecuting." than BASELINE, then SIGCONTs systemd-logind.
#   resume-logind-on-reexec.sh BASELINE   (BASELINE = count of such lines before the fault)
set -u
base=${1:?usage: resume-logind-on-reexec.sh BASELINE}
count() { journalctl --no-pager _PID=1 -o cat 2>/dev/null | grep -c '^Reexecuting\.$'; }
echo "waiting for PID 1 to reexecute (baseline $base)"
while [ "$(count)" -le "$base" ]; do sleep 0.2; done
# right after the reexec PID 1 may not answer yet: retry for up to 30 s
pid=""
for _ in $(seq 1 150); do
    pid=$(systemctl show -p MainPID --value systemd-logind.service 2>/dev/null || true)
    [[ $pid =~ ^[1-9][0-9]*$ ]] && break
    sleep 0.2
done
[[ $pid =~ ^[1-9][0-9]*$ ]] || { echo "cannot find systemd-logind's MainPID" >&2; exit 1; }
echo "PID 1 reexecuted: resuming systemd-logind (pid $pid)"
kill -CONT "$pid"
SCRIPT
chmod 755 "$DIR/usr/local/lib/pleg-guard-bed/resume-logind-on-reexec.sh"

echo "customize-rootfs: done"
