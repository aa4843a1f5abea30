/*
 * pd_par_distri.c - DistriFusion's attention with stale keys and values.
 */
#include "pd_par_distri.h"
#include "pd_parallel.h"

#include <stdio.h>
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pd_distri_layer {
	float *k[2], *v[2];             /* [S, W] whole-sequence keys and values, two generations */
	float *send_k, *send_v;         /* [own rows, W] this step's rows while they travel */
	struct pd_comm_req rk, rv;      /* the gather in flight into the other generation */
	int cur;                        /* the generation attention reads */
	int pending;                    /* a gather into 1 - cur is in flight */
};

struct pd_distri_call {
	int64_t image;                  /* which call */
	int branch;
	int64_t rows, own, width;       /* S, this rank's rows, W: the buffers' shape */
	struct pd_distri_layer *layer;  /* one per attention layer */
};

static void pd_distri_call_free(struct pd_distri *d, struct pd_distri_call *c)
{
	for (int l = 0; c->layer && l < d->layers; l++) {
		struct pd_distri_layer *x = &c->layer[l];

		d->seq->sp_data->ops->wait(d->seq->sp_data, &x->rk);
		d->seq->sp_data->ops->wait(d->seq->sp_data, &x->rv);
		for (int g = 0; g < 2; g++) {
			pd_backend_release(d->be, x->k[g]);
			pd_backend_release(d->be, x->v[g]);
		}
		pd_backend_release(d->be, x->send_k);
		pd_backend_release(d->be, x->send_v);
	}
	free(c->layer);
	c->layer = NULL;
}

/* The state of the current call, made for its shapes. */
static struct pd_distri_call *pd_distri_state(struct pd_distri *d, const struct pd_dit_call *in, int64_t rows,
					      int64_t own, int64_t width)
{
	struct pd_distri_call *c = NULL, *nc;

	for (int i = 0; i < d->n_calls; i++)
		if (d->calls[i].image == in->image && d->calls[i].branch == in->branch)
			c = &d->calls[i];
	if (c && (c->rows != rows || c->own != own || c->width != width)) {
		pd_distri_call_free(d, c);
	} else if (!c) {
		nc = realloc(d->calls, sizeof(*nc) * (size_t)(d->n_calls + 1));
		if (!nc) {
			pd_errorf("out of memory for DistriFusion's state");
			return NULL;
		}
		d->calls = nc;
		c = &d->calls[d->n_calls++];
		memset(c, 0, sizeof(*c));
		c->image = in->image;
		c->branch = in->branch;
	}
	if (c->layer)
		return c;
	c->rows = rows;
	c->own = own;
	c->width = width;
	c->layer = pd_calloc((size_t)d->layers, sizeof(*c->layer), "DistriFusion's state");
	if (!c->layer)
		return NULL;
	for (int l = 0; l < d->layers; l++) {
		struct pd_distri_layer *x = &c->layer[l];
		size_t all = (size_t)(rows * width + 1), mine = (size_t)(own * width + 1);

		for (int g = 0; g < 2; g++) {
			/* zeros until a synchronous step fills them */
			x->k[g] = pd_backend_zeros(d->be, all, "DistriFusion's keys");
			x->v[g] = pd_backend_zeros(d->be, all, "DistriFusion's values");
			if (!x->k[g] || !x->v[g])
				return NULL;
		}
		x->send_k = pd_backend_zeros(d->be, mine, "DistriFusion's keys");
		x->send_v = pd_backend_zeros(d->be, mine, "DistriFusion's values");
		if (!x->send_k || !x->send_v)
			return NULL;
	}
	return c;
}

static int pd_distri_attention(void *ctx, struct pd_backend *be, const struct pd_dit_call *call, int layer, float *out,
			       int64_t ldo, const float *q, const float *k, const float *v, int64_t ld, int64_t rows,
			       int heads, int head_dim)
{
	struct pd_distri *d = ctx;
	struct pd_seq_par *sp = d->seq;
	struct pd_comm *cm = sp->sp_data;
	int P = cm->size, me = cm->rank;
	int64_t W = (int64_t)heads * head_dim, S = 0, off = 0;
	struct pd_distri_call *c;
	struct pd_distri_layer *x;
	float scale = 1.0f / sqrtf((float)head_dim);

	if (layer < 0 || layer >= d->layers)
		return pd_errorf("DistriFusion: layer %d of %d", layer, d->layers);
	for (int j = 0; j < P; j++) {
		int64_t n = pd_seq_rows(sp, call, j);

		d->bytes[j] = (size_t)(n * W) * sizeof(float);
		if (j < me)
			off += n;
		S += n;
	}
	c = pd_distri_state(d, call, S, rows, W);
	if (!c)
		return -1;
	x = &c->layer[layer];
	/* the previous step's gather becomes the generation in use; it also
	 * frees the send buffers for this step's rows */
	if (x->pending) {
		if (cm->ops->wait(cm, &x->rk) || cm->ops->wait(cm, &x->rv))
			return -1;
		x->cur = 1 - x->cur;
		x->pending = 0;
	}
	/* this step's own rows, packed: they travel, or fill the own band */
	be->ops->copy2d(be, x->send_k, W, k, ld, rows, W);
	be->ops->copy2d(be, x->send_v, W, v, ld, rows, W);
	if (pd_backend_check(be))
		return -1;
	if (call->step < d->warmup) {
		/* synchronous: every band's fresh rows, then exact attention */
		if (cm->ops->allgatherv(cm, x->send_k, d->bytes[me], x->k[x->cur], d->bytes) ||
		    cm->ops->allgatherv(cm, x->send_v, d->bytes[me], x->v[x->cur], d->bytes))
			return -1;
	} else {
		/* own band fresh, the others one step old */
		be->ops->copy2d(be, x->k[x->cur] + off * W, W, x->send_k, W, rows, W);
		be->ops->copy2d(be, x->v[x->cur] + off * W, W, x->send_v, W, rows, W);
	}
	be->ops->attention(be, out, ldo, NULL, q, ld, x->k[x->cur], W, x->v[x->cur], W, rows, S, heads, head_dim, scale);
	if (pd_backend_check(be))
		return -1;
	if (call->step >= d->warmup) {
		/* send this step's rows on their way for the next step */
		if (cm->ops->iallgatherv(cm, x->send_k, d->bytes[me], x->k[1 - x->cur], d->bytes, &x->rk) ||
		    cm->ops->iallgatherv(cm, x->send_v, d->bytes[me], x->v[1 - x->cur], d->bytes, &x->rv))
			return -1;
		x->pending = 1;
	}
	return 0;
}

int pd_distri_init(struct pd_distri *d, struct pd_seq_par *seq, int warmup, int layers, struct pd_dit_hooks *hooks)
{
	memset(d, 0, sizeof(*d));
	/* the first step has no earlier keys and values to use */
	if (warmup < 1)
		return pd_errorf("DistriFusion needs at least one synchronous step (--warmup-steps 1 or more)");
	d->seq = seq;
	d->be = seq->be;
	d->warmup = warmup;
	d->layers = layers;
	d->bytes = pd_calloc((size_t)seq->sp->size, sizeof(size_t), "counts");
	if (!d->bytes)
		return -1;
	hooks->attention = pd_distri_attention;
	hooks->attention_ctx = d;
	return 0;
}

void pd_distri_free(struct pd_distri *d)
{
	for (int i = 0; i < d->n_calls; i++)
		pd_distri_call_free(d, &d->calls[i]);
	free(d->calls);
	free(d->bytes);
	memset(d, 0, sizeof(*d));
}

static const char *pd_distri_problem(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
				     size_t len)
{
	(void)lim;
	if (degree[PD_AXIS_DISTRI] > 1 && (degree[PD_AXIS_TP] > 1 || degree[PD_AXIS_ULYSSES] > 1 ||
					   degree[PD_AXIS_RING] > 1 || degree[PD_AXIS_PP] > 1)) {
		snprintf(buf, len, "DistriFusion composes with CFG and data parallelism only (no tensor, Ulysses, ring or "
			 "pipeline degree)");
		return buf;
	}
	return NULL;
}

/* On the sequence method's partition (its bands are the sequence-parallel
 * group's chunks): attention against the other bands' keys and values of
 * the step before. */
static int pd_distri_setup(struct pd_parallel *par, void *state, struct pd_dit *m, const struct pd_par_options *opt)
{
	struct pd_seq_par *seq = pd_parallel_state(par, &pd_par_method_sequence);

	if (par->mesh->degree[PD_AXIS_DISTRI] <= 1 || !seq)
		return 1;
	if (pd_distri_init(state, seq, opt ? opt->warmup_steps : 1, m->info.blocks, &par->hooks))
		return -1;
	return 0;
}

static void pd_distri_leave(struct pd_parallel *par, void *state)
{
	(void)par;
	pd_distri_free(state);
}

/* Every layer's own K and V rows to every other band, and the predictions
 * gathered at the end of the step. */
static void pd_distri_sends(const struct pd_par_step *s, struct pd_par_sends *out)
{
	int F = s->degree[PD_AXIS_DISTRI];
	double A, pred;

	if (F <= 1)
		return;
	pd_par_step_sizes(s, &A, &pred);
	out->bytes[PD_AXIS_DISTRI] += s->info->blocks * 2.0 * A / F * (F - 1) + pred / F * (F - 1);
	out->msgs[PD_AXIS_DISTRI] += 1;
	out->rounds[PD_AXIS_DISTRI] += F - 1;
}

const struct pd_par_method pd_par_method_distrifusion = {
	.name = "distrifusion",
	.axes = 1u << PD_AXIS_DISTRI,
	.problem = pd_distri_problem,
	.state_size = sizeof(struct pd_distri),
	.setup = pd_distri_setup,
	.free = pd_distri_leave,
	.sends = pd_distri_sends,
};
