/*
 * pd_text.h - FLUX.1's two text encoders (transformers v4.43 formulas, see
 * tests/golden/text-encoders-tiny/README.md):
 *
 *   CLIP text model (text_encoder/): token + position embeddings, pre-norm
 *   layers with causal attention and quick GELU, final LayerNorm; the
 *   pooled output is the last hidden state at the EOS position.
 *
 *   T5 v1.1 encoder (text_encoder_2/): unscaled embeddings, pre-RMSNorm
 *   blocks, attention without 1/sqrt(d) and with block 0's bidirectional
 *   relative position bias, gated GELU (tanh) feed-forward, final RMSNorm.
 *
 * Each loads from a transformers folder (config.json and model.safetensors
 * or a sharded index) or from one .safetensors file (sizes read from the
 * tensors; names with a prefix such as "text_encoders.clip_l.transformer."
 * are found).
 */
#ifndef PD_TEXT_H
#define PD_TEXT_H

#include "pd_backend.h"
#include "pd_dump.h"

struct pd_clip_config {
	int hidden;                     /* hidden_size (768 in FLUX.1) */
	int intermediate;               /* intermediate_size */
	int heads;                      /* num_attention_heads */
	int layers;                     /* num_hidden_layers */
	int max_pos;                    /* max_position_embeddings (77) */
	int vocab;                      /* vocab_size */
	float eps;                      /* layer_norm_eps */
	int eos_token_id;               /* the config's: 2 selects the legacy argmax pooling */
};

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

struct pd_clip;
struct pd_t5;

int pd_clip_load(struct pd_clip **out, const char *path, struct pd_backend *be);
const struct pd_clip_config *pd_clip_get_config(const struct pd_clip *m);
/* IDS [n], n <= max_pos. LAST (may be NULL) gets [n, hidden], POOLED
 * [hidden]; DUMP (may be NULL) gets clip.hidden_states.K and the rest. */
int pd_clip_forward(struct pd_clip *m, const int64_t *ids, int n, float *last, float *pooled,
		    const struct pd_dump *dump);
void pd_clip_free(struct pd_clip *m);

int pd_t5_load(struct pd_t5 **out, const char *path, struct pd_backend *be);
const struct pd_t5_config *pd_t5_get_config(const struct pd_t5 *m);
/* IDS [n] -> OUT [n, d_model] (last_hidden_state). DUMP gets
 * t5.embeddings, t5.block.K, t5.position_bias. */
int pd_t5_forward(struct pd_t5 *m, const int64_t *ids, int n, float *out, const struct pd_dump *dump);
void pd_t5_free(struct pd_t5 *m);

/* T5's bucket of relative position R = key - query (bidirectional). */
int pd_t5_bucket(int r, int buckets, int max_distance);

#endif /* PD_TEXT_H */
