#!/usr/bin/python3
"""The HTTP route API (GET/PUT/DELETE /routes) and `delay-bridge routes`,
against the real daemon with DELAY_BRIDGE_HTTP_TOKEN set:

 - GET /routes lists the -c file's route (source "file"); every request
   without the token is refused (401) and stores nothing;
 - a PUT that is not JSON, or has a bad value or an unknown key, is 400
   with the key named; a PUT or DELETE of the -c file's route is 409; a
   DELETE or GET of an unknown route is 404; nothing of these is stored;
 - a good PUT is 201 and writes the routes file (WAL_DIR/routes.json) with
   the route as put, nothing of what GET adds;
 - after a restart the route runs from the routes file: GET shows it with
   source "api", messages delayed through it arrive on time; what GET
   shows of it can be PUT back unchanged (200);
 - --check-config reads the routes file too: a bad one is exit 3, the key
   named;
 - the CLI's exit codes: list 0, get of an unknown route 1, usage 2, no
   token 3, put of a bad route or of the file's route 4 (the daemon's
   error printed), put and delete 0;
 - live: a route PUT runs at once (bridge_config_apply) -- GET shows it, a message with x-delay 300 to its new ingress
   exchange arrives at the target on time; a change that waits for a
   restart (target_type) is 409 with "pending" and is not stored, one that
   applies live (max_delay_ms) is 200; DELETE answers removed;
 - templates: the file's route_templates entry makes route t1 (its
   instance, GET shows "template"), and PUT /routes/t2 {"template": "tpl"}
   alone makes a whole route that runs at once; both deliver on time.

Named cases (harness.Cases: each runs and is reported even when one before
it failed): listed, refused_nothing_stored, stored, cli, restart_runs_file,
check_config_reads_file, live_put, template_put, delete_live, clean_stop.
"""

import json
import os
import tempfile
import types

import harness as h
from harness import check

TOKEN = "r0utes-t0k"
AUTH = {"Authorization": "Bearer " + TOKEN}


def req(port, method, path, body=None, auth=True):
    """(status, parsed JSON or text) of one request; body: a dict (sent as
    JSON) or a str (sent as is)."""
    headers = dict(AUTH) if auth else {}
    data = None
    if body is not None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        headers["Content-Type"] = "application/json"
    return h.http_req(port, method, path, headers=headers, body=data)


def stored(path):
    """The routes file's routes by name ({} when there is no file)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        doc = json.load(f)
    return {r["name"]: r for r in doc["routes"]}


def cli(port, *args, token=True, expect=None):
    env = {"DELAY_BRIDGE_HTTP_TOKEN": TOKEN if token else ""}
    return h.bridge_cli("routes", *(list(args) + ["--url", "http://127.0.0.1:%d" % port]),
                        env=env, expect=expect, timeout=30)


def deliver(ctx, p, c, route, tag):
    """One message with x-delay 300 through route's ingress: on time at the target."""
    t0 = p.publish(route["ingress_exchange"], "rk", tag.encode(), message_id=tag,
                   headers={"x-delay": h.i32(300)})
    msgs = [m for m in c.wait_ids([tag], 5 + h.late_tolerance()) if m.message_id == tag]
    check(len(msgs) == 1, "%s arrived %d times" % (tag, len(msgs)))
    h.check_on_time(msgs[0], t0, 0.3, "%s through route %s" % (tag, route["name"]))


def test(ctx):
    ex, qs = ctx.target("out", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    p = ctx.publisher()
    port = h.free_port()
    filer = ctx.route("filer", ex)
    # a template: one instance in the file (t1), one put by name only (t2, below)
    tpl = {"ingress_exchange": ctx.n("{name}.tpl.delayed"), "ingress_queue": ctx.n("{name}.tpl.q"),
           "target_exchange": ex, "prefetch": 200, "routes": ["t1"]}
    for n in ("t1", "t2"):
        ctx.exchanges.add(tpl["ingress_exchange"].replace("{name}", n))
        ctx.queues.add(tpl["ingress_queue"].replace("{name}", n))
    b = ctx.bridge([filer], http={"listen": str(port)}, start=False,
                   route_templates={"tpl": tpl})
    b.start(env={"DELAY_BRIDGE_HTTP_TOKEN": TOKEN})
    routes_file = os.path.join(b.config["wal"]["dir"], "routes.json")

    # What a case leaves for the later ones (each runs whatever happened before it).
    st_ = types.SimpleNamespace(t1=None)
    api1 = ctx.route("api1", ex)
    api3 = ctx.route("api3", ex)

    def case_listed():
        st, j = req(port, "GET", "/routes")
        check(st == 200 and sorted(r["name"] for r in j["routes"]) == ["filer", "t1"],
              "GET /routes: %d %r" % (st, j))
        st_.t1 = t1 = [r for r in j["routes"] if r["name"] == "t1"][0]
        check(t1["template"] == "tpl" and t1["source"] == "file" and t1["prefetch"] == 200 and
              t1["ingress_exchange"] == tpl["ingress_exchange"].replace("{name}", "t1"),
              "the template's instance: %r" % t1)
        r0 = j["routes"][0]
        check(r0["source"] == "file" and r0["template"] is None and r0["retired"] is False and
              r0["held"] == 0 and r0["vhost"] == "/" and r0["target_exchange"] == ex and
              r0["queue_type"] == "classic" and r0["prefetch"] == 1000, "the file's route: %r" % r0)
        st, _ = req(port, "GET", "/routes", auth=False)
        check(st == 401, "GET /routes without the token: %d" % st)

    # refused, nothing stored
    def case_refused_nothing_stored():
        st, _ = req(port, "PUT", "/routes/api1", api1, auth=False)
        check(st in (401, 403), "PUT without the token: %d" % st)
        st, j = req(port, "PUT", "/routes/api1", '{"ingress_exchange": ')
        check(st == 400 and "invalid JSON" in j["error"], "PUT of bad JSON: %d %r" % (st, j))
        for key, value in (("prefetch", "lots"), ("prefech", 5)):
            bad = dict(api1, **{key: value})
            st, j = req(port, "PUT", "/routes/api1", bad)
            check(st == 400 and key in j.get("error", ""), "PUT with %s=%r: %d %r"
                  % (key, value, st, j))
            h.log("PUT with %s=%r: %d %s" % (key, value, st, j["error"]))
        st, j = req(port, "PUT", "/routes/api1", dict(api1, name="other"))
        check(st == 400, "PUT with another name in the body: %d %r" % (st, j))
        st, j = req(port, "PUT", "/routes/filer", dict(filer, prefetch=5))
        check(st == 409 and "-c file" in j["error"], "PUT of the file's route: %d %r" % (st, j))
        st, j = req(port, "DELETE", "/routes/filer")
        check(st == 409, "DELETE of the file's route: %d %r" % (st, j))
        st, j = req(port, "DELETE", "/routes/nope")
        check(st == 404, "DELETE of an unknown route: %d %r" % (st, j))
        st, j = req(port, "GET", "/routes/nope")
        check(st == 404, "GET of an unknown route: %d %r" % (st, j))
        check(not os.path.exists(routes_file), "a refused PUT wrote %s" % routes_file)

    # stored
    def case_stored():
        st, j = req(port, "PUT", "/routes/api1", api1)
        check(st == 201 and j.get("name") == "api1", "PUT api1: %d %r" % (st, j))
        s = stored(routes_file)
        check(set(s) == {"api1"}, "the routes file after PUT api1: %r" % s)
        for k, v in api1.items():
            check(s["api1"].get(k) == v, "routes file: api1.%s is %r, put %r" % (k, s["api1"].get(k), v))
        check(not set(s["api1"]) & {"source", "held", "retired"}, "the routes file keeps what GET "
              "adds: %r" % s["api1"])

    # the CLI
    def case_cli():
        rc, out, err = cli(port, "list", expect=0)
        check("filer" in out and "NAME" in out, "routes list:\n%s" % out)
        rc, out, err = cli(port, "list", "--json", expect=0)
        check(any(r["name"] == "filer" for r in json.loads(out)["routes"]), "list --json: %s" % out)
        cli(port, "get", "nope", expect=1)
        cli(port, "frobnicate", expect=2)
        cli(port, "get", expect=2)
        rc, out, err = cli(port, "list", token=False, expect=3)
        with tempfile.NamedTemporaryFile("w", suffix=".json", dir=ctx.tmp, delete=False) as f:
            json.dump(dict(filer, prefetch=5), f)
        rc, out, err = cli(port, "put", "filer", f.name, expect=4)
        check("-c file" in err, "put filer: %s" % err)
        with open(f.name, "w") as g:
            json.dump(dict(ctx.route("api2", ex), prefetch="lots"), g)
        rc, out, err = cli(port, "put", "api2", f.name, expect=4)
        check("prefetch" in err, "put api2 with a bad prefetch: %s" % err)
        with open(f.name, "w") as g:
            json.dump(ctx.route("api2", ex), g)
        rc, out, err = cli(port, "put", "api2", f.name, expect=0)
        check("api2 added" in out, "put api2: %s" % out)
        check(set(stored(routes_file)) == {"api1", "api2"}, "after put api2: %r" % stored(routes_file))
        cli(port, "delete", "api2", expect=0)
        cli(port, "delete", "api2", expect=1)
        check(set(stored(routes_file)) == {"api1"}, "after delete api2: %r" % stored(routes_file))

    # a restart runs what the routes file holds
    def case_restart_runs_file():
        b.stop()
        b.start(env={"DELAY_BRIDGE_HTTP_TOKEN": TOKEN})
        st, j = req(port, "GET", "/routes/api1")
        check(st == 200 and j["source"] == "api" and j["retired"] is False and
              j["ingress_exchange"] == api1["ingress_exchange"], "api1 after a restart: %d %r"
              % (st, j))
        st, j2 = req(port, "GET", "/routes")
        check(sorted(r["name"] for r in j2["routes"]) == ["api1", "filer", "t1"],
              "routes after a restart: %r" % j2)
        deliver(ctx, p, c, filer, "f1")
        deliver(ctx, p, c, api1, "a1")
        st, j3 = req(port, "PUT", "/routes/api1", j)  # what GET showed, back unchanged
        check(st == 200, "GET's object PUT back: %d %r" % (st, j3))
        back = stored(routes_file)["api1"]
        same = {k: v for k, v in j.items() if k not in ("source", "retired", "held", "template",
                                                        "vhost") and v is not None}
        check(back == same, "what GET showed, PUT back, is stored as\n%r\nnot\n%r" % (back, same))
        b.check_alive()

    # --check-config reads the routes file too
    def case_check_config_reads_file():
        other = dict(b.config, wal={"dir": os.path.join(ctx.tmp, "other.wal")})
        os.makedirs(other["wal"]["dir"])
        other_path = os.path.join(ctx.tmp, "other.json")
        with open(other_path, "w") as f:
            json.dump(other, f)
        with open(os.path.join(other["wal"]["dir"], "routes.json"), "w") as f:
            json.dump({"version": 1, "routes": [dict(api1, name="x", prefetch="lots")]}, f)
        rc, out, err = h.bridge_cli("--check-config", "-c", other_path, expect=3)
        check("routes.json" in err and "prefetch" in err, "--check-config, a bad routes file: %s"
              % err)
        with open(os.path.join(other["wal"]["dir"], "routes.json"), "w") as f:
            json.dump({"version": 1, "routes": [dict(api1, name="x")]}, f)
        rc, out, err = h.bridge_cli("--check-config", "-c", other_path, expect=0)
        check("1 from the routes file" in out, "--check-config, a good routes file: %s" % out)

    # live: a route put runs at once
    def case_live_put():
        st, j = req(port, "PUT", "/routes/api3", api3)
        check(st == 201, "PUT api3: %d %r" % (st, j))
        st, j = req(port, "GET", "/routes/api3")
        check(st == 200 and j["source"] == "api" and j["retired"] is False,
              "api3 does not run after its PUT: %d %r" % (st, j))
        h.wait_for("api3's ingress exchange", lambda: ctx.exchange_exists(api3["ingress_exchange"]),
                   10)
        deliver(ctx, p, c, api3, "a3")
        st, j = req(port, "PUT", "/routes/api3", dict(api3, target_type="topic"))
        check(st == 409 and "target_type" in j.get("pending", ""),
              "a new target_type for api3 (waits for a restart): %d %r" % (st, j))
        check(stored(routes_file)["api3"] == api3, "the refused PUT was stored: %r"
              % stored(routes_file)["api3"])
        st, j = req(port, "PUT", "/routes/api3", dict(api3, max_delay_ms=60000))
        check(st == 200 and j["max_delay_ms"] == 60000, "api3's max_delay_ms replaced: %d %r"
              % (st, j))

    # a route put by its template's name alone runs at once, as the file's instance does
    def case_template_put():
        st, j = req(port, "PUT", "/routes/t2", {"template": "tpl"})
        check(st == 201 and j["template"] == "tpl" and
              j["ingress_exchange"] == tpl["ingress_exchange"].replace("{name}", "t2"),
              "PUT t2 from the template: %d %r" % (st, j))
        check(stored(routes_file)["t2"] == {"name": "t2", "template": "tpl"},
              "the routes file keeps t2 as put: %r" % stored(routes_file)["t2"])
        t2 = {"name": "t2", "ingress_exchange": j["ingress_exchange"]}
        h.wait_for("t2's ingress exchange", lambda: ctx.exchange_exists(t2["ingress_exchange"]), 10)
        deliver(ctx, p, c, dict(st_.t1, ingress_exchange=st_.t1["ingress_exchange"]), "t1m")
        deliver(ctx, p, c, t2, "t2m")

    def case_delete_live():
        st, j = req(port, "DELETE", "/routes/t2")
        check(st == 200, "DELETE t2: %d %r" % (st, j))
        st, j = req(port, "DELETE", "/routes/api3")
        check(st == 200 and j["removed"] == "api3" and j["held"] == 0, "DELETE api3: %d %r"
              % (st, j))
        check(set(stored(routes_file)) == {"api1"}, "after DELETE api3: %r" % stored(routes_file))

    cases = h.Cases()
    cases.run("listed", case_listed)
    cases.run("refused_nothing_stored", case_refused_nothing_stored)
    cases.run("stored", case_stored)
    cases.run("cli", case_cli)
    cases.run("restart_runs_file", case_restart_runs_file)
    cases.run("check_config_reads_file", case_check_config_reads_file)
    cases.run("live_put", case_live_put)
    cases.run("template_put", case_template_put)
    cases.run("delete_live", case_delete_live)
    cases.run("clean_stop", b.stop)
    cases.done()

if __name__ == "__main__":
    h.run(test, budget_s=150)
