/*
 * pd_par_ring.h - ring attention: a true point-to-point ring.
 *
 * Each rank keeps only its own K/V chunk and the one arriving: at hop s it
 * posts the send of the chunk it holds to the next rank and the receive of
 * the next chunk from the previous one, then computes attention on the
 * chunk it holds while they travel, and merges the partial result with the
 * log-sum-exp formula in f32. K/V memory per rank is two chunks, O(S/R).
 *
 * The merges sum a query's keys in another order than one process's
 * attention does, so the result differs from it in the last f32 bits;
 * where 8-bit products follow (int8 products round the next layer's input
 * to 1/127 of a block), such a bit can become a step of a rounding, and
 * the latents move by 1e-2. The gathered form is exact instead: every
 * chunk's K/V gathered, laid out in the sequence's order, and one attention
 * over them, as one process computes each query row (the same key blocks:
 * they depend on the key count only). It sends the same bytes in two
 * collectives, without the overlap, and holds the whole sequence's K and
 * V, O(S), and where chunks have text rows one more of them as received
 * (the sequence's order puts every text row first).
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

/* The gathered form, the same result as one process: as pd_ring_attention,
 * KV_TXT[j] the text rows at the head of ring rank j's chunk (NULL: none).
 * Scratch: SEND kv_rows[me] x heads x head_dim floats; KF, VF and (used
 * only where some chunk has text rows) STAGE sum(kv_rows) x heads x
 * head_dim floats each; BYTES ring size entries. */
int pd_ring_attention_gathered(struct pd_comm *ring, struct pd_backend *be, float *out, int64_t ldo, const float *q,
			       int64_t ldq, int64_t sq, const float *k, const float *v, int64_t ldkv,
			       const int64_t *kv_rows, const int64_t *kv_txt, int heads, int head_dim, float *send,
			       float *stage, float *kf, float *vf, size_t *bytes);

#endif /* PD_PAR_RING_H */
