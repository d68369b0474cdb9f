//! `libstripefs_preload_engine.so`, the engine of the interception library: run a program
//! with `LD_PRELOAD=.../libstripefs_preload.so` (or `stripefs run -- PROGRAM`), and the
//! reads and writes of regular files it opens on a stripefs FUSE mount are served by the
//! native client in the process instead of a kernel round trip each, the approach of
//! DAOS's libioil. The preloaded shim (crates/preload) is small; it loads this library,
//! which holds the client, at the first file it meets on a stripefs mount, and from then
//! on hands it every call it hooks (`sfs_engine_<name>`, each with the C library
//! function's signature).
//!
//! **Real descriptors always.** A file is opened through the mount first, as without
//! the library, so its descriptor is the kernel's; the library then opens it natively
//! too and serves `read`/`write`/`pread`/`pwrite`/`readv`/`writev`/`preadv`/`pwritev`/
//! `lseek`/`fsync`/`fdatasync`/`ftruncate`/`fstat` and `dup`s of that descriptor. The
//! kernel's file offset is kept equal to the library's after every call, so a child
//! after `fork` or `exec`, or any call the library does not see, finds the descriptor
//! where the program left it. Before a descriptor is handed to a path the library does
//! not serve (`mmap`, `fdopen`, `sendfile`, `splice`, `copy_file_range`, `fallocate`,
//! `fcntl` changing O_APPEND/O_DIRECT), its writes are flushed and the library stops
//! serving it: it works through the mount from there on. Writes still behind are flushed
//! at `close`, `fsync`, `fork`, `exec*`, `posix_spawn*`, `system`, `popen`, `exit` and
//! `_exit`. Files opened
//! with `O_APPEND`, `O_DIRECT` or `O_PATH`, not regular, or of a mount whose cluster file
//! this user cannot read, are left to the mount. A `write` returning means the bytes are
//! in this process's write-behind, as through the page cache of the mount; a process
//! killed before the next flush loses them, and nothing it had fsynced.
//!
//! **Cheap to load.** A process that never opens a file on a stripefs mount loads only
//! the shim: no engine, no thread, no connection; its first `open` reads the mount
//! table (again at most once a second). A file on a mount is served natively from its
//! 4th read or write (a `cat` of a small file costs no connection); the connection is
//! shared by the process's threads.
//!
//! **Fallbacks say so.** `STRIPEFS_PRELOAD_DEBUG=1` logs each file served natively and
//! each that fell through (with the reason) to stderr, and prints counters of calls
//! served and fallen through at exit.
//!
//! **Metadata by path** (`meta.rs`): `stat`, `lstat`, `fstatat`, `statx` and the glibc
//! `__xstat` family, `mkdir`/`mkdirat`, `unlink`/`unlinkat`, `rmdir`, `rename`/
//! `renameat`/`renameat2` are served natively where the kernel's resolution and the
//! native one cannot differ (the directory opened by the kernel with `O_PATH` and no
//! symbolic links, on a stripefs mount with nothing mounted below it); a `stat` shows
//! exactly what the mount shows (`stripefs_client::posix_attr`), and after a change of
//! names the mount daemon has the kernel drop the old entries before the call returns
//! (its control socket), so other processes see the change at once. Creates stay with
//! the kernel: the descriptor must be the kernel's, and a kernel open costs as much as
//! a native create.
//!
//! Not served (they work through the mount, slower): `open` with `O_CREAT`, `access`,
//! `chmod`/`chown`/`utimes`, directory listing, stdio's own reads and writes
//! (glibc calls its internal entry points, which no preloaded library can see; `fopen`
//! opens through the mount), system calls made directly (static and Go binaries,
//! `syscall(2)`), io_uring and libaio.

#![allow(clippy::missing_safety_doc)] // The contracts are those of the libc calls hooked.

mod hooks;
mod meta;
mod ownfds;
mod real;
mod state;
