/* What the stripefs components share: routing of file names, the process's clients,
 * error classes, I/O arrays. Compiled into each component (hidden symbols); only the
 * fs component connects. */
#include "stripefs_ompi.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/util/output.h"

int sfs_verbose = 0;

static const char PREFIX[] = "stripefs:";

int sfs_route(const char *filename, char *cluster, char *path) {
    if (filename == NULL) return SFS_NOT_OURS;
    if (strncasecmp(filename, PREFIX, sizeof(PREFIX) - 1) == 0) {
        if (cluster != NULL) {
            const char *env = getenv("STRIPEFS_CLUSTER");
            const char *rest = filename + sizeof(PREFIX) - 1;
            cluster[0] = '\0';
            if (env != NULL && strlen(env) < PATH_MAX) strcpy(cluster, env);
            /* "stripefs:name" is "/name": stripefs paths are absolute. */
            if (snprintf(path, PATH_MAX, "%s%s", rest[0] == '/' ? "" : "/", rest) >= PATH_MAX)
                path[0] = '\0';
        }
        return SFS_PREFIX;
    }
    char c[PATH_MAX], p[PATH_MAX];
    int rc = stripefs_resolve_mount_path(filename, c, sizeof c, p, sizeof p);
    if (rc < 0) {
        opal_output(0, "stripefs: %s is on a stripefs mount, but it cannot be served "
                       "natively (%s); it goes through the mount",
                    filename, stripefs_errmsg());
        return SFS_NOT_OURS;
    }
    if (rc == 0) return SFS_NOT_OURS;
    /* A user who may not read the mount's cluster file (mode 0600, another owner) gets
     * the mount and Open MPI's own driver, as without these components. */
    if (access(c, R_OK) != 0) {
        static int said;
        if (!said && sfs_verbose) {
            said = 1;
            opal_output(0, "stripefs: %s: cannot read the mount's cluster file %s; files on the "
                           "mount go through the mount",
                        filename, c);
        }
        return SFS_NOT_OURS;
    }
    if (cluster != NULL) {
        strcpy(cluster, c);
        strcpy(path, p);
    }
    return SFS_MOUNT;
}

/* One client per cluster file: few clusters per process, so a short list. */
struct client {
    char cluster[PATH_MAX];
    stripefs_t *fs;
    struct client *next;
};
static struct client *clients = NULL;
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;

stripefs_t *sfs_client(const char *cluster) {
    stripefs_t *fs = NULL;
    pthread_mutex_lock(&clients_lock);
    for (struct client *c = clients; c != NULL; c = c->next) {
        if (strcmp(c->cluster, cluster) == 0) {
            fs = c->fs;
            break;
        }
    }
    if (fs == NULL) {
        int rc = stripefs_connect(cluster, &fs);
        if (rc != 0) {
            opal_output(0, "stripefs: cannot reach the cluster of %s: %s", cluster,
                        stripefs_errmsg());
            fs = NULL;
        } else {
            struct client *c = calloc(1, sizeof *c);
            if (c == NULL) {
                stripefs_disconnect(fs);
                fs = NULL;
            } else {
                strcpy(c->cluster, cluster);
                c->fs = fs;
                c->next = clients;
                clients = c;
            }
        }
    }
    pthread_mutex_unlock(&clients_lock);
    return fs;
}

void sfs_disconnect_all(void) {
    pthread_mutex_lock(&clients_lock);
    while (clients != NULL) {
        struct client *c = clients;
        clients = c->next;
        stripefs_disconnect(c->fs);
        free(c);
    }
    pthread_mutex_unlock(&clients_lock);
}

int sfs_mpi_error(int neg_errno) {
    switch (-neg_errno) {
    case 0: return MPI_SUCCESS;
    case ENOENT: return MPI_ERR_NO_SUCH_FILE;
    case EACCES:
    case EPERM: return MPI_ERR_ACCESS;
    case EEXIST: return MPI_ERR_FILE_EXISTS;
    case ENOSPC: return MPI_ERR_NO_SPACE;
    case EDQUOT: return MPI_ERR_QUOTA;
    case EROFS: return MPI_ERR_READ_ONLY;
    case ENAMETOOLONG:
    case EISDIR:
    case ENOTDIR: return MPI_ERR_BAD_FILE;
    case EINVAL: return MPI_ERR_ARG;
    case ENOMEM: return MPI_ERR_NO_MEM;
    case ENOSYS:
    case EOPNOTSUPP: return MPI_ERR_UNSUPPORTED_OPERATION;
    default: return MPI_ERR_IO;
    }
}

void sfs_log_failure(const char *what, const char *path, int rc) {
    opal_output(0, "stripefs: %s of %s failed: %s (%s)", what, path, stripefs_errmsg(),
                strerror(-rc));
}

stripefs_extent_t *sfs_extents(const mca_common_ompio_io_array_t *io, int n, int *contiguous,
                               size_t *total) {
    stripefs_extent_t *e = malloc(sizeof *e * (size_t)(n > 0 ? n : 1));
    if (e == NULL) return NULL;
    const char *next = n > 0 ? io[0].memory_address : NULL;
    *contiguous = 1;
    *total = 0;
    for (int i = 0; i < n; i++) {
        e[i].offset = (uint64_t)(intptr_t)io[i].offset;
        e[i].len = io[i].length;
        if ((const char *)io[i].memory_address != next) *contiguous = 0;
        next = (const char *)io[i].memory_address + io[i].length;
        *total += io[i].length;
    }
    return e;
}

void sfs_gather(const mca_common_ompio_io_array_t *io, int n, char *packed) {
    for (int i = 0; i < n; i++) {
        memcpy(packed, io[i].memory_address, io[i].length);
        packed += io[i].length;
    }
}

void sfs_scatter(const mca_common_ompio_io_array_t *io, int n, const char *packed) {
    for (int i = 0; i < n; i++) {
        memcpy(io[i].memory_address, packed, io[i].length);
        packed += io[i].length;
    }
}
