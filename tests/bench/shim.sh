#!/usr/bin/env bash
# shim.sh -- what the shim (deploy/plugin, exchange type x-delayed-message)
# costs per message against a plain exchange of the same type.
#
#   tests/bench/shim.sh [--count N] [--runs R] [--keep]
#
#   --count N   messages per phase (default 100000)
#   --runs R    runs of every phase (default 3): medians, min and max
#   --keep      keep the work directory (summaries, the node's logs)
#
# One node of DB_RABBITMQ's line (3.10, 4.0, 4.3; tests/integration/
# broker.sh) with the shim enabled (deploy/plugin/build.sh builds it), on
# 127.0.0.1:${BENCH_PORT:-5698} (distribution ${BENCH_DIST_PORT:-25698}),
# state in ${BENCH_BROKER_DIR:-$BUILD_DIR/bench-shim-rabbitmq-LINE}. Per run, in
# this order, each phase load_publish of N persistent 256 B messages with
# publisher confirms (window 1000), into a queue purged before the phase:
#
#   plain      exchange bench.plain (direct) -> bench.q.plain, no header
#   shim       exchange bench.shim (x-delayed-message, x-delayed-type
#              direct) -> bench.q.shim, no header: the shim's no-delay path
#              (reads the delay headers, finds none, routes as direct)
#   plain+hdr  bench.plain with x-delay = 60000: the same bytes as below,
#              into a plain queue
#   delayed    bench.shim with x-delay = 60000: the shim's delay path, into
#              delay-bridge.delayed
#
# Figures per phase: the publisher's rate (msg/s, first publish to last
# confirm) and the broker's CPU per message (µs, user + system of the
# node's session, its idle rate measured first and subtracted); then, in
# the node (rabbitmqctl eval), rabbit_exchange:route/2 of one message of
# the phase 2N times in a row: the routing decision alone, as the VM's CPU
# time per call (statistics(runtime): the whole VM, so the idle broker's
# background is in it) and reductions per call (the Erlang VM's count of
# work done: the same on a busy machine as on a quiet one).
# Each as the median of the runs with min and max; ratios shim / plain and
# delayed / plain+hdr of the medians. No bridge runs. Exit 0, 2 on a
# usage or setup error, 77 when the broker cannot run here.
set -Eeuo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

N=100000 RUNS=3 KEEP=0
say() { printf '[shim %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --count) [ $# -ge 2 ] || die "--count needs a number"; N=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] || die "--runs needs a number"; RUNS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
    esac
done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "--count $N: expected a positive integer"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "--runs $RUNS: expected a positive integer"

# get, now_ms, calc, fmt, session_cpu_ms, ratio, bench_preflight (sets PUB, RABBITMQ_BIN_DIR)
. "$HERE/common.sh"
bench_preflight
LINE=${DB_RABBITMQ:-3.10}
EZ=$(bash "$ROOT/deploy/plugin/build.sh" "$LINE" | tail -n 1) || die "deploy/plugin/build.sh $LINE failed"
PORT=${BENCH_PORT:-5698} DIST=${BENCH_DIST_PORT:-25698}
BROKER_DIR=${BENCH_BROKER_DIR:-$BUILD_DIR/bench-shim-rabbitmq-$LINE}  # one per line: rabbitmq.sh links it into the line's root
URI="amqp://guest:guest@127.0.0.1:$PORT/%2f"
RABBITMQ_SH=$ROOT/tests/integration/rabbitmq.sh
WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/delay-bridge-shim.XXXXXX")
cleanup() {
    bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1 || true
    if [ "$KEEP" = 1 ]; then say "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The node: the shim's .ez in BROKER_DIR/plugins (inside the broker's root
# for 4.x: rabbitmq.sh links BROKER_DIR there and moves what it holds).
root=""
case "$RABBITMQ_BIN_DIR" in *.bin) [ -d "${RABBITMQ_BIN_DIR%.bin}/usr/lib/rabbitmq" ] && root=${RABBITMQ_BIN_DIR%.bin} ;; esac
lib=$(ls -d "$root"/usr/lib/rabbitmq/lib/rabbitmq_server-* | sort -V | tail -n 1)
bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1 || true
mkdir -p "$BROKER_DIR"
rm -rf "$BROKER_DIR/mnesia" "$BROKER_DIR/plugins"
mkdir -p "$BROKER_DIR/plugins"
cp "$EZ" "$BROKER_DIR/plugins/"
export RABBITMQ_PLUGINS_DIR="${lib#"$root"}/plugins:$BROKER_DIR/plugins"
export RABBITMQ_ENABLED_PLUGINS=rabbitmq_delay_bridge_exchange
DB_RABBITMQ_FRESH=1 bash "$RABBITMQ_SH" start "$BROKER_DIR" "$PORT" "$DIST" >&2
BROKER_SID=$(cat "$BROKER_DIR/node.pid")
VSN=${lib##*/rabbitmq_server-}
say "RabbitMQ $VSN with the shim ($EZ), $N messages per phase, $RUNS runs"

amqp() { # amqp PYTHON: run PYTHON with ch, a pika channel on the node
    /usr/bin/python3 -c "
import pika
c = pika.BlockingConnection(pika.URLParameters('$URI')); ch = c.channel()
$1
c.close()"
}
amqp "
ch.exchange_declare('bench.plain', 'direct', durable=True)
ch.exchange_declare('bench.shim', 'x-delayed-message', durable=True, arguments={'x-delayed-type': 'direct'})
for q, x in (('bench.q.plain', 'bench.plain'), ('bench.q.shim', 'bench.shim')):
    ch.queue_declare(q, durable=True); ch.queue_bind(q, x, 'bench')
ch.queue_declare('delay-bridge.delayed', passive=True)"
purge() { amqp "
for q in ('bench.q.plain', 'bench.q.shim', 'delay-bridge.delayed'): ch.queue_purge(q)"; }

c0=$(session_cpu_ms "$BROKER_SID") t0=$(now_ms)
sleep 4
IDLE=$(fmt 2 "($(session_cpu_ms "$BROKER_SID") - $c0) / (($(now_ms) - $t0) / 1000.0)")
say "broker idle: $IDLE ms CPU per s"

declare -A RATE CPU
PHASES=(plain shim plain+hdr delayed)
phase() { # phase NAME RUN load_publish-options
    local name=$1 run=$2 c t dt out=$WORK/$1.$2.publish
    shift 2
    purge
    c=$(session_cpu_ms "$BROKER_SID") t=$(now_ms)
    "$PUB" --uri "$URI" --count "$N" --routing-key bench "$@" >"$out" 2>>"$WORK/errors" ||
        { cat "$WORK/errors" >&2; die "load_publish $name failed"; }
    dt=$(( $(now_ms) - t ))
    # shellcheck disable=SC2034  # read by stats() through a nameref
    CPU[$name.$run]=$(fmt 1 "(($(session_cpu_ms "$BROKER_SID") - $c) - $IDLE * $dt / 1000.0) * 1000.0 / $N")
    # shellcheck disable=SC2034  # read by stats() through a nameref
    RATE[$name.$run]=$(get "$out" rate)
    [ "$(get "$out" nacked)" = 0 ] || die "$name: nacked $(get "$out" nacked)"
    say "run $run $name: $(cat "$out")"
}
for run in $(seq "$RUNS"); do
    phase plain "$run" --mode plain --exchange bench.plain
    phase shim "$run" --mode plain --exchange bench.shim
    phase plain+hdr "$run" --mode xdelay --delay 60000 --exchange bench.plain
    phase delayed "$run" --mode xdelay --delay 60000 --exchange bench.shim
    amqp "
n = ch.queue_declare('delay-bridge.delayed', passive=True).method.message_count
assert n == $N, 'delay-bridge.delayed holds %d, not $N' % n"
done

# In the node itself: rabbit_exchange:route/2 of one message, M times in a
# row in one process (the rabbitmqctl eval's), ns per call -- the routing
# decision alone, without the channel, the queue or the disk.
M=$(( N * 2 ))
ROUTE_EVAL="
Body = binary:copy(<<\"x\">>, 256),
R = fun(XN, H) ->
    X = rabbit_exchange:lookup_or_die(rabbit_misc:r(<<\"/\">>, exchange, XN)),
    P = {'P_basic', undefined, undefined, H, 2, undefined, undefined, undefined, undefined, undefined,
         undefined, undefined, undefined, undefined, undefined},
    C = rabbit_basic:build_content(P, Body),
    Msg = case code:ensure_loaded(mc_amqpl) of
              {module, _} -> {ok, M4} = mc_amqpl:message(element(2, X), <<\"bench\">>, C), M4;
              _ -> {ok, M3} = rabbit_basic:message(element(2, X), <<\"bench\">>, C),
                   rabbit_basic:delivery(false, false, M3, undefined)
          end,
    _ = rabbit_exchange:route(X, Msg),
    Loop = fun L(0) -> ok; L(I) -> _ = rabbit_exchange:route(X, Msg), L(I - 1) end,
    {reductions, R0} = process_info(self(), reductions),
    {Cpu0, _} = statistics(runtime),
    ok = Loop($M),
    {Cpu1, _} = statistics(runtime),
    {reductions, R1} = process_info(self(), reductions),
    {round((Cpu1 - Cpu0) * 1000000 / $M), round((R1 - R0) / $M)}
end,
D = [{<<\"x-delay\">>, long, 60000}],
{A1, A2} = R(<<\"bench.plain\">>, []), {B1, B2} = R(<<\"bench.shim\">>, []),
{C1, C2} = R(<<\"bench.plain\">>, D), {D1, D2} = R(<<\"bench.shim\">>, D),
io:format(\"plain=~b shim=~b plain+hdr=~b delayed=~b~nplain=~b shim=~b plain+hdr=~b delayed=~b~n\",
          [A1, B1, C1, D1, A2, B2, C2, D2]),
ok."
declare -A ROUTE RED
for run in $(seq "$RUNS"); do
    line=$(HOME=$BROKER_DIR "$RABBITMQ_BIN_DIR/rabbitmqctl" -n "dbtest$PORT@localhost" -q eval "$ROUTE_EVAL") ||
        die "rabbitmqctl eval (route) failed: $line"
    out=$line
    line=$(grep -m 1 '^plain=' <<<"$out") || die "rabbitmqctl eval (route) said no figures"
    red=$(grep '^plain=' <<<"$out" | sed -n 2p)
    say "route run $run: CPU ns $line; reductions $red (per rabbit_exchange:route, $M calls)"
    for ph in "${PHASES[@]}"; do
        # shellcheck disable=SC2034  # read by stats() through a nameref
        ROUTE[$ph.$run]=$(tr ' ' '\n' <<<"$line" | sed -n "s/^$ph=//p")
        # shellcheck disable=SC2034  # read by stats() through a nameref
        RED[$ph.$run]=$(tr ' ' '\n' <<<"$red" | sed -n "s/^$ph=//p")
    done
done

# stats ARRAY PHASE: "median (min-max)" of the runs
stats() {
    local -n a=$1
    local vals=() r
    for r in $(seq "$RUNS"); do vals+=("${a[$2.$r]}"); done
    printf '%s\n' "${vals[@]}" | sort -g | awk '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%s %s %s\n", m, v[1], v[NR] }'
}
printf '\nshim.sh: RabbitMQ %s, %d persistent 256 B messages per phase with confirms, median (min-max) of %d runs\n\n' \
    "$VSN" "$N" "$RUNS"
printf '| %-10s | %-22s | %-22s | %-22s | %-17s |\n' phase "msg/s" "broker CPU µs/msg" "route CPU ns/msg" "route reductions"
printf '|%s|%s|%s|%s|%s|\n' "------------" "------------------------" "------------------------" \
    "------------------------" "-------------------"
declare -A MR MC MRT MRD
for ph in "${PHASES[@]}"; do
    read -r rm rlo rhi <<<"$(stats RATE "$ph")"
    read -r cm clo chi <<<"$(stats CPU "$ph")"
    read -r tm tlo thi <<<"$(stats ROUTE "$ph")"
    read -r dm _ _ <<<"$(stats RED "$ph")"
    MR[$ph]=$rm MC[$ph]=$cm MRT[$ph]=$tm MRD[$ph]=$dm
    printf '| %-10s | %-22s | %-22s | %-22s | %-17s |\n' "$ph" "$(fmt 0 "$rm") ($(fmt 0 "$rlo")-$(fmt 0 "$rhi"))" \
        "$(fmt 1 "$cm") ($(fmt 1 "$clo")-$(fmt 1 "$chi"))" "$(fmt 0 "$tm") ($(fmt 0 "$tlo")-$(fmt 0 "$thi"))" "$dm"
done
printf '\nshim / plain: rate %s, broker CPU %s, route CPU %s, reductions %s\n' \
    "$(ratio "${MR[shim]}" "${MR[plain]}")" "$(ratio "${MC[shim]}" "${MC[plain]}")" \
    "$(ratio "${MRT[shim]}" "${MRT[plain]}")" "$(ratio "${MRD[shim]}" "${MRD[plain]}")"
printf 'delayed / plain+hdr: rate %s, broker CPU %s, route CPU %s, reductions %s\n' \
    "$(ratio "${MR[delayed]}" "${MR[plain+hdr]}")" "$(ratio "${MC[delayed]}" "${MC[plain+hdr]}")" \
    "$(ratio "${MRT[delayed]}" "${MRT[plain+hdr]}")" "$(ratio "${MRD[delayed]}" "${MRD[plain+hdr]}")"
