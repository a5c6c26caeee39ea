#!/bin/bash
# build.sh -- build the delay-bridge shim plugin (rabbitmq_delay_bridge_exchange)
# for one RabbitMQ line, against that broker's own include files and Erlang.
#
#   deploy/plugin/build.sh [LINE]        LINE: 3.10, 4.0, 4.3 or local
#
#   local  the RabbitMQ installed on this machine (/usr/lib/rabbitmq/lib/
#          rabbitmq_server-*, Debian's and the rabbitmq.com packages'
#          layout); what a user runs on the broker's host
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
# (CMakeLists.txt). Needs erlc (Debian: erlang-base, a dependency of rabbitmq-server)
# and zip or python3.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
APP=rabbitmq_delay_bridge_exchange
LINE=${1:-${DB_RABBITMQ:-local}}
CACHE=${DB_SHIM_CACHE:-/var/cache/delay-bridge}
VSN=$(sed -n 's/^project(delay-bridge VERSION \([0-9.]*\).*/\1/p' "$TOP/CMakeLists.txt" 2>/dev/null || true)
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

# The broker's version and its lib directory (inside ROOT).
server=$(ls -d "$ROOT"/usr/lib/rabbitmq/lib/rabbitmq_server-* 2>/dev/null | sort -V | tail -n 1)
[ -n "$server" ] || die "no RabbitMQ in ${ROOT:-/}usr/lib/rabbitmq/lib (install rabbitmq-server)"
BV=${server##*/rabbitmq_server-}
PLUGINS=${server#"$ROOT"}/plugins
OUT=$CACHE/shim-$BV
EZ=$OUT/$APP-$VSN.ez

newest=$(ls -t "$HERE"/src/* "$HERE"/test/* "$HERE/build.sh" | head -n 1)
if [ -f "$EZ" ] && [ "$EZ" -nt "$newest" ]; then
    echo "$EZ"
    exit 0
fi

mkdir -p "$OUT" "$ROOT/tmp"
exec 9>"$OUT/.lock"
flock 9
if [ -f "$EZ" ] && [ "$EZ" -nt "$newest" ]; then echo "$EZ"; exit 0; fi

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
else
    (cd "$work" && python3 -m zipfile -c "$EZ.tmp" "$APP-$VSN")
fi
rm -rf "$OUT/$APP-$VSN" "$OUT/test"
cp -r "$work/$APP-$VSN" "$work/test" "$OUT/"
mv -f "$EZ.tmp" "$EZ"
echo "$EZ"
