#!/usr/bin/python3
"""SIGHUP reads the configuration again and never ends the daemon (it did:
the default action of an unhandled SIGHUP, checked on cee05c4). While
delayed messages are held and falling due:

 - the same file: read, nothing waits for a restart (/stats "reload");
 - log.level changed to debug: applied at once;
 - a file that is not valid JSON, then one with a bad key: refused, the
   error (with the key path) logged and shown in /stats, nothing changed;
 - applied live: target_exchange (messages held before the reload go to
   the new target when due), max_delay_ms (the next delivery above it
   follows invalid_delay: published at once), max_inflight,
   shutdown_timeout_ms, a retry route's policy (the next failure comes
   back after the new initial_ms);
 - a route added starts (its own test is integration.routes_live), a
   route's prefetch is applied by consuming again;
 - waiting for a restart, logged by key path and counted in
   delay_bridge_config_pending_changes: broker.heartbeat_s and
   wal.commit_interval_ms;
 - every message arrives once, never early, within the usual lateness;
   SIGTERM still stops the bridge cleanly (exit 0).
"""

import signal
import time

import harness as h
from harness import check


def test(ctx):
    ex, qs = ctx.target("reload", "direct", ["rk"])
    ex2, qs2 = ctx.target("reload2", "direct", ["rk"])
    c = ctx.consumer([qs["rk"], qs2["rk"]])
    port = h.free_port()
    retry = {"name": "rr", "ingress_exchange": ctx.n("rr"), "ingress_queue": ctx.n("rr.q"),
             "retry": {"initial_ms": 60000, "parking_exchange": ctx.n("rr.p"),
                       "parking_queue": ctx.n("rr.p"), "queue_pattern": h.queue_pattern(ctx.n("work"))}}
    ctx.exchanges.update([retry["ingress_exchange"], retry["retry"]["parking_exchange"]])
    ctx.queues.update([retry["ingress_queue"], retry["retry"]["parking_queue"]])
    b = ctx.bridge([ctx.route("reload", ex), retry], http={"listen": str(port)})
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()

    sent = {}

    def publish(n, delay_ms, tag):
        for i in range(n):
            mid = "%s%03d" % (tag, len(sent))
            sent[mid] = (p.publish(ingress, "rk", mid.encode(), message_id=mid,
                                   headers={"x-delay": h.i32(delay_ms)}), delay_ms)

    def hup(what):
        before = h.stats(port)["reload"]["count"]
        b.proc.send_signal(signal.SIGHUP)
        h.wait_for("the reload after %s" % what,
                   lambda: h.stats(port)["reload"]["count"] == before + 1, 10)
        b.check_alive()
        return h.stats(port)["reload"]

    publish(20, 5000, "a")  # held across every reload; go to the new target (ex2)
    r = hup("the same file")
    check(r["refused"] == 0 and r["pending_changes"] == 0 and r["error"] is None, "reload %r" % r)
    b.wait_log("nothing waits for a restart", 5)

    b.config["log"]["level"] = "debug"
    b.rewrite_config()
    r = hup("log.level debug")
    b.wait_log('msg="applied" key=log.level', 5)
    check(r["pending_changes"] == 0, "log.level left something pending: %r" % r)

    with open(b.config_path, "w") as f:
        f.write('{"broker": ')
    r = hup("a truncated file")
    check(r["refused"] == 1 and "invalid JSON" in (r["error"] or ""), "truncated: %r" % r)
    b.config["routes"][0]["prefetch"] = "lots"
    b.rewrite_config()
    r = hup("a bad key")
    check(r["refused"] == 2 and "routes[0].prefetch" in (r["error"] or ""), "bad key: %r" % r)
    b.wait_log("the configuration file was not accepted: nothing changed", 5)

    rt = b.config["routes"][0]
    rt.update(prefetch=500, target_exchange=ex2, max_delay_ms=3000, max_inflight=50)
    b.config["routes"][1]["retry"]["initial_ms"] = 300
    b.config["routes"].append(ctx.route("added", ex))
    b.config["shutdown_timeout_ms"] = 5000
    b.config["broker"]["heartbeat_s"] = 20
    b.config["wal"]["commit_interval_ms"] = 5
    b.rewrite_config()
    r = hup("live and waiting changes")
    check(r["pending_changes"] == 2 and r["error"] is None, "pending: %r" % r)
    for line in ("key=broker.heartbeat_s change=changed",
                 "key=wal.commit_interval_ms change=changed",
                 'msg="route added" route=added', 'msg="applied" key=routes[reload].prefetch',
                 'msg="applied" key=routes[reload].target_exchange',
                 'msg="applied" key=routes[reload].max_delay_ms',
                 'msg="applied" key=routes[reload].max_inflight',
                 'msg="applied" key=shutdown_timeout_ms', 'msg="applied" key=routes[rr].retry'):
        b.wait_log(line, 5)
    text = h.metrics(port)
    check(h.metric_value(text, "delay_bridge_config_pending_changes") == 2, "pending gauge")
    check(h.metric_value(text, "delay_bridge_config_reloads_total", 'result="refused"') == 2 and
          h.metric_value(text, "delay_bridge_config_reloads_total", 'result="read"') == 3,
          "reload counters:\n%s" % "\n".join(l for l in text.splitlines() if "reload" in l))

    # the retry route's new policy: a failure now comes back after 300 ms, not 60 s
    work = ctx.n("work")
    ch = ctx.admin()
    ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": retry["ingress_exchange"]})
    ctx.queues.add(work)
    ch.basic_publish("", work, b"w")
    got = h.wait_for("the work message", lambda: ch.basic_get(work)[0], 5)
    ch.basic_reject(got.delivery_tag, requeue=False)
    t_rej = time.time()
    back = h.wait_for("the retry under the reloaded policy", lambda: ch.basic_get(work)[0], 10)
    ch.basic_ack(back.delivery_tag)
    h.log("a retry under the reloaded policy (initial_ms 300) came back after %.2f s"
          % (time.time() - t_rej))
    check(time.time() - t_rej < 5, "the retry took the old policy's 60 s")

    # max_delay_ms 3000 now: x-delay 4000 is invalid, published at once (invalid_delay publish)
    publish(5, 4000, "b")
    publish(5, 2000, "c")
    msgs = c.wait_count(len(sent), 5 + h.late_tolerance() + 10)
    t = h.tally(set(sent), msgs)
    h.log("RESULT reload: %s" % h.tally_line(t))
    check(not t["lost"] and not t["duplicates"] and not t["unknown"], "after the reloads: %s"
          % h.tally_line(t))
    for m in msgs:
        t0, ms = sent[m.message_id]
        check(m.queue == qs2["rk"], "%s reached %s: held before the target changed, it goes to "
              "the new one" % (m.message_id, m.queue))
        if m.message_id.startswith("b"):
            check(m.t - t0 < 2.0, "%s (x-delay above the new max) took %.2f s" % (m.message_id,
                                                                                m.t - t0))
        else:
            h.check_on_time(m, t0, ms / 1000.0, m.message_id)
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
