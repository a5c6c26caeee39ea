"""publish_pika.py -- pika as its documentation shows: BlockingConnection,
confirm_delivery(), basic_publish with BasicProperties(headers=...). pika
writes an int as 'I' ('l' beyond 32 bits), a Decimal as 'D', a datetime as
a timestamp in seconds (it has no float). Protocol: see run_client.py."""
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
