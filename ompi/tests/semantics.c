/*
 * What an MPI-IO program may count on, checked through the standard interface only:
 * independent, collective and nonblocking reads and writes of one shared file with
 * verification, hints in effect (MPI_File_get_info), error classes (a missing file,
 * MPI_MODE_EXCL on an existing one), shared file pointers (write_shared, write_ordered),
 * set_size, delete-on-close, MPI_File_delete, and atomic mode refused with an error.
 *
 *   mpirun -n 4 ./semantics PATH      (PATH: stripefs:/dir/file, a mount path, ...)
 *
 * Prints "ok" lines per check; exits 1 (MPI_Abort) at the first failure. With
 * EXPECT_STRIPEFS=1 in the environment, also requires MPI_File_get_info to report
 * stripefs_client=native (the stripefs components served the file).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void fail(const char *what, int rc) {
    char s[MPI_MAX_ERROR_STRING];
    int l = 0;
    if (rc != MPI_SUCCESS)
        MPI_Error_string(rc, s, &l);
    else
        strcpy(s, "unexpected outcome");
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, s);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CHECK(x)                                                                          \
    do {                                                                                  \
        int rc_ = (x);                                                                    \
        if (rc_ != MPI_SUCCESS) fail(#x, rc_);                                            \
    } while (0)

static int error_class(int rc) {
    int c = rc;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &c);
    return c;
}

static void ok(const char *what) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("ok %s\n", what);
}

static void pattern(char *b, int n, int seed) {
    for (int i = 0; i < n; i++) b[i] = (char)(i * 7 + seed * 13 + (i >> 10));
}

static void same(const char *a, const char *b, int n, const char *what) {
    if (memcmp(a, b, (size_t)n) != 0) {
        fprintf(stderr, "rank %d: %s: data differ\n", rank, what);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static void info_value(MPI_File f, const char *key, char *out) {
    MPI_Info used;
    int flag = 0;
    out[0] = '\0';
    CHECK(MPI_File_get_info(f, &used));
    MPI_Info_get(used, key, MPI_MAX_INFO_VAL, out, &flag);
    if (!flag) out[0] = '\0';
    MPI_Info_free(&used);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2) {
        if (rank == 0) fprintf(stderr, "usage: %s PATH\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 64);
    }
    const char *path = argv[1];
    char other[4096], v[MPI_MAX_INFO_VAL + 1];
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    MPI_File f;
    MPI_Status st;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "striping_unit", "65536");
    MPI_Info_set(info, "no_such_hint_anywhere", "1");
    if (rank == 0) MPI_File_delete(path, MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &f));
    MPI_Info_free(&info);

    info_value(f, "stripefs_client", v);
    const char *expect = getenv("EXPECT_STRIPEFS");
    if (expect != NULL && strcmp(expect, "1") == 0) {
        if (strcmp(v, "native") != 0) fail("served by the stripefs components", MPI_SUCCESS);
        info_value(f, "striping_unit", v);
        if (strcmp(v, "65536") != 0) fail("striping_unit hint applied at create", MPI_SUCCESS);
        ok("stripefs components selected, striping_unit in effect");
    }

    const int n = 1 << 20;
    char *b = malloc(n), *r = malloc(n);
    pattern(b, n, rank);
    CHECK(MPI_File_write_at(f, (MPI_Offset)rank * n, b, n, MPI_BYTE, &st));
    CHECK(MPI_File_write_at_all(f, (MPI_Offset)(size + rank) * n, b, n, MPI_BYTE, &st));
    CHECK(MPI_File_sync(f));
    memset(r, 0, n);
    CHECK(MPI_File_read_at_all(f, (MPI_Offset)((rank + 1) % size) * n, r, n, MPI_BYTE, &st));
    char *want = malloc(n);
    pattern(want, n, (rank + 1) % size);
    same(r, want, n, "collective read of another rank's independent write");
    memset(r, 0, n);
    CHECK(MPI_File_read_at(f, (MPI_Offset)(size + rank) * n, r, n, MPI_BYTE, &st));
    same(r, b, n, "independent read of a collective write");
    ok("independent and collective writes and reads of one shared file");

    /* A strided view: rank r owns every size-th block of 4 KiB after the first 2*size MiB. */
    MPI_Datatype blocks;
    CHECK(MPI_Type_vector(64, 4096, 4096 * size, MPI_BYTE, &blocks));
    CHECK(MPI_Type_commit(&blocks));
    MPI_Offset disp = (MPI_Offset)2 * size * n + (MPI_Offset)rank * 4096;
    CHECK(MPI_File_set_view(f, disp, MPI_BYTE, blocks, "native", MPI_INFO_NULL));
    CHECK(MPI_File_write_all(f, b, 64 * 4096, MPI_BYTE, &st));
    CHECK(MPI_File_seek(f, 0, MPI_SEEK_SET));
    memset(r, 0, n);
    CHECK(MPI_File_read_all(f, r, 64 * 4096, MPI_BYTE, &st));
    same(r, b, 64 * 4096, "strided view");
    CHECK(MPI_File_set_view(f, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    MPI_Type_free(&blocks);
    ok("strided file view, collective");

    MPI_Request q[2];
    memset(r, 0, n);
    CHECK(MPI_File_iwrite_at(f, (MPI_Offset)rank * n, want, n, MPI_BYTE, &q[0]));
    CHECK(MPI_Wait(&q[0], &st));
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (got != n) fail("iwrite_at count", MPI_SUCCESS);
    CHECK(MPI_File_iread_at(f, (MPI_Offset)rank * n, r, n, MPI_BYTE, &q[1]));
    int done = 0;
    while (!done) CHECK(MPI_Test(&q[1], &done, &st));
    same(r, want, n, "iread_at after iwrite_at");
    ok("nonblocking iwrite_at / iread_at with MPI_Wait and MPI_Test");

    MPI_Offset sz = 0;
    CHECK(MPI_File_get_size(f, &sz));
    MPI_Barrier(MPI_COMM_WORLD); /* no rank resizes before every rank looked */
    if (sz < (MPI_Offset)2 * size * n) fail("get_size", MPI_SUCCESS);
    CHECK(MPI_File_set_size(f, (MPI_Offset)3 * n));
    CHECK(MPI_File_get_size(f, &sz));
    if (sz != (MPI_Offset)3 * n) fail("set_size then get_size", MPI_SUCCESS);
    ok("set_size and get_size");

    /* Shared file pointer: every rank appends a record; all records land, whole. */
    CHECK(MPI_File_seek_shared(f, 0, MPI_SEEK_END));
    MPI_Offset start = 3 * (MPI_Offset)n;
    char rec[100];
    memset(rec, 'a' + rank, sizeof rec);
    CHECK(MPI_File_write_shared(f, rec, (int)sizeof rec, MPI_BYTE, &st));
    CHECK(MPI_File_write_ordered(f, rec, (int)sizeof rec, MPI_BYTE, &st));
    CHECK(MPI_File_sync(f));
    if (rank == 0) {
        char *all = malloc(sizeof rec * 2 * (size_t)size);
        CHECK(MPI_File_read_at(f, start, all, (int)sizeof rec * 2 * size, MPI_BYTE, &st));
        int seen[64] = {0};
        for (int i = 0; i < 2 * size; i++) {
            char c = all[i * (int)sizeof rec];
            for (int j = 0; j < (int)sizeof rec; j++)
                if (all[i * (int)sizeof rec + j] != c) fail("a shared-pointer record torn", 0);
            if (c < 'a' || c >= 'a' + size) fail("a shared-pointer record missing", 0);
            seen[c - 'a']++;
        }
        for (int i = 0; i < size; i++)
            if (seen[i] != 2) fail("every rank's shared-pointer records", 0);
        /* write_ordered: the second half in rank order. */
        for (int i = 0; i < size; i++)
            if (all[(size + i) * (int)sizeof rec] != 'a' + i) fail("write_ordered order", 0);
        free(all);
    }
    ok("shared file pointers (write_shared, write_ordered)");

    /* Atomic mode: honoured or refused, never ignored. */
    CHECK(MPI_File_set_atomicity(f, 1));
    int refused = 0;
    int rc = MPI_File_write_at(f, 0, b, 4096, MPI_BYTE, &st);
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (rc != MPI_SUCCESS || got != 4096) refused = 1;
    rc = MPI_File_sync(f);
    if (rc != MPI_SUCCESS) refused = 1;
    CHECK(MPI_File_set_atomicity(f, 0));
    if (expect != NULL && strcmp(expect, "1") == 0 && !refused)
        fail("atomic mode neither honoured nor refused", 0);
    ok(refused ? "atomic mode refused with an error" : "atomic mode accepted");
    CHECK(MPI_File_close(&f));

    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR,
                       MPI_INFO_NULL, &f);
    if (error_class(rc) != MPI_ERR_FILE_EXISTS) fail("MPI_MODE_EXCL on an existing file", rc);
    snprintf(other, sizeof other, "%s.missing", path);
    rc = MPI_File_open(MPI_COMM_WORLD, other, MPI_MODE_RDONLY, MPI_INFO_NULL, &f);
    if (error_class(rc) != MPI_ERR_NO_SUCH_FILE) fail("opening a missing file", rc);
    ok("error classes: MPI_ERR_FILE_EXISTS, MPI_ERR_NO_SUCH_FILE");

    snprintf(other, sizeof other, "%s.doc", path);
    CHECK(MPI_File_open(MPI_COMM_WORLD, other,
                        MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_DELETE_ON_CLOSE,
                        MPI_INFO_NULL, &f));
    CHECK(MPI_File_write_at_all(f, (MPI_Offset)rank * 4096, b, 4096, MPI_BYTE, &st));
    CHECK(MPI_File_close(&f));
    rc = MPI_File_open(MPI_COMM_WORLD, other, MPI_MODE_RDONLY, MPI_INFO_NULL, &f);
    if (error_class(rc) != MPI_ERR_NO_SUCH_FILE) fail("a delete-on-close file is gone", rc);
    ok("MPI_MODE_DELETE_ON_CLOSE");

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK(MPI_File_delete(path, MPI_INFO_NULL));
        rc = MPI_File_delete(path, MPI_INFO_NULL);
        if (error_class(rc) != MPI_ERR_NO_SUCH_FILE) fail("deleting a deleted file", rc);
    }
    ok("MPI_File_delete");
    free(b);
    free(r);
    free(want);
    MPI_Finalize();
    return 0;
}
