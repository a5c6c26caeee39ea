#!/usr/bin/python3
"""test_manpages.py -- the man pages (deploy/man/) agree with the code and
the README.

    /usr/bin/python3 tests/deploy/test_manpages.py

No build, no broker: it reads sources. Checks, each printed as "ok:" or
"FAIL:" naming the key (or command, or variable) that is wrong and where:

  delay-bridge.json(5) against the schema (src/config/config_keys.def)
    - the key paths the parser accepts are the schema's rows: the parser
      reads, defaults and refuses unknown keys from them alone;
    - every accepted key path has a .TP entry in the page's KEYS section
      (a section object such as "broker" may instead be a .SS heading),
      and every entry names an accepted key path;
    - keys documented inside one entry: a per-queue retry policy's keys
      (routes[].retry.queues), a template's extra and excluded keys
      (route_templates), the routes file's top-level keys (routes_file).
    - each entry's "Default: D." is the row's documented default, word for
      word; an integer row's range "LO..HI" is in its entry, and a choice
      row's every name;
    - RELOAD lists a route key under "applied at once" exactly when its row
      is LIVE, under "applied by consuming again" when RECONSUME.
  delay-bridge.json(5) against README.md's "Configuration reference"
    - the same set of key paths (a row "`a.b` / `c`" is a.b and a.c);
    - each entry's first line is "Default: D." (or "Required ...") with D
      the README's default, word for word.
  delay-bridge(8) against the code
    - every subcommand main() dispatches is in SYNOPSIS and COMMANDS;
    - every environment variable src/ reads with getenv() is in ENVIRONMENT;
    - each page's .TH line carries "delay-bridge X.Y.Z", which the package
      replaces with the project's version (deploy/debian/package.cmake);
    - both pages render without a groff warning, -Tutf8 and -Tascii (when
      groff is installed).

  README.md's table and the page's KEYS section are written from the
  schema by deploy/man/config_doc.py: each must be what it makes now.

A new key is one row of the schema, then `config_doc.py` to write the two
documents. Exit 0 pass, 1 fail.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PAGE5 = os.path.join(ROOT, "deploy", "man", "delay-bridge.json.5")
PAGE8 = os.path.join(ROOT, "deploy", "man", "delay-bridge.8")
CONFIG_SRC = os.path.join(ROOT, "src", "config")

# The schema's reader and the documents' maker (deploy/man/config_doc.py).
sys.path.insert(0, os.path.join(ROOT, "deploy", "man"))
import config_doc  # noqa: E402
from config_doc import c_value, schema_rows  # noqa: E402

# The routes file's own top level (config_routes.c store_top): not keys of the configuration.
STORE_ARRAY = ("config_routes.c", "keys")

failures = 0


def ok(msg):
    print("ok: " + msg)


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---- the parser's key paths --------------------------------------------------------

def parser_keys():
    """{key path: where} of every key the parser accepts (the schema's rows), and the arrays
    met (the routes file's own keys)."""
    paths, arrays = {}, {}
    for r in schema_rows():
        paths[r["path"]] = "config_keys.def:%s" % r["sect"]
    text = read(os.path.join(CONFIG_SRC, STORE_ARRAY[0]))
    m = re.search(r"static const char \*const keys\[\] = \{(.*?)\};", text, re.S)
    arrays[STORE_ARRAY] = re.findall(r'"([^"]*)"', m.group(1)) if m else []
    return paths, arrays


def template_keys():
    """(excluded route keys, extra keys) of a route_templates entry (config_template.c)."""
    text = read(os.path.join(CONFIG_SRC, "config_template.c"))
    m = re.search(r"int cfg_parse_templates\(.*?\n\}", text, re.S)
    body = m.group(0) if m else ""
    return (re.findall(r'strcmp\(\*k, "(\w+)"\) != 0', body),
            re.findall(r'keys\[nk\+\+\] = "(\w+)"', body))


# ---- the page -----------------------------------------------------------------------

def roff_text(s):
    """Roff source to plain text (enough for these pages)."""
    for a, b in [("\\(dq", '"'), ("\\(+-", "±"), ("\\(mu", "×"), ("\\(lc", "⌈"), ("\\(rc", "⌉"),
                 ("\\(lf", "⌊"), ("\\(rf", "⌋"), ("\\(lq", "“"), ("\\(rq", "”"), ("\\-", "-"),
                 ("\\&", ""), ("\\e", "\\")]:
        s = s.replace(a, b)
    s = re.sub(r"\\f[BIRP]", "", s)
    return s


def sections(text):
    """{.SH name: its lines}."""
    out, cur = {}, None
    for line in text.split("\n"):
        m = re.match(r'\.SH "?([^"]*)"?$', line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def page_entries(lines):
    """({key path: entry text}, [.SS headings]) of the KEYS section."""
    entries, heads, cur = {}, [], None
    for i, line in enumerate(lines):
        if line.startswith(".SS"):
            heads.append(line[3:].strip().strip('"'))
            cur = None
        elif line == ".TP" and i + 1 < len(lines):
            m = re.match(r"\.B (\S+)$", lines[i + 1])
            if not m:
                fail("delay-bridge.json.5: KEYS: a .TP entry without \".B KEY.PATH\": %r"
                     % lines[i + 1])
                cur = None
                continue
            cur = m.group(1)
            if cur in entries:
                fail("delay-bridge.json.5: %s: documented twice" % cur)
            entries[cur] = ""
        elif cur and not lines[i - 1] == ".TP":
            entries[cur] += roff_text(line) + "\n"
    return entries, heads


# ---- the README -----------------------------------------------------------------------

def readme_rows():
    """{key path: default text} from README.md's "Configuration reference" table."""
    text = read(os.path.join(ROOT, "README.md"))
    part = text.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in part.split("\n"):
        if not line.startswith("| `"):
            continue
        cells = [c.strip().replace("\0", "|")
                 for c in line.replace("\\|", "\0").strip().strip("|").split(" | ")]
        names = re.findall(r"`([^`]+)`", cells[0])
        parent = names[0].rsplit(".", 1)[0] if "." in names[0] else ""
        keys = [names[0]] + [n if "." in n else parent + "." + n for n in names[1:]]
        defaults = ([d.strip() for d in cells[1].split(" / ")]
                    if len(keys) > 1 and " / " in cells[1] else [cells[1]] * len(keys))
        if len(defaults) != len(keys):
            fail("README.md: row %s: %d keys, %d defaults" % (cells[0], len(keys), len(defaults)))
            continue
        for k, d in zip(keys, defaults):
            rows[k] = re.sub(r"`|\*\*", "", d)
    return rows


def norm(s):
    return re.sub(r"\s+", " ", s).strip().lower()


# ---- the checks ------------------------------------------------------------------------

def check_config_page():
    accepted, arrays = parser_keys()
    if len(accepted) < 40:
        fail("src/config/*.c: found only %d key paths in the parser's key arrays: has the "
             "configuration moved to a schema table? Teach parser_keys() in %s to read it"
             % (len(accepted), os.path.basename(__file__)))
        return
    text5 = read(PAGE5)
    secs = sections(text5)
    if "KEYS" not in secs:
        fail("delay-bridge.json.5: no KEYS section")
        return
    entries, heads = page_entries(secs["KEYS"])
    containers = {p.rsplit(".", 1)[0] for p in accepted if "." in p}
    containers |= {c[:-2] for c in containers if c.endswith("[]")}

    # per-queue policies and templates are documented inside one entry each
    nested = {p for p in accepted if p.startswith("routes[].retry.queues.*.")}
    for p in sorted(nested):
        k = p.rsplit(".", 1)[1]
        if not re.search(r"\b%s\b" % re.escape(k), entries.get("routes[].retry.queues", "")):
            fail("delay-bridge.json.5: routes[].retry.queues: does not name the per-queue "
                 "key %s (config_retry.c policy_keys)" % k)
    excluded, extra = template_keys()
    for k in excluded + extra:
        if not re.search(r"\b%s\b" % re.escape(k), entries.get("route_templates", "")):
            fail("delay-bridge.json.5: route_templates: does not name %s (%s in a template, "
                 "config_template.c)" % (k, "not allowed" if k in excluded else "a key of its own"))
    for k in arrays.get(("config_routes.c", "keys"), []):
        if '"%s"' % k not in entries.get("routes_file", ""):
            fail("delay-bridge.json.5: routes_file: does not show the routes file's key "
                 "\"%s\" (config_routes.c store_top)" % k)

    want = {p for p in accepted if p not in nested} | {"routes[].retry.queues"}
    missing = 0
    for p in sorted(want):
        if p in entries or (p in containers and p in heads):
            continue
        missing += 1
        fail("delay-bridge.json.5: key %s is accepted by the parser (src/config/%s) but has no "
             "entry in KEYS" % (p, accepted.get(p, "config_retry.c").split(":")[0]))
    extra_doc = 0
    for p in sorted(entries):
        if p not in want and p not in containers:
            extra_doc += 1
            fail("delay-bridge.json.5: key %s is documented but the parser does not accept it"
                 % p)
    for h in heads:
        if re.fullmatch(r"[a-z_.\[\]]+", h) and h not in want and h not in containers:
            fail("delay-bridge.json.5: section heading %s is not a section the parser knows" % h)
    if not missing and not extra_doc:
        ok("delay-bridge.json.5 documents exactly the %d key paths the parser accepts "
           "(%d nested in routes[].retry.queues)" % (len(want), len(nested)))

    rows = readme_rows()
    bad = 0
    for p in sorted(set(rows) - set(entries)):
        bad += 1
        fail("README.md's configuration table has key %s; delay-bridge.json.5 has no entry" % p)
    for p in sorted(set(entries) - set(rows)):
        bad += 1
        fail("delay-bridge.json.5 has key %s; README.md's configuration table has no row" % p)
    for p in sorted(set(rows) & set(entries)):
        first = re.sub(r"^Default: |\.$", "", entries[p].split("\n")[0])
        if norm(rows[p]) != norm(first):
            bad += 1
            fail("%s: README.md's default %r, the page's entry says %r"
                 % (p, rows[p], entries[p].split("\n")[0]))
    if not bad:
        ok("README.md's configuration table and delay-bridge.json.5: the same %d key paths, "
           "the same defaults" % len(rows))
    for p in sorted(set(want) - set(rows) - containers):
        fail("README.md's configuration table has no row for key %s (accepted by the parser)" % p)


def check_schema_page():
    """Each row's default, range, choices and reload flags against the page."""
    text5 = read(PAGE5)
    secs = sections(text5)
    entries, _ = page_entries(secs.get("KEYS", []))
    choices = {}
    src = read(os.path.join(CONFIG_SRC, "config_schema.c"))
    for m in re.finditer(r"static const char \*const (\w+)\[\] = \{(.*?)\};", src, re.S):
        choices[m.group(1)] = re.findall(r'"([^"]*)"', m.group(2))
    bad = 0
    for r in schema_rows():
        e = entries.get(r["path"])
        if e is None or r["docdef"] is None:
            continue
        first = re.sub(r"^Default: |\.$", "", e.split("\n")[0])
        if norm(first) != norm(re.sub(r"`|\*\*", "", r["docdef"])):
            bad += 1
            fail("%s: the schema's default %r, the page's entry says %r"
                 % (r["path"], r["docdef"], e.split("\n")[0]))
        if r["type"] == "INT" and r["lo"] is not None:
            lo, hi = c_value(r["lo"]), c_value(r["hi"])
            if lo is None or hi is None or "%d..%d" % (lo, hi) not in e:
                bad += 1
                fail("%s: the page's entry does not give the schema's range %s..%s"
                     % (r["path"], lo, hi))
        if r["type"] == "CHOICE":
            for c in choices.get(r["choices"], []):
                if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(c), e):
                    bad += 1
                    fail("%s: the page's entry does not name the choice %s" % (r["path"], c))
    if not bad:
        ok("delay-bridge.json.5: each key's default, range and choices are the schema's")

    reload_ = roff_text("\n".join(secs.get("RELOAD", [])))
    parts = re.split(r"^\.TP\n\.B ", reload_, flags=re.M)
    said = {}
    for p in parts[1:]:
        head, _, body = p.partition("\n")
        said[head.strip()] = set(re.findall(r"^\.B[R]? ([\w.]+)", body, re.M))
    bad = 0
    for r in schema_rows():
        if r["sect"] in ("RETRY", "POLICY") or r["type"] == "SECTION":
            continue
        flags = r["flags"] or ""
        name = r["key"] if r["sect"] == "ROUTE" else r["path"]
        for head, flag in (("applied at once", "LIVE"), ("applied by consuming again", "RECONSUME")):
            listed = name in said.get(head, set())
            if listed != (flag in flags):
                bad += 1
                fail("delay-bridge.json.5: RELOAD: %s is %s under \"%s\", but its schema row "
                     "is %s%s" % (name, "listed" if listed else "not listed", head,
                                  "" if flag in flags else "not ", flag))
    if not bad:
        ok("delay-bridge.json.5: RELOAD lists the keys the schema applies live and by "
           "consuming again")


def check_generated():
    """README.md's table and the page's KEYS are what config_doc.py makes of the schema."""
    rows = schema_rows()
    bad = 0
    for path, make in ((os.path.join(ROOT, "README.md"), config_doc.readme_text),
                       (PAGE5, config_doc.page_text)):
        if make(rows, read(path)) != read(path):
            bad += 1
            fail("%s: not what the schema (src/config/config_keys.def) makes of it; run "
                 "/usr/bin/python3 deploy/man/config_doc.py" % os.path.relpath(path, ROOT))
    if not bad:
        ok("README.md's configuration table and delay-bridge.json.5's KEYS are made from the "
           "schema (%d rows)" % len(rows))


def check_daemon_page():
    text8 = read(PAGE8)
    secs = sections(text8)
    main = read(os.path.join(ROOT, "src", "main.c"))
    cmds = re.findall(r'strcmp\(argv\[1\], "([\w-]+)"\) == 0\)\s*return', main)
    syn = roff_text("\n".join(secs.get("SYNOPSIS", [])))
    com = roff_text("\n".join(secs.get("COMMANDS", [])))
    bad = 0
    for c in cmds:
        if not re.search(r"delay-bridge %s\b" % re.escape(c), syn):
            bad += 1
            fail("delay-bridge.8: subcommand %s (src/main.c) is not in SYNOPSIS" % c)
        if not re.search(r'^(\.B\w* "?)?%s\b' % re.escape(c), com, re.M):
            bad += 1
            fail("delay-bridge.8: subcommand %s (src/main.c) has no entry in COMMANDS" % c)
    for opt in re.findall(r'\{"([\w-]+)", (?:no|required)_argument', main):
        if "--" + opt not in syn + "\n" + roff_text("\n".join(secs.get("OPTIONS", []))):
            bad += 1
            fail("delay-bridge.8: option --%s (src/main.c) is not in SYNOPSIS or OPTIONS" % opt)
    if not bad:
        ok("delay-bridge.8: the %d subcommands of src/main.c in SYNOPSIS and COMMANDS, its "
           "options in OPTIONS" % len(cmds))

    names = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for fn in files:
            if not fn.endswith((".c", ".h")):
                continue
            text = read(os.path.join(dirpath, fn))
            for arg in re.findall(r"getenv\(([^)]+)\)", text):
                arg = arg.strip()
                if arg.startswith('"'):
                    names.add(arg.strip('"'))
                    continue
                m = None
                for src in [text, read(os.path.join(CONFIG_SRC, "config_int.h"))]:
                    m = m or re.search(r'#define %s "([^"]+)"' % re.escape(arg), src)
                if m:
                    names.add(m.group(1))
                else:
                    fail("src/%s: getenv(%s): cannot tell the variable's name"
                         % (os.path.relpath(os.path.join(dirpath, fn), os.path.join(ROOT, "src")),
                            arg))
    env = roff_text("\n".join(secs.get("ENVIRONMENT", [])))
    bad = 0
    for n in sorted(names):
        if not re.search(r"^\.B %s$" % re.escape(n), env, re.M):
            bad += 1
            fail("delay-bridge.8: environment variable %s (read by src/) is not in "
                 "ENVIRONMENT" % n)
    if not bad:
        ok("delay-bridge.8: ENVIRONMENT has every variable src/ reads (%s)"
           % ", ".join(sorted(names)))


def check_th():
    """deploy/debian/package.cmake puts the project's version in each page's .TH line
    by replacing "delay-bridge X.Y.Z" there: the line must have it."""
    for page in (PAGE8, PAGE5):
        th = [l for l in read(page).split("\n") if l.startswith(".TH ")]
        if len(th) == 1 and len(re.findall(r'"delay-bridge \d+\.\d+\.\d+"', read(page))) == 1 \
                and '"delay-bridge' in th[0]:
            ok("%s: one .TH line, with \"delay-bridge X.Y.Z\" for the package's version"
               % os.path.basename(page))
        else:
            fail("%s: expected one .TH line holding the only \"delay-bridge X.Y.Z\" of the page "
                 "(package.cmake replaces it with the version)" % os.path.basename(page))


def check_render():
    if not shutil.which("groff"):
        print("skip: groff not installed: the pages' rendering is not checked")
        return
    for page in (PAGE8, PAGE5):
        bad = 0
        for dev in ("utf8", "ascii"):  # ascii: what man uses under LANG=C
            r = subprocess.run(["groff", "-man", "-T" + dev, "-ww", "-z", page],
                               capture_output=True, text=True)
            if r.returncode != 0 or r.stderr.strip():
                bad += 1
                fail("%s: groff -man -T%s -ww: %s" % (os.path.basename(page), dev,
                                                      r.stderr.strip() or "exit %d" % r.returncode))
        if not bad:
            ok("%s renders without a groff warning (-Tutf8, -Tascii)" % os.path.basename(page))


def main():
    check_generated()
    check_config_page()
    check_schema_page()
    check_daemon_page()
    check_th()
    check_render()
    print("%s: %d failure(s)" % ("FAILED" if failures else "PASSED", failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
