/*
 * pd_comm_impl.h - the communicator implementations' entry points inside
 * pdit. Not installed: a backend is no public type, and pd_comm.c's choice
 * of world is the only caller of the MPI file's functions, so none of this
 * is exported from libpdit.so.
 */
#ifndef PD_COMM_IMPL_H
#define PD_COMM_IMPL_H

#include "pd_comm.h"

struct pd_backend;

/* A communicator over BE's buffers, on top of INNER (borrowed; its rank,
 * size and name): every operation copies what it sends out of BE's memory
 * into pinned host buffers, runs INNER's, and copies what it receives back
 * into BE's memory. Only BE's buffers may be passed to it. Freed with its
 * ops->free (INNER stays). */
int pd_comm_staged_new(struct pd_comm *inner, struct pd_backend *be, struct pd_comm **out);

/* A communicator over NCCL beside HOST (borrowed; bootstrapped over it,
 * every rank of HOST calls this together), on the CUDA stream STREAM (the
 * backend's queue): it takes device buffers as they are, one GPU a
 * process. -1 with a message where pdit was built without NCCL or NCCL
 * refuses (two processes on one GPU). */
int pd_comm_nccl_new(struct pd_comm *host, void *stream, struct pd_comm **out);

/* The CPU share of a process that counts alone: the CPUs it may use, the
 * machine's (or its container's) online ones. */
void pd_comm_cpu_alone(struct pd_cpu_share *s);

#ifdef PDIT_MPI
/* pd_comm_mpi.c: the world over MPI and what only MPI knows (the
 * machine's processes, where each rank waits). */
int pd_comm_mpi_world_init(int *argc, char ***argv, struct pd_comm **world);
void pd_comm_mpi_finalize(void);
void pd_comm_mpi_cpu_share(struct pd_cpu_share *s);
int pd_comm_mpi_local_size(struct pd_comm *world);
const char *pd_comm_mpi_activity(void);
#endif

#endif
