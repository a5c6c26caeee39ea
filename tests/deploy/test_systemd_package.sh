#!/bin/bash
# test_systemd_package.sh -- the unit the Debian package installs (made from
# deploy/delay-bridge.service by deploy/debian/package.cmake) is one systemd
# accepts, as hardened as the original, running as the package's user.
#
#   bash tests/deploy/test_systemd_package.sh BUILD/deb/delay-bridge.service BUILD/delay-bridge
#
# systemd-analyze verify (any output fails, as in test_systemd.sh) on a copy
# whose /usr/bin/delay-bridge is the built binary; security --offline
# exposure at most 2.5; User=/Group=delay-bridge, no DynamicUser, the same
# StateDirectory. Exit 0 pass, 1 fail, 77 skip (no systemd-analyze).
set -uo pipefail
UNIT=$1 BIN=$2
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not found"; exit 77; }
[ -f "$UNIT" ] || { echo "FAIL: $UNIT missing (configure with deploy/ present)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { printf 'FAIL: %s\n' "$*"; fails=$((fails + 1)); }
ok() { printf 'ok:   %s\n' "$*"; }

grep -qx 'ExecStart=/usr/bin/delay-bridge --config /etc/delay-bridge/config.json' "$UNIT" \
    || fail "ExecStart is not /usr/bin/delay-bridge --config /etc/delay-bridge/config.json"
grep -qx 'User=delay-bridge' "$UNIT" && grep -qx 'Group=delay-bridge' "$UNIT" \
    || fail "no User=/Group=delay-bridge"
! grep -q '^DynamicUser' "$UNIT" || fail "DynamicUser= still set (the package has a system user)"
grep -qx 'StateDirectory=delay-bridge' "$UNIT" || fail "StateDirectory=delay-bridge missing"
mkdir -p "$TMP/bin"
ln -s "$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")" "$TMP/bin/delay-bridge"
sed "s#/usr/bin/delay-bridge#$TMP/bin/delay-bridge#g" "$UNIT" >"$TMP/delay-bridge.service"
out=$(cd "$TMP" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no ./delay-bridge.service 2>&1)
rc=$?
# "User=delay-bridge" names a user this host may not have: systemd does not check it.
if [ $rc -ne 0 ] || [ -n "$out" ]; then
    fail "systemd-analyze verify (exit $rc): $out"
else
    ok "systemd-analyze verify: no complaints"
fi
exposure=$(cd "$TMP" && systemd-analyze security --offline=yes --no-pager ./delay-bridge.service 2>/dev/null |
           sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
if [ -z "$exposure" ]; then
    fail "systemd-analyze security --offline gave no exposure level"
elif awk -v e="$exposure" 'BEGIN { exit !(e <= 2.5) }'; then
    ok "exposure $exposure (<= 2.5)"
else
    fail "exposure $exposure above 2.5"
fi
[ $fails -eq 0 ] || exit 1
echo "PASS"
