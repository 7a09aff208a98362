# pleg-guard %postun ($1: 0 = erase, 1 or more = upgrade).
# Equivalent of %systemd_postun_with_restart; /var/lib/pleg-guard (the action ledger) is kept
# on erase, as rpm keeps state: remove it by hand if the node will not run pleg-guard again.
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -ge 1 ]; then
    # upgrade: restart the running daemon on the new binary, leave a stopped one stopped
    if [ -d /run/systemd/system ]; then
        systemctl try-restart pleg-guard.service >/dev/null 2>&1 || :
    fi
else
    rm -rf /run/pleg-guard
    # the metrics of a removed pleg-guard would only go stale (and alert) in node_exporter
    rm -f /var/lib/prometheus/node-exporter/pleg-guard.prom
    rmdir /etc/pleg-guard/config.d 2>/dev/null || :
    rmdir /etc/pleg-guard 2>/dev/null || :
    if command -v journalctl >/dev/null 2>&1; then
        journalctl --update-catalog >/dev/null 2>&1 || :
    fi
fi
exit 0
