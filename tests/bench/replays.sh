#!/bin/bash
# replays.sh -- crash replays of two daemon binaries, paired: the same
# kill -9 loop, the same seeds, the same broker, one after the other.
#
#   tests/bench/replays.sh BEFORE_BIN AFTER_BIN [SEED...]
#
# For each seed (default: 333998187 424242 777001) runs
# tests/integration/test_kill_loop.py (50 kills of a bridge under load,
# DB_KILL_LOOP_N to change) once with BEFORE_BIN and once with AFTER_BIN,
# against one RabbitMQ node this script starts (DB_RABBITMQ selects the
# broker of the matrix, BENCH_PORT its AMQP port, default 5861) and stops at
# the end. Prints one line per run: broker, seed, binary, and the loop's own
# result (sent, delivered, lost, duplicates by cause), then the sums.
#
# A replay is a message delivered twice under the same x-delay-bridge-id
# (case 1 of README "Delivery guarantees"): a kill between the broker's
# confirm and the DONE record reaching the log. Pairs make the comparison:
# how many messages a loop sends and how many a kill meets in flight
# depend on the machine's load at the moment, which both binaries share.
# Never asserts on a figure; exit 1 when a loop lost a message or failed.
set -Euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN [SEED...]" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2")
shift 2
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(333998187 424242 777001)
ver=${DB_RABBITMQ:-3.10}
port=${BENCH_PORT:-5861}
dir=$(mktemp -d "${BENCH_TMP:-/var/tmp}/replays.XXXXXX")
export DB_RABBITMQ=$ver

stop() { "$ROOT/tests/integration/rabbitmq.sh" stop "$dir/rmq" >/dev/null 2>&1 || true; }
trap stop EXIT
DB_RABBITMQ_FRESH=1 "$ROOT/tests/integration/rabbitmq.sh" start "$dir/rmq" "$port" $((port + 20000)) \
    >"$dir/broker.log" 2>&1 || { echo "broker did not start: $dir/broker.log" >&2; exit 1; }

rc=0
declare -A sum
for seed in "${seeds[@]}"; do
    for which in before after; do
        bin=$before
        [ $which = after ] && bin=$after
        log="$dir/$seed-$which.log"
        DB_KILL_LOOP_SEED=$seed DB_BRIDGE_BIN=$bin \
        DB_TEST_BROKER_URI="amqp://guest:guest@127.0.0.1:$port/%2f" \
            /usr/bin/python3 "$ROOT/tests/integration/test_kill_loop.py" >"$log" 2>&1 || rc=1
        line=$(grep -o 'kill loop: kills=.*' "$log" | tail -1)
        echo "RabbitMQ $ver seed $seed $which: ${line:-no result, see $log}"
        d=$(sed -n 's/.* case1_republish=\([0-9]*\).*/\1/p' <<<"$line")
        sum[$which]=$(( ${sum[$which]:-0} + ${d:-0} ))
    done
done
echo "RabbitMQ $ver replays (case 1) over ${#seeds[@]} seeds: before ${sum[before]}, after ${sum[after]}"
echo "logs: $dir"
exit $rc
