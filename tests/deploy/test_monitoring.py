#!/usr/bin/python3
"""deploy/monitoring/: the Prometheus rules and the Grafana dashboard.

- `promtool check rules` accepts deploy/monitoring/delay-bridge.rules.yml,
  and `promtool test rules` runs its unit tests (delay-bridge.rules.test.yml:
  a log whose owner failed, needed bytes near max_mb, a consumer connection
  down, a full disk, lateness p99 above 5 s; on retry routes a retry storm,
  failures that keep repeating, parked and misrouted messages);
- the dashboard is valid JSON, every panel has a query, and its template
  variables are the ones its queries use;
- every delay_bridge_* metric named in the rules and the dashboard is one a
  running bridge exports: the list is read from the /metrics of a bridge
  started against the test broker with two routes and wal.replicate on (so
  the replication families are there too); a histogram NAME exports
  NAME_bucket, NAME_sum and NAME_count.

Needs promtool (Debian package prometheus) and the test broker (the
integration fixture): exit 77 without either.
"""

import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness as h  # noqa: E402
from harness import check  # noqa: E402

MON = os.path.join(ROOT, "deploy", "monitoring")
RULES = os.path.join(MON, "delay-bridge.rules.yml")
RULES_TEST = os.path.join(MON, "delay-bridge.rules.test.yml")
DASHBOARD = os.path.join(MON, "grafana-dashboard.json")
NAME = re.compile(r"\bdelay_bridge_[a-z0-9_]+")


def promtool():
    tool = shutil.which("promtool")
    if not tool:
        raise h.Skip("promtool missing (apt-get install prometheus)")
    r = subprocess.run([tool, "check", "rules", RULES], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    out = r.stdout.decode("utf-8", "replace")
    h.log("promtool check rules: " + " ".join(out.split()))
    check(r.returncode == 0, "promtool check rules failed:\n%s" % out)
    # The rules' own unit tests: the alerts fire on the series they are for.
    r = subprocess.run([tool, "test", "rules", RULES_TEST], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    out = r.stdout.decode("utf-8", "replace")
    h.log("promtool test rules: " + " ".join(out.split()))
    check(r.returncode == 0, "promtool test rules failed:\n%s" % out)


def dashboard_names():
    with open(DASHBOARD) as f:
        d = json.load(f)
    names, variables = set(), set()
    for v in d.get("templating", {}).get("list", []):
        variables.add(v["name"])
        q = v.get("query")
        names.update(NAME.findall(q.get("query", "") if isinstance(q, dict) else str(q or "")))
    check(d.get("panels"), "the dashboard has no panels")
    for p in d["panels"]:
        targets = p.get("targets") or []
        check(targets, "panel %r has no query" % p.get("title"))
        for t in targets:
            expr = t.get("expr", "")
            check(NAME.search(expr), "panel %r: query %r names no delay_bridge metric"
                  % (p.get("title"), expr))
            names.update(NAME.findall(expr))
            for used in re.findall(r"\$([a-z_]+)", expr):
                check(used in variables or used.startswith("__"),
                      "panel %r uses $%s, not a variable of the dashboard" % (p.get("title"), used))
    return names


def exported(ctx):
    """Every sample name a running bridge exports."""
    ex, qs = ctx.target("mon", "direct", ["rk"])
    stream = ctx.n("wal")
    ctx.queues.update([stream, stream + ".lease"])
    port = h.free_port()
    routes = [ctx.route("mon-a", ex), ctx.route("mon-b", ex)]
    ctx.bridge(routes, name="mon", instance="mon", http={"listen": "127.0.0.1:%d" % port},
               wal={"replicate": {"stream": stream, "checkpoint_mb": 1, "max_mb": 1024}})
    st, body = h.http_get(port, "/metrics", timeout=10)
    check(st == 200, "/metrics: %d" % st)
    names = set()
    for line in body.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if not m:
            continue
        names.add(m.group(1))
        if m.group(2) == "histogram":
            names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    check("delay_bridge_wal_replication_owner" in names,
          "the bridge with wal.replicate exports no replication metrics")
    return names


def test(ctx):
    promtool()
    with open(RULES) as f:
        in_rules = set(NAME.findall(f.read()))
    in_dash = dashboard_names()
    have = exported(ctx)
    h.log("the bridge exports %d names; the rules use %d, the dashboard %d"
          % (len(have), len(in_rules), len(in_dash)))
    for where, names in (("delay-bridge.rules.yml", in_rules),
                         ("grafana-dashboard.json", in_dash)):
        missing = sorted(names - have)
        check(not missing, "%s names metrics the bridge does not export: %s"
              % (where, ", ".join(missing)))
    h.log("every metric named in deploy/monitoring/ is exported")


if __name__ == "__main__":
    h.run(test, budget_s=120)
