/*
 * pd_dit.c - a whole call over the DiT interface, and First Block Cache:
 * one implementation for every family and every parallel method (PipeFusion
 * spreads the same steps over its stages and decides through
 * pd_fbcache_decide).
 */
#include "pd_dit.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pd_dit_flops pd_dit_count_flops(const struct pd_dit_info *info, int64_t T, int64_t L)
{
	double S = (double)(T + L), blocks = 0;
	struct pd_dit_flops f;

	for (int k = 0; k < info->blocks; k++)
		blocks += info->block_cost[k];
	f.linear = info->img_flops * (double)L + info->txt_flops * (double)T + blocks * S + info->call_flops;
	f.attention = info->blocks * 4.0 * S * S * info->dim;
	return f;
}

void pd_fbcache_free(struct pd_fbcache *c)
{
	if (!c)
		return;
	free(c->r_ref);
	free(c->r);
	free(c->rest);
	c->r_ref = c->r = c->rest = NULL;
	c->rows = 0;
	c->valid = 0;
}

void pd_dit_release(struct pd_dit *d)
{
	free(d->scratch);
	d->scratch = NULL;
	d->scratch_cap = 0;
}

int pd_fbcache_decide(struct pd_fbcache *c, const double *sums)
{
	int skip = 0;

	if (c->valid && c->threshold > 0) {
		c->last_change = sums[1] > 0 ? sums[0] / sums[1] : INFINITY;
		skip = c->last_change < c->threshold;
		pd_log(2, "pdit: First Block Cache: change %.4f %s %g: %s\n", c->last_change, skip ? "<" : ">=",
		       c->threshold, skip ? "skip" : "compute");
	}
	if (skip) {
		c->skipped++;
	} else {
		c->computed++;
		c->valid = 1;
	}
	return skip;
}

/* The cache's arrays for L image rows of D channels (a new shape starts it
 * afresh), and the model's room for two states of S rows (shared by the
 * caches: a model runs one call at a time). */
static int pd_fbcache_reserve(struct pd_dit *d, struct pd_fbcache *c, int64_t L, int64_t S, int64_t D)
{
	size_t n = (size_t)((L + 1) * D), w = (size_t)(2 * (S + 1) * D);

	if (!c->r || c->rows != L) {
		pd_fbcache_free(c);
		c->r_ref = pd_calloc(n, sizeof(float), "First Block Cache");
		c->r = pd_calloc(n, sizeof(float), "First Block Cache");
		c->rest = pd_calloc(n, sizeof(float), "First Block Cache");
		if (!c->r_ref || !c->r || !c->rest) {
			pd_fbcache_free(c);
			return -1;
		}
		c->rows = L;
	}
	if (w > d->scratch_cap) {
		pd_dit_release(d);
		d->scratch = pd_malloc(w * sizeof(float), "First Block Cache");
		if (!d->scratch)
			return -1;
		d->scratch_cap = w;
	}
	return 0;
}

/* With the cache: the embedders, block 0, the change of the image rows and
 * the decision (summed over the call's processes through the sum hook);
 * then the other blocks, or their stored effect, and the final layers. */
static int pd_dit_forward_cached(struct pd_dit *d, const struct pd_dit_call *in, float *out,
				 const struct pd_dump *dump)
{
	struct pd_fbcache *c = in->cache;
	int nb = d->info.blocks;
	int64_t T = in->txt_len, L = in->img_len, D = d->info.dim, S = T + L;
	size_t n = (size_t)(L * D);
	struct pd_dit_call last = *in;
	double sums[2] = { 0, 0 };
	float *e, *h, *img;
	int skip;

	if (pd_fbcache_reserve(d, c, L, S, D))
		return -1;
	e = d->scratch;
	h = d->scratch + (S + 1) * D;
	if (pd_dit_forward_blocks(d, in, 0, 0, NULL, e, NULL, dump) ||
	    pd_dit_forward_blocks(d, in, 0, 1, e, h, NULL, dump))
		return -1;
	img = h + T * D;
	for (size_t i = 0; i < n; i++)
		c->r[i] = img[i] - e[T * D + i];
	if (c->valid && c->threshold > 0) {
		for (size_t i = 0; i < n; i++) {
			sums[0] += fabs((double)c->r_ref[i] - (double)c->r[i]);
			sums[1] += fabs((double)c->r_ref[i]);
		}
		/* the same measure on every process: sums over all of them */
		if (d->hooks.sum && d->hooks.sum(d->hooks.sum_ctx, sums, 2))
			return -1;
	}
	skip = pd_fbcache_decide(c, sums);
	if (skip) {
		for (size_t i = 0; i < n; i++)
			img[i] = img[i] + c->rest[i];
	} else {
		/* this step's change becomes the reference; the other blocks'
		 * effect is what they add to the state after block 0 */
		float *t = c->r_ref;

		c->r_ref = c->r;
		c->r = t;
		memcpy(c->rest, img, n * sizeof(float));
		if (pd_dit_forward_blocks(d, in, 1, nb - 1, h, e, NULL, dump))
			return -1;
		img = e + T * D;
		for (size_t i = 0; i < n; i++)
			c->rest[i] = img[i] - c->rest[i];
	}
	/* the final layers read the image rows alone */
	last.txt_len = 0;
	return pd_dit_forward_blocks(d, &last, nb, 0, img, NULL, out, dump);
}

int pd_dit_forward(struct pd_dit *d, const struct pd_dit_call *in, float *out, const struct pd_dump *dump)
{
	if (in->cache && d->info.blocks > 0)
		return pd_dit_forward_cached(d, in, out, dump);
	return pd_dit_forward_blocks(d, in, 0, d->info.blocks, NULL, NULL, out, dump);
}
