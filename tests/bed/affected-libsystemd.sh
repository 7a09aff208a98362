#!/bin/bash
# Make (once) the AFFECTED copy of a bed rootfs's libsystemd-shared-252.so: sd-bus with the
# pre-v242 cookie behaviour of systemd#11809 (`++b->cookie` in bus_seal_message(), no wrap-around),
# so that a PID 1 that has sent 2^32 messages on the system bus can send nothing more there.
# Beds boot with it bind-mounted read-only over the original (BedOptions.affected_systemd).
#
#   affected-libsystemd.sh ROOTFS      (root; idempotent; ~0.1 s when cached)
#
# Last line printed: AFFECTED_LIBSYSTEMD=<path> (the cached copy), or AFFECTED_LIBSYSTEMD= when the
# rootfs has no libsystemd-shared-252.so (not a bookworm bed: nothing to do, exit 0).
#
# Two ways to the copy, never a silent fixed one:
#  1. byte patch (seconds): only for the exact build whose sha256 and bytes are known (bookworm's
#     252.39-1~deb12u2). At 0x1e738b sit `mov 0x58(%r15),%rsi` (b->cookie) and the wrap check
#     `mov $0xfffffffe,%eax; cmp %rsi,%rax; jb wrap; add $1,%rsi`; writing
#     `add $1,%rsi; jmp +0x1d` at 0x1e738f stores cookie+1 unconditionally and seals with it, so
#     sd_bus_message_seal() refuses every cookie above UINT32_MAX (-EOPNOTSUPP), as before v242.
#  2. any other build: source build from Debian's source package of the rootfs's systemd version
#     (apt-get source; revert the wrap-around in bus_seal_message(); build only
#     libsystemd-shared with Debian's configure step (debian/rules override_dh_auto_configure); compare the exported symbols with the
#     original). Takes long; under CI=true it is still done (never skipped), and any failure is an
#     error. PLEG_GUARD_TEST_FORCE_SOURCE_BUILD=1 takes this path even for the known build.
# Cache: /var/cache/pleg-guard-test/affected-libsystemd-<sha256 of original, 16>-<method key>.so
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=/var/cache/pleg-guard-test
LIBREL=usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so
# the known build (bookworm 252.39-1~deb12u2) and its patch
KNOWN_SHA256=53ad8900668016aae7347c5f46c1de9130bd555261c873b2fe454633724089e5
CHECK_OFFSET=$((0x1e738b))
CHECK_BYTES=498b7758b8feffffff4839f00f82c300000048 # + 83c601
CHECK_BYTES=${CHECK_BYTES}83c601
PATCH_OFFSET=$((0x1e738f))
PATCH_BYTES=4883c601eb1d
export DEBIAN_FRONTEND=noninteractive

die() { echo "affected-libsystemd.sh: ERROR: $*" >&2; exit 1; }
T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}'; }

[ $# = 1 ] || die "usage: $0 ROOTFS"
ROOTFS=$1
ORIG=$ROOTFS/$LIBREL
if [ ! -f "$ORIG" ]; then
    echo "affected-libsystemd: $ORIG does not exist (not a systemd 252 bed): no affected copy"
    echo "AFFECTED_LIBSYSTEMD="
    exit 0
fi
[ "$(id -u)" = 0 ] || die "must run as root"
mkdir -p "$CACHE"
sha=$(sha256sum "$ORIG" | cut -d' ' -f1)
hex_at() { od -An -v -tx1 -j "$1" -N "$2" "$3" | tr -d ' \n'; }

byte_patch_applies() {
    [ "${PLEG_GUARD_TEST_FORCE_SOURCE_BUILD:-0}" != 1 ] && [ "$sha" = "$KNOWN_SHA256" ] \
        && [ "$(hex_at $CHECK_OFFSET 22 "$ORIG")" = "$CHECK_BYTES" ]
}

if byte_patch_applies; then
    key=bytepatch-$(printf '%x:%s:%x:%s' $CHECK_OFFSET $CHECK_BYTES $PATCH_OFFSET $PATCH_BYTES | sha256sum | cut -c1-8)
else
    key=source-$( { sed -n '/^# --- source build/,$p' "$0"; } | sha256sum | cut -c1-8)
fi
OUT=$CACHE/affected-libsystemd-${sha:0:16}-$key.so
if [ -f "$OUT" ]; then
    echo "affected-libsystemd: cached $OUT ($(elapsed))"
    echo "AFFECTED_LIBSYSTEMD=$OUT"
    exit 0
fi
exec 7>"$CACHE/.affected-libsystemd.lock"
flock -w 3600 7 || die "another run holds $CACHE/.affected-libsystemd.lock"
if [ -f "$OUT" ]; then
    echo "affected-libsystemd: built meanwhile by another run: $OUT"
    echo "AFFECTED_LIBSYSTEMD=$OUT"
    exit 0
fi

if [[ $key == bytepatch-* ]]; then
    tmp=$(mktemp "$OUT.XXXXXX")
    cp "$ORIG" "$tmp"
    printf "$(echo "$PATCH_BYTES" | sed 's/../\\x&/g')" \
        | dd of="$tmp" bs=1 seek=$PATCH_OFFSET conv=notrunc status=none
    want=$(echo "$CHECK_BYTES" | sed "s/^\(.\{8\}\).\{12\}/\1$PATCH_BYTES/")
    got=$(hex_at $CHECK_OFFSET 22 "$tmp")
    [ "$got" = "$want" ] || { rm -f "$tmp"; die "patched bytes at 0x1e738b are $got, expected $want"; }
    # exactly 6 bytes differ
    ndiff=$( { cmp -l "$ORIG" "$tmp" || true; } | wc -l)
    [ "$ndiff" -le 6 ] && [ "$ndiff" -ge 1 ] || { rm -f "$tmp"; die "byte patch changed $ndiff bytes"; }
    chmod 0644 "$tmp"
    mv -f "$tmp" "$OUT"
    echo "affected-libsystemd: byte-patched $ORIG (sha256 ${sha:0:16}, 252.39-1~deb12u2): $ndiff bytes at 0x1e738f ($(elapsed))"
    echo "AFFECTED_LIBSYSTEMD=$OUT"
    exit 0
fi

# --- source build (any build other than the known one) ---------------------------------------------
echo "affected-libsystemd: $ORIG is not the known build (sha256 ${sha:0:16}); building an affected copy from Debian's source package"
version=$(awk '/^Package: systemd$/{p=1} p&&/^Version:/{print $2; exit}' "$ROOTFS/var/lib/dpkg/status")
[ -n "$version" ] || die "cannot read the systemd version of $ROOTFS"
work=$CACHE/affected-src-$version
log=$CACHE/affected-libsystemd-build.log
mkdir -p "$work"
echo "affected-libsystemd: systemd $version; log $log"
{
    # deb-src entries mirroring the host's deb ones (same URIs, suites and Signed-By: apt
    # refuses two entries for one source that disagree on Signed-By); removed again when apt
    # cannot use them, so the host's apt is never left broken
    srclist=""
    if ! grep -rqs '^deb-src\|^Types:.*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        if [ -f /etc/apt/sources.list.d/debian.sources ]; then
            srclist=/etc/apt/sources.list.d/pleg-guard-test-src.sources
            sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$srclist"
        elif [ -f /etc/apt/sources.list ]; then
            srclist=/etc/apt/sources.list.d/pleg-guard-test-src.list
            sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list >"$srclist"
        else
            echo "no /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list to derive deb-src from"
            false
        fi
        apt-get update -qq || { rm -f "$srclist"; false; }
    fi &&
    # (set -e does not apply inside a block whose status is tested: chain every step)
    apt-get update -qq &&
    apt-get install -y -qq --no-install-recommends dpkg-dev build-essential &&
    apt-get build-dep -y -qq "systemd=$version" &&
    cd "$work" &&
    { [ -d src ] || { apt-get source -qq "systemd=$version" && mv ./systemd-*/ src; }; }
} >"$log" 2>&1 || { tail -30 "$log" >&2; die "could not get systemd $version's source and build dependencies (log $log)"; }
cd "$work/src"
f=src/libsystemd/sd-bus/sd-bus.c
# v242's wrap-around: `r = next_cookie(b);` (or cookie_inc()) in bus_seal_message(); restore
# `++b->cookie` (what the byte patch does for the known build).
if ! grep -q 'pleg-guard-test: pre-v242 cookie' "$f"; then
    python3 - "$f" <<'PY' || die "cannot find the cookie wrap-around in bus_seal_message() of $f"
import re, sys
p = sys.argv[1]
s = open(p).read()
m = re.search(r'(static int bus_seal_message\(.*?\n}\n)', s, re.S)
assert m, "bus_seal_message not found"
body = m.group(1)
new, n = re.subn(r'\n(\s*)r = next_cookie\(b\);\n\s*if \(r < 0\)\n\s*return r;\n\n(\s*)return sd_bus_message_seal\(m, b->cookie, timeout\);',
                 r'\n\1/* pleg-guard-test: pre-v242 cookie (systemd#11809): no wrap-around */\n\2return sd_bus_message_seal(m, ++b->cookie, timeout);', body)
assert n == 1, "wrap-around call not found in bus_seal_message"
open(p, 'w').write(s.replace(body, new))
PY
fi
# Debian's own configuration: debian/rules' dh_auto_configure step (its meson options and
# dpkg-buildflags, build directory obj-<host triplet>), then only the one library.
builddir=obj-$(dpkg-architecture -qDEB_HOST_GNU_TYPE)
{
    # (run on its own, the step lacks the sequencer's `dh $@ --buildsystem=meson`: DH_OPTIONS)
    { [ -f "$builddir/build.ninja" ] || DH_OPTIONS=--buildsystem=meson debian/rules override_dh_auto_configure; } &&
    # ninja inside debian/rules' make environment: its link flags need the variables that
    # rules exports (package notes: DEB_SOURCE_PACKAGE_NAME, DEBUGINFOD_URLS, ...)
    printf 'pleg-guard-test-build:\n\tninja -C %s src/shared/libsystemd-shared-252.so\n' "$builddir" >"$work/build.mk" &&
    make -f debian/rules -f "$work/build.mk" pleg-guard-test-build
} >>"$log" 2>&1 || { tail -30 "$log" >&2; die "building libsystemd-shared failed (log $log)"; }
built=$builddir/src/shared/libsystemd-shared-252.so
[ -f "$built" ] || die "no libsystemd-shared-252.so in $work/src/$builddir"
syms() { nm -D --defined-only "$1" | awk '{print $NF}' | sort -u; }
if ! diff <(syms "$ORIG") <(syms "$built") >"$work/symbols.diff"; then
    die "exported symbols of the source build differ from the original (see $work/symbols.diff)"
fi
tmp=$(mktemp "$OUT.XXXXXX")
cp "$built" "$tmp"
strip --strip-unneeded "$tmp" 2>/dev/null || true
chmod 0644 "$tmp"
mv -f "$tmp" "$OUT"
echo "affected-libsystemd: built from source systemd $version ($(elapsed))"
echo "AFFECTED_LIBSYSTEMD=$OUT"
