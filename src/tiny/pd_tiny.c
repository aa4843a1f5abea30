/*
 * pd_tiny.c - the tools of the random model folders (pd_tiny.h) and the
 * components families share: AutoencoderKL, the flow-matching scheduler,
 * prompt embeddings, CLIP, T5 and UMT5 with their tokenizers.
 */
#include "pd_tiny.h"
#include "pd_strmap.h"
#include "pd_unicode.h"
#include "pd_rng.h"
#include "pd_util.h"
#include "pd_st_writer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_tiny_defaults(struct pd_tiny_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->seed = 1;
	o->dtype = PD_F32;
	o->heads = 4;
	o->head_dim = 16;
	o->layers = 2;
	o->single_layers = 2;
	o->in_channels = 64;
	o->joint_dim = 64;
	o->pooled_dim = 32;
	o->mlp_ratio = 4;
	o->guidance = 1;
	o->vae_blocks[0] = 16;
	o->vae_blocks[1] = 32;
	o->vae_blocks[2] = 32;
	o->vae_blocks[3] = 32;
	o->vae_layers = 1;
	o->vae_groups = 8;
	o->batch = 1;
	o->txt_len = 16;
	o->clip_layers = 2;
	o->clip_heads = 4;
	o->t5_layers = 2;
	o->t5_heads = 4;
	o->t5_ff = 0;
}

/* How one tensor is drawn: mean + std * N(0, 1). */
struct pd_tiny_fill {
	uint64_t seed;                  /* from the model seed and the tensor name */
	float mean, std;                /* 1 and 0.1 for norm scales, 0 and 1/sqrt(fan_in) for weights */
	enum pd_dtype dtype;            /* on disk */
	size_t numel;                   /* values */
};

static uint64_t pd_hash_name(const char *s, uint64_t seed)
{
	uint64_t h = 1469598103934665603ull ^ (seed * 0x9e3779b97f4a7c15ull);

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static int pd_tiny_fill_fn(void *ctx, void *dst, size_t nbytes)
{
	struct pd_tiny_fill *f = ctx;
	float *tmp = pd_malloc(f->numel * sizeof(float), "tensor");
	struct pd_rng g;

	(void)nbytes;
	if (!tmp)
		return -1;
	pd_rng_seed(&g, f->seed);
	pd_rng_randn(&g, tmp, f->numel);
#pragma omp parallel for if (f->numel >= ((size_t)1 << 20)) schedule(static)
	for (size_t i = 0; i < f->numel; i++) {
		float v = f->mean + f->std * tmp[i];

		if (f->dtype == PD_F32)
			((float *)dst)[i] = v;
		else if (f->dtype == PD_BF16)
			((uint16_t *)dst)[i] = pd_f32_to_bf16(v);
		else
			((uint16_t *)dst)[i] = pd_f32_to_f16(v);
	}
	free(tmp);
	return 0;
}

void pd_tiny_add(struct pd_tiny_writer *tw, float mean, float std, int ndim, const int64_t *shape,
			const char *fmt, ...)
{
	char name[256];
	struct pd_tiny_fill *f;
	va_list ap;
	size_t numel = 1;

	if (tw->failed)
		return;
	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	/* The fills array must not move once the writer points into it, so
	 * it is sized up front by the caller (cap). */
	PD_ASSERT(tw->n < tw->cap);
	for (int i = 0; i < ndim; i++)
		numel *= (size_t)shape[i];
	f = &tw->fills[tw->n++];
	f->seed = pd_hash_name(name, tw->seed);
	f->mean = mean;
	f->std = std;
	f->dtype = tw->dtype;
	f->numel = numel;
	if (pd_st_writer_add_fill(tw->w, name, tw->dtype, ndim, shape, pd_tiny_fill_fn, f))
		tw->failed = 1;
}

void pd_tiny_linear(struct pd_tiny_writer *tw, int64_t n_out, int64_t n_in, const char *fmt, ...)
{
	char base[200];
	int64_t ws[2] = { n_out, n_in }, bs[1] = { n_out };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(base, sizeof(base), fmt, ap);
	va_end(ap);
	pd_tiny_add(tw, 0.0f, 1.0f / sqrtf((float)n_in), 2, ws, "%s.weight", base);
	pd_tiny_add(tw, 0.0f, 0.05f, 1, bs, "%s.bias", base);
}

void pd_tiny_conv(struct pd_tiny_writer *tw, int64_t c_out, int64_t c_in, int64_t k, const char *fmt, ...)
{
	char base[200];
	int64_t ws[4] = { c_out, c_in, k, k }, bs[1] = { c_out };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(base, sizeof(base), fmt, ap);
	va_end(ap);
	pd_tiny_add(tw, 0.0f, 1.0f / sqrtf((float)(c_in * k * k)), 4, ws, "%s.weight", base);
	pd_tiny_add(tw, 0.0f, 0.05f, 1, bs, "%s.bias", base);
}

/* A normalisation's scale (1 + N(0, 0.1^2)) and, when wanted, shift. */
void pd_tiny_norm(struct pd_tiny_writer *tw, int64_t n, int with_bias, const char *base)
{
	pd_tiny_add(tw, 1.0f, 0.1f, 1, &n, "%s.weight", base);
	if (with_bias)
		pd_tiny_add(tw, 0.0f, 0.05f, 1, &n, "%s.bias", base);
}

int pd_tiny_writer_init(struct pd_tiny_writer *tw, uint64_t seed, enum pd_dtype dt, int cap)
{
	memset(tw, 0, sizeof(*tw));
	tw->w = pd_st_writer_new();
	/* each tensor drawn from its own seed: several at once (the Mersenne
	 * Twister's draws are one thread's a tensor) */
	if (tw->w)
		pd_st_writer_fills_apart(tw->w);
	tw->fills = pd_calloc((size_t)cap, sizeof(*tw->fills), "tensor list");
	tw->cap = cap;
	tw->seed = seed;
	tw->dtype = dt;
	return tw->w && tw->fills ? 0 : -1;
}

int pd_tiny_writer_save(struct pd_tiny_writer *tw, const char *path)
{
	int rc = tw->failed ? -1 : pd_st_writer_save(tw->w, path);

	pd_st_writer_free(tw->w);
	free(tw->fills);
	return rc;
}

static int pd_write_json(const char *path, cJSON *root)
{
	char *text = cJSON_Print(root);
	int rc;

	cJSON_Delete(root);
	if (!text)
		return pd_errorf("out of memory");
	rc = pd_write_file_atomic(path, text, strlen(text));
	free(text);
	return rc;
}

int pd_tiny_save_json(const char *dir, const char *name, cJSON *root)
{
	char *path = pd_strfmt("%s/%s", dir, name);
	int rc;

	if (!path || pd_mkdirs(dir)) {
		free(path);
		cJSON_Delete(root);
		return -1;
	}
	rc = pd_write_json(path, root);
	free(path);
	return rc;
}

int pd_tiny_model_index(const char *dir, const char *pipeline, const char *const (*parts)[3], int n)
{
	cJSON *idx = cJSON_CreateObject();

	if (!idx)
		return pd_errorf("out of memory");
	cJSON_AddStringToObject(idx, "_class_name", pipeline);
	cJSON_AddStringToObject(idx, "_diffusers_version", "0.40.0");
	for (int i = 0; i < n; i++) {
		cJSON *a = cJSON_AddArrayToObject(idx, parts[i][0]);

		cJSON_AddItemToArray(a, parts[i][1] ? cJSON_CreateString(parts[i][1]) : cJSON_CreateNull());
		cJSON_AddItemToArray(a, parts[i][1] ? cJSON_CreateString(parts[i][2]) : cJSON_CreateNull());
	}
	return pd_tiny_save_json(dir, "model_index.json", idx);
}

static void pd_tiny_resnet(struct pd_tiny_writer *tw, int c_in, int c_out, const char *p)
{
	char b[160];

	snprintf(b, sizeof(b), "%s.norm1", p);
	pd_tiny_norm(tw, c_in, 1, b);
	pd_tiny_conv(tw, c_out, c_in, 3, "%s.conv1", p);
	snprintf(b, sizeof(b), "%s.norm2", p);
	pd_tiny_norm(tw, c_out, 1, b);
	pd_tiny_conv(tw, c_out, c_out, 3, "%s.conv2", p);
	if (c_in != c_out)
		pd_tiny_conv(tw, c_out, c_in, 1, "%s.conv_shortcut", p);
}

/* A mid block under P ("decoder.mid_block"): resnet, one-head attention,
 * resnet, in the order their values are drawn. */
static void pd_tiny_vae_mid(struct pd_tiny_writer *tw, int c, const char *p)
{
	char name[128];

	snprintf(name, sizeof(name), "%s.resnets.0", p);
	pd_tiny_resnet(tw, c, c, name);
	snprintf(name, sizeof(name), "%s.attentions.0.group_norm", p);
	pd_tiny_norm(tw, c, 1, name);
	pd_tiny_linear(tw, c, c, "%s.attentions.0.to_q", p);
	pd_tiny_linear(tw, c, c, "%s.attentions.0.to_k", p);
	pd_tiny_linear(tw, c, c, "%s.attentions.0.to_v", p);
	pd_tiny_linear(tw, c, c, "%s.attentions.0.to_out.0", p);
	snprintf(name, sizeof(name), "%s.resnets.1", p);
	pd_tiny_resnet(tw, c, c, name);
}

int pd_tiny_vae_kl(const char *dir, const struct pd_tiny_opts *o)
{
	int latent = o->in_channels / 4, top = o->vae_blocks[3], prev;
	struct pd_tiny_writer tw;
	cJSON *cfg = cJSON_CreateObject(), *arr;
	char *path, p[128];
	int rc;

	if (!cfg)
		return pd_errorf("out of memory");
	cJSON_AddStringToObject(cfg, "_class_name", "AutoencoderKL");
	cJSON_AddStringToObject(cfg, "_diffusers_version", "0.40.0");
	cJSON_AddStringToObject(cfg, "act_fn", "silu");
	arr = cJSON_AddArrayToObject(cfg, "block_out_channels");
	for (int i = 0; i < 4; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateNumber(o->vae_blocks[i]));
	arr = cJSON_AddArrayToObject(cfg, "down_block_types");
	for (int i = 0; i < 4; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString("DownEncoderBlock2D"));
	cJSON_AddBoolToObject(cfg, "force_upcast", 1);
	cJSON_AddNumberToObject(cfg, "in_channels", 3);
	cJSON_AddNumberToObject(cfg, "latent_channels", latent);
	cJSON_AddNullToObject(cfg, "latents_mean");
	cJSON_AddNullToObject(cfg, "latents_std");
	cJSON_AddNumberToObject(cfg, "layers_per_block", o->vae_layers);
	cJSON_AddBoolToObject(cfg, "mid_block_add_attention", 1);
	cJSON_AddNumberToObject(cfg, "norm_num_groups", o->vae_groups);
	cJSON_AddNumberToObject(cfg, "out_channels", 3);
	cJSON_AddNumberToObject(cfg, "sample_size", 1024);
	cJSON_AddNumberToObject(cfg, "scaling_factor", 0.3611);
	cJSON_AddNumberToObject(cfg, "shift_factor", 0.1159);
	arr = cJSON_AddArrayToObject(cfg, "up_block_types");
	for (int i = 0; i < 4; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString("UpDecoderBlock2D"));
	cJSON_AddBoolToObject(cfg, "use_post_quant_conv", 0);
	cJSON_AddBoolToObject(cfg, "use_quant_conv", 0);
	path = pd_strfmt("%s/config.json", dir);
	if (!path || pd_mkdirs(dir) || pd_write_json(path, cfg)) {
		free(path);
		return -1;
	}
	free(path);
	if (pd_tiny_writer_init(&tw, o->seed + 1, o->dtype, 512 + 80 * (o->vae_layers + 1)))
		return -1;
	pd_tiny_conv(&tw, top, latent, 3, "decoder.conv_in");
	pd_tiny_vae_mid(&tw, top, "decoder.mid_block");
	prev = top;
	for (int i = 0; i < 4; i++) {
		int ch = o->vae_blocks[3 - i];

		for (int j = 0; j <= o->vae_layers; j++) {
			snprintf(p, sizeof(p), "decoder.up_blocks.%d.resnets.%d", i, j);
			pd_tiny_resnet(&tw, j == 0 ? prev : ch, ch, p);
		}
		if (i < 3)
			pd_tiny_conv(&tw, ch, ch, 3, "decoder.up_blocks.%d.upsamplers.0.conv", i);
		prev = ch;
	}
	pd_tiny_norm(&tw, o->vae_blocks[0], 1, "decoder.conv_norm_out");
	pd_tiny_conv(&tw, 3, o->vae_blocks[0], 3, "decoder.conv_out");
	/* the encoder, as diffusers' AutoencoderKL has it (pictures in:
	 * img2img), drawn after the decoder so the decoder's weights are the
	 * same as before it was there */
	pd_tiny_conv(&tw, o->vae_blocks[0], 3, 3, "encoder.conv_in");
	prev = o->vae_blocks[0];
	for (int i = 0; i < 4; i++) {
		int ch = o->vae_blocks[i];

		for (int j = 0; j < o->vae_layers; j++) {
			snprintf(p, sizeof(p), "encoder.down_blocks.%d.resnets.%d", i, j);
			pd_tiny_resnet(&tw, j == 0 ? prev : ch, ch, p);
		}
		if (i < 3)
			pd_tiny_conv(&tw, ch, ch, 3, "encoder.down_blocks.%d.downsamplers.0.conv", i);
		prev = ch;
	}
	pd_tiny_vae_mid(&tw, top, "encoder.mid_block");
	pd_tiny_norm(&tw, top, 1, "encoder.conv_norm_out");
	pd_tiny_conv(&tw, 2 * latent, top, 3, "encoder.conv_out");
	path = pd_strfmt("%s/diffusion_pytorch_model.safetensors", dir);
	rc = path ? pd_tiny_writer_save(&tw, path) : -1;
	free(path);
	return rc;
}

int pd_tiny_flow_scheduler(const char *dir, int dynamic)
{
	return pd_tiny_flow_scheduler_as(dir, dynamic, dynamic ? 3.0 : 1.0, 4096, 1.15, 0);
}

int pd_tiny_flow_scheduler_as(const char *dir, int dynamic, double shift, int max_seq, double max_shift, double terminal)
{
	cJSON *cfg = cJSON_CreateObject();
	char *path;
	int rc;

	if (!cfg)
		return pd_errorf("out of memory");
	cJSON_AddStringToObject(cfg, "_class_name", "FlowMatchEulerDiscreteScheduler");
	cJSON_AddStringToObject(cfg, "_diffusers_version", "0.40.0");
	cJSON_AddNumberToObject(cfg, "base_image_seq_len", 256);
	cJSON_AddNumberToObject(cfg, "base_shift", 0.5);
	cJSON_AddBoolToObject(cfg, "invert_sigmas", 0);
	cJSON_AddNumberToObject(cfg, "max_image_seq_len", max_seq);
	cJSON_AddNumberToObject(cfg, "max_shift", max_shift);
	cJSON_AddNumberToObject(cfg, "num_train_timesteps", 1000);
	cJSON_AddNumberToObject(cfg, "shift", shift);
	if (terminal > 0)
		cJSON_AddNumberToObject(cfg, "shift_terminal", terminal);
	else
		cJSON_AddNullToObject(cfg, "shift_terminal");
	cJSON_AddBoolToObject(cfg, "stochastic_sampling", 0);
	cJSON_AddStringToObject(cfg, "time_shift_type", "exponential");
	cJSON_AddBoolToObject(cfg, "use_beta_sigmas", 0);
	cJSON_AddBoolToObject(cfg, "use_dynamic_shifting", dynamic);
	cJSON_AddBoolToObject(cfg, "use_exponential_sigmas", 0);
	cJSON_AddBoolToObject(cfg, "use_karras_sigmas", 0);
	path = pd_strfmt("%s/scheduler_config.json", dir);
	if (!path || pd_mkdirs(dir)) {
		free(path);
		cJSON_Delete(cfg);
		return -1;
	}
	rc = pd_write_json(path, cfg);
	free(path);
	return rc;
}

int pd_tiny_embeds(const char *path, const struct pd_tiny_opts *o)
{
	struct pd_tiny_writer tw;
	int64_t ps[3] = { o->batch, o->txt_len, o->joint_dim }, qs[2] = { o->batch, o->pooled_dim };

	if (pd_tiny_writer_init(&tw, o->seed + 2, PD_F32, 8))
		return -1;
	pd_tiny_add(&tw, 0.0f, 1.0f, 3, ps, "prompt_embeds");
	pd_tiny_add(&tw, 0.0f, 1.0f, 2, qs, "pooled_prompt_embeds");
	pd_tiny_add(&tw, 0.0f, 1.0f, 3, ps, "negative_prompt_embeds");
	pd_tiny_add(&tw, 0.0f, 1.0f, 2, qs, "negative_pooled_prompt_embeds");
	pd_st_writer_meta(tw.w, "note", "random stand-ins for T5 and CLIP outputs, written by pdit tiny");
	return pd_tiny_writer_save(&tw, path);
}

/* The made-up vocabularies' words: the tiny tokenizers cover them whole,
 * and spell everything else letter by letter (CLIP) or from characters and
 * <unk> (T5). */
static const char *const pd_tiny_words[] = {
	"a", "an", "the", "of", "in", "on", "at", "and", "with", "photo", "picture", "painting", "cat", "dog",
	"fox", "bird", "horse", "red", "blue", "green", "white", "black", "old", "small", "big", "forest", "snow",
	"city", "night", "sunset", "mountain", "river", "lake", "sky", "tree", "house", "ship", "sea", "cute",
	"majestic", "detailed", "digital", "art", "standing", "sitting", "rock", "light", "street", "portrait",
};

int pd_tiny_file(const char *dir, const char *name, const char *text)
{
	char *path = pd_strfmt("%s/%s", dir, name);
	int rc = path ? pd_write_file_atomic(path, text, strlen(text)) : -1;

	free(path);
	return rc;
}

/* CLIP: vocab.json (256 byte symbols, the same with "</w>", one token per
 * merge, then <|startoftext|> and <|endoftext|>) and merges.txt (each word
 * built left to right). Returns the vocabulary size through *VOCAB. */
int pd_tiny_clip_tokenizer(const char *dir, int *vocab)
{
	struct pd_strmap seen;
	cJSON *v = cJSON_CreateObject();
	char *merges = pd_malloc(1 << 16, "merges"), *text;
	size_t ml = 0;
	int id = 0, rc = -1;

	if (!v || !merges || pd_strmap_init(&seen, 1024) || pd_mkdirs(dir))
		goto out;
	ml += (size_t)sprintf(merges, "#version: 0.2\n");
	/* bytes_to_unicode: printable bytes stand for themselves, the others
	 * for U+0100 on */
	for (int pass = 0; pass < 2; pass++) {
		int next = 256;

		for (int b = 0; b < 256; b++) {
			char sym[16];
			int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
			int n = pd_utf8_encode(printable ? b : next++, sym);

			strcpy(sym + n, pass ? "</w>" : "");
			cJSON_AddNumberToObject(v, sym, id++);
		}
	}
	for (size_t w = 0; w < sizeof(pd_tiny_words) / sizeof(pd_tiny_words[0]); w++) {
		const char *word = pd_tiny_words[w];
		size_t n = strlen(word);
		char left[96], right[16], merged[96];

		/* ((w0 w1) w2) ... with "</w>" on the last letter */
		snprintf(left, sizeof(left), "%c%s", word[0], n == 1 ? "</w>" : "");
		for (size_t k = 1; k < n; k++) {
			char line[160];
			int32_t dummy;

			snprintf(right, sizeof(right), "%c%s", word[k], k + 1 == n ? "</w>" : "");
			snprintf(line, sizeof(line), "%s %s", left, right);
			snprintf(merged, sizeof(merged), "%.79s%s", left, right);
			if (!pd_strmap_get(&seen, line, strlen(line), &dummy)) {
				if (pd_strmap_put(&seen, line, strlen(line), id) || ml + strlen(line) + 2 > (1 << 16))
					goto out;
				ml += (size_t)sprintf(merges + ml, "%s\n", line);
				if (!cJSON_GetObjectItemCaseSensitive(v, merged))
					cJSON_AddNumberToObject(v, merged, id++);
			}
			snprintf(left, sizeof(left), "%s", merged);
		}
	}
	cJSON_AddNumberToObject(v, "<|startoftext|>", id++);
	cJSON_AddNumberToObject(v, "<|endoftext|>", id++);
	*vocab = id;
	text = cJSON_Print(v);
	rc = !text || pd_tiny_file(dir, "vocab.json", text) || pd_tiny_file(dir, "merges.txt", merges) ||
	     pd_tiny_file(dir, "special_tokens_map.json",
			  "{\n  \"bos_token\": \"<|startoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
			  "  \"pad_token\": \"<|endoftext|>\",\n  \"unk_token\": \"<|endoftext|>\"\n}\n") ||
	     pd_tiny_file(dir, "tokenizer_config.json",
			  "{\n  \"bos_token\": \"<|startoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
			  "  \"model_max_length\": 77,\n  \"pad_token\": \"<|endoftext|>\",\n"
			  "  \"tokenizer_class\": \"CLIPTokenizer\",\n  \"unk_token\": \"<|endoftext|>\"\n}\n")
		     ? -1 : 0;
	free(text);
out:
	cJSON_Delete(v);
	free(merges);
	pd_strmap_free(&seen);
	return rc;
}

/* Protobuf writing: varints, tags, length-delimited fields. */
struct pd_pbw {
	uint8_t *b;
	size_t n, cap;
	int failed;
};

static void pd_pbw_bytes(struct pd_pbw *w, const void *p, size_t n)
{
	if (w->n + n > w->cap) {
		size_t cap = 2 * (w->n + n) + 64;
		uint8_t *g = realloc(w->b, cap);

		if (!g) {
			w->failed = 1;
			return;
		}
		w->b = g;
		w->cap = cap;
	}
	memcpy(w->b + w->n, p, n);
	w->n += n;
}

static void pd_pbw_varint(struct pd_pbw *w, uint64_t v)
{
	uint8_t t[10];
	size_t k = 0;

	do {
		t[k++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
		v >>= 7;
	} while (v);
	pd_pbw_bytes(w, t, k);
}

static void pd_pbw_int(struct pd_pbw *w, int field, int64_t v)
{
	pd_pbw_varint(w, (uint64_t)field << 3);
	pd_pbw_varint(w, (uint64_t)v);
}

static void pd_pbw_blob(struct pd_pbw *w, int field, const void *p, size_t n)
{
	pd_pbw_varint(w, ((uint64_t)field << 3) | 2);
	pd_pbw_varint(w, n);
	pd_pbw_bytes(w, p, n);
}

/* One SentencePiece { piece = 1; score = 2; type = 3 }. */
static void pd_pbw_piece(struct pd_pbw *w, const char *piece, float score, int type)
{
	struct pd_pbw m = { 0 };
	uint32_t bits;

	pd_pbw_blob(&m, 1, piece, strlen(piece));
	memcpy(&bits, &score, 4);
	pd_pbw_varint(&m, (2 << 3) | 5);
	pd_pbw_bytes(&m, &bits, 4);
	if (type != 1)
		pd_pbw_int(&m, 3, type);
	pd_pbw_blob(w, 1, m.b, m.n);
	w->failed |= m.failed;
	free(m.b);
}

/* T5: a unigram spiece.model with <pad>, </s>, <unk>, then "▁" and single
 * characters (low scores), "▁" + letter, and the words above with "▁" (high
 * scores), and an identity normalizer (no charsmap). *VOCAB: pieces. */
int pd_tiny_t5_tokenizer(const char *dir, int *vocab)
{
	static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()&#%+/";
	struct pd_pbw w = { 0 }, t = { 0 }, nspec = { 0 };
	char piece[64];
	int n = 0, rc;

	pd_pbw_piece(&w, "<pad>", 0, 3);
	pd_pbw_piece(&w, "</s>", 0, 3);
	pd_pbw_piece(&w, "<unk>", 0, 2);
	pd_pbw_piece(&w, "\xE2\x96\x81", -3.0f, 1);
	n = 4;
	for (const char *c = chars; *c; c++, n++) {
		snprintf(piece, sizeof(piece), "%c", *c);
		pd_pbw_piece(&w, piece, -8.0f - 0.01f * (float)(c - chars), 1);
	}
	for (const char *c = chars; *c && *c != 'A'; c++, n++) {
		snprintf(piece, sizeof(piece), "\xE2\x96\x81%c", *c);
		pd_pbw_piece(&w, piece, -6.0f - 0.01f * (float)(c - chars), 1);
	}
	for (size_t k = 0; k < sizeof(pd_tiny_words) / sizeof(pd_tiny_words[0]); k++) {
		if (strlen(pd_tiny_words[k]) < 2)
			continue;
		snprintf(piece, sizeof(piece), "\xE2\x96\x81%s", pd_tiny_words[k]);
		pd_pbw_piece(&w, piece, -4.0f - 0.01f * (float)k, 1);
		n++;
	}
	/* TrainerSpec { model_type = 3: UNIGRAM; vocab_size = 4; unk_id = 40;
	 * bos_id = 41: none; eos_id = 42; pad_id = 43 } */
	pd_pbw_int(&t, 3, 1);
	pd_pbw_int(&t, 4, n);
	pd_pbw_int(&t, 40, 2);
	pd_pbw_int(&t, 41, -1);
	pd_pbw_int(&t, 42, 1);
	pd_pbw_int(&t, 43, 0);
	pd_pbw_blob(&w, 2, t.b, t.n);
	/* NormalizerSpec { name = "identity"; add_dummy_prefix; remove_extra_whitespaces; escape_whitespaces } */
	pd_pbw_blob(&nspec, 1, "identity", 8);
	pd_pbw_int(&nspec, 3, 1);
	pd_pbw_int(&nspec, 4, 1);
	pd_pbw_int(&nspec, 5, 1);
	pd_pbw_blob(&w, 3, nspec.b, nspec.n);
	*vocab = n;
	rc = w.failed || t.failed || nspec.failed || pd_mkdirs(dir);
	if (!rc) {
		char *path = pd_strfmt("%s/spiece.model", dir);

		rc = !path || pd_write_file_atomic(path, w.b, w.n);
		free(path);
	}
	rc = rc || pd_tiny_file(dir, "special_tokens_map.json",
				"{\n  \"eos_token\": \"</s>\",\n  \"pad_token\": \"<pad>\",\n  \"unk_token\": \"<unk>\"\n}\n") ||
	     pd_tiny_file(dir, "tokenizer_config.json",
			  "{\n  \"eos_token\": \"</s>\",\n  \"legacy\": true,\n  \"model_max_length\": 512,\n"
			  "  \"pad_token\": \"<pad>\",\n  \"tokenizer_class\": \"T5Tokenizer\",\n  \"unk_token\": \"<unk>\"\n}\n");
	free(w.b);
	free(t.b);
	free(nspec.b);
	return rc ? -1 : 0;
}

int pd_tiny_clip(const char *dir, const struct pd_tiny_opts *o, int vocab)
{
	int64_t D = o->pooled_dim, I = 2 * D, es[2] = { vocab, D }, ps[2] = { 77, D };
	struct pd_tiny_writer tw;
	cJSON *cfg = cJSON_CreateObject(), *arch;
	char *path;
	int rc;

	if (!cfg || D % o->clip_heads)
		return pd_errorf("tiny: the CLIP width %lld does not divide into %d heads", (long long)D, o->clip_heads);
	arch = cJSON_AddArrayToObject(cfg, "architectures");
	cJSON_AddItemToArray(arch, cJSON_CreateString("CLIPTextModel"));
	cJSON_AddNumberToObject(cfg, "bos_token_id", 0);
	cJSON_AddNumberToObject(cfg, "eos_token_id", 2);
	cJSON_AddStringToObject(cfg, "hidden_act", "quick_gelu");
	cJSON_AddNumberToObject(cfg, "hidden_size", (double)D);
	cJSON_AddNumberToObject(cfg, "intermediate_size", (double)I);
	cJSON_AddNumberToObject(cfg, "layer_norm_eps", 1e-5);
	cJSON_AddNumberToObject(cfg, "max_position_embeddings", 77);
	cJSON_AddStringToObject(cfg, "model_type", "clip_text_model");
	cJSON_AddNumberToObject(cfg, "num_attention_heads", o->clip_heads);
	cJSON_AddNumberToObject(cfg, "num_hidden_layers", o->clip_layers);
	cJSON_AddNumberToObject(cfg, "pad_token_id", 1);
	cJSON_AddNumberToObject(cfg, "vocab_size", vocab);
	path = pd_strfmt("%s/config.json", dir);
	if (!path || pd_mkdirs(dir) || pd_write_json(path, cfg)) {
		free(path);
		return -1;
	}
	free(path);
	if (pd_tiny_writer_init(&tw, o->seed + 11, o->dtype, 8 + 16 * o->clip_layers))
		return -1;
	pd_tiny_add(&tw, 0.0f, 1.0f, 2, es, "text_model.embeddings.token_embedding.weight");
	pd_tiny_add(&tw, 0.0f, 0.3f, 2, ps, "text_model.embeddings.position_embedding.weight");
	for (int i = 0; i < o->clip_layers; i++) {
		char b[96];
		const char *p = "text_model.encoder.layers";

		pd_tiny_linear(&tw, D, D, "%s.%d.self_attn.q_proj", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.self_attn.k_proj", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.self_attn.v_proj", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.self_attn.out_proj", p, i);
		pd_tiny_linear(&tw, I, D, "%s.%d.mlp.fc1", p, i);
		pd_tiny_linear(&tw, D, I, "%s.%d.mlp.fc2", p, i);
		snprintf(b, sizeof(b), "%s.%d.layer_norm1", p, i);
		pd_tiny_norm(&tw, D, 1, b);
		snprintf(b, sizeof(b), "%s.%d.layer_norm2", p, i);
		pd_tiny_norm(&tw, D, 1, b);
	}
	pd_tiny_norm(&tw, D, 1, "text_model.final_layer_norm");
	path = pd_strfmt("%s/model.safetensors", dir);
	rc = path ? pd_tiny_writer_save(&tw, path) : -1;
	free(path);
	return rc;
}

void pd_tiny_weight(struct pd_tiny_writer *tw, int64_t n_out, int64_t n_in, const char *fmt, ...)
{
	char base[200];
	int64_t ws[2] = { n_out, n_in };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(base, sizeof(base), fmt, ap);
	va_end(ap);
	pd_tiny_add(tw, 0.0f, 1.0f / sqrtf((float)n_in), 2, ws, "%s.weight", base);
}

/* A T5-style encoder (T5 v1.1's, or UMT5's with a relative position table
 * per block) of width D, H heads, feed-forward F, LAYERS blocks and V
 * embedding rows; SHARDS > 1 splits the weights as published folders do. */
int pd_tiny_t5_encoder(const char *dir, const struct pd_tiny_opts *o, int64_t D, int64_t H, int64_t F,
			      int layers, int64_t V, int umt5, uint64_t seed, int shards)
{
	int64_t K = D / H, es[2] = { V, D }, rs[2] = { 32, H };
	struct pd_tiny_writer tw;
	cJSON *cfg = cJSON_CreateObject(), *arch;
	char *path;
	int rc;

	if (!cfg || D % H) {
		cJSON_Delete(cfg);
		return pd_errorf("tiny: the %s width %lld does not divide into %lld heads", umt5 ? "UMT5" : "T5",
				 (long long)D, (long long)H);
	}
	arch = cJSON_AddArrayToObject(cfg, "architectures");
	cJSON_AddItemToArray(arch, cJSON_CreateString(umt5 ? "UMT5EncoderModel" : "T5EncoderModel"));
	cJSON_AddNumberToObject(cfg, "d_ff", (double)F);
	cJSON_AddNumberToObject(cfg, "d_kv", (double)K);
	cJSON_AddNumberToObject(cfg, "d_model", (double)D);
	cJSON_AddStringToObject(cfg, "dense_act_fn", "gelu_new");
	cJSON_AddNumberToObject(cfg, "eos_token_id", 1);
	cJSON_AddStringToObject(cfg, "feed_forward_proj", "gated-gelu");
	cJSON_AddBoolToObject(cfg, "is_gated_act", 1);
	cJSON_AddNumberToObject(cfg, "layer_norm_epsilon", 1e-6);
	cJSON_AddStringToObject(cfg, "model_type", umt5 ? "umt5" : "t5");
	cJSON_AddNumberToObject(cfg, "num_heads", (double)H);
	cJSON_AddNumberToObject(cfg, "num_layers", layers);
	cJSON_AddNumberToObject(cfg, "pad_token_id", 0);
	cJSON_AddNumberToObject(cfg, "relative_attention_max_distance", 128);
	cJSON_AddNumberToObject(cfg, "relative_attention_num_buckets", 32);
	cJSON_AddNumberToObject(cfg, "vocab_size", (double)V);
	if (pd_tiny_save_json(dir, "config.json", cfg) || pd_tiny_writer_init(&tw, seed, o->dtype, 8 + 14 * layers))
		return -1;
	pd_tiny_add(&tw, 0.0f, 1.0f, 2, es, "shared.weight");
	for (int i = 0; i < layers; i++) {
		char b[96];
		const char *p = "encoder.block";

		/* T5 has block 0's table only; UMT5 every block's */
		if (i == 0 || umt5)
			pd_tiny_add(&tw, 0.0f, 1.0f, 2, rs, "%s.%d.layer.0.SelfAttention.relative_attention_bias.weight", p, i);
		pd_tiny_weight(&tw, H * K, D, "%s.%d.layer.0.SelfAttention.q", p, i);
		pd_tiny_weight(&tw, H * K, D, "%s.%d.layer.0.SelfAttention.k", p, i);
		pd_tiny_weight(&tw, H * K, D, "%s.%d.layer.0.SelfAttention.v", p, i);
		pd_tiny_weight(&tw, D, H * K, "%s.%d.layer.0.SelfAttention.o", p, i);
		pd_tiny_weight(&tw, F, D, "%s.%d.layer.1.DenseReluDense.wi_0", p, i);
		pd_tiny_weight(&tw, F, D, "%s.%d.layer.1.DenseReluDense.wi_1", p, i);
		pd_tiny_weight(&tw, D, F, "%s.%d.layer.1.DenseReluDense.wo", p, i);
		snprintf(b, sizeof(b), "%s.%d.layer.0.layer_norm", p, i);
		pd_tiny_norm(&tw, D, 0, b);
		snprintf(b, sizeof(b), "%s.%d.layer.1.layer_norm", p, i);
		pd_tiny_norm(&tw, D, 0, b);
	}
	pd_tiny_norm(&tw, D, 0, "encoder.final_layer_norm");
	path = pd_strfmt("%s/model.safetensors", dir);
	rc = !path || pd_tiny_writer_save(&tw, path) || (shards > 1 && pd_st_write_shards(path, dir, "model", shards));
	free(path);
	return rc ? -1 : 0;
}

/* A 3-D convolution [c_out, c_in, kt, k, k]: N(0, 1/fan_in) and its bias. */
void pd_tiny_conv3(struct pd_tiny_writer *tw, int64_t c_out, int64_t c_in, int64_t kt, int64_t k,
			  const char *fmt, ...)
{
	char base[200];
	int64_t ws[5] = { c_out, c_in, kt, k, k }, bs[1] = { c_out };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(base, sizeof(base), fmt, ap);
	va_end(ap);
	pd_tiny_add(tw, 0.0f, 1.0f / sqrtf((float)(c_in * kt * k * k)), 5, ws, "%s.weight", base);
	pd_tiny_add(tw, 0.0f, 0.05f, 1, bs, "%s.bias", base);
}

/* umT5's tokenizer in miniature: <pad> </s> <s> <unk>, the 256 byte pieces
 * (byte fallback), "▁", characters and the words above; 300 extra ids as
 * added tokens with lstrip/rstrip. *VOCAB: the embedding rows it needs. */
int pd_tiny_umt5_tokenizer(const char *dir, int *vocab)
{
	static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()";
	struct pd_pbw w = { 0 }, t = { 0 }, nspec = { 0 };
	char piece[64];
	int n = 4, rc;
	cJSON *cfg = cJSON_CreateObject(), *dec;

	if (!cfg)
		return pd_errorf("out of memory");
	pd_pbw_piece(&w, "<pad>", 0, 3);
	pd_pbw_piece(&w, "</s>", 0, 3);
	pd_pbw_piece(&w, "<s>", 0, 3);
	pd_pbw_piece(&w, "<unk>", 0, 2);
	for (int b = 0; b < 256; b++, n++) {
		snprintf(piece, sizeof(piece), "<0x%02X>", b);
		pd_pbw_piece(&w, piece, 0, 6);
	}
	pd_pbw_piece(&w, "\xE2\x96\x81", -3.0f, 1);
	n++;
	for (const char *c = chars; *c; c++, n++) {
		snprintf(piece, sizeof(piece), "%c", *c);
		pd_pbw_piece(&w, piece, -8.0f - 0.01f * (float)(c - chars), 1);
	}
	for (size_t k = 0; k < sizeof(pd_tiny_words) / sizeof(pd_tiny_words[0]); k++, n++) {
		snprintf(piece, sizeof(piece), "\xE2\x96\x81%s", pd_tiny_words[k]);
		pd_pbw_piece(&w, piece, -4.0f - 0.01f * (float)k, 1);
	}
	/* TrainerSpec { model_type: UNIGRAM; vocab_size; byte_fallback = 35;
	 * unk_id 3, bos_id 2, eos_id 1, pad_id 0 } */
	pd_pbw_int(&t, 3, 1);
	pd_pbw_int(&t, 4, n);
	pd_pbw_int(&t, 35, 1);
	pd_pbw_int(&t, 40, 3);
	pd_pbw_int(&t, 41, 2);
	pd_pbw_int(&t, 42, 1);
	pd_pbw_int(&t, 43, 0);
	pd_pbw_blob(&w, 2, t.b, t.n);
	pd_pbw_blob(&nspec, 1, "identity", 8);
	pd_pbw_int(&nspec, 3, 1);
	pd_pbw_int(&nspec, 4, 1);
	pd_pbw_int(&nspec, 5, 1);
	pd_pbw_blob(&w, 3, nspec.b, nspec.n);
	/* the added tokens: the four specials, then <extra_id_N> = n + 299 - N */
	cJSON_AddStringToObject(cfg, "tokenizer_class", "T5Tokenizer");
	cJSON_AddBoolToObject(cfg, "legacy", 1);
	cJSON_AddNumberToObject(cfg, "extra_ids", 300);
	cJSON_AddStringToObject(cfg, "eos_token", "</s>");
	cJSON_AddStringToObject(cfg, "pad_token", "<pad>");
	cJSON_AddStringToObject(cfg, "unk_token", "<unk>");
	dec = cJSON_AddObjectToObject(cfg, "added_tokens_decoder");
	for (int i = 0; i < 4 + 300; i++) {
		static const char *special[4] = { "<pad>", "</s>", "<s>", "<unk>" };
		cJSON *e = cJSON_CreateObject();
		char id[16];
		int extra = i >= 4;

		snprintf(piece, sizeof(piece), "<extra_id_%d>", 299 - (i - 4));
		snprintf(id, sizeof(id), "%d", extra ? n + (i - 4) : i);
		cJSON_AddStringToObject(e, "content", extra ? piece : special[i]);
		cJSON_AddBoolToObject(e, "lstrip", extra);
		cJSON_AddBoolToObject(e, "normalized", 0);
		cJSON_AddBoolToObject(e, "rstrip", extra);
		cJSON_AddBoolToObject(e, "single_word", 0);
		cJSON_AddBoolToObject(e, "special", 1);
		cJSON_AddItemToObject(dec, id, e);
	}
	*vocab = (n + 300 + 127) / 128 * 128;
	rc = w.failed || t.failed || nspec.failed || pd_mkdirs(dir);
	if (!rc) {
		char *path = pd_strfmt("%s/spiece.model", dir);

		rc = !path || pd_write_file_atomic(path, w.b, w.n);
		free(path);
	}
	if (rc)
		cJSON_Delete(cfg);
	else
		rc = pd_tiny_save_json(dir, "tokenizer_config.json", cfg);
	free(w.b);
	free(t.b);
	free(nspec.b);
	return rc ? -1 : 0;
}

