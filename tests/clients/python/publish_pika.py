"""publish_pika.py -- pika as its documentation shows: BlockingConnection,
confirm_delivery(), basic_publish with BasicProperties(headers=...). pika
writes an int as 'I' ('l' beyond 32 bits), a Decimal as 'D', a datetime as
a timestamp in seconds (it has no float). Protocol: see run_client.py.

DB_MODE=x-delayed-message: an application written for the delayed-message
plugin, unchanged (run_client.py shim): it declares an x-delayed-message
exchange per x-delayed-type, its queues and bindings, and publishes with
x-delay, not mandatory (the plugin returned every delayed mandatory message).
"""
import datetime
import decimal
import os
import time

import pika

print("VERSION %s" % pika.__version__)
conn = pika.BlockingConnection(pika.URLParameters(os.environ["DB_URI"]))
ch = conn.channel()
ch.confirm_delivery()
ex, rk = os.environ["DB_EXCHANGE"], os.environ["DB_RK"]

if os.environ.get("DB_MODE") == "x-delayed-message":
    # run_client.SHIM_TYPES: type, routing key, binding of .q, of .decoy (a dict: headers)
    types = [("direct", "rk", "rk", "other"), ("topic", "order.eu", "*.eu", "*.us"),
             ("fanout", "rk", "", None), ("headers", "rk", {"kind": "a"}, {"kind": "b"})]
    cases = [  # (case, x-delay, the plugin_compat check it is: kind and value)
        ("int", 1500, "int32:1500"),                  # 'I'
        ("string", "1500", "string:1500"),
        ("zero", 0, "zero:0"),
        ("negative", -1000, "negative-int32:0"),
        ("none", None, "missing:0"),
    ]
    lines = []
    for kind, key, main, decoy in types:
        x = "%s.%s" % (ex, kind)
        ch.exchange_declare(x, "x-delayed-message", durable=True, arguments={"x-delayed-type": kind})
        for q, b in ((x + ".q", main), (x + ".decoy", decoy)):
            if b is not None:
                ch.queue_declare(q, durable=True)
                if isinstance(b, dict):
                    ch.queue_bind(q, x, "", arguments=dict(b, **{"x-match": "all"}))
                else:
                    ch.queue_bind(q, x, b)
        for case, delay, expect in cases:
            headers = {"x-client": "pika", "kind": "a"}
            if delay is not None:
                headers["x-delay"] = delay
            mid = "%s/%s" % (kind, case)
            t = int(time.time() * 1000)
            ch.basic_publish(x, key, mid.encode(), pika.BasicProperties(message_id=mid, headers=headers))
            lines.append("SENT %s %d %s" % (mid, t, expect))
    print("\n".join(lines))
    conn.close()
    raise SystemExit(0)

now = int(time.time() * 1000)
due_s = now // 1000 + 3
iso = datetime.datetime.fromtimestamp((now + 2500) / 1000, datetime.timezone.utc)
cases = [
    ("int", {"x-delay": 1500}, "delay:1500"),
    ("decimal", {"x-delay": decimal.Decimal("1500.7")}, "delay:1500"),
    ("string", {"x-delay": "1500"}, "delay:1500"),
    ("long", {"x-delay": 5000000000}, "dlx:x-delay above max_delay_ms"),
    ("until-datetime", {"x-delay-until": datetime.datetime.fromtimestamp(due_s, datetime.timezone.utc)},
     "due:%d" % (due_s * 1000)),
    ("until-iso", {"x-delay-until": iso.isoformat(timespec="milliseconds")}, "due:%d" % (now + 2500)),
    ("until-ms", {"x-delay-until": now + 2000}, "due:%d" % (now + 2000)),
    ("bad", {"x-delay": "soon"}, "dlx:invalid x-delay"),
]
lines = []
for mid, headers, expect in cases:
    headers["x-client"] = "pika"
    t = int(time.time() * 1000)
    ch.basic_publish(ex, rk, mid.encode(), pika.BasicProperties(message_id=mid, headers=headers),
                     mandatory=True)
    lines.append("SENT %s %d %s" % (mid, t, expect))
print("\n".join(lines))
conn.close()
