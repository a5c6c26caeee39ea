#!/bin/bash
# ontime.sh -- lateness at the loads people run: delay-bridge, the broker
# alone and, on RabbitMQ 4.0, the delayed-message plugin 4.0.7, each at a
# fraction of what the bridge accepts at full speed, on one broker in one
# run (tests/bench/README.md, "Lateness at the loads people run").
#
#   tests/bench/ontime.sh [--count N] [--loads 25,50,90] [--smoke] [--keep] [--gen c|go]
#
# run.sh publishes at full speed: its lateness is that of a saturated
# system. Publishers in production are open loop, below saturation; this
# measures lateness there. On a fresh broker (as run.sh: its topology, its
# bridge config, the same load_publish and load_consume), in this order:
#   1. saturation: the broker alone (load_publish --mode plain, full speed,
#      N messages through bench.target -> bench.out, key "bench"), then
#      delay-bridge (--mode xdelay --delay DELAY, full speed, N messages to
#      its ingress bench.delayed / bench.delayed.q); R, the bridge's accept
#      rate, is that run's load_publish rate=.
#   2. each load L of --loads: RATE = L % of R (msg/s, an integer), open
#      loop (load_publish --rate RATE --count N): the broker alone (plain),
#      then the broker alone carrying both hops of a delayed message at
#      once ("both hops": two publishers at RATE, one to a queue whose
#      consumer acks the way the bridge acks its ingress -- prefetch 1000,
#      one multiple ack per paced commit, every 10 ms or 500 messages
#      (TWOHOP_ACK below) -- and one through bench.target -> bench.out,
#      automatic acks: the broker's load under a delayed message, without
#      the bridge), then the bridge (xdelay, DELAY).
#   3. on RabbitMQ 4.0 with the plugin (plugin.sh; run.sh's plugin rows:
#      exchange bench.plugin of type x-delayed-message, x-delayed-type
#      direct, bench.out bound with key bench), the bridge stopped: full
#      speed, then each RATE of step 2 -- the bridge's R, so the two are
#      compared at equal offered load. Elsewhere its rows say why not.
#   4. on a node whose quorum queues delay (DB_RABBITMQ=qq-delay:
#      rabbitmq-server's qq-vNext, quorumdelay.sh; run.sh's rows "quorum
#      queue delay"), the bridge stopped: the broker alone through quorum
#      queue bench.qout (exchange bench.qq), then the same with header
#      x-opt-delivery-time = send time + delay, each at full speed and at
#      each RATE of step 2. Its lateness is set beside the broker alone's
#      (classic bench.out) and its own quorum queue's at the same rate.
#      Elsewhere a row says why not; BENCH_QQ=0 leaves it out.
#
#   --count N   messages a load (default 40000; --smoke 2000)
#   --loads L   percentages of R, comma-separated (default 25,50,90)
#   --smoke     2000 messages a load, delays 1000-3000 ms: for CI
#               (ctest bench.ontime.smoke)
#   --keep      keep the work directory (config, logs, WAL, summaries)
#   --gen G     the load generator of the broker alone's, delay-bridge's
#               and the plugin's loads, saturation included: c (default:
#               load_publish / load_consume, rabbitmq-c) or go
#               (tests/bench/loadgen-go/pace.go, amqp091-go 1.5.0, written
#               apart from them: a 1 ms ticker sends every message whose
#               slot start + i/R has come; built into the work directory,
#               exit 77 without go or golang-github-rabbitmq-amqp091-go-dev;
#               BENCH_GOCACHE, default WORK/gocache, keeps its build cache).
#               The both hops rows run on it too (pace consume takes the
#               acked hop's manual-ack options). Same rows, same keys:
#               median.sh and the report work unchanged; the report's
#               header and summary lines name the generator.
#
# Delays: uniform in 2000-6000 ms (1000-3000 with --smoke). Lateness is
# the consumer's (load_consume, or pace consume): receive time - (send time
# + delay), to the microsecond;
# for the broker alone (no delay) the end-to-end latency.
#
# Report (stdout): a markdown table with run.sh's side-by-side layout,
#   | broker | delays | scenario | figure | value | broker alone | ratio |
# delays "broker alone", "delay-bridge", "plugin 4.0.7"; scenario
# "saturation" or "load L%"; the broker alone column is the broker alone
# at the same rate (at saturation: at full speed). Figures: offered rate /
# achieved (msg/s; load_publish's target_rate= and rate=), lateness p50 /
# p99 / max (ms), the p99 over the broker alone's, the earliest delivery
# (lat_min, ms), early (before send + delay) / arrived, and how far the
# publisher fell behind its schedule at most (behind_max_ms). Then one
# "summary, BROKER, WHO: ..." line per system. tests/bench/median.sh runs
# it several times and prints the medians.
#
# Environment as run.sh's: BUILD_DIR, BENCH_BRIDGE_BIN, BENCH_TOOLS_DIR;
#   BENCH_TWOHOP_ACK (the acked hop's load_consume options, below);
#   DB_RABBITMQ (3.10, 4.0, 4.3); BENCH_PORT (default 5698), BENCH_DIST_PORT
#   (default 25698), BENCH_BROKER_DIR (default $BUILD_DIR/bench-ontime-rabbitmq);
#   BENCH_TMP (the work directory's parent, default /var/tmp); BENCH_PLUGIN=0,
#   DB_PLUGIN_CACHE (plugin.sh); BENCH_ROUTE, BENCH_STAMP (run.sh).
#
# Never asserts on a time. Exit 0 when every message arrived, 1 when some
# did not, 2 on a usage or setup error, 77 when rabbitmq-server is not
# installed (skipped).
set -Eeuo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

say() { printf '[ontime %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }

N="" LOADS=25,50,90 SMOKE=0 KEEP=0 GEN=c
while [ $# -gt 0 ]; do
    case "$1" in
    --count) [ $# -ge 2 ] || die "--count needs a number"; N=$2; shift 2 ;;
    --count=*) N=${1#*=}; shift ;;
    --loads) [ $# -ge 2 ] || die "--loads needs a list"; LOADS=$2; shift 2 ;;
    --loads=*) LOADS=${1#*=}; shift ;;
    --smoke) SMOKE=1; shift ;;
    --keep) KEEP=1; shift ;;
    --gen) [ $# -ge 2 ] || die "--gen needs c or go"; GEN=$2; shift 2 ;;
    --gen=*) GEN=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
[ -z "$N" ] || [[ "$N" =~ ^[1-9][0-9]*$ ]] || die "--count $N: expected a positive integer"
for l in ${LOADS//,/ }; do
    [[ "$l" =~ ^[1-9][0-9]*$ ]] || die "--loads $LOADS: expected percentages (positive integers), comma-separated"
done
[ -n "${LOADS//,/}" ] || die "--loads is empty"
case "$GEN" in c|go) ;; *) die "--gen $GEN: expected c or go" ;; esac
[ "$GEN" = c ] || [ -z "${BENCH_STAMP:-}" ] || die "BENCH_STAMP: pace.go does not stamp timestamp_in_ms (use --gen c)"
if [ "$SMOKE" = 1 ]; then
    N=${N:-2000} DELAY=1000-3000
else
    N=${N:-40000} DELAY=2000-6000
fi

# get, now_ms, calc, fmt, free_port, ratio, bench_preflight
. "$HERE/common.sh"
bench_preflight load_consume
CONS=$TOOLS/load_consume

# consume, consumed, publish, bridge_*, broker_start, bench_setup, bench_traps, wait_ready;
# c, p, srow, lat3, plus (the report)
. "$HERE/harness.sh"
bench_setup ontime 5698 bench-ontime-rabbitmq

# The generator: GEN_DESC names it in the report; with --gen go, GPUB and
# GCONS are pace.go's two roles (the harness runs "$PUB" / "$CONS" OPTIONS).
C_DESC="load_publish / load_consume (rabbitmq-c $(pkg-config --modversion librabbitmq 2>/dev/null || echo '?'))"
GEN_DESC=$C_DESC GPUB="" GCONS=""
if [ "$GEN" = go ]; then
    GOPATH_DEB=/usr/share/gocode
    if ! command -v go >/dev/null || [ ! -d "$GOPATH_DEB/src/github.com/rabbitmq/amqp091-go" ]; then
        say "--gen go: go or amqp091-go missing: skipping (apt-get install golang-go golang-github-rabbitmq-amqp091-go-dev)"
        rm -rf "$WORK"
        exit 77
    fi
    say "--gen go: building tests/bench/loadgen-go/pace.go into $WORK"
    (cd "$HERE/loadgen-go" && GO111MODULE=off GOPATH=$GOPATH_DEB GOCACHE=${BENCH_GOCACHE:-$WORK/gocache} \
        go build -o "$WORK/pace" pace.go) || die "go build of tests/bench/loadgen-go/pace.go failed"
    printf '#!/bin/sh\nexec "%s" publish "$@"\n' "$WORK/pace" >"$WORK/pace-publish"
    printf '#!/bin/sh\nexec "%s" consume "$@"\n' "$WORK/pace" >"$WORK/pace-consume"
    chmod +x "$WORK/pace-publish" "$WORK/pace-consume"
    GPUB=$WORK/pace-publish GCONS=$WORK/pace-consume
    GEN_DESC="amqp091-go 1.5.0 (tests/bench/loadgen-go/pace.go, $(go version | awk '{ print $3 }'))"
fi
# gen_of KIND: the generator of a load of KIND, for the summary lines.
gen_of() { if [ "$GEN" = go ]; then echo "amqp091-go 1.5.0"; else echo "rabbitmq-c"; fi; }

# Topology, as run.sh's: bench.target (direct) -> bench.out, routing key "bench".
TARGET_EX=bench.target
OUT_Q=bench.out
INGRESS_EX=bench.delayed
INGRESS_Q=bench.delayed.q

BRIDGE_PID="" CONS_PID="" HTTP_PORT="" BROKER_SID="" FAILED=()
BROKER_VSN=$(sed -E 's/^(RabbitMQ [0-9]+(\.[0-9]+)*).*/\1/' <<<"${BROKER_DESC:-RabbitMQ ?}")

# PLUGIN, PLUGIN_WHY, PLUGIN_NAME, PLUGIN_EX, plugin_decide, plugin_check_started
. "$HERE/plugin.sh"
# QQ, QQ_WHY, QQ_NAME, qq_decide, qq_consume, qq_publish, qq_plain
. "$HERE/quorumdelay.sh"

bench_traps

# load NAME RATE KIND: one load of N messages (tag: the next number), a
# consumer on bench.out first; RATE 0 = full speed; KIND plain (to bench.target), bridge (x-delay
# to the ingress exchange), plugin (x-delay to the plugin's exchange), qq
# (x-opt-delivery-time to quorum queue bench.qout), qqplain (plain to it) or
# twohop (plain to bench.out and, at the same time and rate, plain to
# bench.hop1.q, consumed with the bridge's acks: NAME-in.*).
TAG=0
load() {
    local name=$1 rate=$2 kind=$3 pace=() in_pid pub_rc=0
    TAG=$((TAG + 1))
    # --gen go: pace.go publishes and consumes every load, both hops too (its
    # consume takes TWOHOP_ACK's options); harness.sh's publish and consume
    # read PUB and CONS: shadowed here.
    if [ "$GEN" = go ]; then
        local PUB=$GPUB CONS=$GCONS
    fi
    [ "$rate" = 0 ] || pace=(--rate "$rate")
    say "== $name: $N x 256 B, $kind, $([ "$rate" = 0 ] && echo "full speed" || echo "$rate msg/s")$(
        [ "$kind" = plain ] || [ "$kind" = qqplain ] || echo ", delays $DELAY ms")"
    case "$kind" in
    plain)
        consume "$name" "$N" "$TAG" --purge
        publish "$name" --mode plain --exchange "$TARGET_EX" --routing-key bench --count "$N" --tag "$TAG" \
            "${pace[@]}" ;;
    bridge)
        consume "$name" "$N" "$TAG" --purge
        publish "$name" --mode xdelay --exchange "$INGRESS_EX" --routing-key bench --count "$N" --tag "$TAG" \
            --delay "$DELAY" ${BENCH_STAMP:+--stamp} "${pace[@]}" ;;
    twohop)
        rm -f "$WORK/$name-in.ready"
        "$CONS" --uri "$URI" --queue bench.hop1.q --exchange bench.hop1 --routing-key bench \
            --count "$N" --tag "$((TAG + 1000))" --purge $TWOHOP_ACK \
            --ready-file "$WORK/$name-in.ready" >"$WORK/$name-in.consume" 2>"$WORK/$name-in.consume.err" &
        in_pid=$!
        wait_ready "$name-in" "$in_pid" "$WORK/$name-in.consume.err"
        consume "$name" "$N" "$TAG" --purge
        "$PUB" --uri "$URI" --mode plain --exchange bench.hop1 --routing-key bench --count "$N" \
            --tag "$((TAG + 1000))" "${pace[@]}" >"$WORK/$name-in.publish" 2>"$WORK/$name-in.publish.err" &
        publish "$name" --mode plain --exchange "$TARGET_EX" --routing-key bench --count "$N" --tag "$TAG" \
            "${pace[@]}"
        wait "$!" || pub_rc=$?
        [ "$pub_rc" = 0 ] || die "the acked hop's publisher of $name failed: $(cat "$WORK/$name-in.publish.err")"
        if ! wait "$in_pid" || [ ! -s "$WORK/$name-in.consume" ]; then
            FAILED+=("$name (acked hop): $(get "$WORK/$name-in.consume" unique) of $N arrived")
        fi
        say "$name acked hop: $(cat "$WORK/$name-in.consume")" ;;
    plugin)
        # The consumer declares the plugin's exchange and binds bench.out to it
        # (its --exchange comes after consume()'s own and wins).
        consume "$name" "$N" "$TAG" --purge --exchange "$PLUGIN_EX" --exchange-type x-delayed-message \
            --delayed-type direct
        publish "$name" --mode xdelay --exchange "$PLUGIN_EX" --routing-key bench --count "$N" --tag "$TAG" \
            --delay "$DELAY" ${BENCH_STAMP:+--stamp} "${pace[@]}" ;;
    qq)
        qq_consume "$name" "$N" "$TAG"
        qq_publish "$name" --count "$N" --tag "$TAG" --delay "$DELAY" "${pace[@]}" ;;
    qqplain)
        qq_consume "$name" "$N" "$TAG"
        qq_plain "$name" --count "$N" --tag "$TAG" "${pace[@]}" ;;
    esac
    consumed "$name"
}

# watch_start NAME / watch_stop NAME: what the bridge and the broker did
# during one load of the bridge. The bridge's /metrics before and after
# (NAME.metrics-before, -after) give where its lateness went, stage by stage
# (stages.py -> NAME.stages: wake, read, write, confirm, and the confirm
# lateness, mean and p50/p99 bucket bounds); perf stat counts the fsync and
# fdatasync calls of the broker's beam.smp and of the bridge meanwhile
# (NAME.fsyncs: broker= bridge= seconds=; "-" without perf or its rights).
# The counters watch the broker and the bridge, not the load tools.
WATCH_PIDS=()
# beam_of PID: the beam.smp process under PID (the node rabbitmq.sh started), or nothing.
beam_of() {
    local c
    [ -n "$1" ] || return 0
    for c in $(pgrep -P "$1" || true); do
        if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = beam.smp ]; then echo "$c"; return 0; fi
        c=$(beam_of "$c")
        [ -z "$c" ] || { echo "$c"; return 0; }
    done
}
watch_start() {
    local beam
    curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" >"$WORK/$1.metrics-before" || true
    WATCH_PIDS=() WATCH_T0=$(now_ms)
    command -v perf >/dev/null || return 0
    beam=$(beam_of "$(cat "$BROKER_DIR/node.pid" 2>/dev/null)")
    for who in broker:$beam bridge:$BRIDGE_PID; do
        [ -n "${who#*:}" ] || continue
        perf stat -x, -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync -p "${who#*:}" \
            -o "$WORK/$1.perf-${who%%:*}" 2>/dev/null &
        WATCH_PIDS+=($!)
    done
}
watch_stop() {
    local pid who n secs line
    curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" >"$WORK/$1.metrics-after" || true
    for pid in "${WATCH_PIDS[@]}"; do kill -INT "$pid" 2>/dev/null; done
    for pid in "${WATCH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    secs=$(fmt 1 "($(now_ms) - $WATCH_T0) / 1000")
    line="fsyncs seconds=$secs"
    for who in broker bridge; do
        n=-
        [ ! -s "$WORK/$1.perf-$who" ] ||
            n=$(awk -F, '/sys_enter_f/ { if ($1 ~ /^[0-9]+$/) s += $1; else bad = 1 }
                END { if (bad || NR == 0) print "-"; else print s + 0 }' "$WORK/$1.perf-$who")
        line+=" $who=$n"
    done
    echo "$line" >"$WORK/$1.fsyncs"
    if [ -s "$WORK/$1.metrics-before" ] && [ -s "$WORK/$1.metrics-after" ]; then
        python3 "$HERE/stages.py" "$WORK/$1.metrics-before" "$WORK/$1.metrics-after" >"$WORK/$1.stages" || true
    fi
    say "$1 stages: $(cat "$WORK/$1.stages" 2>/dev/null); $line"
}
# st NAME KEY: a figure of NAME.stages; fs NAME KEY: of NAME.fsyncs ("-" when missing).
st() { local f=$WORK/$1.stages; [ -s "$f" ] && get "$f" "$2" || printf -- '-'; }
fs() { local f=$WORK/$1.fsyncs; [ -s "$f" ] && get "$f" "$2" || printf -- '-'; }

# The acked hop of "both hops" acks the way the bridge acks its ingress on
# its defaults: prefetch 1000, one multiple ack per paced commit -- every
# wal.commit_interval_ms (10) or at half the prefetch (500), whichever
# comes first (load_consume --ack-every-ms; the bridge's fdatasync is not
# imitated). BENCH_TWOHOP_ACK replaces these load_consume options, e.g.
# "--manual-ack 50 --prefetch 1000", an ack per 50 or when the queue goes
# quiet (the acked hop of the runs before 2026-12-06).
TWOHOP_ACK=${BENCH_TWOHOP_ACK:---manual-ack 500 --ack-every-ms 10 --prefetch 1000}

# ---------------------------------------------------------------- broker

say "machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
say "work directory $WORK, broker state $BROKER_DIR, port $PORT"
say "delay-bridge: $BRIDGE_SRC (built $BRIDGE_BUILT), run from a copy in the work directory"
qq_decide
say "$QQ_NAME: $([ "$QQ" = 1 ] && echo "runs on this node (exchange $QQ_EX -> quorum queue $QQ_Q, x-opt-delivery-time; the bridge stopped)" || echo "$QQ_WHY")"
plugin_decide
if [ "$PLUGIN" = 1 ]; then
    say "$PLUGIN_NAME: runs on this node (exchange $PLUGIN_EX, the bridge stopped; RABBITMQ_PLUGINS_DIR=$RABBITMQ_PLUGINS_DIR)"
else
    say "$PLUGIN_NAME: $PLUGIN_WHY"
fi
broker_start
# BENCH_NEIGHBOUR=RATE: another tenant of the disk for the whole run,
# RATE data flushes a second (neighbour.py); its line goes in the report.
NEIGHBOUR_PID=""
if [ -n "${BENCH_NEIGHBOUR:-}" ]; then
    [[ "$BENCH_NEIGHBOUR" =~ ^[1-9][0-9]*$ ]] || die "BENCH_NEIGHBOUR=$BENCH_NEIGHBOUR: expected flushes a second"
    python3 "$HERE/neighbour.py" "$BENCH_NEIGHBOUR" "$WORK" >"$WORK/neighbour.out" 2>&1 &
    NEIGHBOUR_PID=$!
    bench_cleanup_first() { [ -z "$NEIGHBOUR_PID" ] || kill "$NEIGHBOUR_PID" 2>/dev/null; }
    say "a neighbour on the disk: $BENCH_NEIGHBOUR fdatasyncs a second (pid $NEIGHBOUR_PID)"
fi
LOAD_BEFORE=$(cut -d' ' -f1 /proc/loadavg)

# ---------------------------------------------------------------- the loads

load alone-sat 0 plain
mkdir -p "$WORK/wal"
bridge_config "$WORK/wal"
bridge_launch
bridge_ready
say "delay-bridge pid $BRIDGE_PID, http 127.0.0.1:$HTTP_PORT"
watch_start bridge-sat
load bridge-sat 0 bridge
watch_stop bridge-sat
R_BRIDGE=$(p bridge-sat rate)
[[ "$R_BRIDGE" =~ ^[1-9][0-9]*$ ]] || die "the bridge's accept rate at full speed is '$R_BRIDGE'"
say "R = $R_BRIDGE msg/s: the loads are ${LOADS//,/, } % of it"
declare -A RATE
for l in ${LOADS//,/ }; do
    RATE[$l]=$((R_BRIDGE * l / 100))
    [ "${RATE[$l]}" -gt 0 ] || die "load $l %: a rate of 0 msg/s"
    load "alone-$l" "${RATE[$l]}" plain
    load "twohop-$l" "${RATE[$l]}" twohop
    watch_start "bridge-$l"
    load "bridge-$l" "${RATE[$l]}" bridge
    watch_stop "bridge-$l"
done
bridge_stop
if [ -n "$NEIGHBOUR_PID" ]; then
    kill "$NEIGHBOUR_PID" 2>/dev/null; wait "$NEIGHBOUR_PID" 2>/dev/null || true
    NEIGHBOUR_PID=""
    say "$(cat "$WORK/neighbour.out")"
fi
if [ "$PLUGIN" = 1 ]; then
    load plugin-sat 0 plugin
    for l in ${LOADS//,/ }; do load "plugin-$l" "${RATE[$l]}" plugin; done
fi
if [ "$QQ" = 1 ]; then
    load qqalone-sat 0 qqplain
    load qq-sat 0 qq
    for l in ${LOADS//,/ }; do
        load "qqalone-$l" "${RATE[$l]}" qqplain
        load "qq-$l" "${RATE[$l]}" qq
    done
fi

# ---------------------------------------------------------------- report

# isnum X: whether X is a number (a missing figure is "-").
isnum() { [[ "$1" =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; }
# offered NAME: the publisher's target rate, "full speed" without one.
offered() {
    local t
    t=$(p "$1" target_rate)
    if [ "$t" = 0 ]; then printf 'full speed'; else printf '%s' "$t"; fi
}
# p99x NAME ALONE: "p99 1.84x", the p99 over the broker alone's.
p99x() { printf 'p99 %s' "$(ratio "$(c "$1" lat_p99_ms)" "$(c "$2" lat_p99_ms)")"; }
# rows WHO NAME ALONE SCENARIO: the rows of one load; ALONE is the broker
# alone's load at the same rate, empty for the broker alone's own rows.
rows() {
    local who=$1 n=$2 a=$3 sc=$4 sat=0
    [ "$(p "$n" target_rate)" != 0 ] || sat=1
    if [ -z "$a" ]; then
        srow "$who" "$sc" "offered rate / achieved, msg/s" "$(offered "$n") / $(p "$n" rate)" - -
        srow "$who" "$sc" "lateness p50 / p99 / max, ms" "$(lat3 "$n")" - -
        srow "$who" "$sc" "earliest delivery (lat_min), ms" "$(c "$n" lat_min_ms)" - -
        srow "$who" "$sc" "early (before send + delay) / arrived" "$(c "$n" early) / $(c "$n" unique)" - -
        [ "$sat" = 1 ] || srow "$who" "$sc" "publisher behind its schedule at most, ms" "$(p "$n" behind_max_ms)" - -
        return 0
    fi
    srow "$who" "$sc" "offered rate / achieved, msg/s" "$(offered "$n") / $(p "$n" rate)" \
        "$(offered "$a") / $(p "$a" rate)" "$(ratio "$(p "$n" rate)" "$(p "$a" rate)")"
    srow "$who" "$sc" "lateness p50 / p99 / max, ms" "$(lat3 "$n")" "$(lat3 "$a")" "$(p99x "$n" "$a")"
    srow "$who" "$sc" "lateness p99 over the broker alone's at the same rate, ms" \
        "$(plus "$(c "$n" lat_p99_ms)" "$(c "$a" lat_p99_ms)")" - -
    if [ "$sat" = 0 ] && [ "$who" = delay-bridge ]; then
        srow "$who" "$sc" "lateness p99 over the broker alone's both hops (p99s added), ms" \
            "$(plus "$(c "$n" lat_p99_ms)" "$(hops_p99 "${n#bridge-}")")" - -
    fi
    srow "$who" "$sc" "earliest delivery (lat_min), ms" "$(c "$n" lat_min_ms)" "$(c "$a" lat_min_ms)" -
    srow "$who" "$sc" "early (before send + delay) / arrived" "$(c "$n" early) / $(c "$n" unique)" - -
    [ "$sat" = 1 ] || srow "$who" "$sc" "publisher behind its schedule at most, ms" "$(p "$n" behind_max_ms)" \
        "$(p "$a" behind_max_ms)" -
    [ -s "$WORK/$n.fsyncs" ] || return 0
    srow "$who" "$sc" "stages wake / read / write / confirm, mean ms" \
        "$(st "$n" wake_mean_ms) / $(st "$n" read_mean_ms) / $(st "$n" write_mean_ms) / $(st "$n" confirm_mean_ms)" - -
    srow "$who" "$sc" "stages wake / read / write / confirm, p99 <= ms" \
        "$(st "$n" wake_p99_ms) / $(st "$n" read_p99_ms) / $(st "$n" write_p99_ms) / $(st "$n" confirm_p99_ms)" - -
    srow "$who" "$sc" "fsyncs per second, broker / bridge" \
        "$(fsps "$n" broker) / $(fsps "$n" bridge)" - -
    srow "$who" "$sc" "the bridge's fdatasync mean / p99 <=, ms" \
        "$(st "$n" fsync_mean_ms) / $(st "$n" fsync_p99_ms)" - -
}
# fsps NAME WHO: WHO's fsync + fdatasync calls per second during load NAME.
fsps() {
    local n s
    n=$(fs "$1" "$2") s=$(fs "$1" seconds)
    if isnum "$n" && isnum "$s" && [ "$s" != 0.0 ]; then fmt 0 "$n / $s"; else printf -- '-'; fi
}
# twohop_rows: the broker alone carrying both hops, at each load.
twohop_rows() {
    local l n sc
    for l in ${LOADS//,/ }; do
        n=twohop-$l sc="load $l%"
        srow "broker alone: both hops" "$sc" "acked hop (the ingress's) lateness p50 / p99 / max, ms" \
            "$(lat3 "$n-in")" "$(lat3 "alone-$l")" "$(p99x "$n-in" "alone-$l")"
        srow "broker alone: both hops" "$sc" "plain hop (the target's) lateness p50 / p99 / max, ms" \
            "$(lat3 "$n")" "$(lat3 "alone-$l")" "$(p99x "$n" "alone-$l")"
        srow "broker alone: both hops" "$sc" "the two hops' p99 added, ms" "$(hops_p99 "$l")" \
            "$(c "alone-$l" lat_p99_ms)" "$(ratio "$(hops_p99 "$l")" "$(c "alone-$l" lat_p99_ms)")"
        srow "broker alone: both hops" "$sc" "publishers behind their schedule at most, ms" \
            "$(p "$n-in" behind_max_ms) / $(p "$n" behind_max_ms)" - -
    done
}
# hops_p99 L: the two hops' p99 added at load L, ms ("-" when either is missing).
hops_p99() {
    local a b
    a=$(c "twohop-$1-in" lat_p99_ms) b=$(c "twohop-$1" lat_p99_ms)
    if isnum "$a" && isnum "$b"; then fmt 1 "$a + $b"; else printf -- '-'; fi
}
# system_rows WHO PREFIX [ALONE]: saturation and every load of one system
# (PREFIX-sat, PREFIX-L) against ALONE-sat, ALONE-L (default: alone, the
# broker alone through bench.out).
system_rows() {
    local who=$1 pre=$2 alone l
    for l in sat ${LOADS//,/ }; do
        alone="${3:-alone}-$l"
        [ "$pre" != alone ] || alone=""
        rows "$who" "$pre-$l" "$alone" "$([ "$l" = sat ] && echo saturation || echo "load $l%")"
    done
}
# early_total PREFIX: "E of A": early deliveries and arrivals over a system's loads.
early_total() {
    local e=0 u=0 x l
    for l in sat ${LOADS//,/ }; do
        x=$(c "$1-$l" early); isnum "$x" && e=$((e + x))
        x=$(c "$1-$l" unique); isnum "$x" && u=$((u + x))
    done
    printf '%s of %s' "$e" "$u"
}
# earliest PREFIX: the smallest lat_min over a system's loads, ms.
earliest() {
    local m="" x l
    for l in sat ${LOADS//,/ }; do
        x=$(c "$1-$l" lat_min_ms)
        isnum "$x" || continue
        if [ -z "$m" ] || awk "BEGIN { exit !($x < $m) }"; then m=$x; fi
    done
    printf '%s' "${m:--}"
}
# summary WHO PREFIX: one line of a delaying system's figures at each load.
summary() {
    local who=$1 pre=$2 l line
    line="summary, $BROKER_VSN, $who, generator $(gen_of "$pre"): full speed $(p "$pre-sat" rate) msg/s"
    line+=" ($(ratio "$(p "$pre-sat" rate)" "$(p alone-sat rate)") the broker alone);"
    line+=" lateness p50 / p99 / max"
    for l in ${LOADS//,/ }; do
        line+=" at $l% (${RATE[$l]} msg/s) $(lat3 "$pre-$l") ms"
        line+=" (p99 $(plus "$(c "$pre-$l" lat_p99_ms)" "$(c "alone-$l" lat_p99_ms)") over the broker alone's"
        [ "$pre" != bridge ] || line+=", $(plus "$(c "$pre-$l" lat_p99_ms)" "$(hops_p99 "$l")") over its both hops'"
        line+="),"
    done
    line+=" at full speed $(lat3 "$pre-sat") ms; early $(early_total "$pre"), earliest $(earliest "$pre") ms"
    echo "$line"
}

{
    echo
    echo "ontime benchmark on $BROKER_VSN, $(date -u +%FT%TZ), $(nproc) CPUs, load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1 /proc/loadavg)$([ "$SMOKE" = 1 ] && echo ', SMOKE sizes'), $N messages a load, delays $DELAY ms; generator: $GEN_DESC; both hops' acked consumer: $([ "$GEN" = c ] && echo load_consume || echo pace consume) $TWOHOP_ACK"
    echo "loads: ${LOADS//,/, } % of delay-bridge's accept rate at full speed, R = $R_BRIDGE msg/s"
    [ ! -s "$WORK/neighbour.out" ] || echo "disk: $(cat "$WORK/neighbour.out")"
    [ -z "${BENCH_ROUTE:-}${BENCH_STAMP:-}" ] ||
        echo "route keys: ${BENCH_ROUTE:-none}; publishers stamp timestamp_in_ms: $([ -n "${BENCH_STAMP:-}" ] && echo yes || echo no)"
    echo
    echo "Lateness at the loads people run on $BROKER_VSN, one run (broker alone = the broker alone at the same rate; ratio = value / the broker alone's)"
    echo
    srow_head
    system_rows "broker alone" alone
    twohop_rows
    system_rows delay-bridge bridge
    if [ "$PLUGIN" = 1 ]; then
        system_rows "$PLUGIN_NAME" plugin
    else
        srow "$PLUGIN_NAME" - "$PLUGIN_WHY" - - -
    fi
    if [ "$QQ" = 1 ]; then
        system_rows "broker alone: quorum queue" qqalone
        system_rows "$QQ_NAME" qq
        system_rows "$QQ_NAME / its quorum queue" qq qqalone
    else
        srow "$QQ_NAME" - "$QQ_WHY" - - -
    fi
    echo
    line="summary, $BROKER_VSN, broker alone, generator $(gen_of plain): full speed $(p alone-sat rate) msg/s; end-to-end latency p50 / p99 / max"
    for l in ${LOADS//,/ }; do line+=" at $l% (${RATE[$l]} msg/s) $(lat3 "alone-$l") ms,"; done
    echo "$line at full speed $(lat3 alone-sat) ms"
    line="summary, $BROKER_VSN, broker alone, both hops at once, generator $(gen_of twohop): p99 of the acked + the plain hop"
    for l in ${LOADS//,/ }; do
        line+=" at $l% $(c "twohop-$l-in" lat_p99_ms) + $(c "twohop-$l" lat_p99_ms) = $(hops_p99 "$l") ms,"
    done
    echo "${line%,}"
    summary delay-bridge bridge
    if [ "$PLUGIN" = 1 ]; then
        summary "$PLUGIN_NAME" plugin
    else
        echo "summary, $BROKER_VSN, $PLUGIN_NAME: $PLUGIN_WHY"
    fi
    if [ "$QQ" = 1 ]; then
        summary "$QQ_NAME" qq
    else
        echo "summary, $BROKER_VSN, $QQ_NAME: $QQ_WHY"
    fi
} | tee "$WORK/report.txt"

WHO="delay-bridge, broker alone"
if [ "$PLUGIN" = 1 ]; then WHO="delay-bridge, $PLUGIN_NAME, broker alone"; fi
if [ "$QQ" = 1 ]; then WHO="$WHO, $QQ_NAME"; fi
if [ ${#FAILED[@]} -gt 0 ]; then
    say "$BROKER_VSN ($WHO): FAILED: ${FAILED[*]}"
    exit 1
fi
say "$BROKER_VSN ($WHO): all messages arrived"
exit 0
