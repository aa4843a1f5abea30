/*
 * pd_par_ring.c - ring attention with double-buffered point-to-point hops.
 */
#include "pd_par_ring.h"
#include "pd_util.h"

#include <math.h>

#define PD_RING_TAG 7100

int pd_ring_attention(struct pd_comm *ring, struct pd_backend *be, float *out, int64_t ldo, const float *q,
		      int64_t ldq, int64_t sq, const float *k, const float *v, int64_t ldkv, const int64_t *kv_rows,
		      int heads, int head_dim, float *kv[2], float *part, float *lse, float *plse)
{
	int R = ring->size, r = ring->rank, next = (r + 1) % R, prev = (r + R - 1) % R;
	int64_t W = (int64_t)heads * head_dim;
	float scale = 1.0f / sqrtf((float)head_dim);

	/* a chunk travels as one message: its K rows, then its V rows */
	be->ops->copy2d(be, kv[0], W, k, ldkv, kv_rows[r], W);
	be->ops->copy2d(be, kv[0] + kv_rows[r] * W, W, v, ldkv, kv_rows[r], W);
	for (int s = 0; s < R; s++) {
		int owner = (r - s + R) % R, incoming = (r - s - 1 + 2 * R) % R;
		int64_t n = kv_rows[owner];
		float *cur = kv[s % 2], *nxt = kv[(s + 1) % 2];
		struct pd_comm_req sreq = { .active = 0 }, rreq = { .active = 0 };

		if (pd_backend_check(be))
			return -1;
		/* start moving the chunk on before computing with it */
		if (s < R - 1 && (ring->ops->isend(ring, cur, (size_t)(2 * n * W) * sizeof(float), next, PD_RING_TAG + s,
						    &sreq) ||
				  ring->ops->irecv(ring, nxt, (size_t)(2 * kv_rows[incoming] * W) * sizeof(float), prev,
						   PD_RING_TAG + s, &rreq)))
			return -1;
		if (s == 0) {
			be->ops->attention(be, out, ldo, lse, q, ldq, cur, W, cur + n * W, W, sq, n, heads, head_dim,
					   scale);
		} else {
			be->ops->attention(be, part, W, plse, q, ldq, cur, W, cur + n * W, W, sq, n, heads, head_dim,
					   scale);
			be->ops->lse_merge(be, out, ldo, lse, part, W, plse, sq, heads, head_dim);
		}
		/* both transfers finish before their buffers are used again */
		if (ring->ops->wait(ring, &sreq) || ring->ops->wait(ring, &rreq))
			return -1;
	}
	return pd_backend_check(be);
}

/* One of K and V: my rows SRC gathered from every chunk into DST [S, W] in
 * the sequence's order (every chunk's text rows, then every image row),
 * through STAGE where the chunks have text rows, else straight. */
static int pd_ring_gather(struct pd_comm *ring, struct pd_backend *be, float *dst, const float *src, int64_t ld,
			  const int64_t *kv_rows, const int64_t *kv_txt, int64_t txt, int64_t W, float *send,
			  float *stage, size_t *bytes)
{
	int R = ring->size, r = ring->rank;
	int64_t at = 0, ti = 0, ii = 0;

	be->ops->copy2d(be, send, W, src, ld, kv_rows[r], W);
	if (pd_backend_check(be) || ring->ops->allgatherv(ring, send, bytes[r], txt ? stage : dst, bytes))
		return -1;
	for (int j = 0; txt && j < R; j++) {
		int64_t n = kv_rows[j], t = kv_txt[j];

		be->ops->copy2d(be, dst + ti * W, W, stage + at * W, W, t, W);
		be->ops->copy2d(be, dst + (txt + ii) * W, W, stage + (at + t) * W, W, n - t, W);
		at += n;
		ti += t;
		ii += n - t;
	}
	return 0;
}

int pd_ring_attention_gathered(struct pd_comm *ring, struct pd_backend *be, float *out, int64_t ldo, const float *q,
			       int64_t ldq, int64_t sq, const float *k, const float *v, int64_t ldkv,
			       const int64_t *kv_rows, const int64_t *kv_txt, int heads, int head_dim, float *send,
			       float *stage, float *kf, float *vf, size_t *bytes)
{
	int64_t W = (int64_t)heads * head_dim, S = 0, txt = 0;

	for (int j = 0; j < ring->size; j++) {
		S += kv_rows[j];
		txt += kv_txt ? kv_txt[j] : 0;
		bytes[j] = (size_t)(kv_rows[j] * W) * sizeof(float);
	}
	if (pd_ring_gather(ring, be, kf, k, ldkv, kv_rows, kv_txt, txt, W, send, stage, bytes) ||
	    pd_ring_gather(ring, be, vf, v, ldkv, kv_rows, kv_txt, txt, W, send, stage, bytes))
		return -1;
	be->ops->attention(be, out, ldo, NULL, q, ldq, kf, W, vf, W, sq, S, heads, head_dim,
			   1.0f / sqrtf((float)head_dim));
	return pd_backend_check(be);
}
