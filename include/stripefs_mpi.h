/*
 * stripefs_mpi.h: a stripefs_comm_t for an MPI communicator, header-only, so that
 * libstripefs.so itself needs no MPI. Build with mpicc:
 *
 *   MPI_Comm comm = MPI_COMM_WORLD;
 *   stripefs_comm_t c;
 *   stripefs_comm_from_mpi(&comm, &c);   // `comm` must outlive the files opened with c
 *   stripefs_mpi_open(fs, &c, "/out", STRIPEFS_MODE_RDWR | STRIPEFS_MODE_CREATE, NULL, &f);
 *
 * Counts go to MPI as int: one rank's part of a collective call must stay under 2 GiB
 * (the callbacks fail with 1 otherwise).
 */
#ifndef STRIPEFS_MPI_H
#define STRIPEFS_MPI_H

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#include "stripefs.h"

static int stripefs_mpi_barrier_(void *ctx) {
    return MPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : 1;
}

static int stripefs_mpi_allgather_u64_(void *ctx, uint64_t mine, uint64_t *all) {
    return MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, *(MPI_Comm *)ctx) ==
                   MPI_SUCCESS
               ? 0
               : 1;
}

/* int counts and displacements of `lens` (n of them); 1 if they do not fit an int. */
static int stripefs_mpi_counts_(const uint64_t *lens, int n, int *counts, int *displs) {
    uint64_t at = 0;
    for (int r = 0; r < n; r++) {
        if (lens[r] > INT_MAX || at > INT_MAX) return 1;
        counts[r] = (int)lens[r];
        displs[r] = (int)at;
        at += lens[r];
    }
    return at > INT_MAX ? 1 : 0;
}

static int stripefs_mpi_allgatherv_(void *ctx, const void *send, uint64_t len, void *recv,
                                    const uint64_t *lens) {
    MPI_Comm comm = *(MPI_Comm *)ctx;
    int n, rc = 1;
    MPI_Comm_size(comm, &n);
    int *counts = malloc(sizeof(int) * (size_t)n), *displs = malloc(sizeof(int) * (size_t)n);
    if (counts && displs && len <= INT_MAX && stripefs_mpi_counts_(lens, n, counts, displs) == 0)
        rc = MPI_Allgatherv(send, (int)len, MPI_BYTE, recv, counts, displs, MPI_BYTE, comm) ==
                     MPI_SUCCESS
                 ? 0
                 : 1;
    free(counts);
    free(displs);
    return rc;
}

static int stripefs_mpi_alltoall_u64_(void *ctx, const uint64_t *send, uint64_t *recv) {
    return MPI_Alltoall(send, 1, MPI_UINT64_T, recv, 1, MPI_UINT64_T, *(MPI_Comm *)ctx) ==
                   MPI_SUCCESS
               ? 0
               : 1;
}

static int stripefs_mpi_alltoallv_(void *ctx, const void *send, const uint64_t *send_lens,
                                   void *recv, const uint64_t *recv_lens) {
    MPI_Comm comm = *(MPI_Comm *)ctx;
    int n, rc = 1;
    MPI_Comm_size(comm, &n);
    size_t b = sizeof(int) * (size_t)n;
    int *sc = malloc(b), *sd = malloc(b), *rcnt = malloc(b), *rd = malloc(b);
    if (sc && sd && rcnt && rd && stripefs_mpi_counts_(send_lens, n, sc, sd) == 0 &&
        stripefs_mpi_counts_(recv_lens, n, rcnt, rd) == 0)
        rc = MPI_Alltoallv(send, sc, sd, MPI_BYTE, recv, rcnt, rd, MPI_BYTE, comm) ==
                     MPI_SUCCESS
                 ? 0
                 : 1;
    free(sc);
    free(sd);
    free(rcnt);
    free(rd);
    return rc;
}

/* Fills `out` for `*comm`, which must stay valid while files opened with it are open. */
static inline void stripefs_comm_from_mpi(MPI_Comm *comm, stripefs_comm_t *out) {
    out->ctx = comm;
    MPI_Comm_rank(*comm, &out->rank);
    MPI_Comm_size(*comm, &out->size);
    out->barrier = stripefs_mpi_barrier_;
    out->allgather_u64 = stripefs_mpi_allgather_u64_;
    out->allgatherv = stripefs_mpi_allgatherv_;
    out->alltoall_u64 = stripefs_mpi_alltoall_u64_;
    out->alltoallv = stripefs_mpi_alltoallv_;
}

#endif /* STRIPEFS_MPI_H */
