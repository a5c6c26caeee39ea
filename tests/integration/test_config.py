#!/usr/bin/python3
"""The command line and configuration errors, as a user meets them:
--check-config exits 0 on a good config and 3 on a bad one, naming the key
path (e.g. routes[0].tagret_exchange) so the user can fix it; unknown keys
are errors; --version, --help and usage errors (exit 2); a missing or
malformed file (exit 3); DELAY_BRIDGE_BROKER_URI overrides broker.uri."""

import json
import os

import harness as h
from harness import check, mutate


def good(ctx):
    return ctx.config([
        ctx.route("orders", "orders", queue_type="classic", declare_target=False, target_type="direct",
                  prefetch=1000, max_inflight=1000, max_delay_ms=4294967295, invalid_delay="publish",
                  dead_letter_exchange=""),
        ctx.route("second", "other", invalid_delay="dead-letter", dead_letter_exchange="dlx"),
    ])


def test(ctx):
    base = good(ctx)
    n = [0]

    def write(cfg, raw=None):
        n[0] += 1
        path = os.path.join(ctx.tmp, "config-%02d.json" % n[0])
        with open(path, "w") as f:
            f.write(raw if raw is not None else json.dumps(cfg, indent=2))
        return path

    failures = []

    def expect(args, code, needles, what):
        rc, out, err = h.bridge_cli(*args, timeout=20)
        out += err
        shown = out.strip().replace("\n", " | ")[:300]
        ok = rc == code and all(x in out for x in needles)
        h.log("%s %-50s exit %d: %s" % ("ok  " if ok else "BAD ", what, rc, shown))
        if rc != code:
            failures.append("%s: exit %d, expected %d (output: %s)" % (what, rc, code, shown))
        for x in needles:
            if x not in out:
                failures.append("%s: the message does not mention %r (output: %s)" % (what, x, shown))

    p = write(base)
    expect(["--check-config", "-c", p], 0, [], "good config")
    expect(["--config", p, "--check-config"], 0, [], "good config, --config")
    minimal = {"broker": {"uri": h.broker_uri()}, "wal": {"dir": os.path.join(ctx.tmp, "w")},
               "routes": [{"name": "r", "ingress_exchange": "a", "ingress_queue": "b", "target_exchange": "c"}]}
    expect(["--check-config", "-c", write(minimal)], 0, [], "minimal config (defaults)")

    bad = [
        ("unknown top-level key", mutate(base, "bogus", 1), ["bogus"]),
        ("unknown route key (typo)", mutate(base, "routes[0].tagret_exchange", "x"), ["routes[0].tagret_exchange"]),
        ("unknown broker key", mutate(base, "broker.heartbeat", 30), ["broker.heartbeat"]),
        ("missing ingress_queue", mutate(base, "routes[1].ingress_queue", delete=True), ["routes[1].ingress_queue"]),
        ("missing wal.dir", mutate(base, "wal.dir", delete=True), ["wal.dir"]),
        ("missing broker.uri", mutate(base, "broker.uri", delete=True), ["broker.uri"]),
        ("heartbeat_s a string", mutate(base, "broker.heartbeat_s", "thirty"), ["broker.heartbeat_s"]),
        ("prefetch 0", mutate(base, "routes[0].prefetch", 0), ["routes[0].prefetch"]),
        ("prefetch too big", mutate(base, "routes[0].prefetch", 70000), ["routes[0].prefetch"]),
        ("negative max_delay_ms", mutate(base, "routes[0].max_delay_ms", -1), ["routes[0].max_delay_ms"]),
        ("invalid_delay unknown", mutate(base, "routes[1].invalid_delay", "drop"), ["routes[1].invalid_delay"]),
        ("dead-letter without exchange", mutate(base, "routes[1].dead_letter_exchange", delete=True),
         ["routes[1].dead_letter_exchange"]),
        ("queue_type unknown", mutate(base, "routes[0].queue_type", "lazy"), ["routes[0].queue_type"]),
        ("fsync not a bool", mutate(base, "wal.fsync", "yes"), ["wal.fsync"]),
        ("log level unknown", mutate(base, "log.level", "loud"), ["log.level"]),
        ("routes empty", mutate(base, "routes", []), ["routes"]),
        ("duplicate route name", mutate(base, "routes[1].name", "orders"), ["routes[1].name"]),
        ("uri not amqp", mutate(base, "broker.uri", "http://localhost/"), ["broker.uri"]),
    ]
    for what, cfg, needles in bad:
        p = write(cfg)
        expect(["--check-config", "-c", p], 3, needles + [os.path.basename(p)], what)
    p = write(None, raw='{"broker": {"uri": "amqp://localhost"},\n  "wal": {"dir": "/tmp"}\n  "routes": []}')
    expect(["--check-config", "-c", p], 3, [os.path.basename(p)], "malformed JSON")
    missing = os.path.join(ctx.tmp, "no-such-config.json")
    expect(["--check-config", "-c", missing], 3, ["no-such-config.json"], "config file missing")
    expect(["-c", missing], 3, ["no-such-config.json"], "config file missing (run)")

    expect(["--version"], 0, ["delay-bridge"], "--version")
    expect(["--help"], 0, ["--config"], "--help")
    expect([], 2, [], "no arguments")
    expect(["--no-such-option"], 2, [], "unknown option")
    expect(["-c", write(base), "extra-arg"], 2, [], "extra argument")

    # DELAY_BRIDGE_BROKER_URI overrides broker.uri: a config pointing at a
    # closed port still gets the bridge ready.
    ex, qs = ctx.target("target", "direct", ["rk"])
    cfg = ctx.config([ctx.route("env", ex)], wal_dir=os.path.join(ctx.tmp, "env.wal"))
    cfg["broker"]["uri"] = "amqp://guest:guest@127.0.0.1:1/%2f"
    b = h.Bridge(ctx, cfg, name="env-override")
    try:
        b.start(env={"DELAY_BRIDGE_BROKER_URI": h.broker_uri()})
        h.log("ok   DELAY_BRIDGE_BROKER_URI overrides broker.uri")
        pw = h.pika.URLParameters(h.broker_uri()).credentials.password
        check(":%s@" % pw not in b.log_text(), "the bridge logged the broker password")
        b.stop()
    except h.TestFailure as e:
        failures.append("DELAY_BRIDGE_BROKER_URI: %s" % e)
    if failures:
        h.fail("%d problem(s):\n  " % len(failures) + "\n  ".join(failures))


if __name__ == "__main__":
    h.run(test, budget_s=120)
