#!/bin/bash
# cluster.sh -- a throwaway three-node RabbitMQ cluster on loopback, for tests.
#
#   cluster.sh start DIR PORT DISTPORT   start nodes 1..3 (PORT+0..2, DISTPORT+0..2), cluster them
#   cluster.sh stop DIR                  stop every node (idempotent)
#   cluster.sh stop-node DIR I           stop node I (1..3)
#   cluster.sh kill-node DIR I           SIGKILL node I's whole process group (a crash)
#   cluster.sh start-node DIR I          start node I again (same ports, state and cookie)
#   cluster.sh ctl DIR I ARGS...         rabbitmqctl -n NODE_I ARGS
#   cluster.sh uri DIR I                 print node I's amqp:// URI
#
# Each node is one tests/integration/rabbitmq.sh node in DIR/nI (node name
# dbtest<PORT>@localhost, 127.0.0.1 only, no plugins, guest allowed). All
# three get the same Erlang cookie (DIR/cookie, copied into each node's
# HOME before it starts); nodes 2 and 3 join node 1 (stop_app, join_cluster,
# start_app). A node that stops and starts again rejoins by itself.
#
# Exit codes: 0 ok; 1 error; 77 the cluster cannot be formed here (a port is
# busy, rabbitmq-server is not installed): callers skip rather than fail.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RABBITMQ_SH="$HERE/../rabbitmq.sh"
# The broker matrix (broker.sh): DB_RABBITMQ picks 3.10, 4.0, 4.3, 4.4 or qq-delay
# (the last two built from source; the 4.3.6 CLI drives them).
if [ -z "${RABBITMQ_BIN_DIR:-}" ]; then
    RABBITMQ_BIN_DIR=$("$HERE/../broker.sh" bin-dir) || exit $?
    export RABBITMQ_BIN_DIR
fi
BIN_DIR=$RABBITMQ_BIN_DIR
NODES="1 2 3"

say() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
cannot() { say "cannot form a cluster: $*"; exit 77; }

usage() {
    sed -n '4,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# node_var DIR I VAR: PORT, DISTPORT or NODE of node I (from its node.env).
node_var() {
    local f="$1/n$2/node.env"
    [ -f "$f" ] || die "$f not found: node $2 was never started in $1"
    (. "$f"; eval "printf '%s' \"\$$3\"")
}

ctl() {
    local dir=$1 i=$2 node
    shift 2
    node=$(node_var "$dir" "$i" NODE)
    HOME="$dir/n$i" ERL_EPMD_ADDRESS=127.0.0.1 "$BIN_DIR/rabbitmqctl" -n "$node" "$@"
}

start_node() {
    local dir=$1 i=$2 port=$3 dist=$4
    mkdir -p "$dir/n$i"
    # The shared cookie goes in before rabbitmq.sh starts the node (it keeps
    # an existing one), so the node and every CLI call agree on it.
    rm -f "$dir/n$i/.erlang.cookie"
    install -m 0400 "$dir/cookie" "$dir/n$i/.erlang.cookie"
    bash "$RABBITMQ_SH" start "$dir/n$i" "$port" "$dist"
}

do_start() {
    local dir=$1 port=$2 dist=$3 i p d pids=() rc=0 first
    [ -x "$BIN_DIR/rabbitmq-server" ] || cannot "$BIN_DIR/rabbitmq-server not found (apt-get install rabbitmq-server)"
    for i in $NODES; do
        p=$((port + i - 1)) d=$((dist + i - 1))
        if [ -f "$dir/n$i/node.env" ] && bash "$RABBITMQ_SH" status "$dir/n$i" 2>/dev/null; then
            die "node $i already runs in $dir/n$i: stop the cluster first"
        fi
        port_in_use "$p" && cannot "port $p is already in use on 127.0.0.1"
        port_in_use "$d" && cannot "distribution port $d is already in use on 127.0.0.1"
    done
    mkdir -p "$dir"
    if [ ! -s "$dir/cookie" ]; then
        (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F >"$dir/cookie")
    fi
    # Three nodes boot in parallel (each takes 5-8 s on its own).
    for i in $NODES; do
        start_node "$dir" "$i" $((port + i - 1)) $((dist + i - 1)) &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || rc=1
    done
    [ "$rc" -eq 0 ] || die "a node did not start (logs in $dir/n*/log)"
    first=$(node_var "$dir" 1 NODE)
    for i in 2 3; do
        say "node $i joins $first"
        # (the CLI's own log noise goes to DIR/join.log)
        ctl "$dir" "$i" -q stop_app >>"$dir/join.log" 2>&1
        ctl "$dir" "$i" -q join_cluster "$first" >>"$dir/join.log" 2>&1 ||
            { tail -n 20 "$dir/join.log" >&2; die "node $i could not join $first"; }
        ctl "$dir" "$i" -q start_app >>"$dir/join.log" 2>&1
        ctl "$dir" "$i" -q await_startup >>"$dir/join.log" 2>&1
    done
    local running
    running=$(ctl "$dir" 1 -q cluster_status --formatter json |
        python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("running_nodes", [])))')
    [ "$running" = 3 ] || die "cluster_status lists $running running node(s), expected 3"
    say "cluster of 3 running: amqp://127.0.0.1:$port, :$((port + 1)), :$((port + 2))"
}

do_stop() {
    local dir=$1 i pids=()
    for i in $NODES; do
        [ -d "$dir/n$i" ] || continue
        bash "$RABBITMQ_SH" stop "$dir/n$i" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || true
    done
}

[ $# -ge 2 ] || usage
CMD=$1
DIR=$2
case "$CMD" in
start)
    [ $# -eq 4 ] || usage
    [[ "$3" =~ ^[0-9]+$ && "$4" =~ ^[0-9]+$ ]] || die "PORT and DISTPORT must be numbers"
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    do_start "$DIR" "$3" "$4"
    ;;
stop)
    [ $# -eq 2 ] || usage
    [ -d "$DIR" ] || { say "no directory $DIR: nothing to stop"; exit 0; }
    do_stop "$(cd "$DIR" && pwd)"
    ;;
stop-node | start-node | kill-node)
    [ $# -eq 3 ] || usage
    [[ "$3" =~ ^[123]$ ]] || die "node must be 1, 2 or 3"
    DIR=$(cd "$DIR" && pwd)
    if [ "$CMD" = stop-node ]; then
        bash "$RABBITMQ_SH" stop "$DIR/n$3"
    elif [ "$CMD" = kill-node ]; then
        pid=$(cat "$DIR/n$3/node.pid" 2>/dev/null || true)
        [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || die "node $3 is not running"
        # rabbitmq.sh started it with setsid: its pid is the process group
        kill -KILL -- "-$pid"
        for _ in $(seq 200); do # a zombie (nobody reaps it) counts as gone
            [ -d "/proc/$pid" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$pid/stat" 2>/dev/null || break
            sleep 0.05
        done
        rm -f "$DIR/n$3/node.pid"
        say "node $3 killed (SIGKILL to process group $pid)"
    else
        start_node "$DIR" "$3" "$(node_var "$DIR" "$3" PORT)" "$(node_var "$DIR" "$3" DISTPORT)"
    fi
    ;;
ctl)
    [ $# -ge 3 ] || usage
    DIR=$(cd "$DIR" && pwd)
    i=$3
    shift 3
    ctl "$DIR" "$i" "$@"
    ;;
uri)
    [ $# -eq 3 ] || usage
    DIR=$(cd "$DIR" && pwd)
    printf 'amqp://guest:guest@127.0.0.1:%s/%%2f\n' "$(node_var "$DIR" "$3" PORT)"
    ;;
*)
    usage
    ;;
esac
