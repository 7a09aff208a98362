# pleg-guard %preun ($1: 0 = erase, 1 or more = upgrade). Equivalent of %systemd_preun.
if [ "$1" -eq 0 ]; then
    if [ -d /run/systemd/system ]; then
        systemctl --no-reload disable --now pleg-guard.service >/dev/null 2>&1 || :
    else
        systemctl --no-reload disable pleg-guard.service >/dev/null 2>&1 || :
    fi
    # the allow-list link %post made (an admin's own file of that name stays)
    if [ -x /usr/lib/pleg-guard/syscall-allowlist ]; then
        /usr/lib/pleg-guard/syscall-allowlist remove || :
    fi
fi
exit 0
