#!/usr/bin/env python3
"""A file-system exerciser: random operations on one file, checked against a model.

Every operation is applied to the file and to an in-memory model of its bytes; every
read (pread, preadv, a mapped read, and the whole file at each change of side) must
return the model's bytes, and fstat the model's size. The file is reached through two
directories, side A and side B (two mounts of one stripefs cluster are two clients);
the runner works on one side at a time and changes side by closing its descriptors and
opening the file on the other side (close-to-open), as a job moving between nodes does.

Operations: pwrite, pwritev, preadv, pread, O_APPEND writes, ftruncate (grow and
shrink), fallocate (allocate, keep-size, punch hole, zero range), writes and reads
through a shared mapping, fsync and fdatasync, fstat, reopening on the same side, and
changing side, O_DIRECT blocks beside the cached descriptor, copy_file_range inside
the file, and SEEK_DATA/SEEK_HOLE checked against the bytes. Offsets and lengths are unaligned on purpose, up to a few stripes.

Usage: fsx.py --a DIR --b DIR [--seed N] [--ops N] [--max-size BYTES]
Exit status 0 when every check held; otherwise 1, with the seed, the operation that
failed and the operations before it, so that a run can be repeated with --seed.
Standard library only (ctypes for fallocate).
"""

import argparse
import ctypes
import errno
import mmap
import os
import random
import sys

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

# The process's own symbols (dlopen(NULL)), as a C program calling fallocate() would
# reach it: through a preloaded library first (the interception library), else libc.
# A handle of libc.so.6 itself would look past every preloaded library.
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Failure(Exception):
    pass


class Fsx:
    def __init__(self, dirs, seed, max_size, log_keep=40):
        self.rng = random.Random(seed)
        self.seed = seed
        self.dirs = dirs
        self.max_size = max_size
        self.name = "fsx.%d" % seed
        self.model = bytearray()
        self.side = 0
        self.fd = None
        self.log = []
        self.log_keep = log_keep
        self.counts = {}
        # fallocate modes this file system refused with EOPNOTSUPP.
        self.unsupported = set()
        # O_DIRECT refused by this file system (tmpfs).
        self.direct_refused = False

    # -- plumbing ----------------------------------------------------------------------

    def path(self, side=None):
        return os.path.join(self.dirs[self.side if side is None else side], self.name)

    def note(self, text):
        self.log.append(text)
        if len(self.log) > self.log_keep:
            del self.log[0]

    def data(self, n):
        return self.rng.randbytes(n)

    def open(self):
        self.fd = os.open(self.path(), os.O_RDWR | os.O_CREAT, 0o644)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def grow_model(self, end):
        if end > len(self.model):
            self.model.extend(bytes(end - len(self.model)))

    def expect(self, what, off, got, want):
        if got == want:
            return
        detail = "%s at %d: got %d bytes, expected %d" % (what, off, len(got), len(want))
        for i in range(min(len(got), len(want))):
            if got[i] != want[i]:
                lo = max(0, i - 4)
                detail += "; first difference at file offset %d: got %s, expected %s" % (
                    off + i,
                    got[lo : i + 12].hex(),
                    want[lo : i + 12].hex(),
                )
                break
        raise Failure(detail)

    def check_size(self, what):
        size = os.fstat(self.fd).st_size
        if size != len(self.model):
            raise Failure("%s: size %d, expected %d" % (what, size, len(self.model)))

    def check_all(self, what):
        self.check_size(what)
        got = bytearray()
        while len(got) < len(self.model) + 1:
            chunk = os.pread(self.fd, 1 << 20, len(got))
            if not chunk:
                break
            got += chunk
        self.expect(what + ", whole file", 0, bytes(got), bytes(self.model))

    def span(self, limit=None):
        """An unaligned (offset, length) inside [0, max_size)."""
        limit = self.max_size if limit is None else limit
        if limit <= 0:
            return 0, 0
        kind = self.rng.random()
        if kind < 0.3:
            length = self.rng.randint(1, 600)
        elif kind < 0.8:
            length = self.rng.randint(1, 70000)
        else:
            length = self.rng.randint(1, 200000)
        length = min(length, limit)
        off = self.rng.randint(0, limit - length)
        return off, length

    # -- operations --------------------------------------------------------------------

    def op_pwrite(self):
        off, n = self.span()
        buf = self.data(n)
        self.note("pwrite %d+%d" % (off, n))
        if os.pwrite(self.fd, buf, off) != n:
            raise Failure("short pwrite")
        self.grow_model(off + n)
        self.model[off : off + n] = buf

    def op_pwritev(self):
        off, n = self.span()
        cuts = sorted(self.rng.sample(range(1, n), min(3, n - 1))) if n > 1 else []
        bufs, prev = [], 0
        for c in cuts + [n]:
            bufs.append(self.data(c - prev))
            prev = c
        self.note("pwritev %d+%d in %d pieces" % (off, n, len(bufs)))
        if os.pwritev(self.fd, bufs, off) != n:
            raise Failure("short pwritev")
        self.grow_model(off + n)
        self.model[off : off + n] = b"".join(bufs)

    def op_pread(self):
        off, n = self.span(max(len(self.model) + 100, 1))
        self.note("pread %d+%d" % (off, n))
        self.expect("pread", off, os.pread(self.fd, n, off), bytes(self.model[off : off + n]))

    def op_preadv(self):
        off, n = self.span(max(len(self.model) + 100, 1))
        bufs = [bytearray(max(1, n // 3)), bytearray(max(1, n - n // 3))]
        self.note("preadv %d+%d" % (off, sum(map(len, bufs))))
        got = os.preadv(self.fd, bufs, off)
        joined = b"".join(bufs)[:got]
        total = sum(map(len, bufs))
        self.expect("preadv", off, joined, bytes(self.model[off : off + total]))

    def op_append(self):
        n = self.rng.randint(1, 50000)
        if len(self.model) + n > self.max_size:
            return self.op_truncate()
        buf = self.data(n)
        self.note("append %d at %d" % (n, len(self.model)))
        fd = os.open(self.path(), os.O_WRONLY | os.O_APPEND)
        try:
            if os.write(fd, buf) != n:
                raise Failure("short append")
        finally:
            os.close(fd)
        self.model += buf

    def op_truncate(self):
        size = self.rng.choice([0, self.rng.randint(0, self.max_size), len(self.model) // 2,
                                len(self.model) + self.rng.randint(1, 9000)])
        size = min(size, self.max_size)
        self.note("ftruncate %d (from %d)" % (size, len(self.model)))
        os.ftruncate(self.fd, size)
        if size < len(self.model):
            del self.model[size:]
        else:
            self.grow_model(size)

    def fallocate_op(self, mode, label):
        if mode in self.unsupported:
            return self.op_pwrite()
        off, n = self.span()
        self.note("fallocate %s %d+%d" % (label, off, n))
        try:
            fallocate(self.fd, mode, off, n)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
                self.note("  (not supported here: %s)" % e)
                self.unsupported.add(mode)
                return
            raise
        keep = mode & FALLOC_FL_KEEP_SIZE
        if not keep:
            self.grow_model(off + n)
        end = min(off + n, len(self.model))
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) and end > off:
            self.model[off:end] = bytes(end - off)

    def op_punch(self):
        self.fallocate_op(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "punch")

    def op_zero(self):
        keep = self.rng.random() < 0.5
        self.fallocate_op(FALLOC_FL_ZERO_RANGE | (FALLOC_FL_KEEP_SIZE if keep else 0),
                          "zero-range" + (" keep-size" if keep else ""))

    def op_allocate(self):
        keep = self.rng.random() < 0.5
        self.fallocate_op(FALLOC_FL_KEEP_SIZE if keep else 0,
                          "allocate" + (" keep-size" if keep else ""))

    def mapped(self):
        """A mapping of a random range inside the file, or None for an empty file."""
        size = len(self.model)
        if size == 0:
            return None
        off, n = self.span(size)
        start = off - off % mmap.ALLOCATIONGRANULARITY
        m = mmap.mmap(self.fd, off + n - start, mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        return m, start, off, n

    def op_mapwrite(self):
        got = self.mapped()
        if got is None:
            return self.op_pwrite()
        m, start, off, n = got
        buf = self.data(n)
        self.note("mapped write %d+%d" % (off, n))
        m[off - start : off - start + n] = buf
        if self.rng.random() < 0.5:
            self.note("  msync")
            m.flush()
        m.close()
        self.model[off : off + n] = buf

    def op_mapread(self):
        got = self.mapped()
        if got is None:
            return self.op_pread()
        m, start, off, n = got
        self.note("mapped read %d+%d" % (off, n))
        data = m[off - start : off - start + n]
        m.close()
        self.expect("mapped read", off, data, bytes(self.model[off : off + n]))

    def op_direct(self):
        """An O_DIRECT write or read of whole 4 KiB blocks from a page-aligned buffer,
        through a second descriptor; the other descriptor's cached pages must follow."""
        blocks = self.max_size // 4096
        if blocks == 0 or self.direct_refused:
            return self.op_pread()
        first = self.rng.randrange(blocks)
        count = self.rng.randint(1, min(16, blocks - first))
        off, n = first * 4096, count * 4096
        try:
            fd = os.open(self.path(), os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            if e.errno == errno.EINVAL:
                self.direct_refused = True
                return self.op_pread()
            raise
        buf = mmap.mmap(-1, n)
        try:
            if self.rng.random() < 0.5:
                data = self.data(n)
                buf[:] = data
                self.note("O_DIRECT write %d+%d" % (off, n))
                if os.pwritev(fd, [buf], off) != n:
                    raise Failure("short O_DIRECT write")
                self.grow_model(off + n)
                self.model[off : off + n] = data
            else:
                self.note("O_DIRECT read %d+%d" % (off, n))
                got = os.preadv(fd, [buf], off)
                self.expect("O_DIRECT read", off, bytes(buf[:got]), bytes(self.model[off : off + n]))
        finally:
            buf.close()
            os.close(fd)

    def op_copy(self):
        """copy_file_range from one part of the file to another, not overlapping."""
        size = len(self.model)
        if size < 2:
            return self.op_pwrite()
        src, n = self.span(size)
        n = max(1, n // 2)
        dst = self.rng.randint(0, self.max_size - n)
        if dst < src + n and src < dst + n:
            dst = src + n if src + 2 * n <= self.max_size else max(0, src - n)
            if dst < src + n and src < dst + n:
                return self.op_pread()
        self.note("copy_file_range %d+%d to %d" % (src, n, dst))
        done = 0
        while done < n:
            got = os.copy_file_range(self.fd, self.fd, n - done, src + done, dst + done)
            if got == 0:
                break
            done += got
        want = bytes(self.model[src : src + n])[:done]
        if done != min(n, size - src):
            raise Failure("copy_file_range copied %d of %d" % (done, n))
        self.grow_model(dst + done)
        self.model[dst : dst + done] = want

    def op_seek(self):
        """SEEK_DATA and SEEK_HOLE: whatever they report must agree with the bytes
        (holes read as zeros; a file may report data where it has zeros)."""
        size = len(self.model)
        off = self.rng.randint(0, size) if size else 0
        self.note("SEEK_DATA and SEEK_HOLE from %d (size %d)" % (off, size))
        try:
            data = os.lseek(self.fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            data = size
        if not (off <= data <= size) or any(self.model[off:data]):
            raise Failure("SEEK_DATA from %d said %d, but the bytes before it are not all zeros"
                          % (off, data))
        if off < size:
            hole = os.lseek(self.fd, off, os.SEEK_HOLE)
            if not (off <= hole <= size):
                raise Failure("SEEK_HOLE from %d said %d (size %d)" % (off, hole, size))

    def op_fsync(self):
        if self.rng.random() < 0.5:
            self.note("fsync")
            os.fsync(self.fd)
        else:
            self.note("fdatasync")
            os.fdatasync(self.fd)

    def op_stat(self):
        self.note("fstat")
        self.check_size("fstat")

    def op_reopen(self):
        self.note("close and reopen on side %s" % "AB"[self.side])
        self.close()
        self.open()

    def op_switch(self):
        self.close()
        self.side = 1 - self.side
        self.note("close, open on side %s, read it all" % "AB"[self.side])
        self.open()
        self.check_all("after changing side")

    OPS = [
        ("pwrite", 20), ("pwritev", 5), ("pread", 20), ("preadv", 5), ("append", 5),
        ("truncate", 6), ("punch", 4), ("zero", 4), ("allocate", 3), ("mapwrite", 5),
        ("mapread", 5), ("fsync", 3), ("stat", 4), ("reopen", 2), ("switch", 6),
        ("direct", 4), ("copy", 3), ("seek", 3),
    ]

    def run(self, ops):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        self.open()
        os.ftruncate(self.fd, 0)
        for i in range(ops):
            name = self.rng.choices(names, weights)[0]
            self.counts[name] = self.counts.get(name, 0) + 1
            try:
                getattr(self, "op_" + name)()
            except (Failure, OSError) as e:
                self.report(i, e)
                return False
        try:
            self.note("final check on side %s" % "AB"[self.side])
            self.check_all("final")
            self.op_switch()
        except (Failure, OSError) as e:
            self.report(ops, e)
            return False
        self.close()
        for side in (0, 1):
            try:
                os.unlink(self.path(side))
                break
            except FileNotFoundError:
                pass
        return True

    def report(self, i, e):
        print("FAILED at operation %d (seed %d, side %s): %s" % (i, self.seed, "AB"[self.side], e))
        print("the last operations, oldest first:")
        for line in self.log:
            print("  " + line)
        print("repeat with: fsx.py --a %s --b %s --seed %d --ops %d --max-size %d" % (
            self.dirs[0], self.dirs[1], self.seed, i + 1, self.max_size))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="directory of side A")
    ap.add_argument("--b", required=True, help="directory of side B (may be A)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--max-size", type=int, default=1 << 20)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print("fsx: seed %d, %d operations, files up to %d bytes" % (seed, args.ops, args.max_size))
    sys.stdout.flush()
    fsx = Fsx([args.a, args.b], seed, args.max_size)
    ok = fsx.run(args.ops)
    print("fsx: %s; operations done: %s; fallocate modes refused: %s" % (
        "passed" if ok else "FAILED",
        ", ".join("%s %d" % kv for kv in sorted(fsx.counts.items())),
        ", ".join("0x%x" % m for m in sorted(fsx.unsupported)) or "none"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
