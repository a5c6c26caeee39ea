#!/usr/bin/python3
"""One route for every delayed exchange (routes[].delayed_exchanges, issue 40).

The x-delayed-message shim (deploy/plugin) is another piece of work. No
broker construct tells an application's publish from the bridge's republish
of it (a headers exchange ignores binding keys that begin with "x-", and
every header the bridge sets does), so the stand-in here switches bindings
in two phases: while the application publishes ("intake"), each
application exchange X (direct) is bound to the route's ingress queue for
its routing keys, so a publish reaches the bridge's queue only, with
exchange X in its delivery; before anything falls due ("deliver"), X is
bound to the application's queues instead, so the bridge's republish to X
goes, by routing key, to them only -- what the shim does, bindings and all.

- three exchanges, one route, no per-exchange configuration: every message
  arrives at its exchange's queue for its routing key, on time, never
  early, with its routing key, body and headers;
- an exchange declared while the bridge runs needs no bridge change;
- /pending lists each message's exchange and filters by it
  (exchange=X); /metrics counts publishes per (route, exchange);
- cancel by key: DELETE /pending/R/KEY, and an x-delay-cancel message
  published straight into the queue (a cancel relays nothing: taken);
- POST /purge?route=R&exchange=X removes X's messages only;
- a message published straight into the queue through the default
  exchange is not relayed: rejected, refused_total{reason}, logged; nor is
  a bridge's republish that an exchange routes back into the queue
  ("looped": an exchange bound to the queue for good);
- an exchange deleted while a message for it is held: that message goes
  the unroutable way (to unroutable_exchange, x-original-exchange naming
  it), the others keep flowing;
- kill -9 with messages held for every exchange, restart: none lost;
- drain: every held message goes back to its own exchange with what
  remains of its delay, without x-delay-bridge-id (so the shim holds it
  again: here, the alternate exchange puts it back in the queue), and a
  restarted bridge delivers it on time.

Named cases (harness.Cases: each runs and is reported even when one before
it failed): several_exchanges_browse, several_exchanges_delivered,
not_relayed, cancel_and_purge, exchange_deleted, kill9_none_lost,
drain_hands_back, drain_delivered, clean_stop.
"""

import time
import types

import harness as h
from harness import check

ROUTE = "dx"


class StandIn(object):
    """The shim's part for a test: the bridge's queue, and per application
    exchange its keys and queues, bound in one phase or the other."""

    def __init__(self, ctx):
        self.ctx = ctx
        # declared as the shim declares delay-bridge.delayed (and as the bridge does)
        self.queue = ctx.n("delayed")
        ctx.admin().queue_declare(self.queue, durable=True,
                                  arguments={"x-queue-type": "classic"})
        ctx.queues.add(self.queue)
        self.xs = {}  # exchange -> {routing key: application queue}
        self.phase = "intake"

    def exchange(self, name, keys):
        """Application exchange NAME: (exchange, {routing key: queue})."""
        x = self.ctx.declare_exchange(self.ctx.n(name), "direct")
        queues = {rk: self.ctx.declare_queue(self.ctx.n("%s.q%d" % (name, i)))
                  for i, rk in enumerate(keys)}
        self.xs[x] = queues
        self._bind(x, self.phase, True)
        return x, queues

    def _bind(self, x, phase, on):
        ch = self.ctx.admin()
        for rk, q in self.xs[x].items():
            target = self.queue if phase == "intake" else q
            if on:
                ch.queue_bind(target, x, routing_key=rk)
            else:
                ch.queue_unbind(target, x, routing_key=rk)

    def switch(self, phase):
        """Every exchange to phase: "intake" (to the bridge) or "deliver" (to the application)."""
        if phase == self.phase:
            return
        for x in self.xs:
            self._bind(x, phase, True)    # bound both ways for a moment: never unroutable
            self._bind(x, self.phase, False)
        self.phase = phase


def pending(port, **args):
    path = "/pending?route=%s&limit=1000" % ROUTE
    for k, v in args.items():
        path += "&%s=%s" % (k, h.url_arg(v))
    st, j = h.http_req(port, "GET", path)
    check(st == 200, "GET %s: %d %r" % (path, st, j))
    return j


def exchange_published(port, x):
    return h.metric_value(h.metrics(port), "delay_bridge_exchange_published_total",
                          'route="%s",exchange="%s"' % (ROUTE, x)) or 0


def test(ctx):
    si = StandIn(ctx)
    xa, qa = si.exchange("orders", ["created", "paid"])
    xb, qb = si.exchange("mail", ["send"])
    ux, uq = ctx.target("lost", "fanout", [""])
    port = h.free_port()
    route = {"name": ROUTE, "delayed_exchanges": True, "ingress_queue": si.queue,
             "unroutable_exchange": ux}
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port})
    c = ctx.consumer([qa["created"], qa["paid"], qb["send"], uq[""]])
    p = ctx.publisher()
    sent = {}

    def pub(x, rk, mid, delay_ms, **hd):
        headers = {"x-delay": h.i32(delay_ms), "x-app": h.lstr(mid)}
        headers.update(hd)
        sent[mid] = (p.publish(x, rk, mid.encode(), headers=headers, message_id=mid,
                               delivery_mode=2), delay_ms / 1000.0, x, rk)

    def held_ids():
        return sorted(m["message_id"] for m in pending(port)["messages"])

    def wait_held(n):
        h.wait_progress(lambda: len(pending(port)["messages"]), n, 30,
                        lambda k: "the bridge holds %d of %d" % (k, n))

    # What a case leaves for the later ones (each runs whatever happened before it).
    st_ = types.SimpleNamespace(c2=None, xc=None, qc=None, xg=None, n0=0)

    # -- several exchanges, one route; and one declared while the bridge runs
    def case_several_exchanges_browse():
        pub(xa, "created", "a1", 5000)
        pub(xa, "paid", "a2", 6000)
        pub(xb, "send", "b1", 5500)
        st_.xc, st_.qc = xc, qc = si.exchange("later", ["rk"])
        st_.c2 = ctx.consumer([qc["rk"]])
        pub(xc, "rk", "c1", 5000)
        wait_held(4)
        si.switch("deliver")
        # browse while they wait: each message's exchange, and the filter
        listed = {m["message_id"]: m for m in pending(port)["messages"]}
        for mid in ("a1", "a2", "b1", "c1"):
            check(listed[mid]["exchange"] == sent[mid][2] and listed[mid]["routing_key"] == sent[mid][3],
                  "/pending shows %s as exchange %r key %r" % (mid, listed[mid].get("exchange"),
                                                               listed[mid].get("routing_key")))
        only_a = sorted(m["message_id"] for m in pending(port, exchange=xa)["messages"])
        check(only_a == ["a1", "a2"], "/pending?exchange=%s lists %s" % (xa, only_a))

    def case_several_exchanges_delivered():
        c.wait_ids({"a1", "a2", "b1"}, 30)
        st_.c2.wait_ids({"c1"}, 30)
        where = {"a1": qa["created"], "a2": qa["paid"], "b1": qb["send"], "c1": st_.qc["rk"]}
        for m in c.snapshot() + st_.c2.snapshot():
            mid = m.message_id
            t0, delay, x, rk = sent[mid]
            check(m.queue == where[mid], "%s arrived on %s" % (mid, m.queue))
            check(m.exchange == x and m.routing_key == rk,
                  "%s delivered from exchange %r key %r, expected %r %r" % (mid, m.exchange,
                                                                          m.routing_key, x, rk))
            check(m.body == mid.encode() and h.header_str(m.props, "x-app") == mid,
                  "%s: body or header changed" % mid)
            check(m.bridge_id, "%s: no x-delay-bridge-id" % mid)
            h.check_on_time(m, t0, delay, mid)
        check(c.count() == 3 and st_.c2.count() == 1, "a message arrived twice: %s" % h.summarize(
            c.snapshot() + st_.c2.snapshot()))
        for x, n in ((xa, 2), (xb, 1), (st_.xc, 1)):
            h.wait_progress(lambda: exchange_published(port, x), n, 15,
                            lambda k: "exchange_published_total{%s} is %d, expected %d" % (x, k, n))

    # -- not relayed: straight into the queue through the default exchange; and a
    #    republish that an exchange routes back into the queue (bound there for good)
    def case_not_relayed():
        refused0 = h.route_metric(port, "delay_bridge_refused_total", ROUTE)
        pub("", si.queue, "raw", 500)
        xl = ctx.declare_exchange(ctx.n("loops"), "direct")
        ctx.bind(si.queue, xl, "rk")
        pub(xl, "rk", "loop", 500)
        h.wait_metric(port, "delay_bridge_refused_total", ROUTE, refused0 + 2, timeout=30)
        text = b.log_text()
        check("reason=default_exchange" in text and "reason=looped" in text,
              "no log line for the refused deliveries:\n%s" % text[-2000:])
        time.sleep(1.5)
        check(h.route_metric(port, "delay_bridge_refused_total", ROUTE) == refused0 + 2,
              "refused_total keeps growing: a message goes round")
        check(ctx.queue_depth(si.queue) == 0, "refused deliveries stay in the queue")
        check(exchange_published(port, "") == 0, "something was published to the default exchange")
        check(exchange_published(port, xl) == 1, "the looping message was published %r times" %
              exchange_published(port, xl))

    # -- cancel by key (HTTP, and an x-delay-cancel published straight into the queue),
    #    purge by exchange, an exchange deleted while its message is held
    def case_cancel_and_purge():
        si.switch("intake")
        pub(xa, "created", "k1", 6000, **{"x-delay-key": h.lstr("k1")})
        pub(xa, "created", "k2", 6000, **{"x-delay-key": h.lstr("k2")})
        pub(xb, "send", "purged1", 6000)
        pub(xb, "send", "purged2", 6000)
        pub(xa, "paid", "kept", 6000)
        st_.xg, _ = si.exchange("gone", ["rk"])
        xg = st_.xg
        pub(xg, "rk", "orphan", 5000)
        wait_held(6)
        si.switch("deliver")
        st, j = h.http_req(port, "DELETE", "/pending/%s/k1" % ROUTE)
        check(st in (200, 202) and j.get("cancelled") is True, "DELETE /pending k1: %d %r" % (st, j))
        p.publish("", si.queue, b"", headers={"x-delay-cancel": h.lstr("k2")})
        st, j = h.http_req(port, "POST", "/purge?route=%s&exchange=%s" % (ROUTE, h.url_arg(xb)))
        check(st == 200 and j.get("removed") == 2, "POST /purge exchange=%s: %d %r" % (xb, st, j))
        h.wait_progress(lambda: 4 - len(held_ids()), 2, 15,
                        lambda k: "the cancel message was not taken: %s" % held_ids())
        check(held_ids() == ["kept", "orphan"], "after cancels and purge the bridge holds %s" %
              held_ids())

    # an exchange deleted while its message is held: to unroutable_exchange
    def case_exchange_deleted():
        xg = st_.xg
        del si.xs[xg]
        ctx.delete_exchange(xg)
        c.wait_ids({"kept", "orphan"}, 30)
        h.wait_metric(port, "delay_bridge_pending_messages", ROUTE, 0, timeout=30)
        lost = [m for m in c.snapshot(uq[""]) if m.message_id == "orphan"]
        check(len(lost) == 1 and h.header_str(lost[0].props, "x-original-exchange") == xg,
              "the message of the deleted exchange did not reach unroutable_exchange with "
              "x-original-exchange: %s" % h.summarize(c.snapshot(uq[""])))
        got = sorted(m.message_id for m in c.quiet(1.0))
        for mid in ("k1", "k2", "purged1", "purged2"):
            check(mid not in got, "%s arrived though cancelled or purged" % mid)

    # -- kill -9 with messages held for every exchange: none lost
    def case_kill9_none_lost():
        si.switch("intake")
        n0 = len(c.snapshot())
        received0 = h.stats(port)["routes"][0]["received"]
        want = set()
        for i in range(60):
            x, rk = [(xa, "created"), (xa, "paid"), (xb, "send")][i % 3]
            mid = "crash%d" % i
            pub(x, rk, mid, 6000 + 50 * i)
            want.add(mid)
        ctx.wait_taken(port, si.queue, received0 + 60, 30)
        b.kill9()
        si.switch("deliver")
        b.start()
        c.wait_ids(want, 60)
        got = [m.message_id for m in c.snapshot()[n0:]]
        check(set(got) >= want, "lost after kill -9: %s" % sorted(want - set(got)))
        for m in c.snapshot()[n0:]:
            check(m.exchange == sent[m.message_id][2], "%s came from %r" % (m.message_id, m.exchange))
            check(m.t - sent[m.message_id][0] >= sent[m.message_id][1] - h.early_tolerance(),
                  "%s arrived early after the restart" % m.message_id)

    # -- drain: back to its own exchange with what remains, held again, delivered on time
    def case_drain_hands_back():
        si.switch("intake")
        st_.n0 = n0 = len(c.snapshot())
        pub(xa, "created", "d1", 20000)
        pub(xb, "send", "d2", 22000)
        wait_held(2)
        st, j = h.http_req(port, "POST", "/drain")
        check(st == 202, "POST /drain: %d %r" % (st, j))
        check(b.wait_exit(60, "the bridge did not exit after its drain") == 0, "drain exit code")
        depth = ctx.queue_depth(si.queue)
        check(depth == 2, "after the drain the queue holds %d, expected 2" % depth)
        # look at what went back, and put it back (requeue)
        conn = h.connect()
        chk = conn.channel()
        back = {}
        for _ in range(2):
            meth, props, body = chk.basic_get(si.queue, auto_ack=False)
            check(meth is not None, "the queue emptied under the test")
            back[props.message_id] = (meth, props)
        for mid, (meth, props) in back.items():
            check(meth.exchange == sent[mid][2] and meth.routing_key == sent[mid][3],
                  "%s handed back to %r key %r" % (mid, meth.exchange, meth.routing_key))
            check(h.header(props, "x-delay-bridge-id") is None,
                  "%s handed back with x-delay-bridge-id: the shim would deliver it now" % mid)
            xd = h.header_int(props, "x-delay")
            check(xd is not None and 5000 < xd <= sent[mid][1] * 1000,
                  "%s handed back with x-delay %r" % (mid, xd))
        chk.basic_nack(delivery_tag=0, multiple=True, requeue=True)
        conn.close()
        check(c.count() == n0, "a drained message was delivered early")

    # the drained messages held again by the restarted bridge, delivered on time
    def case_drain_delivered():
        si.switch("deliver")
        b.start()
        c.wait_ids({"d1", "d2"}, 60)
        for m in c.snapshot()[st_.n0:]:
            # late by the time it spent in the queue while no bridge ran (the test's checks)
            h.check_on_time(m, sent[m.message_id][0], sent[m.message_id][1], m.message_id, late=20)
            check(h.header(m.props, "x-delay-bridge-drained") is None,
                  "%s carries the hand-back's own header" % m.message_id)

    cases = h.Cases()
    cases.run("several_exchanges_browse", case_several_exchanges_browse)
    cases.run("several_exchanges_delivered", case_several_exchanges_delivered,
              needs="several_exchanges_browse")
    cases.run("not_relayed", case_not_relayed)
    cases.run("cancel_and_purge", case_cancel_and_purge)
    cases.run("exchange_deleted", case_exchange_deleted, needs="cancel_and_purge")
    cases.run("kill9_none_lost", case_kill9_none_lost)
    cases.run("drain_hands_back", case_drain_hands_back)
    cases.run("drain_delivered", case_drain_delivered, needs="drain_hands_back")
    cases.run("clean_stop", b.stop)
    cases.done()

if __name__ == "__main__":
    h.run(test, budget_s=240)
