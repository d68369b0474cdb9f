/*
 * The Open MPI components of stripefs (fs, fbtl and fcoll "stripefs"), for OMPIO, the
 * MPI-IO implementation of Open MPI 4.1: what they share. Each component is its own
 * shared object (mca_<framework>_stripefs.so) over one libstripefs.so, so the client
 * and its connections are the process's, whichever component uses them.
 *
 * A file is served by these components when its name has the `stripefs:` prefix
 * (`stripefs:/dir/file`, the cluster from $STRIPEFS_CLUSTER) or lies under a stripefs
 * FUSE mount (the mount's own cluster file); anything else is left to Open MPI's own
 * drivers.
 */
#ifndef STRIPEFS_OMPI_H
#define STRIPEFS_OMPI_H

#include "ompi_config.h"

#include <limits.h>
#include <stdint.h>

#include "mpi.h"
#include "ompi/mca/common/ompio/common_ompio.h"

#include "stripefs.h"

/* The component structure is the one symbol Open MPI looks up in each object; the
 * rest is hidden (-fvisibility=hidden). */
#define SFS_EXPORT __attribute__((visibility("default")))

/* What a file open through the stripefs fs component keeps (ompio_file_t.f_fs_ptr). */
typedef struct sfs_file {
    stripefs_mfile_t *mf;
    /* The communicator the callbacks of `comm` use (the file's, which OMPIO keeps until
     * close). */
    MPI_Comm mpi_comm;
    stripefs_comm_t comm;
    char path[PATH_MAX]; /* inside stripefs */
    /* The first failure of an I/O call that OMPIO could not report (Open MPI 4.1 drops
     * an fbtl's error and returns MPI_SUCCESS with a short count): reported by the next
     * MPI_File_sync, set_size and close of the file, as an MPI error class. */
    int deferred_error;
} sfs_file_t;

/* How a file name is reached: not through stripefs, by the prefix, or on a mount. */
enum sfs_route { SFS_NOT_OURS = 0, SFS_PREFIX = 1, SFS_MOUNT = 2 };

/* How `filename` is reached; with `cluster` and `path` non-NULL (PATH_MAX bytes each),
 * also the cluster file and the path inside stripefs. Logs why a stripefs mount path
 * cannot be served natively (and answers SFS_NOT_OURS, so the mount serves it). */
int sfs_route(const char *filename, char *cluster, char *path);

/* The process's client for a cluster file (connected at first use, kept until the
 * fs component closes), or NULL with the reason logged. */
stripefs_t *sfs_client(const char *cluster);
void sfs_disconnect_all(void);

/* The MPI error class of a negative errno from libstripefs. */
int sfs_mpi_error(int neg_errno);

/* Logs a failed libstripefs call (its message names the file and the server). */
void sfs_log_failure(const char *what, const char *path, int rc);

/* Verbosity (MCA parameter fs_stripefs_verbose): 1 logs each file opened natively. */
extern int sfs_verbose;

/* An I/O array of OMPIO (f_io_array) as stripefs extents, and whether its memory is one
 * contiguous run starting at the first entry's address. NULL when out of memory. */
stripefs_extent_t *sfs_extents(const mca_common_ompio_io_array_t *io, int n, int *contiguous,
                               size_t *total);

/* Copies between the I/O array's memory and one packed buffer. */
void sfs_gather(const mca_common_ompio_io_array_t *io, int n, char *packed);
void sfs_scatter(const mca_common_ompio_io_array_t *io, int n, const char *packed);

#endif /* STRIPEFS_OMPI_H */
