/*
 * hdf5_rw.c -- parallel HDF5 write/read test over the MPI-IO driver.
 *
 * The file access property list uses H5Pset_fapl_mpio(MPI_COMM_WORLD), so
 * HDF5 hands the path given on the command line unchanged to MPI_File_open.
 * A 2-D dataset "/data" of doubles (--rows x --cols) is created; each rank
 * writes its block of rows through a hyperslab selection with a collective
 * transfer (H5Pset_dxpl_mpio(H5FD_MPIO_COLLECTIVE)).  The file is closed,
 * reopened read-only, read back collectively and verified:
 *     data[row][col] == row*cols + col (+ --offset, default 0)
 * Check the file from outside with e.g.  h5dump -d /data -s 0,0 -c 2,4 FILE
 */
#include <hdf5.h>
#include "mpiio_common.h"

static const char *usage_text =
    "usage: hdf5_rw [options] FILE\n"
    "  FILE is passed unchanged to H5Fcreate/H5Fopen with the MPI-IO driver\n"
    "  --rows R           global rows (default 1024)\n"
    "  --cols C           global columns (default 1024)\n"
    "  --mode MODE        write, read or both (default both)\n"
    "  --offset V         value offset added to row*cols+col (default 0); reading\n"
    "                     with another offset than the writer must fail\n"
    "  --independent      H5FD_MPIO_INDEPENDENT transfers instead of collective\n"
    "  --help             this text\n"
    "Rank 0 prints one JSON line.\n";

static void h5_fail(const char *what, const char *file, int line)
{
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "hdf5_rw: rank %d: %s failed (%s:%d); HDF5 error stack:\n", rank, what,
            file, line);
    H5Eprint2(H5E_DEFAULT, stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* HDF5 calls return a negative value (herr_t or hid_t) on failure. */
#define H5TRY(call)                                                   \
    do {                                                                \
        if ((call) < 0)                                                 \
            h5_fail(#call, __FILE__, __LINE__);                         \
    } while (0)
#define H5ID(var, call)                                                 \
    do {                                                                \
        (var) = (call);                                                 \
        if ((var) < 0)                                                  \
            h5_fail(#call, __FILE__, __LINE__);                         \
    } while (0)

int main(int argc, char **argv)
{
    int rank, nprocs;
    long long rows = 1024, cols = 1024, offset = 0;
    int do_write = 1, do_read = 1, independent = 0;
    const char *path = NULL, *mode = "both";

    g_prog = "hdf5_rw";
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
        } else if (!strcmp(a, "--rows") || !strcmp(a, "--cols") || !strcmp(a, "--mode") ||
                   !strcmp(a, "--offset")) {
            if (!v)
                usage_error(rank, usage_text, "option %s needs a value", a);
            i++;
            int bad = 0;
            if (!strcmp(a, "--rows"))
                bad = parse_int(v, 1, 1LL << 40, &rows);
            else if (!strcmp(a, "--cols"))
                bad = parse_int(v, 1, 1LL << 40, &cols);
            else if (!strcmp(a, "--offset"))
                bad = parse_int(v, -(1LL << 40), 1LL << 40, &offset);
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

    /* HDF5 reports errors through return values; print stacks ourselves. */
    H5TRY(H5Eset_auto2(H5E_DEFAULT, NULL, NULL));

    /* block of rows for this rank (first `rem` ranks get one extra row) */
    long long base = rows / nprocs, rem = rows % nprocs;
    long long myrows = base + (rank < rem ? 1 : 0);
    long long row0 = rank * base + (rank < rem ? rank : rem);
    size_t nvals = (size_t)(myrows * cols);
    double *buf = malloc((nvals ? nvals : 1) * sizeof(double));
    if (!buf)
        die("cannot allocate the %s buffer", "data");

    hid_t fapl, dxpl;
    H5ID(fapl, H5Pcreate(H5P_FILE_ACCESS));
    H5TRY(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    H5ID(dxpl, H5Pcreate(H5P_DATASET_XFER));
    H5TRY(H5Pset_dxpl_mpio(dxpl, independent ? H5FD_MPIO_INDEPENDENT : H5FD_MPIO_COLLECTIVE));

    hsize_t gdims[2] = {(hsize_t)rows, (hsize_t)cols};
    hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)myrows, (hsize_t)cols};
    const double bytes = (double)rows * (double)cols * sizeof(double);
    double wtime = 0, rtime = 0;
    long long errors = 0;

    if (do_write) {
        for (long long r = 0; r < myrows; r++)
            for (long long c = 0; c < cols; c++)
                buf[r * cols + c] = (double)((row0 + r) * cols + c + offset);
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = MPI_Wtime();
        hid_t file, fspace, mspace, dset;
        H5ID(file, H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
        H5ID(fspace, H5Screate_simple(2, gdims, NULL));
        H5ID(dset, H5Dcreate2(file, "/data", H5T_NATIVE_DOUBLE, fspace, H5P_DEFAULT,
                              H5P_DEFAULT, H5P_DEFAULT));
        H5ID(mspace, H5Screate_simple(2, count, NULL));
        if (myrows > 0) {
            H5TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL));
        } else {
            H5TRY(H5Sselect_none(fspace));
            H5TRY(H5Sselect_none(mspace));
        }
        H5TRY(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, buf));
        H5TRY(H5Dclose(dset));
        H5TRY(H5Sclose(mspace));
        H5TRY(H5Sclose(fspace));
        H5TRY(H5Fclose(file));
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        wtime = MPI_Wtime() - t0;
    }
    if (do_read) {
        for (size_t k = 0; k < nvals; k++)
            buf[k] = -1.0;
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = MPI_Wtime();
        hid_t file, fspace, mspace, dset;
        H5ID(file, H5Fopen(path, H5F_ACC_RDONLY, fapl));
        H5ID(dset, H5Dopen2(file, "/data", H5P_DEFAULT));
        H5ID(fspace, H5Dget_space(dset));
        hsize_t fdims[2] = {0, 0};
        if (H5Sget_simple_extent_ndims(fspace) != 2)
            h5_fail("dataset /data is not 2-D", __FILE__, __LINE__);
        H5TRY(H5Sget_simple_extent_dims(fspace, fdims, NULL));
        if (fdims[0] != gdims[0] || fdims[1] != gdims[1]) {
            if (rank == 0)
                fprintf(stderr, "hdf5_rw: VERIFY FAILED: /data is %llux%llu, expected %llux%llu\n",
                        (unsigned long long)fdims[0], (unsigned long long)fdims[1],
                        (unsigned long long)gdims[0], (unsigned long long)gdims[1]);
            errors++;
        } else {
            H5ID(mspace, H5Screate_simple(2, count, NULL));
            if (myrows > 0) {
                H5TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL));
            } else {
                H5TRY(H5Sselect_none(fspace));
                H5TRY(H5Sselect_none(mspace));
            }
            H5TRY(H5Dread(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, buf));
            H5TRY(H5Sclose(mspace));
        }
        H5TRY(H5Sclose(fspace));
        H5TRY(H5Dclose(dset));
        H5TRY(H5Fclose(file));
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        rtime = MPI_Wtime() - t0;
        if (errors == 0) {
            long long bad = 0;
            for (long long r = 0; r < myrows; r++)
                for (long long c = 0; c < cols; c++) {
                    double e = (double)((row0 + r) * cols + c + offset);
                    double g = buf[r * cols + c];
                    if (g != e) {
                        if (bad == 0)
                            fprintf(stderr, "hdf5_rw: rank %d: VERIFY FAILED at [%lld][%lld]: "
                                    "expected %.1f got %.17g\n", rank, row0 + r, c, e, g);
                        bad++;
                    }
                }
            if (bad)
                fprintf(stderr, "hdf5_rw: rank %d: %lld of %zu values wrong\n", rank, bad, nvals);
            errors += bad;
        }
    }
    H5TRY(H5Pclose(dxpl));
    H5TRY(H5Pclose(fapl));

    long long total_errors = global_errors(errors);
    if (rank == 0) {
        if (total_errors) {
            fprintf(stderr, "hdf5_rw: FAILED: %lld verification errors\n", total_errors);
        } else {
            unsigned maj = 0, min = 0, rel = 0;
            H5get_libversion(&maj, &min, &rel);
            printf("{\"program\":\"hdf5_rw\",\"path\":");
            json_str(stdout, path);
            printf(",\"nprocs\":%d,\"rows\":%lld,\"cols\":%lld,\"offset\":%lld,\"mode\":\"%s\","
                   "\"xfer\":\"%s\",\"hdf5\":\"%u.%u.%u\",\"bytes\":%.0f",
                   nprocs, rows, cols, offset, mode, independent ? "independent" : "collective",
                   maj, min, rel, bytes);
            if (do_write)
                printf(",\"write_s\":%.6f,\"write_mib_s\":%.2f", wtime, mib_s(bytes, wtime));
            if (do_read)
                printf(",\"read_s\":%.6f,\"read_mib_s\":%.2f,\"verified\":true", rtime,
                       mib_s(bytes, rtime));
            printf("}\n");
            fflush(stdout);
        }
    }
    free(buf);
    H5close();
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
