/*
 * mpi_io.c: the MPI-IO layer of stripefs from C under mpirun. Each rank owns a block of
 * a global 2-D array of doubles (ranks on a grid of P x Q), sets a subarray view, and:
 *  1. writes its block collectively (two-phase), reads it back collectively, checks it;
 *  2. rank r reads the whole array independently and checks every cell;
 *  3. writes a second copy with iwrite_at, computing while it is in flight, waits;
 *     reads it back with iread_at, polling stripefs_mpi_test, and checks it;
 *  4. resizes the file collectively and checks the size on every rank.
 *
 *   mpicc -Iinclude examples/c/mpi_io.c -Ltarget/release -lstripefs \
 *         -Wl,-rpath,$PWD/target/release -o mpi_io
 *   mpirun -n 4 ./mpi_io DIR/cluster.toml
 * Rank 0 prints "mpi_io.c: N ranks, ... verified" and every rank exits 0 when all holds.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stripefs.h"
#include "stripefs_mpi.h"

#define N 96 /* cells per side of the global array */

static int rank_ = 0;

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != 0) {                                                                \
            fprintf(stderr, "mpi_io.c rank %d line %d: %s: %d (%s)\n", rank_, __LINE__,   \
                    #call, rc_, stripefs_errmsg());                                    \
            MPI_Abort(MPI_COMM_WORLD, 1);                                              \
        }                                                                              \
    } while (0)

#define EXPECT(cond)                                                                   \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "mpi_io.c rank %d line %d: %s does not hold\n", rank_,       \
                    __LINE__, #cond);                                                  \
            MPI_Abort(MPI_COMM_WORLD, 1);                                              \
        }                                                                              \
    } while (0)

static double cell(int copy, int i, int j) { return copy * 1e6 + i * 1000.0 + j + 0.25; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm comm = MPI_COMM_WORLD;
    int size;
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size);
    if (argc != 2) {
        if (rank_ == 0) fprintf(stderr, "usage: mpirun -n R %s CLUSTER_FILE\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    /* A P x Q grid of ranks, P the largest divisor of size up to its square root. */
    int p = 1;
    for (int d = 1; d * d <= size; d++)
        if (size % d == 0) p = d;
    int q = size / p;
    EXPECT(N % p == 0 && N % q == 0);
    int rows = N / p, cols = N / q, r0 = (rank_ / q) * rows, c0 = (rank_ % q) * cols;

    stripefs_t *fs = NULL;
    CHECK(stripefs_connect(argv[1], &fs));
    stripefs_comm_t c;
    stripefs_comm_from_mpi(&comm, &c);

    const char *path = "/c-abi-mpi";
    if (rank_ == 0) stripefs_unlink(fs, path);
    MPI_Barrier(comm);
    stripefs_mfile_t *f = NULL;
    CHECK(stripefs_mpi_open(fs, &c, path, STRIPEFS_MODE_RDWR | STRIPEFS_MODE_CREATE,
                            "striping_unit=65536,cb_nodes=2", &f));

    char view[256];
    snprintf(view, sizeof view, "subarray([%d,%d],[%d,%d],[%d,%d],C,double)", N, N, rows, cols,
             r0, c0);
    size_t mine = (size_t)rows * cols * sizeof(double);
    double *blk = malloc(mine), *got = malloc(mine);
    double *all = malloc((size_t)N * N * sizeof(double));
    EXPECT(blk && got && all);

    /* 1. Collective write and read through the view. */
    for (int copy = 0; copy < 2; copy++) {
        CHECK(stripefs_mpi_set_view(f, (uint64_t)copy * N * N * sizeof(double), "double", view));
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) blk[i * cols + j] = cell(copy, r0 + i, c0 + j);
        if (copy == 0) {
            CHECK(stripefs_mpi_write_at_all(f, 0, blk, mine));
        } else {
            /* 3. Asynchronous: compute while the write is in flight. */
            stripefs_request_t *req = NULL;
            CHECK(stripefs_mpi_iwrite_at(f, 0, blk, mine, &req));
            volatile double x = 0;
            for (int k = 0; k < 1000000; k++) x += k * 0.5;
            CHECK(stripefs_mpi_wait(req));
        }
    }
    CHECK(stripefs_mpi_sync(f));
    MPI_Barrier(comm);

    CHECK(stripefs_mpi_set_view(f, 0, "double", view));
    memset(got, 0, mine);
    CHECK(stripefs_mpi_read_at_all(f, 0, got, mine));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) EXPECT(got[i * cols + j] == cell(0, r0 + i, c0 + j));

    /* 2. The whole array, independently, through a plain byte view. */
    CHECK(stripefs_mpi_set_view(f, 0, "byte", "byte"));
    CHECK(stripefs_mpi_read_at(f, 0, all, (size_t)N * N * sizeof(double)));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) EXPECT(all[i * N + j] == cell(0, i, j));

    /* 3. The asynchronous copy, read back asynchronously. */
    CHECK(stripefs_mpi_set_view(f, (uint64_t)N * N * sizeof(double), "double", view));
    stripefs_request_t *req = NULL;
    memset(got, 0, mine);
    CHECK(stripefs_mpi_iread_at(f, 0, got, mine, &req));
    int done = 0, polls = 0;
    while (!done) {
        CHECK(stripefs_mpi_test(req, &done));
        polls++;
    }
    CHECK(stripefs_mpi_wait(req));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) EXPECT(got[i * cols + j] == cell(1, r0 + i, c0 + j));

    /* 4. Collective resize (back to the first copy), seen by every rank. */
    uint64_t want = (uint64_t)N * N * sizeof(double), have = 0;
    CHECK(stripefs_mpi_set_size(f, want));
    CHECK(stripefs_mpi_get_size(f, &have));
    EXPECT(have == want);

    /* A bad view is an error with a message, not a crash. */
    EXPECT(stripefs_mpi_set_view(f, 0, "double", "subarray([4],[8],[0],C,double)") < 0);
    EXPECT(strstr(stripefs_errmsg(), "subarray") != NULL);

    CHECK(stripefs_mpi_close(f));
    if (rank_ == 0) CHECK(stripefs_unlink(fs, path));
    stripefs_disconnect(fs);
    if (rank_ == 0)
        printf("mpi_io.c: %d ranks (%d x %d), %dx%d doubles: collective, independent and "
               "asynchronous I/O verified\n",
               size, p, q, N, N);
    free(blk);
    free(got);
    free(all);
    MPI_Finalize();
    return 0;
}
