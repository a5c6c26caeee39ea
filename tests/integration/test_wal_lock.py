#!/usr/bin/python3
"""Two daemons on one WAL directory: the second exits 4 ("WAL locked by
another process") with a message naming the directory, and the first keeps
running and delivering."""


import harness as h
from harness import check


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    b = ctx.bridge([ctx.route("lock", ex)])
    second = h.Bridge(ctx, b.config, name="second")
    second.start(wait_ready=False)
    rc = second.wait_exit(15, "a second daemon on the same WAL directory is still running after 15s")
    out = second.log_text()
    h.log("second daemon: exit %d: %s" % (rc, out.strip().replace("\n", " | ")[:300]))
    check(rc == 4, "second daemon on the same WAL directory exited %d, expected 4" % rc)
    check(b.config["wal"]["dir"] in out, "the message does not name the WAL directory %s" % b.config["wal"]["dir"])
    b.check_alive()
    p = ctx.publisher()
    t0 = p.publish(b.config["routes"][0]["ingress_exchange"], "rk", b"x", headers={"x-delay": h.i32(300)},
                   message_id="after")
    m = c.wait_count(1, 10)[0]
    h.check_on_time(m, t0, 0.3, "a message through the first daemon")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=60)
