/*
 * pd_par_ring.h - ring attention: a true point-to-point ring.
 *
 * Each rank keeps only its own K/V chunk and the one arriving: at hop s it
 * posts the send of the chunk it holds to the next rank and the receive of
 * the next chunk from the previous one, then computes attention on the
 * chunk it holds while they travel, and merges the partial result with the
 * log-sum-exp formula in f32. K/V memory per rank is two chunks, O(S/R).
 */
#ifndef PD_PAR_RING_H
#define PD_PAR_RING_H

#include "pd_backend.h"
#include "pd_comm.h"

/* Attention of my queries Q [sq, heads x head_dim] (row stride ldq) over the
 * keys and values of all ring ranks. K, V: my chunk [kv_rows[me], heads x
 * head_dim] with row stride ldkv; KV_ROWS[j]: rows ring rank j holds.
 * Scratch: KV[0], KV[1] each 2 x max(kv_rows) x heads x head_dim floats,
 * PART sq x heads x head_dim, LSE and PLSE heads x sq. OUT: row stride ldo. */
int pd_ring_attention(struct pd_comm *ring, struct pd_backend *be, float *out, int64_t ldo, const float *q,
		      int64_t ldq, int64_t sq, const float *k, const float *v, int64_t ldkv, const int64_t *kv_rows,
		      int heads, int head_dim, float *kv[2], float *part, float *lse, float *plse);

#endif /* PD_PAR_RING_H */
