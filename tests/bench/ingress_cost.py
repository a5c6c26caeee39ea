#!/usr/bin/python3
"""What a message waiting in an ingress queue costs the broker: the figure
README "Bounds on what is held" gives for the messages max_held leaves in
the broker while a route is paused.

N persistent messages (64-byte body, an x-delay header and a message-id,
as a delayed publish looks) are published into a fresh durable queue of
each type asked for, without confirms; once the queue counts them all and
5 s passed, the node's memory (erlang:memory(total)) is read again. Prints,
per queue type, the node's memory growth per message and what
rabbitmqctl list_queues says of the queue (messages, memory,
message_bytes_ram). The queue is deleted after.

Usage (a node of your own: it needs rabbitmqctl, as the integration
tests' owned broker does):
  DB_TEST_BROKER_URI=amqp://guest:guest@127.0.0.1:PORT/%2f \\
  DB_TEST_BROKER_DIR=build/rabbitmq [DB_RABBITMQ=4.3] \\
  python3 tests/bench/ingress_cost.py 100000 classic quorum
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

import harness as h  # noqa: E402
import pika  # noqa: E402


def node_memory():
    return int(h.rabbitmqctl("eval", "erlang:memory(total).").strip())


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    types = sys.argv[2:] or ["classic", "quorum"]
    conn = h.connect()
    ch = conn.channel()
    print("RabbitMQ %s, %d messages of 64 B" % (h.broker_version(), n))
    for qt in types:
        q = "bench.ingress-cost.%s.%d" % (qt, os.getpid())
        ch.queue_declare(q, durable=True, arguments={"x-queue-type": qt})
        time.sleep(2)
        before = node_memory()
        props = pika.BasicProperties(delivery_mode=2, headers={"x-delay": 3600000},
                                     message_id="m")
        for _ in range(n):
            ch.basic_publish("", q, b"x" * 64, props)
        while ch.queue_declare(q, passive=True).method.message_count < n:
            time.sleep(0.5)
        time.sleep(5)
        after = node_memory()
        row = [line for line in h.rabbitmqctl("list_queues", "name", "messages", "memory",
                                              "message_bytes_ram").splitlines()
               if line.startswith(q)]
        print("%-8s node memory +%.1f B/message; list_queues: %s"
              % (qt, (after - before) / n, row[0].split("\t")[1:] if row else "?"))
        ch.queue_delete(q)
    conn.close()


if __name__ == "__main__":
    main()
