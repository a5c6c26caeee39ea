#!/usr/bin/python3
"""check_circles.py -- no two files call each other, nor two folders (ctest "circles").

    check_circles.py BUILD_DIR SRC_DIR [--dot]

`layers` (check_layers.cmake) holds the includes: every include points down
the floors of src/README.md. Includes are not calls, though: two files of
one folder may include one header and call each other through it, and a
function pointer crosses a floor without an include. This test reads what
the linker reads. For every object file the build made from src/ it asks
`nm` which global symbols the object defines and which it uses; a use of a
symbol another object defines is an arrow from the user's source file to
the definer's. Then it looks for circles (strongly connected components of
more than one node, Tarjan's algorithm) twice:

  - between files: a.c uses b.c and b.c uses a.c, directly or round a
    longer loop, in one folder or across folders;
  - between folders: any file of A uses a file of B and any file of B uses
    a file of A.

Either is a failure that names every file (or folder) on the circle and
each arrow between them with one symbol that makes it, so the reader sees
what to move. What two files share goes into a third that both use (one
floor down when the two are folders): src/README.md "The house".

Static functions are invisible here, as they should be: a file may call
itself. Symbols defined by libraries (rabbitmq-c, libev, json-c, libc) are
not arrows. --dot prints the file graph in Graphviz form instead.
"""

import collections
import os
import subprocess
import sys


def objects(build):
    """(source path relative to src/, object path) for the daemon's objects.

    The daemon is built once into dbcore, dbamqp and delay-bridge; the
    failpoint and sanitizer variants compile the same files again and would
    only repeat the arrows."""
    out = {}
    for target in ("dbcore.dir", "dbamqp.dir", "delay-bridge.dir"):
        top = os.path.join(build, "CMakeFiles", target)
        for root, _, names in os.walk(top):
            for n in names:
                if not n.endswith(".c.o"):
                    continue
                path = os.path.join(root, n)
                rel = os.path.relpath(path, top)[:-2]  # src/wal/wal.c
                if rel.startswith("src/"):
                    out[rel[4:]] = path
    return out


def symbols(obj):
    """(defined globals, undefined symbols) of one object file."""
    text = subprocess.run(["nm", "-P", obj], check=True, capture_output=True,
                          text=True).stdout
    defined, used = set(), set()
    for line in text.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            used.add(name)
        elif kind.isupper() and kind not in "N":
            defined.add(name)
    return defined, used


def graph(objs):
    """file -> {file it uses: one symbol that makes the arrow}."""
    owner, uses = {}, {}
    for src, obj in sorted(objs.items()):
        d, u = symbols(obj)
        for s in d:
            owner.setdefault(s, src)
        uses[src] = u
    g = {src: {} for src in objs}
    for src, u in uses.items():
        for s in sorted(u):
            dst = owner.get(s)
            if dst and dst != src:
                g[src].setdefault(dst, s)
    return g


def folder_of(src):
    return os.path.dirname(src) or "main"


def folders(g):
    fg = collections.defaultdict(dict)
    for a, outs in g.items():
        fa = folder_of(a)
        fg.setdefault(fa, {})
        for b, sym in outs.items():
            fb = folder_of(b)
            if fa != fb:
                fg[fa].setdefault(fb, "%s -> %s (%s)" % (a, b, sym))
    return fg


def circles(g):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in g:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(g[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def report(kind, g, comps):
    for comp in comps:
        print("circle between %s: %s" % (kind, ", ".join(comp)))
        members = set(comp)
        for a in comp:
            for b, why in sorted(g[a].items()):
                if b in members:
                    print("    %s -> %s: %s" % (a, b, why))


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: check_circles.py BUILD_DIR SRC_DIR [--dot]\n")
        return 2
    build, src = argv[1], argv[2]
    objs = objects(build)
    missing = [s for s in objs if not os.path.exists(os.path.join(src, s))]
    objs = {s: o for s, o in objs.items() if s not in missing}  # stale objects of removed files
    if len(objs) < 10:
        print("check_circles: only %d objects under %s: build first" % (len(objs), build))
        return 2
    g = graph(objs)
    if "--dot" in argv:
        print("digraph files {")
        for a, outs in sorted(g.items()):
            for b in sorted(outs):
                print('  "%s" -> "%s";' % (a, b))
        print("}")
        return 0
    fg = folders(g)
    fc, dc = circles(g), circles(fg)
    report("files", g, fc)
    report("folders", fg, dc)
    arrows = sum(len(v) for v in g.values())
    print("check_circles: %d files, %d arrows between files, %d folders; "
          "%d circle(s) between files, %d between folders" % (
              len(g), arrows, len(fg), len(fc), len(dc)))
    return 1 if fc or dc else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
