/*
 * files.c: the C interface without MPI. Connects with a cluster file, makes a
 * directory, writes a file in pieces, reads it back and checks every byte, stats it,
 * checks that errors come back as negative errnos with a message, and cleans up.
 *
 *   gcc -Iinclude examples/c/files.c -Ltarget/release -lstripefs \
 *       -Wl,-rpath,$PWD/target/release -o files
 *   ./files DIR/cluster.toml
 * Prints "files.c: ok" and exits 0 when every check holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "stripefs.h"

#define CHECK(call)                                                                    \
    do {                                                                               \
        long long rc_ = (long long)(call);                                             \
        if (rc_ < 0) {                                                                 \
            fprintf(stderr, "files.c:%d: %s: %lld (%s)\n", __LINE__, #call, rc_,       \
                    stripefs_errmsg());                                                \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define EXPECT(cond)                                                                   \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "files.c:%d: %s does not hold\n", __LINE__, #cond);        \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CLUSTER_FILE\n", argv[0]);
        return 2;
    }
    EXPECT(stripefs_abi_version() == STRIPEFS_ABI_VERSION);
    stripefs_t *fs = NULL;
    CHECK(stripefs_connect(argv[1], &fs));
    stripefs_unlink(fs, "/c-abi/data");
    stripefs_rmdir(fs, "/c-abi");
    CHECK(stripefs_mkdir(fs, "/c-abi", 0755));

    size_t len = 3 * 1024 * 1024 + 12345;
    unsigned char *buf = malloc(len), *back = malloc(len);
    EXPECT(buf && back);
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(i * 131 + (i >> 12));

    stripefs_file_t *f = NULL;
    CHECK(stripefs_open(fs, "/c-abi/data", O_WRONLY | O_CREAT | O_EXCL, 0640, &f));
    /* In uneven pieces, out of order. */
    size_t cut = 1000003;
    EXPECT(stripefs_pwrite(f, buf + cut, len - cut, cut) == (long long)(len - cut));
    EXPECT(stripefs_pwrite(f, buf, cut, 0) == (long long)cut);
    CHECK(stripefs_fsync(f));
    CHECK(stripefs_close(f));

    stripefs_stat_t st;
    CHECK(stripefs_stat(fs, "/c-abi/data", &st));
    EXPECT(st.size == len);
    EXPECT(S_ISREG(st.mode) && (st.mode & 0777) == 0640);
    EXPECT(st.stripe_size > 0 && st.stripe_count > 0);
    CHECK(stripefs_stat(fs, "/c-abi", &st));
    EXPECT(S_ISDIR(st.mode));

    CHECK(stripefs_open(fs, "/c-abi/data", O_RDONLY, 0, &f));
    memset(back, 0, len);
    EXPECT(stripefs_pread(f, back, len, 0) == (long long)len);
    EXPECT(memcmp(buf, back, len) == 0);
    /* Past the end: a short read. */
    EXPECT(stripefs_pread(f, back, 100, len - 10) == 10);
    CHECK(stripefs_close(f));

    /* Errors: negative errnos with a message. */
    EXPECT(stripefs_stat(fs, "/c-abi/absent", &st) == -ENOENT);
    EXPECT(strlen(stripefs_errmsg()) > 0);
    EXPECT(stripefs_open(fs, "/c-abi/data", O_WRONLY | O_CREAT | O_EXCL, 0644, &f) == -EEXIST);
    EXPECT(f == NULL);
    EXPECT(stripefs_rmdir(fs, "/c-abi") == -ENOTEMPTY);
    EXPECT(stripefs_open(NULL, "/x", O_RDONLY, 0, &f) == -EINVAL);

    CHECK(stripefs_rename(fs, "/c-abi/data", "/c-abi/renamed"));
    CHECK(stripefs_unlink(fs, "/c-abi/renamed"));
    CHECK(stripefs_rmdir(fs, "/c-abi"));
    stripefs_disconnect(fs);
    free(buf);
    free(back);
    printf("files.c: ok\n");
    return 0;
}
