#!/bin/bash
# rabbitmq-tls.sh -- a throwaway RabbitMQ node with a TLS listener, for test_tls.py.
#
#   rabbitmq-tls.sh start DIR PORT DISTPORT TLSPORT CERTDIR VERIFY_CLIENT
#   rabbitmq-tls.sh stop  DIR
#
# The node is ../rabbitmq.sh's (plain AMQP on 127.0.0.1:PORT, state and
# logs under DIR, no plugins), plus a TLS listener on 127.0.0.1:TLSPORT
# using CERTDIR/{ca,server}.pem and server.key as written by make-certs.sh.
# The server always asks for a client certificate (verify_peer) and checks
# any it gets against ca.pem; VERIFY_CLIENT "required" refuses clients
# without one (fail_if_no_peer_cert = true), "optional" lets them in.
#
# rabbitmq.sh writes rabbitmq.conf itself and points the node at
# DIR/advanced.config without writing it: the TLS settings go there, in
# Erlang terms, and are merged with rabbitmq.conf by the broker. Changing
# VERIFY_CLIENT means stop, then start again (state is kept).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RABBITMQ_SH="$HERE/../rabbitmq.sh"

say() { printf 'rabbitmq-tls.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
usage() { sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 2 ] || usage
case "$1" in
start)
    [ $# -eq 7 ] || usage
    DIR=$2 PORT=$3 DISTPORT=$4 TLSPORT=$5 CERTDIR=$(cd "$6" && pwd) VERIFY=$7
    [[ "$TLSPORT" =~ ^[0-9]+$ ]] || die "TLSPORT must be a number"
    case "$VERIFY" in
    required) FAIL=true ;;
    optional) FAIL=false ;;
    *) die "VERIFY_CLIENT must be required or optional, got '$VERIFY'" ;;
    esac
    for f in ca.pem server.pem server.key; do
        [ -r "$CERTDIR/$f" ] || die "$CERTDIR/$f not found (run make-certs.sh $CERTDIR)"
    done
    if (exec 3<>"/dev/tcp/127.0.0.1/$TLSPORT") 2>/dev/null; then
        die "port $TLSPORT is already in use on 127.0.0.1"
    fi
    # The node reads its certificates from its own directory: a node in a
    # root (broker.sh, 4.x) sees nothing of the host outside it.
    mkdir -p "$DIR/certs"
    cp "$CERTDIR/ca.pem" "$CERTDIR/server.pem" "$CERTDIR/server.key" "$DIR/certs/"
    cat >"$DIR/advanced.config" <<CONF
[{rabbit, [
   {ssl_listeners, [{"127.0.0.1", $TLSPORT}]},
   {ssl_options, [{cacertfile, "$DIR/certs/ca.pem"},
                  {certfile, "$DIR/certs/server.pem"},
                  {keyfile, "$DIR/certs/server.key"},
                  {verify, verify_peer},
                  {fail_if_no_peer_cert, $FAIL}]}
 ]}].
CONF
    bash "$RABBITMQ_SH" start "$DIR" "$PORT" "$DISTPORT"
    # await_startup returns once the node runs; the TLS listener must be there too
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$TLSPORT") 2>/dev/null; then
            say "TLS listener up on 127.0.0.1:$TLSPORT (client certificate $VERIFY)"
            exit 0
        fi
        sleep 0.1
    done
    die "the node started but nothing listens on 127.0.0.1:$TLSPORT (logs in $DIR/log)"
    ;;
stop)
    [ $# -eq 2 ] || usage
    exec bash "$RABBITMQ_SH" stop "$2"
    ;;
*)
    usage
    ;;
esac
