/*
 * pd_par_seq.c - sequence parallelism: the token partition, the transformer
 * call on this rank's tokens, and the attention seam (Ulysses, ring, both).
 */
#include "pd_par_seq.h"
#include "pd_parallel.h"
#include "pd_par_ring.h"
#include "pd_par_ulysses.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t pd_seq_txt_rows(const struct pd_seq_par *p, const struct pd_dit_call *call, int j)
{
	/* a text context (Wan's) is whole on every rank and no attention row */
	return p->model->info.txt_context ? 0 : pd_chunk_len(pd_dit_call_root(call)->txt_len, p->sp->size, j);
}

int64_t pd_seq_rows(const struct pd_seq_par *p, const struct pd_dit_call *call, int j)
{
	return pd_seq_txt_rows(p, call, j) + pd_chunk_len(pd_dit_call_root(call)->img_len, p->sp->size, j);
}

/* Several backend buffers sharing one capacity: each grown to N floats. */
static int pd_seq_grow_all(struct pd_backend *be, float **bufs[], int n_bufs, size_t *cap, size_t n)
{
	size_t c = *cap;

	for (int i = 0; i < n_bufs; i++) {
		c = *cap;
		if (pd_backend_grow(be, bufs[i], &c, n, "sequence-parallel buffers"))
			return -1;
	}
	*cap = c > *cap ? c : *cap;
	return 0;
}

/* The attention seam: this rank's q, k, v rows against the whole sequence. */
static int pd_seq_attention(void *ctx, struct pd_backend *be, const struct pd_dit_call *call, int layer, float *out,
			    int64_t ldo, const float *q, const float *k, const float *v, int64_t ld, int64_t rows,
			    int heads, int head_dim)
{
	struct pd_seq_par *p = ctx;
	int U = p->U, R = p->R, ring_me = p->ring->rank;
	int64_t ur[64], ut[64], kv_rows[64], kv_txt[64], su = 0, max_kv = 0, all_kv = 0, all_txt = 0;
	int64_t hu = (int64_t)(heads / U) * head_dim, W = (int64_t)heads * head_dim;
	const float *aq = q, *ak = k, *av = v;
	float *ao = out;
	int64_t lda = ld, ldo_a = ldo;
	size_t *bs = p->bytes, *br = p->bytes + p->sp->size;

	(void)layer;
	if (U > 64 || R > 64)
		return pd_errorf("sequence parallel degrees above 64 are not supported");
	/* rows of each Ulysses peer, and of each ring rank's gathered chunk */
	for (int j = 0; j < R; j++) {
		kv_rows[j] = 0;
		kv_txt[j] = 0;
		for (int u = 0; u < U; u++) {
			int64_t n = pd_seq_rows(p, call, j * U + u), t = pd_seq_txt_rows(p, call, j * U + u);

			kv_rows[j] += n;
			kv_txt[j] += t;
			if (j == ring_me) {
				ur[u] = n;
				ut[u] = t;
			}
		}
		max_kv = kv_rows[j] > max_kv ? kv_rows[j] : max_kv;
		all_kv += kv_rows[j];
		all_txt += kv_txt[j];
	}
	su = kv_rows[ring_me];
	PD_ASSERT(ur[p->ulysses->rank] == rows);
	if (U > 1) {
		float **ub[] = { &p->uq, &p->uk, &p->uv, &p->uo };
		float **xb[] = { &p->xsend, &p->xrecv };
		size_t need_x = (size_t)(3 * (su > rows ? su : rows) * W);

		if (pd_seq_grow_all(be, ub, 4, &p->cap_u, (size_t)(su * hu)) ||
		    pd_seq_grow_all(be, xb, 2, &p->cap_x, need_x))
			return -1;
		if (pd_ulysses_to_heads(p->ulysses, be, ur, ut, q, k, v, ld, heads, head_dim, p->uq, p->uk, p->uv,
					p->xsend, p->xrecv, bs, br))
			return -1;
		aq = p->uq;
		ak = p->uk;
		av = p->uv;
		ao = p->uo;
		lda = hu;
		ldo_a = hu;
	}
	if (R > 1 && p->gathered) {
		float **fb[] = { &p->kf, &p->vf };
		size_t gb[64];

		if (pd_backend_grow(be, &p->gsend, &p->cap_gs, (size_t)(su * hu) + 1, "sequence-parallel buffers") ||
		    (all_txt && pd_backend_grow(be, &p->grecv, &p->cap_gr, (size_t)(all_kv * hu),
						"sequence-parallel buffers")) ||
		    pd_seq_grow_all(be, fb, 2, &p->cap_f, (size_t)(all_kv * hu)))
			return -1;
		if (pd_ring_attention_gathered(p->ring, be, ao, ldo_a, aq, lda, su, ak, av, lda, kv_rows, kv_txt,
					       heads / U, head_dim, p->gsend, p->grecv, p->kf, p->vf, gb))
			return -1;
	} else if (R > 1) {
		float **kb[] = { &p->kv[0], &p->kv[1] };
		float **qb[] = { &p->part, &p->lse, &p->plse };
		/* part is [su, hu]; the log-sum-exps [heads/U, su] are no larger */
		size_t need_q = (size_t)(su * hu);

		if (pd_seq_grow_all(be, kb, 2, &p->cap_kv, (size_t)(2 * max_kv * hu)) ||
		    pd_seq_grow_all(be, qb, 3, &p->cap_q, need_q + 1))
			return -1;
		if (pd_ring_attention(p->ring, be, ao, ldo_a, aq, lda, su, ak, av, lda, kv_rows, heads / U, head_dim,
				      p->kv, p->part, p->lse, p->plse))
			return -1;
	} else {
		be->ops->attention(be, ao, ldo_a, NULL, aq, lda, ak, lda, av, lda, su, su, heads / U, head_dim,
				   1.0f / sqrtf((float)head_dim));
		if (pd_backend_check(be))
			return -1;
	}
	if (U > 1 && pd_ulysses_to_tokens(p->ulysses, be, ur, ut, p->uo, out, ldo, heads, head_dim, p->xsend, p->xrecv,
					  bs, br))
		return -1;
	return 0;
}

int pd_seq_init(struct pd_seq_par *p, struct pd_dit *model, struct pd_comm *sp, struct pd_comm *sp_data,
		struct pd_comm *ulysses, struct pd_comm *ring, int gathered, struct pd_dit_hooks *hooks)
{
	memset(p, 0, sizeof(*p));
	p->model = model;
	p->be = model->be;
	p->sp = sp;
	p->sp_data = sp_data;
	p->ulysses = ulysses;
	p->ring = ring;
	p->U = ulysses->size;
	p->R = ring->size;
	p->gathered = gathered;
	p->out_width = model->info.out_channels;
	p->bytes = pd_calloc(2 * (size_t)sp->size, sizeof(size_t), "counts");
	if (!p->bytes)
		return -1;
	PD_ASSERT(p->U * p->R == sp->size);
	hooks->attention = pd_seq_attention;
	hooks->attention_ctx = p;
	return 0;
}

void pd_seq_free(struct pd_seq_par *p)
{
	float *bufs[] = { p->uq, p->uk, p->uv, p->uo, p->xsend, p->xrecv, p->kv[0], p->kv[1], p->part, p->lse, p->plse,
			  p->gsend, p->grecv, p->kf, p->vf };

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		pd_backend_release(p->be, bufs[i]);
	free(p->local_out);
	free(p->bytes);
	memset(p, 0, sizeof(*p));
}

int pd_seq_predict(void *ctx, const struct pd_dit_call *in, float *out, const struct pd_dump *dump)
{
	struct pd_seq_par *p = ctx;
	const struct pd_dit_info *info = &p->model->info;
	int P = p->sp->size, r = p->sp->rank, A = info->n_axes;
	int64_t t0, tn, i0, in_n, C = p->out_width;
	struct pd_dit_call local = *in;

	t0 = info->txt_context ? 0 : pd_chunk_start(in->txt_len, P, r);
	tn = info->txt_context ? in->txt_len : pd_chunk_len(in->txt_len, P, r);
	i0 = pd_chunk_start(in->img_len, P, r);
	in_n = pd_chunk_len(in->img_len, P, r);
	/* the same partition for the hidden states and their position ids */
	local.txt_len = tn;
	local.img_len = in_n;
	local.txt = in->txt + t0 * info->txt_width;
	local.txt_ids = in->txt_ids + t0 * A;
	local.img = in->img + i0 * info->in_channels;
	local.img_ids = in->img_ids + i0 * A;
	local.whole = in;
	local.txt0 = t0;
	local.img0 = i0;
	if (pd_grow_floats(&p->local_out, &p->local_cap, (size_t)(in_n * C) + 1, "sequence-parallel buffers") ||
	    pd_dit_forward(p->model, &local, p->local_out, dump))
		return -1;
	for (int j = 0; j < P; j++)
		p->bytes[j] = (size_t)(pd_chunk_len(in->img_len, P, j) * C) * sizeof(float);
	/* image chunks are consecutive rows, so rank order is token order */
	return p->sp->ops->allgatherv(p->sp, p->local_out, p->bytes[r], out, p->bytes);
}

static int pd_seq_setup(struct pd_parallel *par, void *state, struct pd_dit *m, const struct pd_par_options *opt)
{
	struct pd_mesh *mesh = par->mesh;
	struct pd_comm *sp, *u, *r;

	/* PipeFusion splits its pieces over the same ranks itself */
	if (mesh->sp->size <= 1 || pd_parallel_state(par, &pd_par_method_pipefusion))
		return 1;
	/* DistriFusion's bands partition the tokens as a ring's chunks do
	 * (it installs its own attention over them) */
	sp = pd_parallel_data_comm(par, mesh->sp);
	u = pd_parallel_data_comm(par, mesh->axis[PD_AXIS_ULYSSES]);
	r = pd_parallel_data_comm(par, mesh->axis[mesh->degree[PD_AXIS_DISTRI] > 1 ? PD_AXIS_DISTRI : PD_AXIS_RING]);
	if (!sp || !u || !r || pd_seq_init(state, m, mesh->sp, sp, u, r, opt && opt->ring_gathered, &par->hooks))
		return -1;
	par->runner.predict = pd_seq_predict;
	par->runner.predict_ctx = state;
	return 0;
}

static void pd_seq_leave(struct pd_parallel *par, void *state)
{
	(void)par;
	pd_seq_free(state);
}

/* Ulysses and ring attention, and both (USP): one method over two axes
 * (and the partition DistriFusion's bands use; its count is its own). */
/* Ulysses' q, k, v and output all-to-alls of the heads a shard holds, the
 * ring's K/V hops, and the predictions gathered over the sequence shards.
 * Inside PipeFusion's stages they are PipeFusion's count. */
static void pd_seq_sends(const struct pd_par_step *s, struct pd_par_sends *out)
{
	int U = s->degree[PD_AXIS_ULYSSES], T = s->degree[PD_AXIS_TP], layers = s->info->blocks;
	int R = s->degree[PD_AXIS_RING], P = U * R;
	enum pd_axis sp = s->degree[PD_AXIS_RING] > 1 ? PD_AXIS_RING : PD_AXIS_ULYSSES;
	double A, pred;

	if (P <= 1 || s->degree[PD_AXIS_PP] > 1)
		return;
	pd_par_step_sizes(s, &A, &pred);
	if (U > 1) {
		out->bytes[PD_AXIS_ULYSSES] += layers * 4.0 * A / ((double)U * R * T) * (U - 1) / U;
		out->msgs[PD_AXIS_ULYSSES] += 2 * layers;
		out->rounds[PD_AXIS_ULYSSES] += 2 * layers * (U - 1);
	}
	if (R > 1) {
		/* the same bytes in two collectives a layer (K, V) where it is gathered */
		out->bytes[PD_AXIS_RING] += layers * 2.0 * A / ((double)U * R * T) * (R - 1);
		out->msgs[PD_AXIS_RING] += s->info->ring_gathered ? 2 * layers : layers * (R - 1);
		out->rounds[PD_AXIS_RING] += (s->info->ring_gathered ? 2 : 1) * layers * (R - 1);
	}
	out->bytes[sp] += pred / P * (P - 1);
	out->msgs[sp] += 1;
	out->rounds[sp] += P - 1;
}

const struct pd_par_method pd_par_method_sequence = {
	.name = "sequence",
	.axes = (1u << PD_AXIS_ULYSSES) | (1u << PD_AXIS_RING) | (1u << PD_AXIS_DISTRI),
	.state_size = sizeof(struct pd_seq_par),
	.setup = pd_seq_setup,
	.free = pd_seq_leave,
	.sends = pd_seq_sends,
};
