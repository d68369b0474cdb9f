/*
 * mpi-md-test.c -- MPI-IO metadata rate test in the spirit of PVFS2's
 * mpi-md-test.  The path argument is an EXISTING directory (MPI has no
 * mkdir); the files DIR/md.<i> are created, opened, resized and deleted
 * using only MPI-IO calls:
 *
 *   create   : MPI_File_open(MPI_MODE_CREATE|MPI_MODE_WRONLY) + MPI_File_close
 *   open     : MPI_File_open(MPI_MODE_RDWR)        (handles kept open)
 *   set_size : MPI_File_set_size(--size) on every handle (checked with get_size)
 *   close    : MPI_File_close of every handle
 *   delete   : MPI_File_delete (rank 0 all files, or each rank its share)
 *
 * --comm world (default): every operation except delete is collective over
 *   MPI_COMM_WORLD on shared files md.0 .. md.<N-1> (N = --files); an "op"
 *   is one collective call, so there are N ops per phase.
 * --comm self: each rank works on its own N files md.<rank*N+j> with
 *   MPI_COMM_SELF; there are N*nprocs ops per phase.
 *
 * Each phase is timed between barriers; ops_s = ops / elapsed; the mean
 * latency is the mean duration of one call over all calls on all ranks.
 */
#include "mpiio_common.h"

static const char *usage_text =
    "usage: mpi-md-test [options] DIR\n"
    "  DIR must exist; it is used as the prefix DIR/md.<i> for MPI_File_open\n"
    "  --files N          files per rank (default 100)\n"
    "  --comm world|self  collective opens on shared files (world, default)\n"
    "                     or private files per rank (self)\n"
    "  --size BYTES       size given to MPI_File_set_size (default 1MiB)\n"
    "  --delete root|share  who calls MPI_File_delete: rank 0 for all files\n"
    "                     or each rank its share (default share)\n"
    "  --help             this text\n"
    "Rank 0 prints one JSON line with ops, ops_s and mean/max latency per phase.\n";

enum { P_CREATE, P_OPEN, P_SETSIZE, P_CLOSE, P_DELETE, NPHASES };
static const char *phase_names[NPHASES] = {"create", "open", "set_size", "close", "delete"};

int main(int argc, char **argv)
{
    int rank, nprocs;
    long long nfiles = 100, size = 1LL << 20;
    int self = 0, delete_root = 0;
    const char *dir = NULL;

    g_prog = "mpi-md-test";
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
        } else if (!strcmp(a, "--files") || !strcmp(a, "--comm") ||
                   !strcmp(a, "--size") || !strcmp(a, "--delete")) {
            if (!v)
                usage_error(rank, usage_text, "option %s needs a value", a);
            i++;
            int bad = 0;
            if (!strcmp(a, "--files"))
                bad = parse_int(v, 1, 10000000, &nfiles);
            else if (!strcmp(a, "--size"))
                bad = parse_size(v, &size);
            else if (!strcmp(a, "--comm")) {
                if (!strcmp(v, "world")) self = 0;
                else if (!strcmp(v, "self")) self = 1;
                else bad = 1;
            } else {
                if (!strcmp(v, "root")) delete_root = 1;
                else if (!strcmp(v, "share")) delete_root = 0;
                else bad = 1;
            }
            if (bad)
                usage_error(rank, usage_text, "bad value for option %s", a);
        } else if (a[0] == '-' && a[1] == '-') {
            usage_error(rank, usage_text, "unknown option %s", a);
        } else if (!dir) {
            dir = a;
        } else {
            usage_error(rank, usage_text, "unexpected argument %s", a);
        }
    }
    if (!dir)
        usage_error(rank, usage_text, "missing DIR argument%s", "");

    errors_return_on_files();

    MPI_Comm comm = self ? MPI_COMM_SELF : MPI_COMM_WORLD;
    /* the files this rank opens: indices first .. first+nfiles-1 */
    long long first = self ? (long long)rank * nfiles : 0;
    long long total_files = self ? nfiles * nprocs : nfiles;

    size_t dlen = strlen(dir);
    int need_slash = dlen > 0 && dir[dlen - 1] != '/';
    size_t namelen = dlen + 32;
    char **names = malloc((size_t)nfiles * sizeof *names);
    MPI_File *fh = malloc((size_t)nfiles * sizeof *fh);
    if (!names || !fh)
        die("out of memory for %s", "file table");
    for (long long j = 0; j < nfiles; j++) {
        names[j] = malloc(namelen);
        if (!names[j])
            die("out of memory for %s", "file names");
        snprintf(names[j], namelen, "%s%smd.%lld", dir, need_slash ? "/" : "", first + j);
        fh[j] = MPI_FILE_NULL;
    }

    double elapsed[NPHASES] = {0}, lat_sum[NPHASES] = {0}, lat_max[NPHASES] = {0};
    long long my_ops[NPHASES] = {0};
    long long errors = 0;

#define TIMED(phase, name, call)                                            \
    do {                                                                    \
        double t_ = MPI_Wtime();                                            \
        int rc_ = (call);                                                   \
        t_ = MPI_Wtime() - t_;                                              \
        if (rc_ != MPI_SUCCESS) {                                           \
            char w_[4400];                                                  \
            snprintf(w_, sizeof w_, "%s phase: %s on \"%.4000s\"",          \
                     phase_names[phase], #call, (name));                    \
            mpi_fail(rc_, w_, __FILE__, __LINE__);                          \
        }                                                                   \
        lat_sum[phase] += t_;                                               \
        if (t_ > lat_max[phase])                                            \
            lat_max[phase] = t_;                                            \
        my_ops[phase]++;                                                    \
    } while (0)

    /* create */
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = MPI_Wtime();
    for (long long j = 0; j < nfiles; j++) {
        MPI_File f = MPI_FILE_NULL;
        TIMED(P_CREATE, names[j], MPI_File_open(comm, names[j], MPI_MODE_CREATE | MPI_MODE_WRONLY,
                                      MPI_INFO_NULL, &f));
        CHECK(MPI_File_close(&f));
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    elapsed[P_CREATE] = MPI_Wtime() - t0;

    /* open (existing files, no CREATE) */
    t0 = MPI_Wtime();
    for (long long j = 0; j < nfiles; j++) {
        TIMED(P_OPEN, names[j], MPI_File_open(comm, names[j], MPI_MODE_RDWR, MPI_INFO_NULL, &fh[j]));
        CHECK(MPI_File_set_errhandler(fh[j], MPI_ERRORS_RETURN));
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    elapsed[P_OPEN] = MPI_Wtime() - t0;

    /* set_size */
    t0 = MPI_Wtime();
    for (long long j = 0; j < nfiles; j++)
        TIMED(P_SETSIZE, names[j], MPI_File_set_size(fh[j], (MPI_Offset)size));
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    elapsed[P_SETSIZE] = MPI_Wtime() - t0;

    /* verify sizes (not timed) */
    for (long long j = 0; j < nfiles; j++) {
        MPI_Offset got = -1;
        CHECK(MPI_File_get_size(fh[j], &got));
        if (got != (MPI_Offset)size) {
            fprintf(stderr, "mpi-md-test: rank %d: VERIFY FAILED: %s has size %lld after "
                    "MPI_File_set_size(%lld)\n", rank, names[j], (long long)got, size);
            errors++;
        }
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD));

    /* close */
    t0 = MPI_Wtime();
    for (long long j = 0; j < nfiles; j++)
        TIMED(P_CLOSE, names[j], MPI_File_close(&fh[j]));
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    elapsed[P_CLOSE] = MPI_Wtime() - t0;

    /* delete: world mode -> rank 0 deletes all (root) or file i goes to rank
     * i % nprocs (share); self mode -> each rank its own files (share) or
     * rank 0 deletes every rank's files (root). */
    t0 = MPI_Wtime();
    char *dname = malloc(namelen);
    if (!dname)
        die("out of memory for %s", "name");
    for (long long i = 0; i < total_files; i++) {
        int owner;
        if (delete_root)
            owner = 0;
        else if (self)
            owner = (int)(i / nfiles);
        else
            owner = (int)(i % nprocs);
        if (owner != rank)
            continue;
        snprintf(dname, namelen, "%s%smd.%lld", dir, need_slash ? "/" : "", i);
        TIMED(P_DELETE, dname, MPI_File_delete(dname, MPI_INFO_NULL));
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    elapsed[P_DELETE] = MPI_Wtime() - t0;

    /* verify the deletes (not timed): opening without CREATE must fail */
    for (long long j = 0; j < nfiles; j++) {
        MPI_File f = MPI_FILE_NULL;
        if (!self && (j % nprocs) != rank)
            continue; /* shared files: each rank checks its share */
        int rc = MPI_File_open(MPI_COMM_SELF, names[j], MPI_MODE_RDONLY, MPI_INFO_NULL, &f);
        if (rc == MPI_SUCCESS) {
            fprintf(stderr, "mpi-md-test: rank %d: VERIFY FAILED: %s still opens after "
                    "MPI_File_delete\n", rank, names[j]);
            MPI_File_close(&f);
            errors++;
        }
    }

    long long total_errors = global_errors(errors);
    long long ops[NPHASES];
    double lsum[NPHASES], lmax[NPHASES], el_max[NPHASES];
    long long calls[NPHASES];
    CHECK(MPI_Reduce(my_ops, calls, NPHASES, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    CHECK(MPI_Reduce(lat_sum, lsum, NPHASES, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    CHECK(MPI_Reduce(lat_max, lmax, NPHASES, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    CHECK(MPI_Reduce(elapsed, el_max, NPHASES, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));

    if (rank == 0) {
        if (total_errors) {
            fprintf(stderr, "mpi-md-test: FAILED: %lld verification errors\n", total_errors);
        } else {
            printf("{\"program\":\"mpi-md-test\",\"path\":");
            json_str(stdout, dir);
            printf(",\"nprocs\":%d,\"files_per_rank\":%lld,\"comm\":\"%s\",\"size\":%lld,"
                   "\"delete\":\"%s\",\"total_files\":%lld",
                   nprocs, nfiles, self ? "self" : "world", size,
                   delete_root ? "root" : "share", total_files);
            for (int p = 0; p < NPHASES; p++) {
                /* world mode: one op = one collective call (all ranks), except delete */
                ops[p] = (self || p == P_DELETE) ? calls[p] : calls[p] / nprocs;
                double el = el_max[p];
                printf(",\"%s\":{\"ops\":%lld,\"s\":%.6f,\"ops_s\":%.1f,"
                       "\"mean_latency_ms\":%.4f,\"max_latency_ms\":%.4f}",
                       phase_names[p], ops[p], el, el > 0 ? (double)ops[p] / el : 0.0,
                       calls[p] ? 1e3 * lsum[p] / (double)calls[p] : 0.0, 1e3 * lmax[p]);
            }
            printf(",\"verified\":true}\n");
            fflush(stdout);
        }
    }
    for (long long j = 0; j < nfiles; j++)
        free(names[j]);
    free(names);
    free(fh);
    free(dname);
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
