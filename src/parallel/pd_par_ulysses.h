/*
 * pd_par_ulysses.h - Ulysses: an all-to-all turns "my tokens, all heads" into
 * "the group's tokens, my heads" before attention, and back after it.
 *
 * Group rank u ends up with heads [u H/U, (u+1) H/U) of every group rank's
 * tokens, laid out as one process has them (under ring x Ulysses: as its
 * ring chunk has them): every rank's text rows in group rank order, then
 * every rank's image rows (each rank holds a chunk of each). RoPE was applied before the exchange with each token's own
 * position, so any order would give the same attention, but only the
 * sequence's own order gives it bit for bit (its softmax sums the keys in
 * that order): where 8-bit products follow, a last-bit difference can move
 * a rounding. The way back puts head group u at heads u H/U again, which is
 * what must not go wrong.
 */
#ifndef PD_PAR_ULYSSES_H
#define PD_PAR_ULYSSES_H

#include "pd_backend.h"
#include "pd_comm.h"

/* ROWS[j]: tokens group rank j holds, its first TXT[j] text rows (TXT NULL:
 * none). q, k, v: mine, [rows[me], heads x
 * head_dim], row stride ld. UQ, UK, UV receive [sum rows, heads/U x
 * head_dim]. SEND and RECV hold 3 x rows[me] x heads x head_dim floats and
 * 3 x sum(rows) x heads/U x head_dim floats; BYTES_S, BYTES_R have U entries. */
int pd_ulysses_to_heads(struct pd_comm *u, struct pd_backend *be, const int64_t *rows, const int64_t *txt,
			const float *q, const float *k, const float *v, int64_t ld, int heads, int head_dim, float *uq,
			float *uk, float *uv, float *send, float *recv, size_t *bytes_s, size_t *bytes_r);

/* The way back: UO [sum rows, heads/U x head_dim] -> OUT [rows[me], heads x
 * head_dim] with row stride ldo. SEND holds sum(rows) x heads/U x head_dim
 * floats (unused without text rows: UO is sent as it is), RECV rows[me] x
 * heads x head_dim. */
int pd_ulysses_to_tokens(struct pd_comm *u, struct pd_backend *be, const int64_t *rows, const int64_t *txt,
			 const float *uo, float *out, int64_t ldo, int heads, int head_dim, float *send, float *recv,
			 size_t *bytes_s, size_t *bytes_r);

#endif /* PD_PAR_ULYSSES_H */
