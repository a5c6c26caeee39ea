#!/usr/bin/python3
"""growsync.py -- what an fdatasync costs the disk when the file grows, and when it does not.

    perf stat -a -e block:block_rq_issue -- /usr/bin/python3 tests/bench/growsync.py grow DIR
    perf stat -a -e block:block_rq_issue -- /usr/bin/python3 tests/bench/growsync.py pre DIR

200 commits of one 400 B record each into a file in DIR (default /var/tmp):
"grow" appends (the WAL's segments before wal.prewrite_kb), "pre" overwrites
zeros written and synced in advance (the WAL's segments since). Prints the
mean fdatasync time; perf counts the block requests the device was sent.
On this project's machine (ext4 without a journal) "grow" sends three per
commit -- the data, the inode's block (its size changed) and the cache
flush -- and "pre" two; on a journalled ext4 or xfs the third is a journal
commit instead, which every writer of the volume waits behind.
(tests/bench/README.md, "On time when traffic is light, again".)
"""
import os
import sys
import time

N, REC = 200, 400


def main(argv):
    if len(argv) < 2 or argv[1] not in ("grow", "pre"):
        sys.stderr.write("usage: growsync.py grow|pre [DIR]\n")
        return 2
    mode = argv[1]
    path = os.path.join(argv[2] if len(argv) > 2 else "/var/tmp", "growsync-%d.dat" % os.getpid())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if mode == "pre":
            os.pwrite(fd, b"\0" * (1 << 20), 0)
            os.fsync(fd)
        t = time.monotonic()
        for i in range(N):
            os.pwrite(fd, b"x" * REC, i * REC)
            os.fdatasync(fd)
        dt = time.monotonic() - t
    finally:
        os.close(fd)
        os.unlink(path)
    print("growsync %s: %d fdatasyncs, mean %.3f ms" % (mode, N, dt / N * 1000.0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
