# shellcheck shell=bash
# common.sh -- helpers shared by the end-to-end benchmarks (run.sh,
# takeover.sh); sourced, never run. Pure functions of their arguments and
# /proc: no globals of the caller are read.

# get FILE KEY: the value of KEY=VALUE in a summary line (load_publish,
# load_consume) or a log line (the bridge's key=value pairs).
get() {
    awk -v k="$2" '{ for (i = 1; i <= NF; i++) { n = index($i, "=");
        if (n && substr($i, 1, n - 1) == k) { print substr($i, n + 1); exit } } }' "$1"
}
now_ms() { date +%s%3N; }
calc() { awk "BEGIN { printf \"%s\", $1 }"; }
# fmt DIGITS EXPR: a number rounded to DIGITS decimals.
fmt() { awk "BEGIN { printf \"%.${1}f\", $2 }"; }

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# CPU time (user + system, ms) of one process, or of every process in a
# session (the broker: rabbitmq.sh starts it with setsid; beam.smp and its
# helpers share the session).
CLK_TCK=$(getconf CLK_TCK)
proc_cpu_ms() {
    awk -v tck="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.0f", ($12 + $13) * 1000 / tck }' "/proc/$1/stat" 2>/dev/null || echo 0
}
session_cpu_ms() {
    # A process may end between the glob and the read: cat then fails, which is fine.
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v sid="$1" -v tck="$CLK_TCK" \
        '{ sub(/^.*\) /, ""); if ($4 == sid) t += $12 + $13 } END { printf "%.0f", t * 1000 / tck }'
}

# idle_rate: the broker's idle CPU, ms per s, over 4 s, into IDLE (hops.sh and
# retry.sh subtract it from each phase). BROKER_SID: the node's session.
IDLE=0
idle_rate() {
    local c0 t0
    c0=$(session_cpu_ms "$BROKER_SID") t0=$(now_ms)
    sleep 4
    IDLE=$(fmt 2 "($(session_cpu_ms "$BROKER_SID") - $c0) / (($(now_ms) - $t0) / 1000.0)")
}

# ratio A B: A / B as "0.85x", or "-" when either is not a number or B is 0.
ratio() {
    if [[ "$1" =~ ^-?[0-9.]+$ && "$2" =~ ^-?[0-9.]+$ ]] && awk "BEGIN { exit !($2 != 0) }"; then
        calc "\"\" sprintf(\"%.2fx\", $1 / $2)"
    else
        printf -- '-'
    fi
}

# stream_dir MNESIA_BASE STREAM: the directory (osiris segments and indexes)
# of a stream of vhost / on this node, or nothing. RabbitMQ names it
# __NAME_TIMESTAMP, every character outside [A-Za-z0-9] of NAME turned into _.
stream_dir() {
    local d
    for d in "$1"/*/stream/__"${2//[^A-Za-z0-9]/_}"_[0-9]*; do
        [ -d "$d" ] && { printf '%s\n' "$d"; return 0; }
    done
    return 1
}

# The build's bridge and load tools, and what the benchmarks need on this
# machine: sets BUILD_DIR (absolute), BRIDGE, TOOLS and PUB; checks them
# and every further tool named (bench_preflight load_consume), curl and jq;
# exits 77 without rabbitmq-server. Call after die() and say() exist.
bench_preflight() {
    BUILD_DIR=${BUILD_DIR:-build}
    [ -d "$BUILD_DIR" ] || [[ "$BUILD_DIR" == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
    [ -d "$BUILD_DIR" ] || die "no build directory $BUILD_DIR (cmake -S . -B build && cmake --build build)"
    BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
    BRIDGE=${BENCH_BRIDGE_BIN:-$BUILD_DIR/delay-bridge}
    TOOLS=${BENCH_TOOLS_DIR:-$BUILD_DIR/tests}
    PUB=$TOOLS/load_publish
    local b extra=()
    for b in "$@"; do extra+=("$TOOLS/$b"); done
    for b in "$BRIDGE" "$PUB" "${extra[@]}"; do
        [ -x "$b" ] || die "$b not found: build first (cmake --build $BUILD_DIR)"
    done
    command -v curl >/dev/null || die "curl not found"
    command -v jq >/dev/null || die "jq not found"
    # The broker matrix: DB_RABBITMQ (3.10, 4.0, 4.3, 4.4, qq-delay) picks the broker (tests/integration/broker.sh).
    if [ -z "${RABBITMQ_BIN_DIR:-}" ]; then
        local rc=0
        RABBITMQ_BIN_DIR=$(bash "$ROOT/tests/integration/broker.sh" bin-dir) || rc=$?
        [ $rc -ne 77 ] || { say "RabbitMQ ${DB_RABBITMQ:-3.10} cannot run here: skipping"; exit 77; }
        [ $rc -eq 0 ] || die "broker.sh bin-dir failed"
        export RABBITMQ_BIN_DIR
    fi
    if [ ! -x "$RABBITMQ_BIN_DIR/rabbitmq-server" ]; then
        say "rabbitmq-server not installed: skipping (apt-get install rabbitmq-server)"
        exit 77
    fi
    BROKER_DESC=$(bash "$ROOT/tests/integration/broker.sh" describe 2>/dev/null || echo "RabbitMQ ?")
    say "broker: $BROKER_DESC"
}
