/*
 * mca_fbtl_stripefs: the fbtl component of stripefs for OMPIO (Open MPI 4.1): an I/O
 * array (offset-length list) of OMPIO as one stripefs list read or write (a request per
 * data server, not one per entry), and the nonblocking forms run by the client's own I/O
 * thread, so that MPI_File_iwrite_at / iread_at overlap with computation and
 * MPI_Test / MPI_Wait only look at the outcome. Chosen only for files the stripefs fs
 * component opened.
 */
#include "stripefs_ompi.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/mca/common/ompio/common_ompio_request.h"
#include "ompi/mca/fbtl/base/base.h"
#include "ompi/mca/fbtl/fbtl.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"

static int priority = 80;

static int fbtl_register(void);
static int fbtl_init_query(bool progress_threads, bool mpi_threads);
static struct mca_fbtl_base_module_1_0_0_t *fbtl_file_query(ompio_file_t *fh, int *prio);
static int fbtl_file_unquery(ompio_file_t *fh);

SFS_EXPORT mca_fbtl_base_component_2_0_0_t mca_fbtl_stripefs_component = {
    .fbtlm_version =
        {
            MCA_FBTL_BASE_VERSION_2_0_0,
            .mca_component_name = "stripefs",
            MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
            .mca_register_component_params = fbtl_register,
        },
    .fbtlm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
    .fbtlm_init_query = fbtl_init_query,
    .fbtlm_file_query = fbtl_file_query,
    .fbtlm_file_unquery = fbtl_file_unquery,
};

static int fbtl_register(void) {
    (void)mca_base_component_var_register(
        &mca_fbtl_stripefs_component.fbtlm_version, "priority",
        "Priority of the stripefs fbtl component for files of the stripefs fs component",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY,
        &priority);
    return OMPI_SUCCESS;
}

static int fbtl_init_query(bool progress_threads, bool mpi_threads) {
    (void)progress_threads;
    (void)mpi_threads;
    return OMPI_SUCCESS;
}

static int module_init(ompio_file_t *fh) {
    (void)fh;
    return OMPI_SUCCESS;
}

static int module_finalize(ompio_file_t *fh) {
    (void)fh;
    return OMPI_SUCCESS;
}

/* Atomic mode is not honoured by stripefs (a write over several data servers is not one
 * atomic step): refused at the first read or write, never ignored. */
static int refuse_atomic(ompio_file_t *fh, sfs_file_t *f) {
    if (!fh->f_atomicity) return 0;
    opal_output(0, "stripefs: %s: atomic mode (MPI_File_set_atomicity) is not supported; "
                   "the I/O is refused",
                f->path);
    if (f->deferred_error == MPI_SUCCESS) f->deferred_error = MPI_ERR_UNSUPPORTED_OPERATION;
    return 1;
}

/* A failure OMPIO may drop: logged, kept for the next sync, set_size or close. */
static ssize_t failed(sfs_file_t *f, const char *what, int rc) {
    sfs_log_failure(what, f->path, rc);
    if (f->deferred_error == MPI_SUCCESS) f->deferred_error = sfs_mpi_error(rc);
    return OMPI_ERROR;
}

static ssize_t blocking(ompio_file_t *fh, int write) {
    sfs_file_t *f = fh->f_fs_ptr;
    int n = fh->f_num_of_io_entries, contiguous;
    size_t total;
    if (refuse_atomic(fh, f)) return OMPI_ERROR;
    if (n <= 0) return 0;
    stripefs_extent_t *ext = sfs_extents(fh->f_io_array, n, &contiguous, &total);
    if (ext == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
    char *packed = contiguous ? fh->f_io_array[0].memory_address : malloc(total ? total : 1);
    int rc;
    if (packed == NULL) {
        free(ext);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    if (write) {
        if (!contiguous) sfs_gather(fh->f_io_array, n, packed);
        rc = stripefs_mpi_write_list(f->mf, ext, (size_t)n, packed);
    } else {
        rc = stripefs_mpi_read_list(f->mf, ext, (size_t)n, packed);
        if (rc == 0 && !contiguous) sfs_scatter(fh->f_io_array, n, packed);
    }
    if (!contiguous) free(packed);
    free(ext);
    if (rc != 0) return failed(f, write ? "write" : "read", rc);
    return (ssize_t)total;
}

static ssize_t sfs_preadv(ompio_file_t *fh) { return blocking(fh, 0); }
static ssize_t sfs_pwritev(ompio_file_t *fh) { return blocking(fh, 1); }

/* A nonblocking request's own data (mca_ompio_request_t.req_data). */
struct pending {
    sfs_file_t *f;
    stripefs_request_t *req; /* NULL once waited for */
    int write;
    size_t total;
    /* A read into noncontiguous memory: the packed bytes and where they go. */
    char *packed;
    mca_common_ompio_io_array_t *io;
    int n;
};

static bool progress(mca_ompio_request_t *r) {
    struct pending *p = r->req_data;
    int done = 0;
    if (p == NULL || p->req == NULL) return true;
    if (stripefs_mpi_test(p->req, &done) != 0 || done) {
        int rc = stripefs_mpi_wait(p->req);
        p->req = NULL;
        if (rc == 0 && p->packed != NULL) sfs_scatter(p->io, p->n, p->packed);
        if (rc != 0) {
            (void)failed(p->f, p->write ? "nonblocking write" : "nonblocking read", rc);
            r->req_ompi.req_status.MPI_ERROR = sfs_mpi_error(rc);
            r->req_ompi.req_status._ucount = 0;
        } else {
            r->req_ompi.req_status.MPI_ERROR = OMPI_SUCCESS;
            r->req_ompi.req_status._ucount = p->total;
        }
        return true;
    }
    return false;
}

static void request_free(mca_ompio_request_t *r) {
    struct pending *p = r->req_data;
    if (p == NULL) return;
    if (p->req != NULL) (void)stripefs_mpi_wait(p->req); /* the buffer is still ours */
    free(p->packed);
    free(p->io);
    free(p);
    r->req_data = NULL;
}

static ssize_t nonblocking(ompio_file_t *fh, ompi_request_t *request, int write) {
    mca_ompio_request_t *r = (mca_ompio_request_t *)request;
    sfs_file_t *f = fh->f_fs_ptr;
    int n = fh->f_num_of_io_entries, contiguous;
    size_t total;
    if (refuse_atomic(fh, f)) return OMPI_ERROR;
    struct pending *p = calloc(1, sizeof *p);
    stripefs_extent_t *ext = sfs_extents(fh->f_io_array, n, &contiguous, &total);
    if (p == NULL || ext == NULL) {
        free(p);
        free(ext);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    p->f = f;
    p->write = write;
    p->total = total;
    int rc;
    if (write) {
        /* The layer copies the bytes at once: the I/O array may go after this call. */
        char *src = contiguous ? fh->f_io_array[0].memory_address : malloc(total ? total : 1);
        if (src == NULL) {
            free(p);
            free(ext);
            return OMPI_ERR_OUT_OF_RESOURCE;
        }
        if (!contiguous) sfs_gather(fh->f_io_array, n, src);
        rc = stripefs_mpi_iwrite_list(f->mf, ext, (size_t)n, src, &p->req);
        if (!contiguous) free(src);
    } else {
        char *dst = fh->f_io_array[0].memory_address;
        if (!contiguous) {
            /* OMPIO frees its I/O array when this returns: keep a copy for the scatter. */
            p->io = malloc(sizeof *p->io * (size_t)n);
            p->packed = malloc(total ? total : 1);
            if (p->io == NULL || p->packed == NULL) {
                free(p->io);
                free(p->packed);
                free(p);
                free(ext);
                return OMPI_ERR_OUT_OF_RESOURCE;
            }
            memcpy(p->io, fh->f_io_array, sizeof *p->io * (size_t)n);
            p->n = n;
            dst = p->packed;
        }
        rc = stripefs_mpi_iread_list(f->mf, ext, (size_t)n, dst, &p->req);
    }
    free(ext);
    if (rc != 0) {
        free(p->io);
        free(p->packed);
        free(p);
        return failed(f, write ? "nonblocking write" : "nonblocking read", rc);
    }
    r->req_data = p;
    r->req_progress_fn = progress;
    r->req_free_fn = request_free;
    return OMPI_SUCCESS;
}

static ssize_t ipreadv(ompio_file_t *fh, ompi_request_t *request) {
    return nonblocking(fh, request, 0);
}

static ssize_t ipwritev(ompio_file_t *fh, ompi_request_t *request) {
    return nonblocking(fh, request, 1);
}

static mca_fbtl_base_module_1_0_0_t module = {
    module_init, module_finalize, sfs_preadv, ipreadv, sfs_pwritev, ipwritev, progress, request_free,
};

/* Is the file's fs component stripefs's? (fs is chosen before the fbtl.) */
static int ours(ompio_file_t *fh) {
    return fh->f_fs_component != NULL &&
           strcmp(fh->f_fs_component->mca_component_name, "stripefs") == 0;
}

static struct mca_fbtl_base_module_1_0_0_t *fbtl_file_query(ompio_file_t *fh, int *prio) {
    if (!ours(fh)) {
        *prio = 0;
        return NULL;
    }
    *prio = priority;
    return &module;
}

static int fbtl_file_unquery(ompio_file_t *fh) {
    (void)fh;
    return OMPI_SUCCESS;
}
