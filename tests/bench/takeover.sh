#!/bin/bash
# takeover.sh -- how long a bridge whose disk is lost takes to come back from
# its replicated WAL (wal.replicate), measured on a throwaway RabbitMQ
# (tests/bench/README.md, "Replicated WAL: takeover and cost").
#
#   tests/bench/takeover.sh [--held N[,N...]] [--cluster] [--variants cold,standby,restart,clean]
#                           [--keep]
#
#   --held      messages held when the disk is lost (default 100000); a list
#               runs each size in turn on the same broker
#   --cluster   a three-node cluster on loopback (tests/integration/cluster/
#               cluster.sh) instead of one node; bridge A connects to nodes
#               1, 2, 3 in turn, bridge B to 2, 3, 1; ingress queue quorum
#   --variants  cold: B is started only after A is gone (time from B's start
#               to /readyz 200); standby: B already waits for the lease when
#               A is killed (time from the kill -9 to B's /readyz 200).
#               Default both. restart (only when listed): no disk loss, A is
#               killed and started again on its intact WAL directory (what a
#               plain restart costs with wal.replicate: it reads the stream
#               back too); "B" in the figures is then A's second process.
#               clean (only when listed): A is stopped with SIGTERM and started
#               again on its intact WAL directory (it resumes on its log and
#               reads only the stream past it: wal.dir/REPLICA).
#               churn (only when listed): as cold, but before the N held
#               messages A takes 3 x N that fall due at once (dead records in
#               the stream), then completes a stream checkpoint (horizon) and
#               names it in its lease token: B, on an empty disk, reads the
#               stream from the horizon, so its import follows the live data,
#               not the stream's length. CHURN_CHECKPOINT_S sets its stream
#               checkpoint interval (default 5 s; each copies every live
#               record forward: at 1M held give it 30).
#               nodeloss (only when listed; needs --cluster): as standby, but
#               the node holding the stream's leader (A's, node 1, as a rule)
#               is killed (SIGKILL) with A and A's disk, at once: the time
#               from the kill to B's /readyz 200 (B connects to node 2
#               first). The node is started again after the case.
#   --keep      keep the work directory (configs, logs, WALs) and the broker's
#               state (its streams)
#
# For each size and variant, with a stream and a route new to the case:
#   1. bridge A (wal.replicate, every key default) owns the log; in the
#      standby variant bridge B is started too and waits (/readyz 503 standby);
#   2. load_publish puts N persistent 256 B messages with x-delay 1 h into
#      A's ingress (nothing falls due), until A's /stats held = N;
#   3. the disk is lost: kill -9 A, rm -rf its WAL directory;
#   4. cold: B starts on an empty WAL directory with the same stream;
#   5. B reads the stream back, rebuilds its log and serves: the time to
#      /readyz 200, and from B's /stats the import (records, bytes, seconds),
#      the recovery and the held count, which must be N.
# One line per figure, then a table. The stream's size on the broker's disk
# (its osiris directory, node 1) is measured after each load, beside A's WAL.
#
# Builds nothing: BUILD_DIR (default build), BENCH_BRIDGE_BIN, BENCH_TOOLS_DIR
# as for run.sh. Broker: 127.0.0.1:${TAKEOVER_PORT:-5720} (with --cluster also
# +1, +2), distribution port ${TAKEOVER_DIST_PORT:-25720} (+1, +2), state in
# ${TAKEOVER_BROKER_DIR:-$BUILD_DIR/takeover-rabbitmq} (fresh; removed at the
# end unless --keep). Work directory: a new directory under ${BENCH_TMP:-/var/tmp}.
#
# Never asserts on a time. Exit 0 when B held every message in every case,
# 1 when not, 2 on a usage or setup error, 77 when rabbitmq-server is not
# installed or the cluster cannot be formed here (skipped).
set -Eeuo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# get, now_ms, fmt, free_port, ratio, stream_dir
. "$HERE/common.sh"

say() { printf '[takeover %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }

HELD=100000 CLUSTER=0 VARIANTS=cold,standby KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --held) [ $# -ge 2 ] || die "--held needs a number"; HELD=$2; shift 2 ;;
    --held=*) HELD=${1#*=}; shift ;;
    --cluster) CLUSTER=1; shift ;;
    --variants) [ $# -ge 2 ] || die "--variants needs a list"; VARIANTS=$2; shift 2 ;;
    --variants=*) VARIANTS=${1#*=}; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,45p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
for n in ${HELD//,/ }; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--held: $n is not a positive number"; done
for v in ${VARIANTS//,/ }; do
    case "$v" in cold|standby|restart|clean|churn|nodeloss) ;; *) die "unknown variant $v" ;; esac
    [ "$v" != nodeloss ] || [ "$CLUSTER" = 1 ] || die "the nodeloss variant needs --cluster"
done

bench_preflight

PORT=${TAKEOVER_PORT:-5720}
DIST=${TAKEOVER_DIST_PORT:-25720}
BROKER_DIR=${TAKEOVER_BROKER_DIR:-$BUILD_DIR/takeover-rabbitmq}
RABBITMQ_SH=$ROOT/tests/integration/rabbitmq.sh
CLUSTER_SH=$ROOT/tests/integration/cluster/cluster.sh
umask 077 # the configs hold the broker password
WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/delay-bridge-takeover.XXXXXX")
RUN_ID=$(date +%s)
# A private copy: a rebuild of the tree during the run must not mix two builds.
BRIDGE_SRC=$BRIDGE BRIDGE_BUILT=$(date -u -r "$BRIDGE" +%FT%TZ)
cp "$BRIDGE" "$WORK/delay-bridge"
BRIDGE=$WORK/delay-bridge
DELAY_MS=3600000
TARGET_EX=takeover.target

A_PID="" B_PID="" BROKER_UP=0 FAILED=()
declare -A R     # results: R[case.figure]=value

stop_pid() { # stop_pid PID: SIGTERM, wait
    [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 0
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
broker_stop() {
    if [ "$CLUSTER" = 1 ]; then
        bash "$CLUSTER_SH" stop "$BROKER_DIR" >/dev/null 2>&1
    else
        bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1
    fi
}
cleanup() {
    local rc=$?
    set +e
    stop_pid "$A_PID"
    stop_pid "$B_PID"
    [ "$BROKER_UP" = 1 ] && broker_stop
    if [ "$KEEP" = 1 ]; then
        say "kept: work directory $WORK, broker state $BROKER_DIR"
    else
        rm -rf "$WORK"
        [ "$BROKER_UP" = 1 ] && rm -rf "$BROKER_DIR"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'say "error: line $LINENO: \"$BASH_COMMAND\" failed"' ERR
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- broker

HEAD_AT_START=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
say "machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg); HEAD $HEAD_AT_START"
say "work directory $WORK, broker state $BROKER_DIR"
say "delay-bridge: $BRIDGE_SRC (built $BRIDGE_BUILT), run from a copy in the work directory"
R[load.before]=$(cut -d' ' -f1-3 /proc/loadavg)
uri() { printf 'amqp://guest:guest@127.0.0.1:%s/%%2f' "$1"; }
if [ "$CLUSTER" = 1 ]; then
    bash "$CLUSTER_SH" stop "$BROKER_DIR" >/dev/null 2>&1 || true
    rm -rf "$BROKER_DIR"
    BROKER_UP=1
    rc=0
    bash "$CLUSTER_SH" start "$BROKER_DIR" "$PORT" "$DIST" || rc=$?
    if [ "$rc" = 77 ]; then
        say "the cluster cannot be formed here: skipping (run without --cluster for one node)"
        exit 77
    fi
    [ "$rc" = 0 ] || die "cluster.sh start failed (logs in $BROKER_DIR/n*/log)"
    BROKER="three-node cluster, 127.0.0.1:$PORT-$((PORT + 2))"
    URIS_A="[\"$(uri "$PORT")\", \"$(uri $((PORT + 1)))\", \"$(uri $((PORT + 2)))\"]"
    URIS_B="[\"$(uri $((PORT + 1)))\", \"$(uri $((PORT + 2)))\", \"$(uri "$PORT")\"]"
    QUEUE_TYPE=quorum
    MNESIA=$BROKER_DIR/n1/mnesia
else
    bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1 || true
    rm -rf "$BROKER_DIR"
    BROKER_UP=1
    bash "$RABBITMQ_SH" start "$BROKER_DIR" "$PORT" "$DIST"
    BROKER="one node, 127.0.0.1:$PORT"
    URIS_A="\"$(uri "$PORT")\"" URIS_B=$URIS_A
    QUEUE_TYPE=classic
    MNESIA=$BROKER_DIR/mnesia
fi
PUB_URI=$(uri "$PORT")
say "broker: $BROKER (${BROKER_DESC:-$(bash "$ROOT/tests/integration/broker.sh" describe 2>/dev/null || echo '?')})"

# ---------------------------------------------------------------- helpers

# config FILE INSTANCE WALDIR HTTP_PORT URIS STREAM INGRESS
config() {
    cat >"$1" <<EOF
{
  "broker": { "uri": $5 },
  "instance": "$2",
  "wal": { "dir": "$3", "fsync": true, "replicate": { "stream": "$6"${REPL_EXTRA:-} } },
  "http": { "listen": "127.0.0.1:$4" },
  "log": { "level": "info" },
  "routes": [
    { "name": "takeover", "ingress_exchange": "$7", "ingress_queue": "$7.q",
      "queue_type": "$QUEUE_TYPE", "target_exchange": "$TARGET_EX", "declare_target": true }
  ]
}
EOF
}

launch() { # launch CONFIG LOG: the bridge in the background; sets LAUNCHED
    "$BRIDGE" --config "$1" >>"$2" 2>&1 &
    LAUNCHED=$!
}

stats() { # stats PORT JQ
    curl -sf --max-time 5 "http://127.0.0.1:$1/stats" | jq -r "$2"
}

# readyz_wait PORT PID LOG TIMEOUT_S [standby]: poll /readyz every 10 ms until
# it says ready (or, with standby, until it says the bridge stands by);
# prints now_ms then.
readyz_wait() {
    local port=$1 pid=$2 log=$3 deadline=$((SECONDS + $4)) body
    while [ "$SECONDS" -lt "$deadline" ]; do
        kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; die "delay-bridge $pid exited (log $log)"; }
        body=$(curl -s --max-time 2 "http://127.0.0.1:$port/readyz" 2>/dev/null || true)
        if [ "${5:-}" = standby ]; then
            [[ "$body" == *standby* ]] && { now_ms; return 0; }
        else
            [ "$body" = ready ] && { now_ms; return 0; }
        fi
        sleep 0.01
    done
    tail -n 20 "$log" >&2
    die "delay-bridge $pid: /readyz did not say ${5:-ready} within $4 s (log $log)"
}

# log_ms LOG MSG: the time (ms) of the first log line with msg="MSG".
log_ms() {
    local t
    t=$(grep -m1 -F "msg=\"$2\"" "$1" | cut -d' ' -f1)
    [ -n "$t" ] && date -d "$t" +%s%3N || echo ""
}

# from_label VARIANT: where the takeover time starts.
from_label() {
    case "$1" in cold) echo "B's start" ;; standby) echo "kill -9 of A" ;; restart) echo "A's restart" ;;
    clean) echo "A's start after SIGTERM" ;; churn) echo "B's start" ;;
    nodeloss) echo "kill of A, its disk and its node" ;; esac
}

# leader_node STREAM: the cluster node (1..3) holding the stream's leader, asked through node 2
# (1 when it cannot be told).
leader_node() {
    local leader
    leader=$(bash "$CLUSTER_SH" ctl "$BROKER_DIR" 2 -q list_queues name leader --formatter json 2>/dev/null |
        jq -r --arg q "$1" '.[] | select(.name == $q) | .leader' 2>/dev/null || true)
    case "$leader" in *"$PORT@"*) echo 1 ;; *"$((PORT + 1))@"*) echo 2 ;; *"$((PORT + 2))@"*) echo 3 ;; *) echo 1 ;; esac
}

# ---------------------------------------------------------------- one case

# takeover N VARIANT
takeover() {
    local n=$1 variant=$2 k="$1.$2" dir=$WORK/$1-$2 stream ingress pa pb t0 t1 t_kill t_start t_ready
    local held=0 deadline sdir
    stream=takeover.$RUN_ID.$n.$variant
    ingress=takeover.in.$RUN_ID.$n.$variant
    mkdir -p "$dir/a-wal" "$dir/b-wal"
    pa=$(free_port) pb=$(free_port)
    REPL_EXTRA=""
    [ "$variant" = churn ] && REPL_EXTRA=", \"checkpoint_interval_s\": ${CHURN_CHECKPOINT_S:-5}, \"lease_renew_ms\": 1000"
    config "$dir/a.json" a "$dir/a-wal" "$pa" "$URIS_A" "$stream" "$ingress"
    config "$dir/b.json" b "$dir/b-wal" "$pb" "$URIS_B" "$stream" "$ingress"
    if [ "$variant" = restart ] || [ "$variant" = clean ]; then
        cp "$dir/a.json" "$dir/b.json"
        pb=$pa
    fi
    say "== $variant, $n held: stream $stream"

    launch "$dir/a.json" "$dir/a.log"; A_PID=$LAUNCHED
    readyz_wait "$pa" "$A_PID" "$dir/a.log" 120 >/dev/null
    [ "$(stats "$pa" .wal.replication.state)" = owner ] || die "A does not own the log: $(stats "$pa" .wal.replication)"
    if [ "$variant" = standby ] || [ "$variant" = nodeloss ]; then
        launch "$dir/b.json" "$dir/b.log"; B_PID=$LAUNCHED
        readyz_wait "$pb" "$B_PID" "$dir/b.log" 120 standby >/dev/null
        say "A (pid $A_PID) owns the log, B (pid $B_PID) stands by"
    else
        say "A (pid $A_PID) owns the log"
    fi

    if [ "$variant" = churn ]; then
        # 3 x N messages due at once: fired (unroutable: counted, dropped), dead in the stream.
        "$PUB" --uri "$PUB_URI" --mode xdelay --exchange "$ingress" --routing-key rk \
            --count $((3 * n)) --delay 0 --size 256 --tag 2 >"$dir/churn" 2>"$dir/churn.err" \
            || { cat "$dir/churn.err" >&2; die "load_publish (churn) failed"; }
        deadline=$((SECONDS + 300 + n / 1000))
        while [ "$(stats "$pa" '.routes[0].published // 0' || echo 0)" -lt $((3 * n)) ]; do
            [ "$SECONDS" -lt "$deadline" ] || die "A fired $(stats "$pa" '.routes[0].published') of $((3 * n))"
            sleep 0.2
        done
        say "churn: $(cat "$dir/churn"); fired"
    fi
    t0=$(now_ms)
    "$PUB" --uri "$PUB_URI" --mode xdelay --exchange "$ingress" --routing-key rk --count "$n" \
        --delay "$DELAY_MS" --size 256 --tag 1 >"$dir/publish" 2>"$dir/publish.err" \
        || { cat "$dir/publish.err" >&2; die "load_publish failed"; }
    say "publish: $(cat "$dir/publish")"
    deadline=$((SECONDS + 300 + n / 1000))
    while :; do
        held=$(stats "$pa" .held || echo 0)
        [ "${held:-0}" -ge "$n" ] && break
        [ "$SECONDS" -lt "$deadline" ] || die "A holds $held of $n"
        sleep 0.05
    done
    t1=$(now_ms)
    R[$k.a_ingest]=$(fmt 0 "$n / (($t1 - $t0) / 1000.0)")
    curl -sf "http://127.0.0.1:$pa/stats" >"$dir/a-stats.json"
    R[$k.a_wal_disk]=$(jq .wal.disk_bytes "$dir/a-stats.json")
    R[$k.a_wal_live]=$(jq .wal.live_bytes "$dir/a-stats.json")
    R[$k.a_published]=$(jq .wal.replication.published_bytes "$dir/a-stats.json")
    R[$k.a_stream_msgs]=$(jq .wal.replication.published_messages "$dir/a-stats.json")
    R[$k.a_confirm_ms]=$(fmt 2 "$(jq '.wal.replication.confirm | if .count > 0 then .sum_seconds / .count * 1000 else 0 end' "$dir/a-stats.json")")
    R[$k.a_complete]=$(jq .wal.replication.complete "$dir/a-stats.json")
    R[$k.a_horizons]=$(jq .wal.replication.horizons "$dir/a-stats.json")
    if sdir=$(stream_dir "$MNESIA" "$stream"); then
        R[$k.stream_disk]=$(du -sb "$sdir" | cut -f1)
        R[$k.stream_segments]=$(find "$sdir" -name '*.segment' | wc -l)
    fi
    say "A holds $held after $((t1 - t0)) ms; WAL ${R[$k.a_wal_disk]} B on disk (${R[$k.a_wal_live]} live);" \
        "stream: ${R[$k.a_stream_msgs]} messages, ${R[$k.a_published]} B published, ${R[$k.stream_disk]:-?} B on node 1's disk ($sdir)"

    if [ "$variant" = churn ]; then
        # A stream checkpoint past the churn, named in a fresh lease token.
        local h0
        h0=$(stats "$pa" .wal.replication.horizons)
        deadline=$((SECONDS + 120 + n / 1000))
        while [ "$(stats "$pa" .wal.replication.horizons || echo 0)" -le "$h0" ] ||
              [ "$(stats "$pa" .wal.replication.horizon_running)" = true ]; do
            [ "$SECONDS" -lt "$deadline" ] || die "no stream checkpoint after the load"
            sleep 0.2
        done
        sleep 2.5
        say "A completed stream checkpoint $(stats "$pa" .wal.replication.horizon_lsn); published $(stats "$pa" .wal.replication.published_bytes) B in all"
    fi
    # The disk is lost (but for restart and clean).
    local lnode=""
    [ "$variant" = nodeloss ] && lnode=$(leader_node "$stream")
    t_kill=$(now_ms)
    if [ "$variant" = nodeloss ]; then
        # The node first: A's own death must not be what the broker sees (a closed
        # socket hands the token on at once), as when a machine with both goes.
        bash "$CLUSTER_SH" kill-node "$BROKER_DIR" "$lnode" 2>/dev/null
        kill -KILL "$A_PID" 2>/dev/null || true # (it may have stopped already: its lease went)
        wait "$A_PID" 2>/dev/null || true; A_PID=""
        say "node $lnode (the stream's leader) and A killed in $(($(now_ms) - t_kill)) ms"
    elif [ "$variant" = clean ]; then
        kill -TERM "$A_PID"; wait "$A_PID" 2>/dev/null || true; A_PID=""
    else
        kill -KILL "$A_PID"; wait "$A_PID" 2>/dev/null || true; A_PID=""
    fi
    [ "$variant" = restart ] || [ "$variant" = clean ] || rm -rf "$dir/a-wal"
    if [ "$variant" != standby ] && [ "$variant" != nodeloss ]; then
        t_start=$(now_ms)
        launch "$dir/b.json" "$dir/b.log"; B_PID=$LAUNCHED
    else
        t_start=$t_kill
    fi
    t_ready=$(readyz_wait "$pb" "$B_PID" "$dir/b.log" $((300 + n / 1000)))
    R[$k.ready_ms]=$((t_ready - t_start))
    curl -sf "http://127.0.0.1:$pb/stats" >"$dir/b-stats.json"
    R[$k.lease_ms]=$(( $(log_ms "$dir/b.log" "lease granted: this bridge owns the log") - t_start ))
    R[$k.import_s]=$(jq .wal.replication.import_seconds "$dir/b-stats.json")
    R[$k.imported_records]=$(jq .wal.replication.imported_records "$dir/b-stats.json")
    R[$k.imported_bytes]=$(jq .wal.replication.imported_bytes "$dir/b-stats.json")
    # recovery.seconds counts from the engine's start: the lease wait, the
    # import and the local replay; import_seconds the import and the replay.
    R[$k.recovery_s]=$(fmt 3 "$(jq .recovery.seconds "$dir/b-stats.json")")
    R[$k.read_s]=$(get <(grep -F 'msg="local log rebuilt from the stream"' "$dir/b.log") seconds)
    R[$k.b_held]=$(jq .held "$dir/b-stats.json")
    R[$k.b_state]=$(jq -r '.wal.replication | .state + (if .complete then ", complete" else ", NOT complete" end)' "$dir/b-stats.json")
    R[$k.b_wal_disk]=$(jq .wal.disk_bytes "$dir/b-stats.json")
    [ "${R[$k.b_held]}" = "$n" ] || FAILED+=("$variant $n: B holds ${R[$k.b_held]} of $n")
    grep -F 'msg="local log rebuilt from the stream"' "$dir/b.log" | sed 's/^/    /' >&2 || true

    local from
    from=$(from_label "$variant")
    say "RESULT $variant $n: $from -> B /readyz ready ${R[$k.ready_ms]} ms"
    say "RESULT $variant $n: $from -> lease granted to B ${R[$k.lease_ms]} ms"
    say "RESULT $variant $n: stream read into a new local log (log line seconds=) ${R[$k.read_s]:-?} s"
    say "RESULT $variant $n: import_seconds (read + local replay) ${R[$k.import_s]} s, imported ${R[$k.imported_records]} records / ${R[$k.imported_bytes]} B"
    say "RESULT $variant $n: recovery.seconds (from the engine's start, lease wait included) ${R[$k.recovery_s]} s"
    say "RESULT $variant $n: B held ${R[$k.b_held]} of $n; replication ${R[$k.b_state]}"
    stop_pid "$B_PID"; B_PID=""
    if [ -n "$lnode" ]; then
        grep -E 'msg="(standing by|lease granted|local log rebuilt|lost the broker|cannot read|ready)' \
            "$dir/b.log" | cut -c1-220 | sed 's/^/    B: /' >&2 || true
        bash "$CLUSTER_SH" start-node "$BROKER_DIR" "$lnode" >/dev/null 2>&1 || die "node $lnode did not start again"
        say "node $lnode started again"
    fi
}

for n in ${HELD//,/ }; do
    for v in ${VARIANTS//,/ }; do
        takeover "$n" "$v"
    done
done

# ---------------------------------------------------------------- report

v() { local x=${R[$1]:-}; [ -n "$x" ] && printf '%s' "$x" || printf '%s' '-'; }
mib() { [[ "${1:-}" =~ ^[0-9]+$ ]] && fmt 1 "$1 / 1048576.0" || printf -- '-'; }
row() { printf '| %9s | %-7s | %-56s | %24s |\n' "$1" "$2" "$3" "$4"; }
{
    echo
    echo "delay-bridge takeover from the replicated WAL, $(date -u +%FT%TZ), HEAD $HEAD_AT_START at the start,"
    echo "delay-bridge $BRIDGE_SRC built $BRIDGE_BUILT, $(nproc) CPUs, broker: $BROKER;"
    echo "load average before: $(v load.before), after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    printf '| %9s | %-7s | %-56s | %24s |\n' held variant figure value
    printf '|%s|%s|%s|%s|\n' ----------: --------- ---------------------------------------------------------- --------------------------:
    for n in ${HELD//,/ }; do
        for var in ${VARIANTS//,/ }; do
            k=$n.$var
            from=$(from_label "$var")
            row "$n" "$var" "$from -> B /readyz ready, ms" "$(v "$k.ready_ms")"
            row "$n" "$var" "$from -> lease granted to B, ms" "$(v "$k.lease_ms")"
            row "$n" "$var" "B stream read into a new local log (log), s" "$(v "$k.read_s")"
            row "$n" "$var" "B import_seconds (read + local replay), s" "$(v "$k.import_s")"
            row "$n" "$var" "B imported records / MiB" "$(v "$k.imported_records") / $(mib "${R[$k.imported_bytes]:-}")"
            row "$n" "$var" "B recovery.seconds (lease wait included), s" "$(v "$k.recovery_s")"
            row "$n" "$var" "B held after the takeover" "$(v "$k.b_held")"
            row "$n" "$var" "A ingest with wal.replicate, msg/s" "$(v "$k.a_ingest")"
            row "$n" "$var" "A stream messages / confirm mean ms" "$(v "$k.a_stream_msgs") / $(v "$k.a_confirm_ms")"
            row "$n" "$var" "A WAL on disk / live, MiB" "$(mib "${R[$k.a_wal_disk]:-}") / $(mib "${R[$k.a_wal_live]:-}")"
            row "$n" "$var" "stream on node 1's disk, MiB (segments)" "$(mib "${R[$k.stream_disk]:-}") ($(v "$k.stream_segments"))"
            row "$n" "$var" "stream on disk / A's live WAL" "$(ratio "${R[$k.stream_disk]:-}" "${R[$k.a_wal_live]:-}")"
        done
    done
} | tee "$WORK/report.txt"

if [ ${#FAILED[@]} -gt 0 ]; then
    say "FAILED: ${FAILED[*]}"
    exit 1
fi
say "every takeover held all its messages"
exit 0
