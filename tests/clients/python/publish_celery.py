"""publish_celery.py -- the README's Celery recipe: a task sent with
apply_async() to the route's ingress exchange instead of Celery's own
countdown/eta (which the worker holds in memory), headers x-delay /
x-delay-until passed as apply_async(headers=...): Celery's message protocol
2 carries them as AMQP headers (py-amqp underneath, as for kombu). The
route's target is where the task queue is bound. Protocol: see
run_client.py."""
import datetime
import os
import time

import celery
from celery import Celery

print("VERSION celery %s" % celery.__version__)
app = Celery("dbtest", broker=os.environ["DB_URI"])
app.conf.broker_transport_options = {"confirm_publish": True}


@app.task(name="dbtest.remind")
def remind(user):
    return "remind %s" % user


ex, rk = os.environ["DB_EXCHANGE"], os.environ["DB_RK"]
now = int(time.time() * 1000)
due_s = now // 1000 + 3
cases = [
    ("int", {"x-delay": 1500}, "delay:1500"),
    ("float", {"x-delay": 1500.7}, "delay:1500"),
    ("until-datetime", {"x-delay-until": datetime.datetime.fromtimestamp(due_s, datetime.timezone.utc)},
     "due:%d" % (due_s * 1000)),
    ("until-ms", {"x-delay-until": now + 2000}, "due:%d" % (now + 2000)),
    ("bad", {"x-delay": "soon"}, "dlx:invalid x-delay"),
]
lines = []
for mid, headers, expect in cases:
    headers["x-client"] = "celery"
    t = int(time.time() * 1000)
    # declare=[]: the ingress exchange is the bridge's; Celery would declare its default queue
    remind.apply_async(("ann",), exchange=ex, routing_key=rk, headers=headers, task_id=mid,
                       message_id=mid, declare=[], retry=False)
    lines.append("SENT %s %d %s" % (mid, t, expect))
print("\n".join(lines))
