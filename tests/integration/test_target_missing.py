#!/usr/bin/python3
"""The target exchange is deleted while messages are held: they fall due
while it is missing, the bridge retries with backoff, and once the exchange
is declared and bound again (a few seconds later) every one arrives. A
second route whose target is healthy keeps delivering on time meanwhile,
and the bridge keeps running."""

import time

import harness as h
from harness import check

N_LOST = 20


def test(ctx):
    lost_ex, lq = ctx.target("lost", "direct", ["rk"])
    ok_ex, oq = ctx.target("healthy", "direct", ["rk"])
    c = ctx.consumer([lq["rk"], oq["rk"]])
    routes = [ctx.route("lost", lost_ex), ctx.route("healthy", ok_ex)]
    b = ctx.bridge(routes)
    lost_in, ok_in = routes[0]["ingress_exchange"], routes[1]["ingress_exchange"]
    p = ctx.publisher()

    ctx.delete_exchange(lost_ex)
    check(not ctx.exchange_exists(lost_ex), "could not delete the target exchange")
    h.log("deleted target exchange %s" % lost_ex)
    sent = {}
    for i in range(N_LOST):
        mid = "lost-%02d" % i
        sent[mid] = p.publish(lost_in, "rk", mid.encode(), headers={"x-delay": h.i32(1000)},
                              message_id=mid, delivery_mode=2)

    # For ~5 s the lost messages are due while their exchange is missing;
    # the healthy route gets a message every 0.5 s and must deliver each on time.
    healthy = {}
    t_end = time.monotonic() + 5.0
    i = 0
    while time.monotonic() < t_end:
        mid = "ok-%02d" % i
        healthy[mid] = p.publish(ok_in, "rk", mid.encode(), headers={"x-delay": h.i32(500)}, message_id=mid)
        i += 1
        time.sleep(0.5)
    b.check_alive()
    early_lost = [m for m in c.snapshot(lq["rk"])]
    check(not early_lost, "messages reached the deleted exchange's queue: %s" % h.summarize(early_lost))

    h.log("re-declaring %s and binding its queue again" % lost_ex)
    t_back = time.monotonic()
    ctx.declare_exchange(lost_ex, "direct")
    ctx.bind(lq["rk"], lost_ex, "rk")

    c.wait_ids(list(sent) + list(healthy), 30)
    msgs = c.quiet(1.0)
    lost_msgs = [m for m in msgs if m.queue == lq["rk"]]
    got_lost = {m.message_id for m in lost_msgs}
    check(got_lost == set(sent), "lost route: missing %s" % sorted(set(sent) - got_lost))
    last = max(m.t for m in lost_msgs) - t_back
    h.log("all %d messages of the route whose exchange was missing arrived, the last %.2fs after it was "
          "declared again (%d deliveries)" % (N_LOST, last, len(lost_msgs)))
    for m in msgs:
        if m.queue == oq["rk"]:
            h.check_on_time(m, healthy[m.message_id], 0.5,
                            "healthy route's %s (while the other route's exchange was missing)" % m.message_id)
    h.log("healthy route: %d messages, each on time" % len(healthy))
    b.check_alive()
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
