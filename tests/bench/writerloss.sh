#!/bin/bash
# writerloss.sh -- how long a stream has no writer after the node holding it is
# killed, on a three-node cluster, with the stream coordinator's leader elsewhere
# or lost with it (tests/bench/README.md, "RabbitMQ's own delays: clusters").
# No bridge: the broker's own figure behind takeover.sh's nodeloss variant.
#
#   tests/bench/writerloss.sh [RUNS]     (default 1)
#
# Per run, on a fresh cluster (tests/integration/cluster/cluster.sh, the
# broker DB_RABBITMQ names; AMQP ports WRITERLOSS_PORT..+2, default 5960..5962,
# distribution ports WRITERLOSS_DIST_PORT..+2, default 25960..25962, state in
# WRITERLOSS_DIR, default /var/tmp/writerloss-PORT, removed at the end):
#   moved      a stream declared through node 1 (its writer there), 100
#              messages; the coordinator's leadership moved to node 2
#              (ra:transfer_leadership); node 1 killed (SIGKILL of its process
#              group);
#   colocated  after node 1 is back, a stream declared through node 2 and the
#              coordinator's leader left on node 2; node 2 killed.
# Figure: from the kill to the surviving nodes' log line
# "rabbit_stream_coordinator: started writer <the stream>", and the replica
# start failures logged meanwhile. Waits 16 s for the writer.
# Exit 0; 1 when a case could not be set up; 77 when no cluster can be formed.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
C=$ROOT/tests/integration/cluster/cluster.sh
PORT=${WRITERLOSS_PORT:-5960}
DIST=${WRITERLOSS_DIST_PORT:-25960}
D=${WRITERLOSS_DIR:-/var/tmp/writerloss-$PORT}
RUNS=${1:-1}

say() { printf '[writerloss %s] %s\n' "$(date -u +%T)" "$*" >&2; }

wipe() { # the cluster's directory and, for a broker in a root, what its node links point at
    local n
    bash "$C" stop "$D" >/dev/null 2>&1
    for n in 1 2 3; do
        [ -L "$D/n$n" ] || continue
        rm -rf "$(readlink -f "$D/n$n")"
        rmdir "$(dirname "$(readlink -f "$D/n$n")")" 2>/dev/null
    done
    rm -rf "$D"
}
trap wipe EXIT

ctl() { local i=$1; shift; bash "$C" ctl "$D" "$i" -q "$@" 2>/dev/null; }

# kill_case NAME K MOVE_TO: the stream's writer on node K; MOVE_TO the node the
# coordinator's leadership goes to first, or - to leave it
kill_case() {
    local name=$1 k=$2 to=$3 s via t0 st lead coord
    s=writerloss.$name.$(date +%s%N)
    via=$((k % 3 + 1))
    /usr/bin/python3 - "$((PORT + k - 1))" "$s" <<'PY' || return 1
import sys
import pika
c = pika.BlockingConnection(pika.URLParameters('amqp://guest:guest@127.0.0.1:%s/%%2f' % sys.argv[1]))
ch = c.channel()
ch.confirm_delivery()
ch.queue_declare(sys.argv[2], durable=True, arguments={'x-queue-type': 'stream'})
for _ in range(100):
    ch.basic_publish('', sys.argv[2], b'x' * 256)
c.close()
PY
    if [ "$to" != - ]; then
        ctl "$via" eval "ra:transfer_leadership({rabbit_stream_coordinator, 'dbtest$((PORT + k - 1))@localhost'}, {rabbit_stream_coordinator, 'dbtest$((PORT + to - 1))@localhost'})." >/dev/null
        sleep 3
    fi
    lead=$(ctl "$via" list_queues name leader --formatter json | jq -r --arg q "$s" '.[] | select(.name == $q) | .leader')
    coord=$(ctl "$via" eval 'element(2, ra_leaderboard:lookup_leader(rabbit_stream_coordinator)).')
    [ "$lead" = "dbtest$((PORT + k - 1))@localhost" ] || { say "$name: the stream's leader is $lead, not node $k"; return 1; }
    t0=$(date +%s%3N)
    bash "$C" kill-node "$D" "$k" >/dev/null 2>&1
    sleep 16
    st=$(cat "$D"/n*/log/*.log 2>/dev/null | grep -a "started writer __${s//[^A-Za-z0-9]/_}_" | cut -c1-26 | sort | tail -1)
    printf 'RESULT %s | %s | stream leader node %d, coordinator leader %s | kill -> started writer: %s\n' \
        "$BROKER" "$name" "$k" "$coord" \
        "$([ -n "$st" ] && echo "$(($(date -d "$st" +%s%3N) - t0)) ms" || echo "none within 16 s")"
    cat "$D"/n*/log/*.log 2>/dev/null | grep -a "Error while starting replica for __${s//[^A-Za-z0-9]/_}_" |
        sed -E 's/^[0-9-]+ ([0-9:.]+)\+00:00.* on node ([^ ]+) in ([0-9]+) : (\{[^,]+,[^,}]+).*/    \1 replica start on \2 failed: \4/' >&2
    bash "$C" start-node "$D" "$k" >/dev/null 2>&1 || { say "node $k did not start again"; return 1; }
    sleep 3
}

rc=0
for r in $(seq "$RUNS"); do
    wipe
    bash "$C" start "$D" "$PORT" "$DIST" >/dev/null 2>&1
    case $? in 0) ;; 77) say "no cluster here: skipping"; exit 77 ;; *) say "cluster.sh start failed"; exit 1 ;; esac
    BROKER="RabbitMQ $(ctl 1 eval 'rabbit_misc:version().' | tr -d '"') (DB_RABBITMQ=${DB_RABBITMQ:-3.10}), run $r"
    kill_case moved 1 2 || rc=1
    kill_case colocated 2 - || rc=1
done
exit $rc
