#!/usr/bin/python3
"""Recovery runs while the HTTP endpoint answers: a log holding 6M messages
(written with tests/tools/wal_fill) replays on a thread, /healthz answers
200 throughout, /readyz says 503 "recovering" and /stats shows the progress
growing from 0 to 1, then the bridge is ready with every message held. A
SIGTERM during recovery stops the daemon cleanly (exit 0) once it is done,
and nothing is lost: the next start holds the same 6M. (6M: with
checkpoint-era recovery, 2M replayed in 0.4 s, too fast to watch.)"""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import harness as h
from harness import check

N = 6000000


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def fill(wal_dir, route):
    tool = os.environ.get("DB_WAL_FILL_BIN")
    if not tool:
        raise h.Skip("DB_WAL_FILL_BIN is not set (run through ctest)")
    t0 = time.monotonic()
    subprocess.run([tool, wal_dir, route, str(N)], check=True, stdout=subprocess.DEVNULL)
    h.log("wal_fill: %d messages in %.1fs" % (N, time.monotonic() - t0))


def watch_recovery(b, port):
    """Poll until ready; return the progress values seen while recovering."""
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        b.check_alive()
        st, body = get(port, "/readyz")
        if st == 200:
            return seen
        if st == 503:
            hst, _ = get(port, "/healthz")
            check(hst == 200, "/healthz during recovery: %r" % hst)
            # /stats after /readyz: still recovering now means recovering then too. Once
            # recovered, /readyz may say 503 for a moment more (broker not connected yet).
            sst, sbody = get(port, "/stats")
            if sst == 200:
                s = json.loads(sbody)
                if not s["recovery"]["recovered"]:
                    check("recovering" in body, "/readyz while recovering said %r" % body)
                    seen.append(s["recovery"]["progress"])
        time.sleep(0.02)
    h.fail("not ready within 120 s")


def test(ctx):
    route = ctx.route("rp", "amq.direct")
    port = h.free_port()
    b = ctx.bridge([route], name="rp", http={"listen": "127.0.0.1:%d" % port}, start=False)
    fill(b.config["wal"]["dir"], route["name"])

    b.start(wait_ready=False)
    seen = watch_recovery(b, port)
    h.log("progress seen while recovering: %s" % ["%.2f" % p for p in seen[:12]])
    check(len(seen) >= 1, "never saw the recovering state (recovery too fast to observe?)")
    check(all(0.0 <= p <= 1.0 for p in seen), "progress out of [0, 1]: %r" % seen)
    check(seen == sorted(seen), "progress went backwards: %r" % seen)
    s = json.loads(get(port, "/stats")[1])
    check(s["recovery"]["recovered"] and s["recovery"]["progress"] == 1, "after: %r" % s["recovery"])
    check(s["held"] == N, "held %d after recovery, expected %d" % (s["held"], N))
    b.stop()

    # SIGTERM while recovering: a clean exit once the replay is done, nothing lost.
    b.start(wait_ready=False)
    deadline = time.monotonic() + 30
    while get(port, "/readyz")[0] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    b.stop(expect=0, timeout=60)
    b.start(wait_ready=False)
    watch_recovery(b, port)
    s = json.loads(get(port, "/stats")[1])
    check(s["held"] == N, "held %d after a stop during recovery, expected %d" % (s["held"], N))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=240)
