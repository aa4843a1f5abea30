/*
 * pd_qwen_tiny.c - Qwen-Image's random model folders for `pdit tiny`: a
 * whole folder as Qwen/Qwen-Image is published (QwenImagePipeline: the
 * transformer, AutoencoderKLQwenImage's decoder, Qwen2.5-VL's language
 * model in its config dialect, a byte-level BPE tokenizer with the chat
 * template's special tokens, the scheduler); pd_tiny.h has the shared
 * parts.
 */
#include "pd_qwen.h"
#include "pd_tiny.h"
#include "pd_unicode.h"
#include "pd_util.h"
#include "pd_wan.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pd_qwen_tiny_small(struct pd_tiny_opts *o)
{
	pd_tiny_defaults(o);
	o->heads = 4;
	o->head_dim = 16;
	o->layers = 2;
	o->llm_width = 32;
	o->llm_layers = 2;
	o->llm_heads = 4;
	o->llm_kv_heads = 2;
	o->llm_ff = 64;
	o->wan_vae_base = 8;
}

/* Qwen-Image's widths (24 heads of 128, the 7B language model's 3584 wide,
 * 28 heads over 4, MLP 18944; the VAE's base 96) at few blocks */
static void pd_qwen_tiny_real(struct pd_tiny_opts *o)
{
	pd_qwen_tiny_small(o);
	o->dtype = PD_BF16;
	o->heads = 24;
	o->head_dim = 128;
	o->llm_width = 3584;
	o->llm_heads = 28;
	o->llm_kv_heads = 4;
	o->llm_ff = 18944;
	o->wan_vae_base = 96;
}

/* RoPE's three axes of a head: the frame's an eighth, the rest halved,
 * every one even (16, 56, 56 at 128) */
static void pd_qwen_tiny_axes(int hd, int axes[3])
{
	axes[0] = 2 * (hd / 16 > 1 ? hd / 16 : 1);
	axes[1] = (hd - axes[0]) / 2;
	if (axes[1] % 2)
		axes[1]--;
	axes[2] = hd - axes[0] - axes[1];
}

static int pd_qwen_tiny_transformer(const char *dir, const struct pd_tiny_opts *o)
{
	int64_t D = (int64_t)o->heads * o->head_dim, J = o->llm_width, hd = o->head_dim, nv[1] = { J }, hv[1] = { hd };
	struct pd_tiny_writer tw;
	cJSON *c = cJSON_CreateObject(), *a;
	char *path;
	int axes[3], rc;

	if (!c)
		return pd_errorf("out of memory");
	pd_qwen_tiny_axes(o->head_dim, axes);
	cJSON_AddStringToObject(c, "_class_name", "QwenImageTransformer2DModel");
	cJSON_AddStringToObject(c, "_diffusers_version", "0.40.0");
	cJSON_AddNumberToObject(c, "attention_head_dim", o->head_dim);
	a = cJSON_AddArrayToObject(c, "axes_dims_rope");
	for (int i = 0; i < 3; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(axes[i]));
	cJSON_AddBoolToObject(c, "guidance_embeds", 0);
	cJSON_AddNumberToObject(c, "in_channels", 64);
	cJSON_AddNumberToObject(c, "joint_attention_dim", (double)J);
	cJSON_AddNumberToObject(c, "num_attention_heads", o->heads);
	cJSON_AddNumberToObject(c, "num_layers", o->layers);
	cJSON_AddNumberToObject(c, "out_channels", 16);
	cJSON_AddNumberToObject(c, "patch_size", 2);
	if (pd_tiny_save_json(dir, "config.json", c) || pd_tiny_writer_init(&tw, o->seed + 50, o->dtype, 16 + 40 * o->layers))
		return -1;
	pd_tiny_linear(&tw, D, 64, "img_in");
	pd_tiny_add(&tw, 1.0f, 0.1f, 1, nv, "txt_norm.weight");
	pd_tiny_linear(&tw, D, J, "txt_in");
	pd_tiny_linear(&tw, D, 256, "time_text_embed.timestep_embedder.linear_1");
	pd_tiny_linear(&tw, D, D, "time_text_embed.timestep_embedder.linear_2");
	for (int i = 0; i < o->layers; i++) {
		static const char *const proj[] = { "to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj",
						    "to_out.0", "to_add_out" };
		static const char *const norms[] = { "norm_q", "norm_k", "norm_added_q", "norm_added_k" };

		pd_tiny_linear(&tw, 6 * D, D, "transformer_blocks.%d.img_mod.1", i);
		pd_tiny_linear(&tw, 6 * D, D, "transformer_blocks.%d.txt_mod.1", i);
		for (int k = 0; k < 8; k++)
			pd_tiny_linear(&tw, D, D, "transformer_blocks.%d.attn.%s", i, proj[k]);
		for (int k = 0; k < 4; k++)
			pd_tiny_add(&tw, 1.0f, 0.1f, 1, hv, "transformer_blocks.%d.attn.%s.weight", i, norms[k]);
		pd_tiny_linear(&tw, 4 * D, D, "transformer_blocks.%d.img_mlp.net.0.proj", i);
		pd_tiny_linear(&tw, D, 4 * D, "transformer_blocks.%d.img_mlp.net.2", i);
		pd_tiny_linear(&tw, 4 * D, D, "transformer_blocks.%d.txt_mlp.net.0.proj", i);
		pd_tiny_linear(&tw, D, 4 * D, "transformer_blocks.%d.txt_mlp.net.2", i);
	}
	pd_tiny_linear(&tw, 2 * D, D, "norm_out.linear");
	pd_tiny_linear(&tw, 64, D, "proj_out");
	path = pd_strfmt("%s/diffusion_pytorch_model.safetensors", dir);
	rc = !path || pd_tiny_writer_save(&tw, path);
	free(path);
	return rc ? -1 : 0;
}

/* Qwen2.5-VL's language model in its config dialect (the mrope sections
 * a text-only prompt never tells apart), weights under model. */
static int pd_qwen_tiny_llm(const char *dir, const struct pd_tiny_opts *o, int vocab)
{
	int64_t J = o->llm_width, hd = J / o->llm_heads, K = hd * o->llm_kv_heads, F = o->llm_ff, ev[2] = { vocab, J },
		nv[1] = { J };
	struct pd_tiny_writer tw;
	cJSON *c = cJSON_CreateObject(), *rs, *a;
	char *path;
	int rc;

	if (!c)
		return pd_errorf("out of memory");
	cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray((const char *[]){ "Qwen2_5_VLForConditionalGeneration" }, 1));
	cJSON_AddStringToObject(c, "model_type", "qwen2_5_vl");
	cJSON_AddNumberToObject(c, "hidden_size", (double)J);
	cJSON_AddNumberToObject(c, "intermediate_size", (double)F);
	cJSON_AddNumberToObject(c, "num_hidden_layers", o->llm_layers);
	cJSON_AddNumberToObject(c, "num_attention_heads", o->llm_heads);
	cJSON_AddNumberToObject(c, "num_key_value_heads", o->llm_kv_heads);
	cJSON_AddStringToObject(c, "hidden_act", "silu");
	cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-6);
	cJSON_AddNumberToObject(c, "rope_theta", 1000000.0);
	cJSON_AddNumberToObject(c, "vocab_size", vocab);
	cJSON_AddBoolToObject(c, "tie_word_embeddings", 0);
	rs = cJSON_AddObjectToObject(c, "rope_scaling");
	cJSON_AddStringToObject(rs, "type", "mrope");
	a = cJSON_AddArrayToObject(rs, "mrope_section");
	cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(hd / 8)));
	cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(hd / 2 - hd / 8) / 2));
	cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(hd / 2 - hd / 8 - (hd / 2 - hd / 8) / 2)));
	if (pd_tiny_save_json(dir, "config.json", c) ||
	    pd_tiny_writer_init(&tw, o->seed + 60, o->dtype, 8 + 12 * o->llm_layers))
		return -1;
	pd_tiny_add(&tw, 0.0f, 1.0f, 2, ev, "model.embed_tokens.weight");
	for (int i = 0; i < o->llm_layers; i++) {
		pd_tiny_add(&tw, 1.0f, 0.1f, 1, nv, "model.layers.%d.input_layernorm.weight", i);
		pd_tiny_linear(&tw, J, J, "model.layers.%d.self_attn.q_proj", i);
		pd_tiny_linear(&tw, K, J, "model.layers.%d.self_attn.k_proj", i);
		pd_tiny_linear(&tw, K, J, "model.layers.%d.self_attn.v_proj", i);
		pd_tiny_weight(&tw, J, J, "model.layers.%d.self_attn.o_proj", i);
		pd_tiny_add(&tw, 1.0f, 0.1f, 1, nv, "model.layers.%d.post_attention_layernorm.weight", i);
		pd_tiny_weight(&tw, F, J, "model.layers.%d.mlp.gate_proj", i);
		pd_tiny_weight(&tw, F, J, "model.layers.%d.mlp.up_proj", i);
		pd_tiny_weight(&tw, J, F, "model.layers.%d.mlp.down_proj", i);
	}
	pd_tiny_add(&tw, 1.0f, 0.1f, 1, nv, "model.norm.weight");
	path = pd_strfmt("%s/model.safetensors", dir);
	rc = !path || pd_tiny_writer_save(&tw, path);
	free(path);
	return rc ? -1 : 0;
}

/* Qwen2's files in miniature: every byte's stand-in, a few merges of the
 * template's and common words (with and without the space's "Ġ"), and the
 * chat template's special tokens as added tokens. *VOCAB: the rows. */
static int pd_qwen_tiny_tokenizer(const char *dir, int *vocab)
{
	static const char *const words[] = { "the", "image", "of", "and", "a", "red", "cat", "fox", "in", "snow", "user",
					     "system", "assistant", "Describe", "color", "shape", "size", "text" };
	cJSON *v = cJSON_CreateObject();
	char *merges = pd_malloc(1 << 14, "merges"), *text = NULL, sym[8];
	size_t ml = 0;
	int id = 0, rc = -1, next = 256;

	if (!v || !merges || pd_mkdirs(dir))
		goto out;
	ml += (size_t)sprintf(merges, "#version: 0.2\n");
	for (int b = 0; b < 256; b++) {
		int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);

		sym[pd_utf8_encode(printable ? b : next++, sym)] = 0;
		cJSON_AddNumberToObject(v, sym, id++);
	}
	/* ((w0 w1) w2) ..., and the same after "Ġ" (a space before the word) */
	for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
		for (int sp = 0; sp < 2; sp++) {
			char left[64], merged[64], line[160];

			snprintf(left, sizeof(left), "%s%c", sp ? "\xc4\xa0" : "", words[w][0]);
			if (sp && !cJSON_GetObjectItemCaseSensitive(v, left)) {
				ml += (size_t)sprintf(merges + ml, "\xc4\xa0 %c\n", words[w][0]);
				cJSON_AddNumberToObject(v, left, id++);
			}
			for (size_t k = 1; words[w][k]; k++) {
				snprintf(line, sizeof(line), "%s %c", left, words[w][k]);
				snprintf(merged, sizeof(merged), "%.60s%c", left, words[w][k]);
				if (!cJSON_GetObjectItemCaseSensitive(v, merged)) {
					if (ml + strlen(line) + 2 > (1 << 14))
						goto out;
					ml += (size_t)sprintf(merges + ml, "%s\n", line);
					cJSON_AddNumberToObject(v, merged, id++);
				}
				snprintf(left, sizeof(left), "%s", merged);
			}
		}
	text = cJSON_PrintUnformatted(v);
	{
		char *cfg = pd_strfmt(
			"{\n \"tokenizer_class\": \"Qwen2Tokenizer\",\n \"model_max_length\": 131072,\n"
			" \"eos_token\": \"<|im_end|>\",\n \"pad_token\": \"<|endoftext|>\",\n \"bos_token\": null,\n"
			" \"added_tokens_decoder\": {\n"
			"  \"%d\": {\"content\": \"<|endoftext|>\", \"lstrip\": false, \"rstrip\": false, \"special\": true},\n"
			"  \"%d\": {\"content\": \"<|im_start|>\", \"lstrip\": false, \"rstrip\": false, \"special\": true},\n"
			"  \"%d\": {\"content\": \"<|im_end|>\", \"lstrip\": false, \"rstrip\": false, \"special\": true}\n"
			" }\n}\n", id, id + 1, id + 2);

		rc = !text || !cfg || pd_tiny_file(dir, "vocab.json", text) || pd_tiny_file(dir, "merges.txt", merges) ||
		     pd_tiny_file(dir, "tokenizer_config.json", cfg);
		free(cfg);
	}
	*vocab = id + 3;
out:
	cJSON_Delete(v);
	free(merges);
	free(text);
	return rc ? -1 : 0;
}

/* model_index.json and Qwen/Qwen-Image's scheduler folder */
static int pd_qwen_tiny_rest(const char *dir)
{
	static const char *const parts[][3] = {
		{ "scheduler", "diffusers", "FlowMatchEulerDiscreteScheduler" },
		{ "text_encoder", "transformers", "Qwen2_5_VLForConditionalGeneration" },
		{ "tokenizer", "transformers", "Qwen2Tokenizer" },
		{ "transformer", "diffusers", "QwenImageTransformer2DModel" },
		{ "vae", "diffusers", "AutoencoderKLQwenImage" },
	};
	char *sdir = pd_strfmt("%s/scheduler", dir);
	int rc;

	if (!sdir)
		return -1;
	rc = pd_tiny_model_index(dir, "QwenImagePipeline", parts, (int)(sizeof(parts) / sizeof(parts[0]))) |
	     pd_tiny_flow_scheduler_as(sdir, 1, 1.0, 8192, 0.9, 0.02);
	free(sdir);
	return rc ? -1 : 0;
}

static int pd_qwen_tiny(const char *dir, const struct pd_tiny_opts *o)
{
	char *t = pd_strfmt("%s/transformer", dir), *v = pd_strfmt("%s/vae", dir);
	char *tk = pd_strfmt("%s/tokenizer", dir), *te = pd_strfmt("%s/text_encoder", dir);
	int vocab = 0, rc = -1;

	if (o->heads < 1 || o->head_dim < 8 || o->head_dim % 2 || o->layers < 0 || o->llm_width < 2 ||
	    o->llm_heads < 1 || o->llm_width % o->llm_heads || (o->llm_width / o->llm_heads) % 2 || o->llm_kv_heads < 1 ||
	    o->llm_heads % o->llm_kv_heads || o->llm_layers < 0 || o->llm_ff < 1 || o->wan_vae_base < 2 ||
	    o->wan_vae_base % 2) {
		pd_errorf("tiny: invalid Qwen-Image sizes (heads of at least 8 even channels; the language model's width "
			  "a multiple of its heads, its heads of its key/value heads)");
		goto out;
	}
	if (o->layers < 1) {
		pd_errorf("--layers: a model needs at least one block");
		goto out;
	}
	if (t && v && tk && te && !pd_mkdirs(dir) && !pd_qwen_tiny_rest(dir) && !pd_qwen_tiny_transformer(t, o) &&
	    !pd_wan_tiny_vae(v, o, "AutoencoderKLQwenImage") && !pd_qwen_tiny_tokenizer(tk, &vocab) &&
	    !pd_qwen_tiny_llm(te, o, vocab))
		rc = 0;
out:
	free(t);
	free(v);
	free(tk);
	free(te);
	return rc;
}

static void pd_qwen_tiny_defaults(struct pd_tiny_opts *o, int real)
{
	if (real)
		pd_qwen_tiny_real(o);
	else
		pd_qwen_tiny_small(o);
}

/* Qwen-Image's own sizes (the transformer's heads, layers and widths are
 * the shared flags') */
static const struct pd_tiny_flag pd_qwen_tiny_flags[] = {
	{ "llm-width", offsetof(struct pd_tiny_opts, llm_width), "Qwen-Image: the language model's width (default 32)" },
	{ "llm-layers", offsetof(struct pd_tiny_opts, llm_layers), "Qwen-Image: the language model's layers (default 2)" },
	{ "llm-heads", offsetof(struct pd_tiny_opts, llm_heads), "Qwen-Image: its heads (default 4)" },
	{ "llm-kv-heads", offsetof(struct pd_tiny_opts, llm_kv_heads), "Qwen-Image: its key/value heads (default 2)" },
	{ NULL, 0, NULL },
};

static void pd_qwen_tiny_summary(const struct pd_tiny_opts *o, char *buf, size_t len)
{
	snprintf(buf, len, "Qwen-Image: %d heads x %d, %d blocks, language model %d wide (%d layers, %d/%d heads)",
		 o->heads, o->head_dim, o->layers, o->llm_width, o->llm_layers, o->llm_heads, o->llm_kv_heads);
}

const struct pd_family_tiny pd_qwen_tiny_models = {
	.write = pd_qwen_tiny,
	.defaults = pd_qwen_tiny_defaults,
	.flags = pd_qwen_tiny_flags,
	.summary = pd_qwen_tiny_summary,
};
