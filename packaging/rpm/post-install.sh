# pleg-guard %post ($1: 1 = first install, 2 or more = upgrade).
# cargo-generate-rpm has no %systemd_post; this is its equivalent, tolerant of an image build
# in a chroot where systemd does not run (enablement works offline, start/restart do not).
# Drop-ins merged over config.toml in name order (cargo-generate-rpm cannot package an empty
# directory, so it is made here and removed on erase when still empty).
mkdir -p /etc/pleg-guard/config.d
if command -v journalctl >/dev/null 2>&1; then
    journalctl --update-catalog >/dev/null 2>&1 || :
fi
# The state directory, for systemd versions without StateDirectory= (219 on EL7 and AL2).
mkdir -p /var/lib/pleg-guard
chmod 0755 /var/lib/pleg-guard
# The @system-service allow-list drop-in, linked only where systemd knows it (>= 239: EL8+).
if [ -x /usr/lib/pleg-guard/syscall-allowlist ]; then
    /usr/lib/pleg-guard/syscall-allowlist apply || :
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 1 ]; then
    # first install: enabled through 80-pleg-guard.preset (an admin preset can say otherwise)
    systemctl --no-reload preset pleg-guard.service >/dev/null 2>&1 || :
    if [ -d /run/systemd/system ] && systemctl --quiet is-enabled pleg-guard.service 2>/dev/null; then
        systemctl start pleg-guard.service >/dev/null 2>&1 || :
    fi
fi
exit 0
