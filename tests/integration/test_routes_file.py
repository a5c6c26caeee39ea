#!/usr/bin/python3
"""The routes file's tmp is never written through (issue 39): someone who
can write the directory of the routes file plants a symlink at its tmp
path (WAL_DIR/routes.json.tmp) pointing to a file outside. A PUT /routes
then stores the route all the same (201), the file outside keeps its bytes
and its mode, routes.json is a regular file holding the route, no tmp is
left, and the route runs (a delayed message through it arrives). Before the
fix the PUT wrote the routes into the file outside and renamed the symlink
over routes.json.
"""

import json
import os
import stat

import harness as h
from harness import check

TOKEN = "r0utes-f1le"


def test(ctx):
    ex, qs = ctx.target("out", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = h.free_port()
    b = ctx.bridge([ctx.route("filer", ex)], http={"listen": str(port)}, start=False)
    b.start(env={"DELAY_BRIDGE_HTTP_TOKEN": TOKEN})
    routes_file = os.path.join(b.config["wal"]["dir"], "routes.json")

    outside = os.path.join(ctx.tmp, "outside.txt")
    with open(outside, "w") as f:
        f.write("not the bridge's\n")
    os.chmod(outside, 0o644)
    os.symlink(outside, routes_file + ".tmp")

    put = ctx.route("put", ex)
    del put["name"]
    st, j = h.http_req(port, "PUT", "/routes/put", body=json.dumps(put).encode(),
                       headers={"Authorization": "Bearer " + TOKEN,
                                "Content-Type": "application/json"})
    check(st == 201, "PUT /routes/put with a symlink at the tmp path: %s %r" % (st, j))
    with open(outside) as f:
        text = f.read()
    check(text == "not the bridge's\n", "the file the planted symlink points to was written: %r"
          % text[:200])
    check(stat.S_IMODE(os.stat(outside).st_mode) == 0o644, "its mode changed")
    st_rf = os.lstat(routes_file)
    check(stat.S_ISREG(st_rf.st_mode) and stat.S_IMODE(st_rf.st_mode) == 0o600,
          "routes.json is not a regular 0600 file: %o" % st_rf.st_mode)
    with open(routes_file) as f:
        names = [r["name"] for r in json.load(f)["routes"]]
    check(names == ["put"], "routes.json holds %r" % names)
    check(not os.path.lexists(routes_file + ".tmp"), "the tmp path is left behind")

    t0 = ctx.publisher().publish(put["ingress_exchange"], "rk", b"m", message_id="m1",
                                 headers={"x-delay": h.i32(300)})
    msgs = c.wait_ids(["m1"], 5 + h.late_tolerance())
    h.check_on_time([m for m in msgs if m.message_id == "m1"][0], t0, 0.3, "through the put route")
    h.log("PUT with a symlink planted at routes.json.tmp: stored in a regular routes.json, the "
          "file outside untouched, the route delivers")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=120)
