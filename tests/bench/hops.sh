#!/usr/bin/env bash
# hops.sh -- what a delayed message costs the broker, hop by hop, on each
# broker of the matrix; on RabbitMQ 4.0 the delayed-message plugin beside.
#
#   tests/bench/hops.sh [--count N] [--variants base,cqv2,quorum,...] [--smoke] [--keep]
#
#   --count N     messages per phase (default 100000)
#   --variants    comma-separated, each on a fresh broker (below; default base)
#   --smoke       2000 per phase, shorter margins: for CI (ctest bench.hops.smoke)
#   --keep        keep the work directory (configs, logs, WALs, summaries)
#
# A delayed message crosses the broker twice; an undelayed one once. This
# takes the two paths apart into phases that run one at a time, on a
# broker of their own, and charges each phase the broker's CPU (user +
# system of every process in its session, /proc) less what the broker burns
# idle over the same time (measured first, a few seconds of nothing).
#
# Streaming -- each hop's consumer attached, as under the steady load (the
# figures the performance goals are about):
#     S0   plain hop: publish N to bench.target, a consumer with automatic
#          acks on bench.out takes them as they come (run.sh's ceiling)
#     S0m  the same, the consumer acking the way delay-bridge acks its
#          ingress (prefetch 1000, one multiple ack per 50 or when quiet);
#          then the same through a quorum queue and through a stream: what
#          the bridge's ingress hop would cost the broker on each
#     SI   ingress hop: publish N with x-delay to the ingress exchange while
#          the bridge runs; until it logged, fsynced and acked all N
#     ST   target hop: the N fall due together (all held well before); the
#          bridge publishes them, a consumer takes them: until it has all
#   delayed / plain = (SI + ST) / S0, the issue's "<= 2.3x".
#     SP   the plugin (RabbitMQ 4.0 only, below), the bridge stopped: SI and
#          ST's schedule through the plugin's exchange bench.plugin (type
#          x-delayed-message, x-delayed-type direct, bench.out bound with
#          key bench), a consumer with automatic acks on bench.out attached
#          throughout; N published with x-delay, all due together (within
#          100 ms) once the publishing is done. Charged as SI and ST are, in
#          two windows: SPI from the first publish to the last confirm (the
#          plugin has written every message to its Mnesia table, as SI ends
#          when the bridge acked all), SPT from the due time until the
#          consumer has all N. SP = SPI + SPT; the plugin runs inside the
#          broker, so all of it is broker CPU.
#   plugin / plain = SP / S0, beside delayed / plain. The broker's CPU
#   between the end of SI (SPI) and the due time is printed too, not
#   counted in either.
#
# Backlog -- each hop alone, the next one not running (what a queue that
# fills costs; a classic queue then writes every message to disk):
#     P1 accept, nobody consuming; P1b the same with the headers and the
#     mandatory flag of the bridge's republish (load_publish --like-bridge);
#     P2 a consumer drains it, automatic acks; P2m the same, acked as the
#     bridge acks; D1 publish with x-delay, the bridge stopped; D2 the
#     bridge starts and takes all N; D3 they fall due, nobody consumes the
#     target: until /stats confirmed = N; D4 a consumer drains bench.out.
#
# It prints, per variant, µs of broker CPU per message for each phase (the
# bridge's own CPU in brackets where it runs) and the ratios, every line
# and table naming the broker ("RabbitMQ 4.0.5", as the node names itself).
# The variants are the levers of the performance issue, each alone, on a
# fresh broker:
#
#   base       defaults: classic queues (version 1 on RabbitMQ 3.10-3.12)
#   cqv2       the broker's classic_queue.default_version = 2: every classic
#              queue, ingress, target and the plain hop's, is version 2 (the
#              default from RabbitMQ 3.13). On 4.x skipped, a line saying
#              why: classic queues are version 2 only there, so it is base
#              (4.0.5 and 4.3.6 accept the key and change nothing; "= 1"
#              stops the node from booting)
#   quorum     the route's ingress queue is a quorum queue (one node)
#   cqv2q      both: a quorum ingress, every classic queue version 2 (on
#              4.x skipped: the same as quorum)
#   stream     the route's ingress is a stream (queue_type "stream")
#   cqv2s      a stream ingress, every classic queue version 2 (on 4.x
#              skipped: the same as stream)
#   prefetch   the route's prefetch 5000 instead of 1000
#   window     the route's max_inflight 5000 instead of 1000
#   NAME=JSON  any other route keys, e.g. 'p200={"prefetch": 200}'
#
# Broker: DB_RABBITMQ (3.10, 4.0, 4.3; default 3.10) picks it
#   (tests/integration/broker.sh), its own node on 127.0.0.1:${BENCH_PORT:-5696}
#   (distribution port ${BENCH_DIST_PORT:-25696}), state in
#   ${BENCH_BROKER_DIR:-$BUILD_DIR/bench-hops-rabbitmq}, wiped per variant.
# The plugin: on RabbitMQ 4.0 every variant's node starts with the
#   delayed-message plugin 4.0.7 enabled (tests/bench/plugin.sh, as run.sh
#   and ontime.sh take it: built by tests/integration/test_plugin_compat.py
#   under ${DB_PLUGIN_CACHE:-/var/cache/delay-bridge/plugin-4.0.7}; nothing
#   built here) and SP runs. Elsewhere -- 3.10, 4.3 (no Mnesia), the plugin
#   not built, BENCH_PLUGIN=0 -- a line says why SP is absent, and that is
#   no failure.
# BUILD_DIR, BENCH_BRIDGE_BIN, BENCH_TOOLS_DIR, BENCH_TMP as in run.sh.
#
# Exit 0 when every message arrived in every variant that ran, 1 when not,
# 2 on a usage or setup error, 77 without rabbitmq-server (or when this
# machine cannot run DB_RABBITMQ's broker). It asserts on no time or ratio.
set -Eeuo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

N=100000 VARIANTS=base KEEP=0 MIN_MARGIN_MS=20000
say() { printf '[hops %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --count) [ $# -ge 2 ] || die "--count needs a number"; N=$2; shift 2 ;;
    --variants) [ $# -ge 2 ] || die "--variants needs a list"; VARIANTS=$2; shift 2 ;;
    --smoke) N=2000 MIN_MARGIN_MS=8000; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
    esac
done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "--count $N: expected a positive integer"
IFS=, read -ra vs <<<"$VARIANTS"
[ ${#vs[@]} -gt 0 ] || die "--variants is empty"
for v in "${vs[@]}"; do
    case "$v" in
    base|cqv2|quorum|cqv2q|stream|cqv2s|prefetch|window) ;;
    ?*=*) jq -e 'type == "object"' <<<"${v#*=}" >/dev/null 2>&1 || die "variant $v: expected NAME=JSON, a JSON object of route keys" ;;
    *) die "unknown variant $v (--help)" ;;
    esac
done

# get, now_ms, calc, fmt, free_port, proc_cpu_ms, session_cpu_ms, ratio, bench_preflight
. "$HERE/common.sh"
bench_preflight load_consume
CONS=$TOOLS/load_consume
# consume, consumed, publish, bridge_*, broker_start, bench_setup, bench_traps, wait_ready;
# c, p, srow, lat3, plus (the report)
. "$HERE/harness.sh"
bench_setup hops 5696 bench-hops-rabbitmq
BRIDGE_PID="" CONS_PID="" HTTP_PORT="" BROKER_SID="" FAILED=() SKIPPED=()
declare -A R
# The broker as every report line names it: "RabbitMQ 4.0.5", from the
# package here, then from the node's own log once it runs (broker_start).
BROKER_VSN=$(sed -E 's/^(RabbitMQ [0-9]+(\.[0-9]+)*).*/\1/' <<<"${BROKER_DESC:-RabbitMQ ?}")

# PLUGIN, PLUGIN_WHY, PLUGIN_NAME, PLUGIN_EX, plugin_decide, plugin_check_started
. "$HERE/plugin.sh"

bench_traps

stats() { curl -sf "http://127.0.0.1:$HTTP_PORT/stats" | jq -r "$1"; }

# Idle CPU of the broker: idle_rate (common.sh), measured per variant, subtracted per phase.
# phase_begin; ... ; phase_end KEY: broker µs per message (idle removed) into R[KEY].
phase_begin() { P_CPU=$(session_cpu_ms "$BROKER_SID") P_T=$(now_ms) P_BR=$([ -n "$BRIDGE_PID" ] && proc_cpu_ms "$BRIDGE_PID" || echo 0); }
phase_end() {
    local dt=$(( $(now_ms) - P_T ))
    R[$1]=$(fmt 1 "(($(session_cpu_ms "$BROKER_SID") - $P_CPU) - $IDLE * $dt / 1000.0) * 1000.0 / $N")
    R[$1.s]=$(fmt 2 "$dt / 1000.0")
    [ -z "$BRIDGE_PID" ] || R[$1.bridge]=$(fmt 1 "($(proc_cpu_ms "$BRIDGE_PID") - $P_BR) * 1000.0 / $N")
}
wait_stat() { # wait_stat JQ N TIMEOUT_S
    local deadline=$((SECONDS + $3)) v=0
    while [ "$SECONDS" -lt "$deadline" ]; do
        v=$(stats "$1" 2>/dev/null || echo 0)
        [ "${v:-0}" -ge "$2" ] && return 0
        sleep 0.05
    done
    FAILED+=("$BROKER_VSN $VAR: $1 = $v of $2 within $3 s"); return 1
}
drain_bg() { # drain_bg NAME TAG [consumer options]: a consumer in the background, ready
    local name=$1 tag=$2
    shift 2
    rm -f "$WORK/$name.ready"
    "$CONS" --uri "$URI" --queue bench.out --count "$N" --tag "$tag" --idle 20 \
        --ready-file "$WORK/$name.ready" "$@" >"$WORK/$name.consume" 2>>"$WORK/$name.err" &
    CONS_PID=$!
    wait_ready "$name" "$CONS_PID" "$WORK/$name.err"
}
drain_wait() { # drain_wait NAME
    wait "$CONS_PID" || FAILED+=("$BROKER_VSN $VAR $1: $(get "$WORK/$1.consume" unique) of $N arrived")
    CONS_PID=""
}
drain() { drain_bg "$@"; drain_wait "$1"; } # drain NAME TAG [consumer options]: in the foreground
pub() { # pub NAME [publisher options]
    local name=$1
    shift
    "$PUB" --uri "$URI" --count "$N" "$@" >"$WORK/$name.publish" 2>>"$WORK/$name.err" ||
        { cat "$WORK/$name.err" >&2; die "publisher $name failed"; }
}
# due_in MS_PER_100K: a due time that many ms per 100k messages from now, MIN_MARGIN_MS at least.
due_in() {
    local margin=$(( N * $1 / 100000 ))
    [ "$margin" -ge "$MIN_MARGIN_MS" ] || margin=$MIN_MARGIN_MS
    echo $(( $(now_ms) + margin ))
}
# Classic queues are version 2 only from RabbitMQ 4.0: classic_queue.default_version = 2
# is then what every node does anyway (4.0.5 and 4.3.6 accept the key and change nothing).
cq_v2_only() {
    local v=${BROKER_VSN#RabbitMQ }
    [[ "$v" =~ ^[0-9]+ ]] || v=${DB_RABBITMQ:-3.10}
    [ "${v%%.*}" -ge 4 ]
}

# same_on_v2_only NAME: the variant a cqv2 one is where classic queues are version 2 only.
same_on_v2_only() { case "$1" in cqv2) echo base ;; cqv2q) echo quorum ;; cqv2s) echo stream ;; esac; }

# run_variant NAME: one variant on a fresh broker.
run_variant() {
    local name=$1 route_extra="" conf="" wal
    case "$name" in
    base) ;;
    cqv2) conf="classic_queue.default_version = 2" ;;
    quorum) route_extra=', "queue_type": "quorum"' ;;
    cqv2q) conf="classic_queue.default_version = 2"; route_extra=', "queue_type": "quorum"' ;;
    stream) route_extra=', "queue_type": "stream"' ;;
    cqv2s) conf="classic_queue.default_version = 2"; route_extra=', "queue_type": "stream"' ;;
    prefetch) route_extra=', "prefetch": 5000' ;;
    window) route_extra=', "max_inflight": 5000' ;;
    *=*) route_extra=", $(jq -c . <<<"${name#*=}" | sed 's/^{//; s/}$//')"; name=${name%%=*} ;;
    *) die "unknown variant $name" ;;
    esac
    VAR=$name
    DB_RABBITMQ_CONF_EXTRA=$conf broker_start >&2
    # bench.target -> bench.out, declared (and emptied) by the consumer once.
    "$CONS" --uri "$URI" --queue bench.out --exchange bench.target --routing-key bench --count 1 \
        --purge --first-wait 1 >/dev/null 2>&1 || true
    wal=$WORK/wal-$name
    rm -rf "$wal"
    mkdir -p "$wal"
    HTTP_PORT=$(free_port)
    cat >"$WORK/$name.json" <<JSON
{ "broker": { "uri": "$URI" }, "wal": { "dir": "$wal", "fsync": true },
  "http": { "listen": "127.0.0.1:$HTTP_PORT" }, "log": { "level": "info" },
  "routes": [ { "name": "bench", "ingress_exchange": "bench.delayed", "ingress_queue": "bench.delayed.q",
                "target_exchange": "bench.target"$route_extra } ] }
JSON
    start_bridge() {
        "$BRIDGE" --config "$WORK/$name.json" >>"$WORK/$name.bridge.log" 2>&1 &
        BRIDGE_PID=$!
        local deadline=$((SECONDS + 60))
        until curl -sf -o /dev/null "http://127.0.0.1:$HTTP_PORT/readyz"; do
            kill -0 "$BRIDGE_PID" 2>/dev/null || { tail -5 "$WORK/$name.bridge.log" >&2; die "delay-bridge exited"; }
            [ "$SECONDS" -lt "$deadline" ] || die "delay-bridge not ready"
            sleep 0.05
        done
    }
    start_bridge # declares the ingress exchange and queue
    kill -TERM "$BRIDGE_PID"; wait "$BRIDGE_PID" || true; BRIDGE_PID=""
    sleep 2
    idle_rate
    say "$BROKER_VSN $name: broker idle ${IDLE} ms CPU/s; $N x 256 B per phase"

    # Backlog: each hop alone, the next one not running.
    phase_begin; pub p1 --mode plain --exchange bench.target --routing-key bench --tag 1; phase_end "$name.P1"
    phase_begin; drain p2 1; phase_end "$name.P2"
    phase_begin; pub p1b --mode plain --exchange bench.target --routing-key bench --tag 2 --like-bridge
    phase_end "$name.P1b"
    drain p1b 2
    pub p2m --mode plain --exchange bench.target --routing-key bench --tag 3
    phase_begin; drain p2m 3 --manual-ack 50 --prefetch 1000; phase_end "$name.P2m"

    # Due together, well after D1 and D2 (margin: 40 s per 100k, at least 20 s; 8 s in --smoke).
    local due
    due=$(due_in 40000)
    phase_begin; pub d1 --mode xdelay --exchange bench.delayed --routing-key bench --tag 4 \
        --due-at "$due" --spread 100; phase_end "$name.D1"
    phase_begin; start_bridge; wait_stat '.routes[0].received' "$N" 300 || true; phase_end "$name.D2"
    [ "$(now_ms)" -lt "$due" ] || FAILED+=("$BROKER_VSN $name: the bridge took them after the due time: raise the margin")
    while [ "$(now_ms)" -lt "$due" ]; do sleep 0.01; done
    phase_begin; wait_stat '.routes[0].confirmed' "$N" 300 || true; phase_end "$name.D3"
    phase_begin; drain d4 4; phase_end "$name.D4"

    # Streaming: the next hop takes each message as it comes (the steady load).
    drain_bg s0 5
    phase_begin; pub s0 --mode plain --exchange bench.target --routing-key bench --tag 5
    drain_wait s0; phase_end "$name.S0"
    drain_bg s0m 6 --manual-ack 50 --prefetch 1000
    phase_begin; pub s0m --mode plain --exchange bench.target --routing-key bench --tag 6
    drain_wait s0m; phase_end "$name.S0m"
    # The same through a quorum queue and a stream (what such an ingress would cost).
    for qt in quorum stream; do
        drain_bg "s0$qt" 6 --queue "bench.$qt" --exchange "bench.$qt.x" --routing-key bench \
            --queue-type "$qt" --manual-ack 50 --prefetch 1000
        phase_begin; pub "s0$qt" --mode plain --exchange "bench.$qt.x" --routing-key bench --tag 6
        drain_wait "s0$qt"; phase_end "$name.S0$qt"
    done
    due=$(due_in 15000)
    local r0
    r0=$(stats '.routes[0].received')
    drain_bg st 7
    phase_begin; pub si --mode xdelay --exchange bench.delayed --routing-key bench --tag 7 \
        --due-at "$due" --spread 100
    wait_stat '.routes[0].received' $((r0 + N)) 300 || true; phase_end "$name.SI"
    [ "$(now_ms)" -lt "$due" ] || FAILED+=("$BROKER_VSN $name: streaming: the bridge took them after the due time")
    phase_begin
    while [ "$(now_ms)" -lt "$due" ]; do sleep 0.01; done
    phase_end "$name.gapB"
    phase_begin; drain_wait st; phase_end "$name.ST"
    kill -TERM "$BRIDGE_PID"; wait "$BRIDGE_PID" || true; BRIDGE_PID=""

    # The plugin, the bridge stopped: SI and ST's schedule through its exchange.
    # The consumer declares bench.plugin and binds bench.out to it. The margin is
    # D1's (40 s per 100k): the plugin accepts slower the more it holds (run.sh).
    if [ "$PLUGIN" = 1 ]; then
        drain_bg sp 8 --exchange "$PLUGIN_EX" --routing-key bench --exchange-type x-delayed-message \
            --delayed-type direct
        due=$(due_in 40000)
        phase_begin; pub sp --mode xdelay --exchange "$PLUGIN_EX" --routing-key bench --tag 8 \
            --due-at "$due" --spread 100; phase_end "$name.SPI"
        [ "$(now_ms)" -lt "$due" ] ||
            FAILED+=("$BROKER_VSN $name: $PLUGIN_NAME: the last confirm came after the due time: raise the margin")
        phase_begin
        while [ "$(now_ms)" -lt "$due" ]; do sleep 0.01; done
        phase_end "$name.gapP"
        phase_begin; drain_wait sp; phase_end "$name.SPT"
        R[$name.SP]=$(fmt 1 "${R[$name.SPI]} + ${R[$name.SPT]}")
    fi

    R[$name.bplain]=$(fmt 1 "${R[$name.P1]} + ${R[$name.P2]}")
    R[$name.bdelayed]=$(fmt 1 "${R[$name.D1]} + ${R[$name.D2]} + ${R[$name.D3]} + ${R[$name.D4]}")
    R[$name.delayed]=$(fmt 1 "${R[$name.SI]} + ${R[$name.ST]}")
    R[$name.plain]=${R[$name.S0]}
    R[$name.idle]=$IDLE
    say "$BROKER_VSN $name: backlog P1 ${R[$name.P1]} P1b ${R[$name.P1b]} P2 ${R[$name.P2]} P2m ${R[$name.P2m]} | D1 ${R[$name.D1]} D2 ${R[$name.D2]} D3 ${R[$name.D3]} D4 ${R[$name.D4]}; streaming S0 ${R[$name.S0]} S0m ${R[$name.S0m]} SI ${R[$name.SI]} ST ${R[$name.ST]}$(
        [ -z "${R[$name.SP]:-}" ] || echo " SP ${R[$name.SP]} (SPI ${R[$name.SPI]} + SPT ${R[$name.SPT]})") us/msg"
    say "$BROKER_VSN $name: $(summary_of "$name" why)"
}
# summary_of NAME [WHY]: the variant's ratios, delay-bridge's and the plugin's
# (with WHY, why the plugin's is absent when it is).
summary_of() {
    local n=$1 line
    line="delayed / plain = (SI + ST) / S0 = $(ratio "${R[$n.delayed]}" "${R[$n.plain]}")"
    line+=" (SI ${R[$n.SI]} + ST ${R[$n.ST]} over S0 ${R[$n.S0]} us)"
    if [ -n "${R[$n.SP]:-}" ]; then
        line+="; $PLUGIN_NAME: plugin / plain = SP / S0 = $(ratio "${R[$n.SP]}" "${R[$n.plain]}")"
        line+=" (SPI ${R[$n.SPI]} + SPT ${R[$n.SPT]} over S0 ${R[$n.S0]} us),"
        line+=" plugin / delay-bridge = SP / (SI + ST) = $(ratio "${R[$n.SP]}" "${R[$n.delayed]}")"
    elif [ -n "${2:-}" ]; then
        line+="; $PLUGIN_NAME: SP $PLUGIN_WHY"
    fi
    printf '%s' "$line"
}

say "machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg); delay-bridge $(date -u -r "$BRIDGE" +%FT%TZ)"
say "work directory $WORK, broker state $BROKER_DIR, port $PORT"
plugin_decide
SP_ROWS=$PLUGIN
if [ "$PLUGIN" = 1 ]; then
    say "$PLUGIN_NAME: runs on this node, phase SP through exchange $PLUGIN_EX (RABBITMQ_PLUGINS_DIR=$RABBITMQ_PLUGINS_DIR)"
else
    say "$PLUGIN_NAME: $PLUGIN_WHY"
fi
names=()
for v in "${vs[@]}"; do
    same=$(same_on_v2_only "$v")
    if [ -n "$same" ] && cq_v2_only; then
        SKIPPED+=("$v: skipped, the same as $same there: classic queues are version 2 only from RabbitMQ 4.0 (classic_queue.default_version = 2 changes nothing; 1 is refused)")
        say "$BROKER_VSN ${SKIPPED[-1]}"
        continue
    fi
    run_variant "$v"
    names+=("${v%%=*}")
done

echo
echo "Broker CPU per message on $BROKER_VSN, µs (idle removed), $N x 256 B per phase; bridge CPU in brackets$(
    [ ${#names[@]} -gt 0 ] || echo ": no variant ran (skipped, below)")"
if [ ${#names[@]} -gt 0 ]; then
    printf '| %-42s |' "phase ($BROKER_VSN)"; for n in "${names[@]}"; do printf ' %14s |' "$n"; done; echo
    printf '|%s|' "$(printf -- '-%.0s' $(seq 44))"; for _ in "${names[@]}"; do printf -- '%s|' "$(printf -- '-%.0s' $(seq 15)):"; done; echo
    row() { printf '| %-42s |' "$1"; for n in "${names[@]}"; do
            local v=${R[$n.$2]:--} b=${R[$n.$2.bridge]:-}
            [ -z "$b" ] || v="$v [$b]"; printf ' %14s |' "$v"; done; echo; }
    rrow() { printf '| %-42s |' "$1"; for n in "${names[@]}"; do printf ' %14s |' "$(ratio "${R[$n.$2]:--}" "${R[$n.$3]:--}")"; done; echo; }
    echo "| **streaming** (each hop's consumer attached: the steady load) |"
    row "S0 plain hop (the ceiling: publish -> auto-ack consumer)" S0
    row "S0m plain hop, consumer acks as the bridge" S0m
    row "  the same through a quorum queue" S0quorum
    row "  the same through a stream" S0stream
    row "SI ingress hop: publish -> bridge logs, fsyncs, acks" SI
    row "ST target hop: bridge publishes -> consumer" ST
    row "  between SI and the due time (not counted)" gapB
    row "delayed message (SI + ST)" delayed
    rrow "**delayed / plain = (SI + ST) / S0 (goal <= 2.3x)**" delayed plain
    if [ "$SP_ROWS" = 1 ]; then
        row "SPI $PLUGIN_NAME accept: publish -> confirmed" SPI
        row "SPT $PLUGIN_NAME fire: due -> consumer has all" SPT
        row "  between SPI and the due time (not counted)" gapP
        row "SP $PLUGIN_NAME delayed message (SPI + SPT)" SP
        rrow "**plugin / plain = SP / S0**" SP plain
        rrow "plugin / delay-bridge = SP / (SI + ST)" SP delayed
    fi
    echo "| **backlog** (each hop alone, its consumer not running) |"
    row "P1 plain: accept" P1
    row "P1b plain: accept, bridge's headers + mandatory" P1b
    row "P2 plain: deliver (auto ack)" P2
    row "P2m plain: deliver (acked as the bridge)" P2m
    row "D1 ingress: accept" D1
    row "D2 ingress: deliver + ack (bridge)" D2
    row "D3 target: publish + confirm + route" D3
    row "D4 target: deliver (auto ack)" D4
    row "plain hop (P1 + P2)" bplain
    row "delayed message (D1 + .. + D4)" bdelayed
    rrow "delayed / plain" bdelayed bplain
    row "broker idle, ms of CPU per s" idle
fi
echo
for n in "${names[@]}"; do echo "summary, $BROKER_VSN, $n: $(summary_of "$n")"; done
for s in "${SKIPPED[@]}"; do echo "summary, $BROKER_VSN, $s"; done
[ "$SP_ROWS" = 1 ] || echo "summary, $BROKER_VSN, $PLUGIN_NAME: SP $PLUGIN_WHY"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}" >&2
    exit 1
fi
if [ ${#names[@]} -gt 0 ]; then
    say "$BROKER_VSN: every message of every phase arrived (${names[*]})"
else
    say "$BROKER_VSN: no variant ran (${#SKIPPED[@]} skipped)"
fi
exit 0
