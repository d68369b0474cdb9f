#!/usr/bin/python3
"""POSIX conformance case runner for crates/cli/tests/it/posix_matrix.rs.

Usage: matrix.py [--jobs N] [CASES.json]. Reads a JSON list of cases from the file (or
from stdin), runs each case's steps with plain system calls as the CURRENT user (start it through
`setpriv --reuid=U --regid=G --groups=...` to be someone else), and prints one JSON
list of results on stdout. Standard library only (Python 3.11).

A case is {"id": str, "umask": int (optional; the runner's umask is 0), "steps": [...]}.
With --jobs N, N cases run at a time in threads (then they must not set a umask).
Every step runs, whatever the earlier ones returned; each gives
{"err": "OK" or an errno name such as "EACCES", "value": ...}. Steps name their
arguments; descriptors and sockets live in a per-case table under a name of the
case's choosing ("fd": "a"). Operations:

  open path flags mode fd      flags: list of os.O_* names, e.g. ["O_RDWR", "O_CREAT"]
  close fd | read fd n | write fd data | ftruncate fd len | fstat fd | fchmod fd mode
  stat path | lstat path       value: the stat fields (see st_dict)
  exists path                  value: true/false (lstat succeeds)
  truncate path len | chmod path mode | chown path uid gid | lchown path uid gid
  link src dst | symlink target dst | rename src dst | unlink path
  mkdir path mode | rmdir path | mkfifo path mode
  mknod path mode major minor  mode includes the file type bits (stat.S_IFCHR | 0o644)
  listdir path                 value: sorted names
  access path mode             mode: a string of "rwx", or "" for F_OK
  utimens path atime mtime     each: [sec, nsec], "now", "omit"; both null: times NULL
  bind_unix path sock          a listening AF_UNIX stream socket bound to path
  connect_unix path sock data  connects to path, sends data; the listener named sock
                               accepts and receives; value: the bytes received
  read_file path | write_file path data (O_WRONLY|O_CREAT|O_TRUNC, mode 0o644)
  sleep s | now (value: time.time_ns())
  as uid gid groups steps      runs steps in a forked child with those credentials
                               (needs root); value: the child's results
"""

import ctypes
import ctypes.util
import errno
import json
import os
import socket
import stat
import sys
import time

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
AT_FDCWD = -100


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _ts(spec):
    if spec == "now":
        return Timespec(0, UTIME_NOW)
    if spec == "omit":
        return Timespec(0, UTIME_OMIT)
    return Timespec(int(spec[0]), int(spec[1]))


def utimens(path, atime, mtime):
    p = os.fsencode(path)
    if atime is None and mtime is None:
        r = _libc.utimensat(AT_FDCWD, p, None, 0)
    else:
        times = (Timespec * 2)(_ts(atime), _ts(mtime))
        r = _libc.utimensat(AT_FDCWD, p, times, 0)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def st_dict(st):
    return {
        "mode": st.st_mode,
        "type": stat.S_IFMT(st.st_mode),
        "perm": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "size": st.st_size,
        "nlink": st.st_nlink,
        "ino": st.st_ino,
        "rdev_major": os.major(st.st_rdev),
        "rdev_minor": os.minor(st.st_rdev),
        "atime_ns": st.st_atime_ns,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
    }


def _flags(names):
    f = 0
    for n in names:
        f |= getattr(os, n)
    return f


def _access_mode(s):
    m = os.F_OK
    if "r" in s:
        m |= os.R_OK
    if "w" in s:
        m |= os.W_OK
    if "x" in s:
        m |= os.X_OK
    return m


def _take(table, name):
    if name not in table:
        raise OSError(errno.EBADF, "no such descriptor in this case: " + name)
    return table[name]


def run_as(step):
    """Runs step["steps"] in a child that has dropped to the given credentials."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rd)
            os.setgroups(step.get("groups", []))
            os.setresgid(step["gid"], step["gid"], step["gid"])
            os.setresuid(step["uid"], step["uid"], step["uid"])
            out = json.dumps(run_steps(step["steps"], {})).encode()
            with os.fdopen(wr, "wb") as w:
                w.write(out)
            os._exit(0)
        except BaseException as e:  # noqa: BLE001 - report anything and leave
            sys.stderr.write("as-child failed: %r\n" % (e,))
            os._exit(1)
    os.close(wr)
    with os.fdopen(rd, "rb") as r:
        data = r.read()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError("child running as uid %d failed" % step["uid"])
    return json.loads(data)


def do(step, table):
    op = step["op"]
    a = step
    if op == "open":
        table[a["fd"]] = os.open(a["path"], _flags(a["flags"]), a.get("mode", 0o644))
    elif op == "close":
        os.close(table.pop(a["fd"]))
    elif op == "read":
        return os.read(_take(table, a["fd"]), a["n"]).decode("latin-1")
    elif op == "write":
        return os.write(_take(table, a["fd"]), a["data"].encode("latin-1"))
    elif op == "fallocate":
        libc = ctypes.CDLL(None, use_errno=True)
        fd = _take(table, a["fd"])
        off, n = ctypes.c_long(a["offset"]), ctypes.c_long(a["len"])
        if libc.fallocate(fd, a["mode"], off, n) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    elif op == "ftruncate":
        os.ftruncate(_take(table, a["fd"]), a["len"])
    elif op == "fstat":
        return st_dict(os.fstat(_take(table, a["fd"])))
    elif op == "fchmod":
        os.fchmod(_take(table, a["fd"]), a["mode"])
    elif op == "stat":
        return st_dict(os.stat(a["path"]))
    elif op == "lstat":
        return st_dict(os.lstat(a["path"]))
    elif op == "exists":
        try:
            os.lstat(a["path"])
            return True
        except FileNotFoundError:
            return False
    elif op == "truncate":
        os.truncate(a["path"], a["len"])
    elif op == "chmod":
        os.chmod(a["path"], a["mode"])
    elif op == "chown":
        os.chown(a["path"], a["uid"], a["gid"])
    elif op == "lchown":
        os.lchown(a["path"], a["uid"], a["gid"])
    elif op == "link":
        os.link(a["src"], a["dst"])
    elif op == "symlink":
        os.symlink(a["target"], a["dst"])
    elif op == "rename":
        os.rename(a["src"], a["dst"])
    elif op == "unlink":
        os.unlink(a["path"])
    elif op == "mkdir":
        os.mkdir(a["path"], a.get("mode", 0o755))
    elif op == "rmdir":
        os.rmdir(a["path"])
    elif op == "mkfifo":
        os.mkfifo(a["path"], a.get("mode", 0o644))
    elif op == "mknod":
        os.mknod(a["path"], a["mode"], os.makedev(a.get("major", 0), a.get("minor", 0)))
    elif op == "listdir":
        return sorted(os.listdir(a["path"]))
    elif op == "access":
        if not os.access(a["path"], _access_mode(a["mode"])):
            # os.access hides the errno; ask again through the C library for it.
            r = _libc.access(os.fsencode(a["path"]), _access_mode(a["mode"]))
            e = ctypes.get_errno() if r != 0 else errno.EACCES
            raise OSError(e, os.strerror(e), a["path"])
    elif op == "utimens":
        utimens(a["path"], a.get("atime"), a.get("mtime"))
    elif op == "bind_unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        table[a["sock"]] = s
        s.bind(a["path"])
        s.listen(4)
    elif op == "connect_unix":
        listener = _take(table, a["sock"])
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            c.settimeout(5)
            c.connect(a["path"])
            c.sendall(a["data"].encode("latin-1"))
            listener.settimeout(5)
            conn, _ = listener.accept()
            with conn:
                return conn.recv(65536).decode("latin-1")
        finally:
            c.close()
    elif op == "read_file":
        with open(a["path"], "rb") as f:
            return f.read().decode("latin-1")
    elif op == "write_file":
        fd = os.open(a["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, a["data"].encode("latin-1"))
        finally:
            os.close(fd)
    elif op == "sleep":
        time.sleep(a["s"])
    elif op == "now":
        return time.time_ns()
    elif op == "as":
        return run_as(a)
    else:
        raise ValueError("unknown op " + op)
    return None


def run_steps(steps, table):
    out = []
    for step in steps:
        try:
            value = do(step, table)
            out.append({"err": "OK", "value": value})
        except OSError as e:
            name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else "E?"
            out.append({"err": name, "value": str(e)})
    return out


def run_case(case):
    old = os.umask(case["umask"]) if "umask" in case else None
    table = {}
    try:
        return {"id": case["id"], "results": run_steps(case["steps"], table)}
    finally:
        for v in table.values():
            try:
                if isinstance(v, socket.socket):
                    v.close()
                else:
                    os.close(v)
            except OSError:
                pass
        if old is not None:
            os.umask(old)


def main():
    args = sys.argv[1:]
    jobs = 1
    if args[:1] == ["--jobs"]:
        jobs = int(args[1])
        args = args[2:]
    if args:
        with open(args[0]) as f:
            cases = json.load(f)
    else:
        cases = json.load(sys.stdin)
    os.umask(0)
    if jobs > 1:
        # Independent cases, run side by side (a per-case umask would race: don't).
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(jobs) as ex:
            out = list(ex.map(run_case, cases))
    else:
        out = [run_case(c) for c in cases]
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
