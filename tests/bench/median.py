#!/usr/bin/python3
"""median.py -- the medians of several runs' reports of run.sh, ontime.sh or
hops.sh (tests/bench/median.sh runs them and calls this).

    median.py [--title TEXT] REPORT...

A REPORT is one run's stdout. Two kinds of markdown table rows:

- A row beginning with "| RabbitMQ" (the side-by-side layout of run.sh and
  ontime.sh: | broker | delays | scenario | figure | value | broker alone |
  ratio |) is keyed by its first four cells. Its value, broker alone and
  ratio cells become the median over the runs that have the row; a last
  column "runs: a, b, c" lists each run's first number of the value cell
  ("-" for a run without one or without the row). The rows are printed in
  the order they first appear, as one table.
- Any other table (hops.sh's, run.sh's first and replicate tables) is
  matched by position: the n-th row of the m-th such table of each run,
  every cell merged the same way.

Merging a cell: every number in it (12, 0.59, +29.5, -0.123; not the 99 of
"p99", nor the parts of 4.0.7) is replaced by the median of that number
across the runs, with as many decimals as the most precise run's and its
"+" kept; the runs' cells must then read the same with their numbers taken
out. When they do not ("full speed / 123" in one run, "-" in another), the
runs' cells are printed as they are, joined by " ; ".

Then every "summary, ..." line of every run, run by run. Exit 0; 2 on a
usage error or a report that cannot be read.
"""
import re
import statistics
import sys

NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\d.])")
RULE = re.compile(r"^:?-{3,}:?$")


def cells(line):
    """The cells of a markdown table row, stripped."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def fmt_median(texts):
    """The median of numbers given as text, written as precisely as the most precise."""
    decimals = max(len(t.partition(".")[2]) for t in texts)
    m = statistics.median(float(t) for t in texts)
    sign = "+" if any(t.startswith("+") for t in texts) else ""
    return f"{m:{sign}.{decimals}f}"


def merge(values):
    """One cell from the runs' cells (None: the run lacks it)."""
    present = [v for v in values if v is not None]
    if len(set(present)) == 1:
        return present[0]
    skeletons = {NUMBER.sub("#", v) for v in present}
    if len(skeletons) != 1:
        return " ; ".join(v if v is not None else "(none)" for v in values)
    numbers = [NUMBER.findall(v) for v in present]
    medians = iter(fmt_median(column) for column in zip(*numbers))
    return NUMBER.sub(lambda _: next(medians), present[0])


def first_number(value):
    if value is None:
        return "-"
    m = NUMBER.search(value)
    return m.group(0) if m else "-"


def tables(lines):
    """The report's tables: lists of consecutive lines beginning with '|'."""
    out, cur = [], []
    for line in lines + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    return out


def render(rows, right=()):
    """Rows of cells as an aligned markdown table; columns in `right` right-aligned."""
    width = {}
    for row in rows:
        for i, c in enumerate(row):
            if not RULE.match(c):
                width[i] = max(width.get(i, 3), len(c))
    for row in rows:
        out = []
        for i, c in enumerate(row):
            w = width.get(i, len(c))
            if RULE.match(c):  # a rule keeps its alignment colons
                lc, rc = c.startswith(":"), c.endswith(":")
                out.append(":" * lc + "-" * (w - lc - rc) + ":" * rc)
            elif i in right:
                out.append(c.rjust(w))
            else:
                out.append(c.ljust(w))
        print("| " + " | ".join(out) + " |")


def main(argv):
    title = ""
    if argv[:1] == ["--title"] and len(argv) >= 2:
        title, argv = argv[1], argv[2:]
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        runs = [open(path, encoding="utf-8").read().splitlines() for path in argv]
    except OSError as e:
        print(f"median.py: {e}", file=sys.stderr)
        return 2
    n = len(runs)

    keyed, order, positional = {}, [], {}
    for r, lines in enumerate(runs):
        seen = {}
        for t, table in enumerate(t for t in tables(lines) if not any(l.startswith("| RabbitMQ") for l in t)):
            for i, line in enumerate(table):
                positional.setdefault((t, i), [None] * n)[r] = cells(line)
        for line in lines:
            if not line.startswith("| RabbitMQ"):
                continue
            c = cells(line)
            key = tuple(c[:4])
            seen[key] = seen.get(key, 0) + 1
            key += (seen[key],)  # a key twice in one run: its first, second, ...
            if key not in keyed:
                keyed[key] = [None] * n
                order.append(key)
            keyed[key][r] = c

    print(f"medians of {n} runs{': ' + title if title else ''}")
    if order:
        print()
        rows = [["broker", "delays", "scenario", "figure", "value", "broker alone", "ratio", "runs"],
                ["---"] * 8]
        for key in order:
            per_run = keyed[key]
            merged = [merge([c[i] if c and len(c) > i else None for c in per_run]) for i in (4, 5, 6)]
            runs_col = "runs: " + ", ".join(first_number(c[4] if c and len(c) > 4 else None) for c in per_run)
            rows.append(list(key[:4]) + merged + [runs_col])
        render(rows, right=(4, 5, 6))
    for t in sorted({t for t, _ in positional}):
        print()
        rows = []
        for i in sorted(i for tt, i in positional if tt == t):
            per_run = positional[(t, i)]
            width = max(len(c) for c in per_run if c)
            rows.append([merge([c[j] if c and len(c) > j else None for c in per_run]) for j in range(width)])
        render(rows)
    for r, lines in enumerate(runs):
        summaries = [l for l in lines if l.startswith("summary, ")]
        if summaries:
            print(f"\nrun {r + 1} ({argv[r]}):")
            print("\n".join(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
