/*
 * btio.c -- NAS BT-IO-like test.  A 3-D grid of N^3 cells, each holding 5
 * doubles (40 bytes), is block-decomposed over the ranks with
 * MPI_Dims_create(nprocs, 3).  Every time step the whole grid is appended to
 * one shared file at displacement step*N^3*40: each rank sets a file view
 * built with MPI_Type_create_subarray and writes its part collectively with
 * MPI_File_write_all (or independently with MPI_File_write, --independent).
 * Afterwards every step is read back the same way and verified.
 *
 * File layout: step-major, then z, y, x (C order), then the 5 components;
 * this is identical to the Fortran array u(5,N,N,N) of btio.f90, so files
 * written by one program can be read by the other (--mode read).
 *
 * Value of component c of cell (x,y,z) at step s:
 *     ((((s*N + z)*N + y)*N + x)*5 + c) + seed/8
 */
#include "mpiio_common.h"

static const char *usage_text =
    "usage: btio [options] FILE\n"
    "  FILE is passed unchanged to MPI_File_open (e.g. stripefs:/dir/file)\n"
    "  --grid N           grid of N^3 cells, 40 bytes each (default 64)\n"
    "  --steps S          time steps appended to the file (default 10)\n"
    "  --independent      MPI_File_write/read instead of write_all/read_all\n"
    "  --sync / --no-sync MPI_File_sync before the write timer stops (default on)\n"
    "  --mode MODE        write, read or both (default both)\n"
    "  --seed N           value offset seed/8 (default 1); must match the writer\n"
    "  --unlink           delete FILE at the end\n"
    "  --help             this text\n"
    "Rank 0 prints one JSON line.\n";

static void fill(double *u, long long step, long long n, const int *sub, const int *st,
                 long long seed)
{
    long long k = 0;
    for (long long z = st[0]; z < st[0] + sub[0]; z++)
        for (long long y = st[1]; y < st[1] + sub[1]; y++)
            for (long long x = st[2]; x < st[2] + sub[2]; x++) {
                long long idx = (((step * n + z) * n + y) * n + x) * 5;
                for (int c = 0; c < 5; c++)
                    u[k++] = (double)(idx + c) + (double)seed / 8.0;
            }
}

static long long verify(const double *u, long long step, long long n, const int *sub,
                        const int *st, long long seed, int rank)
{
    long long k = 0, bad = 0;
    for (long long z = st[0]; z < st[0] + sub[0]; z++)
        for (long long y = st[1]; y < st[1] + sub[1]; y++)
            for (long long x = st[2]; x < st[2] + sub[2]; x++) {
                long long idx = (((step * n + z) * n + y) * n + x) * 5;
                for (int c = 0; c < 5; c++, k++) {
                    double e = (double)(idx + c) + (double)seed / 8.0;
                    if (u[k] != e) {
                        if (bad == 0)
                            fprintf(stderr,
                                    "btio: rank %d: VERIFY FAILED: step %lld cell "
                                    "(x=%lld,y=%lld,z=%lld) component %d: expected %.3f "
                                    "got %.17g\n",
                                    rank, step, x, y, z, c, e, u[k]);
                        bad++;
                    }
                }
            }
    if (bad)
        fprintf(stderr, "btio: rank %d: step %lld: %lld of %lld values wrong\n", rank, step,
                bad, k);
    return bad;
}

int main(int argc, char **argv)
{
    int rank, nprocs;
    long long n = 64, steps = 10, seed = 1;
    int independent = 0, do_sync = 1, do_write = 1, do_read = 1, unlink_end = 0;
    const char *path = NULL, *mode = "both";

    g_prog = "btio";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (rank == 0)
                fputs(usage_text, stdout);
            MPI_Finalize();
            return 0;
        } else if (!strcmp(a, "--independent")) {
            independent = 1;
        } else if (!strcmp(a, "--collective")) {
            independent = 0;
        } else if (!strcmp(a, "--sync")) {
            do_sync = 1;
        } else if (!strcmp(a, "--no-sync")) {
            do_sync = 0;
        } else if (!strcmp(a, "--unlink")) {
            unlink_end = 1;
        } else if (!strcmp(a, "--grid") || !strcmp(a, "--steps") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--mode")) {
            if (!v)
                usage_error(rank, usage_text, "option %s needs a value", a);
            i++;
            int bad = 0;
            if (!strcmp(a, "--grid"))
                bad = parse_int(v, 1, 100000, &n);
            else if (!strcmp(a, "--steps"))
                bad = parse_int(v, 1, 100000, &steps);
            else if (!strcmp(a, "--seed"))
                bad = parse_int(v, 0, 1000000, &seed);
            else {
                mode = v;
                if (!strcmp(v, "write")) { do_write = 1; do_read = 0; }
                else if (!strcmp(v, "read")) { do_write = 0; do_read = 1; }
                else if (!strcmp(v, "both")) { do_write = 1; do_read = 1; }
                else bad = 1;
            }
            if (bad)
                usage_error(rank, usage_text, "bad value for option %s", a);
        } else if (a[0] == '-' && a[1] == '-') {
            usage_error(rank, usage_text, "unknown option %s", a);
        } else if (!path) {
            path = a;
        } else {
            usage_error(rank, usage_text, "unexpected argument %s", a);
        }
    }
    if (!path)
        usage_error(rank, usage_text, "missing FILE argument%s", "");

    /* decomposition: dims[0] splits z (slowest), dims[1] y, dims[2] x */
    int dims[3] = {0, 0, 0};
    CHECK(MPI_Dims_create(nprocs, 3, dims));
    for (int d = 0; d < 3; d++)
        if (dims[d] > n)
            usage_error(rank, usage_text,
                        "--grid must be at least the largest process-grid extent%s", "");
    int coords[3] = {rank / (dims[1] * dims[2]), (rank / dims[2]) % dims[1], rank % dims[2]};
    int gsizes[3], subsizes[3], starts[3];
    long long lcells = 1;
    for (int d = 0; d < 3; d++) {
        int base = (int)(n / dims[d]), rem = (int)(n % dims[d]);
        gsizes[d] = (int)n;
        subsizes[d] = base + (coords[d] < rem ? 1 : 0);
        starts[d] = coords[d] * base + (coords[d] < rem ? coords[d] : rem);
        lcells *= subsizes[d];
    }
    if (lcells * 5 > INT32_MAX)
        usage_error(rank, usage_text, "local part too large for one MPI call%s", "");

    MPI_Datatype cell, filetype;
    CHECK(MPI_Type_contiguous(5, MPI_DOUBLE, &cell));
    CHECK(MPI_Type_commit(&cell));
    CHECK(MPI_Type_create_subarray(3, gsizes, subsizes, starts, MPI_ORDER_C, cell, &filetype));
    CHECK(MPI_Type_commit(&filetype));

    errors_return_on_files();
    double *u = malloc((size_t)lcells * 5 * sizeof(double));
    if (!u)
        die("cannot allocate the %s array", "local");

    const MPI_Offset step_bytes = (MPI_Offset)n * n * n * 40;
    const double total_bytes = (double)step_bytes * (double)steps;
    double wtime = 0, rtime = 0;
    long long errors = 0;
    char datarep[] = "native";

    if (do_write) {
        MPI_File fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY);
        for (long long s = 0; s < steps; s++) {
            fill(u, s, n, subsizes, starts, seed); /* not timed: the "solver" */
            MPI_Status st;
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = MPI_Wtime();
            CHECK(MPI_File_set_view(fh, s * step_bytes, cell, filetype, datarep, MPI_INFO_NULL));
            if (independent)
                CHECK(MPI_File_write(fh, u, (int)lcells, cell, &st));
            else
                CHECK(MPI_File_write_all(fh, u, (int)lcells, cell, &st));
            check_count(&st, cell, lcells, "write");
            if (do_sync && s == steps - 1)
                CHECK(MPI_File_sync(fh));
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            wtime += MPI_Wtime() - t0;
        }
        CHECK(MPI_File_close(&fh));
    }
    if (do_read) {
        MPI_File fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_RDONLY);
        MPI_Offset fsize = 0;
        CHECK(MPI_File_get_size(fh, &fsize));
        if (fsize < steps * step_bytes) {
            if (rank == 0)
                fprintf(stderr, "btio: VERIFY FAILED: file has %lld bytes, %d steps of %lld "
                        "need %lld\n", (long long)fsize, (int)steps, (long long)step_bytes,
                        (long long)(steps * step_bytes));
            errors++;
        }
        for (long long s = 0; s < steps && errors == 0; s++) {
            memset(u, 0xff, (size_t)lcells * 5 * sizeof(double));
            MPI_Status st;
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = MPI_Wtime();
            CHECK(MPI_File_set_view(fh, s * step_bytes, cell, filetype, datarep, MPI_INFO_NULL));
            if (independent)
                CHECK(MPI_File_read(fh, u, (int)lcells, cell, &st));
            else
                CHECK(MPI_File_read_all(fh, u, (int)lcells, cell, &st));
            check_count(&st, cell, lcells, "read (short read / EOF?)");
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            rtime += MPI_Wtime() - t0;
            errors += verify(u, s, n, subsizes, starts, seed, rank);
        }
        CHECK(MPI_File_close(&fh));
    }

    long long total_errors = global_errors(errors);
    if (!total_errors && unlink_end) {
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 0)
            CHECK(MPI_File_delete((char *)path, MPI_INFO_NULL));
    }
    if (rank == 0) {
        if (total_errors) {
            fprintf(stderr, "btio: FAILED: %lld verification errors\n", total_errors);
        } else {
            printf("{\"program\":\"btio\",\"path\":");
            json_str(stdout, path);
            printf(",\"nprocs\":%d,\"grid\":%lld,\"steps\":%lld,\"dims\":[%d,%d,%d],"
                   "\"io\":\"%s\",\"sync\":%s,\"mode\":\"%s\",\"bytes\":%.0f",
                   nprocs, n, steps, dims[0], dims[1], dims[2],
                   independent ? "independent" : "collective", do_sync ? "true" : "false",
                   mode, total_bytes);
            if (do_write)
                printf(",\"write_s\":%.6f,\"write_mib_s\":%.2f", wtime, mib_s(total_bytes, wtime));
            if (do_read)
                printf(",\"read_s\":%.6f,\"read_mib_s\":%.2f,\"verified\":true", rtime,
                       mib_s(total_bytes, rtime));
            printf("}\n");
            fflush(stdout);
        }
    }
    CHECK(MPI_Type_free(&filetype));
    CHECK(MPI_Type_free(&cell));
    free(u);
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
