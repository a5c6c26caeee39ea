#!/bin/bash
# test_systemd.sh -- deploy/delay-bridge.service is a unit systemd accepts,
# with the hardening and restart policy the README promises.
#
#   bash tests/deploy/test_systemd.sh [PATH/TO/delay-bridge]
#
# 1. `systemd-analyze verify` on a copy of the unit whose /usr/local/bin/
#    delay-bridge is replaced by a temp symlink to the built binary (verify
#    insists the ExecStart binary exists; nothing is installed). verify exits
#    0 even for an unknown directive or a bad value ("Unknown key ...,
#    ignoring"), so any output at all is a failure.
# 2. `systemd-analyze security --offline` exposure at most 2.5 ("OK").
# 3. The directives that matter are present with the right values.
# 4. TimeoutStopSec is longer than the largest shutdown_timeout_ms of the
#    shipped configs, and StateDirectory is the configs' wal.dir.
# Exit 0 pass, 1 fail, 77 skip (no systemd-analyze).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
UNIT=$ROOT/deploy/delay-bridge.service
BIN=${1:-}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

fails=0
fail() { printf 'FAIL: %s\n' "$*"; fails=$((fails + 1)); }
ok() { printf 'ok:   %s\n' "$*"; }

command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not found (apt-get install systemd)"; exit 77; }
[ -f "$UNIT" ] || { echo "FAIL: $UNIT missing"; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# --- 1. systemd-analyze verify ----------------------------------------------
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$UNIT" | head -n1)
if [ "$exec_path" != /usr/local/bin/delay-bridge ]; then
    fail "ExecStart= runs '$exec_path'; expected /usr/local/bin/delay-bridge (where the unit's install notes put it)"
fi
mkdir -p "$TMP/bin"
if [ -n "$BIN" ]; then
    [ -x "$BIN" ] || { echo "FAIL: $BIN is not an executable (build it: cmake --build build --target delay-bridge)"; exit 1; }
    ln -s "$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")" "$TMP/bin/delay-bridge"
else
    printf '#!/bin/sh\nexit 0\n' >"$TMP/bin/delay-bridge"   # verify only needs an executable
    chmod +x "$TMP/bin/delay-bridge"
fi
sed "s#/usr/local/bin/delay-bridge#$TMP/bin/delay-bridge#g" "$UNIT" >"$TMP/delay-bridge.service"
out=$(cd "$TMP" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no ./delay-bridge.service 2>&1)
rc=$?
# systemd reports lines of the copy; they are the same lines in the original.
out=${out//$TMP\//deploy\/}
out=${out//$TMP\/bin\/delay-bridge//usr/local/bin/delay-bridge}
if [ $rc -ne 0 ] || [ -n "$out" ]; then
    fail "systemd-analyze verify deploy/delay-bridge.service (exit $rc) reported:"
    printf '      %s\n' "$out"
else
    ok "systemd-analyze verify: no complaints"
fi

# --- 2. exposure score ------------------------------------------------------
if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
    sec=$(cd "$TMP" && systemd-analyze security --offline=yes --no-pager ./delay-bridge.service 2>&1)
    score=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    if [ -z "$score" ]; then
        fail "systemd-analyze security --offline printed no score:"
        printf '      %s\n' "$sec" | tail -n 5
    elif awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }'; then
        ok "systemd-analyze security: exposure $score (<= 2.5)"
    else
        fail "systemd-analyze security: exposure $score, expected <= 2.5; the unchecked items:"
        printf '%s\n' "$sec" | grep '^✗' | sed 's/^/      /'
    fi
else
    echo "note: this systemd-analyze has no 'security --offline'; exposure not checked"
fi

# --- 3. directives ----------------------------------------------------------
# Effective value of a directive: the last assignment wins (for most keys).
val() { sed -n "s/^$1=//p" "$UNIT" | tail -n1; }
has() { grep -qx -- "$1" "$UNIT"; }
want() {   # want KEY VALUE WHY
    local v
    v=$(val "$1")
    if grep -q "^$1=" "$UNIT" && [ "$v" = "$2" ]; then ok "$1=$2"; else fail "$1= is '${v:-<missing>}', expected '$2' ($3)"; fi
}
want DynamicUser yes "no fixed uid to manage, nothing else owned"
want StateDirectory delay-bridge "/var/lib/delay-bridge, the WAL"
want ConfigurationDirectory delay-bridge "/etc/delay-bridge"
want ProtectSystem strict "read-only file system except the StateDirectory"
want ProtectHome yes "no access to /home, /root"
want PrivateTmp yes "own /tmp"
want NoNewPrivileges yes "no setuid escalation"
want CapabilityBoundingSet "" "empty: the bridge needs no capability"
want RestrictAddressFamilies "AF_INET AF_INET6 AF_UNIX" "TCP to the broker, the journal socket"
want MemoryDenyWriteExecute yes "no W+X memory"
want LockPersonality yes "no personality() changes"
want Restart on-failure "restart after exit 1 or a crash"
want KillSignal SIGTERM "SIGTERM is the clean stop (README)"
has "SystemCallFilter=@system-service" && ok "SystemCallFilter=@system-service" \
    || fail "SystemCallFilter=@system-service missing"
prevent=" $(val RestartPreventExitStatus) "
for code in 2 3 4; do
    case "$prevent" in
    *" $code "*) ;;
    *) fail "RestartPreventExitStatus lacks $code (exit $code: restarting does not fix it, README 'exit codes')" ;;
    esac
done
[ "$prevent" = " 2 3 4 " ] && ok "RestartPreventExitStatus=2 3 4"
case "$(val RestartPreventExitStatus)" in *1*) fail "RestartPreventExitStatus holds 1: a fatal runtime error should be restarted" ;; esac
lim=$(val LimitNOFILE)
if [[ "$lim" =~ ^[0-9]+$ ]] && [ "$lim" -ge 4096 ]; then ok "LimitNOFILE=$lim"; else fail "LimitNOFILE= is '${lim:-<missing>}', expected a number >= 4096"; fi
envf=$(val EnvironmentFile)
case "$envf" in
-/*) ok "EnvironmentFile=$envf (optional)" ;;
*) fail "EnvironmentFile= is '${envf:-<missing>}', expected '-/path' (optional file with DELAY_BRIDGE_BROKER_URI)" ;;
esac
start=$(val ExecStart)
pre=$(val ExecStartPre)
cfg=$(printf '%s\n' "$start" | sed -n 's/.*--config \([^ ]*\).*/\1/p')
if [ -z "$cfg" ]; then
    fail "ExecStart= has no --config FILE: '$start'"
elif [ "$pre" = "$start --check-config" ]; then
    ok "ExecStartPre= is ExecStart= plus --check-config ($cfg)"
else
    fail "ExecStartPre= is '${pre:-<missing>}', expected '$start --check-config'"
fi
case "$cfg" in
/etc/delay-bridge/*) ;;
*) [ -n "$cfg" ] && fail "the config $cfg is not in the ConfigurationDirectory /etc/delay-bridge" ;;
esac
case "$(val EnvironmentFile)" in
-/etc/delay-bridge/*) ;;
*) fail "EnvironmentFile is not in /etc/delay-bridge" ;;
esac

# --- 4. timeouts and paths against the shipped configs -----------------------
stop=$(val TimeoutStopSec)
if ! [[ "$stop" =~ ^[0-9]+s?$ ]]; then
    fail "TimeoutStopSec= is '${stop:-<missing>}', expected seconds (e.g. 30)"
else
    stop_ms=$(( ${stop%s} * 1000 ))
    for f in "$ROOT"/deploy/config.example.json "$ROOT"/deploy/examples/*.json; do
        rel=${f#"$ROOT"/}
        read -r sd wal < <("$PY" -c '
import json, sys
c = json.load(open(sys.argv[1]))
print(c.get("shutdown_timeout_ms", 10000), c["wal"]["dir"])' "$f" 2>/dev/null) || { fail "$rel: cannot read shutdown_timeout_ms / wal.dir"; continue; }
        # 5 s for the final fsync and exit after the confirm wait
        if [ "$stop_ms" -ge $((sd + 5000)) ]; then
            ok "TimeoutStopSec=$stop >= shutdown_timeout_ms $sd ms + 5 s ($rel)"
        else
            fail "TimeoutStopSec=$stop is not at least 5 s above shutdown_timeout_ms=$sd of $rel: systemd would SIGKILL during the clean stop"
        fi
        if [ "$wal" = "/var/lib/$(val StateDirectory)" ]; then
            ok "wal.dir $wal is the StateDirectory ($rel)"
        else
            fail "$rel: wal.dir is $wal, but the unit may write only /var/lib/$(val StateDirectory) (StateDirectory=, ProtectSystem=strict)"
        fi
    done
fi

echo
if [ $fails -ne 0 ]; then
    echo "test_systemd: $fails check(s) failed"
    exit 1
fi
echo "test_systemd: all checks passed"
