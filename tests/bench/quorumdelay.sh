# shellcheck shell=bash disable=SC2034  # its globals are read by the scripts that source it
# quorumdelay.sh -- RabbitMQ's own delays beside the bridge: a quorum queue
# holding a message published with header x-opt-delivery-time (epoch ms)
# until then (rabbitmq-server's qq-vNext branch, the 4.4 line; the node
# tests/integration/build_qq_delay.sh builds and broker.sh starts with
# DB_RABBITMQ=qq-delay). For the end-to-end benchmarks (run.sh, ontime.sh,
# ownhold.sh); sourced, never run.
#
# The same loads as the bridge's (count, size, delays, confirm window, the
# same load_publish and load_consume or pace.go) go to exchange bench.qq
# (direct) and quorum queue bench.qout bound to it with key bench, which the
# consumer declares; the publisher sends plain messages with
# x-opt-delivery-time = its send time + the delay (load_publish --mode
# deliverytime). One hop: the queue holds the message and delivers it; the
# bridge's two hops (ingress, target) are the price of a delay before
# routing. Its "broker alone" is the same exchange and quorum queue without
# the header (qq_ceiling): a quorum queue costs the broker more than the
# classic bench.out of the bridge's target, so each system's ratio is to
# the queue type it uses, and the report shows both.
#
#   qq_decide   before the broker starts: QQ=1 when this node delays in its
#               quorum queues (DB_RABBITMQ=qq-delay), else QQ_WHY says why not
#               in the words of the report; BENCH_QQ=0 leaves it out.
#   qq_consume NAME COUNT TAG [options]   consume() of harness.sh on bench.qout
#   qq_publish NAME [options]             publish() to bench.qq, x-opt-delivery-time
#   qq_plain NAME [options]               publish() to bench.qq, no header
#   qq_beam     the node's beam.smp pid (for its RSS), or nothing
#
# Reads DB_RABBITMQ, BENCH_QQ, BROKER_DIR; calls consume, publish (harness.sh).

QQ_NAME="quorum queue delay"
QQ_EX=bench.qq
QQ_Q=bench.qout
QQ=0 QQ_WHY=""
qq_decide() {
    case "${DB_RABBITMQ:-3.10}" in
    qq-delay) QQ=1 ;;
    4.3) QQ_WHY="absent: RabbitMQ 4.3 delays only retries in quorum queues (retry.sh); publish-time delays need the qq-vNext node (DB_RABBITMQ=qq-delay)" ;;
    *) QQ_WHY="absent: not measured here (publish-time delays in quorum queues need the qq-vNext node: DB_RABBITMQ=qq-delay)" ;;
    esac
    if [ "$QQ" = 1 ] && [ "${BENCH_QQ:-1}" = 0 ]; then QQ=0 QQ_WHY="absent: left out (BENCH_QQ=0)"; fi
}

# The consumer declares bench.qq and the quorum queue bench.qout and binds
# them (its --queue, --exchange and --queue-type come after consume()'s own
# and win).
qq_consume() {
    local name=$1 count=$2 tag=$3
    shift 3
    consume "$name" "$count" "$tag" --purge --queue "$QQ_Q" --queue-type quorum --exchange "$QQ_EX" "$@"
}
qq_publish() {
    local name=$1
    shift
    publish "$name" --mode deliverytime --exchange "$QQ_EX" --routing-key bench "$@"
}
qq_plain() {
    local name=$1
    shift
    publish "$name" --mode plain --exchange "$QQ_EX" --routing-key bench "$@"
}

# qq_beam: the beam.smp process of the node rabbitmq.sh started (BROKER_DIR/node.pid).
qq_beam() {
    local top c
    top=$(cat "$BROKER_DIR/node.pid" 2>/dev/null) || return 0
    for c in $top $(pgrep -g "$top" 2>/dev/null || true); do
        [ "$(cat "/proc/$c/comm" 2>/dev/null)" != beam.smp ] || { echo "$c"; return 0; }
    done
}
