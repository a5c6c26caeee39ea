#!/usr/bin/python3
"""A delayed_exchanges route whose broker user may not write one exchange.

One route serves every delayed exchange of a vhost on one confirm channel.
A publish the broker refuses (403: the bridge's user has no write
permission on that exchange; a deleted one, 404, is in
integration.delayed_exchanges) closes that channel. Before publisher_gone.c
the same message was due again at once and closed it again, for ever, and
every other exchange's messages waited behind it. Now:

- the refused message goes the unroutable way: to unroutable_exchange with
  x-original-exchange naming the exchange it could not reach;
- a message for another exchange, due after it, arrives on time;
- a second message for the refused exchange, a moment later, goes the same
  way without closing the channel again (publish_retries_total stays 1:
  the name is remembered), and the log says so once.

Needs a broker this suite started (rabbitmqctl add_user); the bridge logs in
as a user of its own, whose write permission leaves out "forbidden".
"""

import time


import harness as h
from harness import check
from test_delayed_exchanges import ROUTE, StandIn, pending


def test(ctx):
    with h.BrokerUser(ctx.n("bridge").replace(".", "-"), "dx-acl-pw", write="^(?!.*forbidden).*$",
                      why="a broker user with limited write permission") as uri:
        run(ctx, uri)


def run(ctx, uri):
    si = StandIn(ctx)
    xa, qa = si.exchange("orders", ["rk"])
    xf, qf = si.exchange("forbidden", ["rk"])
    ux, uq = ctx.target("lost", "fanout", [""])
    port = h.free_port()
    route = {"name": ROUTE, "delayed_exchanges": True, "ingress_queue": si.queue,
             "unroutable_exchange": ux}
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port}, broker={"uri": uri})
    c = ctx.consumer([qa["rk"], qf["rk"], uq[""]])
    p = ctx.publisher()
    sent = {}

    def pub(x, mid, delay_ms):
        sent[mid] = (p.publish(x, "rk", mid.encode(), headers={"x-delay": h.i32(delay_ms)},
                               message_id=mid, delivery_mode=2), delay_ms / 1000.0)

    pub(xf, "f1", 5000)
    pub(xa, "a1", 6000)
    pub(xf, "f2", 6500)
    h.wait_progress(lambda: len(pending(port)["messages"]), 3, 30,
                    lambda k: "the bridge holds %d of 3" % k)
    si.switch("deliver")
    c.wait_ids({"f1", "a1", "f2"}, 40)
    by = {m.message_id: m for m in c.snapshot()}
    for mid in ("f1", "f2"):
        m = by[mid]
        check(m.queue == uq[""] and h.header_str(m.props, "x-original-exchange") == xf,
              "%s: on %s with x-original-exchange %r" % (mid, m.queue,
                                                         h.header(m.props, "x-original-exchange")))
    check(by["a1"].queue == qa["rk"], "a1 arrived on %s" % by["a1"].queue)
    h.check_on_time(by["a1"], sent["a1"][0], sent["a1"][1], "a1 (behind a refused message)")
    check(c.count(qf["rk"]) == 0, "a message reached the exchange the bridge may not write")
    h.wait_metric(port, "delay_bridge_pending_messages", ROUTE, 0, timeout=15)
    time.sleep(1.0)
    retries = h.route_metric(port, "delay_bridge_publish_retries_total", ROUTE)
    check(retries == 1, "the route's channel was reopened %r times, expected once" % retries)
    text = b.log_text()
    check(text.count("exchange is gone or refused") == 1,
          "expected one 'gone or refused' log line:\n%s" % text[-2000:])
    check(c.count() == 3, "a message arrived twice: %s" % h.summarize(c.snapshot()))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=120)
