#!/bin/bash
# Build the release binary for old distributions and generate what the packages ship beside it
# into target/assets/: the man page pleg-guard(8) (gzipped) and the bash/zsh completions, all
# from the clap definitions (`pleg-guard generate man|bash|zsh`). Used by build-deb.sh and
# build-rpm.sh.
#
# The binary is built with cargo-zigbuild against glibc 2.17 (RHEL/CentOS 7, Amazon Linux 2;
# packaging/zig-toolchain.sh installs the tools) into target/<host triple>/release/pleg-guard,
# and checked: no symbol version above GLIBC_2.17. Prints that path as its last line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for f in README.md LICENSE packaging/config.toml systemd/pleg-guard.service systemd/pleg-guard.catalog; do
    [ -f "$f" ] || { echo "gen-assets: $f is missing" >&2; exit 1; }
done

GLIBC=2.17
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
case "$TRIPLE" in
    *-linux-gnu) ;;
    *) echo "gen-assets: host $TRIPLE is not a *-linux-gnu target" >&2; exit 1 ;;
esac
ZIGBIN=$(packaging/zig-toolchain.sh)
PATH="$ZIGBIN:$PATH" cargo zigbuild --release --locked --bin pleg-guard --target "$TRIPLE.$GLIBC" >&2
BIN=${CARGO_TARGET_DIR:-target}/$TRIPLE/release/pleg-guard
[ -x "$BIN" ] || { echo "gen-assets: $BIN not built" >&2; exit 1; }
if command -v objdump >/dev/null; then
    top=$(objdump -T "$BIN" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
    if [ "$(printf '%s\n%s\n' "$top" "$GLIBC" | sort -V | tail -n 1)" != "$GLIBC" ]; then
        echo "gen-assets: $BIN needs GLIBC_$top, more than $GLIBC" >&2; exit 1
    fi
fi

mkdir -p target/assets
"$BIN" generate man | gzip -9n > target/assets/pleg-guard.8.gz.tmp
"$BIN" generate bash > target/assets/pleg-guard.bash.tmp
"$BIN" generate zsh > target/assets/_pleg-guard.tmp
for f in pleg-guard.8.gz pleg-guard.bash _pleg-guard; do
    [ -s "target/assets/$f.tmp" ] || { echo "gen-assets: pleg-guard generate wrote nothing for $f" >&2; exit 1; }
    mv -f "target/assets/$f.tmp" "target/assets/$f"
done
echo "gen-assets: $BIN, target/assets/{pleg-guard.8.gz,pleg-guard.bash,_pleg-guard}" >&2
echo "$BIN"
