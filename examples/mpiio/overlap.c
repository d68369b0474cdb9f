/*
 * overlap.c -- I/O / compute overlap test in the spirit of SEMPLAR's test.
 *
 * Each rank owns, for every iteration `it`, the region
 * [(it*nprocs + rank)*block, +block) of one shared file.
 *
 * Write side, three phases, each iteration timed between barriers (the
 * file is truncated to 0 with MPI_File_set_size before each write phase):
 *   io        : MPI_File_iwrite_at of the block (in --xfer pieces), MPI_Waitall
 *   compute   : busy loop of real floating point work, no I/O
 *   overlapped: start the iwrites, compute (calling MPI_Test on the pending
 *               requests every --test-every-ms), then MPI_Waitall
 * Read side: the same with MPI_File_iread_at; every block read is verified
 * (verification is outside the timed intervals).
 *
 * The compute amount is calibrated so that one iteration of computing takes
 * about as long as one iteration of I/O alone (measured in the io phase),
 * unless --compute-ms gives it.  The work is a fixed number of arithmetic
 * units, not a wall-clock wait, so CPU taken by the I/O shows up.
 *
 *   overlap_efficiency = (io_s + compute_s - overlapped_s) / min(io_s, compute_s)
 *   1.0 = perfect overlap, 0.0 = none (I/O and compute serialised).
 */
#include "mpiio_common.h"

static const char *usage_text =
    "usage: overlap [options] FILE\n"
    "  FILE is passed unchanged to MPI_File_open (e.g. stripefs:/dir/file)\n"
    "  --block BYTES        bytes per rank per iteration (default 16MiB)\n"
    "  --xfer BYTES         bytes per nonblocking request (default = block,\n"
    "                       i.e. one request per iteration)\n"
    "  --iterations N       iterations per phase (default 8)\n"
    "  --compute-ms MS      compute time per iteration (default: calibrated to\n"
    "                       the I/O-alone time per iteration, separately for\n"
    "                       write and read)\n"
    "  --test-every-ms MS   call MPI_Test on pending requests this often while\n"
    "                       computing (default 5; 0 = never)\n"
    "  --seed N             data pattern seed (default 1)\n"
    "  --check-seed N       seed expected when verifying (default --seed);\n"
    "                       another value is a fault injection and must fail\n"
    "  --unlink             delete FILE at the end\n"
    "  --help               this text\n"
    "Rank 0 prints one JSON line.\n";

/* ---- compute kernel ---------------------------------------------------- */
#define KVEC 64
static double kvec[KVEC];
volatile double ksink;

static void work_unit(void)
{
    /* 16 x 64 multiply-adds per unit; converges to a bounded fixed point */
    for (int r = 0; r < 16; r++)
        for (int i = 0; i < KVEC; i++)
            kvec[i] = kvec[i] * 0.9999995 + 1e-7 * (double)(i + 1);
}

struct pending {
    int n;
    MPI_Request *req;
    int *done;
    MPI_Status *st;
    long long tests;
};

/* Run `units` work units; every test_every seconds (if > 0) call MPI_Test on
 * the still pending requests of p (if any). */
static void compute(long long units, double test_every, struct pending *p)
{
    double next = test_every > 0 ? MPI_Wtime() + test_every : 0;
    int remaining = 0;
    if (p)
        for (int i = 0; i < p->n; i++)
            remaining += !p->done[i];
    for (long long u = 0; u < units; u++) {
        work_unit();
        if (test_every > 0 && remaining > 0) {
            double now = MPI_Wtime();
            if (now >= next) {
                for (int i = 0; i < p->n; i++) {
                    if (p->done[i])
                        continue;
                    int flag = 0;
                    CHECK(MPI_Test(&p->req[i], &flag, &p->st[i]));
                    p->tests++;
                    if (flag) {
                        p->done[i] = 1;
                        remaining--;
                    }
                }
                next = now + test_every;
            }
        }
    }
    ksink = kvec[units % KVEC];
}

static void wait_all(struct pending *p)
{
    MPI_Status *tmp = malloc((size_t)p->n * sizeof *tmp);
    if (!tmp)
        die("out of memory (%s)", "statuses");
    int rc = MPI_Waitall(p->n, p->req, tmp);
    if (rc == MPI_ERR_IN_STATUS) {
        for (int i = 0; i < p->n; i++)
            if (!p->done[i] && tmp[i].MPI_ERROR != MPI_SUCCESS)
                mpi_fail(tmp[i].MPI_ERROR, "nonblocking file request (MPI_Waitall)", __FILE__,
                         __LINE__);
    }
    if (rc != MPI_SUCCESS)
        mpi_fail(rc, "MPI_Waitall", __FILE__, __LINE__);
    for (int i = 0; i < p->n; i++)
        if (!p->done[i]) {
            p->st[i] = tmp[i];
            p->done[i] = 1;
        }
    free(tmp);
}

struct cfg {
    long long block, xfer, iterations;
    double test_every;
    int rank, nprocs;
};

/* Start the nonblocking transfers of one iteration. */
static void start_io(MPI_File fh, int writing, unsigned char *buf, MPI_Offset base,
                     const struct cfg *c, struct pending *p)
{
    for (int i = 0; i < p->n; i++) {
        long long off = (long long)i * c->xfer;
        int len = (int)((c->block - off) < c->xfer ? (c->block - off) : c->xfer);
        p->done[i] = 0;
        if (writing)
            CHECK(MPI_File_iwrite_at(fh, base + off, buf + off, len, MPI_BYTE, &p->req[i]));
        else
            CHECK(MPI_File_iread_at(fh, base + off, buf + off, len, MPI_BYTE, &p->req[i]));
    }
}

static void check_transfer(const struct pending *p, const struct cfg *c, const char *what)
{
    for (int i = 0; i < p->n; i++) {
        long long off = (long long)i * c->xfer;
        long long len = (c->block - off) < c->xfer ? (c->block - off) : c->xfer;
        check_count((MPI_Status *)&p->st[i], MPI_BYTE, len, what);
    }
}

enum { PH_IO, PH_COMPUTE, PH_OVERLAP };

/* Run one phase over all iterations; returns the summed barrier-to-barrier
 * time.  Read phases verify each block outside the timed interval. */
static double run_phase(MPI_File fh, int writing, int phase, unsigned char *buf,
                        const struct cfg *c, struct pending *p, long long units,
                        uint64_t seed, uint64_t check_seed, long long *errors)
{
    double total = 0;
    for (long long it = 0; it < c->iterations; it++) {
        MPI_Offset base = ((MPI_Offset)it * c->nprocs + c->rank) * (MPI_Offset)c->block;
        if (phase != PH_COMPUTE) {
            if (writing)
                pat_fill(buf, base, c->block, seed, c->rank);
            else
                memset(buf, 0, (size_t)c->block);
        }
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = MPI_Wtime();
        if (phase == PH_IO) {
            start_io(fh, writing, buf, base, c, p);
            wait_all(p);
        } else if (phase == PH_COMPUTE) {
            compute(units, 0, NULL);
        } else {
            start_io(fh, writing, buf, base, c, p);
            compute(units, c->test_every, p);
            wait_all(p);
        }
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        total += MPI_Wtime() - t0;
        if (phase != PH_COMPUTE) {
            check_transfer(p, c, writing ? "iwrite_at" : "iread_at (short read / EOF?)");
            if (!writing)
                *errors += pat_check(buf, base, c->block, check_seed, c->rank,
                                     phase == PH_IO ? "iread_at alone" : "iread_at overlapped");
        }
    }
    return total;
}

/* Work units per second, measured on all ranks at once (so that CPU sharing
 * between ranks on the same cores is part of the calibration). */
static double calibrate(void)
{
    long long units = 0;
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = MPI_Wtime(), dt;
    do {
        compute(64, 0, NULL);
        units += 64;
        dt = MPI_Wtime() - t0;
    } while (dt < 0.1);
    return (double)units / dt;
}

static void print_side(const char *name, double io, double comp, double ovl, double bytes,
                       double compute_ms, long long units, long long tests, int last)
{
    double mn = io < comp ? io : comp;
    double eff = mn > 0 ? (io + comp - ovl) / mn : 0.0;
    printf("\"%s\":{\"io_s\":%.6f,\"compute_s\":%.6f,\"overlapped_s\":%.6f,"
           "\"overlap_efficiency\":%.3f,\"io_mib_s\":%.2f,\"overlapped_mib_s\":%.2f,"
           "\"compute_ms_per_iteration\":%.3f,\"compute_units_per_iteration\":%lld,"
           "\"mpi_test_calls\":%lld}%s",
           name, io, comp, ovl, eff, mib_s(bytes, io), mib_s(bytes, ovl), compute_ms, units,
           tests, last ? "" : ",");
}

int main(int argc, char **argv)
{
    int rank, nprocs;
    long long block = 16LL << 20, xfer = -1, iterations = 8, seed = 1, check_seed = -1;
    double compute_ms = -1, test_every_ms = 5;
    int unlink_end = 0;
    const char *path = NULL;

    g_prog = "overlap";
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
        } else if (!strcmp(a, "--block") || !strcmp(a, "--xfer") ||
                   !strcmp(a, "--iterations") || !strcmp(a, "--compute-ms") ||
                   !strcmp(a, "--test-every-ms") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--check-seed")) {
            if (!v)
                usage_error(rank, usage_text, "option %s needs a value", a);
            i++;
            int bad;
            if (!strcmp(a, "--block"))
                bad = parse_size(v, &block) || block < 1 || block > INT32_MAX;
            else if (!strcmp(a, "--xfer"))
                bad = parse_size(v, &xfer) || xfer < 1 || xfer > INT32_MAX;
            else if (!strcmp(a, "--iterations"))
                bad = parse_int(v, 1, 1000000, &iterations);
            else if (!strcmp(a, "--compute-ms"))
                bad = parse_double(v, 0, &compute_ms);
            else if (!strcmp(a, "--test-every-ms"))
                bad = parse_double(v, 0, &test_every_ms);
            else if (!strcmp(a, "--seed"))
                bad = parse_int(v, 0, INT32_MAX, &seed);
            else
                bad = parse_int(v, 0, INT32_MAX, &check_seed);
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
    if (xfer < 0 || xfer > block)
        xfer = block;
    if (check_seed < 0)
        check_seed = seed;

    for (int i = 0; i < KVEC; i++)
        kvec[i] = 1.0 + i;

    struct cfg c = {block, xfer, iterations, test_every_ms / 1e3, rank, nprocs};
    struct pending p;
    p.n = (int)((block + xfer - 1) / xfer);
    p.req = malloc((size_t)p.n * sizeof *p.req);
    p.done = calloc((size_t)p.n, sizeof *p.done);
    p.st = malloc((size_t)p.n * sizeof *p.st);
    p.tests = 0;
    unsigned char *buf = malloc((size_t)block);
    if (!p.req || !p.done || !p.st || !buf)
        die("cannot allocate the %s", "buffers");

    errors_return_on_files();
    double rate = calibrate(); /* work units per second on this rank */
    const double bytes = (double)block * nprocs * (double)iterations;
    long long errors = 0;

    /* ---- write side ---- */
    /* Both timed write phases start from an empty file (MPI_File_set_size 0),
     * so that the overlapped phase is not favoured by overwriting blocks
     * the I/O-alone phase already allocated. */
    MPI_File fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY);
    CHECK(MPI_File_set_size(fh, 0));
    double w_io = run_phase(fh, 1, PH_IO, buf, &c, &p, 0, (uint64_t)seed, 0, &errors);
    double w_ms = compute_ms >= 0 ? compute_ms : 1e3 * max_double(w_io) / (double)iterations;
    long long w_units = (long long)(w_ms / 1e3 * rate + 0.5);
    double w_comp = run_phase(fh, 1, PH_COMPUTE, buf, &c, &p, w_units, 0, 0, &errors);
    p.tests = 0;
    CHECK(MPI_File_set_size(fh, 0));
    double w_ovl = run_phase(fh, 1, PH_OVERLAP, buf, &c, &p, w_units, (uint64_t)seed, 0, &errors);
    long long w_tests = p.tests;
    CHECK(MPI_File_close(&fh));

    /* ---- read side ---- */
    fh = open_file(MPI_COMM_WORLD, path, MPI_MODE_RDONLY);
    double r_io = run_phase(fh, 0, PH_IO, buf, &c, &p, 0, 0, (uint64_t)check_seed, &errors);
    double r_ms = compute_ms >= 0 ? compute_ms : 1e3 * max_double(r_io) / (double)iterations;
    long long r_units = (long long)(r_ms / 1e3 * rate + 0.5);
    double r_comp = run_phase(fh, 0, PH_COMPUTE, buf, &c, &p, r_units, 0, 0, &errors);
    p.tests = 0;
    double r_ovl = run_phase(fh, 0, PH_OVERLAP, buf, &c, &p, r_units, 0, (uint64_t)check_seed,
                             &errors);
    long long r_tests = p.tests;
    CHECK(MPI_File_close(&fh));

    long long total_errors = global_errors(errors);
    long long sum_tests[2], my_tests[2] = {w_tests, r_tests};
    CHECK(MPI_Reduce(my_tests, sum_tests, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    if (!total_errors && unlink_end) {
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 0)
            CHECK(MPI_File_delete((char *)path, MPI_INFO_NULL));
    }
    if (rank == 0) {
        if (total_errors) {
            fprintf(stderr, "overlap: FAILED: %lld bad bytes in total\n", total_errors);
        } else {
            printf("{\"program\":\"overlap\",\"path\":");
            json_str(stdout, path);
            printf(",\"nprocs\":%d,\"block\":%lld,\"xfer\":%lld,\"requests_per_iteration\":%d,"
                   "\"iterations\":%lld,\"test_every_ms\":%g,\"compute_ms_given\":%s,"
                   "\"bytes\":%.0f,\"units_per_s_rank0\":%.0f,",
                   nprocs, block, xfer, p.n, iterations, test_every_ms,
                   compute_ms >= 0 ? "true" : "false", bytes, rate);
            print_side("write", w_io, w_comp, w_ovl, bytes, w_ms, w_units, sum_tests[0], 0);
            print_side("read", r_io, r_comp, r_ovl, bytes, r_ms, r_units, sum_tests[1], 1);
            printf(",\"verified\":true}\n");
            fflush(stdout);
        }
    }
    free(buf);
    free(p.req);
    free(p.done);
    free(p.st);
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
