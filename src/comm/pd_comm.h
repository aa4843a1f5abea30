/*
 * pd_comm.h - the communicator interface: the collectives and point-to-point
 * transfers the parallel methods need, with one implementation per file
 * (pd_comm_mpi.c, pd_comm_self.c; inside pdit the staged and NCCL ones over
 * a backend's device buffers).
 *
 *   struct pd_comm *world;
 *   pd_comm_world_init(&argc, &argv, &world);   // size 1 without mpirun/srun
 *   world->ops->allreduce(world, buf, n, PD_COMM_F32, PD_COMM_SUM);
 *   pd_comm_world_finalize(world);
 *
 * Buffers are host memory. Inside pdit, a backend whose memory is not (a
 * GPU's) hands its buffers to a staged communicator, which copies them
 * through pinned host buffers around the host communicator's operations,
 * or to NCCL's. Sizes are in bytes except where a count of
 * typed elements is asked for. Every operation returns 0 or -1 with a
 * message; MPI's own errors abort the job (MPI_ERRORS_ARE_FATAL), which is
 * what the caller would do anyway.
 *
 * A rank that waits in an operation longer than the communicator's
 * timeout_s seconds (0: forever) asks the other ranks of that communicator what they are
 * doing, prints which are missing and what the others wait for, and ends
 * the job: a hang becomes a report.
 */
#ifndef PD_COMM_H
#define PD_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "pd_api.h"

#ifdef __cplusplus
extern "C" {
#endif

enum pd_comm_type { PD_COMM_F32, PD_COMM_F64, PD_COMM_I32, PD_COMM_I64 };
enum pd_comm_op { PD_COMM_SUM, PD_COMM_MAX, PD_COMM_MIN };

struct pd_comm;

/* A pending non-blocking transfer. */
struct pd_comm_req {
	unsigned char opaque[32];       /* the implementation's request handle */
	int active;                     /* a transfer is pending */
};

struct pd_comm_ops {
	const char *name;
	/* In place over COUNT elements. */
	int (*allreduce)(struct pd_comm *c, void *buf, size_t count, enum pd_comm_type t, enum pd_comm_op op);
	/* Rank i contributes recv_bytes[i] bytes (its own send_bytes); RECV gets
	 * all contributions back to back in rank order. */
	int (*allgatherv)(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			  const size_t *recv_bytes);
	/* allgatherv started now and finished by wait(REQ); SEND and RECV must
	 * stay untouched until then. */
	int (*iallgatherv)(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			   const size_t *recv_bytes, struct pd_comm_req *req);
	/* Like allgatherv, but only ROOT receives (RECV is ignored elsewhere). */
	int (*gatherv)(struct pd_comm *c, const void *send, size_t send_bytes, void *recv, const size_t *recv_bytes,
		       int root);
	/* SEND holds send_bytes[j] bytes for each rank j back to back; RECV
	 * gets recv_bytes[j] bytes from each rank j back to back. */
	int (*alltoallv)(struct pd_comm *c, const void *send, const size_t *send_bytes, void *recv,
			 const size_t *recv_bytes);
	int (*bcast)(struct pd_comm *c, void *buf, size_t bytes, int root);
	int (*isend)(struct pd_comm *c, const void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req);
	int (*irecv)(struct pd_comm *c, void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req);
	int (*wait)(struct pd_comm *c, struct pd_comm_req *req);
	int (*barrier)(struct pd_comm *c);
	/* Ranks with the same COLOR form a new communicator, ordered by KEY. */
	int (*split)(struct pd_comm *c, int color, int key, struct pd_comm **out);
	void (*free)(struct pd_comm *c);
	/* Ends every process of the job now (the error path of a failed collective). */
	void (*abort)(struct pd_comm *c, int code);
};

struct pd_comm {
	const struct pd_comm_ops *ops;  /* the implementation */
	char name[24];                  /* what it is for ("world", "ulysses", ...), for reports */
	int rank;                       /* this process in the communicator */
	int size;                       /* processes in it */
	uint64_t bytes_sent;            /* bytes this rank sent through it, for the benchmark */
	double wait_s;                  /* seconds this rank spent waiting in its operations (for the
					 * benchmark: a step's time less its waits is its compute) */
	double timeout_s;               /* seconds an operation may wait before the job is reported and
					 * ended; 0 (the default) waits forever. Its owner sets it (the
					 * engine from --comm-timeout, lifting it where one rank works alone
					 * by design); communicators split from it start with its value */
	int failed_rank;                /* the lowest rank that failed in the last agreement over this
					 * communicator (pd_comm_agree), -1 when none did */
	void *impl;                     /* implementation state */
};

/* The world: MPI when a launcher (mpirun, srun) started this process,
 * otherwise a single process without MPI. */
PD_API int pd_comm_world_init(int *argc, char ***argv, struct pd_comm **world);
PD_API void pd_comm_world_finalize(struct pd_comm *world);

/* A communicator of this process alone (work one rank does by itself, such
 * as encoding prompts); free it with its ops->free. */
PD_API int pd_comm_self_new(struct pd_comm **out);

/* Processes of this job on this machine (for dividing the cores). */
PD_API int pd_comm_local_size(struct pd_comm *world);

/* This process's part of its machine's processors, counted once at start
 * (the world's first call): what its threads may run on. */
struct pd_cpu_share {
	int cpus;                       /* CPUs its affinity allows (a cpuset, taskset, mpirun's binding) */
	int sharing;                    /* processes of this job on this machine whose CPUs meet those
					 * (itself counted) */
	int used;                       /* CPUs the job's processes on this machine may use together */
	int online;                     /* CPUs the machine gives its processes: online, or a
					 * container's cpuset (what its pid 1 may run on) */
};
PD_API void pd_comm_cpu_share(struct pd_comm *world, struct pd_cpu_share *s);

/* What this process waits for in communication now ("all-to-all #44 on
 * 'ulysses' (2 ranks)"), or "" when it is not waiting: one buffer for the
 * process's life, always NUL-terminated, so a signal handler may read it
 * (a job ended by mpirun because a host was lost says where each rank
 * stood). */
PD_API const char *pd_comm_activity(void);

/* Whether pdit was built with Open MPI (-DPDIT_MPI): without it, one
 * process. */
PD_API int pd_comm_mpi_available(void);
/* Whether pdit was built with NCCL (used inside pdit for device buffers,
 * one GPU a process; not installed as an interface). */
PD_API int pd_comm_nccl_available(void);

/* Convenience wrappers. */
static inline int pd_comm_allreduce_f32(struct pd_comm *c, float *buf, size_t n)
{
	return c->size == 1 ? 0 : c->ops->allreduce(c, buf, n, PD_COMM_F32, PD_COMM_SUM);
}

/* 1 when any rank passes a nonzero FAILED, so all ranks agree to stop
 * together (only where every rank reaches the same point). -1 on a
 * communication failure. */
PD_API int pd_comm_any(struct pd_comm *c, int failed);

/* After a phase every rank goes through: 0 when no rank failed, else -1 on
 * every rank, c->failed_rank set to the lowest failing rank, whose own
 * message stays; the others' message names that rank. *DEAD (may be NULL)
 * is set when the agreement itself could not be made. */
PD_API int pd_comm_agree(struct pd_comm *c, int failed, int *dead);

/* Equal contributions of BYTES bytes from each rank. */
PD_API int pd_comm_allgather(struct pd_comm *c, const void *send, size_t bytes, void *recv);

#ifdef __cplusplus
}
#endif

#endif /* PD_COMM_H */
