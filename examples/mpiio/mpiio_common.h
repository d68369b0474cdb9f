/*
 * mpiio_common.h -- small helpers shared by the plain MPI-IO test programs
 * in this directory.  Only the standard MPI API is used; nothing here knows
 * about stripefs.  The target path given on the command line is passed to
 * MPI_File_open unchanged, so prefixed names (e.g. "stripefs:/dir/file")
 * work whenever the MPI library routes them.
 */
#ifndef MPIIO_COMMON_H
#define MPIIO_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#define MIB (1024.0 * 1024.0)

static const char *g_prog = "mpiio";

/* Print "PROG: rank R: WHAT: <MPI error string>" to stderr and abort. */
static inline void mpi_fail(int rc, const char *what, const char *file, int line)
{
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0, rank = -1, eclass = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "unknown MPI error %d", rc);
    else
        msg[len] = '\0';
    MPI_Error_class(rc, &eclass);
    fprintf(stderr, "%s: rank %d: %s failed (%s:%d): %s (error class %d)\n",
            g_prog, rank, what, file, line, msg, eclass);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* Check an MPI return code; every MPI call in these programs goes through it. */
#define CHECK(call)                                                     \
    do {                                                                \
        int check_rc_ = (call);                                         \
        if (check_rc_ != MPI_SUCCESS)                                   \
            mpi_fail(check_rc_, #call, __FILE__, __LINE__);             \
    } while (0)

/* Abort with a formatted message (not an MPI error). */
static inline void die(const char *fmt, const char *arg)
{
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "%s: rank %d: ", g_prog, rank);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* Usage errors are reported by rank 0 only; all ranks exit with status 2. */
static inline void usage_error(int rank, const char *usage, const char *msg, const char *arg)
{
    if (rank == 0) {
        fprintf(stderr, "%s: ", g_prog);
        fprintf(stderr, msg, arg);
        fprintf(stderr, "\n%s", usage);
    }
    MPI_Finalize();
    exit(2);
}

/* Parse a byte count: plain number or with suffix k/K/KiB, m/M/MiB, g/G/GiB. */
static inline int parse_size(const char *s, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || v < 0)
        return -1;
    long long mul = 1;
    if (*end != '\0') {
        switch (*end) {
        case 'k': case 'K': mul = 1024LL; break;
        case 'm': case 'M': mul = 1024LL * 1024; break;
        case 'g': case 'G': mul = 1024LL * 1024 * 1024; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' && end[1] == 'B' && end[2] == '\0')
            end += 2;
        else if (*end == 'B' && end[1] == '\0')
            end += 1;
        if (*end != '\0')
            return -1;
    }
    if (v > (long long)(INT64_MAX / mul))
        return -1;
    *out = v * mul;
    return 0;
}

static inline int parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static inline int parse_double(const char *s, double lo, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo))
        return -1;
    *out = v;
    return 0;
}

/* Print a JSON string literal (with quotes) for s. */
static inline void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* ---- data pattern ------------------------------------------------------
 * Byte at absolute file offset `off` is byte (off % 8) of the 64-bit word
 * mix(seed, rank, off / 8).  The word depends on the seed, the writing rank
 * and the offset, so misplaced, stale, or foreign bytes are all detected. */
static inline uint64_t pat_word(uint64_t seed, uint64_t rank, uint64_t widx)
{
    uint64_t z = widx * 0x9E3779B97F4A7C15ULL ^ (seed * 0xBF58476D1CE4E5B9ULL) ^
                 (rank << 48) ^ 0x5DEECE66DULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline void pat_fill(unsigned char *buf, long long off, long long len,
                     uint64_t seed, int rank)
{
    long long i = 0;
    uint64_t w = 0;
    /* leading unaligned bytes */
    while (i < len && ((off + i) & 7) != 0) {
        long long o = off + i;
        w = pat_word(seed, (uint64_t)rank, (uint64_t)(o >> 3));
        buf[i] = (unsigned char)(w >> (8 * (o & 7)));
        i++;
    }
    /* aligned words */
    for (; i + 8 <= len; i += 8) {
        w = pat_word(seed, (uint64_t)rank, (uint64_t)((off + i) >> 3));
        for (int b = 0; b < 8; b++)
            buf[i + b] = (unsigned char)(w >> (8 * b));
    }
    /* trailing bytes */
    for (; i < len; i++) {
        long long o = off + i;
        w = pat_word(seed, (uint64_t)rank, (uint64_t)(o >> 3));
        buf[i] = (unsigned char)(w >> (8 * (o & 7)));
    }
}

/* Returns the number of mismatching bytes; reports the first on stderr. */
static inline long long pat_check(const unsigned char *buf, long long off, long long len,
                           uint64_t seed, int rank, const char *what)
{
    long long bad = 0, first = -1;
    unsigned char exp_first = 0, got_first = 0;
    for (long long i = 0; i < len; i++) {
        long long o = off + i;
        uint64_t w = pat_word(seed, (uint64_t)rank, (uint64_t)(o >> 3));
        unsigned char e = (unsigned char)(w >> (8 * (o & 7)));
        if (buf[i] != e) {
            if (bad == 0) {
                first = o;
                exp_first = e;
                got_first = buf[i];
            }
            bad++;
        }
    }
    if (bad) {
        int me = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        fprintf(stderr,
                "%s: rank %d: VERIFY FAILED (%s): %lld of %lld bytes wrong in "
                "file range [%lld, %lld); first at file offset %lld: expected "
                "0x%02x got 0x%02x\n",
                g_prog, me, what, bad, len, off, off + len, first, exp_first,
                got_first);
        fflush(stderr);
    }
    return bad;
}

/* Set MPI_ERRORS_RETURN as the default handler for files opened later. */
static inline void errors_return_on_files(void)
{
    CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
}

/* Open `path` on `comm`, then set MPI_ERRORS_RETURN on the handle. */
static inline MPI_File open_file_at(MPI_Comm comm, const char *path, int amode,
                                    const char *file, int line)
{
    MPI_File fh = MPI_FILE_NULL;
    int rc = MPI_File_open(comm, (char *)path, amode, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        char what[4200];
        snprintf(what, sizeof what, "MPI_File_open(\"%.4000s\")", path);
        mpi_fail(rc, what, file, line);
    }
    CHECK(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
    return fh;
}
#define open_file(comm, path, amode) open_file_at(comm, path, amode, __FILE__, __LINE__)

/* Check that `count` elements of `type` were transferred according to status. */
static inline void check_count(MPI_Status *st, MPI_Datatype type, long long want,
                        const char *what)
{
    int got = 0;
    CHECK(MPI_Get_count(st, type, &got));
    if (got != want) {
        int rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        fprintf(stderr, "%s: rank %d: %s transferred %d elements, expected %lld\n",
                g_prog, rank, what, got, want);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* Combine a per-rank error count; returns the global total on every rank. */
static inline long long global_errors(long long local)
{
    long long total = 0;
    CHECK(MPI_Allreduce(&local, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    return total;
}

static inline double max_double(double v)
{
    double out = 0;
    CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return out;
}

static inline double mib_s(double bytes, double secs)
{
    return secs > 0 ? bytes / MIB / secs : 0.0;
}

#endif /* MPIIO_COMMON_H */
