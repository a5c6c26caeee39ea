#!/usr/bin/python3
"""stream_dump.py -- what a replicated log's stream holds, message by message.

    stream_dump.py URI STREAM [--seconds S] [--lsn LO:HI]

Reads STREAM from its first retained message (x-stream-offset "first") and
prints one line per message: its stream offset, its kind (REC a batch of
records, FENCE a new owner's term, HORIZON a stream checkpoint), the term
it belongs to (T0, T1, ... in order of appearance: the 64-bit owner token
is not shown), and for REC the first LSN and the count. Then, for every
fence, where the records before it end and where those after it start:
a first LSN past that end is a GAP (records the log has and the stream
never got). The header layout is src/wal/replrec.c's (little-endian: magic
"DBRS", version, kind, 2 zero bytes, wal_id, owner, lsn, count, CRC).
--lsn LO:HI prints only batches touching those LSNs (fences and horizons
are always printed). Used to read back the stream of a failed
chaos_soak.py run from its kept nodes (cluster.sh start-node DIR I).
"""

import argparse
import struct
import time

import pika

KINDS = {1: "REC", 2: "FENCE", 3: "HORIZON"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("uri")
    ap.add_argument("stream")
    ap.add_argument("--seconds", type=float, default=8.0, help="stop after this long")
    ap.add_argument("--lsn", default=None, help="LO:HI, only batches touching these LSNs")
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.lsn.split(":")) if a.lsn else (0, 1 << 64)

    conn = pika.BlockingConnection(pika.URLParameters(a.uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=500)
    msgs = []

    def on_msg(c, m, p, body):
        off = (p.headers or {}).get("x-stream-offset")
        if body[:4] == b"DBRS" and len(body) >= 40:
            owner, lsn = struct.unpack("<QQ", body[16:32])
            msgs.append((off, body[5], owner, lsn, struct.unpack("<I", body[32:36])[0]))
        else:
            msgs.append((off, None, 0, 0, 0))
        c.basic_ack(m.delivery_tag)

    ch.basic_consume(a.stream, on_msg, arguments={"x-stream-offset": "first"})
    t0 = time.time()
    while time.time() - t0 < a.seconds:
        conn.process_data_events(time_limit=1)
    conn.close()

    terms = {}
    for off, kind, owner, lsn, cnt in msgs:
        term = terms.setdefault(owner, "T%d" % len(terms))
        if kind != 1 or (lsn <= hi and lsn + cnt > lo):
            print("%8s %-7s %-4s %s %s" % (off, KINDS.get(kind, "?"), term,
                                           lsn if kind == 1 else "", cnt if kind == 1 else ""))
    print("---- %d messages; per fence: where the records before it end, where those after start"
          % len(msgs))
    end, fence = None, None
    for off, kind, owner, lsn, cnt in msgs:
        if kind == 2:
            fence = (off, terms[owner], end)
        elif kind == 1:
            if fence:
                print("fence at %s (%s): before ends at %s, after starts at %s%s"
                      % (fence[0], fence[1], fence[2], lsn,
                         "  GAP" if fence[2] is not None and lsn > fence[2] else ""))
                fence = None
            end = lsn + cnt


if __name__ == "__main__":
    main()
