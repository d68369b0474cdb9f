/*
 * A fixed sequence of file calls on DIR, printing what each returned, so that a run
 * with libstripefs_preload.so and one without can be compared line by line (they must
 * agree), and the files they leave compared byte by byte.
 *
 *   exercise DIR
 *
 * Covers: open/openat/creat, O_EXCL, O_TRUNC, O_APPEND, read/write/pread/pwrite/readv/
 * writev/preadv/pwritev, lseek (SET, CUR, END, DATA, HOLE), ftruncate, fstat and stat
 * sizes, dup/dup2/fcntl(F_DUPFD) sharing the offset, fork with the child writing to the
 * inherited descriptor, fork + exec of a shell writing to it, mmap after writes, fdopen,
 * fsync, close_range, reading at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];

static const char *at(const char *name) {
    static char p[8][8192];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

#define SAY(...) (printf(__VA_ARGS__), printf("\n"), fflush(stdout))
#define R(expr) SAY("%-40s -> %lld%s%s", #expr, (long long)(expr), errno ? " " : "", errno ? strerror(errno) : ""), errno = 0

static long long size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (long long)st.st_size : -1;
}

static long long path_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 64;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    char buf[65536], got[65536];
    for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (char)('a' + (i * 7 + i / 251) % 26);
    errno = 0;

    int fd = open(at("a"), O_CREAT | O_TRUNC | O_RDWR, 0644);
    SAY("open a: %s", fd >= 0 ? "ok" : strerror(errno));
    R(write(fd, buf, 10000));
    R(size_of(fd));
    R(lseek(fd, 0, SEEK_CUR));
    R(pwrite(fd, buf + 100, 500, 20000));
    R(size_of(fd));
    R(lseek(fd, 0, SEEK_END));
    R(lseek(fd, -5, SEEK_CUR));
    R(read(fd, got, 100));
    SAY("tail %.5s", got);
    R(read(fd, got, 100));
    R(pread(fd, got, 50, 9990));
    SAY("pread %.10s|%d|%d", got, got[10], got[19]);
    struct iovec v[3] = {{buf, 3}, {buf + 10, 4}, {buf + 20, 5}};
    R(lseek(fd, 30000, SEEK_SET));
    R(writev(fd, v, 3));
    R(pwritev(fd, v, 3, 40000));
    char g1[3], g2[4], g3[5];
    struct iovec w[3] = {{g1, 3}, {g2, 4}, {g3, 5}};
    R(preadv(fd, w, 3, 40000));
    SAY("preadv %.3s %.4s %.5s", g1, g2, g3);
    R(lseek(fd, 30000, SEEK_SET));
    R(readv(fd, w, 3));
    SAY("readv %.3s %.4s %.5s", g1, g2, g3);
    R(lseek(fd, 12000, SEEK_DATA) >= 12000);
    R(lseek(fd, 0, SEEK_HOLE) <= 20000);

    int d = dup(fd);
    R(lseek(fd, 100, SEEK_SET));
    R(lseek(d, 0, SEEK_CUR));
    R(write(d, "DUP", 3));
    R(lseek(fd, 0, SEEK_CUR));
    int e = fcntl(fd, F_DUPFD, 50);
    R(e >= 50);
    R(write(e, "FCNTL", 5));
    R(lseek(fd, 0, SEEK_CUR));
    R(dup2(fd, 40));
    R(write(40, "DUP2", 4));
    R(close(40));
    R(close(e));
    R(close(d));
    R(lseek(fd, 0, SEEK_CUR));

    pid_t pid = fork();
    if (pid == 0) {
        ssize_t n = write(fd, "CHILD", 5);
        _exit(n == 5 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    SAY("child status %d", WEXITSTATUS(status));
    R(lseek(fd, 0, SEEK_CUR));
    R(write(fd, "PARENT", 6));

    /* A program without the library's state writes to the inherited descriptor 3. */
    R(dup2(fd, 3));
    pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "printf EXEC >&3", (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    SAY("exec status %d", WEXITSTATUS(status));
    R(lseek(3, 0, SEEK_CUR));
    R(close(3));
    R(lseek(fd, 0, SEEK_CUR));
    R(pread(fd, got, 30, 100));
    SAY("middle %.30s", got);

    R(ftruncate(fd, 25000));
    R(size_of(fd));
    R(pread(fd, got, 100, 24990));
    R(ftruncate(fd, 26000));
    R(pread(fd, got, 20, 24995));
    SAY("extended %.5s|%d%d%d", got, got[5], got[10], got[19]);
    R(fsync(fd));

    /* mmap after writes: the mapping shows them. */
    R(pwrite(fd, "MAPPED", 6, 1000));
    char *m = mmap(NULL, 26000, PROT_READ, MAP_SHARED, fd, 0);
    SAY("mmap %s", m == MAP_FAILED ? strerror(errno) : "ok");
    if (m != MAP_FAILED) {
        SAY("mapped %.6s %.5s", m + 1000, m + 24995);
        munmap(m, 26000);
    }
    R(write(fd, "AFTERMAP", 8));
    R(close(fd));
    R(path_size(at("a")));

    /* O_EXCL, O_TRUNC, creat, openat. */
    R(open(at("a"), O_CREAT | O_EXCL | O_WRONLY, 0644));
    errno = 0;
    int c = creat(at("b"), 0600);
    R(write(c, buf, 4096));
    R(close(c));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    int o2 = openat(dfd, "b", O_RDWR | O_TRUNC);
    R(size_of(o2));
    R(write(o2, buf, 777));
    R(close(o2));
    R(close(dfd));
    R(path_size(at("b")));

    /* O_APPEND goes to the mount; interleaved with a served descriptor. */
    int ap = open(at("b"), O_WRONLY | O_APPEND);
    int rw = open(at("b"), O_RDWR);
    R(write(ap, "APPEND1", 7));
    R(pwrite(rw, "RW", 2, 0));
    R(close(rw));
    R(write(ap, "APPEND2", 7));
    R(close(ap));
    R(path_size(at("b")));

    /* fdopen: stdio writes the descriptor itself. */
    int fo = open(at("c"), O_CREAT | O_TRUNC | O_RDWR, 0644);
    R(write(fo, "RAW-", 4));
    FILE *f = fdopen(fo, "r+");
    fseek(f, 0, SEEK_END);
    fprintf(f, "STDIO-%d", 42);
    R(fclose(f));
    R(path_size(at("c")));

    /* close_range closes served descriptors too; the numbers are reused. */
    int x = open(at("c"), O_RDONLY);
    int y = dup(x);
    /* The lowest free number, as without the library: its own sockets are out of the way
       (at the top of the table), and the range below closes nothing of theirs. */
    SAY("dup(x) - x %d", y - x);
    R(close_range(x, y, 0));
    int p[2];
    R(pipe(p));
    R(write(p[1], "pipe", 4));
    R(read(p[0], got, 4));
    close(p[0]);
    close(p[1]);

    /* The whole files, as the kernel shows them. */
    const char *names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        int r = open(at(names[i]), O_RDONLY);
        unsigned long sum = 0;
        ssize_t n;
        long long total = 0;
        while ((n = read(r, got, sizeof got)) > 0) {
            for (ssize_t k = 0; k < n; k++) sum = sum * 31 + (unsigned char)got[k];
            total += n;
        }
        close(r);
        SAY("file %s: %lld bytes, sum %lu", names[i], total, sum);
    }
    return 0;
}
