/*
 * pd_par_cfg.c - the CFG pair's exchange of predictions.
 */
#include "pd_par_cfg.h"

int pd_cfg_exchange(void *ctx, const float *mine, size_t n, float *both)
{
	struct pd_comm *cfg = ctx;

	/* rank order is branch order: gathered [rank 0 = negative | rank 1 = positive] */
	return pd_comm_allgather(cfg, mine, n * sizeof(float), both);
}
