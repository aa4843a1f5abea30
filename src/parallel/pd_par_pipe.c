/*
 * pd_par_pipe.c - PipeFusion: stages, patches, per-layer key/value buffers.
 */
#include "pd_par_pipe.h"
#include "pd_par_tensor.h"
#include "pd_parallel.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PD_PIPE_TAG 7400

struct pd_pipe_call {
	int64_t image;                  /* which call */
	int branch;
	int64_t rows, width;            /* the buffers' shape: whole sequence x local width */
	int64_t img;                    /* image rows of the sequence (the cache's arrays) */
	float **k, **v;                 /* per layer of this stage: [rows, width] */
	/* First Block Cache (see pd_pipe_cache_first) */
	float *r_ref, *r;               /* stage 0: [L, D] first block's change, last computed step and this one */
	float *rest;                    /* last stage: [L, D] the other blocks' effect at the last computed step */
	float *h1;                      /* stage 0: this rank's rows after block 0, piece after piece */
	float *h1img;                   /* their image rows (stage 0 sends them to the last stage) */
	int owner_ref, owner_rest;      /* pieces of the split that wrote r_ref, rest (-1: every row) */
};

/* ----------------------------------------------------------------------- */
/* Key/value buffers                                                       */
/* ----------------------------------------------------------------------- */

static void pd_pipe_call_free(struct pd_pipe *p, struct pd_pipe_call *c)
{
	for (int l = 0; c->k && l < p->count; l++) {
		pd_backend_release(p->be, c->k[l]);
		pd_backend_release(p->be, c->v[l]);
	}
	free(c->k);
	free(c->v);
	free(c->r_ref);
	free(c->r);
	free(c->rest);
	free(c->h1);
	free(c->h1img);
	c->k = c->v = NULL;
	c->r_ref = c->r = c->rest = c->h1 = c->h1img = NULL;
}

/* Text rows of the attention sequence: those of the call, or none when
 * the text is a context every piece reads whole (Wan's cross-attention). */
static int64_t pd_pipe_kv_text(const struct pd_pipe *p, const struct pd_dit_call *w)
{
	return p->model->info.txt_context ? 0 : w->txt_len;
}

/* The buffers of the whole call W (per image and branch), made for its
 * shape. */
static struct pd_pipe_call *pd_pipe_state(struct pd_pipe *p, const struct pd_dit_call *w)
{
	struct pd_pipe_call *c = NULL, *nc;
	int64_t rows = pd_pipe_kv_text(p, w) + w->img_len;

	for (int i = 0; i < p->n_calls; i++)
		if (p->calls[i].image == w->image && p->calls[i].branch == w->branch)
			c = &p->calls[i];
	if (c && (c->rows != rows || c->img != w->img_len)) {
		pd_pipe_call_free(p, c);
	} else if (!c) {
		nc = realloc(p->calls, sizeof(*nc) * (size_t)(p->n_calls + 1));
		if (!nc) {
			pd_errorf("out of memory for PipeFusion's buffers");
			return NULL;
		}
		p->calls = nc;
		c = &p->calls[p->n_calls++];
		memset(c, 0, sizeof(*c));
		c->image = w->image;
		c->branch = w->branch;
	}
	if (c->k)
		return c;
	c->rows = rows;
	c->img = w->img_len;
	c->width = p->width;
	c->k = pd_calloc((size_t)p->count + 1, sizeof(float *), "PipeFusion's buffers");
	c->v = pd_calloc((size_t)p->count + 1, sizeof(float *), "PipeFusion's buffers");
	if (!c->k || !c->v)
		return NULL;
	for (int l = 0; l < p->count; l++) {
		/* zeros until the warm-up's first pass fills every row */
		c->k[l] = pd_backend_zeros(p->be, (size_t)(rows * p->width + 1), "PipeFusion's keys");
		c->v[l] = pd_backend_zeros(p->be, (size_t)(rows * p->width + 1), "PipeFusion's values");
		if (!c->k[l] || !c->v[l])
			return NULL;
	}
	return c;
}

/* Writes rows [0, n) of SRC (row stride ld) to rows [pos, pos + n) of DST. */
static void pd_pipe_put(struct pd_backend *be, float *dst, int64_t W, int64_t pos, const float *src, int64_t ld,
			int64_t n)
{
	if (n > 0)
		be->ops->copy2d(be, dst + pos * W, W, src, ld, n, W);
}

/* The attention seam: the piece's fresh keys and values go into this
 * layer's buffer (gathered from the stage's sequence-parallel ranks), then
 * the piece's queries attend to the whole buffer. CALL is this rank's share
 * of a piece (pd_pipe_local), cut from the piece, cut from the whole call. */
static int pd_pipe_attention(void *ctx, struct pd_backend *be, const struct pd_dit_call *call, int layer, float *out,
			     int64_t ldo, const float *q, const float *k, const float *v, int64_t ld, int64_t rows,
			     int heads, int head_dim)
{
	struct pd_pipe *p = ctx;
	const struct pd_dit_call *w = pd_dit_call_root(call), *piece = call->whole;
	int64_t T = pd_pipe_kv_text(p, w), S = T + w->img_len, W = (int64_t)heads * head_dim;
	int64_t piece_t0 = piece->txt0, piece_tn = T ? piece->txt_len : 0, piece_i0 = piece->img0;
	int64_t piece_in = piece->img_len;
	int P = p->sp->size, l = layer - p->first;
	struct pd_pipe_call *c;

	if (l < 0 || l >= p->count || W != p->width)
		return pd_errorf("PipeFusion: layer %d is not this stage's", layer);
	c = pd_pipe_state(p, w);
	if (!c)
		return -1;
	if (P == 1) {
		pd_pipe_put(be, c->k[l], W, piece_t0, k, ld, piece_tn);
		pd_pipe_put(be, c->k[l], W, T + piece_i0, k + piece_tn * ld, ld, piece_in);
		pd_pipe_put(be, c->v[l], W, piece_t0, v, ld, piece_tn);
		pd_pipe_put(be, c->v[l], W, T + piece_i0, v + piece_tn * ld, ld, piece_in);
	} else {
		/* every rank of the stage contributes its chunk of the piece's text
		 * and image rows; all buffers of the stage get all of them */
		int64_t total = piece_tn + piece_in, off = 0;
		float *kg, *vg;

		if (pd_backend_grow(be, &p->kv, &p->cap_kv, (size_t)(2 * total * W + 2), "PipeFusion"))
			return -1;
		kg = p->kv;
		vg = p->kv + total * W;
		for (int j = 0; j < P; j++)
			p->bytes[j] = (size_t)((pd_chunk_len(piece_tn, P, j) + pd_chunk_len(piece_in, P, j)) * W) *
				      sizeof(float);
		/* the gather reads packed rows */
		if (pd_backend_grow(be, &p->y, &p->cap_y, (size_t)(2 * rows * W + 2), "PipeFusion"))
			return -1;
		be->ops->copy2d(be, p->y, W, k, ld, rows, W);
		be->ops->copy2d(be, p->y + rows * W, W, v, ld, rows, W);
		if (pd_backend_check(be) ||
		    p->sp_data->ops->allgatherv(p->sp_data, p->y, p->bytes[p->sp->rank], kg, p->bytes) ||
		    p->sp_data->ops->allgatherv(p->sp_data, p->y + rows * W, p->bytes[p->sp->rank], vg, p->bytes))
			return -1;
		for (int j = 0; j < P; j++) {
			int64_t tn = pd_chunk_len(piece_tn, P, j), in = pd_chunk_len(piece_in, P, j);
			int64_t t0 = piece_t0 + pd_chunk_start(piece_tn, P, j);
			int64_t i0 = T + piece_i0 + pd_chunk_start(piece_in, P, j);

			pd_pipe_put(be, c->k[l], W, t0, kg + off * W, W, tn);
			pd_pipe_put(be, c->k[l], W, i0, kg + (off + tn) * W, W, in);
			pd_pipe_put(be, c->v[l], W, t0, vg + off * W, W, tn);
			pd_pipe_put(be, c->v[l], W, i0, vg + (off + tn) * W, W, in);
			off += tn + in;
		}
	}
	be->ops->attention(be, out, ldo, NULL, q, ld, c->k[l], W, c->v[l], W, rows, S, heads, head_dim,
			   1.0f / sqrtf((float)head_dim));
	return pd_backend_check(be);
}

/* ----------------------------------------------------------------------- */
/* The pipeline                                                            */
/* ----------------------------------------------------------------------- */

int pd_pipe_init(struct pd_pipe *p, struct pd_dit *model, struct pd_comm *pp, struct pd_comm *sp,
		 struct pd_comm *sp_data, int patches, int warmup, struct pd_dit_hooks *hooks)
{

	memset(p, 0, sizeof(*p));
	p->model = model;
	p->be = model->be;
	p->pp = pp;
	p->sp = sp;
	p->sp_data = sp_data;
	p->stage = pp->rank;
	p->stages = pp->size;
	p->patches = patches > 0 ? patches : pp->size;
	p->warmup = warmup;
	/* a patched first step would attend to empty buffers */
	if (warmup < 1 && p->patches > 1)
		return pd_errorf("PipeFusion with %d patches needs at least one warm-up step (--warmup-steps 1 or more)",
				 p->patches);
	pd_mesh_stage_blocks(&model->info, pp->size, pp->rank, &p->first, &p->count);
	p->width = model->local_width;
	p->bytes = pd_calloc((size_t)sp->size, sizeof(size_t), "counts");
	if (!p->bytes)
		return -1;
	hooks->attention = pd_pipe_attention;
	hooks->attention_ctx = p;
	return 0;
}

void pd_pipe_free(struct pd_pipe *p)
{
	for (int i = 0; i < p->n_calls; i++)
		pd_pipe_call_free(p, &p->calls[i]);
	free(p->calls);
	free(p->x);
	pd_backend_release(p->be, p->y);
	pd_backend_release(p->be, p->kv);
	free(p->fbx);
	free(p->bytes);
	free(p->pred);
	free(p->fin);
	memset(p, 0, sizeof(*p));
}

/* One piece of a step: its image rows, and this rank's share of it. */
struct pd_pipe_piece {
	int64_t rows0, rowsn;           /* the piece's image rows (token indices) */
	int64_t ptn;                    /* its text rows: all of them with piece 0, none otherwise (a
					 * text context: all of them with every piece, on every rank) */
	int64_t t0, tn;                 /* this rank's text rows */
	int64_t i0, in;                 /* this rank's image rows (token indices) */
};

static void pd_pipe_piece(const struct pd_pipe *p, int64_t T, int64_t hp, int64_t wp, int pieces, int piece, int j,
			  struct pd_pipe_piece *pc)
{
	int P = p->sp->size;
	/* the bands balance piece 0's text rows, unless every piece has them */
	int64_t Tb = p->model->info.txt_context ? 0 : T;
	int64_t b0 = pd_mesh_band_row(Tb, hp, wp, pieces, piece), b1 = pd_mesh_band_row(Tb, hp, wp, pieces, piece + 1);

	pc->rows0 = b0 * wp;
	pc->rowsn = (b1 - b0) * wp;
	if (p->model->info.txt_context) {
		pc->ptn = pc->tn = T;
		pc->t0 = 0;
	} else {
		pc->ptn = piece == 0 ? T : 0;
		pc->t0 = pd_chunk_start(pc->ptn, P, j);
		pc->tn = pd_chunk_len(pc->ptn, P, j);
	}
	pc->i0 = pc->rows0 + pd_chunk_start(pc->rowsn, P, j);
	pc->in = pd_chunk_len(pc->rowsn, P, j);
}

/* This rank's share of a piece: PIECE is the piece as a part of IN,
 * LOCAL this rank's rows as a part of PIECE (the attention seam reads where
 * they lie from both). */
static void pd_pipe_local(struct pd_pipe *p, const struct pd_dit_call *in, const struct pd_pipe_piece *pc,
			  struct pd_dit_call *piece, struct pd_dit_call *local)
{
	const struct pd_dit_info *info = &p->model->info;
	int A = info->n_axes;

	*piece = *in;
	piece->txt_len = pc->ptn;
	piece->img_len = pc->rowsn;
	piece->img = in->img + pc->rows0 * info->in_channels;
	piece->img_ids = in->img_ids + pc->rows0 * A;
	piece->whole = in;
	piece->txt0 = 0;
	piece->img0 = pc->rows0;
	/* First Block Cache is run here, across the stages */
	piece->cache = NULL;
	*local = *piece;
	local->txt_len = pc->tn;
	local->img_len = pc->in;
	local->txt = in->txt + pc->t0 * info->txt_width;
	local->txt_ids = in->txt_ids + pc->t0 * A;
	local->img = in->img + pc->i0 * info->in_channels;
	local->img_ids = in->img_ids + pc->i0 * A;
	local->whole = piece;
	local->txt0 = pc->t0;
	local->img0 = pc->i0 - pc->rows0;
}

/* ----------------------------------------------------------------------- */
/* First Block Cache across the stages                                     */
/* ----------------------------------------------------------------------- */

/* Stage 0 measures the first block's change on every patch before deciding
 * (the patches' block 0 runs first, in patch order, so the keys and values
 * each patch meets are PipeFusion's own), and tells the other stages. It
 * also sends the state after block 0 of its image rows to the last stage,
 * which keeps the other blocks' effect (its output minus that state) and,
 * on a skipped step, adds it in place of the blocks in between.
 *
 * The cached rows live in [L, D] arrays by token; a rank fills the rows it
 * owns. With sequence parallelism inside a stage, ownership differs between
 * the warm-up's single piece and the patches: an array written under one
 * split and read under another is first completed over the stage's ranks. */

/* Rows of rank J under a split into PIECES pieces: calls FN for each run. */
static void pd_pipe_owned(const struct pd_pipe *p, int64_t T, int64_t hp, int64_t wp, int pieces, int j,
			  void (*fn)(void *ctx, int64_t row, int64_t n), void *ctx)
{
	for (int k = 0; k < pieces; k++) {
		struct pd_pipe_piece pc;

		pd_pipe_piece(p, T, hp, wp, pieces, k, j, &pc);
		if (pc.in > 0)
			fn(ctx, pc.i0, pc.in);
	}
}

struct pd_pipe_pack {
	float *arr, *buf;               /* the [L, D] array and the packed rows */
	int64_t D, off;                 /* row width, rows packed so far */
	int unpack;                     /* 0: array to buffer, 1: buffer to array */
};

static void pd_pipe_pack_rows(void *ctx, int64_t row, int64_t n)
{
	struct pd_pipe_pack *k = ctx;
	float *a = k->arr + row * k->D, *b = k->buf + k->off * k->D;

	memcpy(k->unpack ? a : b, k->unpack ? b : a, (size_t)(n * k->D) * sizeof(float));
	k->off += n;
}

/* Makes ARR, written under a split into *OWNER pieces, whole on every rank
 * of the stage (collective over p->sp); *OWNER becomes -1 (complete). */
static int pd_pipe_complete(struct pd_pipe *p, float *arr, int *owner, int64_t T, int64_t hp, int64_t wp,
			    int64_t D)
{
	int P = p->sp->size;
	struct pd_pipe_pack k = { arr, NULL, D, 0, 0 };
	int64_t mine = 0, total = hp * wp;

	if (*owner < 0 || P == 1) {
		*owner = -1;
		return 0;
	}
	if (pd_grow_floats(&p->fbx, &p->cap_fbx, (size_t)(2 * total * D + 2), "PipeFusion"))
		return -1;
	for (int j = 0; j < P; j++) {
		int64_t rows = 0;

		for (int q = 0; q < *owner; q++) {
			struct pd_pipe_piece pc;

			pd_pipe_piece(p, T, hp, wp, *owner, q, j, &pc);
			rows += pc.in;
		}
		p->bytes[j] = (size_t)(rows * D) * sizeof(float);
		if (j == p->sp->rank)
			mine = rows;
	}
	/* pack this rank's rows after the gathered area */
	k.buf = p->fbx + total * D;
	pd_pipe_owned(p, T, hp, wp, *owner, p->sp->rank, pd_pipe_pack_rows, &k);
	if (p->sp->ops->allgatherv(p->sp, p->fbx + total * D, (size_t)(mine * D) * sizeof(float), p->fbx, p->bytes))
		return -1;
	k.buf = p->fbx;
	k.off = 0;
	k.unpack = 1;
	for (int j = 0; j < P; j++)
		pd_pipe_owned(p, T, hp, wp, *owner, j, pd_pipe_pack_rows, &k);
	*owner = -1;
	return 0;
}

/* Stage 0: embedders and block 0 on every piece into c->h1 (this rank's
 * rows, piece after piece, text rows first in each), the change into c->r,
 * the decision. */
static int pd_pipe_cache_first(struct pd_pipe *p, struct pd_pipe_call *c, const struct pd_dit_call *in,
			       struct pd_fbcache *cs, int64_t hp, int64_t wp, int pieces, const struct pd_dump *dump,
			       double *sums)
{
	int64_t D = p->model->info.dim, T = in->txt_len, off = 0, ioff = 0;
	int j = p->sp->rank;

	for (int k = 0; k < pieces; k++) {
		struct pd_pipe_piece pc;
		struct pd_dit_call piece, local;
		int64_t n;
		float *e, *h1;

		pd_pipe_piece(p, T, hp, wp, pieces, k, j, &pc);
		pd_pipe_local(p, in, &pc, &piece, &local);
		n = pc.tn + pc.in;
		if (pd_grow_floats(&p->x, &p->cap_x, (size_t)(n * D + 1), "PipeFusion"))
			return -1;
		e = p->x;
		h1 = c->h1 + off * D;
		if (pd_dit_forward_blocks(p->model, &local, 0, 0, NULL, e, NULL, dump) ||
		    pd_dit_forward_blocks(p->model, &local, 0, 1, e, h1, NULL, dump))
			return -1;
		for (int64_t i = 0; i < pc.in; i++) {
			const float *a = h1 + (pc.tn + i) * D, *b = e + (pc.tn + i) * D;
			float *r = c->r + (pc.i0 + i) * D;

			for (int64_t d = 0; d < D; d++)
				r[d] = a[d] - b[d];
		}
		memcpy(c->h1img + ioff * D, h1 + pc.tn * D, (size_t)(pc.in * D) * sizeof(float));
		off += n;
		ioff += pc.in;
	}
	if (cs->valid && cs->threshold > 0) {
		if (c->owner_ref != pieces && pd_pipe_complete(p, c->r_ref, &c->owner_ref, T, hp, wp, D))
			return -1;
		for (int k = 0; k < pieces; k++) {
			struct pd_pipe_piece pc;

			pd_pipe_piece(p, T, hp, wp, pieces, k, j, &pc);
			for (int64_t i = pc.i0 * D; i < (pc.i0 + pc.in) * D; i++) {
				sums[0] += fabs((double)c->r_ref[i] - (double)c->r[i]);
				sums[1] += fabs((double)c->r_ref[i]);
			}
		}
		if (p->sp->size > 1 && p->sp->ops->allreduce(p->sp, sums, 2, PD_COMM_F64, PD_COMM_SUM))
			return -1;
	}
	return 0;
}

/* The cache's arrays of call C, made on first use at their largest (a
 * text context comes with every piece). */
static int pd_pipe_cache_arrays(struct pd_pipe *p, struct pd_pipe_call *c, int64_t T, int64_t L, int64_t D)
{
	int64_t texts = p->model->info.txt_context ? (p->patches > 1 ? p->patches : 1) : 1;
	size_t all = (size_t)(L * D + 1), seq = (size_t)((texts * T + L) * D + 1);
	int last = p->stage == p->stages - 1;

	if (c->h1img)
		return 0;
	c->owner_ref = c->owner_rest = -1;
	c->h1img = pd_malloc(all * sizeof(float), "First Block Cache");
	if (!c->h1img)
		return -1;
	if (p->stage == 0) {
		c->r_ref = pd_calloc(all, sizeof(float), "First Block Cache");
		c->r = pd_calloc(all, sizeof(float), "First Block Cache");
		c->h1 = pd_malloc(seq * sizeof(float), "First Block Cache");
		if (!c->r_ref || !c->r || !c->h1)
			return -1;
	}
	if (last) {
		c->rest = pd_calloc(all, sizeof(float), "First Block Cache");
		if (!c->rest)
			return -1;
	}
	return 0;
}

/* ----------------------------------------------------------------------- */
/* A step                                                                  */
/* ----------------------------------------------------------------------- */

int pd_pipe_predict(void *ctx, const struct pd_dit_call *in, float *out, const struct pd_dump *dump)
{
	struct pd_pipe *p = ctx;
	const struct pd_dit_info *info = &p->model->info;
	int P = p->sp->size, j = p->sp->rank, A = info->n_axes, last = p->stage == p->stages - 1;
	int nb = info->blocks;
	int64_t T = in->txt_len, L = in->img_len, D = info->dim, C = info->out_channels;
	/* patches are bands of whole token rows: the packed grid's rows */
	int64_t wp = L, hp, ioff = 0, own = 0;
	int pieces, warm = in->step < p->warmup, rc = -1, skip = 0;
	struct pd_fbcache *cs = in->cache;
	struct pd_pipe_call *c;
	float *send[2] = { NULL, NULL };
	struct pd_comm_req sreq[2], rreq, h1req;
	size_t cap = 0;

	memset(sreq, 0, sizeof(sreq));
	memset(&rreq, 0, sizeof(rreq));
	memset(&h1req, 0, sizeof(h1req));
	/* the image is (L / wp) token rows of wp tokens: the ids' row index
	 * (axis 1) changes every wp tokens */
	for (int64_t n = 1; n < L; n++)
		if (in->img_ids[n * A + 1] != in->img_ids[1]) {
			wp = n;
			break;
		}
	if (wp < 1 || L % wp)
		return pd_errorf("PipeFusion: %lld image tokens are not whole rows of %lld", (long long)L,
				 (long long)wp);
	hp = L / wp;
	/* bands are whole rows: fewer than asked, said once (the first
	 * stage's first rank) */
	if (!warm && p->patches > hp && !p->told_rows) {
		p->told_rows = 1;
		if (p->stage == 0 && j == 0)
			pd_log(1, "pdit: note: --num-patches %d is more than the image's %lld token rows: PipeFusion runs "
			       "%lld bands a step\n", p->patches, (long long)hp, (long long)hp);
	}
	pieces = warm ? 1 : (int)(p->patches < hp ? p->patches : hp);
	if (pieces < 1)
		pieces = 1;
	c = pd_pipe_state(p, in);
	if (!c)
		return -1;
	for (int k = 0; k < pieces; k++) {
		struct pd_pipe_piece pc;

		pd_pipe_piece(p, T, hp, wp, pieces, k, j, &pc);
		own += pc.in;
	}

	if (cs) {
		/* stage 0 decides, every stage learns it; counters move alike on
		 * every rank (the runner reports them) */
		double sums[2] = { 0, 0 };

		if (pd_pipe_cache_arrays(p, c, T, L, D))
			return -1;
		if (p->stage == 0 && pd_pipe_cache_first(p, c, in, cs, hp, wp, pieces, warm ? dump : NULL, sums))
			return -1;
		if (p->stage == 0 && p->stages > 1 &&
		    p->pp->ops->isend(p->pp, c->h1img, (size_t)(own * D) * sizeof(float), p->stages - 1,
				      PD_PIPE_TAG - 1, &h1req))
			return -1;
		if (last && p->stages > 1 &&
		    p->pp->ops->irecv(p->pp, c->h1img, (size_t)(own * D) * sizeof(float), 0, PD_PIPE_TAG - 1,
				      &h1req) == -1)
			return -1;
		/* stage 0's measure decides on every stage alike */
		if (p->stages > 1 && p->pp->ops->bcast(p->pp, sums, sizeof(sums), 0))
			goto out;
		skip = pd_fbcache_decide(cs, sums);
		if (!skip && p->stage == 0) {
			float *t = c->r_ref;

			c->r_ref = c->r;
			c->r = t;
			c->owner_ref = pieces;
		}
		if (last && p->stages > 1 && p->pp->ops->wait(p->pp, &h1req))
			goto out;
		if (skip && last && c->owner_rest != pieces &&
		    pd_pipe_complete(p, c->rest, &c->owner_rest, T, hp, wp, D))
			goto out;
	}
	for (int piece = 0; piece < pieces; piece++) {
		struct pd_pipe_piece pc;
		struct pd_dit_call pcall, local;
		/* with the cache, stage 0 has run block 0 already */
		int first = p->first, count = p->count;
		int64_t n;
		float *x_in = NULL;
		int s = piece % 2;

		pd_pipe_piece(p, T, hp, wp, pieces, piece, j, &pc);
		pd_pipe_local(p, in, &pc, &pcall, &local);
		n = pc.tn + pc.in;
		if (skip) {
			/* the cached effect of the other blocks, then the final layers */
			if (!last)
				break;
			if (pd_grow_floats(&p->x, &p->cap_x, (size_t)(pc.in * D + 1), "PipeFusion"))
				goto out;
			for (int64_t i = 0; i < pc.in * D; i++)
				p->x[i] = c->h1img[ioff * D + i] + c->rest[pc.i0 * D + i];
			local.txt_len = 0;
			first = nb;
			count = 0;
			x_in = p->x;
		} else if (p->stage > 0) {
			/* its own request: sreq[s] may still carry piece - 2's send */
			if (pd_grow_floats(&p->x, &p->cap_x, (size_t)(n * D + 1), "PipeFusion") ||
			    p->pp->ops->irecv(p->pp, p->x, (size_t)(n * D) * sizeof(float), p->stage - 1,
					      PD_PIPE_TAG + piece, &rreq) == -1 ||
			    p->pp->ops->wait(p->pp, &rreq))
				goto out;
			x_in = p->x;
		} else if (cs) {
			int64_t off = 0;

			for (int k = 0; k < piece; k++) {
				struct pd_pipe_piece q;

				pd_pipe_piece(p, T, hp, wp, pieces, k, j, &q);
				off += q.tn + q.in;
			}
			x_in = c->h1 + off * D;
			first++;
			count--;
		}
		if (last) {
			if (pd_grow_floats(&p->pred, &p->cap_pred, (size_t)(pc.in * C + 1), "PipeFusion"))
				goto out;
			if (cs && !skip) {
				/* the hidden states too: the other blocks' effect is kept */
				float *fin;

				if (pd_grow_floats(&p->fin, &p->cap_fin, (size_t)(n * D + 1), "PipeFusion"))
					goto out;
				fin = p->fin;
				if (pd_dit_forward_blocks(p->model, &local, first, count, x_in, fin, NULL,
							   warm ? dump : NULL))
					goto out;
				for (int64_t i = 0; i < pc.in * D; i++)
					c->rest[pc.i0 * D + i] = fin[pc.tn * D + i] - c->h1img[ioff * D + i];
				local.txt_len = 0;
				if (pd_dit_forward_blocks(p->model, &local, nb, 0, fin + pc.tn * D, NULL, p->pred,
							   NULL))
					goto out;
			} else if (pd_dit_forward_blocks(p->model, &local, first, count, x_in, NULL, p->pred,
							  warm && !skip ? dump : NULL)) {
				goto out;
			}
			/* the piece's image rows, chunk after chunk: in token order */
			for (int r = 0; r < P; r++)
				p->bytes[r] = (size_t)(pd_chunk_len(pc.rowsn, P, r) * C) * sizeof(float);
			if (p->sp->ops->allgatherv(p->sp, p->pred, p->bytes[j], out + pc.rows0 * C, p->bytes))
				goto out;
		} else {
			/* a send slot is reused two pieces later, after its send ended */
			if (p->pp->ops->wait(p->pp, &sreq[s]))
				goto out;
			if ((size_t)(n * D) > cap || !send[s]) {
				for (int b = 0; b < 2; b++) {
					if (p->pp->ops->wait(p->pp, &sreq[b]))
						goto out;
					free(send[b]);
					send[b] = pd_malloc((size_t)(n * D + 1) * sizeof(float), "PipeFusion");
					if (!send[b])
						goto out;
				}
				cap = (size_t)(n * D);
			}
			if (pd_dit_forward_blocks(p->model, &local, first, count, x_in, send[s], NULL,
						   warm ? dump : NULL) ||
			    p->pp->ops->isend(p->pp, send[s], (size_t)(n * D) * sizeof(float), p->stage + 1,
					      PD_PIPE_TAG + piece, &sreq[s]))
				goto out;
		}
		ioff += pc.in;
	}
	if (cs && last && !skip)
		c->owner_rest = pieces;
	if (p->pp->ops->wait(p->pp, &sreq[0]) || p->pp->ops->wait(p->pp, &sreq[1]) ||
	    p->pp->ops->wait(p->pp, &h1req))
		goto out;
	/* every stage steps the scheduler with the whole prediction */
	rc = p->pp->ops->bcast(p->pp, out, (size_t)(L * C) * sizeof(float), p->stages - 1);
out:
	for (int b = 0; b < 2; b++) {
		if (rc)
			p->pp->ops->wait(p->pp, &sreq[b]);
		free(send[b]);
	}
	if (rc) {
		p->pp->ops->wait(p->pp, &h1req);
		p->pp->ops->wait(p->pp, &rreq);
	}
	return rc;
}

static const char *pd_pipe_problem(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
				   size_t len)
{
	if (degree[PD_AXIS_PP] > lim->max_pp) {
		snprintf(buf, len, "--pipefusion-degree %d exceeds the model's %d blocks (each stage needs one)",
			 degree[PD_AXIS_PP], lim->max_pp);
		return buf;
	}
	return NULL;
}

static int pd_pipe_setup(struct pd_parallel *par, void *state, struct pd_dit *m, const struct pd_par_options *opt)
{
	struct pd_mesh *mesh = par->mesh;
	struct pd_comm *sp_data;

	if (mesh->degree[PD_AXIS_PP] <= 1 && !(opt && opt->pipefusion))
		return 1;
	/* the stage's sequence-parallel ranks share its key/value buffers */
	sp_data = pd_parallel_data_comm(par, mesh->sp);
	if (!sp_data || pd_pipe_init(state, m, mesh->axis[PD_AXIS_PP], mesh->sp, sp_data, opt ? opt->patches : 0,
				     opt ? opt->warmup_steps : 1, &par->hooks))
		return -1;
	par->runner.predict = pd_pipe_predict;
	par->runner.predict_ctx = state;
	return 0;
}

static void pd_pipe_leave(struct pd_parallel *par, void *state)
{
	(void)par;
	pd_pipe_free(state);
}

/* Per stage: its hidden states to the next stage once per step (the last
 * stage: its predictions, gathered over its sequence shards, to every
 * other stage); with sequence parallel inside the stage each of its
 * layers' K/V rows to the stage's other ranks, per patch; with tensor
 * parallel its blocks' all-reduces, per patch. The busiest stage counts. */
static void pd_pipe_sends(const struct pd_par_step *s, struct pd_par_sends *out)
{
	const struct pd_dit_info *c = s->info;
	int N = s->degree[PD_AXIS_PP], U = s->degree[PD_AXIS_ULYSSES], T = s->degree[PD_AXIS_TP];
	int P = U * s->degree[PD_AXIS_RING], M = s->patches > 0 ? s->patches : N;
	enum pd_axis sp = s->degree[PD_AXIS_RING] > 1 ? PD_AXIS_RING : PD_AXIS_ULYSSES;
	double A, pred, most = -1, b[PD_AXIS_COUNT], n[PD_AXIS_COUNT], r[PD_AXIS_COUNT];
	struct pd_par_sends busiest = { { 0 }, { 0 }, { 0 } };

	if (N <= 1)
		return;
	pd_par_step_sizes(s, &A, &pred);
	for (int st = 0; st < N; st++) {
		int first, count;

		memset(b, 0, sizeof(b));
		memset(n, 0, sizeof(n));
		memset(r, 0, sizeof(r));
		n[PD_AXIS_PP] = r[PD_AXIS_PP] = M;	/* a stage waits for each patch it receives */
		if (st < N - 1) {
			/* a text context goes whole with every patch */
			b[PD_AXIS_PP] = A / P + (c->txt_context ? M * (double)s->txt_len * c->dim * 4.0 : 0);
		} else {
			b[sp] = pred / P * (P - 1);
			b[PD_AXIS_PP] = pred * (N - 1);
		}
		pd_mesh_stage_blocks(c, N, st, &first, &count);
		if (P > 1) {	/* K and V gathered per layer and patch (and the
				 * last stage's prediction per patch) */
			b[sp] += count * 2.0 * A / ((double)P * T) * (P - 1);
			n[sp] = 2.0 * count * M + (st == N - 1 ? M : 0);
			r[sp] = n[sp] * (P - 1);
		}
		if (T > 1) {
			pd_tp_block_sends(s, first, count, M, &b[PD_AXIS_TP], &n[PD_AXIS_TP], &r[PD_AXIS_TP]);
			pd_tp_norm_sends(s, count, M, &b[PD_AXIS_TP], &n[PD_AXIS_TP], &r[PD_AXIS_TP]);
		}
		if (b[PD_AXIS_PP] + b[sp] + b[PD_AXIS_TP] > most) {
			most = b[PD_AXIS_PP] + b[sp] + b[PD_AXIS_TP];
			memcpy(busiest.bytes, b, sizeof(b));
			memcpy(busiest.msgs, n, sizeof(n));
			memcpy(busiest.rounds, r, sizeof(r));
		}
	}
	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		out->bytes[a] += busiest.bytes[a];
		out->msgs[a] += busiest.msgs[a];
		out->rounds[a] += busiest.rounds[a];
	}
}

const struct pd_par_method pd_par_method_pipefusion = {
	.name = "pipefusion",
	.axes = 1u << PD_AXIS_PP,
	.problem = pd_pipe_problem,
	.state_size = sizeof(struct pd_pipe),
	.setup = pd_pipe_setup,
	.free = pd_pipe_leave,
	.sends = pd_pipe_sends,
};
