#!/usr/bin/python3
"""Unroutable messages: every republish is mandatory.

- with routes[].unroutable_exchange: a due message no queue receives at the
  target arrives at the unroutable exchange (declared here, with a bound
  queue) with its body, routing key, message id and x-delay-bridge-id, and
  the headers x-delay-unroutable, x-original-exchange (the target) and
  x-original-routing-key; also for a message published at once and for one
  dead-lettered by the invalid_delay policy to a dead-letter exchange with
  no queue (x-original-exchange is then the dead-letter exchange, and
  x-delay-error is kept); counted in delay_bridge_returned_total;
- without it: counted in delay_bridge_returned_total, logged ("unroutable
  message dropped"), marked done (nothing held, not published again after a
  kill -9 and restart);
- an unroutable exchange that routes nowhere either: dropped once, not
  bounced forever ("returned by the unroutable exchange too");
- routable messages on the same routes are unaffected (no extra headers).
"""

import time

import harness as h
from harness import check


free_port = h.free_port  # one copy, in harness.py


def test(ctx):
    ex, tq = ctx.target("target", "direct", ["rk"])          # only "rk" is bound
    ux, uq = ctx.target("unroutable", "fanout", [""])        # catches every routing key
    ux2, _ = ctx.target("unroutable2", "direct", [])         # routes nowhere
    dlx, _ = ctx.target("dlx", "direct", [])                 # a dead-letter exchange with no queue
    c = ctx.consumer([tq["rk"], uq[""]])
    keep = ctx.route("keep", ex, unroutable_exchange=ux, invalid_delay="dead-letter",
                     dead_letter_exchange=dlx)
    drop = ctx.route("drop", ex)
    both = ctx.route("both", ex, unroutable_exchange=ux2)
    port = free_port()
    b = ctx.bridge([keep, drop, both], http={"listen": "127.0.0.1:%d" % port})
    p = ctx.publisher()

    sent = {}

    def pub(route, mid, rk, delay, extra=None):
        hd = {"x-delay": delay if isinstance(delay, h.Field) else h.i32(delay), "x-app": h.lstr(mid)}
        hd.update(extra or {})
        sent[mid] = p.publish(route["ingress_exchange"], rk, mid.encode(), headers=hd,
                              message_id=mid, delivery_mode=2)

    pub(keep, "keep-lost", "nobody.here", 1500)
    pub(keep, "keep-now", "nobody.now", 0)
    pub(keep, "keep-dl", "nobody.dl", h.lstr("abc"))     # invalid x-delay -> dlx -> returned
    pub(keep, "keep-ok", "rk", 1500)
    pub(drop, "drop-lost", "nobody.here", 1000)
    pub(drop, "drop-ok", "rk", 1000)
    pub(both, "both-lost", "nobody.here", 500)
    pub(both, "both-ok", "rk", 500)

    want = {"keep-lost", "keep-now", "keep-dl", "keep-ok", "drop-ok", "both-ok"}
    c.wait_ids(want, 15)
    h.wait_metric(port, "delay_bridge_returned_total", "keep", 3, timeout=15)
    h.wait_metric(port, "delay_bridge_returned_total", "drop", 1, timeout=15)
    for r in ("keep", "drop", "both"):
        h.wait_metric(port, "delay_bridge_pending_messages", r, 0, timeout=15)
    msgs = c.quiet(2.0)
    got = sorted(m.message_id for m in msgs)
    check(got == sorted(want), "arrived %s, expected %s (each once)" % (got, sorted(want)))
    by = {m.message_id: m for m in msgs}

    for mid, rk, orig, delay in (("keep-lost", "nobody.here", ex, 1.5), ("keep-now", "nobody.now", ex, 0),
                                 ("keep-dl", "nobody.dl", dlx, 0)):
        m = by[mid]
        check(m.queue == uq[""], "%s arrived on %s, not the unroutable exchange's queue" % (mid, m.queue))
        check(m.exchange == ux, "%s came from exchange %r, expected %r" % (mid, m.exchange, ux))
        check(m.routing_key == rk, "%s: routing key %r, expected %r" % (mid, m.routing_key, rk))
        check(m.body == mid.encode() and m.message_id == mid, "%s: body or message id changed" % mid)
        check(h.header_str(m.props, "x-original-exchange") == orig,
              "%s: x-original-exchange %r, expected %r" % (mid, h.header(m.props, "x-original-exchange"), orig))
        check(h.header_str(m.props, "x-original-routing-key") == rk,
              "%s: x-original-routing-key %r" % (mid, h.header(m.props, "x-original-routing-key")))
        check(h.header(m.props, "x-delay-unroutable") is not None, "%s: no x-delay-unroutable" % mid)
        check(h.header_str(m.props, "x-app") == mid, "%s: its own header x-app was lost" % mid)
        check(m.bridge_id, "%s: no x-delay-bridge-id" % mid)
        if delay:
            h.check_on_time(m, sent[mid], delay, mid)
        else:
            h.check_immediate(m, sent[mid], mid, bound=2.0)
    check(h.header_str(by["keep-dl"].props, "x-delay-error") is not None,
          "keep-dl: x-delay-error lost on the way to the unroutable exchange")
    for mid, delay in (("keep-ok", 1.5), ("drop-ok", 1.0), ("both-ok", 0.5)):
        m = by[mid]
        check(m.queue == tq["rk"], "%s arrived on %s" % (mid, m.queue))
        for hd in ("x-delay-unroutable", "x-original-exchange", "x-original-routing-key"):
            check(h.header(m.props, hd) is None, "routable %s carries %s" % (mid, hd))
        h.check_on_time(m, sent[mid], delay, mid)

    text = b.log_text()
    check("unroutable message dropped" in text and "route=drop" in text,
          "no 'unroutable message dropped' log line for route drop:\n%s" % text[-1500:])
    # the unroutable exchange that routes nowhere: dropped, not bounced forever
    returned_both = h.route_metric(port, "delay_bridge_returned_total", "both")
    check(returned_both >= 1, "returned_total{both} = %r" % returned_both)
    check("returned by the unroutable exchange too" in text,
          "no log line for the message the unroutable exchange returned too")
    time.sleep(1.0)
    check(h.route_metric(port, "delay_bridge_returned_total", "both") == returned_both,
          "returned_total{both} keeps growing: a message bounces between the exchanges")
    for r in ("keep", "drop", "both"):
        check(h.route_metric(port, "delay_bridge_confirmed_total", r) >= 2,
              "confirmed_total{%s} < 2" % r)

    # done means done: nothing comes back after a kill -9 and restart
    n = len(c.snapshot())
    b.kill9()
    b.start()
    time.sleep(2.0)
    for r in ("keep", "drop", "both"):
        check(h.route_metric(port, "delay_bridge_pending_messages", r) == 0,
              "after kill -9 + restart route %s holds messages again" % r)
    check(len(c.snapshot()) == n, "messages published again after kill -9 + restart: %s" % (
        [m.message_id for m in c.snapshot()[n:]]))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=120)
