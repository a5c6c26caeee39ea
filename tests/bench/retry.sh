#!/bin/bash
# retry.sh -- what a retry costs the broker through delay-bridge's retry
# route and through a TTL + dead-letter ladder, and the retry load each
# sustains, on one fresh broker in one run (tests/bench/README.md, "What a
# retry costs").
#
#   tests/bench/retry.sh [--count N] [--rates R,R] [--delay MS] [--duration S]
#                        [--start-rate R] [--max-rate R] [--resolution PCT] [--lag-ms MS]
#                        [--cpu LIST] [--sustain LIST] [--smoke] [--keep]
#
# (a) The broker's CPU per message, four paths, N messages each (--count,
# default 40000), at each rate of --rates (default 0,2000): 0 publishes as
# fast as a confirm window of 1000 allows, as hops.sh's streaming phases do
# (what a message costs a busy broker, its work batched); a rate publishes
# open loop at that many msg/s (what it costs a broker that is not busy:
# every message its own wake-ups, frames and syscalls). One consumer
# (load_retry: one basic.ack or basic.reject per message, prefetch 200, as
# client libraries consume) on the path's queue throughout:
#   base     the broker alone: publish to bench.target -> bench.out, acked
#   delayed  a delayed message through the bridge: x-delay DELAY (--delay,
#            default 1000 ms) to route "bench"'s ingress bench.delayed; the
#            bridge holds it and publishes it to bench.target -> bench.out
#   retry    a retry through the bridge: publish to bench.rwork.x (key
#            work.0) -> bench.rwork, whose x-dead-letter-exchange is retry
#            route "retry-a"'s ingress bench.retry.a; the consumer rejects
#            each message once (no requeue), the bridge holds it DELAY ms
#            (initial_ms) and sends it back to bench.rwork through "", the
#            consumer acks it
#   ladder   the same retry through a one-level TTL + DLX ladder, the shape
#            kombu's and NServiceBus's delay levels have: bench.lwork
#            (x-dead-letter-exchange bench.ladder, direct) -> on reject
#            bench.ladder routes key work.0 to bench.ladder.a1 (x-message-ttl
#            DELAY, x-dead-letter-exchange bench.lwork.x, x-dead-letter-
#            routing-key work.1) -> on expiry back to bench.lwork (bound to
#            bench.lwork.x with work.0 and work.1); the consumer acks it
#   qq       the same retry inside a quorum queue, RabbitMQ 4.3's own delayed
#            retry (RabbitMQ 4.3 and later only; skipped before): bench.qwork
#            (x-queue-type quorum, x-delayed-retry-type failed, -min and -max
#            DELAY, x-delivery-limit 100); the consumer rejects each message
#            once WITH requeue, the queue holds it DELAY ms and delivers it
#            again, the consumer acks it
#   base2    base again, last: the baseline is the mean of base and base2
# charged as hops.sh charges a phase: user + system CPU of every process in
# the node's session (/proc; beam.smp and its helpers) from the consumer
# ready to the last ack, less what the broker burns idle over as long
# (measured first, the bridge connected), over N. Printed as µs per message
# and as a ratio to the baseline, and the cost of the retry itself (the
# path's minus the baseline's) through the bridge against the ladder; the
# bridge's own CPU per message in rows of its own.
#
# (b) The sustainable retry load. A consumer fails every 10th message
# three times (rejects it, no requeue) and acks it on its 4th delivery;
# every other message is acked at once. Backoff 100 ms, then 200, then 400:
#   retry    through retry route "retry-b" (initial_ms 100, multiplier 2,
#            max_attempts 4, jitter none; parking bench.parked.b), work queue
#            bench.swork (x-dead-letter-exchange bench.retry.b)
#   ladder   through a ladder of one level per attempt, the levels told apart
#            by routing key (NServiceBus's way): bench.mwork (x-dead-letter-
#            exchange bench.mladder, direct) bound to bench.mwork.x with
#            work.0..work.3; bench.mladder routes work.0 -> bench.mladder.1
#            (TTL 100, dead-letters to bench.mwork.x with key work.1),
#            work.1 -> .2 (TTL 200, key work.2), work.2 -> .3 (TTL 400, key
#            work.3), work.3 -> bench.mladder.parked
#   qq       RabbitMQ 4.3's delayed retry (4.3 and later): bench.qswork, a
#            quorum queue with x-delayed-retry-type failed, -min 100, -max
#            400; the consumer rejects with requeue. Its backoff is linear,
#            min x delivery count: 100, 200, 300 ms (the others' third is 400)
# Each step publishes open loop at an offered rate for --duration seconds
# (default 15) and waits until the consumer acked every message. A rate is
# sustained when (1) every message was acked, none parked, (2) the
# publisher kept its schedule (behind_max_ms <= --lag-ms, default 1000, and
# the rate confirmed from its first send to its last confirm at least 98 %
# of the offered one),
# (3) 99 % of the messages completed within --lag-ms of their schedule
# (send time + the backoffs of their failures), and (4) the retry backlog
# did not grow: the ready messages of the retry queues (the route's ingress
# queue, or the ladder's levels) and the bridge's held retries (/stats
# pending, sampled each second), and the work queue's, averaged over the
# last quarter of the publishing against its second quarter: grown by no
# more than half plus 50 ms of arrivals. Search: from --start-rate (default
# 1000) doubling while sustained (up to --max-rate, default 64000), halving
# while not, then bisecting until the bounds are within --resolution %
# (default 10). Printed: every step, each system's highest sustained
# offered rate, and their ratio.
#
#   --cpu LIST       paths of (a), default base,delayed,retry,ladder,qq ("none": skip (a))
#   --sustain LIST   systems of (b), default retry,ladder,qq ("none": skip (b))
#                    (qq is left out, with a line saying so, before RabbitMQ 4.3)
#   --smoke          (a) 300 messages a path at full speed, delay 300 ms;
#                    (b) one step each at 200 msg/s for 2 s, no search: for
#                    CI (ctest bench.retry.smoke), about 27 s
#   --keep           keep the work directory (config, logs, WAL, summaries)
#
# Broker: DB_RABBITMQ (3.10, 4.0, 4.3; default 3.10, as the others) picks it
#   (tests/integration/broker.sh), its own node on 127.0.0.1:${BENCH_PORT:-5694}
#   (distribution port ${BENCH_DIST_PORT:-25694}), state in
#   ${BENCH_BROKER_DIR:-$BUILD_DIR/bench-retry-rabbitmq}, fresh, stopped at the end.
#   Every queue is classic (the bridge's ingress queues too), messages 256 B,
#   persistent, published with confirms (load_publish).
# BUILD_DIR, BENCH_BRIDGE_BIN, BENCH_TOOLS_DIR, BENCH_TMP as in run.sh.
#
# Never asserts on a time or a rate. Exit 0 when every message of (a) and of
# every step of (b) was acked (and the bridge's x-retry-attempt matched the
# consumer's count), 1 when not, 2 on a usage or setup error, 77 without
# rabbitmq-server (or when this machine cannot run DB_RABBITMQ's broker).
set -Eeuo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

say() { printf '[retry %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }

N=40000 RATES=0,2000 DELAY=1000 DURATION=15 START_RATE=1000 MAX_RATE=64000 RES=10 LAG_MS=1000
CPU_PATHS=base,delayed,retry,ladder,qq SUSTAIN=retry,ladder,qq SMOKE=0 KEEP=0
num() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 $2: expected a positive integer"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --count|--rates|--delay|--duration|--start-rate|--max-rate|--resolution|--lag-ms|--cpu|--sustain)
        [ $# -ge 2 ] || die "$1 needs a value"
        case "$1" in
        --count) num "$1" "$2"; N=$2 ;;
        --rates) [[ "$2" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--rates $2: expected rates, comma-separated (0: full speed)"; RATES=$2 ;;
        --delay) num "$1" "$2"; DELAY=$2 ;;
        --duration) num "$1" "$2"; DURATION=$2 ;;
        --start-rate) num "$1" "$2"; START_RATE=$2 ;;
        --max-rate) num "$1" "$2"; MAX_RATE=$2 ;;
        --resolution) num "$1" "$2"; RES=$2 ;;
        --lag-ms) num "$1" "$2"; LAG_MS=$2 ;;
        --cpu) CPU_PATHS=$2 ;;
        --sustain) SUSTAIN=$2 ;;
        esac
        shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
    esac
done
[ "$SMOKE" = 0 ] || { N=300 RATES=0 DELAY=300 DURATION=2 START_RATE=200; }
[ "$CPU_PATHS" != none ] || CPU_PATHS=""
[ "$SUSTAIN" != none ] || SUSTAIN=""
IFS=, read -ra cpu_paths <<<"$CPU_PATHS"
IFS=, read -ra rates <<<"$RATES"
IFS=, read -ra systems <<<"$SUSTAIN"
for v in "${cpu_paths[@]}"; do
    case "$v" in base|delayed|retry|ladder|qq) ;; *) die "--cpu: unknown path $v (base, delayed, retry, ladder, qq)" ;; esac
done
for v in "${systems[@]}"; do
    case "$v" in retry|ladder|qq) ;; *) die "--sustain: unknown system $v (retry, ladder, qq)" ;; esac
done
[ ${#cpu_paths[@]} -gt 0 ] || [ ${#systems[@]} -gt 0 ] || die "nothing to run (--cpu none --sustain none)"
# The retry routes are in the config only when a retry path runs.
WANT_RETRY=0
[[ ",$CPU_PATHS,$SUSTAIN," != *,retry,* ]] || WANT_RETRY=1

# get, now_ms, calc, fmt, free_port, proc_cpu_ms, session_cpu_ms, ratio, bench_preflight
. "$HERE/common.sh"
bench_preflight load_retry
LR=$TOOLS/load_retry
# broker_start, bench_setup, bench_traps, wait_ready, bridge_launch, bridge_ready
. "$HERE/harness.sh"
bench_setup retry 5694 bench-retry-rabbitmq
BRIDGE_PID="" CONS_PID="" HTTP_PORT="" BROKER_SID="" FAILED=() WATCH_PID="" SAMPLER_PID=""
declare -A R
BROKER_VSN=$(sed -E 's/^(RabbitMQ [0-9]+(\.[0-9]+)*).*/\1/' <<<"${BROKER_DESC:-RabbitMQ ?}")
# RabbitMQ 4.3's delayed retry in quorum queues (the qq path and system): 4.3 and later only.
WANT_QQ=0
if [[ ",$CPU_PATHS,$SUSTAIN," == *,qq,* ]]; then
    if awk -v v="${BROKER_VSN#RabbitMQ }" 'BEGIN { split(v, a, "."); exit !(a[1] > 4 || (a[1] == 4 && a[2] >= 3)) }'; then
        WANT_QQ=1
    else
        say "$BROKER_VSN has no delayed retry in quorum queues (4.3 and later): qq left out"
        drop_qq() { local out=() v; IFS=, read -ra vs <<<"$1"; for v in "${vs[@]}"; do [ "$v" = qq ] || out+=("$v"); done; (IFS=,; echo "${out[*]}"); }
        CPU_PATHS=$(drop_qq "$CPU_PATHS") SUSTAIN=$(drop_qq "$SUSTAIN")
        IFS=, read -ra cpu_paths <<<"$CPU_PATHS"
        IFS=, read -ra systems <<<"$SUSTAIN"
    fi
fi
# plugin_check_started (broker_start calls it); the plugin is not measured here (PLUGIN=0).
. "$HERE/plugin.sh"
bench_cleanup_first() {
    [ -z "$WATCH_PID" ] || kill "$WATCH_PID" 2>/dev/null
    [ -z "$SAMPLER_PID" ] || kill "$SAMPLER_PID" 2>/dev/null
}
bench_traps

stats() { curl -sf "http://127.0.0.1:$HTTP_PORT/stats" | jq -r "$1"; }
route_pending() { stats ".routes[] | select(.name == \"$1\") | .pending" 2>/dev/null || echo -; }

# ---------------------------------------------------------------- broker, bridge, topology

write_config() {
    local retry=""
    if [ "$WANT_RETRY" = 1 ]; then
        retry=",
    { \"name\": \"retry-a\", \"ingress_exchange\": \"bench.retry.a\", \"ingress_queue\": \"bench.retry.a.q\",
      \"retry\": { \"initial_ms\": $DELAY, \"multiplier\": 2.0, \"max_attempts\": 2, \"jitter\": \"none\",
                 \"parking_exchange\": \"bench.parked.a\", \"parking_queue\": \"bench.parked.a\",
                 \"queues\": { \"bench.rwork\": {} } } },
    { \"name\": \"retry-b\", \"ingress_exchange\": \"bench.retry.b\", \"ingress_queue\": \"bench.retry.b.q\",
      \"retry\": { \"initial_ms\": 100, \"multiplier\": 2.0, \"max_attempts\": 4, \"jitter\": \"none\",
                 \"parking_exchange\": \"bench.parked.b\", \"parking_queue\": \"bench.parked.b\",
                 \"queues\": { \"bench.swork\": {} } } }"
    fi
    HTTP_PORT=$(free_port)
    mkdir -p "$WORK/wal"
    cat >"$WORK/bridge.json" <<EOF
{
  "broker": { "uri": "$URI" },
  "wal": { "dir": "$WORK/wal", "fsync": true },
  "http": { "listen": "127.0.0.1:$HTTP_PORT" },
  "log": { "level": "info" },
  "routes": [
    { "name": "bench", "ingress_exchange": "bench.delayed", "ingress_queue": "bench.delayed.q",
      "target_exchange": "bench.target" }$retry
  ]
}
EOF
}

declare_topology() {
    "$LR" declare --uri "$URI" \
        x:bench.target q:bench.out b:bench.out:bench.target:bench \
        x:bench.rwork.x q:bench.rwork:dlx=bench.retry.a b:bench.rwork:bench.rwork.x:work.0 \
        x:bench.lwork.x q:bench.lwork:dlx=bench.ladder \
        b:bench.lwork:bench.lwork.x:work.0 b:bench.lwork:bench.lwork.x:work.1 \
        x:bench.ladder q:bench.ladder.a1:ttl=$DELAY,dlx=bench.lwork.x,dlk=work.1 \
        b:bench.ladder.a1:bench.ladder:work.0 \
        x:bench.swork.x q:bench.swork:dlx=bench.retry.b b:bench.swork:bench.swork.x:work.0 \
        x:bench.mwork.x q:bench.mwork:dlx=bench.mladder \
        b:bench.mwork:bench.mwork.x:work.0 b:bench.mwork:bench.mwork.x:work.1 \
        b:bench.mwork:bench.mwork.x:work.2 b:bench.mwork:bench.mwork.x:work.3 \
        x:bench.mladder \
        q:bench.mladder.1:ttl=100,dlx=bench.mwork.x,dlk=work.1 b:bench.mladder.1:bench.mladder:work.0 \
        q:bench.mladder.2:ttl=200,dlx=bench.mwork.x,dlk=work.2 b:bench.mladder.2:bench.mladder:work.1 \
        q:bench.mladder.3:ttl=400,dlx=bench.mwork.x,dlk=work.3 b:bench.mladder.3:bench.mladder:work.2 \
        q:bench.mladder.parked b:bench.mladder.parked:bench.mladder:work.3 \
        || die "declaring the topology failed"
    [ "$WANT_QQ" = 0 ] || "$LR" declare --uri "$URI" \
        x:bench.qwork.x q:bench.qwork:type=quorum,drt=failed,drmin=$DELAY,drmax=$DELAY,limit=100 \
        b:bench.qwork:bench.qwork.x:work.0 \
        x:bench.qswork.x q:bench.qswork:type=quorum,drt=failed,drmin=100,drmax=400,limit=100 \
        b:bench.qswork:bench.qswork.x:work.0 \
        || die "declaring the quorum queues with delayed retry failed"
}

# ---------------------------------------------------------------- (a) CPU per message

phase_begin() { P_CPU=$(session_cpu_ms "$BROKER_SID") P_T=$(now_ms) P_BR=$(proc_cpu_ms "$BRIDGE_PID"); }
phase_end() { # phase_end KEY COUNT
    local dt=$(( $(now_ms) - P_T ))
    R[$1]=$(fmt 1 "(($(session_cpu_ms "$BROKER_SID") - $P_CPU) - $IDLE * $dt / 1000.0) * 1000.0 / $2")
    R[$1.bridge]=$(fmt 1 "($(proc_cpu_ms "$BRIDGE_PID") - $P_BR) * 1000.0 / $2")
    R[$1.s]=$(fmt 1 "$dt / 1000.0")
}

TAG=0
# consumer_bg NAME QUEUE COUNT [load_retry consume options]: ready, in the background.
consumer_bg() {
    local name=$1 queue=$2 count=$3
    shift 3
    rm -f "$WORK/$name.ready"
    "$LR" consume --uri "$URI" --queue "$queue" --count "$count" --tag "$TAG" \
        --ready-file "$WORK/$name.ready" "$@" >"$WORK/$name.consume" 2>"$WORK/$name.consume.err" &
    CONS_PID=$!
    wait_ready "$name" "$CONS_PID" "$WORK/$name.consume.err"
}
# consumer_wait NAME COUNT: its summary; a FAILED entry when it stopped short.
consumer_wait() {
    local rc=0
    wait "$CONS_PID" || rc=$?
    CONS_PID=""
    if [ "$rc" != 0 ] || [ "$(c "$1" completed)" != "$2" ]; then
        FAILED+=("$BROKER_VSN $1: $(c "$1" completed) of $2 acked (consumer exit $rc: $(tail -n 1 "$WORK/$1.consume.err"))")
        say "$1: MISSING messages"
    fi
    [ "$(c "$1" attempt_mismatch)" = 0 ] ||
        FAILED+=("$BROKER_VSN $1: x-retry-attempt differed from the consumer's count $(c "$1" attempt_mismatch) times")
}
pub() { # pub NAME [load_publish options]
    local name=$1
    shift
    "$PUB" --uri "$URI" --tag "$TAG" "$@" >"$WORK/$name.publish" 2>"$WORK/$name.publish.err" ||
        { cat "$WORK/$name.publish.err" >&2; die "publisher $name failed"; }
}

cpu_path() { # cpu_path RATE PATH [KEY]: R[RATE.KEY] (KEY default PATH)
    local rate=$1 path=$2 key=$1.${3:-$2} queue pargs=() cargs=()
    TAG=$((TAG + 1))
    case "$path" in
    base) queue=bench.out; pargs=(--mode plain --exchange bench.target --routing-key bench) ;;
    delayed) queue=bench.out; pargs=(--mode xdelay --delay "$DELAY" --exchange bench.delayed --routing-key bench) ;;
    retry) queue=bench.rwork; pargs=(--mode plain --exchange bench.rwork.x --routing-key work.0)
           cargs=(--fail-every 1 --fail-times 1 --backoff "$DELAY" --attempt-header) ;;
    ladder) queue=bench.lwork; pargs=(--mode plain --exchange bench.lwork.x --routing-key work.0)
            cargs=(--fail-every 1 --fail-times 1 --backoff "$DELAY") ;;
    qq) queue=bench.qwork; pargs=(--mode plain --exchange bench.qwork.x --routing-key work.0)
        cargs=(--fail-every 1 --fail-times 1 --backoff "$DELAY" --requeue) ;;
    esac
    consumer_bg "$key" "$queue" "$N" --idle 20 "${cargs[@]}"
    phase_begin
    [ "$rate" = 0 ] || pargs+=(--rate "$rate")
    pub "$key" "${pargs[@]}" --count "$N"
    consumer_wait "$key" "$N"
    phase_end "$key" "$N"
    say "$key: broker ${R[$key]} µs/msg, bridge ${R[$key.bridge]} µs/msg over ${R[$key.s]} s; $(cat "$WORK/$key.consume")"
}

# ---------------------------------------------------------------- (b) sustainable rate

# growth FILE T0 T1 COLS: mean of the summed columns (2-based, "2,3") over
# the publishing's second quarter and its last quarter: "EARLY LATE".
growth() {
    awk -v t0="$2" -v t1="$3" -v cols="$4" 'BEGIN { n = split(cols, cs, ",") }
        { v = 0; for (i = 1; i <= n; i++) v += $(cs[i]); d = t1 - t0
          if ($1 >= t0 + d / 4 && $1 < t0 + d / 2) { e += v; ne++ }
          if ($1 >= t0 + 3 * d / 4 && $1 <= t1) { l += v; nl++ } }
        END { printf "%.0f %.0f", ne ? e / ne : 0, nl ? l / nl : 0 }' "$1"
}
grows() { awk -v e="$1" -v l="$2" -v r="$3" 'BEGIN { exit !(l > 1.5 * e + 0.05 * r) }'; }

# drained SYS: wait (up to 60 s) until its queues are empty and the bridge holds none of its retries.
drained() {
    local qs=$1 route=$2 line pend
    for _ in $(seq 120); do
        line=$("$LR" watch --uri "$URI" --queues "$qs" --once 2>/dev/null || echo "0 x")
        pend=0
        [ -z "$route" ] || pend=$(route_pending "$route")
        awk -v p="$pend" '{ s = 0; for (i = 2; i <= NF; i++) s += $i } END { exit !(s == 0 && p == 0) }' <<<"$line" &&
            return 0
        sleep 0.5
    done
    say "not drained after 60 s ($qs: $line; pending $pend): purging"
    # shellcheck disable=SC2046  # one p:QUEUE word a queue
    "$LR" declare --uri "$URI" $(tr ',' '\n' <<<"$qs" | sed 's/^/p:/') >/dev/null 2>&1 || true
    [ -z "$route" ] || curl -sf -X POST -H "X-Delay-Bridge: 1" "http://127.0.0.1:$HTTP_PORT/purge?route=$route" >/dev/null || true
}

STEP_ROWS=()
# sustain_step SYS RATE: one step; STEP_OK=1 when RATE was sustained.
sustain_step() {
    local sys=$1 rate=$2 n name work ex qs route="" cargs=() backoff=100,200,400 t0 t1 ew el eb lb pe pl verdict why=()
    n=$((rate * DURATION))
    TAG=$((TAG + 1))
    name=s-$sys-$rate
    case "$sys" in
    retry) work=bench.swork ex=bench.swork.x qs=bench.swork,bench.retry.b.q route=retry-b
           cargs=(--attempt-header) ;;
    ladder) work=bench.mwork ex=bench.mwork.x qs=bench.mwork,bench.mladder.1,bench.mladder.2,bench.mladder.3 ;;
    qq) work=bench.qswork ex=bench.qswork.x qs=bench.qswork cargs=(--requeue) backoff=100,200,300 ;;
    esac
    say "== $sys at $rate msg/s for $DURATION s ($n messages, every 10th failed 3 times)"
    "$LR" watch --uri "$URI" --queues "$qs" --interval-ms 500 >"$WORK/$name.watch" 2>/dev/null &
    WATCH_PID=$!
    if [ -n "$route" ]; then
        while sleep 1; do printf '%s %s\n' "$(now_ms)" "$(route_pending "$route")"; done >"$WORK/$name.pending" &
        SAMPLER_PID=$!
    fi
    consumer_bg "$name" "$work" "$n" --fail-every 10 --fail-times 3 --backoff "$backoff" --idle 15 \
        --deadline $((DURATION * 8 + 120)) "${cargs[@]}"
    t0=$(now_ms)
    pub "$name" --mode plain --exchange "$ex" --routing-key work.0 --count "$n" --rate "$rate"
    t1=$(p "$name" end_ms)
    consumer_wait "$name" "$n"
    kill "$WATCH_PID" 2>/dev/null || true; wait "$WATCH_PID" 2>/dev/null || true; WATCH_PID=""
    if [ -n "$SAMPLER_PID" ]; then
        kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=""
    fi
    # work queue: column 2; the retry queues: the rest
    read -r ew el <<<"$(growth "$WORK/$name.watch" "$t0" "$t1" 2)"
    read -r eb lb <<<"$(growth "$WORK/$name.watch" "$t0" "$t1" "$(seq -s, 3 $(( $(tr ',' '\n' <<<"$qs" | wc -l) + 1 )))")"
    pe=0 pl=0
    [ -z "$route" ] || read -r pe pl <<<"$(growth "$WORK/$name.pending" "$t0" "$t1" 2)"
    [ "$(c "$name" completed)" = "$n" ] || why+=("not all acked")
    awk -v b="$(p "$name" behind_max_ms)" -v m="$LAG_MS" -v a="$(p "$name" rate)" -v r="$rate" \
        'BEGIN { exit !(b <= m && a >= 0.98 * r) }' || why+=("publisher behind")
    awk -v l="$(c "$name" lag_p99_ms)" -v m="$LAG_MS" 'BEGIN { exit !(l <= m) }' || why+=("late")
    ! grows "$ew" "$el" "$rate" || why+=("work queue grows")
    ! grows "$((eb + pe))" "$((lb + pl))" "$rate" || why+=("retries grow")
    if [ ${#why[@]} -eq 0 ]; then STEP_OK=1 verdict=sustained; else STEP_OK=0 verdict="no: $(IFS=,; echo "${why[*]}")"; fi
    STEP_ROWS+=("$(printf '| %-13s | %7s | %8s | %9s | %-22s | %-24s | %-15s | %-13s | %s |' \
        "$sys" "$rate" "$(p "$name" rate)" "$(p "$name" behind_max_ms)" \
        "$(c "$name" lag_p50_ms) / $(c "$name" lag_p99_ms) / $(c "$name" lag_max_ms)" \
        "$(c "$name" retry_late_p50_ms) / $(c "$name" retry_late_p99_ms), $(c "$name" early) early" \
        "$((eb + pe)) -> $((lb + pl))" "$ew -> $el" "$verdict")")
    say "$sys $rate msg/s: $verdict; $(cat "$WORK/$name.consume")"
    drained "$qs" "$route"
    sleep 2
}

sustain_search() { # sustain_search SYS: R[SYS.sustained]
    local sys=$1 lo=0 hi=0 rate=$START_RATE
    while :; do
        sustain_step "$sys" "$rate"
        [ "$SMOKE" = 0 ] || { [ "$STEP_OK" = 1 ] && lo=$rate; break; }
        if [ "$STEP_OK" = 1 ]; then lo=$rate; else hi=$rate; fi
        if [ "$hi" = 0 ]; then
            rate=$((rate * 2)); [ "$rate" -le "$MAX_RATE" ] || break
        elif [ "$lo" = 0 ]; then
            rate=$((rate / 2)); [ "$rate" -ge 50 ] || break
        else
            [ $((hi * 100)) -gt $((lo * (100 + RES))) ] || break
            rate=$(( (lo + hi) / 20 * 10 ))
            [ "$rate" -gt "$lo" ] || break
        fi
    done
    R[$sys.sustained]=$lo R[$sys.failed_at]=$hi
}

# ---------------------------------------------------------------- the run

say "machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg); delay-bridge $BRIDGE_BUILT"
say "work directory $WORK, broker state $BROKER_DIR, port $PORT"
broker_start >&2
write_config
bridge_launch
bridge_ready 60
declare_topology
say "the bridge runs (pid $BRIDGE_PID, http $HTTP_PORT); topology declared"

if [ ${#cpu_paths[@]} -gt 0 ]; then
    sleep 2
    idle_rate
    say "(a) broker idle ${IDLE} ms CPU/s; $N x 256 B a path at each of $RATES msg/s (0: full speed), delay/backoff $DELAY ms"
    for rate in "${rates[@]}"; do
        [[ ",$CPU_PATHS," != *,base,* ]] || cpu_path "$rate" base
        for v in delayed retry ladder qq; do
            [[ ",$CPU_PATHS," != *,$v,* ]] || cpu_path "$rate" "$v"
        done
        if [[ ",$CPU_PATHS," == *,base,* ]]; then
            cpu_path "$rate" base base2
            R[$rate.baseline]=$(fmt 1 "(${R[$rate.base]} + ${R[$rate.base2]}) / 2")
        fi
    done
fi
for s in "${systems[@]}"; do sustain_search "$s"; done
parked=$("$LR" watch --uri "$URI" --queues "bench.mladder.parked$([ "$WANT_RETRY" = 0 ] || echo ,bench.parked.a,bench.parked.b)" --once 2>/dev/null |
         cut -d' ' -f2- || echo "?")

# ---------------------------------------------------------------- report
# Rows in the side-by-side layout of run.sh and ontime.sh (median.sh merges
# them across runs): | broker | via | scenario | figure | value | baseline | ratio |.
xrow() { printf '| %-15s | %-21s | %-30s | %-58s | %34s | %10s | %12s |\n' "$BROKER_VSN" "$@"; }
xrow_head() {
    printf '| %-15s | %-21s | %-30s | %-58s | %34s | %10s | %12s |\n' broker via scenario figure value baseline ratio
    printf '|%s|%s|%s|%s|%s|%s|%s|\n' ----------------- ----------------------- -------------------------------- \
        "$(printf -- '-%.0s' $(seq 60))" -----------------------------------: -----------: -------------:
}
late_cell() { printf '%s / %s / %s, %s early' "$(c "$1" retry_late_p50_ms)" "$(c "$1" retry_late_p99_ms)" \
              "$(c "$1" retry_late_max_ms)" "$(c "$1" early)"; }
echo
echo "Retries on $BROKER_VSN, delay-bridge built $BRIDGE_BUILT, $(nproc) CPUs"
# a_rows RATE: (a)'s rows at one rate, each scenario naming it.
a_rows() {
    local k=$1 at B CPU="broker CPU per message, us" late="retry late (redelivery - reject - backoff) p50/p99/max ms"
    B=${R[$k.baseline]:--}
    if [ "$k" = 0 ]; then at="full speed"; else at="$k msg/s"; fi
    [ -z "${R[$k.base]:-}" ] || xrow "broker alone" "publish -> consume, $at" "$CPU (first)" "${R[$k.base]}" "$B" "$(ratio "${R[$k.base]}" "$B")"
    if [ -n "${R[$k.delayed]:-}" ]; then
        xrow delay-bridge "delayed message, $at" "$CPU" "${R[$k.delayed]}" "$B" "$(ratio "${R[$k.delayed]}" "$B")"
        xrow delay-bridge "delayed message, $at" "bridge CPU per message, us" "${R[$k.delayed.bridge]}" - -
    fi
    if [ -n "${R[$k.retry]:-}" ]; then
        xrow delay-bridge "retry once, $at" "$CPU" "${R[$k.retry]}" "$B" "$(ratio "${R[$k.retry]}" "$B")"
        xrow delay-bridge "retry once, $at" "bridge CPU per message, us" "${R[$k.retry.bridge]}" - -
        xrow delay-bridge "retry once, $at" "$late" "$(late_cell "$k.retry")" - -
    fi
    if [ -n "${R[$k.ladder]:-}" ]; then
        xrow "TTL ladder, 1 level" "retry once, $at" "$CPU" "${R[$k.ladder]}" "$B" "$(ratio "${R[$k.ladder]}" "$B")"
        xrow "TTL ladder, 1 level" "retry once, $at" "$late" "$(late_cell "$k.ladder")" - -
    fi
    if [ -n "${R[$k.retry]:-}" ] && [ -n "${R[$k.ladder]:-}" ] && [ "$B" != - ]; then
        R[$k.re]=$(fmt 1 "${R[$k.retry]} - $B") R[$k.le]=$(fmt 1 "${R[$k.ladder]} - $B")
        xrow delay-bridge "retry once, $at" "the retry alone (minus baseline), us; ratio: / ladder's" "${R[$k.re]}" - "$(ratio "${R[$k.re]}" "${R[$k.le]}")"
        xrow "TTL ladder, 1 level" "retry once, $at" "the retry alone (minus baseline), us" "${R[$k.le]}" - -
        xrow delay-bridge "retry once, $at" "$CPU; ratio: / ladder's" "${R[$k.retry]}" - "$(ratio "${R[$k.retry]}" "${R[$k.ladder]}")"
    fi
    if [ -n "${R[$k.qq]:-}" ]; then
        xrow "quorum delayed retry" "retry once, $at" "$CPU" "${R[$k.qq]}" "$B" "$(ratio "${R[$k.qq]}" "$B")"
        xrow "quorum delayed retry" "retry once, $at" "$late" "$(late_cell "$k.qq")" - -
        [ -z "${R[$k.retry]:-}" ] ||
            xrow delay-bridge "retry once, $at" "$CPU; ratio: / quorum delayed retry's" "${R[$k.retry]}" - "$(ratio "${R[$k.retry]}" "${R[$k.qq]}")"
    fi
    [ -z "${R[$k.base2]:-}" ] || xrow "broker alone" "publish -> consume, $at" "$CPU (again, last)" "${R[$k.base2]}" "$B" "$(ratio "${R[$k.base2]}" "$B")"
}
if [ ${#cpu_paths[@]} -gt 0 ]; then
    echo
    echo "(a) $N x 256 B a path, published at full speed (confirm window 1000) or open loop at a rate, one consumer"
    echo "    acking or rejecting each message (prefetch 200); delay and backoff $DELAY ms; broker idle ${IDLE} ms CPU/s"
    echo "    removed; baseline: the mean of the two broker-alone runs at that rate"
    echo
    xrow_head
    for rate in "${rates[@]}"; do a_rows "$rate"; done
fi
if [ ${#systems[@]} -gt 0 ]; then
    echo
    echo "(b) Sustained retry load on $BROKER_VSN: every 10th message failed 3 times (backoff 100/200/400 ms; quorum delayed retry: 100/200/300), $DURATION s a step;"
    echo "    sustained = all acked, publisher on schedule (behind <= $LAG_MS ms, achieved >= 98 %), lag p99 <= $LAG_MS ms, no growing backlog (ready messages"
    echo "    and held retries, mean over the second quarter of the publishing -> over its last quarter)"
    echo
    printf '| %-13s | %7s | %8s | %9s | %-22s | %-24s | %-15s | %-13s | %s |\n' system offered \
        achieved "behind ms" "lag p50 / p99 / max ms" "retry late p50/p99, early" "retry backlog" "work queue" verdict
    printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' --------------- --------: ---------: \
        ----------: ------------------------ -------------------------- ----------------- --------------- --------
    printf '%s\n' "${STEP_ROWS[@]}"
    echo
    xrow_head
    for s in "${systems[@]}"; do
        case "$s" in
        retry) via=delay-bridge
               r=$( [ -z "${R[ladder.sustained]:-}" ] || ratio "${R[retry.sustained]}" "${R[ladder.sustained]}") ;;
        ladder) via="TTL ladder, 3 levels" r=- ;;
        qq) via="quorum delayed retry" r=- ;;
        esac
        xrow "$via" "retry 10 % x 3" "highest sustained offered rate, msg/s$([ "$s" = retry ] && [ -n "$r" ] && echo "; ratio: / ladder's")" \
            "${R[$s.sustained]}" - "${r:--}"
    done
fi
echo
for k in "${rates[@]}"; do
    [ ${#cpu_paths[@]} -gt 0 ] && [ -n "${R[$k.baseline]:-}" ] || continue
    if [ "$k" = 0 ]; then at="full speed"; else at="$k msg/s"; fi
    line="broker CPU per message, baseline ${R[$k.baseline]} µs"
    [ -z "${R[$k.delayed]:-}" ] || line+="; delayed through the bridge ${R[$k.delayed]} µs = $(ratio "${R[$k.delayed]}" "${R[$k.baseline]}")"
    [ -z "${R[$k.retry]:-}" ] || line+="; retry through the bridge ${R[$k.retry]} µs = $(ratio "${R[$k.retry]}" "${R[$k.baseline]}")"
    [ -z "${R[$k.ladder]:-}" ] || line+="; retry through a TTL ladder ${R[$k.ladder]} µs = $(ratio "${R[$k.ladder]}" "${R[$k.baseline]}")"
    [ -z "${R[$k.qq]:-}" ] || line+="; retry inside a quorum queue (4.3 delayed retry) ${R[$k.qq]} µs = $(ratio "${R[$k.qq]}" "${R[$k.baseline]}")"
    echo "summary, $BROKER_VSN, (a) $at: $line"
    [ -z "${R[$k.re]:-}" ] ||
        echo "summary, $BROKER_VSN, (a) $at: one retry costs the broker ${R[$k.re]} µs through the bridge, ${R[$k.le]} µs through the ladder: bridge / ladder = $(ratio "${R[$k.re]}" "${R[$k.le]}") (whole message: $(ratio "${R[$k.retry]}" "${R[$k.ladder]}"))"
done
if [ ${#systems[@]} -gt 0 ]; then
    line=""
    for s in "${systems[@]}"; do
        line+="${line:+; }$s ${R[$s.sustained]} msg/s (not at ${R[$s.failed_at]/#0/-})"
    done
    [ -z "${R[retry.sustained]:-}" ] || [ -z "${R[ladder.sustained]:-}" ] ||
        line+="; bridge / ladder = $(ratio "${R[retry.sustained]}" "${R[ladder.sustained]}")"
    echo "summary, $BROKER_VSN, (b): highest sustained offered rate: $line"
fi
echo "summary, $BROKER_VSN: parked (ladder$([ "$WANT_RETRY" = 0 ] || echo ", retry-a, retry-b")): $parked"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}" >&2
    exit 1
fi
say "$BROKER_VSN: every message acked"
exit 0
