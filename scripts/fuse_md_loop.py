#!/usr/bin/env python3
"""Create/stat/unlink loop through a mounted file system (mdtest-easy style).

usage: fuse_md_loop.py DIR PROCS TOTAL

PROCS processes each work in their own directory DIR/pN on TOTAL/PROCS files. Each phase
(create = open(O_CREAT|O_EXCL) + close, stat, unlink) starts in all processes at once and
is timed from the first start to the last finish; prints ops/s per phase.
"""
import os
import sys
import time
from multiprocessing import Barrier, Process, Queue

PHASES = ("create", "stat", "unlink")


def work(d, i, per, bar, q):
    sub = "%s/p%d" % (d, i)
    os.makedirs(sub, exist_ok=True)
    names = ["%s/f%06d" % (sub, j) for j in range(per)]
    for op in PHASES:
        bar.wait()
        t0 = time.time()
        for f in names:
            if op == "create":
                os.close(os.open(f, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
            elif op == "stat":
                os.stat(f)
            else:
                os.unlink(f)
        q.put((op, t0, time.time()))
    os.rmdir(sub)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    d, procs, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if procs < 1 or total < procs:
        sys.exit("PROCS must be at least 1 and TOTAL at least PROCS")
    per = total // procs
    bar, q = Barrier(procs), Queue()
    ps = [Process(target=work, args=(d, i, per, bar, q)) for i in range(procs)]
    for p in ps:
        p.start()
    res = [q.get() for _ in range(len(PHASES) * procs)]
    for p in ps:
        p.join()
    for op in PHASES:
        r = [x for x in res if x[0] == op]
        elapsed = max(x[2] for x in r) - min(x[1] for x in r)
        print("%d procs %-6s %8.0f ops/s" % (procs, op, per * procs / elapsed))


if __name__ == "__main__":
    main()
