#!/usr/bin/env python3
"""publish_orders.py -- place orders that must be closed T seconds later.

The publishing half of the order-closing demo. A shop closes every unpaid
order some time after it was placed; instead of a job that scans the
database, it publishes one delayed message per order, when the order is
placed, to the ingress exchange of a delay-bridge route, with header
x-delay = T * 1000 (ms), exactly as it would to the delayed-message plugin.
delay-bridge republishes it to exchange "orders" (routing key order.close,
queue orders.close) when it is due; close_orders.py consumes it there.

usage: publish_orders.py [ORDER:SECONDS ...]        default: 1:8 2:3 3:5
environment: AMQP_URI (default amqp://guest:guest@rabbitmq:5672/%2f)

Headers set on each message, besides x-delay:
  x-order-id      the order number
  x-placed-at-ms  when it was published (Unix time, ms)
  x-due-at-ms     when it should be closed: placed + delay (Unix time, ms)
"""
import sys
import time
import uuid

import pika

from demo_amqp import INGRESS_EXCHANGE, ROUTING_KEY, connect, declare_target, log


def parse_plan(args):
    plan = []
    for a in args or ["1:8", "2:3", "3:5"]:
        try:
            order, seconds = a.split(":")
            plan.append((int(order), float(seconds)))
        except ValueError:
            sys.exit("bad argument %r: expected ORDER:SECONDS, e.g. 7:2.5" % a)
    return plan


def wait_for_ingress(conn, wait_s=120.0):
    """The bridge declares the ingress exchange when it starts: wait for it."""
    deadline = time.monotonic() + wait_s
    while True:
        ch = conn.channel()
        try:
            ch.exchange_declare(INGRESS_EXCHANGE, passive=True)
            return ch
        except pika.exceptions.ChannelClosedByBroker:
            if time.monotonic() > deadline:
                sys.exit("exchange %r does not exist: is delay-bridge running?" % INGRESS_EXCHANGE)
            time.sleep(0.5)


def main():
    plan = parse_plan(sys.argv[1:])
    conn = connect()
    ch = wait_for_ingress(conn)
    declare_target(ch)
    ch.confirm_delivery()
    run = uuid.uuid4().hex[:8]
    for order, seconds in plan:
        delay_ms = int(round(seconds * 1000))
        placed_ms = int(time.time() * 1000)
        headers = {"x-delay": delay_ms, "x-order-id": order,
                   "x-placed-at-ms": placed_ms, "x-due-at-ms": placed_ms + delay_ms}
        ch.basic_publish(INGRESS_EXCHANGE, ROUTING_KEY,
                         ("close order %d in %g s" % (order, seconds)).encode(),
                         pika.BasicProperties(headers=headers, delivery_mode=2,
                                              content_type="text/plain",
                                              message_id="order-%d-%s" % (order, run)))
        log("placed order %d: close in %g s (x-delay %d)", order, seconds, delay_ms)
    conn.close()


if __name__ == "__main__":
    main()
