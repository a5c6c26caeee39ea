#!/usr/bin/python3
"""wal_history.py -- every record of a WAL's segment files, in LSN order.

    wal_history.py DIR... [--key K] [--mid M] [--id N] [--lsn LO:HI]

`delay-bridge wal dump` lists what a log still holds; this lists what it
did: one line per record of every segment file found in DIR (a WAL
directory, or the copies chaos_soak.py --keep-wal made of every segment a
bridge ever wrote, compacted ones included). The byte format is
src/wal/walrec.c's (segment header 56 bytes, record header 24 bytes,
little-endian); CRCs are not checked (use `delay-bridge wal check`), a
record whose length runs past its file ends that file.

  LSN  ADD     msg_id due enqueue key message-id   (times ISO-8601 UTC, ms)
  LSN  DONE    ids...     (published and confirmed)
  LSN  CANCEL  ids...     (x-delay-cancel, replaced by a newer version, purged)

--key K, --mid M (the message-id property) or --id N (a msg id: the LSN of
the message's first ADD) keep the ADDs that match and every DONE or CANCEL
naming one of their ids; --lsn LO:HI keeps that range. Records of one LSN
seen in several files (a copy and a compaction) are printed once.
"""

import argparse
import datetime
import glob
import os
import struct
import sys

import pika.spec

SEG_HDR = 56
REC_HDR = 24
TYPES = {1: "ADD", 2: "DONE", 3: "CANCEL"}


def iso(ms):
    return datetime.datetime.fromtimestamp(ms / 1000.0, datetime.timezone.utc).strftime(
        "%H:%M:%S.%f")[:-3]


def parse_add(p):
    msg_id, due, enq, flags, _err = struct.unpack_from("<QQQHH", p, 0)
    pos = 28
    strs = []
    for _ in range(3):
        n = p[pos]
        strs.append(p[pos + 1:pos + 1 + n].decode("utf-8", "replace"))
        pos += 1 + n
    key = None
    if flags & 2:
        n = p[pos]
        key = p[pos + 1:pos + 1 + n].decode("utf-8", "replace")
        pos += 1 + n
    (plen,) = struct.unpack_from("<I", p, pos)
    props = p[pos + 4:pos + 4 + plen]
    mid = None
    try:
        bp = pika.spec.BasicProperties()
        bp.decode(props)
        mid = bp.message_id
    except Exception:  # noqa: BLE001 -- shown as "?"
        mid = "?"
    return {"msg_id": msg_id, "due": due, "enq": enq, "key": key, "mid": mid}


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < SEG_HDR or data[:8] != b"DLYBRWAL":
        return
    pos = SEG_HDR
    while pos + REC_HDR <= len(data):
        ln, typ = struct.unpack_from("<IB", data, pos)
        (lsn,) = struct.unpack_from("<Q", data, pos + 8)
        if typ not in TYPES or pos + REC_HDR + ln > len(data) or lsn == 0:
            return
        p = data[pos + REC_HDR:pos + REC_HDR + ln]
        if typ == 1:
            r = parse_add(p)
        else:
            (n,) = struct.unpack_from("<I", p, 0)
            r = {"ids": list(struct.unpack_from("<%dQ" % n, p, 4))}
        r["lsn"], r["type"] = lsn, TYPES[typ]
        yield r
        pos += REC_HDR + ln


def load(dirs):
    """LSN -> record, over every segment file (and kept copy) in dirs."""
    recs = {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.wal*"))):
            for r in records(path):
                recs.setdefault(r["lsn"], r)
    return recs


def lines(recs, key=None, mid=None, msg_id=None, lo=0, hi=1 << 64, wall0=None):
    """The history as text lines, filtered as the command line says; with
    wall0 (epoch seconds), ADD times also as seconds after it (t=)."""
    ids = set()
    sel = key or mid or msg_id
    if sel:
        for r in recs.values():
            if r["type"] == "ADD" and ((key and r["key"] == key) or
                                       (mid and r["mid"] == mid) or r["msg_id"] == msg_id):
                ids.add(r["msg_id"])
    out = []
    for lsn in sorted(recs):
        r = recs[lsn]
        if not lo <= lsn <= hi:
            continue
        if sel:
            if r["type"] == "ADD" and r["msg_id"] not in ids:
                continue
            if r["type"] != "ADD" and not ids.intersection(r["ids"]):
                continue
        if r["type"] == "ADD":
            rel = "" if wall0 is None else " (t=%.2f, due t=%.2f)" % (
                r["enq"] / 1000.0 - wall0, r["due"] / 1000.0 - wall0)
            out.append("%8d ADD     id %d due %s enq %s%s key %s mid %s" % (
                lsn, r["msg_id"], iso(r["due"]), iso(r["enq"]), rel, r["key"] or "-", r["mid"]))
        else:
            shown = [i for i in r["ids"] if not ids or i in ids]
            out.append("%8d %-7s %s%s" % (lsn, r["type"], " ".join(map(str, shown[:20])),
                                          " (+%d more)" % (len(r["ids"]) - len(shown[:20]))
                                          if len(r["ids"]) > len(shown[:20]) else ""))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--key")
    ap.add_argument("--mid")
    ap.add_argument("--id", type=int)
    ap.add_argument("--lsn")
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.lsn.split(":")) if a.lsn else (0, 1 << 64)
    recs = load(a.dirs)
    if not recs:
        print("no records in %s" % " ".join(a.dirs), file=sys.stderr)
        return 1
    for ln in lines(recs, a.key, a.mid, a.id, lo, hi):
        print(ln)
    return 0


if __name__ == "__main__":
    sys.exit(main())
