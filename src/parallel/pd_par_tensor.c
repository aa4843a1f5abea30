/*
 * pd_par_tensor.c - tensor parallelism's two collectives.
 *
 * Every shard holds the same rows (the whole sequence part of this process)
 * and an identical residual stream, so an all-reduce returns the same bits
 * on every shard and the shards never drift apart.
 */
#include "pd_par_tensor.h"

static int pd_tp_reduce(void *ctx, float *buf, size_t n)
{
	return pd_comm_allreduce_f32(ctx, buf, n);
}

static int pd_tp_gather(void *ctx, const float *part, size_t n, float *out)
{
	return pd_comm_allgather(ctx, part, n * sizeof(float), out);
}

void pd_tp_hooks(struct pd_dit_hooks *hooks, struct pd_comm *tp)
{
	hooks->reduce = pd_tp_reduce;
	hooks->gather = pd_tp_gather;
	hooks->shard_ctx = tp;
}
