//! The C library's own functions behind the hooks, looked up in libc.so.6 itself at
//! first use (this library is loaded with dlopen by the shim, after which
//! `RTLD_NEXT` would not name libc for certain).

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The handle of the C library the process runs with.
fn libc_handle() -> *mut c_void {
    static H: AtomicUsize = AtomicUsize::new(0);
    let h = H.load(Ordering::Relaxed);
    if h != 0 {
        return h as *mut c_void;
    }
    // SAFETY: a NUL-terminated name; RTLD_NOLOAD only finds what is loaded.
    let h = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    H.store(h as usize, Ordering::Relaxed);
    h
}

fn lookup(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    let h = libc_handle();
    let h = if h.is_null() { libc::RTLD_NEXT } else { h };
    // SAFETY: `name` is NUL-terminated; dlsym has no other precondition.
    let p = unsafe { libc::dlsym(h, name.as_ptr() as *const c_char) } as usize;
    if p == 0 {
        let msg = b"libstripefs_preload: a C library function it hooks is missing\n";
        // SAFETY: writing a static message to stderr, then ending the process.
        unsafe {
            libc::write(2, msg.as_ptr() as *const c_void, msg.len());
            libc::abort();
        }
    }
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! real {
    ($($name:ident : fn($($arg:ident : $ty:ty),*) -> $ret:ty;)*) => {
        $(
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = lookup(&SLOT, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: the symbol of that name has this C signature.
                let f: unsafe extern "C" fn($($ty),*) -> $ret = std::mem::transmute(p);
                f($($arg),*)
            }
        )*
    };
}

real! {
    open: fn(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    open64: fn(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    openat: fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    openat64: fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    __open_2: fn(path: *const c_char, flags: c_int) -> c_int;
    __open64_2: fn(path: *const c_char, flags: c_int) -> c_int;
    __openat_2: fn(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    __openat64_2: fn(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    creat: fn(path: *const c_char, mode: c_uint) -> c_int;
    creat64: fn(path: *const c_char, mode: c_uint) -> c_int;
    close: fn(fd: c_int) -> c_int;
    read: fn(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    write: fn(fd: c_int, buf: *const c_void, n: usize) -> isize;
    pread: fn(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize;
    pread64: fn(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize;
    pwrite: fn(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize;
    pwrite64: fn(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize;
    readv: fn(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize;
    writev: fn(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize;
    preadv: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64) -> isize;
    preadv64: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64) -> isize;
    pwritev: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64) -> isize;
    pwritev64: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64) -> isize;
    preadv2: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64, flags: c_int) -> isize;
    pwritev2: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64, flags: c_int) -> isize;
    preadv64v2: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64, flags: c_int) -> isize;
    pwritev64v2: fn(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64, flags: c_int) -> isize;
    lseek: fn(fd: c_int, off: i64, whence: c_int) -> i64;
    lseek64: fn(fd: c_int, off: i64, whence: c_int) -> i64;
    fsync: fn(fd: c_int) -> c_int;
    fdatasync: fn(fd: c_int) -> c_int;
    ftruncate: fn(fd: c_int, len: i64) -> c_int;
    ftruncate64: fn(fd: c_int, len: i64) -> c_int;
    fstat: fn(fd: c_int, st: *mut libc::stat) -> c_int;
    stat: fn(path: *const c_char, st: *mut libc::stat) -> c_int;
    stat64: fn(path: *const c_char, st: *mut libc::stat64) -> c_int;
    lstat: fn(path: *const c_char, st: *mut libc::stat) -> c_int;
    lstat64: fn(path: *const c_char, st: *mut libc::stat64) -> c_int;
    fstatat: fn(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    fstatat64: fn(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int;
    __xstat: fn(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    __xstat64: fn(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int;
    __lxstat: fn(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int;
    __lxstat64: fn(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int;
    __fxstatat: fn(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int;
    __fxstatat64: fn(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int;
    statx: fn(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, st: *mut libc::statx) -> c_int;
    fstat64: fn(fd: c_int, st: *mut libc::stat64) -> c_int;
    __fxstat: fn(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int;
    __fxstat64: fn(ver: c_int, fd: c_int, st: *mut libc::stat64) -> c_int;
    dup: fn(fd: c_int) -> c_int;
    dup2: fn(fd: c_int, to: c_int) -> c_int;
    dup3: fn(fd: c_int, to: c_int, flags: c_int) -> c_int;
    fcntl: fn(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    fcntl64: fn(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    mmap: fn(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
    mmap64: fn(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
    fdopen: fn(fd: c_int, mode: *const c_char) -> *mut libc::FILE;
    sendfile: fn(out: c_int, inp: c_int, off: *mut i64, n: usize) -> isize;
    sendfile64: fn(out: c_int, inp: c_int, off: *mut i64, n: usize) -> isize;
    splice: fn(inp: c_int, off_in: *mut i64, out: c_int, off_out: *mut i64, n: usize, flags: c_uint) -> isize;
    copy_file_range: fn(inp: c_int, off_in: *mut i64, out: c_int, off_out: *mut i64, n: usize, flags: c_uint) -> isize;
    fallocate: fn(fd: c_int, mode: c_int, off: i64, len: i64) -> c_int;
    fallocate64: fn(fd: c_int, mode: c_int, off: i64, len: i64) -> c_int;
    posix_fallocate: fn(fd: c_int, off: i64, len: i64) -> c_int;
    posix_fallocate64: fn(fd: c_int, off: i64, len: i64) -> c_int;
    execve: fn(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    execv: fn(path: *const c_char, argv: *const *const c_char) -> c_int;
    execvp: fn(file: *const c_char, argv: *const *const c_char) -> c_int;
    execvpe: fn(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fexecve: fn(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    posix_spawn: fn(pid: *mut libc::pid_t, path: *const c_char, fa: *const c_void, attr: *const c_void, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    posix_spawnp: fn(pid: *mut libc::pid_t, file: *const c_char, fa: *const c_void, attr: *const c_void, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    futimens: fn(fd: c_int, times: *const libc::timespec) -> c_int;
    system: fn(command: *const c_char) -> c_int;
    popen: fn(command: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    close_range: fn(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    unlink: fn(path: *const c_char) -> c_int;
    unlinkat: fn(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    rmdir: fn(path: *const c_char) -> c_int;
    mkdir: fn(path: *const c_char, mode: libc::mode_t) -> c_int;
    mkdirat: fn(dirfd: c_int, path: *const c_char, mode: libc::mode_t) -> c_int;
    rename: fn(from: *const c_char, to: *const c_char) -> c_int;
    renameat: fn(fromfd: c_int, from: *const c_char, tofd: c_int, to: *const c_char) -> c_int;
    renameat2: fn(fromfd: c_int, from: *const c_char, tofd: c_int, to: *const c_char, flags: c_uint) -> c_int;
}

/// `_exit` never returns, so it is not in the table above.
pub unsafe fn exit_now(code: c_int) -> ! {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = lookup(&SLOT, b"_exit\0");
    // SAFETY: `_exit` has this signature.
    let f: unsafe extern "C" fn(c_int) -> ! = std::mem::transmute(p);
    f(code)
}
