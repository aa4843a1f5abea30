/*
 * pd_clip.h - FLUX.1's first text encoder, the CLIP text model
 * (text_encoder/; transformers v4.43 formulas, see
 * tests/golden/text-encoders-tiny/README.md): token + position embeddings,
 * pre-norm layers with causal attention and quick GELU, final LayerNorm; the
 * pooled output is the last hidden state at the EOS position.
 *
 * It loads from a transformers folder (config.json and model.safetensors or
 * a sharded index) or from one .safetensors file (sizes read from the
 * tensors; names with a prefix such as "text_encoders.clip_l.transformer."
 * are found).
 */
#ifndef PD_CLIP_H
#define PD_CLIP_H

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

struct pd_clip;

int pd_clip_load(struct pd_clip **out, const char *path, struct pd_backend *be);
const struct pd_clip_config *pd_clip_get_config(const struct pd_clip *m);
/* IDS [n], n <= max_pos. LAST (may be NULL) gets [n, hidden], POOLED
 * [hidden]; DUMP (may be NULL) gets clip.hidden_states.K and the rest. */
int pd_clip_forward(struct pd_clip *m, const int64_t *ids, int n, float *last, float *pooled,
		    const struct pd_dump *dump);
void pd_clip_free(struct pd_clip *m);

#endif /* PD_CLIP_H */
