/*
 * pd_par_ulysses.c - the Ulysses all-to-alls.
 */
#include "pd_par_ulysses.h"
#include "pd_util.h"

int pd_ulysses_to_heads(struct pd_comm *u, struct pd_backend *be, const int64_t *rows, const float *q,
			const float *k, const float *v, int64_t ld, int heads, int head_dim, float *uq, float *uk,
			float *uv, float *send, float *recv, size_t *bytes_s, size_t *bytes_r)
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
	/* recv: from each peer [q | k | v] of its rows; lay them out by token */
	for (int j = 0; j < U; j++) {
		const float *blk = recv + 3 * off * hw;

		for (int t = 0; t < 3; t++)
			be->ops->copy2d(be, dst[t] + off * hw, hw, blk + t * rows[j] * hw, hw, rows[j], hw);
		off += rows[j];
	}
	return pd_backend_check(be);
}

int pd_ulysses_to_tokens(struct pd_comm *u, struct pd_backend *be, const int64_t *rows, const float *uo,
			 float *out, int64_t ldo, int heads, int head_dim, float *recv, size_t *bytes_s,
			 size_t *bytes_r)
{
	int U = u->size, me = u->rank;
	int64_t hw = (int64_t)(heads / U) * head_dim, mine = rows[me];

	/* the output rows are already grouped by owner: send them as they are */
	for (int j = 0; j < U; j++) {
		bytes_s[j] = (size_t)(rows[j] * hw) * sizeof(float);
		bytes_r[j] = (size_t)(mine * hw) * sizeof(float);
	}
	if (u->ops->alltoallv(u, uo, bytes_s, recv, bytes_r))
		return -1;
	/* peer j computed heads [j H/U, (j+1) H/U) of my rows */
	for (int j = 0; j < U; j++)
		be->ops->copy2d(be, out + j * hw, ldo, recv + j * mine * hw, hw, mine, hw);
	return pd_backend_check(be);
}
