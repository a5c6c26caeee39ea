#!/usr/bin/python3
"""browse_http.py -- GET /pending pages of the daemon itself, at millions held.

    tests/bench/browse_http.py [--n 10000000] [--delay MS | MIN-MAX] [--tmp /var/tmp]
                               [--bin build/delay-bridge] [--fill build/tests/wal_fill]
                               [--port 18931]

Writes a WAL of N messages for one route with tests/tools/wal_fill (delay
MS for all: one instant, the worst case for the wheel before its slots were
split; or uniform in [MIN, MAX] ms), starts the daemon on it with its broker
unreachable (127.0.0.1:1: /pending needs only the recovered engine), and
times HTTP requests as an operator's client sees them, JSON included:
200 pages of 100 in a row from the start, then one page from each of 200
cursors spread over the held set (following a page whose budget ran out,
which is empty, until one lists something: the slowest request counts).
Prints median, p99 and max in ms, and the daemon's RAM per held message
(/stats). Exit 0 when every page answered 200. Needs ~150 B of disk per
message (1.5 GB at 10M), removed at the end.
"""

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t = time.monotonic()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    took = (time.monotonic() - t) * 1000.0
    c.close()
    return r.status, json.loads(body) if body else None, took


def report(what, ms):
    ms = sorted(ms)
    print("  %-26s median %7.2f ms  p99 %7.2f ms  max %7.2f ms" % (
        what, ms[len(ms) // 2], ms[len(ms) * 99 // 100], ms[-1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000000)
    ap.add_argument("--delay", default="3600000")
    ap.add_argument("--tmp", default="/var/tmp")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "delay-bridge"))
    ap.add_argument("--fill", default=os.path.join(ROOT, "build", "tests", "wal_fill"))
    ap.add_argument("--port", type=int, default=18931)
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="browse_http.", dir=a.tmp)
    proc = None
    try:
        wal = os.path.join(work, "wal")
        t = time.monotonic()
        now_ms = int(time.time() * 1000)
        subprocess.run([a.fill, wal, "bulk", str(a.n), a.delay, "16"], check=True,
                       stdout=subprocess.DEVNULL)
        print("wal_fill: %d messages, delay %s ms, in %.1f s" % (a.n, a.delay, time.monotonic() - t))
        lo, _, hi = a.delay.partition("-")
        lo = int(lo)
        hi = int(hi) if hi else lo
        cfg = {
            "broker": {"uri": "amqp://guest:guest@127.0.0.1:1/%2f", "reconnect_min_ms": 1000,
                       "reconnect_max_ms": 5000},
            "wal": {"dir": wal, "segment_mb": 64, "fsync": True},
            "log": {"level": "warn"},
            "http": {"listen": "127.0.0.1:%d" % a.port},
            "routes": [{"name": "bulk", "ingress_exchange": "browse_http.in",
                        "ingress_queue": "browse_http.q", "target_exchange": "browse_http.out"}],
        }
        conf = os.path.join(work, "config.json")
        with open(conf, "w") as f:
            json.dump(cfg, f)
        os.chmod(conf, 0o600)
        log = open(os.path.join(work, "bridge.log"), "w")
        t = time.monotonic()
        proc = subprocess.Popen([a.bin, "--config", conf], stdout=log, stderr=log)
        while True:
            try:
                st, _, _ = get(a.port, "/pending?route=bulk&limit=1")
                if st == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() - t > 300:
                print("the daemon did not serve /pending (log: %s)" % log.name)
                return 1
            time.sleep(0.1)
        print("daemon serving /pending %.1f s after its start" % (time.monotonic() - t))
        st, stats, _ = get(a.port, "/stats")
        held = stats.get("held") or stats.get("messages", {}).get("held") if stats else None
        ram = stats.get("ram_bytes") if stats else None
        if held and ram:
            print("held %d, engine RAM %.2f B per held message" % (held, ram / held))

        ok = True
        ms, after = [], None
        for _ in range(200):
            path = "/pending?route=bulk&limit=100" + ("&after=" + after if after else "")
            st, j, took = get(a.port, path)
            ok &= st == 200
            ms.append(took)
            after = j.get("next") if j else None
            if not after:
                break
        report("%d pages in a row" % len(ms), ms)
        ms, most = [], 0
        for i in range(200):
            due = now_ms + lo + (hi - lo) * i // 200
            cur = "%d-%d" % (due, a.n * i // 200 if hi == lo else 0)
            worst, pages = 0.0, 0
            while True:
                st, j, took = get(a.port, "/pending?route=bulk&limit=100&after=" + cur)
                ok &= st == 200
                worst, pages = max(worst, took), pages + 1
                if not j or j["count"] or not j["next"] or pages >= 1000:
                    break
                cur = j["next"]
            ms.append(worst)
            most = max(most, pages)
        report("one page at 200 cursors", ms)
        if most > 1:
            print("  (a cursor took up to %d pages to list something)" % most)
        return 0 if ok else 1
    finally:
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
