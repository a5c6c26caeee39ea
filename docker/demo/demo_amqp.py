"""demo_amqp.py -- what both halves of the order-closing demo share.

The broker connection (retried while the broker starts: in a compose
project every service starts at once) and the demo's names. The target side
(exchange "orders", queue "orders.close") is declared by whoever comes first,
with the same arguments delay-bridge uses for a declared target (durable,
direct), so a message that falls due always finds its queue.
"""
import os
import sys
import time

import pika

URI = os.environ.get("AMQP_URI", "amqp://guest:guest@rabbitmq:5672/%2f")
INGRESS_EXCHANGE = "orders.delayed"   # routes[].ingress_exchange in config.json
TARGET_EXCHANGE = "orders"            # routes[].target_exchange
QUEUE = "orders.close"
ROUTING_KEY = "order.close"


def log(fmt, *args):
    print(fmt % args if args else fmt, flush=True)


def connect(wait_s=120.0):
    """A BlockingConnection to URI, retried for up to wait_s seconds."""
    params = pika.URLParameters(URI)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return pika.BlockingConnection(params)
        except (pika.exceptions.AMQPConnectionError, OSError) as e:  # OSError: name not resolved (yet)
            if time.monotonic() > deadline:
                sys.exit("cannot connect to the broker at %s: %r" % (params.host, e))
            time.sleep(1)


def declare_target(ch):
    ch.exchange_declare(TARGET_EXCHANGE, exchange_type="direct", durable=True)
    ch.queue_declare(QUEUE, durable=True)
    ch.queue_bind(QUEUE, TARGET_EXCHANGE, routing_key=ROUTING_KEY)
