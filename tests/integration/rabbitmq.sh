#!/bin/bash
# rabbitmq.sh -- a throwaway RabbitMQ node for tests and the quick start.
#
#   rabbitmq.sh start   DIR PORT DISTPORT   start a node (or find it running), wait until it is up
#   rabbitmq.sh stop    DIR                 stop it; succeeds when nothing runs (idempotent)
#   rabbitmq.sh restart DIR                 stop, then start again on the same ports and state
#   rabbitmq.sh wait    DIR                 wait until the node accepts connections
#   rabbitmq.sh status  DIR                 exit 0 if the node's process runs
#
# DB_RABBITMQ_FRESH=1 on start: a node not running yet starts from empty state.
#
# The node is dbtest<PORT>@localhost, listens on 127.0.0.1:PORT only, keeps
# everything (mnesia, logs, config, Erlang cookie) under DIR, loads no
# plugins and lets guest log in from anywhere (loopback_users = none; it
# listens on loopback only). It never touches /var/lib/rabbitmq or
# /etc/rabbitmq, so it runs beside a system broker and needs no init system.
# The node's stdout/stderr are appended to DIR/log/node.stdout.log and
# DIR/log/node.stderr.log; RabbitMQ's own log is DIR/log/NODE.log.
#
# Environment: DB_RABBITMQ (3.10, 4.0, 4.3, 4.4 or qq-delay: the brokers, see
# broker.sh; default 3.10, the host's package), RABBITMQ_BIN_DIR (default:
# what broker.sh bin-dir says for DB_RABBITMQ; for 3.10
# /usr/lib/rabbitmq/bin: the real scripts, not Debian's /usr/sbin wrappers,
# which switch to the rabbitmq user and its cookie),
# RABBITMQ_START_TIMEOUT_S (default 120),
# RABBITMQ_STOP_TIMEOUT_S (default 60), DB_RABBITMQ_CONF_EXTRA (lines added
# to the node's rabbitmq.conf when it starts, e.g. "consumer_timeout = 5000"
# for a test that shortens a broker timer).
#
# A node in a root (all but 3.10): its commands run under chroot in that root,
# where every path the node gets must mean the same directory. So DIR
# becomes, on the host, a symlink to ROOT/DIR (what was in DIR, such as a
# cookie put there first, is moved over): the host reaches the node's files
# through the link, the node finds them at the same path inside the root.
set -euo pipefail

HERE_RMQ=$(cd "$(dirname "$0")" && pwd)
if [ -z "${RABBITMQ_BIN_DIR:-}" ]; then
    RABBITMQ_BIN_DIR=$("$HERE_RMQ/broker.sh" bin-dir) || exit $?
fi
BIN_DIR=$RABBITMQ_BIN_DIR
# The root behind BIN_DIR, if its commands run under chroot (broker.sh's wrappers).
ROOT_DIR=""
case "$BIN_DIR" in
*.bin) [ -d "${BIN_DIR%.bin}/usr/lib/rabbitmq" ] && ROOT_DIR=${BIN_DIR%.bin} ;;
esac
START_TIMEOUT=${RABBITMQ_START_TIMEOUT_S:-120}
STOP_TIMEOUT=${RABBITMQ_STOP_TIMEOUT_S:-60}

say() { printf 'rabbitmq.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

usage() {
    sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# Load DIR/node.env (written by start): PORT, DISTPORT, NODE.
load_env() {
    [ -f "$DIR/node.env" ] || die "$DIR/node.env not found: no node was started in $DIR"
    # shellcheck source=/dev/null
    . "$DIR/node.env"
}

# The environment every rabbitmq-server / rabbitmqctl call of this node gets.
node_env() {
    export HOME="$DIR"
    export RABBITMQ_NODENAME="$NODE"
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT="$PORT"
    export RABBITMQ_DIST_PORT="$DISTPORT"
    export RABBITMQ_MNESIA_BASE="$DIR/mnesia"
    export RABBITMQ_LOG_BASE="$DIR/log"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
    export RABBITMQ_CONFIG_FILE="$DIR/rabbitmq"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$DIR/advanced.config"
    export RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
    export ERL_EPMD_ADDRESS=127.0.0.1
    unset RABBITMQ_ENV_LOADED
}

ctl() { "$BIN_DIR/rabbitmqctl" -n "$NODE" "$@"; }

server_pid() {
    local pid
    [ -f "$DIR/node.pid" ] || return 1
    pid=$(cat "$DIR/node.pid")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

log_tail() {
    local f
    for f in "$DIR/log/node.stdout.log" "$DIR/log/node.stderr.log"; do
        [ -s "$f" ] || continue
        say "last lines of $f:"
        tail -n 25 "$f" >&2
    done
}

do_wait() {
    local deadline=$((SECONDS + START_TIMEOUT)) left
    while :; do
        if ! server_pid >/dev/null; then
            log_tail
            die "node $NODE exited during startup (logs in $DIR/log)"
        fi
        left=$((deadline - SECONDS))
        [ "$left" -gt 0 ] || { log_tail; die "node $NODE not up after ${START_TIMEOUT}s (logs in $DIR/log)"; }
        # await_startup fails at once while the Erlang node is not reachable
        # yet, and waits (up to --timeout) once it is.
        if timeout "$((left + 5))" "$BIN_DIR/rabbitmqctl" -n "$NODE" -q -t "$left" await_startup \
            >/dev/null 2>>"$DIR/log/ctl.log"; then
            say "node $NODE is up on amqp://127.0.0.1:$PORT"
            return 0
        fi
        sleep 0.5
    done
}

do_start() {
    local pid
    # A fresh node (the suite's fixtures): no state of an earlier run, wiped here,
    # after root_link, so the wipe reaches the directory the node will use.
    if [ "${DB_RABBITMQ_FRESH:-}" = 1 ] && ! { [ -f "$DIR/node.env" ] && server_pid >/dev/null; }; then
        rm -rf "$DIR/mnesia"
    fi
    mkdir -p "$DIR/log" "$DIR/mnesia"
    if [ -f "$DIR/node.env" ] && server_pid >/dev/null; then
        # shellcheck source=/dev/null
        . "$DIR/node.env"
        [ "$PORT" = "$1" ] || die "a node on port $PORT already runs in $DIR"
        node_env
        say "node $NODE already running in $DIR"
        do_wait
        return
    fi
    PORT=$1 DISTPORT=$2 NODE="dbtest$1@localhost"
    port_in_use "$PORT" && die "port $PORT is already in use on 127.0.0.1 (another broker?)"
    port_in_use "$DISTPORT" && die "distribution port $DISTPORT is already in use on 127.0.0.1"
    printf 'PORT=%s\nDISTPORT=%s\nNODE=%s\n' "$PORT" "$DISTPORT" "$NODE" >"$DIR/node.env"
    node_env

    printf 'loopback_users = none\nlisteners.tcp.default = 127.0.0.1:%s\n' "$PORT" >"$DIR/rabbitmq.conf"
    [ -z "${DB_RABBITMQ_CONF_EXTRA:-}" ] || printf '%s\n' "$DB_RABBITMQ_CONF_EXTRA" >>"$DIR/rabbitmq.conf"
    printf '[].\n' >"$DIR/enabled_plugins"
    : >"$DIR/rabbitmq-env.conf"
    if [ ! -s "$DIR/.erlang.cookie" ]; then
        # Written before the node and the CLI start, so they never race to create it.
        (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F >"$DIR/.erlang.cookie")
        chmod 400 "$DIR/.erlang.cookie"
    fi

    say "starting node $NODE (port $PORT, dist port $DISTPORT, state in $DIR)"
    {
        printf '\n==== %s start %s port %s\n' "$(date -u +%FT%TZ)" "$NODE" "$PORT"
    } >>"$DIR/log/node.stdout.log"
    # Its own session, so the node outlives the caller's terminal or ctest
    # step and stop can signal the whole group.
    setsid "$BIN_DIR/rabbitmq-server" </dev/null \
        >>"$DIR/log/node.stdout.log" 2>>"$DIR/log/node.stderr.log" &
    pid=$!
    echo "$pid" >"$DIR/node.pid"
    do_wait
}

do_stop() {
    local pid deadline
    if [ ! -f "$DIR/node.env" ]; then
        say "no node in $DIR: nothing to stop"
        return 0
    fi
    load_env
    node_env
    if ! pid=$(server_pid); then
        say "node $NODE is not running"
        rm -f "$DIR/node.pid"
        return 0
    fi
    say "stopping node $NODE"
    timeout "$STOP_TIMEOUT" "$BIN_DIR/rabbitmqctl" -n "$NODE" -q stop >/dev/null 2>>"$DIR/log/ctl.log" || true
    deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
        # The foreground script turns SIGTERM into a clean stop.
        kill -TERM "$pid" 2>/dev/null || true
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "node $NODE did not stop in ${STOP_TIMEOUT}s: killing its process group"
        kill -KILL -- "-$pid" 2>/dev/null || true
        sleep 1
    fi
    # Anything of the node's session still around (erl_child_setup, inet_gethost).
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$DIR/node.pid"
    say "node $NODE stopped"
}

# Make $1 (a path on the host) the same directory inside ROOT_DIR: a symlink to ROOT/$1.
root_link() {
    local d=$1 inside
    case "$d" in /*) ;; *) d=$(pwd)/$d ;; esac
    if [ -z "$ROOT_DIR" ]; then
        # A host node where a rooted one ran before (DB_RABBITMQ changed): its own
        # directory. Always, not only when the root's side holds a mnesia/ (the
        # fixture's wipe may have just emptied it): a host node that ran through
        # the link left 3.10 state in a 4.x root, which 4.3 then refused to boot
        # on (message_containers, a required feature flag, not enabled).
        if [ -L "$d" ]; then
            rm -f "$d"
            mkdir -p "$d"
        fi
        return 0
    fi
    inside=$ROOT_DIR$d
    if [ -L "$d" ] && [ "$(readlink "$d")" = "$inside" ]; then
        mkdir -p "$inside"   # the root may have been made anew (build_qq_delay.sh --force)
        return 0
    fi
    mkdir -p "$inside"
    if [ -d "$d" ] && [ ! -L "$d" ]; then
        cp -a "$d/." "$inside/"
        rm -rf "$d"
    fi
    mkdir -p "$(dirname "$d")"
    ln -sfn "$inside" "$d"
}

[ $# -ge 2 ] || usage
CMD=$1
[ "$CMD" = start ] && root_link "$2"
if [ ! -d "$2" ]; then
    case "$CMD" in
    start) mkdir -p "$2" ;;
    stop) say "no directory $2: nothing to stop"; exit 0 ;;
    *) die "no directory $2: no node was started there" ;;
    esac
fi
DIR=$(cd "$2" && pwd)
case "$CMD" in
start)
    [ $# -eq 4 ] || usage
    [[ "$3" =~ ^[0-9]+$ && "$4" =~ ^[0-9]+$ ]] || die "PORT and DISTPORT must be numbers"
    [ -x "$BIN_DIR/rabbitmq-server" ] || die "$BIN_DIR/rabbitmq-server not found: install rabbitmq-server (apt-get install rabbitmq-server)"
    do_start "$3" "$4"
    ;;
stop)
    [ $# -eq 2 ] || usage
    do_stop
    ;;
restart)
    [ $# -eq 2 ] || usage
    load_env
    do_stop
    do_start "$PORT" "$DISTPORT"
    ;;
wait)
    [ $# -eq 2 ] || usage
    load_env
    node_env
    do_wait
    ;;
status)
    [ $# -eq 2 ] || usage
    load_env
    server_pid >/dev/null
    ;;
*)
    usage
    ;;
esac
