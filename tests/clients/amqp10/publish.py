"""publish.py -- an AMQP 1.0 publisher (python3-qpid-proton) as RabbitMQ 4.x
documents it: address v2 /exchanges/<exchange>/<routing key>, a bytes body
with inferred=True (a data section, what a 0-9-1 consumer reads as the
body), the delay in message annotations, application properties for the
headers a 0-9-1 consumer sees. proton's BlockingConnection sends each
message and returns once the broker settled it as accepted (the AMQP 1.0
confirm); it raises on rejected or released.

RabbitMQ 4.x hands every x- message annotation to an AMQP 0-9-1 consumer
(the bridge) as a header of the same name: a long as 'l', a timestamp as
'T' cut to seconds. Protocol: see run_client.py."""
import os
import time
import urllib.parse

import proton
from proton import Message, symbol, timestamp
from proton.utils import BlockingConnection

print("VERSION qpid-proton %s" % ".".join(str(x) for x in proton.VERSION))
u = urllib.parse.urlsplit(os.environ["DB_URI"])
url = "amqp://%s:%d" % (u.hostname, u.port or 5672)
conn = BlockingConnection(url, timeout=30, user=urllib.parse.unquote(u.username or "guest"),
                          password=urllib.parse.unquote(u.password or "guest"),
                          allowed_mechs="PLAIN", allow_insecure_mechs=True)
ex, rk = os.environ["DB_EXCHANGE"], os.environ["DB_RK"]
sender = conn.create_sender("/exchanges/%s/%s" % (urllib.parse.quote(ex, safe=""),
                                                   urllib.parse.quote(rk, safe="")))
now = int(time.time() * 1000)
due_s = now // 1000 + 3
cases = [
    ("delivery-delay", {"x-opt-delivery-delay": 1500}, "delay:1500"),
    ("delivery-delay-0", {"x-opt-delivery-delay": 0}, "now"),
    ("delivery-time-ms", {"x-opt-delivery-time": now + 2500}, "due:%d" % (now + 2500)),
    # an AMQP 1.0 timestamp (ms): RabbitMQ hands it over cut to seconds, the
    # bridge reads the last ms of that second (README, never early)
    ("delivery-time-ts", {"x-opt-delivery-time": timestamp(now + 2000)},
     "due:%d" % ((now + 2000) // 1000 * 1000 + 999)),
    ("delivery-time-past", {"x-opt-delivery-time": now - 60000}, "now"),
    ("both", {"x-opt-delivery-time": now + 1000, "x-opt-delivery-delay": 3000},
     "due:%d" % (now + 1000)),
    ("delivery-delay-big", {"x-opt-delivery-delay": 5000000000},
     "dlx:x-opt-delivery-delay above max_delay_ms"),
    ("delivery-delay-text", {"x-opt-delivery-delay": "soon"}, "dlx:invalid x-opt-delivery-delay"),
]
lines = []
for mid, ann, expect in cases:
    msg = Message(body=mid.encode(), inferred=True, id=mid,
                  annotations={symbol(k): v for k, v in ann.items()},
                  properties={"x-client": "amqp10"}, durable=True)
    t = int(time.time() * 1000)
    sender.send(msg, timeout=30)  # returns once the broker accepted it
    lines.append("SENT %s %d %s" % (mid, t, expect))
print("\n".join(lines))
conn.close()
