/*
 * pd_axis.h - the axes of the process mesh, each one record: what differs
 * between axes (its name, the commands' flag, the largest degree, how the
 * planner counts its transfers) is data here, read by the mesh
 * (pd_mesh.c: enumeration, checks, formatting), the planner (pd_plan.c),
 * the engine (pdit.h's degree[]) and the commands' flags. A parallel
 * method says which axes it runs on (pd_par_method.h).
 *
 * Rank order, fastest-varying first: tp, ulysses, ring, distrifusion, pp,
 * cfg, dp.
 */
#ifndef PD_AXIS_H
#define PD_AXIS_H

#include "pd_api.h"

#ifdef __cplusplus
extern "C" {
#endif

enum pd_axis {
	PD_AXIS_TP,                     /* tensor parallel: heads and MLP columns (Megatron) */
	PD_AXIS_ULYSSES,                /* sequence parallel, all-to-all between tokens and heads */
	PD_AXIS_RING,                   /* sequence parallel, ring attention */
	PD_AXIS_DISTRI,                 /* DistriFusion: bands of tokens, the others' keys and values a step old */
	PD_AXIS_PP,                     /* PipeFusion: pipeline stages of blocks */
	PD_AXIS_CFG,                    /* the positive and negative passes of true CFG */
	PD_AXIS_DP,                     /* data parallel: pictures of the batch */
	PD_AXIS_COUNT
};

/* How the planner counts an axis's transfers in a step's time. */
enum pd_axis_overlap {
	PD_OVERLAP_NONE,                /* waited for */
	PD_OVERLAP_STEP,                /* behind the step's compute: a pipeline's hops, DistriFusion's
					 * exchange of keys and values for the next step */
	PD_OVERLAP_ATTENTION,           /* behind attention (a ring's hops), outside a pipeline */
};

struct pd_axis_info {
	const char *name;               /* as meshes print it ("tp") and its communicator is named */
	const char *flag;               /* the commands' flag ("--tensor-parallel-degree") */
	const char *help;               /* the flag's help line */
	int is_switch;                  /* the flag takes no value and sets degree max (--cfg-parallel) */
	int max;                        /* the largest degree; 0: the world's */
	int sequence;                   /* it splits the tokens: one of the sequence-parallel group's axes */
	int stale;                      /* a degree above 1 attends to some keys and values a step old */
	enum pd_axis_overlap overlap;   /* how the planner counts its transfers */
};

/* The axes, by enum pd_axis. */
extern PD_API const struct pd_axis_info pd_axes[PD_AXIS_COUNT];

#ifdef __cplusplus
}
#endif

#endif /* PD_AXIS_H */
