#!/usr/bin/python3
"""max_held: a publisher of many long delays cannot grow the bridge's memory
without a bound (issue 39, item 5). Every held message costs RAM for as long
as its delay, and a restart needs the same RAM to replay it; at the bound the
bridge stops consuming, as the full-disk gate does, and the rest waits in the
broker's ingress queue.

routes[].max_held (one route, 200, prefetch 50):
- 2,000 messages with a 1 h delay flood the route: the bridge holds between
  200 and 200 + prefetch and stops there; every other message is still in
  the ingress queue (a passive queue.declare's message count): nothing
  refused, nothing lost -- held + queued = 2,000 -- and it stays so;
- the log says so (route, count, bound, key path), /readyz answers 503
  naming routes[NAME].max_held, /stats shows the route paused with its
  bound, /metrics delay_bridge_held_limit_paused{route} = 1 and the bound
  as delay_bridge_route_max_held_messages;
- kill -9 while paused, restart: every held message is loaded back (the
  replay does not refuse what was acked), the route starts paused, and the
  queue keeps the rest;
- POST /purge?route=NAME: the held count falls, consuming resumes (logged),
  and stops again at the bound: purged + held + queued = 2,000.

limits.max_held (two routes with no bound of their own, 300 in all,
prefetch 20 each): 1,000 messages across both stop at 300 + 40 in all, both
routes paused, /readyz naming limits.max_held; a reload setting it to 0 (no
bound) resumes both at once, and every message is taken; started again with
0, the bridge warns that nothing bounds what it holds.

On the code before max_held existed the config is refused (unknown key
"max_held"), and without the gate the bridge would take all 2,000."""

import json
import os
import signal
import time

import harness as h
from harness import check

N = 2000
MAX = 200
PREFETCH = 50
HOUR_MS = 3600000


def route_stats(port, name):
    for r in h.stats(port)["routes"]:
        if r["name"] == name:
            return r
    h.fail("/stats has no route %r" % name)


def settled(ctx, port, queue, n_in, what, extra=0):
    """Wait until every one of n_in messages is either held or ready in the
    queue (the deliveries taken before the pause are logged and acked) and
    the count stopped moving; returns (held, queued)."""
    last, since = None, time.monotonic()

    def look():
        nonlocal last, since
        held = h.stats(port)["held"]
        queued = ctx.queue_depth(queue)
        now = (held, queued)
        if now != last:
            last, since = now, time.monotonic()
            return None
        if held + queued + extra == n_in and time.monotonic() - since >= 1.5:
            return now
        return None
    held, queued = h.wait_for(what, look, 90)
    h.log("%s: held %d, queued %d" % (what, held, queued))
    return held, queued


def check_paused(ctx, port, name, held, queue, queued, why):
    """/readyz, /stats and /metrics say the route is paused by its max_held,
    and for 2 s nothing moves."""
    st, body = h.readyz(port)
    check(st == 503 and "held limit reached" in body and "routes[%s].max_held" % name in body,
          "%s: /readyz answered %r %r, expected 503 naming routes[%s].max_held"
          % (why, st, body, name))
    s = h.stats(port)
    r = [x for x in s["routes"] if x["name"] == name][0]
    check(r["held_limit_paused"] is True and r["max_held"] == MAX,
          "%s: /stats route %r" % (why, {k: r.get(k) for k in ("held_limit_paused", "max_held",
                                                                "held_limit_pauses")}))
    check(s["ready"] is False and "routes[%s].max_held" % name in (s["reason"] or ""),
          "%s: /stats ready %r reason %r" % (why, s["ready"], s["reason"]))
    check(s["held_limit"]["max_held"] == 10000000 and s["held_limit"]["paused"] is False,
          "%s: /stats held_limit %r (the default bound in all, not reached)" % (why, s["held_limit"]))
    m = h.metrics(port)
    lab = 'route="%s"' % name
    check(h.metric_value(m, "delay_bridge_held_limit_paused", lab) == 1,
          "%s: delay_bridge_held_limit_paused{%s} is %r" % (
              why, lab, h.metric_value(m, "delay_bridge_held_limit_paused", lab)))
    check(h.metric_value(m, "delay_bridge_route_max_held_messages", lab) == MAX,
          "%s: delay_bridge_route_max_held_messages{%s} is %r" % (
              why, lab, h.metric_value(m, "delay_bridge_route_max_held_messages", lab)))
    check(h.metric_value(m, "delay_bridge_max_held_messages") == 10000000,
          "%s: delay_bridge_max_held_messages is %r" % (
              why, h.metric_value(m, "delay_bridge_max_held_messages")))
    check(h.metric_value(m, "delay_bridge_ready") == 0, "%s: delay_bridge_ready is not 0" % why)
    time.sleep(2.0)
    now = (h.stats(port)["held"], ctx.queue_depth(queue))
    check(now == (held, queued), "%s: not paused: held/queued went from %r to %r"
          % (why, (held, queued), now))
    h.log("%s: paused (readyz %r), held %d, queued %d" % (why, body.strip(), held, queued))


def route_bound(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    route = ctx.route("held", ex, max_held=MAX, prefetch=PREFETCH)
    queue = route["ingress_queue"]
    port = h.free_port()
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port})
    p = ctx.publisher()
    for i in range(N):
        p.publish(route["ingress_exchange"], "rk", b"m%d" % i,
                  headers={"x-delay": h.i32(HOUR_MS)}, message_id="m-%04d" % i)
    p.close()
    h.log("published %d messages with a 1 h delay" % N)

    b.wait_log("held limit reached", 60, "the pause")
    held, queued = settled(ctx, port, queue, N, "paused at routes[held].max_held")
    check(MAX <= held <= MAX + PREFETCH,
          "held %d: expected %d..%d (max_held + at most the prefetch)" % (held, MAX, MAX + PREFETCH))
    check(queued == N - held and queued >= N - MAX - PREFETCH,
          "the ingress queue holds %d, expected the other %d" % (queued, N - held))
    line = [l for l in b.log_text().splitlines() if "held limit reached" in l][0]
    for want in ("route=held", "max_held=%d" % MAX, "key=routes[held].max_held", "held="):
        check(want in line, "the pause's log line lacks %s: %s" % (want, line))
    check_paused(ctx, port, "held", held, queue, queued, "paused")
    check(route_stats(port, "held")["held_limit_pauses"] == 1, "held_limit_pauses is not 1")

    # kill -9 while paused: a restart loads back every held message, over the bound or not,
    # and starts the route paused.
    b.kill9()
    b.start()
    b.wait_log("held limit reached", 30, "the pause at start")
    held2, queued2 = settled(ctx, port, queue, N, "restarted")
    check(held2 == held and queued2 == queued,
          "after kill -9 and a restart: held %d, queued %d; before: held %d, queued %d"
          % (held2, queued2, held, queued))
    check_paused(ctx, port, "held", held2, queue, queued2, "restarted")

    # The held count falls (a purge): consuming resumes, and stops at the bound again.
    st, j = h.http_req(port, "POST", "/purge?route=held",
                       headers={"Content-Type": "application/json"})
    check(st in (200, 202), "POST /purge?route=held: %r %r" % (st, j))
    purged = h.wait_for("the purge done", lambda: (lambda pj: pj["removed"] if pj and pj["done"]
                                                   else None)(h.stats(port).get("purge")), 30)
    check(purged == held2, "purged %d, expected the %d held" % (purged, held2))
    b.wait_log("the route consumes again", 30, "the resume")
    h.wait_for("paused again", lambda: route_stats(port, "held")["held_limit_pauses"] >= 2, 60)
    held3, queued3 = settled(ctx, port, queue, N, "paused again after the purge", extra=purged)
    check(MAX <= held3 <= MAX + PREFETCH, "held %d after the purge: expected %d..%d"
          % (held3, MAX, MAX + PREFETCH))
    check(queued3 == N - purged - held3, "queued %d after the purge" % queued3)
    check_paused(ctx, port, "held", held3, queue, queued3, "paused again")
    b.stop()


def total_bound(ctx):
    ex, qs = ctx.target("all", "direct", ["rk"])
    ra = ctx.route("all-a", ex, prefetch=20)
    rb = ctx.route("all-b", ex, prefetch=20)
    port = h.free_port()
    b = ctx.bridge([ra, rb], name="all", http={"listen": "127.0.0.1:%d" % port},
                   limits={"max_held": 300})
    p = ctx.publisher()
    for i in range(500):
        for r in (ra, rb):
            p.publish(r["ingress_exchange"], "rk", b"x", headers={"x-delay": h.i32(HOUR_MS)})
    p.close()
    b.wait_log("held limit in all reached", 60, "the pause in all")

    def both():
        s = h.stats(port)
        q = ctx.queue_depth(ra["ingress_queue"]) + ctx.queue_depth(rb["ingress_queue"])
        return (s["held"], q) if s["held"] + q == 1000 else None
    h.wait_for("every message held or queued", both, 60)
    time.sleep(1.5)
    held, queued = h.wait_for("every message held or queued", both, 60)
    h.log("limits.max_held 300: held %d, queued %d" % (held, queued))
    check(300 <= held <= 340, "held %d in all: expected 300..340" % held)
    s = h.stats(port)
    check(s["held_limit"]["paused"] is True and s["held_limit"]["max_held"] == 300,
          "/stats held_limit %r" % s["held_limit"])
    check(all(r["held_limit_paused"] and r["max_held"] is None for r in s["routes"]),
          "/stats routes: %r" % [(r["name"], r["held_limit_paused"], r["max_held"])
                                 for r in s["routes"]])
    st, body = h.readyz(port)
    check(st == 503 and "limits.max_held" in body, "/readyz %r %r" % (st, body))
    line = [l for l in b.log_text().splitlines() if "held limit in all reached" in l][0]
    check("key=limits.max_held" in line and "max_held=300" in line, "log line: %s" % line)

    # A reload lifts the bound (0: none, written): both routes consume again, at once.
    b.config["limits"] = {"max_held": 0}
    b.rewrite_config()
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("lifted (0, no bound): consuming resumes", 30, "the resume after the reload")
    h.wait_for("every message taken", lambda: h.stats(port)["held"] == 1000, 60)
    st, body = h.readyz(port)
    check(st == 200, "/readyz after the reload: %r %r" % (st, body))
    m = h.metrics(port)
    check(h.metric_value(m, "delay_bridge_max_held_messages") is None,
          "delay_bridge_max_held_messages present with no bound")
    check(h.metric_value(m, "delay_bridge_held_limit_paused", 'route="all-a"') == 0,
          "delay_bridge_held_limit_paused{route=all-a} not 0 after the resume")
    # Started with no bound (written as 0): it says so, in one line.
    b.stop()
    b.start()
    b.wait_log("limits.max_held is 0: no bound", 10, "the warning about no bound")
    check(h.stats(port)["held"] == 1000, "held after the restart: %r" % h.stats(port)["held"])
    b.stop()


def test(ctx):
    route_bound(ctx)
    total_bound(ctx)


if __name__ == "__main__":
    h.run(test, budget_s=240)
