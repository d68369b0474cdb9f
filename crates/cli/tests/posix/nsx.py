#!/usr/bin/env python3
"""A namespace exerciser: random sequences of namespace operations, checked against a model.

Operations on a small tree under one directory: create (O_EXCL), mkdir, unlink, rmdir,
rename (over files, over empty and non-empty directories, into its own subtree, between
hard links of one file), renameat2 RENAME_NOREPLACE and RENAME_EXCHANGE, link, symlink,
rewriting a file through one of its names, unlinking a file that a descriptor keeps open
(and reading it through the descriptor), chmod, utime, user.* extended attributes (set
with and without XATTR_CREATE/XATTR_REPLACE, removed), and checks: every call's errno,
lstat (type, size, link count, mode, an mtime set by utime, the inode shared by hard
links), the user.* attributes and their values, readdir of a directory, a file's bytes
through a random name. The names are few, so operations collide often.

At the end (and with --check-every N, every N operations) the whole tree is compared with
the model through the second directory, --b (another mount of the same cluster: another
client), after waiting --settle seconds for its caches of names and attributes to expire.

Usage: nsx.py --a DIR --b DIR [--seed N] [--ops N] [--settle SECONDS]
Exit status 0 when every check held; otherwise 1, with the seed, the failing operation and
the operations before it. Standard library only (ctypes for renameat2).
"""

import argparse
import ctypes
import errno
import os
import random
import stat
import sys
import time

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
AT_FDCWD = -100

# The process's own symbols (dlopen(NULL)), as a C program calling renameat2() would
# reach it: through a preloaded library first (the interception library), else libc.
# A handle of libc.so.6 itself would look past every preloaded library.
libc = ctypes.CDLL(None, use_errno=True)
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]


def renameat2(src, dst, flags):
    if libc.renameat2(AT_FDCWD, src.encode(), AT_FDCWD, dst.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Failure(Exception):
    pass


class Node:
    """What files and directories share: permission bits, user.* attributes, and the
    mtime when it is known (set by utime and not changed since)."""

    def __init__(self, mode):
        self.mode = mode
        self.xattrs = {}
        self.mtime = None


class File(Node):
    def __init__(self, data, mode=0o644):
        super().__init__(mode)
        self.data = data


class Dir(Node):
    def __init__(self, mode=0o755):
        super().__init__(mode)
        self.entries = {}


class Link:
    def __init__(self, target):
        self.target = target


NAMES = ["a", "b", "c", "d", "e"]


class Nsx:
    def __init__(self, roots, seed, settle):
        self.rng = random.Random(seed)
        self.seed = seed
        self.roots = roots
        self.settle = settle
        self.top = "nsx.%d" % seed
        self.root = Dir()
        self.log = []
        self.counts = {}
        self.open_fds = []  # (fd, File)
        self.unsupported = set()

    # -- the model ---------------------------------------------------------------------

    def note(self, text):
        self.log.append(text)
        if len(self.log) > 40:
            del self.log[0]

    def real(self, rel, side=0):
        return os.path.join(self.roots[side], self.top, rel) if rel else os.path.join(
            self.roots[side], self.top)

    def lookup(self, rel):
        """(parent Dir or None, name, node or None) of a relative path in the model."""
        parts = rel.split("/")
        d = self.root
        for p in parts[:-1]:
            n = d.entries.get(p)
            if not isinstance(n, Dir):
                return None, parts[-1], None
            d = n
        return d, parts[-1], d.entries.get(parts[-1])

    def dirs(self):
        out = [("", self.root)]
        i = 0
        while i < len(out):
            rel, d = out[i]
            for name, n in sorted(d.entries.items()):
                if isinstance(n, Dir):
                    out.append(((rel + "/" + name).lstrip("/"), n))
            i += 1
        return out

    def random_path(self):
        """A path in a random existing directory (depth <= 3), existing or not."""
        dirs = [r for r in self.dirs() if r[0].count("/") < 3]
        rel, _ = self.rng.choice(dirs)
        name = self.rng.choice(NAMES)
        return (rel + "/" + name).lstrip("/")

    def existing(self, want=None):
        found = []
        for rel, d in self.dirs():
            for name, n in d.entries.items():
                if want is None or isinstance(n, want):
                    found.append((rel + "/" + name).lstrip("/"))
        return self.rng.choice(sorted(found)) if found else None

    def changed(self, *dirs):
        """Entries of these directories changed: their mtimes are the server's now."""
        for d in dirs:
            if d is not None:
                d.mtime = None

    def nlink(self, node):
        if isinstance(node, Dir):
            return 2 + sum(isinstance(n, Dir) for n in node.entries.values())
        count = 0
        for _, d in self.dirs():
            count += sum(n is node for n in d.entries.values())
        return count

    def inside(self, node, maybe_child):
        """Whether `maybe_child` is `node` or below it."""
        stack = [node]
        while stack:
            n = stack.pop()
            if n is maybe_child:
                return True
            if isinstance(n, Dir):
                stack.extend(n.entries.values())
        return False

    # -- calls and their expected outcome ------------------------------------------------

    def call(self, what, expect_errno, fn):
        """Runs fn; its errno (0 for success) must be `expect_errno` (an int or a set)."""
        self.note(what)
        try:
            fn()
            got = 0
        except OSError as e:
            got = e.errno
        want = expect_errno if isinstance(expect_errno, (set, frozenset)) else {expect_errno}
        if got not in want:
            raise Failure("%s: errno %s (%s), expected %s" % (
                what, got, os.strerror(got) if got else "success",
                " or ".join(errno.errorcode.get(w, "success") for w in sorted(want))))
        return got

    def op_create(self):
        rel = self.random_path()
        parent, name, node = self.lookup(rel)
        data = self.rng.randbytes(self.rng.choice([0, 10, 3000, 9000]))
        want = errno.EEXIST if node is not None else 0

        def go():
            fd = os.open(self.real(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        if self.call("create %s (%d bytes)" % (rel, len(data)), want, go) == 0:
            parent.entries[name] = File(data)
            self.changed(parent)

    def op_mkdir(self):
        rel = self.random_path()
        parent, name, node = self.lookup(rel)
        want = errno.EEXIST if node is not None else 0
        if self.call("mkdir %s" % rel, want, lambda: os.mkdir(self.real(rel))) == 0:
            # A directory made in a set-group-ID directory is set-group-ID too.
            parent.entries[name] = Dir(0o755 | (parent.mode & 0o2000))
            self.changed(parent)

    def op_symlink(self):
        rel = self.random_path()
        parent, name, node = self.lookup(rel)
        target = self.rng.choice(["a", "../b", "/nonexistent", "x" * 100])
        want = errno.EEXIST if node is not None else 0
        if self.call("symlink %s -> %s" % (rel, target), want,
                     lambda: os.symlink(target, self.real(rel))) == 0:
            parent.entries[name] = Link(target)
            self.changed(parent)

    def op_unlink(self):
        rel = self.existing() if self.rng.random() < 0.8 else self.random_path()
        if rel is None:
            return
        parent, name, node = self.lookup(rel)
        if node is None:
            want = errno.ENOENT
        elif isinstance(node, Dir):
            want = errno.EISDIR
        else:
            want = 0
        if self.call("unlink %s" % rel, want, lambda: os.unlink(self.real(rel))) == 0:
            del parent.entries[name]
            self.changed(parent)

    def op_rmdir(self):
        rel = self.existing(Dir) if self.rng.random() < 0.8 else self.random_path()
        if rel is None:
            return
        parent, name, node = self.lookup(rel)
        if node is None:
            want = errno.ENOENT
        elif not isinstance(node, Dir):
            want = errno.ENOTDIR
        elif node.entries:
            want = {errno.ENOTEMPTY, errno.EEXIST}
        else:
            want = 0
        if self.call("rmdir %s" % rel, want, lambda: os.rmdir(self.real(rel))) == 0:
            del parent.entries[name]
            self.changed(parent)

    def rename_outcome(self, src, dst, noreplace=False):
        """Linux's answer to rename(src, dst), in the order it checks (do_renameat2,
        lock_rename's trap, vfs_rename, the file system's emptiness check)."""
        sp, sn, snode = self.lookup(src)
        dp, dn, dnode = self.lookup(dst)
        if snode is None or dp is None:
            return errno.ENOENT
        if noreplace and dnode is not None:
            return errno.EEXIST
        if snode is not dnode:
            # src above the new parent: EINVAL; dst above the old parent: ENOTEMPTY.
            if isinstance(snode, Dir) and self.inside(snode, dp):
                return errno.EINVAL
            if isinstance(dnode, Dir) and self.inside(dnode, sp):
                return errno.ENOTEMPTY
        if snode is dnode:
            return 0
        if dnode is not None:
            if isinstance(snode, Dir) and not isinstance(dnode, Dir):
                return errno.ENOTDIR
            if not isinstance(snode, Dir) and isinstance(dnode, Dir):
                return errno.EISDIR
            if isinstance(dnode, Dir) and dnode.entries:
                return {errno.ENOTEMPTY, errno.EEXIST}
        return 0

    def apply_rename(self, src, dst):
        sp, sn, snode = self.lookup(src)
        dp, dn, dnode = self.lookup(dst)
        if snode is not dnode:
            del sp.entries[sn]
            dp.entries[dn] = snode
            self.changed(sp, dp, snode if isinstance(snode, Dir) else None)

    def op_rename(self):
        src = self.existing() if self.rng.random() < 0.85 else self.random_path()
        if src is None:
            return
        dst = self.existing() if self.rng.random() < 0.4 else self.random_path()
        dst = dst or self.random_path()
        want = self.rename_outcome(src, dst)
        if self.call("rename %s -> %s" % (src, dst), want,
                     lambda: os.rename(self.real(src), self.real(dst))) == 0:
            self.apply_rename(src, dst)

    def renameat2_refused(self, flag, got, want):
        """EINVAL where the model expects otherwise: the flag is not supported here."""
        want = want if isinstance(want, set) else {want}
        if got == errno.EINVAL and errno.EINVAL not in want:
            self.unsupported.add(flag)
            self.note("  (renameat2 flag %d not supported here)" % flag)
            return True
        return False

    def op_rename_noreplace(self):
        if RENAME_NOREPLACE in self.unsupported:
            return self.op_rename()
        src = self.existing()
        if src is None:
            return
        dst = self.existing() if self.rng.random() < 0.5 else self.random_path()
        want = self.rename_outcome(src, dst, noreplace=True)
        allowed = (want if isinstance(want, set) else {want}) | {errno.EINVAL}
        got = self.call("renameat2 NOREPLACE %s -> %s" % (src, dst), allowed,
                        lambda: renameat2(self.real(src), self.real(dst), RENAME_NOREPLACE))
        if not self.renameat2_refused(RENAME_NOREPLACE, got, want) and got == 0:
            self.apply_rename(src, dst)

    def op_exchange(self):
        if RENAME_EXCHANGE in self.unsupported:
            return self.op_rename()
        a, b = self.existing(), self.existing()
        if a is None or b is None:
            return
        ap, an, anode = self.lookup(a)
        bp, bn, bnode = self.lookup(b)
        if anode is not bnode and (
                (isinstance(anode, Dir) and self.inside(anode, bp))
                or (isinstance(bnode, Dir) and self.inside(bnode, ap))):
            want = errno.EINVAL
        else:
            want = 0
        got = self.call("renameat2 EXCHANGE %s <-> %s" % (a, b), {want, errno.EINVAL},
                        lambda: renameat2(self.real(a), self.real(b), RENAME_EXCHANGE))
        if not self.renameat2_refused(RENAME_EXCHANGE, got, want) and got == 0:
            ap.entries[an], bp.entries[bn] = bnode, anode
            self.changed(ap, bp, *[n for n in (anode, bnode) if isinstance(n, Dir)])

    def op_link(self):
        src = self.existing() if self.rng.random() < 0.9 else self.random_path()
        if src is None:
            return
        dst = self.random_path()
        _, _, snode = self.lookup(src)
        dp, dn, dnode = self.lookup(dst)
        if snode is None or dp is None:
            want = errno.ENOENT
        elif dnode is not None:
            want = errno.EEXIST
        elif isinstance(snode, Dir):
            want = errno.EPERM
        else:
            want = 0
        if self.call("link %s -> %s" % (src, dst), want,
                     lambda: os.link(self.real(src), self.real(dst),
                                     follow_symlinks=False)) == 0:
            dp.entries[dn] = snode
            self.changed(dp)

    def op_rewrite(self):
        rel = self.existing(File)
        if rel is None:
            return
        _, _, node = self.lookup(rel)
        data = self.rng.randbytes(self.rng.choice([0, 7, 5000]))

        def go():
            fd = os.open(self.real(rel), os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        self.call("rewrite %s (%d bytes)" % (rel, len(data)), 0, go)
        node.data = data
        node.mtime = None

    def op_chmod(self):
        rel = self.existing(Node)
        if rel is None:
            return
        _, _, node = self.lookup(rel)
        mode = self.rng.choice([0o600, 0o644, 0o755, 0o700, 0o640, 0o711, 0o1777, 0o2755])
        if isinstance(node, File) and mode & 0o1000:
            mode &= 0o777
        if os.geteuid() != 0:
            # The model ignores permissions, so its owner must keep reaching everything;
            # and Linux's rules for who keeps a set-group-ID bit are not modelled.
            mode &= ~0o2000
            if isinstance(node, Dir):
                mode |= 0o700
        self.call("chmod %s %o" % (rel, mode), 0, lambda: os.chmod(self.real(rel), mode))
        node.mode = mode

    def op_utime(self):
        rel = self.existing(Node)
        if rel is None:
            return
        _, _, node = self.lookup(rel)
        mtime = self.rng.randrange(10**9, 2 * 10**9) * 10**9 + self.rng.randrange(10**9)
        self.call("utime %s mtime %d" % (rel, mtime), 0,
                  lambda: os.utime(self.real(rel), ns=(mtime, mtime)))
        node.mtime = mtime

    XATTR_NAMES = ["user.a", "user.b", "user.long." + "x" * 60]

    def op_setxattr(self):
        rel = self.existing() if self.rng.random() < 0.9 else self.random_path()
        if rel is None:
            return
        _, _, node = self.lookup(rel)
        name = self.rng.choice(self.XATTR_NAMES)
        value = self.rng.randbytes(self.rng.choice([0, 5, 200]))
        flags = self.rng.choice([0, 0, os.XATTR_CREATE, os.XATTR_REPLACE])
        if node is None:
            want = errno.ENOENT
        elif isinstance(node, Link):
            want = errno.EPERM  # user.* attributes are for files and directories only
        elif flags == os.XATTR_CREATE and name in node.xattrs:
            want = errno.EEXIST
        elif flags == os.XATTR_REPLACE and name not in node.xattrs:
            want = errno.ENODATA
        else:
            want = 0
        if self.call("setxattr %s %s (%d bytes, flags %d)" % (rel, name, len(value), flags),
                     want, lambda: os.setxattr(self.real(rel), name, value, flags,
                                               follow_symlinks=False)) == 0:
            node.xattrs[name] = value

    def op_removexattr(self):
        rel = self.existing(Node)
        if rel is None:
            return
        _, _, node = self.lookup(rel)
        name = self.rng.choice(self.XATTR_NAMES)
        want = 0 if name in node.xattrs else errno.ENODATA
        if self.call("removexattr %s %s" % (rel, name), want,
                     lambda: os.removexattr(self.real(rel), name,
                                            follow_symlinks=False)) == 0:
            del node.xattrs[name]

    def op_hold(self):
        """Opens a file and keeps the descriptor (its names may go away meanwhile)."""
        rel = self.existing(File)
        if rel is None or len(self.open_fds) >= 3:
            return self.op_release()
        _, _, node = self.lookup(rel)
        self.note("open %s and keep it" % rel)
        self.open_fds.append((os.open(self.real(rel), os.O_RDONLY), node))

    def op_release(self):
        if not self.open_fds:
            return
        fd, node = self.open_fds.pop(self.rng.randrange(len(self.open_fds)))
        self.note("read through a kept descriptor, close it")
        got = os.pread(fd, len(node.data) + 10, 0)
        os.close(fd)
        if got != node.data:
            raise Failure("a kept descriptor read %d bytes, expected %d (the file's bytes)"
                          % (len(got), len(node.data)))

    def op_stat(self):
        rel = self.existing() if self.rng.random() < 0.9 else self.random_path()
        if rel is None:
            return
        self.check_node(rel, 0)

    def op_readdir(self):
        rel, d = self.rng.choice(self.dirs())
        self.check_dir(rel, d, 0)

    def op_read(self):
        rel = self.existing(File)
        if rel is None:
            return
        self.check_node(rel, 0, read=True)

    # -- checks ------------------------------------------------------------------------

    def check_node(self, rel, side, read=False):
        _, _, node = self.lookup(rel)
        self.note("lstat %s%s" % (rel, " and read it" if read else ""))
        try:
            st = os.lstat(self.real(rel, side))
        except OSError as e:
            if node is None and e.errno == errno.ENOENT:
                return
            raise Failure("lstat %s: %s (model: %s)" % (rel, e, type(node).__name__))
        if node is None:
            raise Failure("lstat %s: exists, the model has no such name" % rel)
        kind = {File: stat.S_ISREG, Dir: stat.S_ISDIR, Link: stat.S_ISLNK}[type(node)]
        if not kind(st.st_mode):
            raise Failure("%s: mode %o, expected a %s" % (rel, st.st_mode, type(node).__name__))
        if isinstance(node, File) and st.st_size != len(node.data):
            raise Failure("%s: size %d, expected %d" % (rel, st.st_size, len(node.data)))
        if isinstance(node, Link):
            target = os.readlink(self.real(rel, side))
            if target != node.target:
                raise Failure("%s: symlink to %r, expected %r" % (rel, target, node.target))
        if not isinstance(node, Link) and st.st_nlink != self.nlink(node):
            raise Failure("%s: st_nlink %d, expected %d" % (rel, st.st_nlink, self.nlink(node)))
        if isinstance(node, Node):
            if stat.S_IMODE(st.st_mode) != node.mode:
                raise Failure("%s: mode %o, expected %o" % (rel, stat.S_IMODE(st.st_mode),
                                                          node.mode))
            if node.mtime is not None and st.st_mtime_ns != node.mtime:
                raise Failure("%s: mtime %d, expected %d (set by utime)" % (
                    rel, st.st_mtime_ns, node.mtime))
            path = self.real(rel, side)
            names = sorted(n for n in os.listxattr(path, follow_symlinks=False)
                           if n.startswith("user."))
            if names != sorted(node.xattrs):
                raise Failure("%s: user attributes %s, expected %s" % (rel, names,
                                                                      sorted(node.xattrs)))
            for n in names:
                value = os.getxattr(path, n, follow_symlinks=False)
                if value != node.xattrs[n]:
                    raise Failure("%s: %s is %d bytes, not the %d set" % (
                        rel, n, len(value), len(node.xattrs[n])))
        if read and isinstance(node, File):
            with open(self.real(rel, side), "rb") as f:
                got = f.read()
            if got != node.data:
                raise Failure("%s: read %d bytes, not the file's %d" % (rel, len(got),
                                                                      len(node.data)))
        return st

    def check_dir(self, rel, d, side):
        self.note("readdir %s" % (rel or "."))
        got = sorted(os.listdir(self.real(rel, side)))
        want = sorted(d.entries)
        if got != want:
            raise Failure("readdir %s: %s, expected %s" % (rel or ".", got, want))

    def check_tree(self, side):
        """Every name, type, size, link count and byte, and hard links sharing inodes."""
        inodes = {}
        for rel, d in self.dirs():
            self.check_dir(rel, d, side)
            for name, node in d.entries.items():
                path = (rel + "/" + name).lstrip("/")
                st = self.check_node(path, side, read=True)
                if isinstance(node, File):
                    seen = inodes.setdefault(id(node), st.st_ino)
                    if seen != st.st_ino:
                        raise Failure("%s: inode %d, but another name of the same file has %d"
                                      % (path, st.st_ino, seen))

    def settle_and_check(self, label):
        time.sleep(self.settle)
        self.note("%s: the whole tree through side B" % label)
        self.check_tree(1)

    OPS = [
        ("create", 14), ("mkdir", 7), ("symlink", 3), ("unlink", 9), ("rmdir", 5),
        ("rename", 14), ("rename_noreplace", 3), ("exchange", 3), ("link", 6),
        ("rewrite", 5), ("hold", 3), ("release", 2), ("stat", 10), ("readdir", 6),
        ("read", 5), ("chmod", 3), ("utime", 3), ("setxattr", 4), ("removexattr", 2),
    ]

    def run(self, ops, check_every):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        os.umask(0o022)
        os.mkdir(self.real(""), 0o755)
        i = 0
        try:
            for i in range(ops):
                name = self.rng.choices(names, weights)[0]
                self.counts[name] = self.counts.get(name, 0) + 1
                getattr(self, "op_" + name)()
                if check_every and (i + 1) % check_every == 0:
                    self.settle_and_check("after %d operations" % (i + 1))
            while self.open_fds:
                self.op_release()
            self.check_tree(0)
            self.settle_and_check("at the end")
        except (Failure, OSError) as e:
            print("FAILED at operation %d (seed %d): %s" % (i, self.seed, e))
            print("the last operations, oldest first:")
            for line in self.log:
                print("  " + line)
            return False
        self.cleanup()
        return True

    def cleanup(self):
        for rel, _ in reversed(self.dirs()):
            path = self.real(rel)
            for name in os.listdir(path):
                p = os.path.join(path, name)
                if not (os.path.isdir(p) and not os.path.islink(p)):
                    os.unlink(p)
            os.rmdir(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--ops", type=int, default=1500)
    ap.add_argument("--check-every", type=int, default=0)
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait before looking through --b (its caches' lifetime)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print("nsx: seed %d, %d operations" % (seed, args.ops))
    sys.stdout.flush()
    n = Nsx([args.a, args.b], seed, args.settle)
    ok = n.run(args.ops, args.check_every)
    print("nsx: %s; operations done: %s; refused renameat2 flags: %s" % (
        "passed" if ok else "FAILED",
        ", ".join("%s %d" % kv for kv in sorted(n.counts.items())),
        ", ".join(str(f) for f in sorted(n.unsupported)) or "none"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
