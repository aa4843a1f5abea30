/*
 * pd_dit.c - a whole call over the DiT interface, and First Block Cache:
 * one implementation for every family and every parallel method (PipeFusion
 * spreads the same steps over its stages and decides through
 * pd_fbcache_decide).
 */
#include "pd_dit.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
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

void pd_dit_hook_result(struct pd_dit *d, int rc)
{
	if (rc)
		pd_backend_fail(d->be, "%s", pd_last_error());
}

void pd_dit_shard_reduce(struct pd_dit *d, float *buf, size_t n)
{
	if (d->shard.count > 1 && !d->be->failed)
		pd_dit_hook_result(d, d->hooks.reduce(d->hooks.shard_ctx, buf, n));
}

/* The backend buffer *P of at least N floats (grown, its contents lost),
 * or NULL with the backend failed. */
static float *pd_dit_buffer(struct pd_dit *d, float **p, size_t *cap, size_t n)
{
	if (n <= *cap)
		return *p;
	if (*p)
		d->be->ops->free(d->be, *p);
	*cap = 0;
	*p = d->be->ops->alloc(d->be, n);
	if (!*p) {
		pd_backend_fail(d->be, "out of memory for tensor parallel's gathered rows (%zu MB)",
				n * sizeof(float) >> 20);
		return NULL;
	}
	*cap = n;
	return *p;
}

/* Rows per gather of rows WIDTH floats wide, and the staging buffer for them. */
static int64_t pd_dit_stage_rows(struct pd_dit *d, int64_t rows, int64_t width)
{
	int64_t chunk = PD_DIT_STAGE_FLOATS / width;

	if (chunk < 1)
		chunk = 1;
	if (chunk > rows)
		chunk = rows;
	return pd_dit_buffer(d, &d->stage, &d->stage_cap, (size_t)(chunk * width)) ? chunk : 0;
}

float *pd_dit_gather_cols(struct pd_dit *d, int slot, const float *x, int64_t ldx, int64_t rows, int64_t part)
{
	struct pd_backend *be = d->be;
	int64_t T = d->shard.count, full = part * T, chunk;
	float *whole;

	/* a gather sends one contiguous part: the families' parts are */
	PD_ASSERT(ldx == part);
	if (be->failed || rows == 0)
		return NULL;
	whole = pd_dit_buffer(d, &d->whole[slot], &d->whole_cap[slot], (size_t)(rows * full));
	chunk = whole ? pd_dit_stage_rows(d, rows, full) : 0;
	if (!chunk)
		return NULL;
	for (int64_t r0 = 0; r0 < rows && !be->failed; r0 += chunk) {
		int64_t n = rows - r0 < chunk ? rows - r0 : chunk;

		pd_dit_hook_result(d, d->hooks.gather(d->hooks.shard_ctx, x + r0 * part, (size_t)(n * part), d->stage));
		for (int64_t t = 0; t < T && !be->failed; t++)
			be->ops->copy2d(be, whole + r0 * full + t * part, full, d->stage + t * n * part, part, n, part);
	}
	return be->failed ? NULL : whole;
}

const float *pd_dit_rows_in(struct pd_dit *d, int slot, const float *x, int64_t ldx, int64_t rows, int64_t part,
			    int64_t *ld)
{
	float *whole;

	*ld = ldx;
	if (d->shard.count <= 1 || !d->shard.whole_inputs || !(whole = pd_dit_gather_cols(d, slot, x, ldx, rows, part)))
		return x;
	*ld = part * d->shard.count;
	return whole;
}

int64_t pd_dit_rows_width(const struct pd_dit *d, int64_t n_out)
{
	return d->shard.count > 1 && d->shard.whole_inputs ? n_out / d->shard.count : n_out;
}

void pd_dit_rows_out(struct pd_dit *d, float *y, int64_t rows, int64_t n_out)
{
	struct pd_backend *be = d->be;
	int64_t T = d->shard.count, part = n_out / T, chunk;

	if (!d->shard.whole_inputs) {
		pd_dit_shard_reduce(d, y, (size_t)(rows * n_out));
		return;
	}
	if (T <= 1 || be->failed || rows == 0 || !(chunk = pd_dit_stage_rows(d, rows, n_out)))
		return;
	/* Y's first rows x part floats are this shard's columns; the whole rows
	 * are written over them from the last chunk back, so that a chunk's
	 * rows never cover a part not yet sent */
	for (int64_t r0 = (rows - 1) / chunk * chunk; r0 >= 0 && !be->failed; r0 -= chunk) {
		int64_t n = rows - r0 < chunk ? rows - r0 : chunk;

		pd_dit_hook_result(d, d->hooks.gather(d->hooks.shard_ctx, y + r0 * part, (size_t)(n * part), d->stage));
		for (int64_t t = 0; t < T && !be->failed; t++)
			be->ops->copy2d(be, y + r0 * n_out + t * part, n_out, d->stage + t * n * part, part, n, part);
	}
}

void pd_dit_release(struct pd_dit *d)
{
	free(d->scratch);
	d->scratch = NULL;
	d->scratch_cap = 0;
	for (int i = 0; i < 3; i++) {
		float **p = i < 2 ? &d->whole[i] : &d->stage;

		if (*p && d->be)
			d->be->ops->free(d->be, *p);
		*p = NULL;
	}
	d->whole_cap[0] = d->whole_cap[1] = d->stage_cap = 0;
	free(d->layers);
	d->layers = NULL;
	d->n_layers = 0;
	free(d->held);
	d->held = NULL;
	d->n_held = d->cap_held = 0;
}

int pd_dit_hold_linear(void *ctx, struct pd_backend *be, struct pd_linear *l, const char *name,
		       const struct pd_slice *s)
{
	struct pd_dit *d = ctx;
	struct pd_dit_held *h;

	(void)be;
	if (d->n_held == d->cap_held) {
		int cap = d->cap_held ? 2 * d->cap_held : 256;

		h = realloc(d->held, (size_t)cap * sizeof(*h));
		if (!h)
			return pd_errorf("out of memory for the layers' names");
		d->held = h;
		d->cap_held = cap;
	}
	h = &d->held[d->n_held++];
	memset(h, 0, sizeof(*h));
	snprintf(h->name, sizeof(h->name), "%s", name);
	h->s = *s;
	h->l = l;
	return 0;
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
		free(d->scratch);
		d->scratch_cap = 0;
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

/* expf as PyTorch evaluates it on x86 CPUs: SLEEF's expf_u10 (vectorised,
 * FMA on AVX2), here as scalar code. A correctly rounded expf differs by one
 * ulp in 15 of the 128 sinusoid frequencies, and t = 1000 or g = 3500
 * amplifies that to 1e-4 of the embedding (the golden READMEs' "Sinusoid caveat"). */
static float pd_expf_sleef(float d)
{
	const float r_ln2 = 1.442695040888963407359924681001892137426645954152985934135449406931f;
	const float l2u = 0.693145751953125f, l2l = 1.428606765330187045e-06f;
	float qf = rintf(d * r_ln2), s, u;
	int q = (int)qf;

	s = fmaf(qf, -l2u, d);
	s = fmaf(qf, -l2l, s);
	u = 0.000198527617612853646278381f;
	u = fmaf(u, s, 0.00139304355252534151077271f);
	u = fmaf(u, s, 0.00833336077630519866943359f);
	u = fmaf(u, s, 0.0416664853692054748535156f);
	u = fmaf(u, s, 0.166666671633720397949219f);
	u = fmaf(u, s, 0.5f);
	u = 1.0f + fmaf(s * s, u, s);
	/* vldexp2: two power-of-two scalings, so no intermediate overflows. */
	u = u * ldexpf(1.0f, q >> 1);
	u = u * ldexpf(1.0f, q - (q >> 1));
	if (d < -104.0f)
		u = 0.0f;
	if (d > 100.0f)
		u = INFINITY;
	return u;
}

void pd_timestep_embedding(float t, int half, float *emb, float *freqs)
{
	/* diffusers' get_timestep_embedding (embeddings.py:57-73) in float32: exponent = fl32(-ln(10000)) * k / half; the
	 * product t * freq is rounded to float32 before sin and cos. */
	const float c = (float)-log(10000.0);

	for (int k = 0; k < half; k++) {
		float e = (c * (float)k) / (float)half;
		float f = pd_expf_sleef(e);
		float a = t * f;

		if (freqs)
			freqs[k] = f;
		emb[k] = cosf(a);
		emb[half + k] = sinf(a);
	}
}

void pd_dit_rope_tables(int n_axes, const int *axes_dims, int head_dim, const float *ids, int64_t n, float *cos_out,
			float *sin_out)
{
	int Dh = head_dim;

	for (int64_t s = 0; s < n; s++) {
		int col = 0;

		for (int a = 0; a < n_axes; a++) {
			int d = axes_dims[a];
			double pos = ids[s * n_axes + a];

			for (int k = 0; k < d / 2; k++) {
				/* diffusers' get_1d_rotary_pos_embed (embeddings.py): float64 frequencies and
				 * angles, each value repeated for the pair. */
				double freq = 1.0 / pow(10000.0, (double)(2 * k) / (double)d);
				double ang = pos * freq;
				float cv = (float)cos(ang), sv = (float)sin(ang);

				cos_out[s * Dh + col + 2 * k] = cv;
				cos_out[s * Dh + col + 2 * k + 1] = cv;
				sin_out[s * Dh + col + 2 * k] = sv;
				sin_out[s * Dh + col + 2 * k + 1] = sv;
			}
			col += d;
		}
	}
}

int pd_dit_names_start(const struct pd_st *st, const char *const *prefixes)
{
	static const char comfy[] = "model.diffusion_model.";

	for (int i = 0; i < st->n_tensors; i++) {
		const char *n = st->sorted[i]->name;

		n += strncmp(n, comfy, sizeof(comfy) - 1) == 0 ? sizeof(comfy) - 1 : 0;
		for (const char *const *p = prefixes; *p; p++)
			if (strncmp(n, *p, strlen(*p)) == 0)
				return 1;
	}
	return 0;
}
