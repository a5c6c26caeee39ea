"""consumer_pika.py -- a consumer written with pika (BlockingConnection, as its
documentation shows) that fails chosen messages a chosen number of times.

It consumes the queues named in DB_QUEUES (comma-separated, declared by the
driver with the retry route's ingress exchange as x-dead-letter-exchange)
with manual acks. A message's header "fail-times" (k) says how many
deliveries fail: the delivery whose attempt (x-retry-attempt, the bridge's
count; 1 when absent) is <= k is rejected without requeue (basic.reject:
the broker dead-letters it to the retry route), any later one is acked.
The first delivery (attempt 1, not redelivered) of a message with a
header "hold-ms" is acked or rejected that many ms later (the crash test
holds some across a broker restart, so that their ack is lost). The
decision reads only the message, so a consumer restarted, or a delivery
repeated after a lost ack, decides the same way.

Protocol (run_consumers.py): environment DB_URI, DB_QUEUES, DB_PREFETCH;
one JSON object a line on stdout:
    {"event": "version", "client": "pika", "version": "..."}
    {"event": "ready"}            after each (re)connection's consume-ok
    {"event": "delivery", "id": message-id, "queue": ..., "attempt": n,
     "recv_ms": epoch ms on receipt, "action": "ack"|"reject", "hold_ms": n,
     "redelivered": bool, "bridge_id": x-delay-bridge-id or null,
     "history": x-retry-history or null}
    {"event": "disconnected", "error": "..."}
It reconnects (every 0.3 s) when the connection drops, and runs until
SIGTERM.
"""
import json
import os
import signal
import sys
import time

import pika
from pika.exceptions import AMQPError

URI = os.environ["DB_URI"]
QUEUES = [q for q in os.environ["DB_QUEUES"].split(",") if q]
PREFETCH = int(os.environ.get("DB_PREFETCH", "20"))


def out(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def as_int(v, default):
    if isinstance(v, bytes):
        v = v.decode()
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def on_message(queue):
    def cb(ch, method, props, body):
        recv_ms = time.time() * 1000.0
        headers = props.headers or {}
        attempt = as_int(headers.get("x-retry-attempt"), 1)
        fail_times = as_int(headers.get("fail-times"), 0)
        hold_ms = as_int(headers.get("hold-ms"), 0) if attempt == 1 and not method.redelivered else 0
        action = "reject" if attempt <= fail_times else "ack"

        def act():
            if action == "reject":
                ch.basic_reject(method.delivery_tag, requeue=False)  # dead-lettered to the route
            else:
                ch.basic_ack(method.delivery_tag)
        if hold_ms > 0:
            # held (still unacked) until then: a connection lost meanwhile loses the ack
            ch.connection.call_later(hold_ms / 1000.0, act)
        else:
            act()
        bid = headers.get("x-delay-bridge-id")
        hist = headers.get("x-retry-history")
        out(event="delivery", id=props.message_id, queue=queue, attempt=attempt, recv_ms=round(recv_ms, 3),
            action=action, hold_ms=hold_ms, redelivered=bool(method.redelivered),
            bridge_id=bid.decode() if isinstance(bid, bytes) else bid,
            history=[int(x) for x in hist] if hist is not None else None)
    return cb


def stop(signum, frame):
    raise SystemExit(0)


def main():
    signal.signal(signal.SIGTERM, stop)
    out(event="version", client="pika", version=pika.__version__)
    while True:
        conn = None
        try:
            conn = pika.BlockingConnection(pika.URLParameters(URI))
            ch = conn.channel()
            ch.basic_qos(prefetch_count=PREFETCH)
            for q in QUEUES:
                ch.basic_consume(q, on_message(q), auto_ack=False)
            out(event="ready")
            ch.start_consuming()
        except AMQPError as e:
            out(event="disconnected", error=repr(e))
            time.sleep(0.3)
        finally:
            if conn is not None and conn.is_open:
                try:
                    conn.close()
                except Exception:
                    pass


if __name__ == "__main__":
    main()
