/*
 * mpi-io-test.c -- shared-file bandwidth test in the spirit of PVFS2's
 * mpi-io-test.  Each rank writes a contiguous block of --block bytes to its
 * own non-overlapping region [rank*block, (rank+1)*block) of one shared file
 * in --xfer sized pieces (one MPI write per piece), then all ranks read the
 * block back and verify it.  Only standard MPI-IO calls are used.
 *
 * usage: mpi-io-test [options] FILE
 */
#include "mpiio_common.h"

static const char *usage_text =
    "usage: mpi-io-test [options] FILE\n"
    "  FILE is passed unchanged to MPI_File_open (e.g. stripefs:/dir/file)\n"
    "  --block BYTES      bytes per rank per iteration (default 8MiB)\n"
    "  --xfer BYTES       bytes per write/read call (default 1MiB)\n"
    "  --iterations N     write+read rounds (default 1)\n"
    "  --collective       use MPI_File_write_at_all/read_at_all\n"
    "  --sync / --no-sync MPI_File_sync before the write timer stops (default on)\n"
    "  --mode MODE        write, read or both (default both)\n"
    "  --seed N           data pattern seed (default 1); reading with another\n"
    "                     seed than the writer used must fail verification\n"
    "  --unlink           delete FILE at the end (rank 0, MPI_File_delete)\n"
    "  --help             this text\n"
    "Sizes accept k/m/g suffixes (KiB/MiB/GiB).  Rank 0 prints one JSON line.\n";

int main(int argc, char **argv)
{
    int rank, nprocs;
    long long block = 8LL << 20, xfer = 1LL << 20, iterations = 1, seed = 1;
    int collective = 0, do_sync = 1, do_write = 1, do_read = 1, unlink_end = 0;
    const char *path = NULL, *mode = "both";

    g_prog = "mpi-io-test";
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
        } else if (!strcmp(a, "--collective")) {
            collective = 1;
        } else if (!strcmp(a, "--sync")) {
            do_sync = 1;
        } else if (!strcmp(a, "--no-sync")) {
            do_sync = 0;
        } else if (!strcmp(a, "--unlink")) {
            unlink_end = 1;
        } else if (!strcmp(a, "--block") || !strcmp(a, "--xfer") ||
                   !strcmp(a, "--iterations") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--mode")) {
            if (!v)
                usage_error(rank, usage_text, "option %s needs a value", a);
            i++;
            int bad = 0;
            if (!strcmp(a, "--block"))
                bad = parse_size(v, &block) || block < 1;
            else if (!strcmp(a, "--xfer"))
                bad = parse_size(v, &xfer) || xfer < 1 || xfer > 1024LL * 1024 * 1024;
            else if (!strcmp(a, "--iterations"))
                bad = parse_int(v, 1, 1000000, &iterations);
            else if (!strcmp(a, "--seed"))
                bad = parse_int(v, 0, INT32_MAX, &seed);
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
    if (xfer > block)
        xfer = block;

    errors_return_on_files();

    unsigned char *buf = malloc((size_t)block);
    if (!buf)
        die("cannot allocate %s bytes", "block");
    const MPI_Offset base = (MPI_Offset)rank * (MPI_Offset)block;
    const long long npieces = (block + xfer - 1) / xfer;
    const double agg_bytes = (double)block * nprocs;

    double wtime = 0, rtime = 0, wbest = 0, rbest = 0;
    long long errors = 0;

    for (long long it = 0; it < iterations; it++) {
        if (do_write) {
            pat_fill(buf, base, block, (uint64_t)seed, rank);
            MPI_File fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY);
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = MPI_Wtime();
            for (long long p = 0; p < npieces; p++) {
                long long off = p * xfer;
                int len = (int)((block - off) < xfer ? (block - off) : xfer);
                MPI_Status st;
                if (collective)
                    CHECK(MPI_File_write_at_all(fh, base + off, buf + off, len, MPI_BYTE, &st));
                else
                    CHECK(MPI_File_write_at(fh, base + off, buf + off, len, MPI_BYTE, &st));
                check_count(&st, MPI_BYTE, len, "write");
            }
            if (do_sync)
                CHECK(MPI_File_sync(fh));
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double dt = MPI_Wtime() - t0;
            CHECK(MPI_File_close(&fh));
            wtime += dt;
            if (mib_s(agg_bytes, dt) > wbest)
                wbest = mib_s(agg_bytes, dt);
        }
        if (do_read) {
            memset(buf, 0, (size_t)block);
            MPI_File fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_RDONLY);
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = MPI_Wtime();
            for (long long p = 0; p < npieces; p++) {
                long long off = p * xfer;
                int len = (int)((block - off) < xfer ? (block - off) : xfer);
                MPI_Status st;
                if (collective)
                    CHECK(MPI_File_read_at_all(fh, base + off, buf + off, len, MPI_BYTE, &st));
                else
                    CHECK(MPI_File_read_at(fh, base + off, buf + off, len, MPI_BYTE, &st));
                check_count(&st, MPI_BYTE, len, "read (short read / EOF?)");
            }
            CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double dt = MPI_Wtime() - t0;
            CHECK(MPI_File_close(&fh));
            rtime += dt;
            if (mib_s(agg_bytes, dt) > rbest)
                rbest = mib_s(agg_bytes, dt);
            errors += pat_check(buf, base, block, (uint64_t)seed, rank, "read back");
        }
    }

    long long total_errors = global_errors(errors);
    if (total_errors == 0 && unlink_end) {
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 0)
            CHECK(MPI_File_delete((char *)path, MPI_INFO_NULL));
    }
    if (rank == 0) {
        if (total_errors) {
            fprintf(stderr, "mpi-io-test: FAILED: %lld bad bytes in total (see messages above)\n",
                    total_errors);
        } else {
            double tot = agg_bytes * (double)iterations;
            printf("{\"program\":\"mpi-io-test\",\"path\":");
            json_str(stdout, path);
            printf(",\"nprocs\":%d,\"block\":%lld,\"xfer\":%lld,\"iterations\":%lld,"
                   "\"collective\":%s,\"sync\":%s,\"mode\":\"%s\",\"seed\":%lld,"
                   "\"bytes_per_iteration\":%.0f",
                   nprocs, block, xfer, iterations, collective ? "true" : "false",
                   do_sync ? "true" : "false", mode, seed, agg_bytes);
            if (do_write)
                printf(",\"write_s\":%.6f,\"write_mib_s\":%.2f,\"write_mib_s_best\":%.2f",
                       wtime, mib_s(tot, wtime), wbest);
            if (do_read)
                printf(",\"read_s\":%.6f,\"read_mib_s\":%.2f,\"read_mib_s_best\":%.2f,"
                       "\"verified\":true",
                       rtime, mib_s(tot, rtime), rbest);
            printf("}\n");
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
