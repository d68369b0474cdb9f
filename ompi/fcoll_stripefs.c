/*
 * mca_fcoll_stripefs: the fcoll component of stripefs for OMPIO (Open MPI 4.1): a
 * collective read or write of a file of the stripefs fs component through stripefs's
 * own two-phase I/O (aggregators owning stripe-aligned file domains, one per data server
 * of the file unless cb_nodes says otherwise; romio_cb_read / romio_cb_write = disable
 * makes the call independent list I/O of each rank). Each rank's part of the call is
 * flattened with OMPIO's own file view, its memory packed if it is not contiguous.
 */
#include "stripefs_ompi.h"

#include <stdlib.h>
#include <string.h>

#include "ompi/mca/fcoll/base/base.h"
#include "ompi/mca/fcoll/fcoll.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"

static int priority = 80;

static int fcoll_register(void);
static int fcoll_init_query(bool progress_threads, bool mpi_threads);
static struct mca_fcoll_base_module_1_0_0_t *fcoll_file_query(ompio_file_t *fh, int *prio);
static int fcoll_file_unquery(ompio_file_t *fh);

SFS_EXPORT mca_fcoll_base_component_2_0_0_t mca_fcoll_stripefs_component = {
    .fcollm_version =
        {
            MCA_FCOLL_BASE_VERSION_2_0_0,
            .mca_component_name = "stripefs",
            MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
            .mca_register_component_params = fcoll_register,
        },
    .fcollm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
    .fcollm_init_query = fcoll_init_query,
    .fcollm_file_query = fcoll_file_query,
    .fcollm_file_unquery = fcoll_file_unquery,
};

static int fcoll_register(void) {
    (void)mca_base_component_var_register(
        &mca_fcoll_stripefs_component.fcollm_version, "priority",
        "Priority of the stripefs fcoll component for files of the stripefs fs component "
        "(0: leave collective I/O to Open MPI's own components over the stripefs fbtl)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY,
        &priority);
    return OMPI_SUCCESS;
}

static int fcoll_init_query(bool progress_threads, bool mpi_threads) {
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

/* This rank's part of a collective call: file extents (from the current position of
 * the view, which moves past them) and the memory as a packed buffer or the user's. */
struct part {
    stripefs_extent_t *ext;
    size_t n;
    size_t bytes;
    struct iovec *mem;
    uint32_t mem_n;
    char *packed; /* NULL when the memory is one contiguous run, at mem[0] */
};

static int part_of(ompio_file_t *fh, const void *buf, int count, struct ompi_datatype_t *dt,
                   struct part *p) {
    memset(p, 0, sizeof *p);
    struct iovec *file_iov = NULL;
    int file_n = 0;
    int ret = mca_common_ompio_decode_datatype(fh, dt, count, buf, &p->bytes,
                                               fh->f_mem_convertor, &p->mem, &p->mem_n);
    if (ret != OMPI_SUCCESS) return ret;
    if (p->bytes > 0) {
        ret = fh->f_generate_current_file_view(fh, p->bytes, &file_iov, &file_n);
        if (ret != OMPI_SUCCESS) return ret;
    }
    p->ext = malloc(sizeof *p->ext * (size_t)(file_n > 0 ? file_n : 1));
    if (p->ext == NULL) {
        free(file_iov);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    for (int i = 0; i < file_n; i++) {
        p->ext[i].offset = (uint64_t)(intptr_t)file_iov[i].iov_base;
        p->ext[i].len = file_iov[i].iov_len;
    }
    p->n = (size_t)file_n;
    free(file_iov);
    int contiguous = 1;
    for (uint32_t i = 1; i < p->mem_n; i++)
        if ((char *)p->mem[i].iov_base !=
            (char *)p->mem[i - 1].iov_base + p->mem[i - 1].iov_len)
            contiguous = 0;
    if (!contiguous) {
        p->packed = malloc(p->bytes ? p->bytes : 1);
        if (p->packed == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
    }
    return OMPI_SUCCESS;
}

static char *memory_of(struct part *p) {
    if (p->packed != NULL) return p->packed;
    return p->mem_n > 0 ? p->mem[0].iov_base : NULL;
}

static void part_free(struct part *p) {
    free(p->ext);
    free(p->mem);
    free(p->packed);
}

/* Every rank calls the collective even if its own part could not be built, so that
 * no rank waits for it forever: a rank that failed takes part with nothing and
 * reports its failure. */
static int collective(ompio_file_t *fh, void *buf, int count, struct ompi_datatype_t *dt,
                      ompi_status_public_t *status, int write) {
    sfs_file_t *f = fh->f_fs_ptr;
    struct part p;
    int ret = part_of(fh, buf, count, dt, &p);
    if (fh->f_atomicity) {
        opal_output(0, "stripefs: %s: atomic mode (MPI_File_set_atomicity) is not "
                       "supported; the collective I/O is refused",
                    f->path);
        ret = MPI_ERR_UNSUPPORTED_OPERATION;
    }
    int rc;
    if (ret != OMPI_SUCCESS) {
        rc = write ? stripefs_mpi_write_list_all(f->mf, NULL, 0, NULL)
                   : stripefs_mpi_read_list_all(f->mf, NULL, 0, NULL);
        part_free(&p);
        return ret;
    }
    char *mem = memory_of(&p);
    if (write) {
        if (p.packed != NULL) {
            char *at = p.packed;
            for (uint32_t i = 0; i < p.mem_n; i++) {
                memcpy(at, p.mem[i].iov_base, p.mem[i].iov_len);
                at += p.mem[i].iov_len;
            }
        }
        rc = stripefs_mpi_write_list_all(f->mf, p.ext, p.n, mem);
    } else {
        rc = stripefs_mpi_read_list_all(f->mf, p.ext, p.n, mem);
        if (rc == 0 && p.packed != NULL) {
            const char *at = p.packed;
            for (uint32_t i = 0; i < p.mem_n; i++) {
                memcpy(p.mem[i].iov_base, at, p.mem[i].iov_len);
                at += p.mem[i].iov_len;
            }
        }
    }
    size_t bytes = p.bytes;
    part_free(&p);
    if (rc != 0) {
        sfs_log_failure(write ? "collective write" : "collective read", f->path, rc);
        return sfs_mpi_error(rc);
    }
    if (status != MPI_STATUS_IGNORE) status->_ucount = bytes;
    return OMPI_SUCCESS;
}

static int read_all(ompio_file_t *fh, void *buf, int count, struct ompi_datatype_t *dt,
                    ompi_status_public_t *status) {
    return collective(fh, buf, count, dt, status, 0);
}

static int write_all(ompio_file_t *fh, const void *buf, int count, struct ompi_datatype_t *dt,
                     ompi_status_public_t *status) {
    return collective(fh, (void *)buf, count, dt, status, 1);
}

static mca_fcoll_base_module_1_0_0_t module = {
    module_init, module_finalize, read_all, NULL, write_all, NULL, NULL, NULL,
};

static struct mca_fcoll_base_module_1_0_0_t *fcoll_file_query(ompio_file_t *fh, int *prio) {
    if (priority <= 0 || fh->f_fs_component == NULL ||
        strcmp(fh->f_fs_component->mca_component_name, "stripefs") != 0) {
        *prio = 0;
        return NULL;
    }
    *prio = priority;
    return &module;
}

static int fcoll_file_unquery(ompio_file_t *fh) {
    (void)fh;
    return OMPI_SUCCESS;
}
