#!/usr/bin/python3
"""The status page (GET /ui) in a real headless browser (Debian's chromium).

A bridge with an HTTP token holds known messages: two routes, delays from
25 s to 400 days, some with x-delay-key. Chromium, driven over the DevTools
protocol (a tiny websocket client below: python's standard library only),
loads /ui and:

- the page says the bridge needs its token, and takes it typed into its field;
- the numbers on the page (held, per route pending / waiting / due / in
  flight / invalid / dead-lettered) are those of /stats;
- the chart's buckets (next hour per minute, next day per hour, next year
  per day), read off the SVG, are those of /due, and each known message is
  counted in the bucket its due time (from /pending) falls in;
- browsing a route lists its messages page by page (due, key, routing key,
  size; headers on demand);
- a key cancelled through the page (button, then the confirmation) is gone
  from /pending and never arrives, while its twin with the same delay does;
- drain behind its confirmation: "No, keep it" leaves the bridge running,
  "Yes" drains it and the bridge exits 0;
- the page made no request to any other origin (works offline), and at a
  phone's width (390 px) nothing but the tables' own scroll boxes overflows;
- a screenshot is kept: $DB_UI_SCREENSHOT (default: the test's temporary
  directory); README's screenshot is deploy/monitoring/status-page.png,
  made by this test.

Skipped (77) without chromium.
"""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

import harness as h
from harness import check

MIN, HOUR, DAY = 60000, 3600000, 86400000
TOKEN = "ui-test-token-0123456789"
AUTH = {"Authorization": "Bearer " + TOKEN}


class CDP(object):
    """The DevTools protocol over a minimal websocket client (RFC 6455:
    masked client frames, unmasked server frames, continuation frames)."""

    def __init__(self, ws_url):
        assert ws_url.startswith("ws://")
        hostport, path = ws_url[5:].split("/", 1)
        host, port = hostport.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.sock.recv(4096)
            check(chunk, "DevTools websocket closed during the handshake")
            buf += chunk
        head, self.rest = buf.split(b"\r\n\r\n", 1)
        check(b" 101 " in head.split(b"\r\n")[0], "DevTools handshake: %r" % head[:200])
        self.next_id = 0
        self.events = []

    def _read(self, n):
        while len(self.rest) < n:
            chunk = self.sock.recv(1 << 16)
            check(chunk, "DevTools websocket closed")
            self.rest += chunk
        out, self.rest = self.rest[:n], self.rest[n:]
        return out

    def _frame(self):
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        mask = self._read(4) if b1 & 0x80 else None
        data = self._read(n)
        if mask:
            data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
        return b0 & 0x80, b0 & 0x0F, data

    def _message(self):
        parts = []
        while True:
            fin, op, data = self._frame()
            if op == 8:
                h.fail("DevTools websocket closed by the browser")
            if op in (9, 10):
                continue
            parts.append(data)
            if fin:
                return json.loads(b"".join(parts).decode())

    def call(self, method, **params):
        self.next_id += 1
        payload = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        hdr = bytes([0x81])
        if len(payload) < 126:
            hdr += bytes([0x80 | len(payload)])
        elif len(payload) < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        mask = os.urandom(4)
        self.sock.sendall(hdr + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload)))
        while True:
            m = self._message()
            if m.get("id") == self.next_id:
                check("error" not in m, "DevTools %s: %s" % (method, m.get("error")))
                return m.get("result", {})
            self.events.append(m)

    def js(self, expr):
        """Evaluate expr in the page; its value (JSON-able)."""
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        check("exceptionDetails" not in r, "page script %r failed: %s" % (
            expr[:80], r.get("exceptionDetails")))
        return r["result"].get("value")

    def wait(self, expr, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.2)
        net = [(e["method"].split(".")[1], e["params"].get("request", e["params"].get("response", {})).get("url"),
                e["params"].get("response", {}).get("status"), e["params"].get("errorText"))
               for e in self.events if e.get("method", "").startswith("Network.") and
               e["method"] in ("Network.requestWillBeSent", "Network.responseReceived",
                               "Network.loadingFailed")]
        h.fail("page: %s not within %.0fs; network: %r" % (what, timeout, net[-12:]))


def start_chromium(ctx, *extra):
    """Headless chromium (with extra flags) and its DevTools client; Skip without it."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        raise h.Skip("chromium missing (apt-get install chromium)")
    port = h.free_port()
    profile = tempfile.mkdtemp(prefix="chromium-", dir=ctx.tmp)
    logf = open(os.path.join(ctx.tmp, "chromium.log"), "wb")
    args = [exe, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=%d" % port,
            "--user-data-dir=" + profile, "--window-size=1280,1500"] + list(extra) + ["about:blank"]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # chromium refuses root with its sandbox
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    ctx.ui_chromium = proc
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=2) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return proc, CDP(pages[0]["webSocketDebuggerUrl"])
        except OSError:
            pass
        check(proc.poll() is None, "chromium exited with %s (log: %s/chromium.log)" % (
            proc.returncode, ctx.tmp))
        time.sleep(0.2)
    h.fail("chromium's DevTools endpoint did not answer within 30 s")


def get(port, path, method="GET"):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, headers=AUTH)
        r = c.getresponse()
        return r.status, json.loads(r.read().decode() or "null")
    finally:
        c.close()


def page_numbers(cdp):
    return cdp.js("""(function () {
      var o = {held: +document.getElementById('held').dataset.value, routes: {}};
      document.querySelectorAll('#routes tbody tr').forEach(function (tr) {
        var r = {};
        tr.querySelectorAll('td[data-k]').forEach(function (td) {
          r[td.dataset.k] = td.textContent.replace(/,/g, '');
        });
        o.routes[tr.dataset.route] = r;
      });
      return o;
    })()""")


def chart(cdp, view):
    cdp.js("document.getElementById('tab-%s').click()" % view)
    return cdp.js("""Array.prototype.map.call(document.querySelectorAll('#chart rect.bucket'),
        function (r) { return [+r.dataset.start, +r.dataset.count]; })""")


def test(ctx):
    ex, qs = ctx.target("ui", "direct", ["a", "b"])
    cons = ctx.consumer([qs["a"], qs["b"]])
    ra = ctx.route("ui-a", ex, max_delay_ms=500 * DAY)  # the default stops at 49.7 days
    rb = ctx.route("ui-b", ex)
    # a retry route: its table and its per-queue browse (checked after the numbers)
    rc = {"name": "ui-retry", "ingress_exchange": ctx.n("ui.retry"),
          "ingress_queue": ctx.n("ui.retry.q"),
          "retry": {"initial_ms": 10 * MIN, "parking_exchange": ctx.n("ui.parked"),
                    "parking_queue": ctx.n("ui.parked"), "queue_pattern": h.queue_pattern(ctx.n("ui.work"))}}
    ctx.exchanges.add(rc["ingress_exchange"])
    ctx.queues.add(rc["ingress_queue"])
    ctx.exchanges.add(rc["retry"]["parking_exchange"])
    ctx.queues.add(rc["retry"]["parking_queue"])
    port = h.free_port()
    b = ctx.bridge([ra, rb, rc], name="ui", start=False, http={"listen": "127.0.0.1:%d" % port})
    b.start(env={"DELAY_BRIDGE_HTTP_TOKEN": TOKEN})

    proc, cdp = start_chromium(ctx)
    try:
        run_page(ctx, b, port, ra, rb, rc, cons, cdp)
    finally:
        proc.kill()
        proc.wait()


def retry_table(ctx, port, rc, cdp):
    """One message rejected by a work queue whose dead-letter exchange is the
    retry route's: the page's retry table shows it, and "waiting" lists it."""
    work = ctx.n("ui.work")
    ch = ctx.admin()
    ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": rc["ingress_exchange"]})
    ctx.queues.add(work)
    ch.basic_publish("", work, b"ui-retry")
    m = None
    for _ in range(100):
        m = ch.basic_get(work)[0]
        if m:
            break
        time.sleep(0.05)
    check(m is not None, "the work queue's message did not arrive")
    ch.basic_reject(m.delivery_tag, requeue=False)
    row = cdp.wait("(function(){var tr=document.querySelector('#retry tbody tr');"
                   "return !document.getElementById('retry-section').hidden && tr && "
                   "tr.querySelector('td[data-k=retries]').textContent === '1' && "
                   "[tr.dataset.route, tr.dataset.queue];})()", 20, "the retry table")
    check(row == [rc["name"], work], "retry row %r" % row)
    cdp.js("document.querySelector('#retry tbody tr button.show-retries').click()")
    rks = cdp.wait("(function(){var r=document.querySelectorAll('#pending tbody tr');"
                   "if (document.getElementById('pending').dataset.loading) return null;"
                   "return r.length ? Array.prototype.map.call(r, function(t){"
                   "return t.cells[2].textContent;}) : null;})()", 15, "the queue's retries")
    check(rks == [work], "the retries listed for %s: %r" % (work, rks))
    h.log("retry table: %r; its waiting retries listed by queue" % row)


def run_page(ctx, b, port, ra, rb, rc, cons, cdp):
    p = ctx.publisher()
    # route a: 25 s x2 (one cancelled through the page), 10 min x5, 3 h x7,
    # 10 days x4, 400 days x2; route b: 20 min x3, 2 invalid x-delay.
    plan = [("a", 25000, 2), ("a", 10 * MIN, 5), ("a", 3 * HOUR, 7), ("a", 10 * DAY, 4),
            ("a", 400 * DAY, 2), ("b", 20 * MIN, 3)]
    n = 0
    for rk, delay, count in plan:
        for i in range(count):
            n += 1
            ingress = ra if rk == "a" else rb
            p.publish(ingress["ingress_exchange"], rk, b"ui-%d" % n,
                      headers={"x-delay": delay, "x-delay-key": "k-%d" % n})
    for i in range(2):
        p.publish(rb["ingress_exchange"], "b", b"bad", headers={"x-delay": "soon"})
    held = n

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        st, s = get(port, "/stats")
        if st == 200 and s["held"] == held and sum(r["invalid_delay"] for r in s["routes"]) == 2:
            break
        time.sleep(0.2)
    check(s["held"] == held, "/stats held %r, expected %d" % (s.get("held"), held))

    cdp.call("Network.enable")
    cdp.call("Page.enable")
    cdp.call("Runtime.enable")
    cdp.call("Emulation.setDeviceMetricsOverride", width=1280, height=1500, deviceScaleFactor=1,
             mobile=False)
    ui = "http://127.0.0.1:%d/ui" % port
    cdp.call("Page.navigate", url=ui)
    cdp.wait("document.readyState === 'complete'", 15, "the page loaded")

    # The token: asked for, then typed in.
    notice = cdp.wait("(function(){var n=document.getElementById('notice');"
                      "return !n.hidden && n.textContent;})()", 15, "the token notice")
    check("HTTP token" in notice, "notice without the token: %r" % notice)
    h.log("page without the token: %r" % notice)
    cdp.js("document.getElementById('token').value = %s;"
           "document.getElementById('token-save').click()" % json.dumps(TOKEN))
    cdp.wait("document.getElementById('held').dataset.value !== ''", 15, "the numbers")
    cdp.wait("document.querySelectorAll('#chart rect.bucket').length === 60", 15, "the chart")

    # Numbers: page vs /stats.
    got = page_numbers(cdp)
    st, s = get(port, "/stats")
    check(got["held"] == s["held"] == held, "held: page %r, /stats %r, published %d" % (
        got["held"], s["held"], held))
    for r in s["routes"]:
        pr = got["routes"].get(r["name"])
        check(pr is not None, "route %s missing from the page" % r["name"])
        for k in ("pending", "waiting", "due", "inflight", "invalid_delay", "dead_lettered"):
            check(int(pr[k]) == r[k], "route %s %s: page %r, /stats %r" % (r["name"], k, pr[k], r[k]))
    h.log("page numbers = /stats: held %d, %s" % (got["held"], {
        k: (v["pending"], v["invalid_delay"]) for k, v in got["routes"].items()}))

    # The chart: page vs /due, and every known message in its bucket.
    st, due = get(port, "/due")
    check(st == 200, "/due: %d" % st)
    dues = [m["due_ms"] for r in (ra, rb) for m in h.pending_all(port, r["name"], headers=AUTH)]
    check(len(dues) == held, "/pending lists %d messages, expected %d" % (len(dues), held))
    waiting = sum(r["waiting"] for r in s["routes"])
    check(due["total"] == waiting, "/due total %d, /stats waiting %d" % (due["total"], waiting))
    for view, step, nb in (("minutes", MIN, 60), ("hours", HOUR, 24), ("days", DAY, 365)):
        for _ in range(3):
            # the page and this test may read /due either side of a minute's end:
            # then wait for the page's next refresh (every 5 s)
            bars = chart(cdp, view)
            st, due = get(port, "/due")
            if bars and bars[0][0] == due[view]["start_ms"]:
                break
            time.sleep(5.5)
        check(len(bars) == nb, "%s: %d bars, expected %d" % (view, len(bars), nb))
        check([c for _, c in bars] == due[view]["counts"],
              "%s: page %r, /due %r" % (view, [c for _, c in bars], due[view]["counts"]))
        start = bars[0][0]
        check(start == due[view]["start_ms"], "%s: page starts at %d, /due at %d" % (
            view, start, due[view]["start_ms"]))
        want = [0] * nb
        for t in dues:
            i = max(0, (t - start) // step)
            if i < nb:
                want[i] += 1
        check([c for _, c in bars] == want, "%s: page %r, from the due times %r" % (
            view, [c for _, c in bars], want))
    check(due["later"] == 2, "/due later %d, expected the 2 messages due in 400 days" % due["later"])
    h.log("chart = /due = the due times: minutes %d, hours %d, days %d in view, %d later" % (
        sum(due["minutes"]["counts"]), sum(due["hours"]["counts"]), sum(due["days"]["counts"]),
        due["later"]))
    # Browse route a, page 1 of 50, and open one message's headers.
    cdp.js("var s=document.getElementById('browse-route'); s.value=%s; "
           "document.getElementById('browse-first').click()" % json.dumps(ra["name"]))
    rows = cdp.wait("(function(){var r=document.querySelectorAll('#pending tbody tr');"
                    "if (document.getElementById('pending').dataset.loading) return null;"
                    "return r.length ? Array.prototype.map.call(r, function(t){"
                    "return t.dataset.key;}) : null;})()", 15, "the pending rows")
    check(rows[:2] == ["k-1", "k-2"], "first rows of route a: %r" % rows[:4])
    check(len(rows) == 20, "route a lists %d rows on its first page, expected 20" % len(rows))
    cdp.js("document.querySelector('#pending tbody tr[data-key=\"k-1\"] button.hdr').click()")
    hdr = cdp.wait("(function(){var td=document.querySelector('#pending tbody tr[data-key=\"k-1\"]')"
                   ".cells[4]; return !td.querySelector('button') && td.textContent;})()", 10,
                   "a message's headers")
    check("x-delay-key" in hdr, "headers shown for k-1: %r" % hdr)

    # Cancel k-2 through the page: button, confirmation, done.
    cdp.js("document.querySelector('#pending tbody tr[data-key=\"k-2\"] button.cancel').click()")
    text = cdp.wait("(function(){var m=document.getElementById('modal');"
                    "return !m.hidden && document.getElementById('modal-text').textContent;})()",
                    5, "the confirmation")
    check("k-2" in text, "confirmation names the key: %r" % text)
    cdp.js("document.getElementById('modal-yes').click()")
    res = cdp.wait("document.getElementById('action-result').textContent", 10, "the cancel result")
    check(res.startswith("cancelled key k-2"), "cancel result on the page: %r" % res)
    st, j = get(port, "/pending/%s/k-2" % ra["name"])
    check(st == 404, "k-2 still pending after the cancel: %d %r" % (st, j))
    h.log("k-2 cancelled through the page: %r" % res)

    retry_table(ctx, port, rc, cdp)

    # Offline: every request the page made went to the bridge itself.
    urls = [e["params"]["request"]["url"] for e in cdp.events
            if e.get("method") == "Network.requestWillBeSent"]
    foreign = [u for u in urls if not u.startswith("http://127.0.0.1:%d/" % port)]
    check(urls and not foreign, "requests to other origins: %r" % foreign)
    h.log("%d requests, all to the bridge" % len(urls))
    errors = [e["params"]["exceptionDetails"].get("text") for e in cdp.events
              if e.get("method") == "Runtime.exceptionThrown"]
    check(not errors, "the page's script threw: %r" % errors)

    # The screenshot (desktop), then the phone width.
    shot = os.environ.get("DB_UI_SCREENSHOT") or os.path.join(ctx.tmp, "status-page.png")
    cdp.js("document.getElementById('tab-hours').click(); window.scrollTo(0, 0)")
    time.sleep(0.5)
    png = base64.b64decode(cdp.call("Page.captureScreenshot", format="png")["data"])
    with open(shot, "wb") as f:
        f.write(png)
    h.log("screenshot: %s (%d bytes)" % (shot, len(png)))
    cdp.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2,
             mobile=True)
    time.sleep(0.5)
    over = cdp.js("document.documentElement.scrollWidth")
    check(over <= 400, "at 390 px the page is %d px wide: it overflows a phone" % over)

    # k-1 (same delay) arrives; k-2 never does.
    msgs = cons.wait_until(lambda m: any(x.body == b"ui-1" for x in m), 60, "k-1 to arrive")
    time.sleep(3)
    bodies = [x.body for x in cons.snapshot()]
    check(b"ui-2" not in bodies, "the key cancelled through the page arrived: %r" % bodies)
    h.log("k-1 arrived, k-2 (cancelled through the page) did not: %r" % bodies)

    # Drain through the page: "No" keeps the bridge running; "Yes" drains it,
    # and the bridge exits 0 once every held message is handed back.
    cdp.call("Emulation.setDeviceMetricsOverride", width=1280, height=1500, deviceScaleFactor=1,
             mobile=False)
    cdp.js("document.getElementById('drain').click()")
    cdp.wait("!document.getElementById('modal').hidden", 5, "the drain confirmation")
    cdp.js("document.getElementById('modal-no').click()")
    time.sleep(1)
    st, s = get(port, "/stats")
    check(st == 200 and not s.get("drain"), "'No, keep it' drained the bridge: %r" % s.get("drain"))
    cdp.js("document.getElementById('drain').click()")
    text = cdp.wait("(function(){var m=document.getElementById('modal');"
                    "return !m.hidden && document.getElementById('modal-text').textContent;})()",
                    5, "the drain confirmation")
    check("Drain" in text, "drain confirmation: %r" % text)
    cdp.js("document.getElementById('modal-yes').click()")
    res = cdp.wait("(function(){var t=document.getElementById('action-result').textContent;"
                   "return /draining/.test(t) && t;})()", 10, "the drain result")
    check(res.startswith("draining"), "drain result on the page: %r" % res)
    rc = b.wait_exit(60, "the bridge did not exit within 60 s of a drain started from the page")
    check(rc == 0, "the bridge exited %d after a drain started from the page" % rc)
    h.log("drained through the page: %r; the bridge exited 0" % res)


if __name__ == "__main__":
    h.run(test, budget_s=200)
