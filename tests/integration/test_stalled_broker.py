#!/usr/bin/python3
"""A broker that stops reading the publisher's socket without saying so
(no connection.blocked), and a broker that goes silent. The bridge talks to
the broker through a TCP proxy in this test that can stall one direction of
one connection: it finds the publisher's by the connection name in its
connection.start-ok ("delay-bridge publisher").

Part 1, the broker stops reading. 800 messages of 16 KiB (delays 7-12 s)
are held; before the first falls due, the proxy stops reading what the
publisher writes (its receive buffer is 64 KiB), for 12 s. 12.8 MB cannot
fit the socket buffers, so a publisher that wrote with blocking send()
would stall the whole loop. While the stall lasts:

- /healthz answers every time within 1 s (no stretch of 1.5 s without an
  answer): the loop keeps turning;
- the consumer keeps taking deliveries: 200 more messages published to the
  ingress exchange during the stall reach received_total;
- timers keep running: waiting_messages falls as batch A falls due;
- the publisher is not "blocked" (the broker sent no connection.blocked):
  it is the nonblocking write path, not the alarm flag, that keeps the loop
  free; and the connection stays up (nothing is lost, nothing republished).

Then the proxy reads again: every message arrives once (tally: lost 0,
duplicates 0), bodies intact, none early.

Part 2, heartbeats (heartbeat_s 2). The publisher keeps the connection's
heartbeats itself: an idle connection must stay up for 8 s (the broker
would close one that sent nothing for two intervals; the bridge must not
mistake a quiet broker for a dead one). Then the proxy black-holes the
publisher's connection both ways: the bridge logs "missed heartbeats"
within 2 x 2 s (+ slack), reconnects, and the 50 held messages all arrive.
"""

import socket
import threading
import time
import urllib.parse

import harness as h
from harness import check
from test_alarm import Prober  # one copy of the /healthz and /metrics prober

N_A = 800
A_DELAY_MS = 7000  # the first of batch A; 4.4 s of publishing seen under load
BODY = 16 * 1024
N_B = 200
STALL_S = 12.0
N_HB = 50
free_port = h.free_port


class Link(object):
    """One proxied connection: client <-> broker, each direction a thread."""

    def __init__(self, proxy, client):
        self.proxy = proxy
        self.client = client
        self.upstream = socket.create_connection(proxy.upstream, timeout=10)
        self.upstream.settimeout(None)
        self.name = None
        self.sniffed = b""
        self.stall_up = threading.Event()    # stop reading what the client writes
        self.stall_down = threading.Event()  # stop reading what the broker writes
        self.closed = threading.Event()
        for src, dst, stall, up in ((client, self.upstream, self.stall_up, True),
                                    (self.upstream, client, self.stall_down, False)):
            threading.Thread(target=self._pump, args=(src, dst, stall, up), daemon=True).start()

    def _pump(self, src, dst, stall, up):
        try:
            while not self.closed.is_set():
                if stall.is_set():
                    time.sleep(0.02)
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if up and self.name is None and len(self.sniffed) < 4096:
                    self.sniffed += data
                    if b"delay-bridge publisher" in self.sniffed:
                        self.name = "publisher"
                    elif b"delay-bridge consumer" in self.sniffed:
                        self.name = "consumer"
                dst.sendall(data)
        except OSError:
            pass
        self.close()

    def close(self):
        if self.closed.is_set():
            return
        self.closed.set()
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class Proxy(object):
    def __init__(self, upstream):
        self.upstream = upstream
        self.links = []
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted sockets inherit it: a stalled reader fills up after 64 KiB
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                self.links.append(Link(self, c))
            except OSError:
                c.close()

    def publisher(self, timeout=10, not_this=None):
        """The open link of the bridge's publisher connection (other than not_this)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [l for l in self.links if l.name == "publisher" and not l.closed.is_set()
                    and l is not not_this]
            if live:
                return live[-1]
            time.sleep(0.05)
        h.fail("no publisher connection through the proxy after %.0fs" % timeout)

    def close(self):
        self.ls.close()
        for l in self.links:
            l.close()


def proxied_uri(port):
    u = urllib.parse.urlsplit(h.broker_uri())
    netloc = "%s@127.0.0.1:%d" % (u.netloc.rsplit("@", 1)[0], port) if "@" in u.netloc \
        else "127.0.0.1:%d" % port
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


def upstream_addr():
    u = urllib.parse.urlsplit(h.broker_uri())
    return (u.hostname or "127.0.0.1", u.port or 5672)


def stalled_reader(ctx, proxy):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = free_port()
    route = ctx.route("stall", ex)
    b = ctx.bridge([route], name="stall", broker={"uri": proxied_uri(proxy.port)},
                   http={"listen": "127.0.0.1:%d" % port})
    p = ctx.publisher()
    sent = {}
    t0 = time.monotonic()
    for i in range(N_A):
        ms = A_DELAY_MS + (i * 5000) // N_A
        mid = "a%04d" % i
        t = p.publish(route["ingress_exchange"], "rk", bytes([65 + i % 26]) * BODY,
                      headers={"x-delay": h.i32(ms)}, message_id=mid, delivery_mode=2)
        sent[mid] = (t + ms / 1000.0, ms / 1000.0)
    ctx.wait_taken(port, route["ingress_queue"], N_A, 20, "the bridge to take batch A")
    link = proxy.publisher()
    h.log("published %d x %d KiB in %.1fs; stalling the publisher's socket (proxy stops "
          "reading) %.1fs before the first falls due"
          % (N_A, BODY // 1024, time.monotonic() - t0, A_DELAY_MS / 1000.0 - (time.monotonic() - t0)))
    check(c.count() == 0, "messages arrived before their %d s delay" % (A_DELAY_MS // 1000))

    prober = Prober(port, "stall", b.proc.pid)
    link.stall_up.set()
    t_on = time.monotonic()
    try:
        time.sleep(2.0)
        for i in range(N_B):
            mid = "b%04d" % i
            t = p.publish(route["ingress_exchange"], "rk", b"b" * 256,
                          headers={"x-delay": h.i32(1000)}, message_id=mid, delivery_mode=2)
            sent[mid] = (t + 1.0, 1.0)
        while time.monotonic() < t_on + STALL_S:
            b.check_alive()
            time.sleep(0.25)
        arrived_in_stall = c.count()
    finally:
        link.stall_up.clear()
        t_off = time.monotonic()
    p.close()

    problems = []
    _, stalled = prober.loop_check(t_on, t_off, "the stall")
    if stalled:
        problems.append(stalled)
    h.log("%d message(s) reached the target during the stall" % arrived_in_stall)
    during = prober.between(t_on, t_off)
    if not during:
        problems.append("/metrics never answered during the stall")
    if any(s.get("blocked") == 1 for s in during):
        problems.append("the publisher was reported blocked: the test meant a broker that stops "
                        "reading without connection.blocked")
    if not any((s.get("received") or 0) >= N_A + N_B for s in during):
        problems.append("the consumer did not take batch B during the stall: received_total "
                        "reached %s of %d" % (max((s.get("received") or 0) for s in during)
                                              if during else None, N_A + N_B))
    waits = [s.get("waiting") for s in during if s.get("waiting") is not None]
    if not waits or not min(waits) < max(waits):
        problems.append("timers did not run during the stall: waiting_messages %s"
                        % (sorted(set(waits))[:5] if waits else "never read"))
    else:
        h.log("timers ran: waiting_messages went from %d to %d during the stall; in flight at "
              "the end: %s" % (max(waits), min(waits), during[-1].get("inflight")))
    if arrived_in_stall >= N_A:
        problems.append("every message arrived during the stall: the proxy did not stall "
                        "the publisher (nothing was tested)")

    c.wait_ids(sent.keys(), 60)
    msgs = c.quiet(1.5)
    t = h.tally(sent.keys(), msgs)
    h.log("after the stall (the last arrived %.1fs after it ended): %s"
          % (max((m.t for m in msgs), default=t_off) - t_off, h.tally_line(t)))
    check(not t["lost"], "%d message(s) never arrived: %s" % (len(t["lost"]), t["lost"][:20]))
    check(not t["unknown"], "unknown message ids arrived: %s" % t["unknown"][:20])
    check(t["duplicates"] == 0, "%d duplicate(s): the connection was lost and messages "
          "republished (%s)" % (t["duplicates"], h.tally_line(t)))
    early = [mid for mid, (due, _) in sent.items()
             if min(m.t for m in t["per_id"][mid]) < due - h.early_tolerance()]
    check(not early, "%d message(s) arrived EARLY: %s" % (len(early), early[:10]))
    bad = [mid for mid in sent if mid.startswith("a")
           and any(m.body != bytes([65 + int(mid[1:]) % 26]) * BODY for m in t["per_id"][mid])]
    check(not bad, "bodies changed: %s" % bad[:10])
    check("publisher connection lost" not in b.log_text(),
          "the publisher connection was lost during the stall")
    prober.stop()
    b.stop()
    c.close()
    if problems:
        h.fail("while the broker did not read the publisher's socket:\n  - " +
               "\n  - ".join(problems))


def heartbeats(ctx, proxy):
    ex, qs = ctx.target("hbtarget", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("hb", ex)
    b = ctx.bridge([route], name="hb", broker={"uri": proxied_uri(proxy.port), "heartbeat_s": 2})
    check('heartbeat_s=2' in b.log_text(), "the publisher did not log heartbeat_s=2 at connect")
    first = proxy.publisher()
    h.log("idle for 8 s with heartbeat_s 2 (the broker drops a client silent for 2 intervals)")
    time.sleep(8.0)
    b.check_alive()
    text = b.log_text()
    check("publisher connection lost" not in text and first.name == "publisher"
          and not first.closed.is_set(),
          "the idle publisher connection did not stay up with heartbeat_s 2:\n%s"
          % "\n".join(l for l in text.splitlines() if "publish" in l)[-2000:])

    p = ctx.publisher()
    sent = {}
    for i in range(N_HB):
        mid = "h%03d" % i
        t = p.publish(route["ingress_exchange"], "rk", b"hb", headers={"x-delay": h.i32(6000)},
                      message_id=mid, delivery_mode=2)
        sent[mid] = (t + 6.0, 6.0)
    p.close()
    ctx.wait_drained(route["ingress_queue"], 20)
    h.log("black-holing the publisher's connection both ways")
    first.stall_up.set()
    first.stall_down.set()
    t0 = time.monotonic()
    b.wait_log("missed heartbeats", 10, "missed heartbeats")
    h.log("the bridge gave up on the silent broker after %.1fs" % (time.monotonic() - t0))
    proxy.publisher(not_this=first)  # the bridge reconnected
    c.wait_ids(sent.keys(), 30)
    t = h.tally(sent.keys(), c.quiet(1.0))
    h.log("after reconnecting: " + h.tally_line(t))
    check(not t["lost"], "%d message(s) never arrived: %s" % (len(t["lost"]), t["lost"][:20]))
    check(t["duplicates"] == 0, "held (not in flight) when the connection was dropped, yet "
          "delivered twice: %s" % h.tally_line(t))
    first.close()
    b.stop()


def test(ctx):
    check(not h.broker_uri().startswith("amqps:"), "this test proxies a plain TCP broker URI")
    proxy = Proxy(upstream_addr())
    try:
        stalled_reader(ctx, proxy)
        heartbeats(ctx, proxy)
    finally:
        proxy.close()


if __name__ == "__main__":
    h.run(test, budget_s=180)
