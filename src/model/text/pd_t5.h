/*
 * pd_t5.h - FLUX.1's second text encoder, the T5 v1.1 encoder
 * (text_encoder_2/; transformers v4.43 formulas, see
 * tests/golden/text-encoders-tiny/README.md): unscaled embeddings,
 * pre-RMSNorm blocks, attention without 1/sqrt(d) and with block 0's
 * bidirectional relative position bias, gated GELU (tanh) feed-forward,
 * final RMSNorm.
 *
 * It loads from a transformers folder or from one .safetensors file, as
 * pd_clip.h describes.
 */
#ifndef PD_T5_H
#define PD_T5_H

#include "pd_backend.h"
#include "pd_dump.h"

struct pd_t5_config {
	int d_model;                    /* 4096 in FLUX.1 */
	int d_kv;                       /* per-head width */
	int d_ff;                       /* gated feed-forward width */
	int heads;                      /* num_heads */
	int layers;                     /* num_layers */
	int vocab;                      /* vocab_size */
	int buckets;                    /* relative_attention_num_buckets */
	int max_distance;               /* relative_attention_max_distance */
	float eps;                      /* layer_norm_epsilon */
};

struct pd_t5;

int pd_t5_load(struct pd_t5 **out, const char *path, struct pd_backend *be);
const struct pd_t5_config *pd_t5_get_config(const struct pd_t5 *m);
/* IDS [n] -> OUT [n, d_model] (last_hidden_state). DUMP gets
 * t5.embeddings, t5.block.K, t5.position_bias. */
int pd_t5_forward(struct pd_t5 *m, const int64_t *ids, int n, float *out, const struct pd_dump *dump);
void pd_t5_free(struct pd_t5 *m);

/* T5's bucket of relative position R = key - query (bidirectional). */
int pd_t5_bucket(int r, int buckets, int max_distance);

#endif /* PD_T5_H */
