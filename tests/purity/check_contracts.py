#!/usr/bin/python3
"""check_contracts.py -- include/ holds exactly the contracts between folders (ctest "contracts").

    check_contracts.py SRC_DIR INCLUDE_DIR

A header is a contract between folders when a file of another folder
includes it; then it lives in include/delay-bridge/ and is included as
"delay-bridge/name.h". A header only its own folder includes is that
folder's business and lives beside its .c files. src/main.c, on top of
every floor (9 of src/README.md), is nobody's neighbour: it starts the
daemon or a subcommand and reaches each folder's entry header by its path
("daemon/bridge.h", "cli/cli.h", "repl/wrepl.h"); what only main.c includes
is no contract between folders. Floor 1's utilities (`base/`: log, clock,
xalloc, ...) are included by every floor and promise nothing between
modules (src/STYLE.md): they stay in base/ and are not checked.

A header's home folder is the folder of its .c (wal.h -> src/wal/wal.c) or,
for the few whose code is spread or named otherwise, the table
DB_PUBLIC_HOME of check_layers.cmake, read from there so the two checks
cannot disagree. Tests and benchmarks may include any header: they are not
folders of the daemon.

A contract includes only contracts: no header of include/ includes one of
src/ (its signatures would carry a type the reader cannot find beside it).

Fails naming each header in the wrong place and who includes it.
"""

import collections
import glob
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def public_home_table(layers):
    text = open(layers).read()
    m = re.search(r'set\(DB_PUBLIC_HOME(.*?)\)', text, re.S)
    return dict(e.split(":") for e in re.findall(r'"([^"]+:[^"]+)"', m.group(1))) if m else {}


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: check_contracts.py SRC_DIR INCLUDE_DIR\n")
        return 2
    src, inc = argv[1], argv[2]
    homes = public_home_table(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           "check_layers.cmake"))
    users = collections.defaultdict(set)  # header key -> folders that include it
    files = glob.glob(os.path.join(src, "*", "*.[ch]")) + [os.path.join(src, "main.c")]
    for f in files:
        folder = os.path.relpath(os.path.dirname(f), src)
        if folder == ".":
            continue  # src/main.c: see above
        for h in INCLUDE.findall(open(f, errors="replace").read()):
            key = h if "/" in h else "%s/%s" % (folder, h)
            users[key].add(folder)

    bad = []
    for path in sorted(glob.glob(os.path.join(inc, "delay-bridge", "*.h"))):
        name = os.path.basename(path)
        home = homes.get(name)
        if not home:
            c = glob.glob(os.path.join(src, "*", name[:-2] + ".c"))
            home = os.path.basename(os.path.dirname(c[0])) if c else None
        if home is None:
            bad.append("include/delay-bridge/%s: no home folder (no %s.c; name it in "
                       "check_layers.cmake's DB_PUBLIC_HOME)" % (name, name[:-2]))
            continue
        for h in INCLUDE.findall(open(path, errors="replace").read()):
            if not h.startswith("delay-bridge/"):
                bad.append("include/delay-bridge/%s includes \"%s\", a header of src/: a "
                           "contract includes only contracts" % (name, h))
        others = sorted(users.get("delay-bridge/" + name, set()) - {home})
        if not others:
            bad.append("include/delay-bridge/%s: only %s/ includes it: move it to src/%s/" % (
                name, home, home))
    for path in sorted(glob.glob(os.path.join(src, "*", "*.h"))):
        folder = os.path.basename(os.path.dirname(path))
        if folder == "base":
            continue  # utilities: see above
        key = "%s/%s" % (folder, os.path.basename(path))
        others = sorted(users.get(key, set()) - {folder})
        if others:
            bad.append("src/%s: included by %s: a contract between folders, move it to "
                       "include/delay-bridge/" % (key, ", ".join(o + "/" for o in others)))
    for b in bad:
        print(b)
    print("check_contracts: %d public header(s), %d in the wrong place" % (
        len(glob.glob(os.path.join(inc, "delay-bridge", "*.h"))), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
