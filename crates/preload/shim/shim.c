/*
 * libstripefs_preload.so: the library a program preloads (LD_PRELOAD, or
 * `stripefs run -- PROGRAM`) so that its file calls on a stripefs FUSE mount are served
 * by the native client, past FUSE.
 *
 * This part is a shim in C, so that the thousands of short processes of a shell script
 * or a build pay almost nothing for it (a Rust library brings the Rust runtime and
 * libgcc_s into every process: 19-23% on a loop of /bin/true, against 4% for an empty
 * preloaded library). Every hooked function goes straight to the C library until the
 * process makes its 4th read or write on a file under a stripefs mount (the mount
 * table, read at most once a second, says where they are; see "candidates" below).
 * Then it loads libstripefs_preload_engine.so from its own directory
 * (crates/preload-engine, the native client), hands it those descriptors, and from then
 * on every hooked call goes to the engine's sfs_engine_<name>. Calls by path (stat,
 * mkdir, unlink, rename) on a mount load the engine at their 16th (4 x the 4th).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static void *engine;       /* the engine's handle once loaded */
static int engine_failed;  /* it could not be loaded: never again */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *libc_fn(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    if (p == NULL) {
        static const char msg[] = "libstripefs_preload: a C library function it hooks is missing\n";
        (void)!write(2, msg, sizeof msg - 1);
        abort();
    }
    return p;
}

static void *engine_fn(const char *name) {
    void *p = dlsym(engine, name);
    if (p == NULL) {
        static const char msg[] =
            "libstripefs_preload: libstripefs_preload_engine.so lacks a function (another build?)\n";
        (void)!write(2, msg, sizeof msg - 1);
        abort();
    }
    return p;
}

/* ---- the mount table ---- */

#define MAX_MOUNTS 32
static char mounts[MAX_MOUNTS][1024];
static int n_mounts;
static time_t mounts_read_at = -1;

static void unescape(char *s) {
    char *o = s;
    for (char *i = s; *i;) {
        if (i[0] == '\\' && i[1] >= '0' && i[1] <= '7' && i[2] >= '0' && i[2] <= '7' &&
            i[3] >= '0' && i[3] <= '7') {
            *o++ = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
            i += 4;
        } else {
            *o++ = *i++;
        }
    }
    *o = '\0';
}

/* One line of /proc/self/mountinfo: a stripefs mount (FUSE subtype stripefs, or plain
 * FUSE whose source names stripefs, as its daemon names it) is kept. */
static void mount_line(char *line) {
    char *f[64];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(line, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save))
        f[n++] = t;
    int dash = -1;
    for (int i = 0; i < n; i++)
        if (strcmp(f[i], "-") == 0) {
            dash = i;
            break;
        }
    if (dash < 5 || n < dash + 3 || n_mounts == MAX_MOUNTS) return;
    const char *fstype = f[dash + 1], *source = f[dash + 2];
    int ours = strcmp(fstype, "fuse.stripefs") == 0 ||
               (strcmp(fstype, "fuse") == 0 &&
                (strcmp(source, "stripefs") == 0 || strncmp(source, "stripefs:", 9) == 0));
    if (!ours || strlen(f[4]) >= sizeof mounts[0]) return;
    strcpy(mounts[n_mounts], f[4]);
    unescape(mounts[n_mounts]);
    n_mounts++;
}

/* Reads the mount table if it was last read more than a second ago; under `lock`. */
static void refresh_mounts(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    if (mounts_read_at == now.tv_sec) return;
    mounts_read_at = now.tv_sec;
    n_mounts = 0;
    static int (*c_open)(const char *, int, ...);
    static ssize_t (*c_read)(int, void *, size_t);
    static int (*c_close)(int);
    if (!c_open) c_open = libc_fn("open");
    if (!c_read) c_read = libc_fn("read");
    if (!c_close) c_close = libc_fn("close");
    int fd = c_open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[16384], line[8192];
    size_t len = 0;
    ssize_t r;
    while ((r = c_read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] == '\n') {
                line[len] = '\0';
                if (memmem(line, len, "stripefs", 8)) mount_line(line);
                len = 0;
            } else if (len + 1 < sizeof line) {
                line[len++] = buf[i];
            }
        }
    }
    c_close(fd);
}

/* Whether the absolute path `path` lies under a stripefs mount; under `lock`. */
static int under_mount(const char *path) {
    for (int i = 0; i < n_mounts; i++) {
        size_t m = strlen(mounts[i]);
        if (strncmp(path, mounts[i], m) == 0 &&
            (path[m] == '\0' || path[m] == '/' || strcmp(mounts[i], "/") == 0))
            return 1;
    }
    return 0;
}

/* Whether there is any stripefs mount. */
static int any_mount(void) {
    pthread_mutex_lock(&lock);
    refresh_mounts();
    int any = n_mounts > 0;
    pthread_mutex_unlock(&lock);
    return any;
}

/* Whether the absolute path in `path` lies under a stripefs mount. */
static int path_under_mount(const char *path) {
    pthread_mutex_lock(&lock);
    int found = under_mount(path);
    pthread_mutex_unlock(&lock);
    return found;
}

/* The kernel's absolute path of descriptor `fd` (or the working directory for
 * AT_FDCWD) in `buf`; 0 if it has none. */
static int fd_path(int fd, char *buf, size_t size) {
    if (fd == AT_FDCWD) return getcwd(buf, size) != NULL;
    char name[64];
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(name, buf, size - 1);
    if (n <= 0) return 0;
    buf[n] = '\0';
    return 1;
}

/* Whether the kernel's path of `fd` lies under a stripefs mount. */
static int on_stripefs(int fd) {
    if (!any_mount()) return 0;
    char path[4096];
    return fd_path(fd, path, sizeof path) && path_under_mount(path);
}

/* Whether `path` (relative to `dirfd`) may lie under a stripefs mount. */
static int path_on_stripefs(int dirfd, const char *path) {
    if (path == NULL || !any_mount()) return 0;
    if (path[0] == '/') return path_under_mount(path);
    char dir[4096];
    return fd_path(dirfd, dir, sizeof dir) && path_under_mount(dir);
}

/* ---- the engine ---- */

static int load_engine(void) {
    pthread_mutex_lock(&lock);
    if (engine == NULL && !engine_failed) {
        Dl_info info;
        char path[4096] = "";
        if (dladdr((void *)load_engine, &info) && info.dli_fname) {
            const char *slash = strrchr(info.dli_fname, '/');
            if (slash && (size_t)(slash - info.dli_fname) + 1 < sizeof path - 40) {
                memcpy(path, info.dli_fname, (size_t)(slash - info.dli_fname) + 1);
                path[slash - info.dli_fname + 1] = '\0';
            }
        }
        strcat(path, "libstripefs_preload_engine.so");
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            engine_failed = 1;
            fprintf(stderr,
                    "libstripefs_preload: cannot load %s (%s); files on stripefs mounts go through the mount\n",
                    path, dlerror());
        } else {
            __atomic_store_n(&engine, h, __ATOMIC_RELEASE);
        }
    }
    int ok = engine != NULL;
    pthread_mutex_unlock(&lock);
    return ok;
}

static inline void *loaded(void) { return __atomic_load_n(&engine, __ATOMIC_ACQUIRE); }

/* ---- candidates: descriptors on a stripefs mount, before the engine is loaded ----
 *
 * A file opened on a mount is served natively only from its 4th read or write, so
 * that a process reading or writing a small file once (cat, a shell's redirection) loads
 * no engine and makes no connection. Until then the shim counts its calls here; at the
 * 4th it loads the engine and hands it every candidate with its count. */

#define MAX_FD 65536
#define PROMOTE_AFTER_CALLS 4

/* Calls a file makes through the mount before it is served: PROMOTE_AFTER_CALLS, or
 * STRIPEFS_PRELOAD_AFTER (1 serves from the first read or write; for tests). */
static int promote_after(void) {
    static int n;
    if (n == 0) {
        const char *e = getenv("STRIPEFS_PRELOAD_AFTER");
        int v = e ? atoi(e) : 0;
        n = v >= 1 ? v : PROMOTE_AFTER_CALLS;
    }
    return n;
}
static struct candidate {
    int on;
    int flags;
    int calls;
    int wrote;
} cand[MAX_FD];
static int n_cand;

static inline int is_cand(int fd) {
    return __atomic_load_n(&n_cand, __ATOMIC_RELAXED) > 0 && fd >= 0 && fd < MAX_FD &&
           __atomic_load_n(&cand[fd].on, __ATOMIC_ACQUIRE);
}

static void cand_set(int fd, int flags, int calls, int wrote) {
    if (fd < 0 || fd >= MAX_FD) return;
    pthread_mutex_lock(&lock);
    if (!cand[fd].on) n_cand++;
    cand[fd].flags = flags;
    cand[fd].calls = calls;
    cand[fd].wrote = wrote;
    __atomic_store_n(&cand[fd].on, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

static void cand_clear(int fd) {
    if (!is_cand(fd)) return;
    pthread_mutex_lock(&lock);
    if (cand[fd].on) {
        cand[fd].on = 0;
        n_cand--;
    }
    pthread_mutex_unlock(&lock);
}

static void cand_dup(int from, int to) {
    if (to >= 0 && is_cand(from)) cand_set(to, cand[from].flags, cand[from].calls, cand[from].wrote);
}

/* After an open the engine did not see: a file on a stripefs mount is a candidate. */
static int opened(int fd, int flags) {
    if (fd >= 0 && on_stripefs(fd)) cand_set(fd, flags, 0, 0);
    return fd;
}

/* A read or write is about to be made on `fd`: count it, and at the 4th load the
 * engine and hand it every candidate (this one with the calls before this, which the
 * engine counts itself). */
static void io_call(int fd, int write) {
    if (!is_cand(fd)) return;
    int calls = __atomic_add_fetch(&cand[fd].calls, 1, __ATOMIC_RELAXED);
    if (calls < promote_after()) {
        if (write) __atomic_store_n(&cand[fd].wrote, 1, __ATOMIC_RELAXED);
        return;
    }
    if (!load_engine()) {
        pthread_mutex_lock(&lock);
        memset(cand, 0, sizeof cand);
        n_cand = 0;
        pthread_mutex_unlock(&lock);
        return;
    }
    static void (*take)(int, int, unsigned long long, int);
    if (!take) take = engine_fn("sfs_engine_take");
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_FD && n_cand > 0; i++) {
        if (!cand[i].on) continue;
        int c = cand[i].calls - (i == fd ? 1 : 0);
        take(i, cand[i].flags, (unsigned long long)(c < 0 ? 0 : c), cand[i].wrote);
        cand[i].on = 0;
        n_cand--;
    }
    pthread_mutex_unlock(&lock);
}

/* A read or write (`fd` its descriptor): counted while the engine is not loaded. */
#define IO_HOOK(ret, name, params, args, fd, write)                                     \
    EXPORT ret name params {                                                            \
        static ret(*sfs_e_) params;                                                     \
        static ret(*sfs_c_) params;                                                     \
        if (!loaded()) io_call(fd, write);                                              \
        if (loaded()) {                                                                 \
            if (!sfs_e_) sfs_e_ = (ret(*) params)engine_fn("sfs_engine_" #name);        \
            return sfs_e_ args;                                                         \
        }                                                                               \
        if (!sfs_c_) sfs_c_ = (ret(*) params)libc_fn(#name);                            \
        return sfs_c_ args;                                                             \
    }

/* A call after which `fd` is no candidate any more (closed, or handed to a call the
 * library does not serve, for good). */
#define END_HOOK(ret, name, params, args, fd)                                           \
    EXPORT ret name params {                                                            \
        static ret(*sfs_e_) params;                                                     \
        static ret(*sfs_c_) params;                                                     \
        if (loaded()) {                                                                 \
            if (!sfs_e_) sfs_e_ = (ret(*) params)engine_fn("sfs_engine_" #name);        \
            return sfs_e_ args;                                                         \
        }                                                                               \
        cand_clear(fd);                                                                 \
        if (!sfs_c_) sfs_c_ = (ret(*) params)libc_fn(#name);                            \
        return sfs_c_ args;                                                             \
    }

/* The same, for a call that hands two descriptors to the kernel (sendfile, splice). */
#define END2_HOOK(ret, name, params, args, fd1, fd2)                                    \
    EXPORT ret name params {                                                            \
        static ret(*sfs_e_) params;                                                     \
        static ret(*sfs_c_) params;                                                     \
        if (loaded()) {                                                                 \
            if (!sfs_e_) sfs_e_ = (ret(*) params)engine_fn("sfs_engine_" #name);        \
            return sfs_e_ args;                                                         \
        }                                                                               \
        cand_clear(fd1);                                                                \
        cand_clear(fd2);                                                                \
        if (!sfs_c_) sfs_c_ = (ret(*) params)libc_fn(#name);                            \
        return sfs_c_ args;                                                             \
    }

/* Calls by path on a stripefs mount (stat, mkdir, unlink, rename) before the engine is
 * loaded: at the PATH_CALLS_FACTOR * promote_after()-th the engine is loaded, which
 * serves them natively from then on. (A listing of a few files, `ls -l`, stays with
 * the mount and loads nothing.) */
#define PATH_CALLS_FACTOR 4
static int path_calls;

static void path_call(int dirfd, const char *path) {
    if (!path_on_stripefs(dirfd, path)) return;
    int n = __atomic_add_fetch(&path_calls, 1, __ATOMIC_RELAXED);
    if (n >= PATH_CALLS_FACTOR * promote_after()) load_engine();
}

/* A call by path (`dirfd`, `path` its location): counted while the engine is not
 * loaded, then the engine's. */
#define PATH_HOOK(ret, name, params, args, dirfd, path)                                 \
    EXPORT ret name params {                                                            \
        static ret(*sfs_e_) params;                                                     \
        static ret(*sfs_c_) params;                                                     \
        if (!loaded()) path_call(dirfd, path);                                          \
        if (loaded()) {                                                                 \
            if (!sfs_e_) sfs_e_ = (ret(*) params)engine_fn("sfs_engine_" #name);        \
            return sfs_e_ args;                                                         \
        }                                                                               \
        if (!sfs_c_) sfs_c_ = (ret(*) params)libc_fn(#name);                            \
        return sfs_c_ args;                                                             \
    }

/* A hooked function: the engine's once loaded, else the C library's. */
#define HOOK(ret, name, params, args)                                                   \
    EXPORT ret name params {                                                            \
        static ret(*sfs_e_) params;                                                     \
        static ret(*sfs_c_) params;                                                     \
        if (loaded()) {                                                                 \
            if (!sfs_e_) sfs_e_ = (ret(*) params)engine_fn("sfs_engine_" #name);        \
            return sfs_e_ args;                                                         \
        }                                                                               \
        if (!sfs_c_) sfs_c_ = (ret(*) params)libc_fn(#name);                            \
        return sfs_c_ args;                                                             \
    }

/* An open: the engine's once loaded; else the C library's, then perhaps the engine. */
#define OPEN(name, params, args, flags)                                                 \
    EXPORT int name params {                                                            \
        static int(*sfs_e_) params;                                                          \
        static int(*sfs_c_) params;                                                          \
        if (loaded()) {                                                                 \
            if (!sfs_e_) sfs_e_ = (int(*) params)engine_fn("sfs_engine_" #name);                  \
            return sfs_e_ args;                                                              \
        }                                                                               \
        if (!sfs_c_) sfs_c_ = (int(*) params)libc_fn(#name);                                      \
        return opened(sfs_c_ args, flags);                                                   \
    }

/* The mode argument of the open calls is there only with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags)                                                                 \
    unsigned mode = 0;                                                                  \
    if ((flags) & (O_CREAT | O_TMPFILE)) {                                              \
        va_list ap;                                                                     \
        va_start(ap, flags);                                                            \
        mode = va_arg(ap, unsigned);                                                    \
        va_end(ap);                                                                     \
    }

static int open_(const char *p, int f, unsigned m);
static int open64_(const char *p, int f, unsigned m);
static int openat_(int d, const char *p, int f, unsigned m);
static int openat64_(int d, const char *p, int f, unsigned m);

#define OPEN_MODE(name, inner, params, args, flags, lastflag)                           \
    EXPORT int name params {                                                            \
        MODE_ARG(lastflag)                                                              \
        return inner args;                                                              \
    }

#define OPEN_INNER(inner, sym, params, args, flags)                                     \
    static int inner params {                                                           \
        static int(*sfs_e_) params;                                                          \
        static int(*sfs_c_) params;                                                          \
        if (loaded()) {                                                                 \
            if (!sfs_e_) sfs_e_ = (int(*) params)engine_fn("sfs_engine_" sym);                    \
            return sfs_e_ args;                                                              \
        }                                                                               \
        if (!sfs_c_) sfs_c_ = (int(*) params)libc_fn(sym);                                        \
        return opened(sfs_c_ args, flags);                                                   \
    }

OPEN_INNER(open_, "open", (const char *p, int f, unsigned m), (p, f, m), f)
OPEN_INNER(open64_, "open64", (const char *p, int f, unsigned m), (p, f, m), f)
OPEN_INNER(openat_, "openat", (int d, const char *p, int f, unsigned m), (d, p, f, m), f)
OPEN_INNER(openat64_, "openat64", (int d, const char *p, int f, unsigned m), (d, p, f, m), f)

OPEN_MODE(open, open_, (const char *path, int flags, ...), (path, flags, mode), flags, flags)
OPEN_MODE(open64, open64_, (const char *path, int flags, ...), (path, flags, mode), flags, flags)
OPEN_MODE(openat, openat_, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode), flags, flags)
OPEN_MODE(openat64, openat64_, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode), flags, flags)

OPEN(__open_2, (const char *path, int flags), (path, flags), flags)
OPEN(__open64_2, (const char *path, int flags), (path, flags), flags)
OPEN(__openat_2, (int dirfd, const char *path, int flags), (dirfd, path, flags), flags)
OPEN(__openat64_2, (int dirfd, const char *path, int flags), (dirfd, path, flags), flags)
OPEN(creat, (const char *path, mode_t mode), (path, mode), O_CREAT | O_WRONLY | O_TRUNC)
OPEN(creat64, (const char *path, mode_t mode), (path, mode), O_CREAT | O_WRONLY | O_TRUNC)

/* fcntl's third argument is an int, a pointer or absent: passed on as a word. */
static int fcntl_(const char *sym, const char *esym, int fd, int cmd, unsigned long arg) {
    if (loaded()) {
        int (*e)(int, int, unsigned long) = (int (*)(int, int, unsigned long))engine_fn(esym);
        return e(fd, cmd, arg);
    }
    int (*c)(int, int, unsigned long) = (int (*)(int, int, unsigned long))libc_fn(sym);
    if (cmd == F_SETFL && ((int)arg & (O_APPEND | O_DIRECT))) cand_clear(fd);
    int r = c(fd, cmd, arg);
    if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) cand_dup(fd, r);
    return r;
}

EXPORT int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return fcntl_("fcntl", "sfs_engine_fcntl", fd, cmd, arg);
}

EXPORT int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return fcntl_("fcntl64", "sfs_engine_fcntl64", fd, cmd, arg);
}

typedef const struct iovec *iov_t;

END_HOOK(int, close, (int fd), (fd), fd)

static void clear_range(unsigned long first, unsigned long last) {
    if (__atomic_load_n(&n_cand, __ATOMIC_RELAXED) == 0) return;
    for (unsigned long i = first; i <= last && i < MAX_FD; i++) cand_clear((int)i);
}

EXPORT int close_range(unsigned first, unsigned last, int flags) {
    static int (*e)(unsigned, unsigned, int);
    static int (*c)(unsigned, unsigned, int);
    if (loaded()) {
        if (!e) e = (int (*)(unsigned, unsigned, int))engine_fn("sfs_engine_close_range");
        return e(first, last, flags);
    }
    if (!(flags & CLOSE_RANGE_CLOEXEC)) clear_range(first, last);
    if (!c) c = (int (*)(unsigned, unsigned, int))libc_fn("close_range");
    return c(first, last, flags);
}

EXPORT void closefrom(int first) {
    static void (*e)(int);
    static void (*c)(int);
    if (loaded()) {
        if (!e) e = (void (*)(int))engine_fn("sfs_engine_closefrom");
        e(first);
        return;
    }
    clear_range(first < 0 ? 0 : (unsigned long)first, MAX_FD);
    if (!c) c = (void (*)(int))libc_fn("closefrom");
    c(first);
}

EXPORT int dup(int fd) {
    static int (*e)(int);
    static int (*c)(int);
    if (loaded()) {
        if (!e) e = (int (*)(int))engine_fn("sfs_engine_dup");
        return e(fd);
    }
    if (!c) c = (int (*)(int))libc_fn("dup");
    int r = c(fd);
    cand_dup(fd, r);
    return r;
}

EXPORT int dup2(int fd, int to) {
    static int (*e)(int, int);
    static int (*c)(int, int);
    if (loaded()) {
        if (!e) e = (int (*)(int, int))engine_fn("sfs_engine_dup2");
        return e(fd, to);
    }
    if (!c) c = (int (*)(int, int))libc_fn("dup2");
    if (fd != to) cand_clear(to);
    int r = c(fd, to);
    if (fd != to) cand_dup(fd, r);
    return r;
}

EXPORT int dup3(int fd, int to, int flags) {
    static int (*e)(int, int, int);
    static int (*c)(int, int, int);
    if (loaded()) {
        if (!e) e = (int (*)(int, int, int))engine_fn("sfs_engine_dup3");
        return e(fd, to, flags);
    }
    if (!c) c = (int (*)(int, int, int))libc_fn("dup3");
    cand_clear(to);
    int r = c(fd, to, flags);
    cand_dup(fd, r);
    return r;
}

IO_HOOK(ssize_t, read, (int fd, void *b, size_t n), (fd, b, n), fd, 0)
IO_HOOK(ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n), fd, 1)
IO_HOOK(ssize_t, pread, (int fd, void *b, size_t n, off_t o), (fd, b, n, o), fd, 0)
IO_HOOK(ssize_t, pread64, (int fd, void *b, size_t n, off64_t o), (fd, b, n, o), fd, 0)
IO_HOOK(ssize_t, pwrite, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o), fd, 1)
IO_HOOK(ssize_t, pwrite64, (int fd, const void *b, size_t n, off64_t o), (fd, b, n, o), fd, 1)
IO_HOOK(ssize_t, readv, (int fd, iov_t v, int n), (fd, v, n), fd, 0)
IO_HOOK(ssize_t, writev, (int fd, iov_t v, int n), (fd, v, n), fd, 1)
IO_HOOK(ssize_t, preadv, (int fd, iov_t v, int n, off_t o), (fd, v, n, o), fd, 0)
IO_HOOK(ssize_t, preadv64, (int fd, iov_t v, int n, off64_t o), (fd, v, n, o), fd, 0)
IO_HOOK(ssize_t, pwritev, (int fd, iov_t v, int n, off_t o), (fd, v, n, o), fd, 1)
IO_HOOK(ssize_t, pwritev64, (int fd, iov_t v, int n, off64_t o), (fd, v, n, o), fd, 1)
IO_HOOK(ssize_t, preadv2, (int fd, iov_t v, int n, off_t o, int f), (fd, v, n, o, f), fd, 0)
IO_HOOK(ssize_t, pwritev2, (int fd, iov_t v, int n, off_t o, int f), (fd, v, n, o, f), fd, 1)
/* What programs built with _FILE_OFFSET_BITS=64 call for preadv2/pwritev2 (Python, fio). */
IO_HOOK(ssize_t, preadv64v2, (int fd, iov_t v, int n, off64_t o, int f), (fd, v, n, o, f), fd, 0)
IO_HOOK(ssize_t, pwritev64v2, (int fd, iov_t v, int n, off64_t o, int f), (fd, v, n, o, f), fd, 1)
HOOK(off_t, lseek, (int fd, off_t o, int w), (fd, o, w))
HOOK(off64_t, lseek64, (int fd, off64_t o, int w), (fd, o, w))
HOOK(int, fsync, (int fd), (fd))
HOOK(int, fdatasync, (int fd), (fd))
HOOK(int, ftruncate, (int fd, off_t l), (fd, l))
HOOK(int, ftruncate64, (int fd, off64_t l), (fd, l))
HOOK(int, fstat, (int fd, struct stat *st), (fd, st))
HOOK(int, fstat64, (int fd, struct stat64 *st), (fd, st))
HOOK(int, __fxstat, (int ver, int fd, struct stat *st), (ver, fd, st))
HOOK(int, __fxstat64, (int ver, int fd, struct stat64 *st), (ver, fd, st))
#define CWD AT_FDCWD
PATH_HOOK(int, stat, (const char *p, struct stat *st), (p, st), CWD, p)
PATH_HOOK(int, stat64, (const char *p, struct stat64 *st), (p, st), CWD, p)
PATH_HOOK(int, lstat, (const char *p, struct stat *st), (p, st), CWD, p)
PATH_HOOK(int, lstat64, (const char *p, struct stat64 *st), (p, st), CWD, p)
PATH_HOOK(int, fstatat, (int d, const char *p, struct stat *st, int f), (d, p, st, f), d, p)
PATH_HOOK(int, fstatat64, (int d, const char *p, struct stat64 *st, int f), (d, p, st, f), d, p)
PATH_HOOK(int, __xstat, (int v, const char *p, struct stat *st), (v, p, st), CWD, p)
PATH_HOOK(int, __xstat64, (int v, const char *p, struct stat64 *st), (v, p, st), CWD, p)
PATH_HOOK(int, __lxstat, (int v, const char *p, struct stat *st), (v, p, st), CWD, p)
PATH_HOOK(int, __lxstat64, (int v, const char *p, struct stat64 *st), (v, p, st), CWD, p)
PATH_HOOK(int, __fxstatat, (int v, int d, const char *p, struct stat *st, int f), (v, d, p, st, f), d, p)
PATH_HOOK(int, __fxstatat64, (int v, int d, const char *p, struct stat64 *st, int f), (v, d, p, st, f), d, p)
PATH_HOOK(int, statx, (int d, const char *p, int f, unsigned m, struct statx *st), (d, p, f, m, st), d, p)
PATH_HOOK(int, unlink, (const char *p), (p), CWD, p)
PATH_HOOK(int, unlinkat, (int d, const char *p, int f), (d, p, f), d, p)
PATH_HOOK(int, rmdir, (const char *p), (p), CWD, p)
PATH_HOOK(int, mkdir, (const char *p, mode_t m), (p, m), CWD, p)
PATH_HOOK(int, mkdirat, (int d, const char *p, mode_t m), (d, p, m), d, p)
PATH_HOOK(int, rename, (const char *a, const char *b), (a, b), CWD, a)
PATH_HOOK(int, renameat, (int da, const char *a, int db, const char *b), (da, a, db, b), da, a)
PATH_HOOK(int, renameat2, (int da, const char *a, int db, const char *b, unsigned f), (da, a, db, b, f), da, a)
END_HOOK(void *, mmap, (void *a, size_t l, int p, int f, int fd, off_t o), (a, l, p, f, fd, o), fd)
END_HOOK(void *, mmap64, (void *a, size_t l, int p, int f, int fd, off64_t o), (a, l, p, f, fd, o), fd)
END_HOOK(FILE *, fdopen, (int fd, const char *m), (fd, m), fd)
END2_HOOK(ssize_t, sendfile, (int out, int in, off_t *o, size_t n), (out, in, o, n), out, in)
END2_HOOK(ssize_t, sendfile64, (int out, int in, off64_t *o, size_t n), (out, in, o, n), out, in)
END2_HOOK(ssize_t, splice, (int in, loff_t *oi, int out, loff_t *oo, size_t n, unsigned f),
          (in, oi, out, oo, n, f), in, out)
END2_HOOK(ssize_t, copy_file_range, (int in, loff_t *oi, int out, loff_t *oo, size_t n, unsigned f),
          (in, oi, out, oo, n, f), in, out)
END_HOOK(int, fallocate, (int fd, int m, off_t o, off_t l), (fd, m, o, l), fd)
END_HOOK(int, fallocate64, (int fd, int m, off64_t o, off64_t l), (fd, m, o, l), fd)
END_HOOK(int, posix_fallocate, (int fd, off_t o, off_t l), (fd, o, l), fd)
END_HOOK(int, posix_fallocate64, (int fd, off64_t o, off64_t l), (fd, o, l), fd)
HOOK(int, execve, (const char *p, char *const a[], char *const e[]), (p, a, e))
HOOK(int, execv, (const char *p, char *const a[]), (p, a))
HOOK(int, execvp, (const char *f, char *const a[]), (f, a))
HOOK(int, execvpe, (const char *f, char *const a[], char *const e[]), (f, a, e))
HOOK(int, fexecve, (int fd, char *const a[], char *const e[]), (fd, a, e))
HOOK(int, posix_spawn,
     (pid_t *pid, const char *p, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *at,
      char *const a[], char *const e[]),
     (pid, p, fa, at, a, e))
HOOK(int, posix_spawnp,
     (pid_t *pid, const char *p, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *at,
      char *const a[], char *const e[]),
     (pid, p, fa, at, a, e))

HOOK(int, system, (const char *c), (c))
HOOK(FILE *, popen, (const char *c, const char *m), (c, m))

/* The execl family is variadic: glibc builds the argument vector and calls its internal
 * execve, past the hooks. Built here the same way, on the hooked execv, execvp, execve. */
#define MAX_EXECL_ARGS 4096
#define EXECL_ARGV(first, ap, argv, n)                                                  \
    const char *argv[MAX_EXECL_ARGS];                                                   \
    int n = 0;                                                                          \
    argv[n++] = first;                                                                  \
    while (argv[n - 1] != NULL) {                                                       \
        if (n == MAX_EXECL_ARGS) {                                                      \
            va_end(ap);                                                                 \
            errno = E2BIG;                                                              \
            return -1;                                                                  \
        }                                                                               \
        argv[n++] = va_arg(ap, const char *);                                           \
    }

EXPORT int execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    EXECL_ARGV(arg, ap, argv, n)
    va_end(ap);
    return execv(path, (char *const *)argv);
}

EXPORT int execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    EXECL_ARGV(arg, ap, argv, n)
    va_end(ap);
    return execvp(file, (char *const *)argv);
}

EXPORT int execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    EXECL_ARGV(arg, ap, argv, n)
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, (char *const *)argv, envp);
}

EXPORT void _exit(int code) {
    static void (*e)(int);
    static void (*c)(int);
    if (loaded()) {
        if (!e) e = (void (*)(int))engine_fn("sfs_engine__exit");
        e(code);
    }
    if (!c) c = (void (*)(int))libc_fn("_exit");
    c(code);
    __builtin_unreachable();
}

EXPORT void _Exit(int code) { _exit(code); }

/* ---- other names of the same calls ----
 *
 * _FORTIFY_SOURCE builds call __read_chk and __pread(64)_chk where the buffer's size is
 * known; glibc also exports __read, __write, __close and others as public aliases. Each
 * is the hook of its plain name, after the check the C library would make. */

EXPORT ssize_t __read_chk(int fd, void *b, size_t n, size_t room) {
    if (n > room) {
        ssize_t (*c)(int, void *, size_t, size_t) =
            (ssize_t (*)(int, void *, size_t, size_t))libc_fn("__read_chk");
        return c(fd, b, n, room); /* reports the overflow as the C library does */
    }
    return read(fd, b, n);
}

EXPORT ssize_t __pread_chk(int fd, void *b, size_t n, off_t o, size_t room) {
    if (n > room) {
        ssize_t (*c)(int, void *, size_t, off_t, size_t) =
            (ssize_t (*)(int, void *, size_t, off_t, size_t))libc_fn("__pread_chk");
        return c(fd, b, n, o, room);
    }
    return pread(fd, b, n, o);
}

EXPORT ssize_t __pread64_chk(int fd, void *b, size_t n, off64_t o, size_t room) {
    if (n > room) {
        ssize_t (*c)(int, void *, size_t, off64_t, size_t) =
            (ssize_t (*)(int, void *, size_t, off64_t, size_t))libc_fn("__pread64_chk");
        return c(fd, b, n, o, room);
    }
    return pread64(fd, b, n, o);
}

EXPORT ssize_t __read(int fd, void *b, size_t n) { return read(fd, b, n); }
EXPORT ssize_t __write(int fd, const void *b, size_t n) { return write(fd, b, n); }
EXPORT ssize_t __pread64(int fd, void *b, size_t n, off64_t o) { return pread64(fd, b, n, o); }
EXPORT ssize_t __pwrite64(int fd, const void *b, size_t n, off64_t o) { return pwrite64(fd, b, n, o); }
EXPORT int __close(int fd) { return close(fd); }
EXPORT off_t __lseek(int fd, off_t o, int w) { return lseek(fd, o, w); }
EXPORT int __dup2(int fd, int to) { return dup2(fd, to); }

EXPORT int __open(const char *path, int flags, ...) {
    MODE_ARG(flags)
    return open_(path, flags, mode);
}

EXPORT int __open64(const char *path, int flags, ...) {
    MODE_ARG(flags)
    return open64_(path, flags, mode);
}

EXPORT int __fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return fcntl_("fcntl", "sfs_engine_fcntl", fd, cmd, arg);
}
