"""publish_kombu.py -- kombu (py-amqp underneath, as Celery uses it) as its
documentation shows: Connection with transport option confirm_publish, an
Exchange, a Producer, publish(headers=...). This is also the README's
Celery/kombu recipe: the ingress exchange instead of an x-delayed-message
exchange (declared by the bridge, so not declared here), header x-delay.
py-amqp writes an int as 'I', beyond 32 bits as 'L' (signed, which
rabbitmq-c reads unsigned), a float as 'd', a datetime as a timestamp in
seconds. Protocol: see run_client.py.

DB_MODE=x-delayed-message: an application written for the delayed-message
plugin, unchanged (run_client.py shim), kombu's way: an Exchange of type
x-delayed-message with arguments x-delayed-type, Queues bound to it
(Queue.declare declares all three), publish with header x-delay."""
import datetime
import os
import time

import amqp
import kombu
from kombu import Connection, Exchange, Producer, Queue

print("VERSION kombu %s, py-amqp %s" % (kombu.__version__, amqp.__version__))
ex_name, rk = os.environ["DB_EXCHANGE"], os.environ["DB_RK"]

if os.environ.get("DB_MODE") == "x-delayed-message":
    # run_client.SHIM_TYPES: type, routing key, binding of .q, of .decoy (a dict: headers)
    types = [("direct", "rk", "rk", "other"), ("topic", "order.eu", "*.eu", "*.us"),
             ("fanout", "rk", "", None), ("headers", "rk", {"kind": "a"}, {"kind": "b"})]
    cases = [  # (case, x-delay, the plugin_compat check it is: kind and value)
        ("int", 1500, "int32:1500"),                  # 'I'
        ("float", 1500.7, "float64:1500"),            # 'd'
        ("string", "1500", "string:1500"),
        ("zero", 0, "zero:0"),
        ("negative", -1000, "negative-int32:0"),      # 'I'
        ("none", None, "missing:0"),
    ]
    lines = []
    with Connection(os.environ["DB_URI"], transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        producer = Producer(channel, auto_declare=False)
        for kind, key, main, decoy in types:
            exchange = Exchange("%s.%s" % (ex_name, kind), type="x-delayed-message", durable=True,
                                arguments={"x-delayed-type": kind})
            for q, b in ((exchange.name + ".q", main), (exchange.name + ".decoy", decoy)):
                if b is None:
                    continue
                if isinstance(b, dict):
                    queue = Queue(q, exchange, routing_key="", durable=True,
                                  binding_arguments=dict(b, **{"x-match": "all"}))
                else:
                    queue = Queue(q, exchange, routing_key=b, durable=True)
                queue(channel).declare()
            for case, delay, expect in cases:
                headers = {"x-client": "kombu", "kind": "a"}
                if delay is not None:
                    headers["x-delay"] = delay
                mid = "%s/%s" % (kind, case)
                t = int(time.time() * 1000)
                producer.publish(mid, exchange=exchange, routing_key=key, headers=headers,
                                 message_id=mid, content_type="text/plain",
                                 content_encoding="utf-8", retry=False)
                lines.append("SENT %s %d %s" % (mid, t, expect))
    print("\n".join(lines))
    raise SystemExit(0)

now = int(time.time() * 1000)
due_s = now // 1000 + 3
cases = [
    ("int", {"x-delay": 1500}, "delay:1500"),                         # 'I'
    ("float", {"x-delay": 1500.7}, "delay:1500"),                     # 'd'
    ("string", {"x-delay": "1500.5"}, "delay:1500"),
    ("long", {"x-delay": 5000000000}, "dlx:x-delay above max_delay_ms"),   # 'L'
    ("negative-long", {"x-delay": -5000000000}, "now"),               # 'L' < 0: rabbitmq-c reads 2^64-5e9
    ("until-datetime", {"x-delay-until": datetime.datetime.fromtimestamp(due_s, datetime.timezone.utc)},
     "due:%d" % (due_s * 1000)),                                      # 'T'
    ("until-ms", {"x-delay-until": now + 2000}, "due:%d" % (now + 2000)),  # 'L'
    ("bad", {"x-delay": "soon"}, "dlx:invalid x-delay"),
]
lines = []
with Connection(os.environ["DB_URI"], transport_options={"confirm_publish": True}) as conn:
    exchange = Exchange(ex_name, type="fanout", durable=True, no_declare=True)
    producer = Producer(conn.channel(), exchange=exchange, auto_declare=False)
    for mid, headers, expect in cases:
        headers["x-client"] = "kombu"
        t = int(time.time() * 1000)
        producer.publish(mid, routing_key=rk, headers=headers, message_id=mid, mandatory=True,
                         content_type="text/plain",
                         content_encoding="utf-8", retry=False)
        lines.append("SENT %s %d %s" % (mid, t, expect))
print("\n".join(lines))
