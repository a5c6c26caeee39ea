"""kombu_worker.py -- the README's kombu recipe ("Retries with backoff"):
a ConsumerMixin worker whose queue names the retry route's ingress exchange
as x-dead-letter-exchange; a message whose handling fails is rejected
without requeue (dead-lettered to the route), the bridge sends it back to
this queue after the backoff, and x-retry-attempt says which attempt it is.

Protocol (run_recipe.py): environment DB_URI, DB_EXCHANGE, DB_QUEUE,
DB_RETRY_EXCHANGE ("" when a policy sets the dead-letter exchange),
DB_QUEUE_TYPE, DB_CASES ("id:fails,..."); publishes each case once, then
prints one line a delivery:
    DELIVERY <id> <x-retry-attempt, 1 when absent> <epoch ms> ok|fail
"""
import json
import os
import sys
import time

import kombu
from kombu import Connection, Exchange, Queue
from kombu.mixins import ConsumerMixin

URI, EXCHANGE, QUEUE = os.environ["DB_URI"], os.environ["DB_EXCHANGE"], os.environ["DB_QUEUE"]
RETRY_EXCHANGE = os.environ.get("DB_RETRY_EXCHANGE", "")
CASES = dict((c.split(":")[0], int(c.split(":")[1])) for c in os.environ["DB_CASES"].split(","))

# --- the recipe --------------------------------------------------------------
arguments = {"x-queue-type": os.environ.get("DB_QUEUE_TYPE", "classic")}
if RETRY_EXCHANGE:  # else a policy gives the queue its dead-letter-exchange
    arguments["x-dead-letter-exchange"] = RETRY_EXCHANGE
orders = Exchange(EXCHANGE, type="direct", durable=True)
queue = Queue(QUEUE, exchange=orders, routing_key="email", durable=True,
              queue_arguments=arguments)


class TemporaryError(Exception):
    pass


seen = {}


def handle(body, attempt):
    """The application's work: here, fail the first `fails` deliveries."""
    n = seen[body["id"]] = seen.get(body["id"], 0) + 1
    if n <= CASES[body["id"]]:
        raise TemporaryError("smtp down")


class Worker(ConsumerMixin):
    def __init__(self, connection):
        self.connection = connection

    def get_consumers(self, Consumer, channel):
        return [Consumer(queues=[queue], callbacks=[self.on_message], accept=["json"],
                         prefetch_count=10)]

    def on_consume_ready(self, connection, channel, consumers, **kw):
        print("READY", flush=True)

    def on_message(self, body, message):
        attempt = message.headers.get("x-retry-attempt", 1)  # 1, 2, ... max_attempts
        try:
            handle(body, attempt)
        except TemporaryError:
            # dead-lettered to the retry route: back in QUEUE after the backoff
            message.reject(requeue=False)
            outcome = "fail"
        else:
            message.ack()
            outcome = "ok"
        print("DELIVERY %s %s %d %s" % (body["id"], attempt, time.time() * 1000, outcome), flush=True)
# ------------------------------------------------------------------------------


if __name__ == "__main__":
    print("VERSION kombu %s" % kombu.__version__, flush=True)
    with Connection(URI) as conn:
        queue(conn.default_channel).declare()  # exchange, queue with its arguments, binding
        with conn.Producer() as producer:
            for mid in CASES:
                producer.publish({"id": mid}, exchange=orders, routing_key="email",
                                 serializer="json", delivery_mode=2, message_id=mid,
                                 headers={"x-client": "kombu"}, retry=True)
        try:
            Worker(conn).run()
        except KeyboardInterrupt:
            pass
    sys.exit(0)
