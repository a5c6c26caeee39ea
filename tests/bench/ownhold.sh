#!/bin/bash
# ownhold.sh -- what holding delayed messages costs, and how soon they fire
# after a restart: delay-bridge against RabbitMQ's own quorum-queue delays,
# on one node, in one run (tests/bench/README.md, "RabbitMQ's own delays").
#
#   tests/bench/ownhold.sh [--counts 100000,1000000] [--sizes 256,4096]
#                          [--restart N] [--smoke] [--keep]
#
# (a) Holding. For each body size (--sizes, bytes) and count (--counts),
# each system on a fresh node (state wiped, started again), N messages
# published with confirms (window 1000), all due in an hour:
#   delay-bridge   x-delay 3600000 to route bench's ingress; once the bridge
#                  logged all N: its resident memory (VmRSS) and /stats
#                  ram_bytes per held message, its WAL on disk per message,
#                  and the broker's -- the node's beam.smp VmRSS,
#                  erlang:memory(total) and its state directory on disk --
#                  per message, against the same node before the publish
#                  (its ingress queue is empty again: the bridge acked them)
#   quorum delay   header x-opt-delivery-time = send time + 3600000 to
#                  quorum queue bench.qhold (exchange bench.qq, key hold; no
#                  consumer): the broker's figures alone, the same way,
#                  measured after 5 s for the queue to settle
#                  (only on a node that delays in its quorum queues,
#                  DB_RABBITMQ=qq-delay: quorumdelay.sh; elsewhere a line
#                  says why not)
#   plugin 4.0.7   x-delay 3600000 to the delayed-message plugin's exchange
#                  bench.plugin (x-delayed-message, x-delayed-type direct;
#                  bench.phold bound with key hold): the broker's figures
#                  alone, as for the quorum delay (only on RabbitMQ 4.0 with
#                  the plugin built: plugin.sh; BENCH_PLUGIN=0 leaves it out)
# and both as RAM per held message, bridge + broker together.
#
# (b) Restart (--restart N, default 1000000; 0 skips it; 256 B bodies).
# N messages all due within 2 s of a time after their publishing ends, then:
#   quorum delay   the node is stopped (rabbitmqctl stop) before they fall
#                  due and started again once they are all due; time from
#                  the start command to the node up, to the first and to
#                  the last delivered (a consumer connects once it is up)
#   delay-bridge   the same node restart while the bridge holds them (it
#                  reconnects and fires them); and a kill -9 of the bridge
#                  instead, started again once they are all due: time from
#                  its start to the first and the last delivered
# Every message must arrive (a FAILED line and exit 1 otherwise).
#
#   --smoke   counts 2000, sizes 256, restart 2000: for CI, about a minute
#
# Broker: DB_RABBITMQ, its own node on 127.0.0.1:${BENCH_PORT:-5697}, state
# in ${BENCH_BROKER_DIR:-$BUILD_DIR/bench-hold-rabbitmq}; BUILD_DIR,
# BENCH_BRIDGE_BIN, BENCH_TOOLS_DIR, BENCH_TMP as in run.sh. Never asserts
# on a figure. Exit 0 when every message arrived and was held, 1 when not,
# 2 on a usage or setup error, 77 without rabbitmq-server.
set -Eeuo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

say() { printf '[hold %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }

COUNTS=100000,1000000 SIZES=256,4096 N_RESTART=1000000 KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --counts) COUNTS=${2:?}; shift 2 ;;
    --sizes) SIZES=${2:?}; shift 2 ;;
    --restart) N_RESTART=${2:?}; shift 2 ;;
    --smoke) COUNTS=2000 SIZES=256 N_RESTART=2000; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
    esac
done
[[ "$COUNTS" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--counts $COUNTS: positive integers, comma-separated"
[[ "$SIZES" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--sizes $SIZES: positive integers, comma-separated"
[[ "$N_RESTART" =~ ^[0-9]+$ ]] || die "--restart $N_RESTART: a count (0: none)"
HOLD_DELAY=3600000

# get, now_ms, calc, fmt, free_port, rss_kb, ratio, bench_preflight
. "$HERE/common.sh"
bench_preflight load_consume
CONS=$TOOLS/load_consume
LR=$TOOLS/load_retry
[ -x "$LR" ] || die "no $LR (build the tests)"
. "$HERE/harness.sh"
bench_setup hold 5697 bench-hold-rabbitmq
TARGET_EX=bench.target OUT_Q=bench.out INGRESS_EX=bench.delayed INGRESS_Q=bench.delayed.q
BRIDGE_PID="" CONS_PID="" HTTP_PORT="" BROKER_SID="" FAILED=()
declare -A R
BROKER_VSN=$(sed -E 's/^(RabbitMQ [0-9]+(\.[0-9]+)*).*/\1/' <<<"${BROKER_DESC:-RabbitMQ ?}")
. "$HERE/plugin.sh"        # PLUGIN, plugin_decide, plugin_check_started (broker_start calls it)
. "$HERE/quorumdelay.sh"   # QQ, QQ_WHY, QQ_NAME, qq_decide, qq_consume, qq_beam
bench_traps

stats() { curl -sf "http://127.0.0.1:$HTTP_PORT/stats" | jq -r "$1"; }
ctl() { HOME=$BROKER_DIR "$RABBITMQ_BIN_DIR/rabbitmqctl" -n "dbtest$PORT@localhost" -q "$@"; }
# The node's figures: beam.smp VmRSS (kB), erlang:memory(total) (B), state on disk (B).
node_rss_kb() { local b; b=$(qq_beam); [ -n "$b" ] && rss_kb "$b" || echo 0; }
node_mem() { ctl eval 'erlang:memory(total).' 2>/dev/null | tr -dc '0-9' || echo 0; }
node_disk() { du -sb "$(readlink -f "$BROKER_DIR")" 2>/dev/null | cut -f1; }
node_mark() { R[$1.rss0]=$(node_rss_kb) R[$1.mem0]=$(node_mem) R[$1.disk0]=$(node_disk); }
node_delta() { # node_delta NAME N: per-message deltas since node_mark NAME
    R[$1.node_rss]=$(fmt 1 "($(node_rss_kb) - ${R[$1.rss0]}) * 1024.0 / $2")
    R[$1.node_mem]=$(fmt 1 "($(node_mem) - ${R[$1.mem0]}) / $2")
    R[$1.node_disk]=$(fmt 1 "($(node_disk) - ${R[$1.disk0]}) / $2")
    R[$1.node_rss_mib]=$(fmt 1 "$(node_rss_kb) / 1024.0")
}
# wait_held N TIMEOUT_S: until the bridge logged and acked N.
wait_held() {
    local deadline=$((SECONDS + $2)) got=0
    while [ "$SECONDS" -lt "$deadline" ]; do
        got=$(stats '.routes[0].received' 2>/dev/null || echo 0)
        [ "${got:-0}" -lt "$1" ] || return 0
        sleep 0.2
    done
    FAILED+=("the bridge logged $got of $1 within $2 s")
}
fresh_node() { broker_start >&2; sleep 2; }
new_bridge() { # new_bridge NAME: a bridge on an empty WAL
    rm -rf "$WORK/wal-$1"; mkdir -p "$WORK/wal-$1"
    bridge_config "$WORK/wal-$1"
    bridge_launch
    bridge_ready 120
    "$LR" declare --uri "$URI" "x:$TARGET_EX" "q:$OUT_Q" "b:$OUT_Q:$TARGET_EX:bench" >/dev/null
}

say "machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg); delay-bridge $BRIDGE_BUILT"
qq_decide
say "$QQ_NAME: $([ "$QQ" = 1 ] && echo "measured on this node" || echo "$QQ_WHY")"
plugin_decide
say "$PLUGIN_NAME: $([ "$PLUGIN" = 1 ] && echo "measured on this node" || echo "$PLUGIN_WHY")"

# broker_holds KEY WHO MODE SPEC...: a fresh node declares SPEC (load_retry
# declare), then holds n x size B published with MODE to the exchange SPEC's
# binding names, key hold: the node's figures per message (size, n, TAG: the loop's).
broker_holds() {
    local k=$1 who=$2 mode=$3 ex
    shift 3
    ex=$(cut -d: -f3 <<<"$3") # the binding b:QUEUE:EXCHANGE:KEY
    TAG=$((TAG + 1))
    say "== $k: $who holds $n x $size B"
    fresh_node
    "$LR" declare --uri "$URI" "$@" >/dev/null
    sleep 1
    node_mark "$k"
    publish "$k" --mode "$mode" --exchange "$ex" --routing-key hold --count "$n" \
        --delay "$HOLD_DELAY" --size "$size" --tag "$TAG"
    sleep 5
    node_delta "$k" "$n"
    R[$k.total_ram]=${R[$k.node_rss]}
    say "$k: node RSS ${R[$k.node_rss]} B/msg, erlang:memory ${R[$k.node_mem]} B/msg, disk ${R[$k.node_disk]} B/msg"
}

# ---------------------------------------------------------------- (a) holding
TAG=0
for size in ${SIZES//,/ }; do
    for n in ${COUNTS//,/ }; do
        k=b-$size-$n TAG=$((TAG + 1))
        say "== $k: delay-bridge holds $n x $size B"
        fresh_node
        new_bridge "$k"
        sleep 1
        node_mark "$k"
        r0=$(rss_kb "$BRIDGE_PID")
        publish "$k" --mode xdelay --exchange "$INGRESS_EX" --routing-key bench --count "$n" \
            --delay "$HOLD_DELAY" --size "$size" --tag "$TAG"
        wait_held "$n" 1800
        sleep 5
        held=$(stats '.held')
        [ "$held" -ge "$n" ] || FAILED+=("$k: the bridge holds $held of $n")
        R[$k.bridge_rss]=$(fmt 1 "($(rss_kb "$BRIDGE_PID") - $r0) * 1024.0 / $n")
        R[$k.bridge_ram]=$(fmt 1 "$(stats '.ram_bytes') / $n")
        R[$k.wal]=$(fmt 1 "$(stats '.wal.disk_bytes') / $n")
        node_delta "$k" "$n"
        R[$k.total_ram]=$(fmt 1 "${R[$k.bridge_rss]} + ${R[$k.node_rss]}")
        say "$k: bridge RSS ${R[$k.bridge_rss]} B/msg, WAL ${R[$k.wal]} B/msg; node RSS ${R[$k.node_rss]} B/msg, disk ${R[$k.node_disk]} B/msg"
        bridge_stop
        [ "$QQ" = 1 ] && broker_holds "q-$size-$n" "a quorum queue (x-opt-delivery-time)" deliverytime \
            "x:$QQ_EX" "q:bench.qhold:type=quorum" "b:bench.qhold:$QQ_EX:hold"
        [ "$PLUGIN" = 1 ] && broker_holds "p-$size-$n" "the $PLUGIN_NAME" xdelay \
            "x:$PLUGIN_EX:x-delayed-message" "q:bench.phold" "b:bench.phold:$PLUGIN_EX:hold"
    done
done

# ---------------------------------------------------------------- (b) restart
# due_after N: a due time after N messages' publishing is surely over (1.5x
# the time the hold phase took for as many, plus 15 s).
due_after() {
    local rate
    rate=$(p "b-256-${COUNTS%%,*}" rate)
    [[ "$rate" =~ ^[0-9.]+$ ]] || rate=3000
    echo $(( $(now_ms) + $(fmt 0 "$1 / $rate * 1500 + 15000") ))
}
# wait_due DUE: sleep until 2.5 s after DUE (the spread is 2 s).
wait_due() { local d=$(( $1 + 2500 - $(now_ms) )); [ "$d" -le 0 ] || sleep "$(fmt 3 "$d / 1000")"; }
# fired NAME T0: first and last delivery after T0, ms.
fired() {
    R[$1.first]=$(( $(c "$1" first_recv_ms) - $2 ))
    R[$1.last]=$(( $(c "$1" last_recv_ms) - $2 ))
}
if [ "$N_RESTART" -gt 0 ]; then
    n=$N_RESTART
    if [ "$QQ" = 1 ]; then
        k=q-restart TAG=$((TAG + 1))
        say "== $k: a quorum queue holds $n due soon; the node restarts across their due time"
        fresh_node
        "$LR" declare --uri "$URI" "x:$QQ_EX" "q:$QQ_Q:type=quorum" "b:$QQ_Q:$QQ_EX:bench" >/dev/null
        due=$(due_after "$n")
        publish "$k" --mode deliverytime --exchange "$QQ_EX" --routing-key bench --count "$n" \
            --due-at "$due" --spread 2000 --tag "$TAG"
        [ "$(p "$k" end_ms)" -lt "$due" ] || FAILED+=("$k: still publishing at the due time")
        bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1
        wait_due "$due"
        t0=$(now_ms)
        bash "$RABBITMQ_SH" start "$BROKER_DIR" "$PORT" "$DIST" >/dev/null 2>&1
        R[$k.up]=$(( $(now_ms) - t0 ))
        consume "$k" "$n" "$TAG" --queue "$QQ_Q" --queue-type quorum --first-wait 600
        consumed "$k"
        fired "$k" "$t0"
        say "$k: up ${R[$k.up]} ms, first ${R[$k.first]} ms, last ${R[$k.last]} ms after the start command"
    fi
    for how in node kill; do
        k=b-restart-$how TAG=$((TAG + 1))
        say "== $k: delay-bridge holds $n due soon; $([ $how = node ] && echo "the node restarts" || echo "kill -9 of the bridge") across their due time"
        fresh_node
        new_bridge "$k"
        due=$(due_after "$n")
        publish "$k" --mode xdelay --exchange "$INGRESS_EX" --routing-key bench --count "$n" \
            --due-at "$due" --spread 2000 --tag "$TAG"
        wait_held "$n" 1800
        [ "$(now_ms)" -lt "$due" ] || FAILED+=("$k: not all logged before the due time")
        if [ $how = node ]; then
            bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1
            wait_due "$due"
            t0=$(now_ms)
            bash "$RABBITMQ_SH" start "$BROKER_DIR" "$PORT" "$DIST" >/dev/null 2>&1
            R[$k.up]=$(( $(now_ms) - t0 ))
            consume "$k" "$n" "$TAG" --first-wait 600
        else
            kill -9 "$BRIDGE_PID"; wait "$BRIDGE_PID" 2>/dev/null || true; BRIDGE_PID=""
            consume "$k" "$n" "$TAG" --first-wait 600
            wait_due "$due"
            t0=$(now_ms)
            bridge_launch
            R[$k.up]=-
        fi
        consumed "$k"
        fired "$k" "$t0"
        say "$k: first ${R[$k.first]} ms, last ${R[$k.last]} ms after the start command"
        bridge_stop
    done
fi

# ---------------------------------------------------------------- report
v() { printf '%s' "${R[$1]:--}"; }
hrow() { printf '| %-15s | %-20s | %-26s | %-52s | %14s |\n' "$BROKER_VSN" "$@"; }
{
    echo
    echo "Holding and restarting on $BROKER_VSN, delay-bridge built $BRIDGE_BUILT, $(nproc) CPUs$([ "$QQ" = 1 ] || echo "; $QQ_NAME: $QQ_WHY")"
    echo
    printf '| %-15s | %-20s | %-26s | %-52s | %14s |\n' broker "delays" scenario figure value
    printf '|%s|%s|%s|%s|%s|\n' ----------------- ---------------------- ---------------------------- \
        ------------------------------------------------------ ---------------:
    for size in ${SIZES//,/ }; do
        for n in ${COUNTS//,/ }; do
            sc="hold $n x $size B"
            b=b-$size-$n q=q-$size-$n
            hrow delay-bridge "$sc" "accept rate, msg/s" "$(p "$b" rate)"
            hrow delay-bridge "$sc" "bridge RSS per held message, B" "$(v "$b.bridge_rss")"
            hrow delay-bridge "$sc" "bridge engine RAM per held message, B (/stats)" "$(v "$b.bridge_ram")"
            hrow delay-bridge "$sc" "bridge WAL on disk per held message, B" "$(v "$b.wal")"
            hrow delay-bridge "$sc" "broker RSS per held message, B" "$(v "$b.node_rss")"
            hrow delay-bridge "$sc" "broker erlang:memory per held message, B" "$(v "$b.node_mem")"
            hrow delay-bridge "$sc" "broker disk per held message, B" "$(v "$b.node_disk")"
            hrow delay-bridge "$sc" "RAM per held message, bridge + broker, B" "$(v "$b.total_ram")"
            hrow delay-bridge "$sc" "broker RSS at the end, MiB" "$(v "$b.node_rss_mib")"
            if [ "$PLUGIN" = 1 ]; then
                pk=p-$size-$n
                hrow "$PLUGIN_NAME" "$sc" "accept rate, msg/s" "$(p "$pk" rate)"
                hrow "$PLUGIN_NAME" "$sc" "broker RSS per held message, B" "$(v "$pk.node_rss")"
                hrow "$PLUGIN_NAME" "$sc" "broker erlang:memory per held message, B" "$(v "$pk.node_mem")"
                hrow "$PLUGIN_NAME" "$sc" "broker disk per held message, B" "$(v "$pk.node_disk")"
                hrow "$PLUGIN_NAME" "$sc" "broker RSS at the end, MiB" "$(v "$pk.node_rss_mib")"
            fi
            [ "$QQ" = 1 ] || continue
            hrow "$QQ_NAME" "$sc" "accept rate, msg/s" "$(p "$q" rate)"
            hrow "$QQ_NAME" "$sc" "broker RSS per held message, B" "$(v "$q.node_rss")"
            hrow "$QQ_NAME" "$sc" "broker erlang:memory per held message, B" "$(v "$q.node_mem")"
            hrow "$QQ_NAME" "$sc" "broker disk per held message, B" "$(v "$q.node_disk")"
            hrow "$QQ_NAME" "$sc" "RAM per held message, broker, B" "$(v "$q.total_ram")"
            hrow "$QQ_NAME" "$sc" "broker RSS at the end, MiB" "$(v "$q.node_rss_mib")"
        done
    done
    if [ "$N_RESTART" -gt 0 ]; then
        sc="restart, $N_RESTART due"
        if [ "$QQ" = 1 ]; then
            hrow "$QQ_NAME" "$sc" "node restart: start -> node up, ms" "$(v q-restart.up)"
            hrow "$QQ_NAME" "$sc" "node restart: start -> first / last fired, ms" "$(v q-restart.first) / $(v q-restart.last)"
        fi
        hrow delay-bridge "$sc" "node restart: start -> node up, ms" "$(v b-restart-node.up)"
        hrow delay-bridge "$sc" "node restart: start -> first / last fired, ms" "$(v b-restart-node.first) / $(v b-restart-node.last)"
        hrow delay-bridge "$sc" "kill -9 of the bridge: start -> first / last fired, ms" "$(v b-restart-kill.first) / $(v b-restart-kill.last)"
    fi
    echo
    for size in ${SIZES//,/ }; do
        for n in ${COUNTS//,/ }; do
            line="summary, $BROKER_VSN, hold $n x $size B: delay-bridge RAM $(v "b-$size-$n.total_ram") B/msg (bridge $(v "b-$size-$n.bridge_rss"), broker $(v "b-$size-$n.node_rss")), disk $(v "b-$size-$n.wal") B/msg"
            [ "$QQ" = 1 ] && line+="; $QQ_NAME RAM $(v "q-$size-$n.total_ram") B/msg, disk $(v "q-$size-$n.node_disk") B/msg"
            [ "$PLUGIN" = 1 ] && line+="; $PLUGIN_NAME RAM $(v "p-$size-$n.total_ram") B/msg, erlang:memory $(v "p-$size-$n.node_mem") B/msg, disk $(v "p-$size-$n.node_disk") B/msg"
            echo "$line"
        done
    done
} | tee "$WORK/report.txt"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}" >&2
    exit 1
fi
say "$BROKER_VSN: every message held and fired"
exit 0
