/*
 * mca_fs_stripefs: the fs component of stripefs for OMPIO (Open MPI 4.1): chosen for
 * files named `stripefs:/path` or lying under a stripefs FUSE mount; opens them with
 * the native client (collectively: rank 0 creates, with the striping hints), closes,
 * deletes, resizes, sizes and syncs them.
 */
#include "stripefs_ompi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/mca/fs/base/base.h"
#include "ompi/mca/fs/fs.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"
#include "stripefs_mpi.h"

static int priority = 80;

static int fs_register(void);
static int fs_close_component(void);
static int fs_init_query(bool progress_threads, bool mpi_threads);
static struct mca_fs_base_module_1_0_0_t *fs_file_query(ompio_file_t *fh, int *prio);
static int fs_file_unquery(ompio_file_t *fh);

SFS_EXPORT mca_fs_base_component_2_0_0_t mca_fs_stripefs_component = {
    .fsm_version =
        {
            MCA_FS_BASE_VERSION_2_0_0,
            .mca_component_name = "stripefs",
            MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
            .mca_register_component_params = fs_register,
            .mca_close_component = fs_close_component,
        },
    .fsm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
    .fsm_init_query = fs_init_query,
    .fsm_file_query = fs_file_query,
    .fsm_file_unquery = fs_file_unquery,
};

static int fs_register(void) {
    (void)mca_base_component_var_register(
        &mca_fs_stripefs_component.fsm_version, "priority",
        "Priority of the stripefs fs component for stripefs files (prefix stripefs: or a "
        "path on a stripefs mount)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY,
        &priority);
    (void)mca_base_component_var_register(
        &mca_fs_stripefs_component.fsm_version, "verbose",
        "1: log each file opened through stripefs's native client", MCA_BASE_VAR_TYPE_INT,
        NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY, &sfs_verbose);
    return OMPI_SUCCESS;
}

static int fs_close_component(void) {
    sfs_disconnect_all();
    return OMPI_SUCCESS;
}

static int fs_init_query(bool progress_threads, bool mpi_threads) {
    (void)progress_threads;
    (void)mpi_threads;
    return OMPI_SUCCESS;
}

static int fs_module_init(ompio_file_t *fh) {
    (void)fh;
    return OMPI_SUCCESS;
}

static int fs_module_finalize(ompio_file_t *fh) {
    (void)fh;
    return OMPI_SUCCESS;
}

/* Whether every rank's part of a collective step worked: the first failing rank's MPI
 * error class on every rank (MPI_SUCCESS if none failed). */
static int agree(MPI_Comm comm, int mine) {
    if (comm == MPI_COMM_NULL) return mine;
    int size;
    MPI_Comm_size(comm, &size);
    if (size == 1) return mine;
    /* The smallest nonzero class wins, so that every rank reports the same one. */
    int key = mine == MPI_SUCCESS ? INT_MAX : mine, lowest = INT_MAX;
    if (MPI_Allreduce(&key, &lowest, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return MPI_ERR_IO;
    return lowest == INT_MAX ? MPI_SUCCESS : lowest;
}

/* The hints of `info` libstripefs applies ("key=value,..."); values that are not what
 * the hint takes are left out (and logged), as the standard lets an implementation
 * ignore a hint. */
static void hints_of(opal_info_t *info, const char *path, char *out, size_t len) {
    static const char *numeric[] = {"striping_unit", "striping_factor", "cb_nodes",
                                    "ind_rd_buffer_size"};
    static const char *switches[] = {"romio_cb_read", "romio_cb_write"};
    char value[MPI_MAX_INFO_VAL + 1];
    int flag;
    size_t at = 0;
    out[0] = '\0';
    if (info == NULL) return;
    for (size_t i = 0; i < sizeof numeric / sizeof *numeric; i++) {
        if (opal_info_get(info, numeric[i], MPI_MAX_INFO_VAL, value, &flag) != OPAL_SUCCESS ||
            !flag)
            continue;
        char *end;
        unsigned long long v = strtoull(value, &end, 10);
        if (end == value || *end != '\0' || v == 0) {
            opal_output(0, "stripefs: %s: hint %s=%s ignored (a positive number is needed)",
                        path, numeric[i], value);
            continue;
        }
        at += (size_t)snprintf(out + at, len - at, "%s%s=%llu", at ? "," : "", numeric[i], v);
    }
    for (size_t i = 0; i < sizeof switches / sizeof *switches; i++) {
        if (opal_info_get(info, switches[i], MPI_MAX_INFO_VAL, value, &flag) != OPAL_SUCCESS ||
            !flag)
            continue;
        if (strcmp(value, "enable") && strcmp(value, "disable") && strcmp(value, "automatic")) {
            opal_output(0, "stripefs: %s: hint %s=%s ignored (enable, disable or automatic)",
                        path, switches[i], value);
            continue;
        }
        at += (size_t)snprintf(out + at, len - at, "%s%s=%s", at ? "," : "", switches[i], value);
    }
}

static void set_info(opal_info_t *info, const char *key, const char *value) {
    if (info != NULL) (void)opal_info_set(info, key, value);
}

/* The hints in effect, for MPI_File_get_info. */
static void report_hints(opal_info_t *info, ompio_file_t *fh, sfs_file_t *f) {
    char v[64];
    uint64_t unit = 0;
    uint32_t count = 0;
    if (info == NULL || stripefs_mpi_striping(f->mf, &unit, &count) != 0) return;
    snprintf(v, sizeof v, "%llu", (unsigned long long)unit);
    set_info(info, "striping_unit", v);
    snprintf(v, sizeof v, "%u", count);
    set_info(info, "striping_factor", v);
    char given[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    if (opal_info_get(info, "cb_nodes", MPI_MAX_INFO_VAL, given, &flag) != OPAL_SUCCESS ||
        !flag) {
        /* One aggregator per data server of the file, at most one per rank. */
        snprintf(v, sizeof v, "%d", (int)count < fh->f_size ? (int)count : fh->f_size);
        set_info(info, "cb_nodes", v);
    }
    if (opal_info_get(info, "cb_buffer_size", MPI_MAX_INFO_VAL, given, &flag) != OPAL_SUCCESS ||
        !flag) {
        snprintf(v, sizeof v, "%d", fh->f_bytes_per_agg);
        set_info(info, "cb_buffer_size", v);
    }
    static const char *switches[] = {"romio_cb_read", "romio_cb_write"};
    for (int i = 0; i < 2; i++) {
        if (opal_info_get(info, switches[i], MPI_MAX_INFO_VAL, given, &flag) != OPAL_SUCCESS ||
            !flag)
            set_info(info, switches[i], "automatic");
    }
    set_info(info, "stripefs_client", "native");
}

static int fs_file_open(struct ompi_communicator_t *comm, const char *filename, int amode,
                        struct opal_info_t *info, ompio_file_t *fh) {
    char cluster[PATH_MAX];
    sfs_file_t *f = calloc(1, sizeof *f);
    int err = MPI_SUCCESS;
    stripefs_t *fs = NULL;
    if (f == NULL) {
        err = MPI_ERR_NO_MEM;
    } else if (sfs_route(filename, cluster, f->path) == SFS_NOT_OURS || f->path[0] == '\0') {
        opal_output(0, "stripefs: %s: no stripefs path", filename);
        err = MPI_ERR_BAD_FILE;
    } else if (cluster[0] == '\0') {
        opal_output(0, "stripefs: %s: STRIPEFS_CLUSTER is not set, so no cluster is known "
                       "for a stripefs: file name",
                    filename);
        err = MPI_ERR_IO;
    } else if ((fs = sfs_client(cluster)) == NULL) {
        err = MPI_ERR_IO;
    }
    /* Every rank must be able to take part before the collective open. */
    err = agree(comm, err);
    if (err != MPI_SUCCESS) {
        free(f);
        return err;
    }
    f->mpi_comm = comm;
    stripefs_comm_from_mpi(&f->mpi_comm, &f->comm);
    int mode = (amode & MPI_MODE_RDONLY)   ? STRIPEFS_MODE_RDONLY
               : (amode & MPI_MODE_WRONLY) ? STRIPEFS_MODE_WRONLY
                                           : STRIPEFS_MODE_RDWR;
    if (amode & MPI_MODE_CREATE) mode |= STRIPEFS_MODE_CREATE;
    if ((amode & MPI_MODE_CREATE) && (amode & MPI_MODE_EXCL)) mode |= STRIPEFS_MODE_EXCL;
    char hints[1024];
    hints_of(info, filename, hints, sizeof hints);
    int rc = stripefs_mpi_open(fs, &f->comm, f->path, mode, hints, &f->mf);
    if (rc != 0) {
        /* Every rank gets the same class (the layer agrees on the first failure). */
        if (rc != -ENOENT && rc != -EEXIST) sfs_log_failure("open", f->path, rc);
        free(f);
        return sfs_mpi_error(rc);
    }
    uint64_t unit = 0;
    uint32_t count = 0;
    (void)stripefs_mpi_striping(f->mf, &unit, &count);
    fh->fd = -1;
    fh->f_fs_ptr = f;
    /* As Lustre's component does: OMPIO's own aggregation then aligns to stripes. */
    fh->f_stripe_size = (size_t)unit;
    fh->f_stripe_count = (int)count;
    report_hints(info, fh, f);
    if (sfs_verbose && fh->f_rank == 0)
        opal_output(0, "stripefs: %s opened with the native client as %s (stripe %llu x %u)",
                    filename, f->path, (unsigned long long)unit, count);
    return OMPI_SUCCESS;
}

static int fs_file_close(ompio_file_t *fh) {
    sfs_file_t *f = fh->f_fs_ptr;
    if (f == NULL) return OMPI_SUCCESS;
    int deferred = f->deferred_error;
    int rc = stripefs_mpi_close(f->mf); /* collective: returns once every rank closed */
    int err = rc ? sfs_mpi_error(rc) : deferred;
    if (rc) sfs_log_failure("close", f->path, rc);
    if (fh->f_amode & MPI_MODE_DELETE_ON_CLOSE) {
        /* Done here, once, by rank 0 after every rank closed; OMPIO's own delete (which
         * every rank would make) is switched off for this file. */
        fh->f_amode &= ~MPI_MODE_DELETE_ON_CLOSE;
        if (fh->f_rank == 0) {
            char cluster[PATH_MAX], path[PATH_MAX];
            stripefs_t *fs = NULL;
            if (sfs_route(fh->f_filename, cluster, path) != SFS_NOT_OURS &&
                (fs = sfs_client(cluster)) != NULL) {
                int d = stripefs_unlink(fs, f->path);
                if (d != 0 && d != -ENOENT) {
                    sfs_log_failure("delete on close", f->path, d);
                    if (err == MPI_SUCCESS) err = sfs_mpi_error(d);
                }
            }
        }
    }
    fh->f_fs_ptr = NULL;
    free(f);
    return err;
}

static int fs_file_delete(char *filename, struct opal_info_t *info) {
    (void)info;
    char cluster[PATH_MAX], path[PATH_MAX];
    if (sfs_route(filename, cluster, path) == SFS_NOT_OURS || path[0] == '\0')
        return MPI_ERR_BAD_FILE;
    if (cluster[0] == '\0') {
        opal_output(0, "stripefs: %s: STRIPEFS_CLUSTER is not set", filename);
        return MPI_ERR_IO;
    }
    stripefs_t *fs = sfs_client(cluster);
    if (fs == NULL) return MPI_ERR_IO;
    int rc = stripefs_unlink(fs, path);
    if (rc != 0 && rc != -ENOENT) sfs_log_failure("delete", path, rc);
    return sfs_mpi_error(rc);
}

static int fs_file_set_size(ompio_file_t *fh, OMPI_MPI_OFFSET_TYPE size) {
    sfs_file_t *f = fh->f_fs_ptr;
    if (size < 0) return MPI_ERR_ARG;
    int rc = stripefs_mpi_set_size(f->mf, (uint64_t)size); /* collective */
    if (rc) sfs_log_failure("resize", f->path, rc);
    return rc ? sfs_mpi_error(rc) : f->deferred_error;
}

static int fs_file_get_size(ompio_file_t *fh, OMPI_MPI_OFFSET_TYPE *size) {
    sfs_file_t *f = fh->f_fs_ptr;
    uint64_t s = 0;
    int rc = stripefs_mpi_get_size(f->mf, &s);
    if (rc) {
        sfs_log_failure("size query", f->path, rc);
        return sfs_mpi_error(rc);
    }
    *size = (OMPI_MPI_OFFSET_TYPE)s;
    return OMPI_SUCCESS;
}

static int fs_file_sync(ompio_file_t *fh) {
    sfs_file_t *f = fh->f_fs_ptr;
    int rc = stripefs_mpi_sync(f->mf);
    if (rc) sfs_log_failure("sync", f->path, rc);
    int err = rc ? sfs_mpi_error(rc) : f->deferred_error;
    f->deferred_error = MPI_SUCCESS;
    /* MPI_File_sync is collective: no rank returns before every rank's writes are
     * durable, and all report the first failure. */
    return agree(f->mpi_comm, err);
}

static mca_fs_base_module_1_0_0_t module = {
    fs_module_init, fs_module_finalize, fs_file_open,     fs_file_close,
    fs_file_delete, fs_file_set_size,   fs_file_get_size, fs_file_sync,
};

static struct mca_fs_base_module_1_0_0_t *fs_file_query(ompio_file_t *fh, int *prio) {
    int route = sfs_route(fh->f_filename, NULL, NULL);
    /* Every rank must pick the same component: rank 0's view of the name decides (a
     * delete's handle has no communicator and decides alone). */
    if (fh->f_comm != MPI_COMM_NULL && fh->f_comm != NULL && ompi_comm_size(fh->f_comm) > 1)
        fh->f_comm->c_coll->coll_bcast(&route, 1, MPI_INT, 0, fh->f_comm,
                                       fh->f_comm->c_coll->coll_bcast_module);
    if (route == SFS_NOT_OURS) {
        *prio = 0;
        return NULL;
    }
    *prio = priority;
    return &module;
}

static int fs_file_unquery(ompio_file_t *fh) {
    (void)fh;
    return OMPI_SUCCESS;
}
