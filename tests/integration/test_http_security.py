#!/usr/bin/python3
"""No stranger changes anything over HTTP (issue 39, item 4).

The adversaries: a web page in the operator's browser, which can make the
browser send requests to 127.0.0.1:9800 (cross-site, or after DNS
rebinding evil.example to 127.0.0.1), and a neighbour on the network who
has no token. Each case below is one named check, reported on its own line
("case NAME: ok" or "case NAME: FAIL ..."); the test fails if any did.

Against a bridge on loopback with NO token (where a browser is the only
stranger who can reach it) that holds HELD messages on one route:

  cross_site_drain   POST /drain with Origin: https://evil.example and/or
                     Sec-Fetch-Site: cross-site is refused (403); the bridge
                     is still running, not draining, still ready;
  cross_site_purge   POST /purge?route=R, the same: 403, nothing purged;
  cross_site_read    GET /stats and /pending with those headers: 403 (a
                     page must not read what is held either);
  simple_post        CORS "simple" changes (Content-Type text/plain, a form's
                     application/x-www-form-urlencoded, no header at all)
                     to /purge, /drain and DELETE /pending: 403, nothing
                     purged or cancelled;
  rebinding          Host: evil.example:PORT (DNS rebinding) refused for
                     GET /stats, GET /pending and PUT /routes/NAME (421), and
                     the route was not created;
  headers            X-Frame-Options: DENY and X-Content-Type-Options:
                     nosniff on /ui, /stats, /metrics, /healthz and on a
                     refusal; /ui has a CSP with frame-ancestors 'none';
  browser            the same in a real browser (headless chromium; skipped
                     without it): a page on another site (localhost:EP)
                     fires a no-cors POST /drain, a text/plain POST /purge,
                     a form's POST /purge and a fetch of /stats; a page of
                     the rebound origin evil.example:PORT (chromium maps
                     the name to 127.0.0.1) fetches /stats and /pending.
                     Nothing drained, purged or read;
  own_clients        what the project's own clients send still works: the
                     same-origin page's requests (Origin = its own, X-Delay-
                     Bridge), `delay-bridge cancel` (DELETE) -- the drain at
                     the end is `delay-bridge drain`, which exits 0;
  start_refused      http.listen 0.0.0.0 (allow_remote) without
                     DELAY_BRIDGE_HTTP_TOKEN: the daemon and --check-config
                     exit 3 with one line naming http.listen and the
                     variable; with the token --check-config passes;
  token_first        against a bridge WITH a token: a POST that declares a
                     60 KiB body and a wrong token gets 401 from its headers
                     alone (the body is never sent: the old code waited for
                     it); the same with the whole 60 KiB sent, a PUT
                     /routes whose body is a valid route: 401, no route,
                     and the body's marker never in the log.
"""

import http.client
import json
import os
import socket
import time

import harness as h
from harness import check

HELD = 20
EVIL = "https://evil.example"
TOKEN = "sec-test-token-" + "9" * 24


def raw(port, method, path, headers=None, body=None, timeout=10.0):
    """(status, {header: value}, body text) of one request sent exactly as
    given: no header is added (Host included, when headers has one)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def pending(port, route):
    s = h.stats(port)
    return [r for r in s["routes"] if r["name"] == route][0]["pending"]


def bridge_fine(b, port, route):
    """The bridge still runs, is not draining, and holds all it held."""
    b.check_alive()
    s = h.stats(port)
    check(not (s.get("drain") or {}).get("active"), "the bridge is draining: %r" % s.get("drain"))
    st, body = h.http_get(port, "/readyz")
    check(st == 200, "/readyz %d %r after the refusals" % (st, body))
    n = pending(port, route)
    check(n == HELD, "%d pending on %s, expected %d: something was purged or cancelled"
          % (n, route, HELD))


def case_cross_site_drain(ctx, b, port, route):
    for hdrs in ({"Origin": EVIL, "Sec-Fetch-Site": "cross-site"},
                 {"Origin": EVIL},
                 {"Sec-Fetch-Site": "cross-site"},
                 {"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:8080"},
                 {"Origin": "null"}):
        # what fetch(..., {method: "POST", mode: "no-cors"}) from the page sends
        st, _, body = raw(port, "POST", "/drain", dict(hdrs, **{"Content-Type": "text/plain"}), b"")
        check(st == 403, "POST /drain with %r: %d %r" % (hdrs, st, body))
        # and even with the custom header (it would need a preflight: refused anyway)
        st, _, body = raw(port, "POST", "/drain", dict(hdrs, **{"X-Delay-Bridge": "1"}), b"")
        check(st == 403, "POST /drain with %r and X-Delay-Bridge: %d %r" % (hdrs, st, body))
    time.sleep(0.5)
    bridge_fine(b, port, route["name"])


def case_cross_site_purge(ctx, b, port, route):
    path = "/purge?route=" + h.url_arg(route["name"])
    for hdrs in ({"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
                 {"Origin": EVIL, "Content-Type": "application/json"},
                 {"Sec-Fetch-Site": "cross-site", "X-Delay-Bridge": "1"}):
        st, _, body = raw(port, "POST", path, hdrs, b"")
        check(st == 403, "POST %s with %r: %d %r" % (path, hdrs, st, body))
    bridge_fine(b, port, route["name"])


def case_cross_site_read(ctx, b, port, route):
    for path in ("/stats", "/pending?route=" + h.url_arg(route["name"]), "/metrics", "/due"):
        st, _, body = raw(port, "GET", path, {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"})
        check(st == 403 and "pending" not in body, "GET %s cross-site: %d %r" % (path, st, body[:200]))
        st, _, body = raw(port, "GET", path, {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"})
        check(st == 403, "GET %s with Sec-Fetch-Site: cross-site: %d" % (path, st))


def case_simple_post(ctx, b, port, route):
    purge = "/purge?route=" + h.url_arg(route["name"])
    key = "/pending/%s/%s" % (h.url_arg(route["name"]), "key-0")
    for method, path in (("POST", purge), ("POST", "/drain"), ("DELETE", key)):
        for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                   None):
            hdrs = {"Content-Type": ct} if ct else {}
            st, _, body = raw(port, method, path, hdrs, b"")
            check(st == 403 and "X-Delay-Bridge" in body,
                  "%s %s with Content-Type %r: %d %r" % (method, path, ct, st, body))
    bridge_fine(b, port, route["name"])


def case_rebinding(ctx, b, port, route):
    host = "evil.example:%d" % port
    for path in ("/stats", "/pending?route=" + h.url_arg(route["name"]), "/metrics", "/ui"):
        st, _, body = raw(port, "GET", path, {"Host": host})
        check(st in (421, 403) and "held" not in body, "GET %s with Host %s: %d %r"
              % (path, host, st, body[:200]))
    name = "rebound"
    r = ctx.route(name, route["target_exchange"])
    del r["name"]
    for hdrs in ({"Host": host, "Content-Type": "application/json"},
                 {"Host": host, "Content-Type": "application/json", "Origin": "http://" + host,
                  "Sec-Fetch-Site": "same-origin"}):
        st, _, body = raw(port, "PUT", "/routes/" + name, hdrs, json.dumps(r).encode())
        check(st in (421, 403), "PUT /routes/%s with %r: %d %r" % (name, hdrs, st, body))
    st, j = h.http_req(port, "GET", "/routes/" + name)
    check(st == 404, "the route put through a rebound Host exists: %d %r" % (st, j))
    bridge_fine(b, port, route["name"])


def case_headers(ctx, b, port, route):
    for path, hdrs in (("/ui", {}), ("/stats", {}), ("/metrics", {}), ("/healthz", {}),
                       ("/stats", {"Origin": EVIL})):
        st, hd, _ = raw(port, "GET", path, hdrs)
        what = "GET %s%s (%d)" % (path, " cross-site" if hdrs else "", st)
        check(hd.get("x-frame-options") == "DENY", "%s: X-Frame-Options %r" % (what, hd.get("x-frame-options")))
        check(hd.get("x-content-type-options") == "nosniff",
              "%s: X-Content-Type-Options %r" % (what, hd.get("x-content-type-options")))
        check("frame-ancestors 'none'" in hd.get("content-security-policy", ""),
              "%s: Content-Security-Policy %r" % (what, hd.get("content-security-policy")))
    st, hd, body = raw(port, "GET", "/ui")
    check(st == 200 and "<title>delay-bridge</title>" in body and
          hd.get("content-type", "").startswith("text/html"), "/ui: %d" % st)


def case_own_clients(ctx, b, port, route):
    # the status page's own fetches: same origin, X-Delay-Bridge
    origin = "http://127.0.0.1:%d" % port
    st, _, body = raw(port, "GET", "/stats", {"Origin": origin, "Sec-Fetch-Site": "same-origin"})
    check(st == 200, "same-origin GET /stats: %d %r" % (st, body[:200]))
    key = "/pending/%s/%s" % (h.url_arg(route["name"]), "key-0")
    st, _, body = raw(port, "DELETE", key, {"Origin": origin, "Sec-Fetch-Site": "same-origin",
                                            "X-Delay-Bridge": "1"})
    check(st == 200, "same-origin DELETE %s: %d %r" % (key, st, body))
    # the CLI (cancel: DELETE /pending/R/KEY)
    rc, out, err = h.bridge_cli("cancel", "--route", route["name"], "--url",
                                "http://127.0.0.1:%d" % port, "key-1", timeout=30)
    check(rc == 0, "delay-bridge cancel: exit %d %s %s" % (rc, out, err))
    check(pending(port, route["name"]) == HELD - 2, "two cancels did not cancel two")


EVIL_PAGE = """<!doctype html><title>evil</title>
<iframe name="sink"></iframe>
<form id="f" method="POST" action="%(t)s/purge?route=%(r)s" target="sink" enctype="text/plain">
<input name="a" value="b"></form>
<script>
var T = "%(t)s";
window.results = {};
function note(k, p) {
  return p.then(function (r) { results[k] = r.type + " " + r.status; },
                function (e) { results[k] = "error: " + e; });
}
Promise.all([
  note("drain", fetch(T + "/drain", {method: "POST", mode: "no-cors", body: "x"})),
  note("purge", fetch(T + "/purge?route=%(r)s", {method: "POST", mode: "no-cors",
                                                  headers: {"Content-Type": "text/plain"}})),
  note("stats", fetch(T + "/stats").then(function (r) { return r.text(); })
                 .then(function (t) { results.stats_body = t.slice(0, 40); return {type: "read"}; })),
]).then(function () { document.getElementById("f").submit(); window.sent = true; });
</script>
"""


def start_browser(ctx, *extra):
    """Headless chromium with extra flags and its DevTools client (test_ui's);
    (None, None) without chromium."""
    import test_ui
    try:
        return test_ui.start_chromium(ctx, *extra)
    except h.Skip:
        return None, None


def case_browser(ctx, b, port, route):
    """A real browser: a page on another site (http://localhost:EP, the bridge
    being http://127.0.0.1:PORT) fires a no-cors POST /drain, a text/plain
    POST /purge, a form POST /purge and a CORS read of /stats; then a page of
    the rebound origin evil.example:PORT (chromium resolves evil.example to
    127.0.0.1; the page itself is handed to it through DevTools, as the
    attacker's server would) reads /stats and /pending "same-origin".
    Nothing is drained, purged or read."""
    import http.server
    import threading
    page = (EVIL_PAGE % {"t": "http://127.0.0.1:%d" % port, "r": h.url_arg(route["name"])}).encode()

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    # Chromium's own Local Network Access checks would stop the rebound page
    # before the bridge sees it; Firefox, Safari and older browsers have none:
    # turned off, so that what is tested is the bridge.
    proc, cdp = start_browser(ctx, "--host-resolver-rules=MAP evil.example 127.0.0.1",
                              "--disable-features=LocalNetworkAccessChecks")
    if not proc:
        h.log("case browser: chromium missing, skipped (apt-get install chromium)")
        srv.shutdown()
        return
    try:
        cdp.call("Page.enable")
        cdp.call("Runtime.enable")
        cdp.call("Page.navigate", url="http://localhost:%d/evil.html" % srv.server_address[1])
        cdp.wait("window.sent === true", 30, "the evil page sent its requests")
        time.sleep(1.0)  # the form's POST lands in the frame
        res = cdp.js("JSON.stringify(window.results)")
        h.log("evil page (cross-site): %s" % res)
        check("stats_body" not in json.loads(res), "the cross-site page read /stats: %s" % res)
        bridge_fine(b, port, route["name"])
        # DNS rebinding: the attacker's page was loaded from http://evil.example:PORT
        # (its server: here the DevTools answer it), then the name resolves to
        # 127.0.0.1 -- its same-origin requests reach the bridge.
        import base64
        evil_origin = "http://evil.example:%d" % port
        cdp.call("Fetch.enable", patterns=[{"urlPattern": evil_origin + "/attacker*"}])
        cdp.js("setTimeout(function () { location.href = '%s/attacker.html'; }, 0); 1" % evil_origin)
        paused = next((e for e in cdp.events if e.get("method") == "Fetch.requestPaused"), None)
        while not paused:  # events only: a call could wait on the paused navigation
            m = cdp._message()
            paused = m if m.get("method") == "Fetch.requestPaused" else None
        cdp.call("Fetch.fulfillRequest", requestId=paused["params"]["requestId"], responseCode=200,
                 responseHeaders=[{"name": "Content-Type", "value": "text/html"}],
                 body=base64.b64encode(b"<!doctype html><title>attacker</title>").decode())
        cdp.call("Fetch.disable")
        cdp.wait("location.origin === '%s' && document.title === 'attacker'" % evil_origin, 30,
                 "the attacker's page at %s" % evil_origin)
        got = cdp.js("""Promise.all(["/stats", "/pending?route=%s"].map(function (p) {
              return fetch(p).then(function (r) { return r.text().then(function (t) {
                return r.status + " " + t.slice(0, 30); }); },
                function (e) { return "error: " + e; }); }))""" % h.url_arg(route["name"]))
        h.log("rebound page (evil.example:%d): %r" % (port, got))
        check(all(not g.startswith("200") for g in got), "the rebound page read: %r" % got)
        check(all(g.startswith("421") for g in got), "the rebound page's reads: %r (expected 421)"
              % got)
        bridge_fine(b, port, route["name"])
    finally:
        proc.kill()
        proc.wait()
        srv.shutdown()


def case_start_refused(ctx, route):
    port = h.free_port()
    cfg = ctx.config([route], wal_dir=os.path.join(ctx.tmp, "open.wal"),
                     http={"listen": "0.0.0.0:%d" % port, "allow_remote": True})
    d = os.path.join(ctx.tmp, "open")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "config.json")
    with open(p, "w") as f:
        json.dump(cfg, f)
    os.chmod(p, 0o600)
    env = {"DELAY_BRIDGE_HTTP_TOKEN": ""}
    for args in (["-c", p], ["-c", p, "--check-config"]):
        rc, out, err = h.bridge_cli(*args, env=env, timeout=30)
        lines = [l for l in err.splitlines() if l.strip()]
        check(rc == 3, "%s without a token: exit %d, expected 3 (%s)" % (" ".join(args[2:]) or "start",
                                                                      rc, err.strip()[:300]))
        check(len(lines) == 1 and "http.listen" in lines[0] and "DELAY_BRIDGE_HTTP_TOKEN" in lines[0],
              "the refusal is not one line naming http.listen and DELAY_BRIDGE_HTTP_TOKEN: %r" % lines)
    check(not os.path.exists(cfg["wal"]["dir"]), "the refused bridge created its WAL directory")
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        h.fail("something listens on port %d after the refused start" % port)
    except OSError:
        pass
    rc, out, err = h.bridge_cli("-c", p, "--check-config", env={"DELAY_BRIDGE_HTTP_TOKEN": TOKEN},
                                timeout=30)
    check(rc == 0, "--check-config with the token: exit %d %s" % (rc, err.strip()[:300]))


def case_token_first(ctx, route):
    port = h.free_port()
    b = ctx.bridge([route], name="token", http={"listen": "127.0.0.1:%d" % port}, start=False)
    b.start(env={"DELAY_BRIDGE_HTTP_TOKEN": TOKEN})
    try:
        # Headers only, 60 KiB declared: the answer must not wait for the body.
        for method, path in (("POST", "/purge?route=" + h.url_arg(route["name"])),
                             ("PUT", "/routes/never"), ("POST", "/drain")):
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            t0 = time.monotonic()
            s.sendall(("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer wrong\r\n"
                       "Content-Type: application/json\r\nContent-Length: 61440\r\n\r\n"
                       % (method, path, port)).encode())
            got = b""
            try:
                while b"\r\n\r\n" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except OSError as e:
                h.log("%s %s: %r" % (method, path, e))
            s.close()
            took = time.monotonic() - t0
            check(got.startswith(b"HTTP/1.1 401"),
                  "%s %s with a wrong token and a 60 KiB body not sent: got %r after %.1f s "
                  "(the bridge waited for the body?)" % (method, path, got[:40], took))
            h.log("%s %s, wrong token, body not sent: %r in %.3f s"
                  % (method, path, got.split(b"\r\n")[0], took))
        # The whole body sent: a valid route padded to 60 KiB, with a marker.
        marker = "MARKER-%s" % os.urandom(6).hex()
        r = ctx.route("never", route["target_exchange"])
        del r["name"]
        r["padding_" + marker] = "x" * 62000  # an unknown key: would be a 400 if it were parsed
        body = json.dumps(r).encode()
        check(60 * 1024 <= len(body) < 64 * 1024, "body of %d bytes" % len(body))
        try:
            st, _, text = raw(port, "PUT", "/routes/never",
                              {"Authorization": "Bearer wrong", "Content-Type": "application/json"},
                              body)
            check(st == 401, "PUT /routes/never with a wrong token: %d %r" % (st, text))
        except (ConnectionResetError, BrokenPipeError) as e:
            # the bridge answered and closed before reading the body: also a refusal
            h.log("PUT with a wrong token and a 60 KiB body: connection closed (%r)" % e)
        st, j = h.http_req(port, "GET", "/routes/never", headers={"Authorization": "Bearer " + TOKEN})
        check(st == 404, "the route PUT with a wrong token exists: %d %r" % (st, j))
        check(marker not in b.log_text(), "the refused body's marker is in the log")
        check(TOKEN not in b.log_text(), "the token is in the log")
    finally:
        b.stop()


def test(ctx):
    ex, qs = ctx.target("out", "direct", ["rk"])
    route = ctx.route("sec", ex)
    port = h.free_port()
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port}, start=False)
    b.start(env={"DELAY_BRIDGE_HTTP_TOKEN": ""})
    p = ctx.publisher()
    for i in range(HELD):
        p.publish(route["ingress_exchange"], "rk", b"held", message_id="m-%d" % i,
                  headers={"x-delay": h.i32(600000), "x-delay-key": "key-%d" % i}, delivery_mode=2)
    p.close()
    h.wait_for("%d pending" % HELD, lambda: pending(port, route["name"]) == HELD, 30)

    cases = h.Cases()
    cases.run("cross_site_drain", case_cross_site_drain, ctx, b, port, route)
    cases.run("cross_site_purge", case_cross_site_purge, ctx, b, port, route)
    cases.run("cross_site_read", case_cross_site_read, ctx, b, port, route)
    cases.run("simple_post", case_simple_post, ctx, b, port, route)
    cases.run("rebinding", case_rebinding, ctx, b, port, route)
    cases.run("headers", case_headers, ctx, b, port, route)
    cases.run("browser", case_browser, ctx, b, port, route)
    cases.run("own_clients", case_own_clients, ctx, b, port, route)
    cases.run("start_refused", case_start_refused, ctx, ctx.route("open", ex))
    cases.run("token_first", case_token_first, ctx, ctx.route("tok", ex))

    # The project's CLI drains the bridge: it sends what the bridge asks for.
    def case_drain():
        check(b.alive(), "the bridge is not running at the end (a refused request drained it?)")
        rc, out, err = h.bridge_cli("drain", "--url", "http://127.0.0.1:%d" % port, "--timeout", "60",
                                    timeout=90)
        check(rc == 0, "delay-bridge drain exit %d: %s %s" % (rc, out, err))
        rc = b.wait_exit(30, "the bridge did not exit after delay-bridge drain")
        check(rc == 0, "the bridge exited %d after the drain" % rc)
    cases.run("drain", case_drain)
    cases.done()


if __name__ == "__main__":
    h.run(test, budget_s=240)
