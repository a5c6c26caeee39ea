"""harness_wal.py -- the daemon's WAL files as the integration tests read
them (harness.py has the rest): the segment and record headers' sizes, the
segments of a directory, the records of a segment, `delay-bridge wal dump`.

    import harness_wal as hw
    for off, length, rtype, lsn in hw.records(path): ...
"""

import json
import os
import struct

import harness as h


def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC_T = _crc_table()


def crc32c(crc, data):
    """CRC-32C (Castagnoli), chained like src/base/crc32c.c's crc32c(crc, buf, len):
    an independent writer of the project's on-disk and stream formats for tests."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF

SEGHDR = 56  # a segment file's header
RECHDR = 24  # a record's header: u32 payload length, u8 type, ..., u64 lsn at 8


def segments(d):
    """The segment files of WAL directory d, oldest first."""
    return sorted(n for n in os.listdir(d) if n.endswith(".wal"))


def records(path):
    """(offset, length, type, lsn) of every complete record of a segment file
    (zeros after the last record are the log's prewritten tail: the end)."""
    with open(path, "rb") as f:
        data = f.read()
    out, off = [], SEGHDR
    while off + RECHDR <= len(data):
        if not any(data[off:off + RECHDR]):
            break
        n, t = struct.unpack_from("<IB", data, off)
        lsn = struct.unpack_from("<Q", data, off + 8)[0]
        if off + RECHDR + n > len(data):
            break
        out.append((off, RECHDR + n, t, lsn))
        off += RECHDR + n
    return out


def dump(d, *extra, timeout=60):
    """`delay-bridge wal dump D --json EXTRA...` (it must exit 0), parsed."""
    _, out, _ = h.bridge_cli("wal", "dump", d, "--json", *extra, expect=0, timeout=timeout)
    return json.loads(out)
