#!/usr/bin/env python3
"""close_orders.py -- close orders when their delayed message arrives.

The consuming half of the order-closing demo: consumes queue orders.close
(where delay-bridge republishes the messages publish_orders.py sent) and
prints, for each, how long after the order was placed it arrived and how
late that was against x-due-at-ms (never negative: delay-bridge never
fires early; the lateness is the bridge's and the broker's latency):

  closed order 2, 3.004 s after it was placed, late by 4 ms

usage: close_orders.py [--count N] [--timeout SECONDS]
  --count N        exit 0 after N orders (default: run until stopped)
  --timeout S      exit 1 if the N orders have not arrived after S seconds
environment: AMQP_URI (default amqp://guest:guest@rabbitmq:5672/%2f)
"""
import argparse
import sys
import time

from demo_amqp import QUEUE, connect, declare_target, log


def main():
    ap = argparse.ArgumentParser(description="close orders when their delayed message arrives")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=0)
    opts = ap.parse_args()

    conn = connect()
    ch = conn.channel()
    declare_target(ch)
    closed = 0

    def on_message(ch, method, props, body):
        nonlocal closed
        now_ms = time.time() * 1000
        h = props.headers or {}
        try:
            order = int(h["x-order-id"])
            placed, due = int(h["x-placed-at-ms"]), int(h["x-due-at-ms"])
        except (KeyError, TypeError, ValueError):
            log("ignored a message without order headers: %r", body[:80])
            ch.basic_ack(method.delivery_tag)
            return
        log("closed order %d, %.3f s after it was placed, late by %d ms",
            order, (now_ms - placed) / 1000.0, round(now_ms - due))
        ch.basic_ack(method.delivery_tag)
        closed += 1

    ch.basic_qos(prefetch_count=100)
    ch.basic_consume(QUEUE, on_message)
    log("waiting for orders on queue %s", QUEUE)
    deadline = time.monotonic() + opts.timeout if opts.timeout else None
    while not opts.count or closed < opts.count:
        if deadline and time.monotonic() > deadline:
            log("timeout: %d of %d orders closed", closed, opts.count)
            sys.exit(1)
        conn.process_data_events(time_limit=0.2)
    conn.close()


if __name__ == "__main__":
    main()
