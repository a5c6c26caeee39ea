#!/usr/bin/python3
"""config_doc.py -- the configuration's documentation, made from its schema.

    /usr/bin/python3 deploy/man/config_doc.py          # rewrite both from the schema
    /usr/bin/python3 deploy/man/config_doc.py --check  # exit 1 when either differs

src/config/config_keys.def holds every key of the configuration once: its
section, type, range, default, how a reload applies it, its documented
default and its description (markdown, one line of the README's table). Two
documents show them and are written from it here, so they never drift from
the code nor from each other:

  README.md, "Configuration reference"   the table's rows, "| key | default |
      meaning |", in the schema's order; a row whose description is "=" joins
      the row before it ("`broker.reconnect_min_ms` / `reconnect_max_ms`").
  deploy/man/delay-bridge.json.5, KEYS   one .TP entry per key path under a
      .SS heading per section: "Default: D." (or "Required ..."), the
      description in roff, then from the row's fields "Range: LO..HI." for
      an integer and "Reload: ..." from its LIVE / RECONSUME flags.
  deploy/man/delay-bridge.json.5, RELOAD  the lists of keys a reload applies
      at once (LIVE) and by consuming again (RECONSUME).

Everything else in both files is written by hand. tests/deploy/test_manpages.py
runs the check (ctest deploy.manpages). No build, no broker: it reads text.
"""
import os
import re
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCHEMA = os.path.join(ROOT, "src", "config", "config_keys.def")
README = os.path.join(ROOT, "README.md")
PAGE5 = os.path.join(ROOT, "deploy", "man", "delay-bridge.json.5")

# The sections' key prefixes (config_schema.c cfg_sect_pre) and the page's headings.
SECT_PREFIX = {"TOP": "", "BROKER": "broker", "TLS": "broker.tls", "WAL": "wal",
               "REPL": "wal.replicate", "HTTP": "http", "LOG": "log", "LIMITS": "limits",
               "ROUTE": "routes[]", "RETRY": "routes[].retry",
               "POLICY": "routes[].retry.queues.*"}
HEADING = {"TOP": '"Top level"'}
# C constants the schema's ranges are written with.
CONSTS = {"UINT32_MAX": 4294967295, "INT64_MAX": 9223372036854775807,
          "CONFIG_MAX_HELD": 4294967295, "CONFIG_STREAM_SEGMENT_MAX_MB": 2861,
          "WAL_MAX_SEGMENT_BYTES": 2 << 30}

TABLE_HEAD = "| key | default | meaning |\n|---|---|---|\n"


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---- the schema ------------------------------------------------------------------------

def c_args(text):
    """The arguments of one macro call's text (after its "("); string literals unquoted
    and joined, NULL as None, anything else as written."""
    args, cur, depth, i = [], "", 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur += text[i:j + 1]
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            i += 1
            continue
        cur += ch
        i += 1
    args.append(cur.strip())
    out = []
    for a in args:
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', a)
        if parts and re.fullmatch(r'(\s*"(?:[^"\\]|\\.)*"\s*)+', a):
            out.append(re.sub(r"\\(.)", r"\1", "".join(parts)))
        else:
            out.append(None if a == "NULL" else a)
    return out


def schema_rows():
    """The rows: dicts of sect, key, path, type, field, lo, hi, flags, choices, docdef, doc."""
    text = re.sub(r"/\*.*?\*/", "", read(SCHEMA), flags=re.S)
    rows = []
    for m in re.finditer(r"^CFG_(KEY|OWN)\(", text, re.M):
        a = c_args(text[m.end():])
        if m.group(1) == "KEY":
            r = dict(sect=a[0], key=a[1], type=a[2], field=a[3], lo=a[4], hi=a[5], flags=a[9],
                     choices=a[10], docdef=a[12], doc=a[13])
        else:
            r = dict(sect=a[0], key=a[1], type=a[2], field=None, lo=None, hi=None, flags=a[3],
                     choices=None, docdef=a[6], doc=a[7])
        r["flags"] = r["flags"] or ""
        pre = SECT_PREFIX[r["sect"]]
        r["path"] = pre + "." + r["key"] if pre else r["key"]
        rows.append(r)
    return rows


def c_value(expr):
    """A range bound of the schema as a number (C constants and + - * << >> of them)."""
    e = expr
    for k, v in CONSTS.items():
        e = re.sub(r"\b%s\b" % k, str(v), e)
    if not re.fullmatch(r"[0-9 ()+\-*<>]+", e):
        return None
    return eval(e)  # digits and operators only, checked above


# ---- README.md ---------------------------------------------------------------------------

def readme_table(rows):
    """The table's rows: one per documented key, "=" rows joined to the one before."""
    out = []
    for r in rows:
        if r["docdef"] is None:
            continue
        if r["doc"] == "=" and out:
            prev = out[-1]
            prev["keys"].append(r["key"])
            prev["defaults"].append(r["docdef"])
            continue
        out.append({"keys": [r["path"]], "defaults": [r["docdef"]], "doc": r["doc"]})
    lines = []
    for t in out:
        same = len(set(t["defaults"])) == 1
        key = (", " if same else " / ").join("`%s`" % k for k in t["keys"])
        default = t["defaults"][0] if same else " / ".join(t["defaults"])
        lines.append("| %s | %s | %s |" % (key, default, t["doc"]))
    return "\n".join(lines) + "\n"


def readme_text(rows, text):
    """README.md's text with its configuration table made from the schema."""
    part = text.index("## Configuration reference")
    head = text.index(TABLE_HEAD, part) + len(TABLE_HEAD)
    end = head
    while text.startswith("| ", end):
        end = text.index("\n", end) + 1
    return text[:head] + readme_table(rows) + text[end:]


# ---- the man page ------------------------------------------------------------------------

ROFF_CHARS = {"×": "\\(mu", "±": "\\(+-", "−": "\\-", "⌈": "\\(lc", "⌉": "\\(rc", "⌊": "\\(lf",
              "⌋": "\\(rf", "—": "\\(em", "–": "\\(en", "→": "\\(->", "≤": "\\(<=", "…": "...",
              "µ": "\\(mc"}


def roff_plain(s):
    s = s.replace("\\", "\\e").replace('"', "\\(dq")
    s = re.sub(r"⌈(.*?)⌉", r"ceil(\1)", s)  # -Tascii has no ceiling and floor brackets
    s = re.sub(r"⌊(.*?)⌋", r"floor(\1)", s)
    for a, b in ROFF_CHARS.items():
        s = s.replace(a, b)
    s = re.sub(r"\*\*(.+?)\*\*", r"\\fB\1\\fP", s)
    return s.replace("e.g. ", "e.g.\\& ").replace("i.e. ", "i.e.\\& ")


def roff_code(s):
    return "\\fB" + s.replace("\\", "\\e").replace("-", "\\-").replace('"', "\\(dq") + "\\fP"


def roff(md):
    """Markdown (code spans, bold, plain text) as roff text."""
    parts = re.split(r"`([^`]*)`", md)
    return "".join(roff_code(p) if i % 2 else roff_plain(p) for i, p in enumerate(parts))


def sentence(md):
    """A description as the page's text: first letter up, a full stop, a line per clause."""
    md = md.strip()
    if md and md[0].isalpha():
        md = md[0].upper() + md[1:]
    if not md.endswith("."):
        md += "."
    text = roff(md)
    lines = re.split(r"(?<=;) |(?<=\.) (?=[A-Z\\])", text)
    return ["\\&" + l if l.startswith((".", "'")) else l for l in lines]


def default_line(docdef):
    if docdef.startswith("required"):
        return roff("R" + docdef[1:]) + "."
    return "Default: " + roff(docdef) + "."


def reload_line(r):
    if r["sect"] in ("RETRY", "POLICY") or r["key"] == "name":
        return None
    if r["field"] is None and r["key"] != "retry":
        return None
    if "LIVE" in r["flags"]:
        return "Reload: applied at once%s." % (" (RELOAD says when not)" if r["sect"] == "ROUTE"
                                                else "")
    if "RECONSUME" in r["flags"]:
        return "Reload: applied by consuming again (RELOAD says when not)."
    return "Reload: at the next start."


def man_keys(rows):
    """The KEYS section's body: a .SS per section, a .TP entry per documented key."""
    out, sect = [], None
    for r in rows:
        if r["docdef"] is None:
            continue
        if r["sect"] != sect:
            sect = r["sect"]
            out.append(".SS " + HEADING.get(sect, SECT_PREFIX[sect]))
        out += [".TP", ".B " + r["path"], default_line(r["docdef"])]
        doc, i = r["doc"], rows.index(r)
        out += sentence(doc if doc != "=" else
                        next(p["doc"] for p in reversed(rows[:i]) if p["doc"] != "="))
        if r["type"] == "INT" and r["lo"] is not None:
            out.append("Range: %d..%d." % (c_value(r["lo"]), c_value(r["hi"])))
        line = reload_line(r)
        if line:
            out.append(line)
    return "\n".join(out) + "\n"


def reload_list(rows, what):
    """RELOAD's list of what ("LIVE file", "LIVE routes", "RECONSUME routes"): its lines."""
    flag, where = what.split()
    names = [r["key"] if r["sect"] == "ROUTE" else r["path"] for r in rows
             if flag in r["flags"] and (r["sect"] == "ROUTE") == (where == "routes")]
    return [".BR %s ," % n for n in names[:-1]] + [".B %s" % n for n in names[-1:]]


def page_text(rows, text):
    """The page's text with its KEYS section, and RELOAD's lists of keys, made from the
    schema. A list is the lines between '.\\" list: FLAG file|routes' and
    '.\\" end of the list'."""
    start = text.index(".SH KEYS\n") + len(".SH KEYS\n")
    end = text.index("\n.SH ", start) + 1
    text = text[:start] + man_keys(rows) + text[end:]
    out, skip = [], False
    for line in text.split("\n"):
        if skip and line != '.\\" end of the list':
            continue
        skip = False
        out.append(line)
        m = re.match(r'\.\\" list: (\w+ \w+)', line)
        if m:
            out += reload_list(rows, m.group(1))
            skip = True
    return "\n".join(out)


def main():
    rows = schema_rows()
    check = "--check" in sys.argv[1:]
    bad = 0
    for path, make in ((README, readme_text), (PAGE5, page_text)):
        old = read(path)
        new = make(rows, old)
        if new == old:
            continue
        bad += 1
        if check:
            print("FAIL: %s is not what the schema makes of it; run deploy/man/config_doc.py"
                  % os.path.relpath(path, ROOT))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print("wrote %s" % os.path.relpath(path, ROOT))
    return 1 if check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
