#!/bin/bash
# deploy/quickstart.sh -- see delay-bridge work in about 15 seconds.
#
# Installs what is missing (Debian 12, root or sudo), builds build/delay-bridge,
# starts a throwaway RabbitMQ on 127.0.0.1:5682 with its state under
# .tmp/quickstart/ (or uses the broker in DELAY_BRIDGE_BROKER_URI), runs the
# bridge with a one-route demo config, and then:
#   "close order #1 in 8 s, #2 in 3 s, #3 in 5 s", published in that order,
# arrive #2, #3, #1, each at its time; then a consumer that fails: one
# message comes back after 1 s and succeeds, one fails all 3 attempts (back
# after 1 s, 2 s) and is parked. Then it stops everything it started.
#
# --broker 3.10|4.0|4.3 (or DB_RABBITMQ): which RabbitMQ it starts; 3.10,
# the default, is Debian 12's own package; 4.0 and 4.3 come from a Debian
# root that tests/integration/broker.sh makes once with debootstrap (about a
# minute the first time) and runs under chroot.
#
# Environment: DELAY_BRIDGE_BROKER_URI (use this broker; nothing is started),
# QUICKSTART_PORT (default 5682) and QUICKSTART_DIST_PORT (default 25682),
# QUICKSTART_HTTP_PORT (the bridge's HTTP endpoint, default 9800),
# DB_SKIP_INSTALL=1 (never run apt-get).
set -euo pipefail

while [ $# -gt 0 ]; do
    case "$1" in
    --broker) [ $# -ge 2 ] || { echo "usage: deploy/quickstart.sh [--broker 3.10|4.0|4.3]" >&2; exit 2; }
              DB_RABBITMQ=$2; shift ;;
    *) echo "usage: deploy/quickstart.sh [--broker 3.10|4.0|4.3]" >&2; exit 2 ;;
    esac
    shift
done
export DB_RABBITMQ=${DB_RABBITMQ:-3.10}

cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=.tmp/quickstart
PORT=${QUICKSTART_PORT:-5682}
DIST_PORT=${QUICKSTART_DIST_PORT:-25682}
HTTP_PORT=${QUICKSTART_HTTP_PORT:-9800}
RABBITMQ_SH=tests/integration/rabbitmq.sh
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3

if [ -t 1 ]; then B=$'\e[1m' G=$'\e[32m' R=$'\e[31m' N=$'\e[0m'; else B='' G='' R='' N=''; fi
step() { printf '%s==> %s%s\n' "$B" "$*" "$N"; }
info() { printf '    %s\n' "$*"; }
die() { printf '%serror:%s %s\n' "$R" "$N" "$*" >&2; exit 1; }
# Run a noisy command with its output in a log file; show the end of it if it fails.
quiet() {
    local logf=$1; shift
    if ! "$@" >>"$logf" 2>&1; then
        tail -n 30 "$logf" >&2
        die "'$*' failed (full output in $logf)"
    fi
}

mkdir -p "$WORK"
BRIDGE_PID=
STARTED_BROKER=

cleanup() {
    local rc=$?
    if [ -n "$BRIDGE_PID" ] && kill -0 "$BRIDGE_PID" 2>/dev/null; then
        kill -TERM "$BRIDGE_PID" 2>/dev/null || true
        wait "$BRIDGE_PID" 2>/dev/null || true
    fi
    if [ -n "$STARTED_BROKER" ]; then
        bash "$RABBITMQ_SH" stop "$WORK/rabbitmq" >>"$WORK/rabbitmq.out" 2>&1 || true
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. Dependencies ------------------------------------------------------------
# The package list lives in one place: deploy/packages.sh.
. deploy/packages.sh
DB_APT_LOG="$WORK/apt.log" db_install_missing build test ||
    { tail -n 30 "$WORK/apt.log" >&2; die "installing packages failed (full output in $WORK/apt.log)"; }

# 2. Build -------------------------------------------------------------------
step "Building build/delay-bridge"
: >"$WORK/build.log"
quiet "$WORK/build.log" cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
quiet "$WORK/build.log" cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target delay-bridge
info "$(build/delay-bridge --version)"

# 3. Broker ------------------------------------------------------------------
if [ -n "${DELAY_BRIDGE_BROKER_URI:-}" ]; then
    URI=$DELAY_BRIDGE_BROKER_URI
    step "Using the broker in DELAY_BRIDGE_BROKER_URI"
else
    URI="amqp://guest:guest@127.0.0.1:$PORT/%2f"
    step "Starting $(bash tests/integration/broker.sh describe) on 127.0.0.1:$PORT (state in $WORK/rabbitmq)"
    # A fresh node and an empty WAL every time: the demo starts from nothing.
    bash "$RABBITMQ_SH" stop "$WORK/rabbitmq" >>"$WORK/rabbitmq.out" 2>&1 || true
    rm -rf "$WORK/rabbitmq/mnesia" "$WORK/wal"
    STARTED_BROKER=1
    quiet "$WORK/rabbitmq.out" bash "$RABBITMQ_SH" start "$WORK/rabbitmq" "$PORT" "$DIST_PORT"
fi

# 4. Bridge ------------------------------------------------------------------
cat >"$WORK/config.json" <<EOF
{
  "broker": {"uri": "$URI", "heartbeat_s": 30},
  "wal": {"dir": "$ROOT/$WORK/wal", "fsync": true},
  "log": {"level": "info"},
  "http": {"listen": "127.0.0.1:$HTTP_PORT"},
  "routes": [
    {"name": "orders", "ingress_exchange": "orders.delayed", "ingress_queue": "orders.delayed.q",
     "target_exchange": "orders"},
    {"name": "retries", "ingress_exchange": "orders.retry", "ingress_queue": "orders.retry.q",
     "retry": {"initial_ms": 1000, "multiplier": 2, "max_attempts": 3,
               "parking_exchange": "orders.parked", "parking_queue": "orders.parked",
               "queues": {"orders.email": {}}}}
  ]
}
EOF
step "Starting delay-bridge -c $WORK/config.json"
build/delay-bridge -c "$WORK/config.json" 2>"$WORK/delay-bridge.log" &
BRIDGE_PID=$!
for _ in $(seq 1 300); do
    grep -q 'msg="ready"' "$WORK/delay-bridge.log" && break
    kill -0 "$BRIDGE_PID" 2>/dev/null || { cat "$WORK/delay-bridge.log" >&2; die "delay-bridge exited"; }
    sleep 0.1
done
grep -q 'msg="ready"' "$WORK/delay-bridge.log" || { cat "$WORK/delay-bridge.log" >&2; die "delay-bridge not ready after 30 s"; }
info "ready: consuming orders.delayed.q, holding messages in $WORK/wal"
info "metrics and health: curl http://127.0.0.1:$HTTP_PORT/metrics  (/healthz /readyz /stats)"

# 5. Demo --------------------------------------------------------------------
step "Demo: publish to exchange \"orders.delayed\" with header x-delay (ms); the bridge"
info "republishes each to exchange \"orders\" (key order.close -> queue orders.close) when due"
echo
"$PYTHON" - "$URI" "$HTTP_PORT" <<'EOF'
import sys, time, uuid, urllib.request
import pika

uri = sys.argv[1]
http_port = int(sys.argv[2])
conn = pika.BlockingConnection(pika.URLParameters(uri))
ch = conn.channel()
ch.exchange_declare("orders", exchange_type="direct", durable=True)
ch.queue_declare("orders.close", durable=True)
ch.queue_bind("orders.close", "orders", routing_key="order.close")
ch.confirm_delivery()

run = uuid.uuid4().hex[:8]
plan = [(1, 8000), (2, 3000), (3, 5000)]
t0 = time.monotonic()
sent = {}
for order, delay in plan:
    mid = "%s-%d" % (run, order)
    ch.basic_publish("orders.delayed", "order.close", b'{"order": %d, "action": "close"}' % order,
                     pika.BasicProperties(headers={"x-delay": delay}, message_id=mid,
                                          content_type="application/json", delivery_mode=2))
    sent[mid] = (order, delay, time.monotonic())
    print("    %6.3fs  sent      close order #%d   x-delay=%d" % (time.monotonic() - t0, order, delay))
time.sleep(0.3)
try:
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=2) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(("delay_bridge_pending_messages", "delay_bridge_next_due_seconds")):
                print("    %6.3fs  metrics   %s" % (time.monotonic() - t0, line))
except OSError as e:
    print("    (metrics endpoint not reachable: %s)" % e)
sys.stdout.flush()

arrived = []
def on_msg(ch, method, props, body):
    now = time.monotonic()
    ch.basic_ack(method.delivery_tag)
    if props.message_id not in sent:
        print("    (ignored a message left in orders.close by an earlier run)")
        return
    order, delay, t_sent = sent[props.message_id]
    print("    %6.3fs  received  close order #%d   %.3f s after it was sent (x-delay %.3f s)"
          % (now - t0, order, now - t_sent, delay / 1000.0))
    sys.stdout.flush()
    arrived.append(order)

ch.basic_consume("orders.close", on_msg)
deadline = time.monotonic() + 20
while len(arrived) < len(plan) and time.monotonic() < deadline:
    conn.process_data_events(time_limit=0.1)
conn.close()
print()
if arrived != [2, 3, 1]:
    print("    unexpected: arrived %s, expected #2, #3, #1" % ", ".join("#%d" % o for o in arrived))
    sys.exit(1)
print("    Arrived #2, #3, #1: by due time, not in the order they were published.")
EOF
echo
step "Retries: queue \"orders.email\" dead-letters to \"orders.retry\" (a retry route: 1 s, x2,"
info "3 attempts, then parked in \"orders.parked\"); its consumer rejects without requeue"
echo
"$PYTHON" - "$URI" <<'EOF'
import sys, time, uuid
import pika

conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.queue_declare("orders.email", durable=True, arguments={"x-dead-letter-exchange": "orders.retry"})
ch.queue_purge("orders.email")
ch.queue_purge("orders.parked")
run = uuid.uuid4().hex[:8]
plan = {run + "-a": 1, run + "-b": 99}  # message id -> how many times the consumer fails it
name = {run + "-a": "a", run + "-b": "b"}
seen = {m: 0 for m in plan}
t0 = time.monotonic()
for mid in plan:
    ch.basic_publish("", "orders.email", b"send email", pika.BasicProperties(message_id=mid))
done = set()


def on_msg(ch, method, props, body):
    mid = props.message_id
    if mid not in seen:
        ch.basic_ack(method.delivery_tag)
        return
    seen[mid] += 1
    attempt = (props.headers or {}).get("x-retry-attempt", 1)
    fail = seen[mid] <= plan[mid]
    print("    %6.3fs  email %s  attempt %d  %s" % (time.monotonic() - t0, name[mid], attempt,
                                                  "fails: rejected" if fail else "done: acked"))
    sys.stdout.flush()
    if fail:
        ch.basic_reject(method.delivery_tag, requeue=False)
    else:
        ch.basic_ack(method.delivery_tag)
        done.add(mid)


def on_parked(ch, method, props, body):
    h = props.headers or {}
    if props.message_id in seen:
        print("    %6.3fs  email %s  parked in orders.parked: %s, %s attempts"
              % (time.monotonic() - t0, name[props.message_id], h.get("x-retry-parked-reason"),
                 h.get("x-retry-attempts")))
        done.add("parked")
    ch.basic_ack(method.delivery_tag)


ch.basic_consume("orders.email", on_msg)
ch.basic_consume("orders.parked", on_parked)
deadline = time.monotonic() + 20
while len(done) < 2 and time.monotonic() < deadline:
    conn.process_data_events(time_limit=0.1)
conn.close()
print()
if done != {run + "-a", "parked"}:
    print("    unexpected: %s" % sorted(done))
    sys.exit(1)
print("    Email a came back after 1 s and succeeded; email b was parked after its 3rd attempt.")
EOF
echo


# 6. Stop --------------------------------------------------------------------
step "Stopping delay-bridge (SIGTERM)"
kill -TERM "$BRIDGE_PID"
rc=0
wait "$BRIDGE_PID" || rc=$?
BRIDGE_PID=
[ "$rc" -eq 0 ] || die "delay-bridge exited with $rc (log: $WORK/delay-bridge.log)"
info "exited 0"
if [ -n "$STARTED_BROKER" ]; then
    step "Stopping RabbitMQ"
    quiet "$WORK/rabbitmq.out" bash "$RABBITMQ_SH" stop "$WORK/rabbitmq"
    STARTED_BROKER=
fi

echo
printf '%sDone.%s Logs:\n' "$G" "$N"
info "delay-bridge:  $WORK/delay-bridge.log"
info "config:        $WORK/config.json"
[ -n "${DELAY_BRIDGE_BROKER_URI:-}" ] || info "RabbitMQ:      $WORK/rabbitmq/log/"
info "build:         $WORK/build.log"
