/*
 * pd_llm.h - a decoder-only language model as a text encoder: its last
 * hidden state after the final norm, as the pipelines read it
 * (Qwen-Image's text encoder is Qwen2.5-VL's language model; HunyuanVideo
 * and the newer families use others of this shape).
 *
 * The Qwen2 decoder of transformers v4.43.4 (modeling_qwen2.py; Qwen2.5-VL's
 * language model is the same for text): token embedding, per layer
 * RMSNorm, grouped-query attention with q/k/v biases and rotary positions
 * (rotate-half, theta from the config; Qwen2.5-VL's multimodal RoPE gives
 * a text-only prompt the same position in its three sections, which is
 * this), causal; RMSNorm, SiLU-gated MLP; the final RMSNorm.
 *
 * A prompt is encoded alone: under the causal mask a prompt's tokens never
 * see the padding a batch puts after them, so its hidden states are the
 * batch's on its own tokens.
 *
 * Weights: a transformers folder (config.json, model.safetensors or its
 * shards) or one .safetensors file (its sizes from a "config" metadata
 * entry, else its shapes with Qwen2.5's head width of 128), the decoder
 * under `model.`, `model.language_model.` or `language_model.model.` (the
 * vision tower's weights, `visual.`, are never read); or a GGUF file in
 * llama.cpp's names (token_embd, blk.N.attn_q, ..., output_norm; the sizes
 * from its metadata); the token table is read a row at a time.
 */
#ifndef PD_LLM_H
#define PD_LLM_H

#include "pd_backend.h"
#include "pd_dump.h"

struct pd_llm_config {
	int hidden;                     /* hidden_size */
	int intermediate;               /* intermediate_size (the MLP) */
	int layers;                     /* num_hidden_layers */
	int heads;                      /* num_attention_heads */
	int kv_heads;                   /* num_key_value_heads (grouped-query attention) */
	int head_dim;                   /* hidden / heads unless the config says */
	int vocab;                      /* vocab_size */
	float eps;                      /* rms_norm_eps */
	double theta;                   /* rope_theta */
	int vl;                         /* Qwen2-VL's or Qwen2.5-VL's (a vision tower beside it, or its
					 * config's model_type): llama.cpp's qwen2vl, else qwen2 */
};

struct pd_llm;
struct pd_st;

int pd_llm_load(struct pd_llm **out, const char *path, struct pd_backend *be);
/* PATH's weights and sizes only, as pd_llm_load finds them (no backend: for
 * pdit quantize and inspect); pd_llm_free frees it. */
int pd_llm_open_weights(struct pd_llm **out, const char *path);
/* Whether PATH (a folder of model*.safetensors, one file, a GGUF) holds a
 * decoder-only language model: 1 or 0. */
int pd_llm_is(const char *path);
/* The weights M reads, and the prefix of the decoder's names in them. */
const struct pd_st *pd_llm_weights(const struct pd_llm *m, const char **pre);
/* NAME (transformers', under PRE) as llama.cpp's GGUF files name it
 * (token_embd.weight, blk.N.attn_q.weight, ..., output_norm.weight) into
 * OUT: 1, or 0 when the encoder never reads it (the head, a vision tower). */
int pd_llm_gguf_name(const char *name, const char *pre, char *out, size_t len);
const struct pd_llm_config *pd_llm_get_config(const struct pd_llm *m);
/* IDS [n] (one prompt, positions 0..n-1) -> OUT [n, hidden], the last
 * hidden state after the final norm. DUMP gets llm.embeddings and
 * llm.layer.K. */
int pd_llm_forward(struct pd_llm *m, const int64_t *ids, int n, float *out, const struct pd_dump *dump);
void pd_llm_free(struct pd_llm *m);

#endif /* PD_LLM_H */
