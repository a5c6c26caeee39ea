#!/usr/bin/python3
"""Delays past 2^32 ms (the plugin's limit), up to years.

With routes[].max_delay_ms = 10 years:
- x-delay = 5 years as a signed 64-bit header (and as an unsigned 64-bit
  one, and as a numeric string), 2^32 ms (just past 32 bits) and exactly
  max_delay_ms are held, not published;
- /pending shows due_ms = publish time + delay (within the publish window)
  and due_ms - enqueued_ms = the delay exactly, in due order, "due" in the
  right year; GET /pending/R/KEY finds the 5-year message;
- `delay-bridge wal dump --json` on the live WAL shows the same due times;
- kill -9 and restart: all still held with the same ids and due_ms;
  SIGTERM and restart too;
- max_delay_ms + 1 follows the invalid_delay policy: published at once
  ("publish"), or dead-lettered with x-delay-error "x-delay above
  max_delay_ms" ("dead-letter"); counted in delay_bridge_invalid_delay_total.
"""

import json
import subprocess
import time

import harness as h
from harness import check

DAY_MS = 86400000
YEAR_MS = 365 * DAY_MS + DAY_MS // 4
MAX_MS = 10 * YEAR_MS
FIVE_Y = 5 * YEAR_MS


free_port = h.free_port  # one copy, in harness.py


def listing(port, route):
    st, j = h.http_req(port, "GET", "/pending?route=%s&limit=1000" % route)
    check(st == 200 and j["next"] is None, "GET /pending?route=%s: %d %r" % (route, st, j))
    return j["messages"]


def test(ctx):
    ex, tq = ctx.target("target", "direct", ["rk"])
    dlx, dq = ctx.target("dlx", "fanout", [""])
    c = ctx.consumer([tq["rk"], dq[""]])
    rl = ctx.route("long", ex, max_delay_ms=MAX_MS, invalid_delay="publish")
    rd = ctx.route("longdl", ex, max_delay_ms=MAX_MS, invalid_delay="dead-letter",
                   dead_letter_exchange=dlx)
    port = free_port()
    b = ctx.bridge([rl, rd], http={"listen": "127.0.0.1:%d" % port})
    p = ctx.publisher()

    held = {  # message id -> (x-delay field, delay ms)
        "five-years-i64": (h.i64(FIVE_Y), FIVE_Y),
        "five-years-u64": (h.u64(FIVE_Y + 1), FIVE_Y + 1),
        "five-years-str": (h.lstr(str(FIVE_Y + 2)), FIVE_Y + 2),
        "two-pow-32": (h.i64(2 ** 32), 2 ** 32),
        "two-pow-32-u32-max": (h.u32(2 ** 32 - 1), 2 ** 32 - 1),
        "ten-years-max": (h.i64(MAX_MS), MAX_MS),
    }
    wall0 = time.time() * 1000
    sent = {}
    for mid, (xd, _) in held.items():
        hd = {"x-delay": xd}
        if mid == "five-years-i64":
            hd["x-delay-key"] = h.lstr("far")
        sent[mid] = p.publish(rl["ingress_exchange"], "rk", mid.encode(), headers=hd,
                              message_id=mid, delivery_mode=2)
    # above max_delay_ms: the invalid_delay policy
    sent["over-pub"] = p.publish(rl["ingress_exchange"], "rk", b"x", headers={"x-delay": h.i64(MAX_MS + 1)},
                                 message_id="over-pub")
    sent["over-dl"] = p.publish(rd["ingress_exchange"], "rk", b"x", headers={"x-delay": h.i64(MAX_MS + 1)},
                                message_id="over-dl")
    sent["over-dl-u64"] = p.publish(rd["ingress_exchange"], "rk", b"x",
                                    headers={"x-delay": h.u64(2 ** 63 + 5)}, message_id="over-dl-u64")
    wall1 = time.time() * 1000
    for r in (rl, rd):
        ctx.wait_drained(r["ingress_queue"], 20)

    msgs = c.wait_ids(["over-pub", "over-dl", "over-dl-u64"], 10)
    by = {m.message_id: m for m in msgs}
    h.check_immediate(by["over-pub"], sent["over-pub"], "over-pub")
    check(by["over-pub"].queue == tq["rk"], "over-pub went to %s" % by["over-pub"].queue)
    # 2^63 + 5 as an unsigned 64-bit value is what rabbitmq-c makes of py-amqp's signed
    # 'L' -2^63 + 5: read as py-amqp meant it, a negative delay: published at once,
    # not an invalid one (xdelay.c)
    m = by["over-dl-u64"]
    h.check_immediate(m, sent["over-dl-u64"], "over-dl-u64")
    check(m.queue != dq[""], "over-dl-u64 was dead-lettered: a wrapped u64 is a negative delay")
    check(h.header_str(m.props, "x-delay-error") is None, "over-dl-u64: x-delay-error set")
    for mid in ("over-dl",):
        m = by[mid]
        h.check_immediate(m, sent[mid], mid)
        check(m.queue == dq[""], "%s went to %s, not the dead-letter exchange" % (mid, m.queue))
        check(h.header_str(m.props, "x-delay-error") is not None, "%s: no x-delay-error" % mid)
    check(h.header_str(by["over-dl"].props, "x-delay-error") == "x-delay above max_delay_ms",
          "over-dl: x-delay-error %r" % h.header(by["over-dl"].props, "x-delay-error"))
    check(h.route_metric(port, "delay_bridge_invalid_delay_total", "long") == 1,
          "invalid_delay_total{long} != 1")
    check(h.route_metric(port, "delay_bridge_invalid_delay_total", "longdl") == 1,
          "invalid_delay_total{longdl} != 1")

    first = listing(port, "long")
    got = {m["message_id"]: m for m in first}
    check(set(got) == set(held), "/pending?route=long: %s, expected %s" % (sorted(got), sorted(held)))
    check([m["due_ms"] for m in first] == sorted(m["due_ms"] for m in first), "not in due order")
    for mid, (_, delay) in held.items():
        m = got[mid]
        check(m["due_ms"] - m["enqueued_ms"] == delay,
              "%s: due_ms - enqueued_ms = %d, expected %d" % (mid, m["due_ms"] - m["enqueued_ms"], delay))
        check(wall0 - 50 <= m["due_ms"] - delay <= wall1 + 50,
              "%s: due_ms %d is not publish time + %d (published in [%d, %d])" % (
                  mid, m["due_ms"], delay, wall0, wall1))
        year = time.gmtime(m["due_ms"] / 1000).tm_year
        check(m["due"].startswith("%04d-" % year), "%s: due %r, expected year %d" % (mid, m["due"], year))
        check(m["state"] == "waiting", "%s: state %r" % (mid, m["state"]))
    h.log("five years: due %s (due_ms %d)" % (got["five-years-i64"]["due"], got["five-years-i64"]["due_ms"]))
    st, j = h.http_req(port, "GET", "/pending/long/far")
    check(st == 200 and j["message_id"] == "five-years-i64" and j["due_ms"] == got["five-years-i64"]["due_ms"],
          "GET /pending/long/far: %d %r" % (st, j))
    check(h.route_metric(port, "delay_bridge_pending_messages", "long") == len(held),
          "pending{long} != %d" % len(held))
    # the earliest is 2^32 - 1 ms (~49.7 days) away
    nd = None
    for line in h.http_req(port, "GET", "/metrics")[1].splitlines():
        if line.startswith("delay_bridge_next_due_seconds "):
            nd = float(line.split()[-1])
    want_nd = (got["two-pow-32-u32-max"]["due_ms"] - time.time() * 1000) / 1000.0
    check(nd is not None and abs(nd - want_nd) < 5, "delay_bridge_next_due_seconds %r, expected ~%.0f" % (
        nd, want_nd))

    # the operator tool reads the same due times from the live WAL
    r = subprocess.run([h.bridge_bin(), "wal", "dump", b.config["wal"]["dir"], "--route", "long", "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    check(r.returncode == 0, "wal dump: exit %d: %s" % (r.returncode, r.stderr))
    try:
        dumped = json.loads(r.stdout)
    except ValueError:
        dumped = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    if isinstance(dumped, dict):
        dumped = dumped.get("messages", [])
    dd = {d["message_id"]: d["due_ms"] for d in dumped}
    check(dd == {k: v["due_ms"] for k, v in got.items()}, "wal dump due times %r differ from /pending %r" % (
        dd, {k: v["due_ms"] for k, v in got.items()}))

    def same_after(what):
        now = listing(port, "long")
        check([(m["id"], m["message_id"], m["due_ms"], m["enqueued_ms"]) for m in now] ==
              [(m["id"], m["message_id"], m["due_ms"], m["enqueued_ms"]) for m in first],
              "after %s /pending?route=long changed:\n%r\nwas\n%r" % (what, now, first))

    b.kill9()
    b.start()
    same_after("kill -9 and restart")
    b.stop()
    b.start()
    same_after("SIGTERM and restart")
    late = [m.message_id for m in c.quiet(1.0) if m.message_id in held]
    check(not late, "held for years, yet published: %s" % late)
    check(len(c.snapshot()) == 3, "unexpected deliveries: %s" % h.summarize(c.snapshot()))
    check(listing(port, "longdl") == [], "longdl holds messages")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
