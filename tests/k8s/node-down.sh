#!/bin/bash
# Removes the node bed that tests/k8s/node-up.sh booted: powers its systemd off (so PID 1 stops
# the pods' scopes and removes its cgroups), kills what is left, stops the API server's loopback
# forwarder, restores the host sysctls node-up.sh set for kubelet, and deletes the runtime's root.
# Idempotent: nothing up is not an error.   tests/k8s/node-down.sh [--quiet]
set -uo pipefail
STATE=/run/pleg-guard-test-node
HOST_DATA=/var/lib/pleg-guard-test-node
quiet=false
[ "${1:-}" = --quiet ] && quiet=true
say() { $quiet || printf 'node-down: %s\n' "$*" >&2; }

# The teardown runs under its own lock from first to last step. The bed's lock
# (/run/pleg-guard-test-node.lock, held by its nspawn) frees when the bed powers off, before the
# sysctls are restored and containerd's root is deleted here; the next node-up.sh, waiting on
# it, takes this lock too before it touches anything, so it never sees this teardown's second
# half: once it deleted the new bed's containerd root ("ctr images import failed: mkdir
# /var/lib/containerd/...: no such file") and its pid files, so the new bed was never removed
# and held the lock for good.
exec 8>"/run/pleg-guard-test-node.teardown.lock"
flock -w 300 8 || say "another teardown held its lock for 5 min; going on"

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
nspawn=$(cat "$STATE/nspawn.pid" 2>/dev/null || true)
bed=$(cat "$STATE/bed.pid" 2>/dev/null || true)
socat=$(cat "$STATE/socat.pid" 2>/dev/null || true)

# only pids that still are what we started
[ -n "$nspawn" ] && ! grep -q systemd-nspawn "/proc/$nspawn/cmdline" 2>/dev/null && nspawn=
[ -n "$socat" ] && ! grep -q socat "/proc/$socat/cmdline" 2>/dev/null && socat=
if alive "$socat"; then kill "$socat" 2>/dev/null; fi

if alive "$nspawn"; then
    # resume anything a test stopped, then a clean poweroff (SIGRTMIN+4 to the bed's systemd)
    if alive "$bed"; then
        for p in $(nsenter -t "$bed" -p -m -- ps -eo pid=,stat= 2>/dev/null | awk '$2 ~ /^T/{print $1}'); do
            nsenter -t "$bed" -p -m -- kill -CONT "$p" 2>/dev/null
        done
        kill -s RTMIN+4 "$bed" 2>/dev/null
    fi
    for _ in $(seq 300); do alive "$nspawn" || break; sleep 0.1; done
    if alive "$nspawn"; then
        say "the bed did not power off within 30 s: killing it"
        alive "$bed" && kill -KILL "$bed" 2>/dev/null
        for _ in $(seq 100); do alive "$nspawn" || break; sleep 0.1; done
        alive "$nspawn" && kill -KILL "$nspawn" 2>/dev/null
    fi
    say "node bed removed"
fi

if [ -f "$STATE/sysctl.restore" ]; then
    while IFS= read -r kv; do
        [ -n "$kv" ] && sysctl -q -w "$kv"
    done <"$STATE/sysctl.restore"
    rm -f "$STATE/sysctl.restore"
fi
rm -rf "$HOST_DATA/containerd" "$HOST_DATA/docker"
rm -f "$STATE/nspawn.pid" "$STATE/bed.pid" "$STATE/socat.pid"
exit 0
