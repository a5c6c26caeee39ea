#!/bin/bash
# build.sh -- build the delay-bridge shim plugin (rabbitmq_delay_bridge_exchange)
# for one RabbitMQ line, against that broker's own include files and Erlang.
#
#   deploy/plugin/build.sh [--install] [LINE]   LINE: 3.10, 4.0, 4.3 or local
#
#   local  the RabbitMQ installed on this machine: /usr/lib/rabbitmq/lib/
#          rabbitmq_server-* (Debian's and the rabbitmq.com packages'
#          layout), else $RABBITMQ_HOME (default /opt/rabbitmq, the official
#          container image's layout); what a user runs on the broker's host
#          or in an image build (docker/rabbitmq-shim/Dockerfile)
#   --install  (local only) also copy the .ez into that RabbitMQ's plugins
#          directory, ready for `rabbitmq-plugins enable
#          rabbitmq_delay_bridge_exchange`
#
# Installed by the Debian package as /usr/bin/delay-bridge-build-shim, with
# its sources in /usr/share/delay-bridge/plugin (and the version in VERSION
# there).
#   3.10   the same as local on the project's CI machine (Debian 12)
#   4.0 4.3  the broker matrix's Debian roots (tests/integration/broker.sh,
#          which makes them if need be); erlc runs inside the root
#
# Default LINE: $DB_RABBITMQ, else local. Output, under $DB_SHIM_CACHE
# (default /var/cache/delay-bridge) in shim-<RabbitMQ version>/:
#
#   rabbitmq_delay_bridge_exchange-<VSN>.ez    the plugin (a zip of the
#                                             directory below), to copy into
#                                             the broker's plugins directory
#   rabbitmq_delay_bridge_exchange-<VSN>/ebin/ the same, unpacked
#
#   test/   the unit tests of the delay rules (not in the plugin):
#           erl -noshell -pa test -pa <that ebin> -s rabbit_exchange_type_delay_bridge_tests run
#
# and the .ez's path on stdout (last line). Rebuilt only when a file of src/, test/ or
# this script is newer than the .ez. VSN is the project's version
# (CMakeLists.txt). Needs erlc (Debian: erlang-base, a dependency of rabbitmq-server;
# the official image's Erlang has it too); zip, python3 or, failing both, erl
# itself (its zip module) makes the .ez.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
APP=rabbitmq_delay_bridge_exchange
INSTALL=false
if [ "${1:-}" = --install ]; then INSTALL=true; shift; fi
LINE=${1:-${DB_RABBITMQ:-local}}
CACHE=${DB_SHIM_CACHE:-/var/cache/delay-bridge}
if [ -f "$HERE/VERSION" ]; then # the Debian package's copy
    VSN=$(cat "$HERE/VERSION")
else
    VSN=$(sed -n 's/^project(delay-bridge VERSION \([0-9.]*\).*/\1/p' "$TOP/CMakeLists.txt" 2>/dev/null || true)
fi
VSN=${VSN:-0.1.0}

say() { printf 'build.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

case "$LINE" in
local | 3.10) ROOT= ;;
4.0 | 4.3)
    bin=$(bash "$TOP/tests/integration/broker.sh" bin-dir "$LINE") || exit $?
    ROOT=${bin%.bin}
    ;;
*) say "unknown line '$LINE': 3.10, 4.0, 4.3 or local"; exit 2 ;;
esac
[ "$INSTALL" = false ] || [ -z "$ROOT" ] || die "--install is for the local RabbitMQ only"

# The broker's version and its plugins directory (inside ROOT).
server=$(ls -d "$ROOT"/usr/lib/rabbitmq/lib/rabbitmq_server-* 2>/dev/null | sort -V | tail -n 1)
if [ -n "$server" ]; then
    BV=${server##*/rabbitmq_server-}
    PLUGINS=${server#"$ROOT"}/plugins
elif [ -z "$ROOT" ] && common=$(ls -d "${RABBITMQ_HOME:-/opt/rabbitmq}"/plugins/rabbit_common-* 2>/dev/null |
                                sort -V | tail -n 1) && [ -n "$common" ]; then
    BV=${common##*/rabbit_common-}
    PLUGINS=${common%/*}
else
    die "no RabbitMQ in ${ROOT:-/}usr/lib/rabbitmq/lib nor in ${RABBITMQ_HOME:-/opt/rabbitmq}/plugins (install rabbitmq-server, or set RABBITMQ_HOME)"
fi
OUT=$CACHE/shim-$BV
EZ=$OUT/$APP-$VSN.ez

newest=$(ls -t "$HERE"/src/* "$HERE"/test/* "$HERE/build.sh" | head -n 1)
# --install: the .ez into the broker's plugins directory (the build's last step).
done_ez() {
    if [ "$INSTALL" = true ]; then
        rm -f "$PLUGINS/$APP"-*.ez
        cp "$EZ" "$PLUGINS/" || die "cannot copy $EZ into $PLUGINS"
        say "installed $PLUGINS/${EZ##*/}: rabbitmq-plugins enable $APP"
    fi
    echo "$EZ"
    exit 0
}

if [ -f "$EZ" ] && [ "$EZ" -nt "$newest" ]; then
    done_ez
fi

mkdir -p "$OUT" "$ROOT/tmp"
exec 9>"$OUT/.lock"
flock 9
if [ -f "$EZ" ] && [ "$EZ" -nt "$newest" ]; then done_ez; fi

say "building $APP $VSN for RabbitMQ $BV (${ROOT:-this machine})"
work=$(mktemp -d "$ROOT/tmp/dbshim-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/test" "$work/$APP-$VSN/ebin"
cp "$HERE"/src/*.erl "$work/src/"
cp "$HERE"/test/*.erl "$work/test/"
defs=()
case "$BV" in 3.*) defs=(-DDB_BASIC_MESSAGE) ;; esac
inside=${work#"$ROOT"}
cmd="cd $inside && ERL_LIBS=$PLUGINS HOME=/tmp erlc -Wall ${defs[*]} -o $APP-$VSN/ebin \
-I $PLUGINS/rabbit_common-$BV/include src/*.erl && \
ERL_LIBS=$PLUGINS HOME=/tmp erlc -Wall -o test test/*.erl"
if [ -n "$ROOT" ]; then
    chroot "$ROOT" /bin/sh -c "$cmd" >&2 || die "erlc failed"
else
    /bin/sh -c "$cmd" >&2 || die "erlc failed"
fi
sed "s/@VSN@/$VSN/" "$HERE/src/$APP.app.src" >"$work/$APP-$VSN/ebin/$APP.app"
rm -f "$work"/test/*.erl  # the EUnit module (test/) is not part of the plugin
rm -f "$EZ.tmp"
if command -v zip >/dev/null; then
    (cd "$work" && zip -q -r "$EZ.tmp" "$APP-$VSN")
elif command -v python3 >/dev/null; then
    (cd "$work" && python3 -m zipfile -c "$EZ.tmp" "$APP-$VSN")
else # a broker's image has neither, but has Erlang, whose zip module makes the .ez
    (cd "$work" && erl -noshell -eval "{ok, _} = zip:create(\"$EZ.tmp\", [\"$APP-$VSN\"]), halt().")
fi
rm -rf "$OUT/$APP-$VSN" "$OUT/test"
cp -r "$work/$APP-$VSN" "$work/test" "$OUT/"
mv -f "$EZ.tmp" "$EZ"
done_ez
