#!/usr/bin/env python3
"""stages.py -- where a firing's lateness went, from two scrapes of the
bridge's /metrics taken around one load (tests/bench/ontime.sh).

    stages.py BEFORE AFTER [--route NAME]

BEFORE and AFTER are /metrics texts. For the route (default "bench") it
takes delay_bridge_fire_stage_seconds{route,stage} (stats.h: wake, read,
write, confirm) delay_bridge_fire_lateness_seconds and the WAL's fdatasync durations
(delay_bridge_wal_fsync_seconds: the disk's condition), subtracts BEFORE
from AFTER, and prints one key=value line, the shape the load tools print:

    stages n=N wake_mean_ms=.. wake_p50_ms=.. wake_p99_ms=.. read_... write_...
           confirm_... lateness_mean_ms=.. lateness_p99_ms=.. fsync_mean_ms=.. fsync_p99_ms=..

mean is exact (sum / count); p50 and p99 are the upper bound of the bucket
that holds them (the histogram's resolution: 0.1, 0.25, 0.5, 1, 2.5, 5,
10, 25, 50, 100 ms, ...), "inf" past the last bound. Missing families
print "-" (a bridge from before the stages). Exit 0, or 2 on a usage
error.
"""
import re
import sys

SAMPLE = re.compile(r'^delay_bridge_(fire_stage_seconds|fire_lateness_seconds|wal_fsync_seconds)_(bucket|sum|count)'
                    r'(?:\{([^}]*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(path, route):
    """{(family, stage): {"le": {bound: cum}, "sum": s, "count": n}} for the route."""
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = SAMPLE.match(line.strip())
            if not m:
                continue
            labels = dict(LABEL.findall(m.group(3) or ""))
            if m.group(1) != "wal_fsync_seconds" and labels.get("route") != route:
                continue
            h = out.setdefault((m.group(1), labels.get("stage", "")), {"le": {}, "sum": 0.0, "count": 0})
            v = float(m.group(4))
            if m.group(2) == "bucket":
                h["le"][float(labels["le"])] = v
            elif m.group(2) == "sum":
                h["sum"] = v
            else:
                h["count"] = v
    return out


def quantile_le(le, q):
    """The upper bound of the bucket holding quantile q of cumulative buckets le."""
    bounds = sorted(le)
    total = le[bounds[-1]] if bounds else 0
    if total <= 0:
        return None
    for b in bounds:
        if le[b] >= q * total:
            return b
    return bounds[-1]


def ms(x):
    if x is None:
        return "-"
    if x == float("inf"):
        return "inf"
    return "%.3g" % (x * 1000.0)


def main():
    args = sys.argv[1:]
    route = "bench"
    if "--route" in args:
        i = args.index("--route")
        route = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    before, after = parse(args[0], route), parse(args[1], route)
    fields = []
    n = None
    keys = [("fire_stage_seconds", s) for s in ("wake", "read", "write", "confirm")]
    keys.append(("fire_lateness_seconds", ""))
    keys.append(("wal_fsync_seconds", ""))
    for fam, stage in keys:
        name = stage or ("fsync" if fam == "wal_fsync_seconds" else "lateness")
        a = after.get((fam, stage))
        if not a:
            fields += ["%s_mean_ms=-" % name, "%s_p50_ms=-" % name, "%s_p99_ms=-" % name]
            continue
        b = before.get((fam, stage), {"le": {}, "sum": 0.0, "count": 0})
        le = {k: v - b["le"].get(k, 0) for k, v in a["le"].items()}
        cnt = a["count"] - b["count"]
        mean = (a["sum"] - b["sum"]) / cnt if cnt > 0 else None
        if fam == "fire_lateness_seconds":
            n = int(cnt)
        fields += ["%s_mean_ms=%s" % (name, ms(mean)), "%s_p50_ms=%s" % (name, ms(quantile_le(le, 0.5))),
                   "%s_p99_ms=%s" % (name, ms(quantile_le(le, 0.99)))]
    print("stages n=%s %s" % ("-" if n is None else n, " ".join(fields)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
