# shellcheck shell=bash disable=SC2034  # its globals are read by the scripts that source it
# harness.sh -- one broker, the bridge and the load tools, as the end-to-end
# benchmarks drive them (run.sh, ontime.sh; hops.sh its broker and setup);
# sourced, never run. Unlike
# common.sh these read and set the caller's globals:
#
#   reads  WORK (the work directory), CONS and PUB (load_consume,
#          load_publish), BRIDGE (the bridge's binary), URI, TARGET_EX and
#          OUT_Q (the target exchange and its queue, key "bench"),
#          INGRESS_EX and INGRESS_Q (the route's ingress), RABBITMQ_SH,
#          BROKER_DIR, PORT, DIST, BENCH_ROUTE (extra route keys, JSON), BENCH_WAL
#          (wal keys over dir and fsync: true, JSON),
#          and PLUGIN, PLUGIN_APP, PLUGIN_NAME (plugin.sh, sourced first)
#   sets   CONS_PID, BRIDGE_PID, HTTP_PORT, FAILED (an array the caller
#          declares: what went missing), BROKER_SID, NODE_LOG, LAST_START,
#          BROKER_VSN, ROUTE_EXTRA
#   calls  say, die; get, calc, free_port (common.sh); bench_setup and
#          bench_cleanup also read ROOT, BUILD_DIR, BRIDGE, KEEP, PLUGIN_TMP
#
# Each load writes WORK/NAME.publish and WORK/NAME.consume, the tools'
# key=value summary lines, which c and p read back for the report.

# bench_setup NAME PORT STATE: the run's broker and work directory -- PORT,
# DIST (2PORT), BROKER_DIR (BUILD_DIR/STATE), URI, RABBITMQ_SH; BENCH_PORT,
# BENCH_DIST_PORT, BENCH_BROKER_DIR override -- and WORK (a new directory
# delay-bridge-NAME.* under BENCH_TMP, default /var/tmp) with a private copy
# of the bridge in it (a rebuild of the tree during the run must not mix
# two builds): BRIDGE (the copy), BRIDGE_SRC, BRIDGE_BUILT.
bench_setup() {
    PORT=${BENCH_PORT:-$2}
    DIST=${BENCH_DIST_PORT:-2$2}
    BROKER_DIR=${BENCH_BROKER_DIR:-$BUILD_DIR/$3}
    URI="amqp://guest:guest@127.0.0.1:$PORT/%2f"
    RABBITMQ_SH=$ROOT/tests/integration/rabbitmq.sh
    WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/delay-bridge-$1.XXXXXX")
    BRIDGE_SRC=$BRIDGE BRIDGE_BUILT=$(date -u -r "$BRIDGE" +%FT%TZ)
    cp "$BRIDGE" "$WORK/delay-bridge"
    BRIDGE=$WORK/delay-bridge
}

# bench_traps: on exit, however the run ended, bench_cleanup: the caller's
# bench_cleanup_first when it defines one (run.sh: its perf recorders),
# then the consumer, the bridge, the broker and the plugin's copy; the work
# directory removed unless KEEP=1.
bench_cleanup() {
    local rc=$?
    set +e
    ! declare -F bench_cleanup_first >/dev/null || bench_cleanup_first
    [ -n "$CONS_PID" ] && kill "$CONS_PID" 2>/dev/null
    if [ -n "$BRIDGE_PID" ] && kill -0 "$BRIDGE_PID" 2>/dev/null; then
        kill -TERM "$BRIDGE_PID"; wait "$BRIDGE_PID" 2>/dev/null
    fi
    bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1
    [ -z "$PLUGIN_TMP" ] || rm -rf "$PLUGIN_TMP"
    if [ "$KEEP" = 1 ]; then
        say "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
bench_traps() {
    trap bench_cleanup EXIT
    trap 'say "error: line $LINENO: \"$BASH_COMMAND\" failed"' ERR
    trap 'exit 130' INT TERM
}

# wait_ready NAME PID ERRFILE: until consumer PID touched WORK/NAME.ready
# (basic.consume-ok); die showing ERRFILE when it ended first or took 30 s.
wait_ready() {
    for _ in $(seq 300); do
        [ -e "$WORK/$1.ready" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    cat "$3" >&2
    die "consumer $1 did not start"
}

# consume NAME COUNT TAG [extra options]: a consumer on bench.out, in the background.
consume() {
    local name=$1 count=$2 tag=$3
    shift 3
    rm -f "$WORK/$name.ready"
    "$CONS" --uri "$URI" --queue "$OUT_Q" --exchange "$TARGET_EX" --routing-key bench \
        --count "$count" --tag "$tag" --ready-file "$WORK/$name.ready" "$@" \
        >"$WORK/$name.consume" 2>"$WORK/$name.consume.err" &
    CONS_PID=$!
    wait_ready "$name" "$CONS_PID" "$WORK/$name.consume.err"
}

# consumed NAME: wait for the consumer; note missing messages.
consumed() {
    local name=$1 rc=0
    wait "$CONS_PID" || rc=$?
    CONS_PID=""
    cat "$WORK/$name.consume.err" >&2
    if [ "$rc" != 0 ] || [ ! -s "$WORK/$name.consume" ]; then
        FAILED+=("$name: $(get "$WORK/$name.consume" unique) of $(get "$WORK/$name.consume" expected) arrived")
        say "$name: MISSING messages (consumer exit $rc)"
    fi
    say "$name consume: $(cat "$WORK/$name.consume")"
}

# publish NAME [options]: load_publish in the foreground.
publish() {
    local name=$1
    shift
    "$PUB" --uri "$URI" "$@" >"$WORK/$name.publish" 2>"$WORK/$name.publish.err" \
        || { cat "$WORK/$name.publish.err" >&2; die "publisher $name failed"; }
    say "$name publish: $(cat "$WORK/$name.publish")"
}

# bridge_config WALDIR [REPLICATE]: a config with one route and the HTTP endpoint
# on a free port; REPLICATE, when given, is the wal.replicate object (JSON).
ROUTE_EXTRA=""
if [ -n "${BENCH_ROUTE:-}" ]; then
    ROUTE_EXTRA=$(jq -ce 'if type == "object" then . else error("not an object") end' <<<"$BENCH_ROUTE" |
                  sed 's/^{//; s/}$//') || die "BENCH_ROUTE is not a JSON object: $BENCH_ROUTE"
    [ -z "$ROUTE_EXTRA" ] || ROUTE_EXTRA=", $ROUTE_EXTRA"
fi
bridge_config() {
    local repl=""
    [ -z "${2:-}" ] || repl=", \"replicate\": $2"
    if [ "$(jq -r '.queue_type // ""' <<<"${BENCH_ROUTE:-null}")" = stream ]; then
        INGRESS_EX=bench.delayed.$(basename "$1") INGRESS_Q=bench.delayed.q.$(basename "$1")
    fi
    HTTP_PORT=$(free_port)
    # BENCH_WAL: a JSON object of wal keys over these, e.g. '{"commit_interval_ms": 0}'
    local wal
    wal=$(jq -c --arg d "$1" --argjson x "${BENCH_WAL:-"{}"}" -n '{dir: $d, fsync: true} + $x')
    cat >"$WORK/bridge.json" <<EOF
{
  "broker": { "uri": "$URI" },
  "wal": ${wal%\}}$repl },
  "http": { "listen": "127.0.0.1:$HTTP_PORT" },
  "log": { "level": "info" },
  "routes": [
    { "name": "bench", "ingress_exchange": "$INGRESS_EX", "ingress_queue": "$INGRESS_Q",
      "target_exchange": "$TARGET_EX"$ROUTE_EXTRA }
  ]
}
EOF
}

bridge_launch() {
    "$BRIDGE" --config "$WORK/bridge.json" >>"$WORK/bridge.log" 2>&1 &
    BRIDGE_PID=$!
}

# bridge_ready [TIMEOUT_S]: wait until /readyz answers 200.
bridge_ready() {
    local deadline=$((SECONDS + ${1:-120}))
    while [ "$SECONDS" -lt "$deadline" ]; do
        kill -0 "$BRIDGE_PID" 2>/dev/null || { tail -n 20 "$WORK/bridge.log" >&2; die "delay-bridge exited"; }
        curl -sf -o /dev/null "http://127.0.0.1:$HTTP_PORT/readyz" && return 0
        sleep 0.05
    done
    tail -n 20 "$WORK/bridge.log" >&2
    die "delay-bridge not ready within ${1:-120} s"
}

bridge_stop() {
    [ -n "$BRIDGE_PID" ] || return 0
    kill -TERM "$BRIDGE_PID" 2>/dev/null || true
    wait "$BRIDGE_PID" 2>/dev/null || true
    BRIDGE_PID=""
}

# broker_start: a fresh node (state under BROKER_DIR wiped) on PORT/DIST;
# then BROKER_SID (its session, for CPU), NODE_LOG and LAST_START (its log
# since its last start), BROKER_VSN as the node names itself ("RabbitMQ
# 4.0.5"), and plugin_check_started. Call plugin_decide before it.
broker_start() {
    local node_vsn
    bash "$RABBITMQ_SH" stop "$BROKER_DIR" >/dev/null 2>&1 || true
    rm -rf "$BROKER_DIR/mnesia"
    # And FRESH, which wipes it again where the node will find it: when
    # BROKER_DIR last ran another broker of the matrix, the rm above went
    # through a link into that broker's root, and this one's root may still
    # hold a mnesia/ of an earlier run (rabbitmq.sh, "A node in a root").
    DB_RABBITMQ_FRESH=1 bash "$RABBITMQ_SH" start "$BROKER_DIR" "$PORT" "$DIST"
    BROKER_SID=$(cat "$BROKER_DIR/node.pid")
    # What the node says of itself at its last start: its version, and the plugin started.
    NODE_LOG=$BROKER_DIR/log/dbtest$PORT@localhost.log
    LAST_START=$(awk '/Starting RabbitMQ / { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' \
                 "$NODE_LOG" 2>/dev/null || true)
    node_vsn=$(grep -oE 'Starting RabbitMQ [0-9]+(\.[0-9]+)*' <<<"$LAST_START" | head -n 1 | sed 's/^Starting //' || true)
    [ -z "$node_vsn" ] || BROKER_VSN=$node_vsn
    say "the node is $BROKER_VSN"
    plugin_check_started
}

# ---------------------------------------------------------------- report helpers

# c NAME KEY, p NAME KEY: KEY of load NAME's consumer or publisher summary, or "-".
c() { local f=$WORK/$1.consume; [ -s "$f" ] && get "$f" "$2" || printf -- '-'; }
p() { local f=$WORK/$1.publish; [ -s "$f" ] && get "$f" "$2" || printf -- '-'; }

# The side-by-side table: a line per system and figure, each naming the
# broker and who delays, so a line copied out of the report still says both.
# srow WHO SCENARIO FIGURE VALUE BROKER_ALONE RATIO
srow() { printf '| %-15s | %-22s | %-8s | %-52s | %22s | %22s | %12s |\n' "$BROKER_VSN" "$@"; }
# lat3 NAME: lateness "p50 / p99 / max" of a consumer's summary, ms.
lat3() { printf '%s / %s / %s' "$(c "$1" lat_p50_ms)" "$(c "$1" lat_p99_ms)" "$(c "$1" lat_max_ms)"; }
# plus A B: A - B as "+12.3 ms", or "-" when either is not a number.
plus() {
    if [[ "$1" =~ ^-?[0-9.]+$ && "$2" =~ ^-?[0-9.]+$ ]]; then
        calc "\"\" sprintf(\"%+.1f ms\", $1 - $2)"
    else
        printf -- '-'
    fi
}
# srow_head: the side-by-side table's header and rule.
srow_head() {
    printf '| %-15s | %-22s | %-8s | %-52s | %22s | %22s | %12s |\n' broker "delays" scenario figure value \
        "broker alone" ratio
    printf '|%s|%s|%s|%s|%s|%s|%s|\n' ----------------- ------------------------ ---------- \
        ------------------------------------------------------ ------------------------ ------------------------ --------------
}
