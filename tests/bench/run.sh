#!/bin/bash
# run.sh -- delay-bridge, the broker alone, the TTL + dead-letter recipe and,
# on RabbitMQ 4.0, the delayed-message plugin 4.0.7, measured side by side in
# one command on one broker (tests/bench/README.md).
#
#   tests/bench/run.sh [--scenarios steady,burst,hold,restart,mixed,replicate] [--smoke]
#                      [--count N] [--big] [--perf] [--keep]
#
#   --scenarios  which bridge scenarios to run (default: all six). The
#                ceiling (plain publish -> consume) always runs: every ratio
#                is against it. steady also runs the TTL + DLX baseline;
#                mixed runs its own mixed-size ceiling; restart needs the
#                messages hold puts in (it does the hold load itself if hold
#                is not listed); replicate runs the steady load twice through
#                fresh bridges, without and with wal.replicate (a stream new
#                to the run), and prints the ratio with / without.
#   --smoke      tiny sizes (2k messages, 20k held), about 35 s: for CI (the
#                plugin's two 2k loads included, when it runs)
#   --count N    N messages for the ceiling, steady, mixed and replicate,
#                2N for burst (default 100k, 200k; --smoke 2k, 2k)
#   --big        hold 10M messages instead of 1M (about 3.5 GiB of WAL)
#   --perf       perf record -g the bridge during steady (WORK/perf.data, kept)
#   --keep       keep the work directory (configs, logs, WALs, summaries)
#
# It builds nothing. Binaries come from the build tree:
#   BUILD_DIR          default build (relative to the current directory, else
#                      to the repository root)
#   BENCH_BRIDGE_BIN   default $BUILD_DIR/delay-bridge
#   BENCH_TOOLS_DIR    where load_publish and load_consume are, default $BUILD_DIR/tests
# Broker: its own RabbitMQ via tests/integration/rabbitmq.sh, fresh state,
#   127.0.0.1:${BENCH_PORT:-5695} (distribution port ${BENCH_DIST_PORT:-25695}),
#   state in ${BENCH_BROKER_DIR:-$BUILD_DIR/bench-rabbitmq}; stopped at the end.
# Burst window: BENCH_BURST_SPREAD, ms (default 2000; 1000 with --smoke): how
#   close together burst's messages fall due. A narrow one (100) makes each
#   millisecond's messages lie far apart in the WAL: the read-ahead's worst case.
# Route: BENCH_ROUTE, a JSON object of route keys added to the bridge's one
#   route, e.g. BENCH_ROUTE='{"queue_type": "stream"}' for a stream ingress.
#   With a stream ingress every bridge of the run (steady, replicate's off
#   side, hold) gets an ingress exchange and stream of its own, named after
#   its WAL directory: a new WAL reads a stream from its first message, and
#   would read the earlier scenarios' messages again. The replicate
#   scenario's "on" side cannot run on a stream route (a config error).
# Stamps: BENCH_STAMP=1 makes the ingress publishers (steady, mixed, burst,
#   replicate) add header timestamp_in_ms, as RabbitMQ 3.12+ does with
#   message_interceptors.incoming.set_header_timestamp; with
#   BENCH_ROUTE='{"delay_from": "broker"}' the bridge counts from it.
# The plugin beside the bridge: with steady or burst listed, on RabbitMQ 4.0
#   (DB_RABBITMQ=4.0) the broker starts with the delayed-message plugin 4.0.7
#   enabled and the same loads (count, size, delays, confirm window, the same
#   load_publish and load_consume) go through an exchange bench.plugin of type
#   x-delayed-message (x-delayed-type direct, bench.out bound with key bench:
#   the route's target exchange and binding), the bridge stopped: rows
#   "plugin 4.0.7" of the side-by-side table. It takes the plugin as
#   tests/integration/test_plugin_compat.py builds it, from
#   ${DB_PLUGIN_CACHE:-/var/cache/delay-bridge/plugin-4.0.7}, and builds
#   nothing: without it the plugin's rows say why and the run goes on. On
#   3.10 they say it is not measured here; on 4.3 that it cannot run there
#   (Mnesia removed). BENCH_PLUGIN=0 leaves it out.
# RabbitMQ's own delays beside the bridge: with steady or burst listed, on a
#   node whose quorum queues delay (DB_RABBITMQ=qq-delay: rabbitmq-server's
#   qq-vNext, tests/integration/build_qq_delay.sh) the same loads go to
#   quorum queue bench.qout through exchange bench.qq with header
#   x-opt-delivery-time (quorumdelay.sh), after the broker alone through the
#   same quorum queue (its own ceiling): rows "quorum queue delay" and
#   "broker alone: quorum queue". Elsewhere a row says why not; BENCH_QQ=0
#   leaves it out.
# Work directory (configs, WALs, logs): a new directory under
#   ${BENCH_TMP:-/var/tmp} (the disk the WAL benchmarks use), removed at the end
#   unless --keep or --perf.
#
# Never asserts on a time. Exit 0 when every message arrived (and the hold
# scenario held them all), 1 when some did not, 2 on a usage or setup
# error, 77 when rabbitmq-server is not installed (skipped).
set -Eeuo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

say() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }

SCENARIOS=steady,burst,hold,restart,mixed,replicate
SMOKE=0 BIG=0 PERF=0 KEEP=0 COUNT=""
while [ $# -gt 0 ]; do
    case "$1" in
    --scenarios) [ $# -ge 2 ] || die "--scenarios needs a list"; SCENARIOS=$2; shift 2 ;;
    --scenarios=*) SCENARIOS=${1#*=}; shift ;;
    --smoke) SMOKE=1; shift ;;
    --count) [ $# -ge 2 ] || die "--count needs a number"; COUNT=$2; shift 2 ;;
    --count=*) COUNT=${1#*=}; shift ;;
    --big) BIG=1; shift ;;
    --perf) PERF=1; KEEP=1; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
for s in ${SCENARIOS//,/ }; do
    case "$s" in steady|burst|hold|restart|mixed|replicate) ;; *) die "unknown scenario $s" ;; esac
done
want() { [[ ",$SCENARIOS," == *",$1,"* ]]; }
[ -z "$COUNT" ] || [[ "$COUNT" =~ ^[1-9][0-9]*$ ]] || die "--count $COUNT: expected a positive integer"

# get, now_ms, calc, fmt, free_port, rss_kb, proc_cpu_ms, session_cpu_ms, ratio, bench_preflight
. "$HERE/common.sh"
bench_preflight load_consume
CONS=$TOOLS/load_consume

# consume, consumed, publish, bridge_*, broker_start, bench_setup, bench_traps, wait_ready;
# c, p, srow, lat3, plus (the report)
. "$HERE/harness.sh"
bench_setup bench 5695 bench-rabbitmq

# Sizes. Delays of steady and mixed are uniform in DELAY ms. A burst falls
# due MARGIN0 ms plus 1.5 times the time its publishing should take from now.
if [ "$SMOKE" = 1 ]; then
    N_CEIL=2000 N_STEADY=2000 N_BURST=2000 N_MIXED=2000 N_HOLD=20000
    DELAY=1000-3000 SPREAD=1000 MARGIN0=2000
else
    N_CEIL=100000 N_STEADY=100000 N_BURST=200000 N_MIXED=100000 N_HOLD=1000000
    DELAY=2000-6000 SPREAD=2000 MARGIN0=5000
fi
[ "$BIG" = 1 ] && N_HOLD=10000000
[ -z "$COUNT" ] || { N_CEIL=$COUNT N_STEADY=$COUNT N_MIXED=$COUNT N_BURST=$((2 * COUNT)); }
SPREAD=${BENCH_BURST_SPREAD:-$SPREAD}
HOLD_DELAY=3600000
RESTART_DELAY=50

# Topology: bench.target (direct) -> bench.out, routing key "bench".
TARGET_EX=bench.target
OUT_Q=bench.out
INGRESS_EX=bench.delayed
INGRESS_Q=bench.delayed.q
TTL_Q=bench.ttl

BRIDGE_PID="" CONS_PID="" PERF_PID="" PERF_ALL_PID="" HTTP_PORT="" FAILED=()
declare -A R     # results: R[scenario.figure]=value

# The broker as every report line names it: "RabbitMQ 4.0.5", from the
# package here, then from the node's own log once it runs.
BROKER_VSN=$(sed -E 's/^(RabbitMQ [0-9]+(\.[0-9]+)*).*/\1/' <<<"${BROKER_DESC:-RabbitMQ ?}")

# ---------------------------------------------------------------- the plugin: whether it runs
# The delayed-message plugin: PLUGIN=1 when it runs beside the bridge, else
# PLUGIN_WHY says why not, in the words of the report (plugin.sh).
. "$HERE/plugin.sh"
# QQ, QQ_WHY, QQ_NAME, qq_decide, qq_consume, qq_publish, qq_plain
. "$HERE/quorumdelay.sh"

# the perf recorders first, on any exit (bench_cleanup, harness.sh)
bench_cleanup_first() {
    for pid in $PERF_PID $PERF_ALL_PID; do kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
}
bench_traps

# ---------------------------------------------------------------- helpers

stats() { curl -sf "http://127.0.0.1:$HTTP_PORT/stats" >"$WORK/stats.json" && jq -r "$1" "$WORK/stats.json"; }
BROKER_SID=""
# cpu_mark NAME: remember the CPU counters; cpu_per_msg NAME N: us of CPU per
# message since the mark, broker and (when running) bridge.
cpu_mark() {
    R[$1.cpu0_broker]=$(session_cpu_ms "$BROKER_SID")
    R[$1.cpu0_bridge]=$([ -n "$BRIDGE_PID" ] && proc_cpu_ms "$BRIDGE_PID" || echo 0)
}
cpu_per_msg() {
    R[$1.broker_us]=$(fmt 1 "($(session_cpu_ms "$BROKER_SID") - ${R[$1.cpu0_broker]}) * 1000.0 / $2")
    if [ -n "$BRIDGE_PID" ]; then
        R[$1.bridge_us]=$(fmt 1 "($(proc_cpu_ms "$BRIDGE_PID") - ${R[$1.cpu0_bridge]}) * 1000.0 / $2")
    fi
}

# wait_received N TIMEOUT_S: until the route has logged and acked N deliveries; prints now_ms.
wait_received() {
    local n=$1 deadline=$((SECONDS + $2)) got=0
    while [ "$SECONDS" -lt "$deadline" ]; do
        got=$(stats '.routes[0].received' 2>/dev/null || echo 0)
        if [ "${got:-0}" -ge "$n" ]; then now_ms; return 0; fi
        sleep 0.1
    done
    FAILED+=("the bridge received $got of $n within $2 s")
    now_ms
}

# ---------------------------------------------------------------- broker

say "machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
say "work directory $WORK, broker state $BROKER_DIR, port $PORT"
say "delay-bridge: $BRIDGE_SRC (built $BRIDGE_BUILT), run from a copy in the work directory"
plugin_decide "$(want steady || want burst ||
    echo "absent: it runs the steady and burst loads, and neither is listed")"
if [ "$PLUGIN" = 1 ]; then
    say "$PLUGIN_NAME: runs beside the bridge on this node (the steady and burst loads through" \
        "exchange $PLUGIN_EX; RABBITMQ_PLUGINS_DIR=$RABBITMQ_PLUGINS_DIR)"
else
    say "$PLUGIN_NAME: $PLUGIN_WHY"
fi
qq_decide
if [ "$QQ" = 1 ] && ! want steady && ! want burst; then
    QQ=0 QQ_WHY="absent: it runs the steady and burst loads, and neither is listed"
fi
if [ "$QQ" = 1 ]; then
    say "$QQ_NAME: runs on this node (exchange $QQ_EX -> quorum queue $QQ_Q, header x-opt-delivery-time)"
else
    say "$QQ_NAME: $QQ_WHY"
fi
broker_start
R[load.before]=$(cut -d' ' -f1 /proc/loadavg)

# ---------------------------------------------------------------- ceiling

# ceiling NAME TAG COUNT [publisher options]: plain publish -> consume.
ceiling() {
    local name=$1 tag=$2 count=$3
    shift 3
    consume "$name" "$count" "$tag" --purge
    cpu_mark "$name"
    publish "$name" --mode plain --exchange "$TARGET_EX" --routing-key bench --count "$count" --tag "$tag" "$@"
    consumed "$name"
    cpu_per_msg "$name" "$count"
}

say "== ceiling: plain publish -> consume through one queue, $N_CEIL x 256 B"
ceiling ceiling 1 "$N_CEIL"
if want burst; then
    # What the bridge publishes when a burst falls due, published by the
    # broker alone's publisher: its headers (x-delay negated, the string id
    # x-delay-bridge-id) and mandatory, full speed, the burst's count: the
    # most the broker takes of that publish (hops.sh: the id costs it).
    say "== ceiling-like: the bridge's republish (headers, mandatory) -> consume, $N_BURST x 256 B"
    ceiling ceiling-like 13 "$N_BURST" --like-bridge
fi

# ---------------------------------------------------------------- TTL + DLX
if want steady; then
    say "== ttl-dlx: per-message TTL + dead-letter exchange, $N_STEADY x 256 B, delays $DELAY ms"
    consume ttl "$N_STEADY" 2 --purge
    cpu_mark ttl
    publish ttl --mode ttl --exchange "$TARGET_EX" --routing-key bench --ttl-queue "$TTL_Q" \
        --count "$N_STEADY" --delay "$DELAY" --tag 2
    consumed ttl
    cpu_per_msg ttl "$N_STEADY"
fi

# ---------------------------------------------------------------- the bridge

# run_bridge_load NAME TAG COUNT RECEIVED_BEFORE [publisher options]: consumer,
# publisher to the ingress exchange, and the time until the bridge logged all.
run_bridge_load() {
    local name=$1 tag=$2 count=$3 before=$4 t0 t1
    shift 4
    consume "$name" "$count" "$tag" --purge
    cpu_mark "$name"
    t0=$(now_ms)
    publish "$name" --mode xdelay --exchange "$INGRESS_EX" --routing-key bench --count "$count" --tag "$tag" \
        ${BENCH_STAMP:+--stamp} "$@"
    t1=$(wait_received $((before + count)) 600)
    R[$name.ingest_rate]=$(fmt 0 "$count / (($t1 - $t0) / 1000.0)")
    R[$name.ingest_done_ms]=$t1
    say "$name: the bridge logged all $count in $((t1 - t0)) ms (polled every 100 ms)"
}

if want steady || want burst || want mixed; then
    mkdir -p "$WORK/wal-steady"
    bridge_config "$WORK/wal-steady"
    bridge_launch
    bridge_ready
    say "delay-bridge pid $BRIDGE_PID, http 127.0.0.1:$HTTP_PORT"
    received=0
    if want steady; then
        say "== steady: $N_STEADY x 256 B through delay-bridge, delays $DELAY ms, full speed"
        if [ "$PERF" = 1 ]; then
            # The bridge with call graphs (DWARF unwinding: the build keeps no
            # frame pointers), and the whole machine without, to see the split
            # between the bridge, the broker (beam.smp) and the load tools.
            perf record --call-graph "${BENCH_PERF_CALLGRAPH:-dwarf,16384}" -F 999 -p "$BRIDGE_PID" \
                -o "$WORK/perf.data" >"$WORK/perf.log" 2>&1 &
            PERF_PID=$!
            perf record -a -F 999 -o "$WORK/perf-all.data" >"$WORK/perf-all.log" 2>&1 &
            PERF_ALL_PID=$!
            sleep 0.5
        fi
        c0=$(stats '.wal.commits') f0=$(stats '.wal.fsync.count')
        run_bridge_load steady 3 "$N_STEADY" "$received" --delay "$DELAY"
        consumed steady
        cpu_per_msg steady "$N_STEADY"
        if [ -n "$PERF_PID" ]; then
            kill -INT "$PERF_PID" "$PERF_ALL_PID"; wait "$PERF_PID" "$PERF_ALL_PID" || true
            PERF_PID="" PERF_ALL_PID=""
            say "perf data: $WORK/perf.data (perf report -i $WORK/perf.data --no-children)," \
                "$WORK/perf-all.data (perf report -i $WORK/perf-all.data --sort comm,dso)"
        fi
        R[steady.commits]=$(( $(stats '.wal.commits') - c0 ))
        R[steady.fsyncs]=$(( $(stats '.wal.fsync.count') - f0 ))
        R[steady.bridge_lat_mean_ms]=$(fmt 1 "$(stats '.routes[0].lateness | if .count > 0 then .sum_seconds / .count * 1000 else 0 end')")
        received=$((received + N_STEADY))
    fi
    if want burst; then
        rate=${R[steady.ingest_rate]:-5000}
        margin=$(fmt 0 "$N_BURST / $rate * 1500 + $MARGIN0")
        due_at=$(( $(now_ms) + margin ))
        say "== burst: $N_BURST x 256 B all due in [$margin, $((margin + SPREAD))] ms from now"
        run_bridge_load burst 4 "$N_BURST" "$received" --due-at "$due_at" --spread "$SPREAD"
        done_ms=${R[burst.ingest_done_ms]}
        if [ "$done_ms" -lt "$due_at" ]; then
            R[burst.held_before_due]=yes
        else
            R[burst.held_before_due]=no
            say "burst: NOTE the bridge logged the last message $((done_ms - due_at)) ms after the first due time"
        fi
        consumed burst
        cpu_per_msg burst "$N_BURST"
        received=$((received + N_BURST))
    fi
    if want mixed; then
        say "== mixed: $N_MIXED x (256 B | 4 KiB), ceiling then delay-bridge, delays $DELAY ms"
        ceiling ceiling-mixed 5 "$N_MIXED" --mix
        run_bridge_load mixed 6 "$N_MIXED" "$received" --delay "$DELAY" --mix
        consumed mixed
        cpu_per_msg mixed "$N_MIXED"
        received=$((received + N_MIXED))
    fi
    bridge_stop
fi

# ---------------------------------------------------------------- the plugin beside
# The steady and burst loads again, the bridge stopped, through the plugin's
# exchange on the same node: the same publisher and consumer, counts, sizes,
# delays and confirm window; only the exchange they go through differs. The
# exchange is the route's target made delayed: type x-delayed-message,
# x-delayed-type direct, bench.out bound to it with key bench (declared by
# the consumer; its --exchange comes after consume()'s own and wins).
# Accept means for each what its publisher confirm means: for the bridge,
# the message is in its durable ingress queue; for the plugin, its one
# gen_server has written it to its disc_copies Mnesia table (a dirty write:
# logged by Mnesia, not synced to disk before the confirm).
plugin_consume() {
    consume "$1" "$2" "$3" --purge --exchange "$PLUGIN_EX" --exchange-type x-delayed-message \
        --delayed-type direct
}
if [ "$PLUGIN" = 1 ] && want steady; then
    say "== plugin-steady: $N_STEADY x 256 B through the $PLUGIN_NAME's exchange $PLUGIN_EX, delays $DELAY ms, full speed"
    plugin_consume plugin-steady "$N_STEADY" 11
    cpu_mark plugin-steady
    publish plugin-steady --mode xdelay --exchange "$PLUGIN_EX" --routing-key bench --count "$N_STEADY" \
        --tag 11 --delay "$DELAY" ${BENCH_STAMP:+--stamp}
    consumed plugin-steady
    cpu_per_msg plugin-steady "$N_STEADY"
fi
# beside_burst NAME TAG STEADY WHERE CONSUME PUBLISH [publisher options]: the
# burst load for a system beside the bridge, as the bridge's: every message
# accepted before the first due time, the margin from that system's own
# steady accept rate (STEADY's), but 3 times the publishing time it gives
# instead of 1.5: the plugin accepts slower the more it holds (8.4k msg/s
# with 200k held, 19.9k in steady's run, 4.0.5), and with 1.5 the publishing
# overran the first due time. CONSUME NAME COUNT TAG starts its consumer,
# PUBLISH NAME [options] its publisher.
beside_burst() {
    local name=$1 tag=$2 steady=$3 where=$4 cons=$5 pub=$6 rate margin due_at done_ms
    shift 6
    rate=$( [ -s "$WORK/$steady.publish" ] && get "$WORK/$steady.publish" rate || echo 5000)
    margin=$(fmt 0 "$N_BURST / $rate * 3000 + $MARGIN0")
    due_at=$(( $(now_ms) + margin ))
    say "== $name: $N_BURST x 256 B $where, all due in [$margin, $((margin + SPREAD))] ms from now"
    "$cons" "$name" "$N_BURST" "$tag"
    cpu_mark "$name"
    "$pub" "$name" --count "$N_BURST" --tag "$tag" --due-at "$due_at" --spread "$SPREAD" "$@"
    done_ms=$(get "$WORK/$name.publish" end_ms)
    if [ "$done_ms" -lt "$due_at" ]; then
        R[$name.held_before_due]=yes
    else
        R[$name.held_before_due]=no
        say "$name: NOTE the last confirm came $((done_ms - due_at)) ms after the first due time"
    fi
    consumed "$name"
    cpu_per_msg "$name" "$N_BURST"
}
plugin_publish() {
    local name=$1
    shift
    publish "$name" --mode xdelay --exchange "$PLUGIN_EX" --routing-key bench "$@"
}
if [ "$PLUGIN" = 1 ] && want burst; then
    beside_burst plugin-burst 12 plugin-steady "through $PLUGIN_EX" plugin_consume plugin_publish \
        ${BENCH_STAMP:+--stamp}
fi

# ---------------------------------------------------------------- quorum queue delays beside
# The steady and burst loads once more, the bridge stopped, into a quorum
# queue that holds each message until its x-opt-delivery-time: first the
# broker alone through the same quorum queue (its ceiling), then the loads.
# Accept means the quorum queue's confirm: the message is in a majority of
# its members' logs (one member here), fsynced by Ra's WAL.
if [ "$QQ" = 1 ]; then
    say "== qq-ceiling: plain publish -> consume through quorum queue $QQ_Q, $N_CEIL x 256 B"
    qq_consume qq-ceiling "$N_CEIL" 21
    cpu_mark qq-ceiling
    qq_plain qq-ceiling --count "$N_CEIL" --tag 21
    consumed qq-ceiling
    cpu_per_msg qq-ceiling "$N_CEIL"
fi
if [ "$QQ" = 1 ] && want steady; then
    say "== qq-steady: $N_STEADY x 256 B into quorum queue $QQ_Q with x-opt-delivery-time, delays $DELAY ms, full speed"
    qq_consume qq-steady "$N_STEADY" 22
    cpu_mark qq-steady
    qq_publish qq-steady --count "$N_STEADY" --tag 22 --delay "$DELAY"
    consumed qq-steady
    cpu_per_msg qq-steady "$N_STEADY"
fi
if [ "$QQ" = 1 ] && want burst; then
    beside_burst qq-burst 23 qq-steady "into $QQ_Q" qq_consume qq_publish
fi

# ---------------------------------------------------------------- replicate
# The steady load twice, each time through a fresh bridge on an empty WAL
# directory, on the same broker: first without replication (the same bridge
# as steady's), then with wal.replicate to a stream new to this run (every
# other key default). Both drain the same ingress queue; nothing else runs.
if want replicate; then
    REPL_STREAM=bench.wal.$(date +%s).$$
    for side in off on; do
        name=repl-$side
        mkdir -p "$WORK/wal-$name"
        if [ "$side" = on ]; then
            bridge_config "$WORK/wal-$name" "{ \"stream\": \"$REPL_STREAM\" }"
        else
            bridge_config "$WORK/wal-$name"
        fi
        bridge_launch
        bridge_ready
        say "== $name: $N_STEADY x 256 B through delay-bridge (pid $BRIDGE_PID), delays $DELAY ms," \
            "full speed, wal.replicate $side$([ "$side" = on ] && echo " (stream $REPL_STREAM)")"
        c0=$(stats '.wal.commits')
        run_bridge_load "$name" "$([ "$side" = on ] && echo 10 || echo 9)" "$N_STEADY" 0 --delay "$DELAY"
        consumed "$name"
        cpu_per_msg "$name" "$N_STEADY"
        R[$name.commits]=$(( $(stats '.wal.commits') - c0 ))
        R[$name.bridge_lat_mean_ms]=$(fmt 1 "$(stats '.routes[0].lateness | if .count > 0 then .sum_seconds / .count * 1000 else 0 end')")
        if [ "$side" = on ]; then
            R[$name.state]=$(stats '.wal.replication | .state + (if .complete then ", complete" else ", NOT complete" end)')
            R[$name.stream_msgs]=$(stats '.wal.replication.published_messages')
            R[$name.stream_mib]=$(fmt 1 "$(stats '.wal.replication.published_bytes') / 1048576.0")
            R[$name.confirm_ms]=$(fmt 2 "$(stats '.wal.replication.confirm | if .count > 0 then .sum_seconds / .count * 1000 else 0 end')")
            R[$name.wal_mib]=$(fmt 1 "$(stats '.wal.appended_bytes') / 1048576.0")
            say "$name: replication $(jq -c '.wal.replication' "$WORK/stats.json")"
        fi
        bridge_stop
    done
fi

# ---------------------------------------------------------------- hold + restart
if want hold || want restart; then
    say "== hold: $N_HOLD x 256 B held with ${HOLD_DELAY} ms delays"
    mkdir -p "$WORK/wal-hold"
    bridge_config "$WORK/wal-hold"
    bridge_launch
    bridge_ready
    sleep 1
    rss0=$(rss_kb "$BRIDGE_PID")
    cpu_mark hold
    t0=$(now_ms)
    publish hold --mode xdelay --exchange "$INGRESS_EX" --routing-key bench --count "$N_HOLD" \
        --delay "$HOLD_DELAY" --tag 7
    t1=$(wait_received "$N_HOLD" 1800)
    cpu_per_msg hold "$N_HOLD"
    sleep 1
    held=$(stats '.held')
    rss1=$(rss_kb "$BRIDGE_PID")
    [ "$held" -ge "$N_HOLD" ] || FAILED+=("hold: the bridge holds $held of $N_HOLD")
    R[hold.held]=$held
    R[hold.ingest_rate]=$(fmt 0 "$N_HOLD / (($t1 - $t0) / 1000.0)")
    R[hold.rss_per_msg]=$(fmt 1 "($rss1 - $rss0) * 1024.0 / $N_HOLD")
    R[hold.rss_mib]=$(fmt 1 "$rss1 / 1024.0")
    R[hold.ram_per_msg]=$(fmt 1 "$(stats '.ram_bytes') / $N_HOLD")
    R[hold.wal_per_msg]=$(fmt 1 "$(stats '.wal.disk_bytes') / $N_HOLD")
    R[hold.wal_live_per_msg]=$(fmt 1 "$(stats '.wal.live_bytes') / $N_HOLD")
    R[hold.wal_mib]=$(fmt 1 "$(stats '.wal.disk_bytes') / 1048576.0")
    say "hold: held=$held RSS ${rss0} kB -> ${rss1} kB, WAL $(stats '.wal.disk_bytes') B in $(stats '.wal.segments') segments"

    if want restart; then
        # As in production: the default checkpoint policy (every 60 s once 64 MiB or half
        # a checkpoint of log was appended) has taken one since the ingest; wait for it.
        # Below 64 MiB of log (the smoke run) the policy takes none: nothing to wait for.
        ck_deadline=$(( $(now_ms) + 180000 ))
        [ "$(stats '.wal.disk_bytes')" -ge $((64 << 20)) ] || ck_deadline=0
        while [ "$ck_deadline" -gt 0 ]; do
            ck_state=$(stats '.wal.checkpoint.state + " " + (.wal.checkpoint.installed|tostring)')
            case "$ck_state" in "idle 0") ;; idle*) break ;; esac
            [ "$(now_ms)" -lt "$ck_deadline" ] || { say "restart: no checkpoint within 180 s"; break; }
            sleep 1
        done
        R[restart.ckpt_mib]=$(fmt 1 "$(stats '.wal.checkpoint.bytes') / 1048576.0")
        R[restart.ckpt_age_s]=$(fmt 0 "$(stats '.wal.checkpoint.age_seconds')")
        say "== restart: kill -9 with $held held (checkpoint ${R[restart.ckpt_mib]} MiB, ${R[restart.ckpt_age_s]} s old), drop caches, restart, one ${RESTART_DELAY} ms message"
        consume restart 1 8 --purge
        kill -KILL "$BRIDGE_PID"; wait "$BRIDGE_PID" 2>/dev/null || true; BRIDGE_PID=""
        sync
        if [ "$(id -u)" = 0 ] && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
            R[restart.cache]=cold
        else
            R[restart.cache]=warm
            say "restart: cannot drop the page cache (not root or read-only /proc): warm-cache figure"
        fi
        t0=$(now_ms)
        bridge_launch
        publish restart --mode xdelay --exchange "$INGRESS_EX" --routing-key bench --count 1 \
            --delay "$RESTART_DELAY" --tag 8
        bridge_ready 1800
        t_ready=$(now_ms)
        consumed restart
        R[restart.deliver_ms]=$(( $(get "$WORK/restart.consume" last_recv_ms) - t0 ))
        R[restart.ready_ms]=$((t_ready - t0))
        R[restart.recovery_s]=$(fmt 3 "$(stats '.recovery.seconds')")
        R[restart.ckpt_used]=$(stats '.wal.checkpoint.used_at_start')
        R[restart.held]=$(stats '.held')
        R[restart.rss_per_msg]=$(fmt 1 "($(rss_kb "$BRIDGE_PID") - $rss0) * 1024.0 / $N_HOLD")
    fi
    bridge_stop
fi

# ---------------------------------------------------------------- report

v() { local x=${R[$1]:-}; [ -n "$x" ] && printf '%s' "$x" || printf '%s' '-'; }
row() { printf '| %-9s | %-50s | %14s | %14s | %14s | %8s |\n' "$1" "$2" "$3" "$4" "$5" "$(ratio "$3" "$4")"; }
# rrow SCENARIO FIGURE WITHOUT WITH CEILING: a row of the replicate table.
rrow() { printf '| %-9s | %-50s | %14s | %18s | %8s | %14s |\n' "$1" "$2" "$3" "$4" "$(ratio "$4" "$3")" "$5"; }

# firing NAME: n / (last receive - first due time), msg/s, or "-".
firing() {
    local n last first
    [ -s "$WORK/$1.consume" ] || { printf -- '-'; return; }
    n=$(c "$1" unique) last=$(c "$1" last_recv_ms) first=$(c "$1" min_due_ms)
    if [ "$n" -gt 0 ] && [ "$last" -gt "$first" ]; then fmt 0 "$n / (($last - $first) / 1000.0)"; else printf -- '-'; fi
}
# sum A B: A + B, or "-".
sum() { if [[ "$1" =~ ^[0-9.]+$ && "$2" =~ ^[0-9.]+$ ]]; then fmt 1 "$1 + $2"; else printf -- '-'; fi; }
# cpu_rows WHO SCENARIO NAME: CPU per message of the broker (the plugin runs
# inside it), of the bridge when one ran, and of both, against the ceiling's.
cpu_rows() {
    local all
    srow "$1" "$2" "broker CPU per message, us" "$(v "$3.broker_us")" "$(v ceiling.broker_us)" \
        "$(ratio "$(v "$3.broker_us")" "$(v ceiling.broker_us)")"
    [ -n "${R[$3.bridge_us]:-}" ] || return 0
    srow "$1" "$2" "delay-bridge's own CPU per message, us" "$(v "$3.bridge_us")" - -
    all=$(sum "$(v "$3.broker_us")" "$(v "$3.bridge_us")")
    srow "$1" "$2" "CPU per message, broker + delay-bridge, us" "$all" "$(v ceiling.broker_us)" \
        "$(ratio "$all" "$(v ceiling.broker_us)")"
}
# delayed_rows WHO STEADY BURST: a delaying system's rows from its steady and burst runs.
delayed_rows() {
    local who=$1 st=$2 bu=$3 all
    if want steady; then
        srow "$who" steady "accept rate (publish confirms), msg/s" "$(p "$st" rate)" "$(p ceiling rate)" \
            "$(ratio "$(p "$st" rate)" "$(p ceiling rate)")"
        srow "$who" steady "lateness p50 / p99 / max, ms" "$(lat3 "$st")" "$(lat3 ceiling)" \
            "p99 $(plus "$(c "$st" lat_p99_ms)" "$(c ceiling lat_p99_ms)")"
        srow "$who" steady "early (before due) / arrived" "$(c "$st" early) / $(c "$st" unique)" - -
        cpu_rows "$who" steady "$st"
    fi
    if want burst; then
        if [ "$(v "$bu.held_before_due")" = no ]; then
            # Still publishing when they fell due: the figure is the publisher's rate, not a firing rate.
            srow "$who" burst "firing rate: NOT MEASURED, accepted after the first due time" "($(firing "$bu"))" \
                "$(c ceiling rate)" -
        else
            srow "$who" burst "firing rate, msg/s: n / (last receive - first due)" "$(firing "$bu")" \
                "$(c ceiling rate)" "$(ratio "$(firing "$bu")" "$(c ceiling rate)")"
            [ "$who" != delay-bridge ] ||
                srow "$who" burst "firing rate / the broker alone taking the bridge's republish" \
                    "$(firing "$bu")" "$(c ceiling-like rate)" "$(ratio "$(firing "$bu")" "$(c ceiling-like rate)")"
        fi
        srow "$who" burst "all accepted before the first due time" "$(v "$bu.held_before_due")" - -
        srow "$who" burst "lateness p50 / p99 / max, ms" "$(lat3 "$bu")" - -
        srow "$who" burst "early (before due) / arrived" "$(c "$bu" early) / $(c "$bu" unique)" - -
        cpu_rows "$who" burst "$bu"
    fi
}
# summary WHO STEADY BURST: one line of a delaying system's headline figures.
summary() {
    local st=$2 bu=$3 line="summary, $BROKER_VSN, $1:"
    if want steady; then
        line+=" steady accept $(p "$st" rate) msg/s ($(ratio "$(p "$st" rate)" "$(p ceiling rate)") the broker alone),"
        line+=" lateness p50 / p99 / max $(lat3 "$st") ms (p99 $(plus "$(c "$st" lat_p99_ms)" "$(c ceiling lat_p99_ms)")"
        line+=" over the broker alone's)"
        if want burst; then line+=";"; fi
    fi
    if want burst && [ "$(v "$bu.held_before_due")" = no ]; then
        line+=" burst firing not measured (still accepting when the burst fell due)"
    elif want burst; then
        line+=" burst firing $(firing "$bu") msg/s ($(ratio "$(firing "$bu")" "$(c ceiling rate)") the broker alone)"
    fi
    echo "$line"
}

{
    echo
    echo "delay-bridge benchmark on $BROKER_VSN, $(date -u +%FT%TZ), $(nproc) CPUs, load average before: $(v load.before), after: $(cut -d' ' -f1 /proc/loadavg)$([ "$SMOKE" = 1 ] && echo ', SMOKE sizes'), $N_STEADY messages a load (burst $N_BURST)"
    [ -z "${BENCH_ROUTE:-}${BENCH_STAMP:-}" ] ||
        echo "route keys: ${BENCH_ROUTE:-none}; publishers stamp timestamp_in_ms: $([ -n "${BENCH_STAMP:-}" ] && echo yes || echo no)"
    echo
    printf '| %-9s | %-50s | %14s | %14s | %14s | %8s |\n' scenario figure delay-bridge "broker alone" "TTL+DLX alone" "ratio"
    printf '|%s|%s|%s|%s|%s|%s|\n' ----------- ---------------------------------------------------- ---------------- ---------------- ---------------- ----------
    row ceiling "publish rate, confirms, msg/s" - "$(p ceiling rate)" -
    row ceiling "consume rate, msg/s" - "$(c ceiling rate)" -
    row ceiling "e2e latency p50 / p99 ms" - "$(c ceiling lat_p50_ms) / $(c ceiling lat_p99_ms)" -
    row ceiling "broker CPU per message, us" - "$(v ceiling.broker_us)" -
    if want steady; then
        row steady "accept rate (publish confirms), msg/s" "$(p steady rate)" "$(p ceiling rate)" "$(p ttl rate)"
        row steady "ingest rate (logged+fsynced+acked), msg/s" "$(v steady.ingest_rate)" "$(c ceiling rate)" -
        row steady "lateness p50 ms" "$(c steady lat_p50_ms)" "$(c ceiling lat_p50_ms)" "$(c ttl lat_p50_ms)"
        row steady "lateness p90 ms" "$(c steady lat_p90_ms)" "$(c ceiling lat_p90_ms)" "$(c ttl lat_p90_ms)"
        row steady "lateness p99 ms" "$(c steady lat_p99_ms)" "$(c ceiling lat_p99_ms)" "$(c ttl lat_p99_ms)"
        row steady "lateness p99.9 ms" "$(c steady lat_p999_ms)" "$(c ceiling lat_p999_ms)" "$(c ttl lat_p999_ms)"
        row steady "lateness max ms" "$(c steady lat_max_ms)" "$(c ceiling lat_max_ms)" "$(c ttl lat_max_ms)"
        row steady "early (before due) / arrived" "$(c steady early) / $(c steady unique)" - "$(c ttl early) / $(c ttl unique)"
        row steady "WAL commits (fdatasync) / messages per commit" "$(v steady.commits) / $(fmt 1 "$N_STEADY / ${R[steady.commits]:-1}")" - -
        row steady "bridge's own lateness mean ms (confirm - due)" "$(v steady.bridge_lat_mean_ms)" - -
        row steady "broker CPU per message, us" "$(v steady.broker_us)" "$(v ceiling.broker_us)" "$(v ttl.broker_us)"
        row steady "delay-bridge CPU per message, us" "$(v steady.bridge_us)" - -
    fi
    if want burst; then
        row burst "firing rate msg/s = n / (last receive - first due)" \
            "$(fmt 0 "$(c burst unique) / (($(c burst last_recv_ms) - $(c burst min_due_ms)) / 1000.0)")" "$(c ceiling rate)" -
        row burst "the schedule's own rate (n / spread), msg/s" "$(fmt 0 "$N_BURST / ($SPREAD / 1000.0)")" - -
        row burst "ingest rate, msg/s" "$(v burst.ingest_rate)" "$(c ceiling rate)" -
        row burst "all held before the first due time" "$(v burst.held_before_due)" - -
        row burst "lateness p50 / p99 / max ms" "$(c burst lat_p50_ms) / $(c burst lat_p99_ms) / $(c burst lat_max_ms)" - -
        row burst "broker / delay-bridge CPU per message, us" "$(v burst.broker_us) / $(v burst.bridge_us)" - -
    fi
    if want mixed; then
        row mixed "accept rate (publish confirms), msg/s" "$(p mixed rate)" "$(p ceiling-mixed rate)" -
        row mixed "accept MB/s" "$(p mixed mb_per_s)" "$(p ceiling-mixed mb_per_s)" -
        row mixed "ingest rate, msg/s" "$(v mixed.ingest_rate)" "$(c ceiling-mixed rate)" -
        row mixed "lateness p50 ms" "$(c mixed lat_p50_ms)" "$(c ceiling-mixed lat_p50_ms)" -
        row mixed "lateness p99 ms" "$(c mixed lat_p99_ms)" "$(c ceiling-mixed lat_p99_ms)" -
        row mixed "lateness max ms" "$(c mixed lat_max_ms)" "$(c ceiling-mixed lat_max_ms)" -
        row mixed "broker CPU per message, us" "$(v mixed.broker_us)" "$(v ceiling-mixed.broker_us)" -
        row mixed "delay-bridge CPU per message, us" "$(v mixed.bridge_us)" - -
    fi
    if want hold || want restart; then
        row hold "held messages" "$(v hold.held)" - -
        row hold "ingest rate, msg/s" "$(v hold.ingest_rate)" "$(c ceiling rate)" -
        row hold "RSS per held message, B (VmRSS delta)" "$(v hold.rss_per_msg)" - -
        row hold "engine RAM per held message, B (/stats)" "$(v hold.ram_per_msg)" - -
        row hold "WAL bytes per held message (disk / live)" "$(v hold.wal_per_msg) / $(v hold.wal_live_per_msg)" - -
        row hold "RSS MiB / WAL MiB" "$(v hold.rss_mib) / $(v hold.wal_mib)" - -
        row hold "broker / delay-bridge CPU per message, us" "$(v hold.broker_us) / $(v hold.bridge_us)" - -
    fi
    if want restart; then
        row restart "kill -9 -> new 50 ms message delivered ms ($(v restart.cache))" "$(v restart.deliver_ms)" - -
        row restart "kill -9 -> /readyz 200, ms" "$(v restart.ready_ms)" - -
        row restart "WAL recovery (/stats recovery.seconds), s" "$(v restart.recovery_s)" - -
        row restart "checkpoint at the kill: MiB / age s / used by the restart" "$(v restart.ckpt_mib) / $(v restart.ckpt_age_s) / $(v restart.ckpt_used)" - -
        row restart "held after restart / RSS per held message, B" "$(v restart.held) / $(v restart.rss_per_msg)" - -
    fi
    echo
    echo "ratio = delay-bridge / ceiling, the broker alone ($BROKER_VSN, same run). Lateness = receive -"
    echo "intended due time; for the ceiling it is the end-to-end latency of an undelayed message."
    if want replicate; then
        # The same rows for the two bridges of the replicate scenario; the ratio
        # is with / without, and the ceiling column repeats the broker alone.
        echo
        echo "wal.replicate on $BROKER_VSN: delay-bridge without and with it, the broker alone beside"
        echo
        printf '| %-9s | %-50s | %14s | %18s | %8s | %14s |\n' scenario figure "without" "wal.replicate" "with/w-o" "ceiling"
        printf '|%s|%s|%s|%s|%s|%s|\n' ----------- ---------------------------------------------------- ---------------- -------------------- ---------- ----------------
        rrow replicate "accept rate (publish confirms), msg/s" "$(p repl-off rate)" "$(p repl-on rate)" "$(p ceiling rate)"
        rrow replicate "accept rate / ceiling" "$(ratio "$(p repl-off rate)" "$(p ceiling rate)")" \
            "$(ratio "$(p repl-on rate)" "$(p ceiling rate)")" -
        rrow replicate "ingest rate (logged+fsynced[+stream]+acked), msg/s" "$(v repl-off.ingest_rate)" "$(v repl-on.ingest_rate)" "$(c ceiling rate)"
        rrow replicate "lateness p50 ms" "$(c repl-off lat_p50_ms)" "$(c repl-on lat_p50_ms)" "$(c ceiling lat_p50_ms)"
        rrow replicate "lateness p99 ms" "$(c repl-off lat_p99_ms)" "$(c repl-on lat_p99_ms)" "$(c ceiling lat_p99_ms)"
        rrow replicate "lateness max ms" "$(c repl-off lat_max_ms)" "$(c repl-on lat_max_ms)" "$(c ceiling lat_max_ms)"
        rrow replicate "early (before due) / arrived" "$(c repl-off early) / $(c repl-off unique)" \
            "$(c repl-on early) / $(c repl-on unique)" -
        rrow replicate "WAL commits" "$(v repl-off.commits)" "$(v repl-on.commits)" -
        rrow replicate "bridge's own lateness mean ms (confirm - due)" "$(v repl-off.bridge_lat_mean_ms)" "$(v repl-on.bridge_lat_mean_ms)" -
        rrow replicate "broker CPU per message, us" "$(v repl-off.broker_us)" "$(v repl-on.broker_us)" "$(v ceiling.broker_us)"
        rrow replicate "delay-bridge CPU per message, us" "$(v repl-off.bridge_us)" "$(v repl-on.bridge_us)" -
        rrow replicate "stream: messages / MiB published (WAL MiB)" - \
            "$(v repl-on.stream_msgs) / $(v repl-on.stream_mib) ($(v repl-on.wal_mib))" -
        rrow replicate "stream: publisher confirm mean ms" - "$(v repl-on.confirm_ms)" -
        rrow replicate "replication state at the end" - "$(v repl-on.state)" -
    fi

    # Side by side: who delays, the same loads, this broker, this run.
    echo
    echo "Side by side on $BROKER_VSN, one run: who delays the same loads (ratio = value / the broker alone's)"
    echo
    printf '| %-15s | %-22s | %-8s | %-52s | %22s | %22s | %12s |\n' broker "delays" scenario figure value \
        "broker alone" ratio
    printf '|%s|%s|%s|%s|%s|%s|%s|\n' ----------------- ------------------------ ---------- \
        ------------------------------------------------------ ------------------------ ------------------------ --------------
    srow "broker alone" ceiling "publish rate (confirms), msg/s" "$(p ceiling rate)" - -
    srow "broker alone" ceiling "consume rate, msg/s" "$(c ceiling rate)" - -
    srow "broker alone" ceiling "end-to-end latency p50 / p99 / max, ms (no delay)" "$(lat3 ceiling)" - -
    srow "broker alone" ceiling "broker CPU per message, us" "$(v ceiling.broker_us)" - -
    if want burst; then
        srow "broker alone: the bridge's republish" ceiling "consume rate, msg/s (headers + mandatory)" \
            "$(c ceiling-like rate)" "$(c ceiling rate)" "$(ratio "$(c ceiling-like rate)" "$(c ceiling rate)")"
        srow "broker alone: the bridge's republish" ceiling "broker CPU per message, us" \
            "$(v ceiling-like.broker_us)" "$(v ceiling.broker_us)" \
            "$(ratio "$(v ceiling-like.broker_us)" "$(v ceiling.broker_us)")"
    fi
    if want steady; then
        srow "broker alone: TTL+DLX" steady "accept rate (publish confirms), msg/s" "$(p ttl rate)" "$(p ceiling rate)" \
            "$(ratio "$(p ttl rate)" "$(p ceiling rate)")"
        srow "broker alone: TTL+DLX" steady "lateness p50 / p99 / max, ms" "$(lat3 ttl)" "$(lat3 ceiling)" \
            "p99 $(plus "$(c ttl lat_p99_ms)" "$(c ceiling lat_p99_ms)")"
        srow "broker alone: TTL+DLX" steady "early (before due) / arrived" "$(c ttl early) / $(c ttl unique)" - -
    fi
    if want steady || want burst; then
        delayed_rows delay-bridge steady burst
    fi
    if [ "$PLUGIN" = 1 ]; then
        delayed_rows "$PLUGIN_NAME" plugin-steady plugin-burst
    else
        srow "$PLUGIN_NAME" - "$PLUGIN_WHY" - - -
    fi
    if [ "$QQ" = 1 ]; then
        srow "broker alone: quorum queue" ceiling "publish rate (confirms), msg/s" "$(p qq-ceiling rate)" \
            "$(p ceiling rate)" "$(ratio "$(p qq-ceiling rate)" "$(p ceiling rate)")"
        srow "broker alone: quorum queue" ceiling "end-to-end latency p50 / p99 / max, ms (no delay)" \
            "$(lat3 qq-ceiling)" "$(lat3 ceiling)" -
        srow "broker alone: quorum queue" ceiling "broker CPU per message, us" "$(v qq-ceiling.broker_us)" \
            "$(v ceiling.broker_us)" "$(ratio "$(v qq-ceiling.broker_us)" "$(v ceiling.broker_us)")"
        delayed_rows "$QQ_NAME" qq-steady qq-burst
        if want steady; then
            srow "$QQ_NAME" steady "accept rate / its own quorum queue's" "$(p qq-steady rate)" \
                "$(p qq-ceiling rate)" "$(ratio "$(p qq-steady rate)" "$(p qq-ceiling rate)")"
            srow "$QQ_NAME" steady "broker CPU per message / its own quorum queue's, us" "$(v qq-steady.broker_us)" \
                "$(v qq-ceiling.broker_us)" "$(ratio "$(v qq-steady.broker_us)" "$(v qq-ceiling.broker_us)")"
        fi
    else
        srow "$QQ_NAME" - "$QQ_WHY" - - -
    fi
    echo
    echo "summary, $BROKER_VSN, broker alone: publish $(p ceiling rate) msg/s (confirms), consume $(c ceiling rate) msg/s," \
        "end-to-end latency p50 / p99 / max $(lat3 ceiling) ms"
    if want steady || want burst; then
        summary delay-bridge steady burst
        if [ "$PLUGIN" = 1 ]; then
            summary "$PLUGIN_NAME" plugin-steady plugin-burst
        fi
        if [ "$QQ" = 1 ]; then
            summary "$QQ_NAME" qq-steady qq-burst
        fi
    fi
    [ "$QQ" = 1 ] || echo "summary, $BROKER_VSN, $QQ_NAME: $QQ_WHY"
    [ "$PLUGIN" = 1 ] || echo "summary, $BROKER_VSN, $PLUGIN_NAME: $PLUGIN_WHY"
} | tee "$WORK/report.txt"

# Every scenario runs the bridge; the broker alone is always measured.
WHO="delay-bridge, broker alone"
if [ "$PLUGIN" = 1 ]; then WHO="delay-bridge, $PLUGIN_NAME, broker alone"; fi
if [ "$QQ" = 1 ]; then WHO="$WHO, $QQ_NAME"; fi
if [ ${#FAILED[@]} -gt 0 ]; then
    say "$BROKER_VSN ($WHO): FAILED: ${FAILED[*]}"
    exit 1
fi
say "$BROKER_VSN ($WHO): all messages arrived"
exit 0
