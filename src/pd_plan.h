/*
 * pd_plan.h - the cost of one denoising step under a mesh: floating-point
 * work, bytes each rank sends, memory each rank holds, and the time these
 * take on a given machine. `pdit plan` ranks the meshes with it.
 *
 * The bytes follow what the methods send (f32 activations, as pdit moves
 * them): bench reports the measured figure beside this one and the tests
 * hold them equal. The time is a model: compute at a per-device rate plus
 * the transfers a method cannot hide, plus PipeFusion's pipeline bubble.
 */
#ifndef PD_PLAN_H
#define PD_PLAN_H

#include "pd_flux.h"
#include "pd_mesh.h"

/* The work of one generation. */
struct pd_plan_work {
	const struct pd_flux_config *cfg; /* the transformer's sizes */
	int64_t txt_len;                /* text tokens */
	int64_t img_len;                /* image tokens (latent h x w / 4) */
	int images;                     /* images in the batch */
	int branches;                   /* 2 with true CFG, else 1 */
	int weight_bytes;               /* bytes per weight as computed (2 bf16, 4 f32) */
};

/* The machine: devices (processes) and the links between them. */
struct pd_plan_machine {
	int devices;                    /* processes in the job */
	int per_node;                   /* processes per node (links within a node are the fast ones) */
	double gflops;                  /* whole-step rate of one device alone, GFLOP/s */
	int shared;                     /* the devices of a node share its compute (CPU cores): a node's
					 * rate is gflops, whatever the number of processes on it */
	int cores;                      /* with shared: the node's cores, which cap what one process
					 * alone can use (its threads: the cores divided among them) */
	double mem_gb;                  /* memory per device (per node when shared), GB; 0: unlimited */
	double bw_intra, lat_intra;     /* bytes/s and seconds per message within a node */
	double bw_inter, lat_inter;     /* between nodes */
};

/* One mesh: degrees, and the ring axis as DistriFusion's bands. */
struct pd_plan_mesh {
	int degree[PD_AXIS_COUNT];
	int distrifusion;               /* the ring axis runs DistriFusion */
	int patches;                    /* PipeFusion patches (0: as many as stages) */
};

/* What a step costs the busiest rank. */
struct pd_plan_cost {
	double gflop;                   /* floating-point work of the rank, GFLOP */
	double bytes;                   /* bytes it sends per step (largest rank) */
	int messages;                   /* transfers it waits for per step (latency terms) */
	double seconds;                 /* predicted seconds per step (steady state, after warm-up) */
	double compute_s, comm_s;       /* the parts: compute, transfers not hidden */
	double weights_gb;              /* weights the rank holds (the heaviest stage's) */
	double weights_min_gb;          /* the lightest stage's: a low bound for any rank */
	double activations_gb;          /* activations and method buffers (K/V of PipeFusion, DistriFusion) */
	double memory_gb;               /* their sum: the rank's peak */
	int fits;                       /* memory_gb within the machine's memory (1 when unlimited) */
};

/* The cost of WORK under MESH on MACHINE. 0, or -1 with a message. */
int pd_plan_cost(const struct pd_plan_work *work, const struct pd_plan_machine *machine,
		 const struct pd_plan_mesh *mesh, struct pd_plan_cost *out);

/* Bytes the largest rank sends per step (per image and branch it runs). */
double pd_plan_bytes(const struct pd_plan_work *work, const struct pd_plan_mesh *mesh);

#endif /* PD_PLAN_H */
