#!/usr/bin/python3
"""Browsing and purging held messages over HTTP, end to end.

- 300 messages with various delays (many equal), keys on every third one and
  five keys replaced, three routing keys, on two routes: GET /pending pages
  of 7 concatenated are exactly each route's held messages in (due_ms, id)
  order, no duplicates, with the right key, routing key, size, message id,
  state and due_ms - enqueued_ms = x-delay (due_ms also matches the publish
  time); a route never lists another's messages;
- GET /pending/R/KEY shows the newest message of the key with its
  properties and headers; an unknown key is 404;
- POST /purge?route=R&due_before=T (T = the due time of a message in the
  middle: "before" is exclusive) removes exactly the messages due before T:
  /pending shows the rest, the purged never arrive, the rest do, on time;
  another route is untouched. A large WAL (1.2M held messages of a third
  route, written with tests/tools/wal_fill) makes the purge a background job:
  202, then /stats "purge" shows it done with the same count;
- kill -9 after the purge and restart: still purged;
- POST /purge without due_before removes all (1.2M messages): still gone
  after kill -9 and restart; argument errors answer 400/404/405;
- a purge racing with firing (2000 messages with 1-3 s delays falling due
  while the purge runs; due_before as ISO 8601) never delivers a message
  twice and loses none: every message is delivered or purged, the purged
  were all held and due before T when it started, removed + delivered = 2000.

Named cases (harness.Cases: each runs and is reported even when one before
it failed): browse_p1, browse_p2, get_by_key, argument_errors,
purge_before, purge_survives_kill, purge_racing_firing, arrivals,
race_accounting, all_fired, purge_all, clean_stop.
"""

import os
import random
import subprocess
import time
import types

import pika

import harness as h
import harness_load as hl
from harness import check

BULK = 1200000  # > PURGE_AT_ONCE (2^20) message-table entries: the purge runs in steps


# ---- local helpers --------------------------------------------------------------

free_port = h.free_port  # one copy, in harness.py


PAGE_STATS = {"slowest": 0.0, "short": 0}


def pages(port, route, limit):
    """Every page of GET /pending?route=R&limit=N: a list of pages (lists).

    A page may be short and still have a next cursor: the walk looked at its
    budget of held messages (65,536, of any route: here the 1.2M of "bulk")
    and stopped. That happens at most once per budget's worth of messages
    passed over, which this checks."""
    out, after, short = [], None, 0
    while True:
        path = "/pending?route=%s&limit=%d" % (h.url_arg(route), limit)
        if after is not None:
            path += "&after=" + h.url_arg(after)
        t0 = time.monotonic()
        st, j = h.http_req(port, "GET", path)
        PAGE_STATS["slowest"] = max(PAGE_STATS["slowest"], time.monotonic() - t0)
        check(st == 200, "GET %s: %d %r" % (path, st, j))
        check(j["route"] == route and j["count"] == len(j["messages"]) and j["count"] <= limit,
              "GET %s: route %r count %r with %d messages (limit %d)" % (
                  path, j["route"], j["count"], len(j["messages"]), limit))
        out.append(j["messages"])
        after = j["next"]
        if after is not None and j["count"] < limit:
            short += 1
            PAGE_STATS["short"] += 1
            check(short <= 2 * BULK // 65536 + 4, "%d short pages with a next cursor" % short)
        if after is None:
            PAGE_STATS["last_short"] = short
            return out
        check(len(out) < 100000, "GET /pending never ends")


def listing(port, route, limit=1000):
    return [m for p in pages(port, route, limit) for m in p]


def seq(m):
    """The numeric message id of a listed message (id is LOGID-SEQ)."""
    return int(m["id"].rsplit("-", 1)[1])


def check_order(msgs, what):
    ids = [m["id"] for m in msgs]
    check(len(ids) == len(set(ids)), "%s: %d duplicate(s)" % (what, len(ids) - len(set(ids))))
    keys = [(m["due_ms"], seq(m)) for m in msgs]
    bad = [i for i in range(1, len(keys)) if keys[i - 1] >= keys[i]]
    check(not bad, "%s: not in (due_ms, id) order at %s" % (
        what, ["%r > %r" % (keys[i - 1], keys[i]) for i in bad[:5]]))


def purge(port, route, due_before, timeout=30):
    """POST /purge; wait for the job if it answered 202. Returns (status, removed)."""
    path = "/purge?route=%s&due_before=%s" % (h.url_arg(route), h.url_arg(str(due_before)))
    t0 = time.monotonic()
    st, j = h.http_req(port, "POST", path)
    h.log("POST %s -> %d %r (%.3fs)" % (path, st, j, time.monotonic() - t0))
    check(st in (200, 202) and isinstance(j, dict), "POST %s: %d %r" % (path, st, j))
    if st == 200:
        check(j.get("done") is True, "purge 200 without done: %r" % j)
        return st, j["removed"]
    check(j.get("done") is False, "purge 202 with done %r" % j.get("done"))
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        s = h.http_req(port, "GET", "/stats")[1]
        pj = s.get("purge")
        check(pj is not None and pj.get("route") == route, "/stats purge object: %r" % pj)
        seen.append(pj["progress"])
        if pj["done"]:
            check(pj["progress"] == 1.0, "/stats purge done with progress %r" % pj["progress"])
            check(pj["removed"] >= j["removed"], "purge removed went down: %r" % pj)
            h.log("purge job done: %r (progress seen %s)" % (pj, seen[:6]))
            return st, pj["removed"]
        check(time.monotonic() < deadline, "purge not done after %ds: %r" % (timeout, pj))
        time.sleep(0.02)


# ---- the test ----------------------------------------------------------------------

def test(ctx):
    tool = os.environ.get("DB_WAL_FILL_BIN")
    if not tool:
        raise h.Skip("DB_WAL_FILL_BIN is not set (run through ctest)")
    rks = ["rk0", "rk1", "rk2"]
    ex, tq = ctx.target("target", "direct", rks)
    c = ctx.consumer(list(tq.values()))
    r1, r2 = ctx.route("p1", ex), ctx.route("p2", ex)
    rrace, rbulk = ctx.route("race", ex), ctx.route("bulk", ex)
    port = free_port()
    b = ctx.bridge([r1, r2, rrace, rbulk], http={"listen": "127.0.0.1:%d" % port}, start=False)
    t0 = time.monotonic()
    subprocess.run([tool, b.config["wal"]["dir"], "bulk", str(BULK)], check=True,
                   stdout=subprocess.DEVNULL)
    h.log("wal_fill: %d messages for route bulk in %.1fs" % (BULK, time.monotonic() - t0))
    b.start(timeout=60)
    p = ctx.publisher()
    rng = random.Random(20261123)

    # ---- 300 messages on two routes ------------------------------------------------
    expect = {"p1": {}, "p2": {}}   # route -> message_id -> facts
    sent = {}                       # message_id -> (monotonic publish time, delay ms)
    keyed = {"p1": {}, "p2": {}}    # route -> key -> newest message_id
    n = 0
    plan = [("p1", r1)] * 200 + [("p2", r2)] * 100
    rng.shuffle(plan)
    # five keys of p1 published again: the earlier ones are replaced
    plan += [("p1", r1)] * 5
    items = []
    for i, (rname, r) in enumerate(plan):
        mid = "%s-%03d" % (rname, i)
        delay = rng.choice(range(12000, 27000, 3000))
        rk = rks[i % 3]
        key = "k%03d" % i if i % 3 == 0 else None
        if i >= 300:
            key = sorted(keyed["p1"])[i - 300]
        body = os.urandom(i % 50)
        hd = {"x-delay": h.i32(delay), "x-test": h.i32(i)}
        if key:
            hd["x-delay-key"] = h.lstr(key)
        items.append((r["ingress_exchange"], rk, body,
                      pika.BasicProperties(headers=hd, message_id=mid, delivery_mode=2)))
        if key and key in keyed[rname]:
            del expect[rname][keyed[rname][key]]
        if key:
            keyed[rname][key] = mid
        expect[rname][mid] = {"delay": delay, "rk": rk, "key": key, "size": len(body)}
        sent[mid] = (None, delay)
        n += 1
    # in one pipelined burst: many arrive in the same ms, so equal due times abound
    wall0 = time.time() * 1000.0
    t_pub = time.monotonic()
    hl.publish_pipelined(None, items)
    wall1 = time.time() * 1000.0
    sent = {k: (t_pub, v[1]) for k, v in sent.items()}  # none can have arrived before t_pub
    h.log("published %d messages (p1 holds %d, p2 %d)" % (n, len(expect["p1"]), len(expect["p2"])))
    # The bridge's received count, not rabbitmqctl (seconds per call on a
    # loaded machine, against a first due time 12 s on).
    for i, r in enumerate((r1, r2)):
        ctx.wait_taken(port, r["ingress_queue"], sum(1 for rn, _ in plan if rn == r["name"]), 20,
                       route=i)

    # What a case leaves for the later ones (each runs whatever happened before it).
    st_ = types.SimpleNamespace(listed={}, keep=None, before=None, snap=None, Tr=None,
                                removed_r=None, per=None)

    # ---- browse: pages of 7 ----------------------------------------------------------
    def case_browse(rname):
        # received is logged, listed once durable (the next group commit, which a loaded
        # machine may pace): list again until every one is there, or 10 s
        end = time.monotonic() + 10
        while True:
            t = time.monotonic()
            pg = pages(port, rname, 7)
            took = time.monotonic() - t
            msgs = [m for pp in pg for m in pp]
            if {m["message_id"] for m in msgs} >= set(expect[rname]) or time.monotonic() > end:
                break
            time.sleep(0.05)
        h.log("GET /pending?route=%s&limit=7: %d pages, %d messages in %.2fs; slowest page "
              "so far %.1f ms, %d short pages (budget stops) so far" % (
                  rname, len(pg), len(msgs), took, PAGE_STATS["slowest"] * 1000,
                  PAGE_STATS["short"]))
        check_order(msgs, "/pending?route=%s" % rname)
        got = {m["message_id"] for m in msgs}
        want = set(expect[rname])
        check(got == want, "/pending?route=%s: %d missing %s, %d extra %s" % (
            rname, len(want - got), sorted(want - got)[:5], len(got - want), sorted(got - want)[:5]))
        check(len(pg) <= (len(msgs) + 6) // 7 + PAGE_STATS["last_short"],
              "%d pages for %d messages, %d of them short" % (
                  len(pg), len(msgs), PAGE_STATS["last_short"]))
        for m in msgs:
            e = expect[rname][m["message_id"]]
            what = "/pending %s %s" % (rname, m["message_id"])
            check(m["key"] == e["key"], "%s: key %r, expected %r" % (what, m["key"], e["key"]))
            check(m["routing_key"] == e["rk"], "%s: routing_key %r" % (what, m["routing_key"]))
            check(m["size"] == e["size"], "%s: size %r, expected %d" % (what, m["size"], e["size"]))
            check(m["state"] == "waiting", "%s: state %r" % (what, m["state"]))
            check(m["due_ms"] - m["enqueued_ms"] == e["delay"],
                  "%s: due_ms - enqueued_ms = %d, x-delay %d" % (what, m["due_ms"] - m["enqueued_ms"],
                                                                 e["delay"]))
            check(wall0 - 50 <= m["due_ms"] - e["delay"] <= wall1 + 50,
                  "%s: due_ms %d - x-delay %d outside the publish window [%d, %d]" % (
                      what, m["due_ms"], e["delay"], wall0, wall1))
            check(m["due"].startswith(time.strftime("%Y-%m-%dT%H:%M:", time.gmtime(m["due_ms"] / 1000))),
                  "%s: due %r does not match due_ms %d" % (what, m["due"], m["due_ms"]))
        check(listing(port, rname) == msgs, "/pending?route=%s: pages of 7 and of 1000 differ" % rname)
        st_.listed[rname] = msgs
        if rname == "p1":
            ties = len(msgs) - len({m["due_ms"] for m in msgs})
            h.log("p1: %d messages share a due_ms with another" % ties)

    # one message by key, with its headers
    k = sorted(keyed["p1"])[0]  # replaced: the newest must show

    def case_get_by_key():
        st, j = h.http_req(port, "GET", "/pending/p1/%s" % h.url_arg(k))
        check(st == 200 and j["message_id"] == keyed["p1"][k] and j["key"] == k,
              "GET /pending/p1/%s: %d %r (expected %s)" % (k, st, j, keyed["p1"][k]))
        hd = j["properties"]["headers"]
        i = int(keyed["p1"][k].split("-")[1])
        check(hd.get("x-delay-key") == k and hd.get("x-test") == i and
              hd.get("x-delay") == expect["p1"][keyed["p1"][k]]["delay"],
              "GET /pending/p1/%s: headers %r" % (k, hd))
        check(j.get("exchange") == r1["ingress_exchange"], "GET /pending/p1/%s: exchange %r" % (
            k, j.get("exchange")))
        check(j["properties"].get("delivery_mode") == 2 or "delivery_mode" in str(j["properties"]),
              "GET /pending/p1/%s: properties %r lack delivery mode" % (k, j["properties"]))

    def case_argument_errors():
        for path, want_st in (("/pending?route=p1&limit=0", 400), ("/pending?route=p1&limit=1001", 400),
                              ("/pending?route=p1&after=garbage", 400), ("/pending?route=nope", 404),
                              ("/pending", 400)):
            st, j = h.http_req(port, "GET", path)
            check(st == want_st, "GET %s: %d %r, expected %d" % (path, st, j, want_st))
        for path, want_st in (("/purge?route=nope", 404), ("/purge?route=p1&due_before=soon", 400),
                              ("/purge", 400)):
            st, j = h.http_req(port, "POST", path)
            check(st == want_st, "POST %s: %d %r, expected %d" % (path, st, j, want_st))
        st, _ = h.http_req(port, "GET", "/purge?route=p1")
        check(st == 405, "GET /purge: %d, expected 405" % st)
        st, _ = h.http_req(port, "GET", "/pending/p1/no-such-key")
        check(st == 404, "GET /pending/p1/no-such-key: %d" % st)
        st, _ = h.http_req(port, "GET", "/pending/p2/%s" % h.url_arg(k))
        check(st == 404, "GET /pending/p2/<a p1 key>: %d (keys are per route)" % st)

    # ---- purge p1 due before T (a due time in the middle: exclusive) ---------------------
    def case_purge_before():
        listed = st_.listed
        T = listed["p1"][len(listed["p1"]) // 2]["due_ms"]
        st_.before = [m for m in listed["p1"] if m["due_ms"] < T]
        st_.keep = [m for m in listed["p1"] if m["due_ms"] >= T]
        before, keep = st_.before, st_.keep
        check(any(m["due_ms"] == T for m in keep), "T is a due time")
        check(time.time() * 1000 < listed["p1"][0]["due_ms"] - 1000, "too slow: p1 began firing")
        st, removed = purge(port, "p1", T)
        check(st == 202, "a purge over %d+ message-table entries answered %d, expected 202" % (BULK, st))
        check(removed == len(before), "purge removed %d, expected %d (due before %d)" % (
            removed, len(before), T))
        check(h.route_metric(port, "delay_bridge_cancelled_total", "p1") == len(before) + 5,  # + 5 replaced
              "cancelled_total{p1} after the purge: %r"
              % h.route_metric(port, "delay_bridge_cancelled_total", "p1"))
        after = listing(port, "p1")
        check(after == keep, "/pending?route=p1 after the purge: %d messages, expected the %d due at or "
              "after T" % (len(after), len(keep)))
        check(listing(port, "p2") == listed["p2"], "the purge of p1 changed p2's listing")
        st, j = h.http_req(port, "GET", "/pending/p1/%s" % h.url_arg(before[0]["key"] or "none")) if any(
            m["key"] for m in before) else (404, None)
        check(st == 404, "a purged keyed message is still found by key: %d %r" % (st, j))

    # ---- kill -9 and restart: still purged -------------------------------------------
    def case_purge_survives_kill():
        b.kill9()
        b.start(timeout=60)
        now1 = listing(port, "p1")
        check(now1 == st_.keep, "after kill -9 + restart p1 lists %d, expected %d" % (
            len(now1), len(st_.keep)))
        check(listing(port, "p2") == st_.listed["p2"], "after kill -9 + restart p2 changed")

    # ---- purge racing with firing ------------------------------------------------------
    NR = 2000

    def case_purge_racing_firing():
        items = []
        for i in range(NR):
            items.append((rks[i % 3], b"r",
                          pika.BasicProperties(headers={"x-delay": h.i32(1000 + i)},
                                               message_id="race-%04d" % i, delivery_mode=2)))
        tr = time.monotonic()
        hl.publish_pipelined(rrace["ingress_exchange"], items)
        h.log("published %d race messages in %.2fs" % (NR, time.monotonic() - tr))
        time.sleep(max(0.0, tr + 1.8 - time.monotonic()))
        st_.snap = listing(port, "race")
        st_.Tr = int(time.time() * 1000) + 600
        Tr = st_.Tr
        Tiso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(Tr / 1000.0)) + ".%03dZ" % (Tr % 1000)
        delivered_before = {m.message_id for m in c.snapshot() if m.message_id.startswith("race-")}
        st, st_.removed_r = purge(port, "race", Tiso)
        h.log("race purge: %d listed just before, %d already delivered, %d removed (status %d)" % (
            len(st_.snap), len(delivered_before), st_.removed_r, st))
        check(st_.removed_r > 0, "the race purge removed nothing: the test did not race")
        check(len(delivered_before) > 0,
              "nothing had fired before the race purge: the test did not race")

    # ---- everything that should arrive does, once --------------------------------------
    def case_arrivals():
        keep, before, listed = st_.keep, st_.before, st_.listed
        want = {m["message_id"] for m in keep} | set(expect["p2"])
        last_due = max(m["due_ms"] for m in keep + listed["p2"])
        wait_s = (last_due - time.time() * 1000) / 1000.0 + 10
        try:
            c.wait_until(lambda ms: want.issubset({m.message_id for m in ms}), max(wait_s, 10),
                         "the %d unpurged p1/p2 messages" % len(want))
        finally:  # race_accounting judges whatever arrived
            st_.per = {}
            for m in c.quiet(1.5):
                st_.per.setdefault(m.message_id, []).append(m)
        per = st_.per
        dups = {k: len(v) for k, v in per.items() if len(v) > 1}
        check(not dups, "delivered more than once: %s" % sorted(dups.items())[:10])
        purged_p1 = {m["message_id"] for m in before} & set(per)
        check(not purged_p1, "purged p1 messages arrived: %s" % sorted(purged_p1)[:10])
        extra = {k for k in per if k.startswith("p")} - want
        check(not extra, "unexpected p1/p2 messages arrived: %s" % sorted(extra)[:10])
        for mid in want:
            m = per[mid][0]
            h.check_on_time(m, sent[mid][0], sent[mid][1] / 1000.0, mid, late=3.0)
            check(m.routing_key == expect[mid[:2]][mid]["rk"], "%s arrived with routing key %s" % (
                mid, m.routing_key))

    def case_race_accounting():
        per = st_.per
        check(per is not None, "no deliveries collected (arrivals did not get that far)")
        race_got = {k for k in per if k.startswith("race-")}
        race_all = {"race-%04d" % i for i in range(NR)}
        missing = race_all - race_got
        eligible = {m["message_id"] for m in st_.snap if m["due_ms"] < st_.Tr}
        check(missing <= eligible, "%d race message(s) neither delivered nor purgeable (not held, or "
              "due after T, when the purge started): %s" % (len(missing - eligible),
                                                            sorted(missing - eligible)[:10]))
        check(len(missing) == st_.removed_r, "race: %d delivered + %d removed != %d (%d missing)" % (
            len(race_got), st_.removed_r, NR, len(missing)))

    def case_all_fired():
        check(listing(port, "race") == [] and listing(port, "p1") == [] and listing(port, "p2") == [],
              "messages still held after everything fell due")
        st, j = h.http_req(port, "GET", "/pending?route=bulk&limit=3")
        check(st == 200 and j["count"] == 3 and j["next"], "bulk route listing: %d %r" % (st, j))

    # ---- a purge of everything: 1.2M messages, durable across kill -9 ----------------
    def case_purge_all():
        st, removed = purge(port, "bulk", "")
        check(removed == BULK, "purge of the whole bulk route removed %d, expected %d" % (
            removed, BULK))
        h.log("purged %d bulk messages" % removed)
        time.sleep(1.0)  # let the CANCEL records reach the disk (a purge answers before they do)
        b.kill9()
        b.start(timeout=60)
        st, j = h.http_req(port, "GET", "/pending?route=bulk&limit=3")
        check(st == 200 and j["count"] == 0, "after purging all and kill -9 + restart: %d %r" % (st, j))

    cases = h.Cases()
    cases.run("browse_p1", case_browse, "p1")
    cases.run("browse_p2", case_browse, "p2")
    cases.run("get_by_key", case_get_by_key)
    cases.run("argument_errors", case_argument_errors)
    cases.run("purge_before", case_purge_before, needs=["browse_p1", "browse_p2"])
    cases.run("purge_survives_kill", case_purge_survives_kill, needs="purge_before")
    cases.run("purge_racing_firing", case_purge_racing_firing)
    cases.run("arrivals", case_arrivals, needs="purge_before")
    cases.run("race_accounting", case_race_accounting, needs="purge_racing_firing")
    cases.run("all_fired", case_all_fired)
    cases.run("purge_all", case_purge_all)
    cases.run("clean_stop", lambda: b.stop(timeout=60))
    cases.done()

if __name__ == "__main__":
    h.run(test, budget_s=180)
