/*
 * stripefs.h: the C interface of stripefs (libstripefs.so, built by
 * `cargo build --release` as target/release/libstripefs.so).
 *
 * Link with -lstripefs (and -L target/release, plus -Wl,-rpath or LD_LIBRARY_PATH).
 * The library needs no MPI: the MPI-IO calls take a communicator as callbacks
 * (struct stripefs_comm); include "stripefs_mpi.h" in an MPI program to get one for an
 * MPI_Comm.
 *
 * Conventions:
 *  - Functions return 0 (or a byte count) on success and a negative errno on failure
 *    (-ENOENT, -EACCES, -EIO, ...); stripefs_errmsg() then describes the failure in
 *    this thread, until its next call into the library.
 *  - Handles are opaque; each is freed by the call that ends it (disconnect, close,
 *    wait). Passing NULL where a handle is expected returns -EINVAL.
 *  - Paths are absolute paths in stripefs ("/dir/file"), UTF-8.
 *  - Checksums are verified end to end on every read, as in the native client.
 */
#ifndef STRIPEFS_H
#define STRIPEFS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRIPEFS_ABI_VERSION 1

typedef struct stripefs stripefs_t;                 /* a connected client */
typedef struct stripefs_file stripefs_file_t;       /* an open file */
typedef struct stripefs_mfile stripefs_mfile_t;     /* a file of the MPI-IO layer */
typedef struct stripefs_request stripefs_request_t; /* an asynchronous request */

/* The version of this interface the library implements (STRIPEFS_ABI_VERSION). */
int stripefs_abi_version(void);

/* What the last failing call of this thread said; never NULL (empty if none). */
const char *stripefs_errmsg(void);

/* Connects with a cluster file (`cluster up` prints its path; a client file with
 * only the metadata server's address works too). NULL: $STRIPEFS_CLUSTER. */
int stripefs_connect(const char *cluster_file, stripefs_t **out);
/* Ends the client's session and frees it; its files must be closed first. */
void stripefs_disconnect(stripefs_t *fs);

/* ---- namespace ---- */

typedef struct stripefs_stat {
    uint64_t ino;
    uint64_t size;
    uint32_t mode;          /* type and permission bits, as st_mode (S_IFREG | 0644) */
    uint32_t nlink;
    uint32_t uid;
    uint32_t gid;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint32_t stripe_size;   /* regular files: bytes per stripe unit; else 0 */
    uint32_t stripe_count;  /* regular files: data servers the file spans; else 0 */
} stripefs_stat_t;

int stripefs_stat(stripefs_t *fs, const char *path, stripefs_stat_t *out);
int stripefs_mkdir(stripefs_t *fs, const char *path, uint32_t mode);
int stripefs_rmdir(stripefs_t *fs, const char *path);
int stripefs_unlink(stripefs_t *fs, const char *path);
int stripefs_rename(stripefs_t *fs, const char *from, const char *to);

/* ---- files ---- */

/* flags: O_RDONLY, O_WRONLY or O_RDWR, with O_CREAT, O_EXCL, O_TRUNC (<fcntl.h>). */
int stripefs_open(stripefs_t *fs, const char *path, int flags, uint32_t mode,
                  stripefs_file_t **out);
/* Bytes read (fewer only at the end of the file), or a negative errno. */
int64_t stripefs_pread(stripefs_file_t *f, void *buf, size_t len, uint64_t offset);
/* len on success (writes are whole or fail), or a negative errno. Written bytes are
 * durable after stripefs_fsync; stripefs_close reports any write that failed. */
int64_t stripefs_pwrite(stripefs_file_t *f, const void *buf, size_t len, uint64_t offset);
int stripefs_fsync(stripefs_file_t *f);
int stripefs_ftruncate(stripefs_file_t *f, uint64_t size);
/* Closes and frees the handle, also when it reports an error. */
int stripefs_close(stripefs_file_t *f);

/* ---- the MPI-IO layer ---- */

/* A communicator as callbacks, each returning 0 on success (stripefs_mpi.h fills one
 * from an MPI_Comm). Every rank passes its own; collective calls call them in the same
 * order on every rank. Lengths are bytes. */
typedef struct stripefs_comm {
    void *ctx;
    int rank;
    int size;
    int (*barrier)(void *ctx);
    /* all[r] = rank r's `mine`, for every rank r (MPI_Allgather of one uint64). */
    int (*allgather_u64)(void *ctx, uint64_t mine, uint64_t *all);
    /* recv = every rank's `send` in rank order, lens[r] bytes from rank r
     * (MPI_Allgatherv). */
    int (*allgatherv)(void *ctx, const void *send, uint64_t len, void *recv,
                      const uint64_t *lens);
    /* recv[r] = rank r's send[this rank] (MPI_Alltoall of one uint64 each). */
    int (*alltoall_u64)(void *ctx, const uint64_t *send, uint64_t *recv);
    /* Rank r gets send_lens[r] bytes of `send` (in rank order); recv holds what every
     * rank sent this one, recv_lens[r] bytes from rank r, in rank order (MPI_Alltoallv). */
    int (*alltoallv)(void *ctx, const void *send, const uint64_t *send_lens, void *recv,
                     const uint64_t *recv_lens);
} stripefs_comm_t;

/* amode bits of stripefs_mpi_open. */
#define STRIPEFS_MODE_RDONLY 1
#define STRIPEFS_MODE_WRONLY 2
#define STRIPEFS_MODE_RDWR 4
#define STRIPEFS_MODE_CREATE 8
#define STRIPEFS_MODE_EXCL 16   /* with CREATE: fail with -EEXIST if the file exists */

/* Collective open: every rank of `comm` calls it with the same path and mode; with
 * CREATE, rank 0 creates the file (striping hints apply) before the others open it.
 * hints: NULL or "key=value,key=value" with ROMIO's names (striping_unit,
 * striping_factor, cb_nodes, cb_buffer_size, romio_cb_read, romio_cb_write,
 * ind_rd_buffer_size). The communicator is copied; its ctx must live until close. */
int stripefs_mpi_open(stripefs_t *fs, const stripefs_comm_t *comm, const char *path,
                      int amode, const char *hints, stripefs_mfile_t **out);

/* The file view: displacement in bytes, elementary type and file type in the compact
 * datatype description, e.g. "double" and
 * "subarray([100,100],[50,50],[0,50],C,double)". Grammar:
 *   byte char short int float long double bytes(N) contiguous(n,T)
 *   vector(n,blocklen,stride,T) hvector(n,blocklen,stride_bytes,T)
 *   indexed([len,...],[disp,...],T) hindexed([len,...],[disp_bytes,...],T)
 *   struct([count,...],[disp_bytes,...],[T,...]) subarray([sizes],[subsizes],[starts],C|F,T)
 *   resized(lb,extent,T)
 * Offsets of the calls below are in etypes of the view; lengths are bytes (whole
 * etypes). */
int stripefs_mpi_set_view(stripefs_mfile_t *f, uint64_t disp, const char *etype,
                          const char *filetype);
int stripefs_mpi_write_at(stripefs_mfile_t *f, uint64_t offset, const void *buf, size_t len);
int stripefs_mpi_read_at(stripefs_mfile_t *f, uint64_t offset, void *buf, size_t len);
/* Collective (two-phase) versions: every rank calls them. */
int stripefs_mpi_write_at_all(stripefs_mfile_t *f, uint64_t offset, const void *buf,
                              size_t len);
int stripefs_mpi_read_at_all(stripefs_mfile_t *f, uint64_t offset, void *buf, size_t len);

/* Asynchronous: the request runs behind the caller (requests of one file in the order
 * made). iwrite copies buf at once; iread fills buf by the time stripefs_mpi_wait
 * returns 0, so buf must stay valid until then. */
int stripefs_mpi_iwrite_at(stripefs_mfile_t *f, uint64_t offset, const void *buf, size_t len,
                           stripefs_request_t **req);
int stripefs_mpi_iread_at(stripefs_mfile_t *f, uint64_t offset, void *buf, size_t len,
                          stripefs_request_t **req);
/* Waits for the request, reports its outcome and frees it. */
int stripefs_mpi_wait(stripefs_request_t *req);
/* *done = 1 if the request is complete (stripefs_mpi_wait then returns at once), else 0;
 * the request stays valid either way. */
int stripefs_mpi_test(stripefs_request_t *req, int *done);

/* Collective resize; local size query; local sync of this rank's writes. */
int stripefs_mpi_set_size(stripefs_mfile_t *f, uint64_t size);
int stripefs_mpi_get_size(stripefs_mfile_t *f, uint64_t *size);
int stripefs_mpi_sync(stripefs_mfile_t *f);
/* Collective close: frees the handle; every rank returns once all have closed. */
int stripefs_mpi_close(stripefs_mfile_t *f);

/* ---- list I/O of the MPI-IO layer, for callers that flatten views themselves ----
 * (the Open MPI components). Extents are (offset, length) in bytes of the file, no view;
 * their bytes lie one after another in buf. */
typedef struct stripefs_extent {
    uint64_t offset;
    uint64_t len;
} stripefs_extent_t;

int stripefs_mpi_write_list(stripefs_mfile_t *f, const stripefs_extent_t *ext, size_t n,
                            const void *buf);
int stripefs_mpi_read_list(stripefs_mfile_t *f, const stripefs_extent_t *ext, size_t n,
                           void *buf);
/* Collective (two-phase, file domains aligned to stripes): every rank calls them. */
int stripefs_mpi_write_list_all(stripefs_mfile_t *f, const stripefs_extent_t *ext, size_t n,
                                const void *buf);
int stripefs_mpi_read_list_all(stripefs_mfile_t *f, const stripefs_extent_t *ext, size_t n,
                               void *buf);
/* Asynchronous, as stripefs_mpi_iwrite_at / iread_at (iwrite copies buf at once). */
int stripefs_mpi_iwrite_list(stripefs_mfile_t *f, const stripefs_extent_t *ext, size_t n,
                             const void *buf, stripefs_request_t **req);
int stripefs_mpi_iread_list(stripefs_mfile_t *f, const stripefs_extent_t *ext, size_t n,
                            void *buf, stripefs_request_t **req);
/* The file's stripe size in bytes and number of data servers (either pointer NULL). */
int stripefs_mpi_striping(stripefs_mfile_t *f, uint64_t *stripe_size, uint32_t *stripe_count);

/* Whether a local path (absolute or relative; it need not exist, its directory must)
 * lies under a stripefs FUSE mount of this machine: 1 with the mount's cluster file and
 * the path inside stripefs written to the buffers, 0 if not (or if no cluster file is
 * known for the mount: its daemon names it as mount source, else $STRIPEFS_CLUSTER),
 * or a negative errno. */
int stripefs_resolve_mount_path(const char *path, char *cluster, size_t cluster_len,
                                char *inner, size_t inner_len);

#ifdef __cplusplus
}
#endif

#endif /* STRIPEFS_H */
