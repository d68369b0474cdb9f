/*
 * perf.c -- bandwidth test in the spirit of ROMIO's test/perf.c.  Each rank
 * writes an array of --size bytes at offset rank*size of one shared file
 * (MPI_File_write_at), then reads it back (MPI_File_read_at); this is done
 * first without and then with MPI_File_sync after the write.  Every read is
 * verified.  Only standard MPI-IO calls are used.
 */
#include "mpiio_common.h"

static const char *usage_text =
    "usage: perf [options] FILE\n"
    "  FILE is passed unchanged to MPI_File_open (e.g. stripefs:/dir/file)\n"
    "  --size BYTES       bytes per rank (default 4MiB)\n"
    "  --iterations N     repeat the four phases N times; best and mean are\n"
    "                     reported (default 1)\n"
    "  --seed N           data pattern seed (default 1; the synced phase uses N+1)\n"
    "  --check-seed N     seed expected when verifying (default: --seed); a value\n"
    "                     different from --seed is a fault injection and must fail\n"
    "  --unlink           delete FILE at the end\n"
    "  --help             this text\n"
    "Rank 0 prints one JSON line.\n";

/* One write phase followed by one read phase; returns the number of bad bytes. */
static long long run_pair(const char *path, unsigned char *buf, long long size, int rank,
                          int nprocs, int do_sync, uint64_t seed, uint64_t check_seed,
                          double *wt, double *rt)
{
    MPI_Offset off = (MPI_Offset)rank * (MPI_Offset)size;
    MPI_Status st;
    (void)nprocs;

    pat_fill(buf, off, size, seed, rank);
    MPI_File fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR);
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = MPI_Wtime();
    CHECK(MPI_File_write_at(fh, off, buf, (int)size, MPI_BYTE, &st));
    check_count(&st, MPI_BYTE, size, "write_at");
    if (do_sync)
        CHECK(MPI_File_sync(fh));
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    *wt = MPI_Wtime() - t0;
    CHECK(MPI_File_close(&fh));

    memset(buf, 0, (size_t)size);
    fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_RDWR);
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t0 = MPI_Wtime();
    CHECK(MPI_File_read_at(fh, off, buf, (int)size, MPI_BYTE, &st));
    check_count(&st, MPI_BYTE, size, "read_at (short read / EOF?)");
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    *rt = MPI_Wtime() - t0;
    CHECK(MPI_File_close(&fh));

    return pat_check(buf, off, size, check_seed, rank,
                     do_sync ? "read after write+sync" : "read after write without sync");
}

int main(int argc, char **argv)
{
    int rank, nprocs;
    long long size = 4LL << 20, iterations = 1, seed = 1, check_seed = -1;
    int unlink_end = 0;
    const char *path = NULL;

    g_prog = "perf";
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
        } else if (!strcmp(a, "--unlink")) {
            unlink_end = 1;
        } else if (!strcmp(a, "--size") || !strcmp(a, "--iterations") ||
                   !strcmp(a, "--seed") || !strcmp(a, "--check-seed")) {
            if (!v)
                usage_error(rank, usage_text, "option %s needs a value", a);
            i++;
            int bad;
            if (!strcmp(a, "--size"))
                bad = parse_size(v, &size) || size < 1 || size > INT32_MAX;
            else if (!strcmp(a, "--iterations"))
                bad = parse_int(v, 1, 1000000, &iterations);
            else if (!strcmp(a, "--seed"))
                bad = parse_int(v, 0, INT32_MAX - 1, &seed);
            else
                bad = parse_int(v, 0, INT32_MAX - 1, &check_seed);
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
    if (check_seed < 0)
        check_seed = seed;

    errors_return_on_files();
    unsigned char *buf = malloc((size_t)size);
    if (!buf)
        die("cannot allocate the %s buffer", "data");

    /* [0] = without sync, [1] = with sync */
    double wsum[2] = {0, 0}, rsum[2] = {0, 0}, wbest[2] = {0, 0}, rbest[2] = {0, 0};
    long long errors = 0;
    double bytes = (double)size * nprocs;
    for (long long it = 0; it < iterations; it++) {
        for (int s = 0; s < 2; s++) {
            double wt, rt;
            errors += run_pair(path, buf, size, rank, nprocs, s, (uint64_t)(seed + s),
                               (uint64_t)(check_seed + s), &wt, &rt);
            wsum[s] += wt;
            rsum[s] += rt;
            if (mib_s(bytes, wt) > wbest[s]) wbest[s] = mib_s(bytes, wt);
            if (mib_s(bytes, rt) > rbest[s]) rbest[s] = mib_s(bytes, rt);
        }
    }

    long long total_errors = global_errors(errors);
    if (!total_errors && unlink_end) {
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 0)
            CHECK(MPI_File_delete((char *)path, MPI_INFO_NULL));
    }
    if (rank == 0) {
        if (total_errors) {
            fprintf(stderr, "perf: FAILED: %lld bad bytes in total\n", total_errors);
        } else {
            double tot = bytes * (double)iterations;
            printf("{\"program\":\"perf\",\"path\":");
            json_str(stdout, path);
            printf(",\"nprocs\":%d,\"size\":%lld,\"iterations\":%lld,\"bytes_per_phase\":%.0f,"
                   "\"write_nosync_mib_s\":%.2f,\"read_nosync_mib_s\":%.2f,"
                   "\"write_sync_mib_s\":%.2f,\"read_sync_mib_s\":%.2f,"
                   "\"write_nosync_mib_s_best\":%.2f,\"read_nosync_mib_s_best\":%.2f,"
                   "\"write_sync_mib_s_best\":%.2f,\"read_sync_mib_s_best\":%.2f,"
                   "\"verified\":true}\n",
                   nprocs, size, iterations, bytes,
                   mib_s(tot, wsum[0]), mib_s(tot, rsum[0]), mib_s(tot, wsum[1]),
                   mib_s(tot, rsum[1]), wbest[0], rbest[0], wbest[1], rbest[1]);
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
