#!/usr/bin/python3
"""The HTTP endpoint of a running daemon, with a real HTTP client.

- /healthz, /readyz, /metrics (Prometheus text, per-route series that
  follow what the bridge holds) and /stats (JSON) answer; 404 for an unknown
  path, 405 with Allow for a known path with another method;
- a slowloris client (half a request, then silence) and a request with a
  1 MiB header never stall message flow or the endpoint;
- with DELAY_BRIDGE_HTTP_TOKEN set, everything but the probes needs the
  bearer token;
- readiness flips to 503 (with the reason) while the broker is stopped and
  back to 200 once it returns, while /healthz stays 200 (needs a broker the
  suite owns; that part is skipped otherwise);
- a listen address already in use stops the daemon at start with exit 1
  and a message naming the address.
"""

import http.client
import json
import os
import socket
import time

import harness as h
from harness import check


free_port = h.free_port  # one copy, in harness.py


def get(port, path, method="GET", headers=None, timeout=5.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace")
    finally:
        c.close()


def check_endpoints(ctx, b, port, route):
    st, hd, body = get(port, "/healthz")
    check(st == 200 and body == "ok\n", "/healthz: %d %r" % (st, body))
    st, hd, body = get(port, "/readyz")
    check(st == 200 and body == "ready\n", "/readyz while ready: %d %r" % (st, body))

    st, hd, body = get(port, "/metrics")
    check(st == 200, "/metrics: %d" % st)
    check(hd.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          "/metrics content type %r" % hd.get("Content-Type"))
    for family in ("delay_bridge_pending_messages", "delay_bridge_received_total",
                   "delay_bridge_published_total", "delay_bridge_fire_lateness_seconds",
                   "delay_bridge_wal_bytes", "delay_bridge_wal_fsync_seconds",
                   "delay_bridge_broker_connected", "delay_bridge_build_info"):
        check("# TYPE %s " % family in body, "/metrics lacks the %s family" % family)
    check(h.metric_value(body, "delay_bridge_broker_connected", 'connection="consumer"') == 1,
          "consumer not connected in /metrics")

    # 20 messages held for a minute show up as pending, per route.
    p = ctx.publisher()
    for i in range(20):
        p.publish(route["ingress_exchange"], "rk", b"held", headers={"x-delay": h.i32(60000)},
                  message_id="held-%d" % i, delivery_mode=2)
    p.close()
    ctx.wait_drained(route["ingress_queue"], 10)
    lbl = 'route="%s"' % route["name"]
    h.wait_for("20 pending in /metrics",
               lambda: h.metric_value(get(port, "/metrics")[2], "delay_bridge_pending_messages",
                                      lbl) == 20, 5)
    body = get(port, "/metrics")[2]
    check(h.metric_value(body, "delay_bridge_received_total", lbl) == 20, "received_total != 20")
    check(h.metric_value(body, "delay_bridge_held_messages") == 20, "held_messages != 20")

    st, hd, body = get(port, "/stats")
    check(st == 200 and hd.get("Content-Type", "").startswith("application/json"), "/stats: %d" % st)
    s = json.loads(body)
    check(s["held"] == 20 and s["ready"] is True, "/stats: held %r ready %r" % (s["held"], s["ready"]))
    r = [x for x in s["routes"] if x["name"] == route["name"]]
    check(len(r) == 1 and r[0]["pending"] == 20 and r[0]["waiting"] == 20,
          "/stats route figures: %r" % r)
    check(s["connections"] == {"consumer": "up", "publisher": "up",
                               "vhosts": [{"vhost": "/", "consumer": "up", "publisher": "up",
                                           "routes": 1}]},
          "/stats connections %r" % s["connections"])

    # Ten fired: each firing stage counted once per message, as the lateness is (issue 41).
    p = ctx.publisher()
    for i in range(10):
        p.publish(route["ingress_exchange"], "rk", b"soon", headers={"x-delay": h.i32(100)},
                  message_id="soon-%d" % i, delivery_mode=2)
    p.close()
    h.wait_for("10 fired in /metrics",
               lambda: h.metric_value(get(port, "/metrics")[2],
                                      "delay_bridge_fire_lateness_seconds_count", lbl) == 10, 10)
    body = get(port, "/metrics")[2]
    for stage in ("wake", "read", "write", "confirm"):
        n = h.metric_value(body, "delay_bridge_fire_stage_seconds_count", '%s,stage="%s"' % (lbl, stage))
        check(n == 10, "fire_stage_seconds_count{stage=%s}: %r, want 10" % (stage, n))
    s = json.loads(get(port, "/stats")[2])
    r = [x for x in s["routes"] if x["name"] == route["name"]][0]
    check(all(r["fire_stages"][k]["count"] == 10 for k in ("wake", "read", "write", "confirm")),
          "/stats fire_stages: %r" % r.get("fire_stages"))

    st, _, _ = get(port, "/nope")
    check(st == 404, "/nope: %d, expected 404" % st)
    st, hd, _ = get(port, "/metrics", method="POST", headers=h.CHANGE_HEADERS)
    check(st == 405 and "GET" in hd.get("Allow", ""), "POST /metrics: %d Allow=%r" % (st, hd.get("Allow")))
    st, _, body = get(port, "/healthz", method="HEAD")
    check(st == 200 and body == "", "HEAD /healthz: %d %r" % (st, body))


def check_hostile_clients(ctx, port, route, c):
    # A slowloris client: half a request, then silence, held open.
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    # A request with a 1 MiB header.
    big = socket.create_connection(("127.0.0.1", port))
    big.settimeout(10)
    status = b""
    try:
        big.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
    except OSError:
        pass  # the server may close before reading it all: refused, which is fine
    try:
        status = big.recv(64)
    except OSError:
        pass
    check(status == b"" or b" 431 " in status or b" 413 " in status or b" 400 " in status,
          "a 1 MiB header got %r" % status[:40])
    big.close()

    # Message flow and the endpoint go on while the slow client hangs.
    p = ctx.publisher()
    sent = {}
    for i in range(50):
        mid = "flow-%02d" % i
        sent[mid] = p.publish(route["ingress_exchange"], "rk", b"x", headers={"x-delay": h.i32(500)},
                              message_id=mid)
    p.close()
    t0 = time.monotonic()
    st, _, _ = get(port, "/healthz", timeout=2)
    check(st == 200 and time.monotonic() - t0 < 1.0, "/healthz slow beside a slowloris client")
    msgs = c.wait_ids(sent.keys(), 15)
    for m in msgs:
        if m.message_id in sent:
            h.check_on_time(m, sent[m.message_id], 0.5, m.message_id)
    slow.close()


def check_token(ctx, route):
    port = free_port()
    b = ctx.bridge([route], name="token", http={"listen": "127.0.0.1:%d" % port}, start=False)
    b.start(env={"DELAY_BRIDGE_HTTP_TOKEN": "t0k-en"})
    st, hd, _ = get(port, "/metrics")
    check(st == 401 and hd.get("WWW-Authenticate", "").startswith("Bearer"),
          "/metrics without the token: %d" % st)
    st, _, _ = get(port, "/metrics", headers={"Authorization": "Bearer wrong"})
    check(st == 401, "/metrics with a wrong token: %d" % st)
    st, _, _ = get(port, "/metrics", headers={"Authorization": "Bearer t0k-en"})
    check(st == 200, "/metrics with the token: %d" % st)
    for probe in ("/healthz", "/readyz"):
        st, _, _ = get(port, probe)
        check(st == 200, "%s must stay open for probes: %d" % (probe, st))
    check("t0k-en" not in b.log_text(), "the token appears in the log")
    b.stop()


def check_readiness_flip(port, b):
    if not os.environ.get("DB_TEST_BROKER_DIR"):
        h.log("skipping the readiness flip: the suite does not own the broker")
        return
    try:
        h.broker_stop()
        st, body = h.wait_for("/readyz 503 while the broker is down",
                              lambda: (lambda r: (r[0], r[2]) if r[0] == 503 else None)(
                                  get(port, "/readyz")),
                              30)
        check("connection down" in body, "/readyz reason: %r" % body)
        st, _, _ = get(port, "/healthz")
        check(st == 200, "/healthz while the broker is down: %d" % st)
        s = json.loads(get(port, "/stats")[2])
        check(s["ready"] is False and s["reason"], "/stats while the broker is down: %r" % s["reason"])
    finally:
        h.broker_start()
    h.wait_for("/readyz 200 after the broker returned", lambda: get(port, "/readyz")[0] == 200, 60)
    b.check_alive()


def check_port_in_use(ctx, route, port):
    b = ctx.bridge([route], name="clash", http={"listen": "127.0.0.1:%d" % port}, start=False)
    b.start(wait_ready=False)
    rc = b.wait_exit(20, "a bridge whose HTTP port is taken did not exit")
    check(rc == 1, "port in use: exit code %d, expected 1" % rc)
    text = b.log_text()
    check("cannot start the HTTP endpoint" in text and str(port) in text,
          "port in use: no clear message in the log:\n%s" % text[-600:])


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("http", ex)
    port = free_port()
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port})
    check_endpoints(ctx, b, port, route)
    check_hostile_clients(ctx, port, route, c)
    check_port_in_use(ctx, route, port)
    check_readiness_flip(port, b)
    b.stop()
    check_token(ctx, ctx.route("http2", ex))


if __name__ == "__main__":
    h.run(test, budget_s=240)
