#!/usr/bin/env python3
"""Time the fsync that follows many unaligned records, against whole-block records.

Writes N records of REC bytes into one file (even records first, then odd ones, so that
with an unaligned REC every odd record shares its first and last 4 KiB block with
written neighbours: on stripefs those become pieces in the objects' logs, which the
fsync folds in), then fsyncs, then does the same with records rounded up to whole
blocks (no pieces). Prints both. The file is removed after each run.

usage: scripts/fsync_unaligned.py PATH_IN_A_MOUNT [REC] [N] [ROUNDS]
(defaults: 47008 bytes, 8000 records, 3 rounds)
"""
import os
import sys
import time


def run(path, rec, n):
    buf = os.urandom(rec)
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
    try:
        t0 = time.time()
        for k in list(range(0, n, 2)) + list(range(1, n, 2)):
            os.pwrite(fd, buf, k * rec)
        t1 = time.time()
        os.fsync(fd)
        t2 = time.time()
    finally:
        os.close(fd)
        os.unlink(path)
    return t1 - t0, t2 - t1


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    path = sys.argv[1]
    try:
        rec, n, rounds = (int(a) for a in (sys.argv[2:] + ["47008", "8000", "3"][len(sys.argv) - 2:])[:3])
    except ValueError:
        sys.exit("REC, N and ROUNDS are whole numbers")
    if rec <= 0 or n <= 0 or rounds <= 0:
        sys.exit("REC, N and ROUNDS must be positive")
    whole = -(-rec // 4096) * 4096
    for r in range(rounds):
        for size in (rec, whole):
            w, f = run(path, size, n)
            mib = n * size / w / 2**20
            print(f"round {r + 1}: {n} records of {size} bytes: writes {w:.3f} s "
                  f"({mib:.0f} MiB/s), fsync {1000 * f:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
