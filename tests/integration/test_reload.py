#!/usr/bin/python3
"""SIGHUP reads the configuration again and never ends the daemon (it did:
the default action of an unhandled SIGHUP, checked on cee05c4). While
delayed messages are held and falling due:

 - the same file: read, nothing waits for a restart (/stats "reload");
 - log.level changed to debug: applied at once;
 - a file that is not valid JSON, then one with a bad key: refused, the
   error (with the key path) logged and shown in /stats, nothing changed;
 - a route added and a key changed: logged by key path, counted in
   delay_bridge_config_pending_changes, not applied;
 - every held message still arrives once, never early, within the usual
   lateness; SIGTERM still stops the bridge cleanly (exit 0).
"""

import json
import signal
import time

import harness as h
from harness import check


def test(ctx):
    ex, qs = ctx.target("reload", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = h.free_port()
    b = ctx.bridge([ctx.route("reload", ex)], http={"listen": str(port)})
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()

    sent = {}
    def publish(n, delay_ms):
        for i in range(n):
            mid = "m%03d" % len(sent)
            sent[mid] = (p.publish(ingress, "rk", mid.encode(), message_id=mid,
                                   headers={"x-delay": h.i32(delay_ms)}), delay_ms)

    def hup(what):
        before = h.stats(port)["reload"]["count"]
        b.proc.send_signal(signal.SIGHUP)
        h.wait_for("the reload after %s" % what,
                   lambda: h.stats(port)["reload"]["count"] == before + 1, 10)
        b.check_alive()
        return h.stats(port)["reload"]

    publish(20, 4000)
    r = hup("the same file")
    check(r["refused"] == 0 and r["pending_changes"] == 0 and r["error"] is None, "reload %r" % r)
    b.wait_log("nothing waits for a restart", 5)

    b.config["log"]["level"] = "debug"
    b.rewrite_config()
    publish(10, 3000)
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
    b.config["routes"][0]["prefetch"] = 1000

    b.config["routes"].append(ctx.route("added", ex))
    b.config["shutdown_timeout_ms"] = 5000
    b.rewrite_config()
    publish(10, 2000)
    r = hup("a route added and a key changed")
    check(r["pending_changes"] == 2 and r["error"] is None, "pending: %r" % r)
    b.wait_log("key=routes[added] change=added", 5)
    b.wait_log("key=shutdown_timeout_ms change=changed", 5)
    text = h.metrics(port)
    check(h.metric_value(text, "delay_bridge_config_pending_changes") == 2, "pending gauge")
    check(h.metric_value(text, "delay_bridge_config_reloads_total", 'result="refused"') == 2 and
          h.metric_value(text, "delay_bridge_config_reloads_total", 'result="read"') == 3,
          "reload counters:\n%s" % "\n".join(l for l in text.splitlines() if "reload" in l))

    msgs = c.wait_count(len(sent), 4 + h.late_tolerance() + 10)
    t = h.tally(set(sent), msgs)
    h.log("RESULT reload: %s" % h.tally_line(t))
    check(not t["lost"] and not t["duplicates"] and not t["unknown"], "after the reloads: %s" % h.tally_line(t))
    for m in msgs:
        t0, ms = sent[m.message_id]
        h.check_on_time(m, t0, ms / 1000.0, m.message_id)
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
