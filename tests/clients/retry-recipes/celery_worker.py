"""celery_worker.py -- the README's Celery recipe ("Retries with backoff"):
late acks, the task queue declared with the retry route's ingress exchange
as x-dead-letter-exchange, and a task that raises Reject(requeue=False) on
a temporary error instead of self.retry() (whose countdown the worker holds
in memory). The bridge sends the task message back to the queue after the
backoff; x-retry-attempt arrives among the task's request headers.

Protocol: see run_recipe.py. This file publishes the cases with
apply_async(), then runs a solo worker in this process.
"""
import os
import sys
import time

import celery
from celery import Celery
from celery.exceptions import Reject
from kombu import Exchange, Queue

URI, EXCHANGE, QUEUE = os.environ["DB_URI"], os.environ["DB_EXCHANGE"], os.environ["DB_QUEUE"]
RETRY_EXCHANGE = os.environ.get("DB_RETRY_EXCHANGE", "")
CASES = dict((c.split(":")[0], int(c.split(":")[1])) for c in os.environ["DB_CASES"].split(","))
OUT = sys.__stdout__  # the worker redirects sys.stdout to its log

# --- the recipe --------------------------------------------------------------
app = Celery("shop", broker=URI)
arguments = {"x-queue-type": os.environ.get("DB_QUEUE_TYPE", "classic")}
if RETRY_EXCHANGE:
    arguments["x-dead-letter-exchange"] = RETRY_EXCHANGE
app.conf.update(
    task_acks_late=True,              # ack after the task ran: a rejection can still dead-letter it
    task_reject_on_worker_lost=True,  # a killed worker's task is rejected too (dead-lettered, retried)
    # worker_prefetch_multiplier stays at its default (4): at 1, the solo worker here
    # (Celery 5.2.6) took the next message only 10 s after a Reject
    task_queues=[Queue(QUEUE, Exchange(EXCHANGE, type="direct"), routing_key="email",
                       queue_arguments=arguments)],
    task_default_queue=QUEUE,
    task_default_exchange=EXCHANGE,
    task_default_routing_key="email",
)


class TemporaryError(Exception):
    pass


seen = {}


def deliver(order_id):
    """The application's work: here, fail the first `fails` deliveries."""
    n = seen[order_id] = seen.get(order_id, 0) + 1
    if n <= CASES[order_id]:
        raise TemporaryError("smtp down")


@app.task(bind=True, name="shop.send_email")
def send_email(self, order_id):
    # the message's AMQP headers are attributes of the request (Celery 5.2: not in .headers)
    attempt = getattr(self.request, "x-retry-attempt", 1)    # 1, 2, ... max_attempts
    try:
        deliver(order_id)
    except TemporaryError as e:
        OUT.write("DELIVERY %s %s %d fail\n" % (order_id, attempt, time.time() * 1000))
        OUT.flush()
        raise Reject(str(e), requeue=False)  # dead-lettered: back after the route's backoff
    OUT.write("DELIVERY %s %s %d ok\n" % (order_id, attempt, time.time() * 1000))
    OUT.flush()
# ------------------------------------------------------------------------------


if __name__ == "__main__":
    print("VERSION celery %s" % celery.__version__, flush=True)
    with app.connection_for_write() as conn:
        app.conf.task_queues[0](conn.default_channel).declare()
    for mid in CASES:
        send_email.apply_async((mid,), task_id=mid, message_id=mid, retry=True)
    app.worker_main(["worker", "--pool=solo", "--concurrency=1", "--loglevel=WARNING",
                     "--without-heartbeat", "--without-mingle", "--without-gossip", "-Q", QUEUE])
