#!/bin/bash
# Captures a real kubelet's own log lines from a running node bed (tests/k8s/node-up.sh) as
# fixtures for src/client/kubelet_log.rs: what kubelet prints at its start, and while its
# runtime is frozen past PLEG's 3-minute threshold (a real PLEG stall, not a stand-in line).
#
#   BED_PID=<from node-up.sh> tests/k8s/capture-kubelet-log.sh OUT_DIR [text|json] [FREEZE_S]
#
# text: kubelet's default (klog text with structured key/values); json: the same kubelet with
# `logging: {format: json}` in its config (as --logging-format=json), restored afterwards.
# Writes OUT_DIR/kubelet-<version>-<format>-start.log (its first 60 s after a restart) and
# OUT_DIR/kubelet-<version>-<format>-runtime-frozen.log (`journalctl -u kubelet -o cat` from the
# freeze to FREEZE_S seconds later, default 215: PLEG's threshold is 3m0s and the sync loop
# says so at most every 5 s). pleg-guard is stopped meanwhile (it would cure the stall) and
# started again; containerd is frozen with SIGSTOP on its main process only (the shims and the
# pods keep running, as in tests/real_node.rs's frozen-containerd scenario) and thawed.
set -euo pipefail
out=${1:?usage: BED_PID=... $0 OUT_DIR [text|json] [FREEZE_S]}
format=${2:-text}
freeze_s=${3:-215}
pid=${BED_PID:?BED_PID: the host pid of the bed PID 1, as node-up.sh printed it}
die() { echo "capture-kubelet-log: $*" >&2; exit 1; }
case "$format" in text | json) ;; *) die "format $format: text or json" ;; esac
[ "$(id -u)" = 0 ] || die "run as root"
in_bed() { nsenter -t "$pid" -a -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SYSTEMD_PAGER= "$@"; }
in_bed true || die "no bed at host pid $pid"
mkdir -p "$out"

version=$(in_bed /opt/k8s/bin/kubelet --version | awk '{print $2}') # Kubernetes v1.37.2
version=${version#v}
conf=/etc/kubernetes/kubelet.yaml
thawed=true
cleanup() {
    # never leave the bed's runtime frozen, its kubelet in json or pleg-guard stopped
    $thawed || in_bed sh -c 'kill -CONT "$(systemctl show -p MainPID --value containerd.service)"' || true
    if [ "$format" = json ]; then
        in_bed sed -i '/^# capture-kubelet-log$/,$d' "$conf" || true
        in_bed systemctl restart kubelet.service || true
    fi
    in_bed systemctl start pleg-guard.service || true
}
trap cleanup EXIT

in_bed systemctl stop pleg-guard.service
if [ "$format" = json ]; then
    in_bed sh -c "printf '%s\n' '# capture-kubelet-log' 'logging:' '  format: json' >>$conf"
fi
start=$(in_bed date '+%Y-%m-%d %H:%M:%S')
in_bed systemctl restart kubelet.service
sleep 60
in_bed journalctl -u kubelet.service -o cat --no-pager --since "$start" --until "$start 60 seconds" \
    >"$out/kubelet-$version-$format-start.log"
echo "$out/kubelet-$version-$format-start.log: $(wc -l <"$out/kubelet-$version-$format-start.log") lines"

main=$(in_bed systemctl show -p MainPID --value containerd.service)
[ "${main:-0}" -gt 0 ] || die "containerd.service has no main process"
freeze=$(in_bed date '+%Y-%m-%d %H:%M:%S')
thawed=false
in_bed kill -STOP "$main"
echo "containerd (bed pid $main) frozen at $freeze for $freeze_s s"
sleep "$freeze_s"
in_bed journalctl -u kubelet.service -o cat --no-pager --since "$freeze" \
    >"$out/kubelet-$version-$format-runtime-frozen.log"
in_bed kill -CONT "$main"
thawed=true
echo "$out/kubelet-$version-$format-runtime-frozen.log: $(wc -l <"$out/kubelet-$version-$format-runtime-frozen.log") lines," \
    "$(grep -c 'PLEG is not healthy' "$out/kubelet-$version-$format-runtime-frozen.log" || true) with PLEG"
