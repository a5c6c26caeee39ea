#!/usr/bin/python3
"""Routes in several vhosts (issue 31; README "Several vhosts"): names are
per vhost, and so is everything a route does.

Two vhosts are made for the test (rabbitmqctl add_vhost, the broker user
given every permission on them), and in the URI's vhost, the first new
one (v1) and later the second (v2), the same names are declared: ingress
exchange and queue, target exchange, and a target queue bound to it.

 - started with route "main" (the URI's vhost) and "other" (vhost v1),
   identical ingress_exchange, ingress_queue and target_exchange: a
   message published to one vhost's ingress reaches that vhost's target
   queue only, on time; /stats names each route's vhost;
 - keys are per route: the same x-delay-key replaces only within its own
   vhost's route, and DELETE /pending/other/KEY cancels in v1 only;
 - route "late" added at run time (SIGHUP) in v2, a vhost the bridge had
   no connection to, with the same names again, and "other2" in v1 (its
   connections already open) with ingress names of its own: each consumes
   within a few seconds, and each message again reaches its own vhost's
   target queue only;
 - "late" removed while it holds messages (retired: its ingress no longer
   consumed, what it holds published when due), refused back in another
   vhost (waits for a restart: "add it under a new name"), then added back
   in its own vhost (its old index: consumes again);
 - kill -9 while messages of all three vhosts are held, restarted on the
   same WAL: each arrives in its own vhost, none lost, none early (a copy
   under the same x-delay-bridge-id allowed, as in integration.crash);
 - a route added in a vhost that does not exist: its connections stay
   down (/stats connections.vhosts, delay_bridge_vhost_connected 0), the
   bridge is not ready, the other vhosts deliver on time; removed, the
   bridge is ready again;
 - `delay-bridge drain` while each vhost's route holds messages: each is
   handed back to its own vhost's ingress queue (5, 5, 5), the bridge
   exits 0, and after a restart each arrives in its vhost on time.

Needs a broker the suite owns (DB_TEST_BROKER_DIR: rabbitmqctl); the
vhosts are deleted at the end, with what is in them.

Named cases (harness.Cases: each runs and is reported even when one before
it failed): two_vhosts_same_names, keys_per_vhost,
routes_added_at_run_time, late_removed_and_back, kill9_each_vhost_holding,
missing_vhost, drain_hands_back, drain_delivered, clean_stop. Each message
published so far must arrive in its vhost, so a message lost in one case
shows again in the later cases' arrivals.
"""

import signal
import subprocess
import time

import pika

import harness as h
from harness import check


def declare(uri, names):
    """The target exchange and its queue (bound with "rk") in uri's vhost."""
    conn = h.connect(retry_s=10, uri=uri)
    try:
        ch = conn.channel()
        ch.exchange_declare(names["target"], exchange_type="direct", durable=True)
        ch.queue_declare(names["queue"], durable=True)
        ch.queue_bind(names["queue"], names["target"], routing_key="rk")
    finally:
        conn.close()


def consumers(uri, queue):
    """The consumer count of queue in uri's vhost, 0 while it does not exist."""
    conn = h.connect(retry_s=10, uri=uri)
    try:
        return conn.channel().queue_declare(queue, passive=True).method.consumer_count
    except pika.exceptions.ChannelClosedByBroker:
        return 0
    finally:
        if conn.is_open:
            conn.close()


def route_stats(port, name):
    return next(r for r in h.stats(port)["routes"] if r["name"] == name)


def hup(b, port, what):
    """SIGHUP with the file rewritten; /stats reload once it counted it."""
    b.rewrite_config()
    before = h.stats(port)["reload"]["count"]
    b.proc.send_signal(signal.SIGHUP)
    h.wait_for("the reload after %s" % what,
               lambda: h.stats(port)["reload"]["count"] == before + 1, 10)
    return h.stats(port)["reload"]


def test(ctx):
    h.require_owned_broker("making vhosts with rabbitmqctl")
    user = h.broker_user()
    vhosts = [ctx.n("v1"), ctx.n("v2")]
    made = []
    try:
        for v in vhosts:
            h.rabbitmqctl("add_vhost", v)
            made.append(v)
            h.rabbitmqctl("set_permissions", "-p", v, user, ".*", ".*", ".*")
        run(ctx, vhosts)
    finally:
        for b in ctx.bridges:
            b.cleanup()
        for v in made:
            try:
                h.rabbitmqctl("delete_vhost", v)
            except h.TestFailure as e:
                h.log("could not delete vhost %s: %s" % (v, e))


def run(ctx, vhosts):
    v1, v2 = vhosts
    uri = {"/": h.broker_uri(), v1: h.vhost_uri(v1), v2: h.vhost_uri(v2)}
    same = {"target": ctx.n("t"), "queue": ctx.n("t.q"), "ingress": ctx.n("in"),
            "ingress_queue": ctx.n("in.q")}
    ctx.exchanges.update([same["target"], same["ingress"]])
    ctx.queues.update([same["queue"], same["ingress_queue"]])
    for v in ("/", v1):
        declare(uri[v], same)
    cons = {v: ctx.consumer([same["queue"]], uri=uri[v]) for v in ("/", v1)}
    port = h.free_port()

    def route(name, vhost=None, ingress=same["ingress"], ingress_queue=same["ingress_queue"]):
        r = {"name": name, "ingress_exchange": ingress, "ingress_queue": ingress_queue,
             "target_exchange": same["target"]}
        if vhost:
            r["vhost"] = vhost
        return r

    b = ctx.bridge([route("main"), route("other", v1)], http={"listen": str(port)})
    pubs = {v: ctx.publisher(uri=uri[v]) for v in ("/", v1)}
    sent = {}  # message_id -> (t_pub, delay ms, vhost)

    def publish(vhost, tag, n, delay_ms, ingress=same["ingress"]):
        for i in range(n):
            mid = "%s%03d" % (tag, i)
            t = pubs[vhost].publish(ingress, "rk", mid.encode(), message_id=mid,
                                    delivery_mode=2, headers={"x-delay": h.i32(delay_ms)})
            sent[mid] = (t, delay_ms, vhost)

    def check_arrivals(what):
        """Every message sent so far arrived, each once, in its vhost's queue only."""
        for v, c in cons.items():
            want = {mid for mid, (_, _, vh) in sent.items() if vh == v}
            c.wait_ids(want, 3 + h.late_tolerance() + 5)
        time.sleep(0.5)
        for v, c in cons.items():
            for m in c.snapshot():
                t_pub, ms, vh = sent.get(m.message_id, (None, None, None))
                check(vh == v, "%s: %s (published in vhost %r) arrived in vhost %r" % (
                    what, m.message_id, vh, v))
                h.check_on_time(m, t_pub, ms / 1000.0, "%s: %s" % (what, m.message_id))
        h.log("%s: %s" % (what, ", ".join("%s %d" % (v, c.count()) for v, c in cons.items())))

    def case_two_vhosts_same_names():
        publish("/", "d-", 10, 700)
        publish(v1, "v1-", 10, 500)
        check_arrivals("two vhosts, the same names")
        vh = {r["name"]: r.get("vhost") for r in h.stats(port)["routes"]}
        h.log("/stats vhosts: %r" % vh)
        check(vh.get("other") == v1 and vh.get("main") in ("/", ""), "/stats vhosts: %r" % vh)

    # keys are per route: the same x-delay-key in two vhosts replaces only within its own,
    # and a cancel by route (DELETE /pending/ROUTE/KEY) reaches that vhost's message only
    def case_keys_per_vhost():
        keyed = {}  # message_id -> (t_pub, delay ms, vhost)
        rx0 = {n: route_stats(port, n)["received"] for n in ("main", "other")}
        for v, tag in (("/", "dk"), (v1, "vk")):
            for mid, ms, key in ((tag + "0", 2500, "order-1"), (tag + "1", 600, "order-1"),
                                 (tag + "c", 2500, "order-2")):  # tag1 replaces tag0
                keyed[mid] = (pubs[v].publish(same["ingress"], "rk", mid.encode(), message_id=mid,
                                              delivery_mode=2, headers={"x-delay": h.i32(ms),
                                                                        "x-delay-key": key}),
                              ms, v)
        h.wait_for("the keyed messages taken", lambda: all(
            route_stats(port, n)["received"] == rx0[n] + 3 for n in ("main", "other")), 10)
        st, _ = h.http_get(port, "/pending/other/order-2", method="DELETE")
        check(st == 200, "DELETE /pending/other/order-2: %d" % st)
        for mid in ("dk1", "dkc", "vk1"):  # what must arrive; the others must not
            sent[mid] = keyed[mid]
        check_arrivals("the same key in two vhosts")
        time.sleep(0.5)
        got = {v: sorted(m.message_id for m in c.snapshot() if m.message_id in keyed)
               for v, c in cons.items()}
        h.log("keyed: %r" % got)
        check(got["/"] == ["dk1", "dkc"] and got[v1] == ["vk1"],
              "keys per vhost: / got %r (want dk1, dkc), %s got %r (want vk1)" % (got["/"], v1,
                                                                              got[v1]))

    # at run time: a route in a vhost the bridge has no connection to, and one in v1
    def case_routes_added_at_run_time():
        declare(uri[v2], same)
        cons[v2] = ctx.consumer([same["queue"]], uri=uri[v2])
        pubs[v2] = ctx.publisher(uri=uri[v2])
        other2 = route("other2", v1, ingress=ctx.n("in2"), ingress_queue=ctx.n("in2.q"))
        b.config["routes"] += [route("late", v2), other2]
        t_hup = time.monotonic()
        r = hup(b, port, "adding late and other2")
        check(r["error"] is None and r["pending_changes"] == 0, "reload: %r" % r)
        for name in ("late", "other2"):
            b.wait_log('msg="route added" route=%s' % name, 5)
        h.wait_for("late's ingress consumed in %s" % v2,
                   lambda: consumers(uri[v2], same["ingress_queue"]) >= 1, 10)
        h.wait_for("other2's ingress consumed in %s" % v1,
                   lambda: consumers(uri[v1], other2["ingress_queue"]) >= 1, 10)
        h.log("RESULT the routes added at run time consume %.2f s after the SIGHUP (one in a "
              "new vhost)" % (time.monotonic() - t_hup))
        check(consumers(uri["/"], same["ingress_queue"]) == 1 and
              consumers(uri[v1], same["ingress_queue"]) == 1,
              "a route added in another vhost changed the consumers of the same names")
        publish(v2, "v2-", 10, 500)
        publish(v1, "v1b-", 5, 500, ingress=other2["ingress_exchange"])
        publish("/", "d2-", 5, 500)
        check_arrivals("three vhosts, a route added in a new one")
        vh = {r["name"]: r.get("vhost") for r in h.stats(port)["routes"]}
        check(vh.get("late") == v2 and vh.get("other2") == v1, "/stats vhosts: %r" % vh)

    # "late" removed while it holds messages, refused back in another vhost, added back in v2
    def case_late_removed_and_back():
        late = b.config["routes"][2]
        publish(v2, "v2h-", 5, 2500)
        h.wait_for("late holding 5", lambda: route_stats(port, "late")["pending"] == 5, 10)
        b.config["routes"].remove(late)
        r = hup(b, port, "removing late")
        check(r["error"] is None and r["pending_changes"] == 0, "removing late: %r" % r)
        b.wait_log('msg="route removed: no longer consumed', 5)
        h.wait_for("late's ingress in %s no longer consumed" % v2,
                   lambda: consumers(uri[v2], same["ingress_queue"]) == 0, 10)
        check(route_stats(port, "late").get("retired") is True, "late not retired: %r" %
              route_stats(port, "late"))
        moved = route("late", v1, ingress=ctx.n("in3"), ingress_queue=ctx.n("in3.q"))
        b.config["routes"].append(moved)
        r = hup(b, port, "adding late back in another vhost")
        check(r["pending_changes"] == 1, "late added back in another vhost: %r" % r)
        b.wait_log("removed earlier from another vhost", 5)
        sl = route_stats(port, "late")
        check(sl["retired"] is True and sl["vhost"] == v2, "late after the refused move: %r" % sl)
        b.config["routes"][-1] = late
        r = hup(b, port, "adding late back in its vhost")
        check(r["error"] is None and r["pending_changes"] == 0, "late added back: %r" % r)
        h.wait_for("late's ingress in %s consumed again" % v2,
                   lambda: consumers(uri[v2], same["ingress_queue"]) == 1, 10)
        sl = route_stats(port, "late")
        check(not sl["retired"] and sl["vhost"] == v2, "late after it came back: %r" % sl)
        publish(v2, "v2i-", 5, 500)
        check_arrivals("late removed and added back")

    # kill -9 while each vhost's route holds messages
    def case_kill9_each_vhost_holding():
        publish("/", "d3-", 10, 3000)
        publish(v1, "v13-", 10, 3000)
        publish(v2, "v23-", 10, 3000)
        h.wait_progress(lambda: sum(r["pending"] for r in h.stats(port)["routes"]), 30, 10,
                        lambda k: "the bridge holds %d of 30" % k)
        t_kill = time.monotonic()
        b.kill9()
        b.start(timeout=60)
        h.log("down %.2f s (kill to ready)" % (time.monotonic() - t_kill))
        for v, c in cons.items():
            want = {mid for mid, (_, _, vh) in sent.items() if vh == v}
            c.wait_ids(want, 3 + h.late_tolerance() + 10)
        time.sleep(0.5)
        all_msgs = []
        for v, c in cons.items():
            for m in c.snapshot():
                t_pub, ms, vh = sent[m.message_id]
                check(vh == v, "after kill -9: %s (published in vhost %r) arrived in vhost %r" % (
                    m.message_id, vh, v))
                check(m.t - t_pub >= ms / 1000.0 - h.early_tolerance(),
                      "%s arrived EARLY: after %.3f s, x-delay %d ms" % (m.message_id, m.t - t_pub,
                                                                        ms))
            all_msgs += c.snapshot()
        t = h.tally(set(sent), all_msgs)
        h.log("RESULT vhosts: %s" % h.tally_line(t))
        check(not t["lost"] and not t["unknown"] and t["case2"] == 0, h.tally_line(t))

    # a route in a vhost that does not exist: its pair cannot log in, the others go on; the
    # bridge is not ready while it is configured, and ready again once it is removed
    def case_missing_vhost():
        ghost = route("ghost", ctx.n("novhost"), ingress=ctx.n("g"), ingress_queue=ctx.n("g.q"))
        b.config["routes"].append(ghost)
        r = hup(b, port, "adding a route in a vhost that does not exist")
        check(r["error"] is None and r["pending_changes"] == 0, "ghost: %r" % r)

        def ghost_pair():
            vs = [v for v in h.stats(port)["connections"]["vhosts"] if v["vhost"] == ghost["vhost"]]
            return vs[0] if vs else None
        h.wait_for("the missing vhost's pair in /stats", lambda: ghost_pair() is not None, 10)
        time.sleep(1.0)
        g, st = ghost_pair(), h.stats(port)
        h.log("/stats connections: %r" % st["connections"])
        check(g["consumer"] == "down" and g["routes"] == 1, "the missing vhost's pair: %r" % g)
        check(all(v["consumer"] == "up" and v["publisher"] == "up"
                  for v in st["connections"]["vhosts"] if v["vhost"] != ghost["vhost"]),
              "the other vhosts' pairs: %r" % st["connections"])
        check(not st["ready"], "ready with a route whose vhost cannot be reached: %r" % st["reason"])
        text = h.metrics(port)
        check(h.metric_value(text, "delay_bridge_vhost_connected",
                             'vhost="%s",connection="consumer"' % ghost["vhost"]) == 0,
              "delay_bridge_vhost_connected of the missing vhost")
        publish("/", "d5-", 5, 300)
        publish(v2, "v25-", 5, 300)
        check_arrivals("beside a vhost that does not exist")
        b.config["routes"].remove(ghost)
        hup(b, port, "removing the route of the missing vhost")
        h.wait_for("ready again once the route of the missing vhost is removed",
                   lambda: h.stats(port)["ready"], 10)

    # a drain hands each vhost's messages back to its own ingress queue
    def case_drain_hands_back():
        before = {v: c.count() for v, c in cons.items()}
        publish("/", "d4-", 5, 4000)
        publish(v1, "v14-", 5, 4000)
        publish(v2, "v24-", 5, 4000)
        h.wait_progress(lambda: sum(r["pending"] for r in h.stats(port)["routes"]), 15, 10,
                        lambda k: "the bridge holds %d of 15" % k)
        r = subprocess.run([h.bridge_bin(), "drain", "--url", "http://127.0.0.1:%d" % port,
                            "--timeout", "30"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "delay-bridge drain exited %d: %s" % (r.returncode, r.stderr))
        b.proc.wait(timeout=30)
        check(b.proc.returncode == 0, "the bridge exited %s after the drain" % b.proc.returncode)
        depth = {}
        for v in ("/", v1, v2):
            conn = pika.BlockingConnection(pika.URLParameters(uri[v]))
            depth[v] = conn.channel().queue_declare(same["ingress_queue"],
                                                    passive=True).method.message_count
            conn.close()
        h.log("after the drain, each vhost's ingress queue holds %r" % depth)
        check(depth == {"/": 5, v1: 5, v2: 5}, "handed back per vhost: %r" % depth)
        check({v: c.count() for v, c in cons.items()} == before, "a drained message was published")

    # the handed-back messages held again by the restarted bridge, each in its own vhost
    def case_drain_delivered():
        b.start(timeout=60)
        for v, c in cons.items():
            want = {mid for mid, (_, _, vh) in sent.items() if vh == v}
            c.wait_ids(want, 4 + h.late_tolerance() + 10)
        time.sleep(0.5)
        for v, c in cons.items():
            for m in c.snapshot():
                if m.message_id[:3] in ("d4-", "v14", "v24"):
                    t_pub, ms, vh = sent[m.message_id]
                    check(vh == v, "after the drain: %s (vhost %r) arrived in vhost %r"
                          % (m.message_id, vh, v))
                    h.check_on_time(m, t_pub, ms / 1000.0, "after the drain: %s" % m.message_id)
        h.log("RESULT vhosts drain: 15 handed back to their own vhosts, each arrived there on time")

    cases = h.Cases()
    cases.run("two_vhosts_same_names", case_two_vhosts_same_names)
    cases.run("keys_per_vhost", case_keys_per_vhost)
    cases.run("routes_added_at_run_time", case_routes_added_at_run_time)
    cases.run("late_removed_and_back", case_late_removed_and_back)
    cases.run("kill9_each_vhost_holding", case_kill9_each_vhost_holding)
    cases.run("missing_vhost", case_missing_vhost)
    cases.run("drain_hands_back", case_drain_hands_back)
    cases.run("drain_delivered", case_drain_delivered, needs="drain_hands_back")
    cases.run("clean_stop", b.stop)
    cases.done()

if __name__ == "__main__":
    h.run(test, budget_s=120)
