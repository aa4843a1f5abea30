/*
 * pd_par_ulysses.c - the Ulysses all-to-alls.
 */
#include "pd_par_ulysses.h"
#include "pd_util.h"

/* Where group rank J's rows sit in the laid-out sequence: its text rows
 * from *T0 (TN of them), its image rows from *I0. */
static void pd_ulysses_place(const int64_t *rows, const int64_t *txt, int U, int j, int64_t *t0, int64_t *tn,
			     int64_t *i0)
{
	int64_t T = 0, before_t = 0, before_i = 0;

	for (int x = 0; x < U; x++) {
		int64_t t = txt ? txt[x] : 0;

		T += t;
		if (x < j) {
			before_t += t;
			before_i += rows[x] - t;
		}
	}
	*t0 = before_t;
	*tn = txt ? txt[j] : 0;
	*i0 = T + before_i;
}

int pd_ulysses_to_heads(struct pd_comm *u, struct pd_backend *be, const int64_t *rows, const int64_t *txt,
			const float *q, const float *k, const float *v, int64_t ld, int heads, int head_dim, float *uq,
			float *uk, float *uv, float *send, float *recv, size_t *bytes_s, size_t *bytes_r)
{
	int U = u->size, me = u->rank;
	int64_t hw = (int64_t)(heads / U) * head_dim, mine = rows[me], off = 0;
	const float *src[3] = { q, k, v };
	float *dst[3] = { uq, uk, uv };

	/* send: peer-major, each peer's block [q | k | v] of my rows and its heads */
	for (int j = 0; j < U; j++) {
		for (int t = 0; t < 3; t++)
			be->ops->copy2d(be, send + ((int64_t)j * 3 + t) * mine * hw, hw, src[t] + j * hw, ld, mine, hw);
		bytes_s[j] = (size_t)(3 * mine * hw) * sizeof(float);
		bytes_r[j] = (size_t)(3 * rows[j] * hw) * sizeof(float);
	}
	if (pd_backend_check(be) || u->ops->alltoallv(u, send, bytes_s, recv, bytes_r))
		return -1;
	/* recv: from each peer [q | k | v] of its rows; lay them out in the
	 * sequence's order (its text rows, then its image rows, each after the
	 * earlier peers') */
	for (int j = 0; j < U; j++) {
		const float *blk = recv + 3 * off * hw;
		int64_t t0, tn, i0;

		pd_ulysses_place(rows, txt, U, j, &t0, &tn, &i0);
		for (int t = 0; t < 3; t++) {
			if (tn > 0)
				be->ops->copy2d(be, dst[t] + t0 * hw, hw, blk + t * rows[j] * hw, hw, tn, hw);
			be->ops->copy2d(be, dst[t] + i0 * hw, hw, blk + (t * rows[j] + tn) * hw, hw, rows[j] - tn, hw);
		}
		off += rows[j];
	}
	return pd_backend_check(be);
}

int pd_ulysses_to_tokens(struct pd_comm *u, struct pd_backend *be, const int64_t *rows, const int64_t *txt,
			 const float *uo, float *out, int64_t ldo, int heads, int head_dim, float *send, float *recv,
			 size_t *bytes_s, size_t *bytes_r)
{
	int U = u->size, me = u->rank, text = 0;
	int64_t hw = (int64_t)(heads / U) * head_dim, mine = rows[me], off = 0;

	for (int j = 0; txt && j < U; j++)
		text |= txt[j] > 0;
	/* each peer's rows back together, peer by peer (without text rows
	 * they are already) */
	for (int j = 0; j < U; j++) {
		int64_t t0, tn, i0;

		pd_ulysses_place(rows, txt, U, j, &t0, &tn, &i0);
		if (text) {
			if (tn > 0)
				be->ops->copy2d(be, send + off * hw, hw, uo + t0 * hw, hw, tn, hw);
			be->ops->copy2d(be, send + (off + tn) * hw, hw, uo + i0 * hw, hw, rows[j] - tn, hw);
		}
		bytes_s[j] = (size_t)(rows[j] * hw) * sizeof(float);
		bytes_r[j] = (size_t)(mine * hw) * sizeof(float);
		off += rows[j];
	}
	if (pd_backend_check(be) || u->ops->alltoallv(u, text ? send : uo, bytes_s, recv, bytes_r))
		return -1;
	/* peer j computed heads [j H/U, (j+1) H/U) of my rows */
	for (int j = 0; j < U; j++)
		be->ops->copy2d(be, out + j * hw, ldo, recv + j * mine * hw, hw, mine, hw);
	return pd_backend_check(be);
}
