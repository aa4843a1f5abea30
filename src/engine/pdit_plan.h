/*
 * pdit_plan.h - a request's work as the cost model takes it, for a model
 * named as the engine's options name it, without opening an engine: what
 * `pdit plan` ranks meshes for, described by the same code the engine's own
 * choice (--parallel auto) and memory check use. The cost model itself is
 * plan/pd_plan.h.
 */
#ifndef PDIT_PLAN_H
#define PDIT_PLAN_H

#include "pd_plan.h"
#include "pdit.h"

struct pd_engine_work {
	struct pd_plan_work work;       /* what the cost model takes (work.info points at info) */
	struct pd_dit_info info;        /* the transformer's sizes, from its config or header */
	struct pd_mesh_limits lim;      /* what a mesh of lim.world processes must allow for it */
	char *transformer;              /* the transformer's path, as resolved (malloc'd) */
	int height, width, frames;      /* the request's, the family's defaults filled in */
	int steps;                      /* likewise */
};

/* W for request RQ (its prompts' text length: rq->max_seq, 0 the family's;
 * rq->batch images, at least one; two branches with true CFG or a family's
 * classifier-free guidance above 1) on the model O names, with the text
 * encoders' weights counted and the VAE's decode when a VAE folder is
 * known, for WORLD processes. Reads configs and headers only. 0, or -1 with
 * a message. */
int pd_engine_work(const struct pd_engine_options *o, const struct pd_request *rq, int world,
		   struct pd_engine_work *w);
void pd_engine_work_free(struct pd_engine_work *w);

#endif /* PDIT_PLAN_H */
