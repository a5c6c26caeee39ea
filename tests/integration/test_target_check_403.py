#!/usr/bin/python3
"""A broker that refuses to check the target exchange (403 to a passive
exchange.declare) does not stop a route.

RabbitMQ 4.2.6 and 4.3.0 require configure permission for a passive
exchange.declare (relaxed again in 4.2.7 and 4.3.1); the least-privilege
user of deploy/rabbitmq/ has none on the target, so the route's check got
ACCESS_REFUSED and its channel never opened. RabbitMQ 3.10 (the test
broker) checks nothing there, so the answer is simulated: delay-bridge-fp
armed with publish.passive_403 declares an exchange that does not exist
and reads its 404 as that 403.

Checked: the route logs once that the broker refuses the check, opens its
channel again without the checks ("route channel open"), and every
delayed message arrives on time; none early.
"""


import harness as h
from harness import check

N = 50


def test(ctx):
    h.use_failpoint_bridge()
    ex, qs = ctx.target("t403", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("t403", ex)
    b = ctx.bridge([route], start=False)
    b.start(env={"DELAY_BRIDGE_FAILPOINT": "publish.passive_403"})
    b.wait_log("refuses to check an exchange", 20, "the 403 warning")
    b.wait_log('msg="route channel open"', 20, "the route channel opening without checks")
    p = ctx.publisher()
    sent = {}
    for i in range(N):
        mid = "t%03d" % i
        ms = 1000 + 20 * i
        sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"x", headers={"x-delay": h.i32(ms)},
                               message_id=mid, delivery_mode=2), ms)
    c.wait_ids(sent.keys(), 30)
    t = h.tally(sent, c.quiet(0.5))
    h.log("RESULT target_check_403: %s" % h.tally_line(t))
    check(not t["lost"] and t["duplicates"] == 0, "lost %s, duplicates %d" % (t["lost"], t["duplicates"]))
    h.check_none_early(sent, t, "target_check_403")
    check(b.log_text().count("refuses to check an exchange") == 1, "the warning was not logged once")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
