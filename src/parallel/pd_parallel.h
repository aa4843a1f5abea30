/*
 * pd_parallel.h - puts the parallel methods together on a mesh: the model's
 * hooks (tensor parallel collectives, the sequence-parallel attention seam)
 * and the denoising loop's runner (sequence-parallel calls, the data-parallel
 * share of the batch, the CFG pair).
 *
 *   pd_mesh_create(&mesh, world, degrees);
 *   struct pd_dit_shard sh = pd_parallel_shard(&mesh, &info);
 *   fam->load(&d, dir, be, &sh);                       // the family's loader
 *   pd_parallel_setup(&par, &mesh, d, batch, NULL);
 *   pd_denoise(&par.runner, ...);
 */
#ifndef PD_PARALLEL_H
#define PD_PARALLEL_H

#include "pd_mesh.h"
#include "pd_par_method.h"
#include "pd_pipeline.h"

/* Room for the methods of pd_par_methods. */
#define PD_PAR_MAX_METHODS 16
/* Room for data communicators (one per mesh communicator at most). */
#define PD_PAR_MAX_DATA_COMMS (PD_AXIS_COUNT + 3)

/* Choices beyond the mesh's degrees. */
struct pd_par_options {
	int warmup_steps;               /* DistriFusion, PipeFusion: synchronous steps first */
	int patches;                    /* PipeFusion: patches per step (0: as many as stages) */
	int pipefusion;                 /* PipeFusion's schedule even with one stage (patches in turn) */
	int nccl;                       /* device buffers through NCCL (pd_comm_nccl_new) rather than
					 * staged through the host, where the backend has a device queue */
	int ring_gathered;              /* ring attention gathers every chunk's K/V and attends once
					 * (pd_ring_attention_gathered): one process's result, where int8
					 * products would turn the merges' last bits into roundings */
};

struct pd_parallel {
	struct pd_mesh *mesh;           /* the mesh (borrowed) */
	struct pd_dit_hooks hooks;     /* installed into the model */
	const struct pd_par_options *opt; /* the choices beyond the degrees (NULL: defaults; borrowed
					 * during setup) */
	void *state[PD_PAR_MAX_METHODS]; /* method i's own state (its record's state_size), or NULL */
	unsigned installed;             /* bit i: pd_par_methods[i] is installed */
	int64_t batch;                  /* images of the batch, for the data-parallel share */
	struct pd_runner runner;        /* what pd_denoise uses */
	struct pd_backend *be;          /* the model's backend (borrowed): whose buffers the data
					 * communicators carry */
	int nccl;                       /* the data communicators are NCCL's (pd_par_options.nccl) */
	struct pd_comm *data_comm[PD_PAR_MAX_DATA_COMMS]; /* data communicators made so far (staged or NCCL) */
	struct pd_comm *data_of[PD_PAR_MAX_DATA_COMMS];   /* the mesh communicator each stands for */
};

/* The model share a rank of MESH loads: its heads, and its stage's blocks. */
struct pd_dit_shard pd_parallel_shard(const struct pd_mesh *mesh, const struct pd_dit_info *info);

/* OPT may be NULL (defaults). */
int pd_parallel_setup(struct pd_parallel *par, struct pd_mesh *mesh, struct pd_dit *m, int64_t batch,
		      const struct pd_par_options *opt);
void pd_parallel_free(struct pd_parallel *par);

/* METHOD's state when it is installed on this rank, else NULL (a method
 * that builds on another's, as DistriFusion on the sequence partition). */
void *pd_parallel_state(const struct pd_parallel *par, const struct pd_par_method *method);

/* The communicator a method hands the backend's buffers to in place of
 * C (a mesh communicator): C itself when the backend's memory is host
 * memory, else an NCCL one (options' nccl, a backend with a device queue)
 * or a staged one (pd_comm_staged_new), made on first use (collectively:
 * every rank of C asks in the same order) and freed with PAR. NULL with a
 * message when it cannot be made. Host buffers still go through C. */
struct pd_comm *pd_parallel_data_comm(struct pd_parallel *par, struct pd_comm *c);

/* True on the one rank of each data-parallel group that writes its images
 * (every other coordinate 0). */
int pd_parallel_is_writer(const struct pd_mesh *mesh);

#endif /* PD_PARALLEL_H */
