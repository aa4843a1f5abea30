/*
 * pd_par_cfg.c - the CFG pair's exchange of predictions.
 */
#include "pd_par_cfg.h"
#include "pd_parallel.h"

#include <stdio.h>

int pd_cfg_exchange(void *ctx, const float *mine, size_t n, float *both)
{
	struct pd_comm *cfg = ctx;

	/* rank order is branch order: gathered [rank 0 = negative | rank 1 = positive] */
	return pd_comm_allgather(cfg, mine, n * sizeof(float), both);
}

static const char *pd_cfg_problem(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
				  size_t len)
{
	if (degree[PD_AXIS_CFG] > 2) {
		snprintf(buf, len, "CFG parallelism has degree 2 (the positive and the negative pass)");
		return buf;
	}
	if (degree[PD_AXIS_CFG] == 2 && !lim->cfg_possible) {
		snprintf(buf, len, "--cfg-parallel needs true CFG: --true-cfg-scale above 1 and negative embeddings");
		return buf;
	}
	return NULL;
}

static int pd_cfg_setup(struct pd_parallel *par, void *state, struct pd_dit *m, const struct pd_par_options *opt)
{
	(void)state;
	struct pd_comm *pair = par->mesh->axis[PD_AXIS_CFG];

	(void)m;
	(void)opt;
	if (pair->size <= 1)
		return 1;
	par->runner.cfg_branch = pair->rank;
	par->runner.cfg_exchange = pd_cfg_exchange;
	par->runner.cfg_ctx = pair;
	return 0;
}

/* The CFG pair's exchange of predictions. */
static void pd_cfg_sends(const struct pd_par_step *s, struct pd_par_sends *out)
{
	double A, pred;

	if (s->degree[PD_AXIS_CFG] <= 1)
		return;
	pd_par_step_sizes(s, &A, &pred);
	out->bytes[PD_AXIS_CFG] += pred;
	out->msgs[PD_AXIS_CFG] += 1;
	out->rounds[PD_AXIS_CFG] += 1;
}

const struct pd_par_method pd_par_method_cfg = {
	.name = "cfg",
	.axes = 1u << PD_AXIS_CFG,
	.problem = pd_cfg_problem,
	.setup = pd_cfg_setup,
	.sends = pd_cfg_sends,
};
