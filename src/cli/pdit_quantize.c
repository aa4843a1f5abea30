/*
 * pdit_quantize.c - pdit quantize IN OUT --type T: a weights file pdit reads
 * (GGUF, fp8 or scaled fp8, BF16/F16/F32 safetensors, an index set)
 * written
 *  - as plain safetensors of f32, f16 or bf16 with the same names and
 *    torch-order shapes, dequantized;
 *  - as a GGUF of ggml's block types with ComfyUI-GGUF's choices
 *    (convert.py, then its patched llama-quantize): which tensors are
 *    quantized, what the others become, the pairs, name order;
 *  - as fp8 safetensors (ComfyUI's plain fp8: 2-D weights F8_E4M3, the
 *    rest BF16).
 */
#include "pd_args.h"
#include "pd_engine_tools.h"
#include "pd_gguf.h"
#include "pd_llm.h"
#include "pd_quant.h"
#include "pd_safetensors.h"
#include "pd_st_writer.h"
#include "pd_util.h"
#include "pdit_cli.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const char pd_quantize_usage[] =
	"usage: pdit quantize IN OUT --type T\n"
	"\n"
	"Writes the weights of IN (a GGUF file from ComfyUI-GGUF or stable-diffusion.cpp,\n"
	"fp8 or ComfyUI's scaled fp8 safetensors, BF16/F16/F32 safetensors, an\n"
	"*.safetensors.index.json set, or a diffusers transformer folder) into OUT as\n"
	"--type (the file then loads with --model DIR --diffusion-model OUT: the folder's\n"
	"config.json serves it):\n"
	"  f32, f16, bf16      plain safetensors, same names and torch-order shapes, every\n"
	"                      tensor decoded (scaled fp8 times its scales; its scale\n"
	"                      tensors and marker left out); metadata kept\n"
	"  q8_0, q4_0, q4_1,   a GGUF as ComfyUI-GGUF makes flux1-dev-Q8_0.gguf: 2-D weights\n"
	"  q5_0, q5_1, q4_k,   of the blocks in T, quantized as ggml does (q4_k: Q4_K_S,\n"
	"  q5_k, q6_k          q5_k: Q5_K_S, q6_k: Q6_K; rows not a multiple of 256 become\n"
	"                      F16), except the input and\n"
	"                      output layers (img_in, txt_in, time_in, vector_in,\n"
	"                      guidance_in, final_layer); other tensors F16, BF16 from a\n"
	"                      BF16 file, 1-D and small ones F32; a model.diffusion_model.\n"
	"                      prefix is dropped. Wan2.1 as city96's wan2.1-*-Q8_0.gguf:\n"
	"                      patch, text and time embeddings and head kept, modulation\n"
	"                      tables and the 5-D patch weight F32, ffn.2 in Q4_1/Q5_1 for\n"
	"                      q4_0/q5_0 (the K types are written throughout: the Q5_K\n"
	"                      layers of ComfyUI's Q4_K_S, the Q6_K of its Q5_K_S, are not)\n"
	"  fp8, f8_e5m2        safetensors with 2-D weights in F8_E4M3 (fp8) or F8_E5M2,\n"
	"                      rounded to nearest, saturated; the rest BF16\n"
	"A language model (Qwen-Image's text_encoder folder, Qwen2.5-VL's single file)\n"
	"to q8_0 ... q4_k becomes a GGUF in llama.cpp's names and metadata (token_embd,\n"
	"blk.N.attn_q, ..., output_norm; qwen2vl.block_count, ...), its 2-D weights in T,\n"
	"norms and biases F32, the head and the vision tower left out (--llm reads it)";

static const char pd_quantize_examples[] =
	"  pdit quantize flux1-dev.safetensors flux1-dev-Q8_0.gguf --type q8_0\n"
	"  pdit quantize FLUX.1-dev/transformer flux1-dev-Q4_K.gguf --type q4_k\n"
	"  pdit generate --model FLUX.1-dev --diffusion-model flux1-dev-Q4_K.gguf -p \"a fox\" --dtype bf16\n"
	"  pdit quantize flux1-dev.safetensors flux1-dev-fp8.safetensors --type fp8\n"
	"  pdit quantize flux1-dev-Q8_0.gguf flux1-dev-dequant.safetensors --type bf16\n"
	"  pdit quantize wan2.1_t2v_1.3B_bf16.safetensors wan2.1-t2v-1.3b-Q8_0.gguf --type q8_0\n"
	"  pdit quantize Qwen-Image/text_encoder qwen2.5-vl-7b-Q8_0.gguf --type q8_0\n"
	"  pdit inspect flux1-dev-Q8_0.gguf\n";

/* Progress of a long conversion (FLUX.1-dev to Q4_K takes minutes). */
struct pd_qz_progress {
	double total, done;             /* elements of all tensors, and written */
	int shown;                      /* tenths reported */
	double t0;                      /* when writing began */
};

struct pd_qz_fill {
	struct pd_qz_progress *p;       /* shared progress */
	const struct pd_st_tensor *t;   /* the tensor read */
	enum pd_dtype out;              /* the type written (plain safetensors) */
	enum pd_qtype via;              /* GGUF and fp8: rounded to this type first (F32: as read) */
	enum pd_qtype q;                /* GGUF and fp8: the type written */
};

static int pd_qz_fill(void *ctx, void *dst, size_t nbytes)
{
	const struct pd_qz_fill *f = ctx;
	size_t n = (size_t)f->t->numel;
	float *v = f->out == PD_F32 ? dst : pd_malloc(n * sizeof(float) + 4, "tensor");
	int rc;

	(void)nbytes;
	if (!v)
		return -1;
	rc = pd_st_read_f32(f->t, 0, n, v);
	for (size_t i = 0; !rc && f->out != PD_F32 && i < n; i++)
		((uint16_t *)dst)[i] = f->out == PD_BF16 ? pd_f32_to_bf16(v[i]) : pd_f32_to_f16(v[i]);
	if (v != dst)
		free(v);
	return rc;
}

/* GGUF and fp8 output: T's values, rounded to F->via (what the converter
 * wrote before the quantizer read it), encoded as F->q, rows in parallel. */
static int pd_qz_fill_q(void *ctx, void *dst, size_t nbytes)
{
	const struct pd_qz_fill *f = ctx;
	int64_t n = f->t->numel, rows = f->t->ndim > 1 ? f->t->shape[0] : 1, cols = rows ? n / rows : 0;
	float *v = pd_malloc((size_t)n * sizeof(float) + 4, f->t->name);

	(void)nbytes;
	if (!v || pd_st_read_f32(f->t, 0, (size_t)n, v)) {
		free(v);
		return -1;
	}
	pd_quant_encode_rows(f->q, f->via == PD_Q_F16 || f->via == PD_Q_BF16 ? f->via : PD_Q_F32, v, rows, cols, dst);
	free(v);
	f->p->done += (double)n;
	while (f->p->total > 0 && f->p->shown < 9 && f->p->done >= (f->p->shown + 1) * f->p->total / 10) {
		f->p->shown++;
		pd_log(1, "pdit: quantize: %d%% (%.0f s)\n", 10 * f->p->shown, pd_now() - f->p->t0);
	}
	return 0;
}

/* Scaled fp8's bookkeeping: folded into the weights written. */
static int pd_qz_skip(const char *name)
{
	size_t n = strlen(name);

	return (n >= 10 && strcmp(name + n - 10, "scaled_fp8") == 0) ||
	       (n >= 13 && strcmp(name + n - 13, ".scale_weight") == 0) ||
	       (n >= 12 && strcmp(name + n - 12, ".scale_input") == 0);
}

/* What --type writes. */
enum pd_qz_mode { PD_QZ_PLAIN, PD_QZ_GGUF, PD_QZ_FP8 };

static const struct pd_qz_type {
	const char *name;               /* --type's value */
	enum pd_qz_mode mode;           /* the file written */
	enum pd_qtype q;                /* GGUF and fp8: the type of the weights */
	enum pd_dtype out;              /* plain: the dtype of every tensor; fp8: of the weights */
	uint32_t file_type;             /* GGUF: general.file_type as llama-quantize writes it */
} pd_qz_types[] = {
	{ "f32", PD_QZ_PLAIN, PD_Q_F32, PD_F32, 0 },
	{ "f16", PD_QZ_PLAIN, PD_Q_F16, PD_F16, 0 },
	{ "bf16", PD_QZ_PLAIN, PD_Q_BF16, PD_BF16, 0 },
	{ "q8_0", PD_QZ_GGUF, PD_Q_Q8_0, PD_F32, 7 },
	{ "q4_0", PD_QZ_GGUF, PD_Q_Q4_0, PD_F32, 2 },
	{ "q4_1", PD_QZ_GGUF, PD_Q_Q4_1, PD_F32, 3 },
	{ "q5_0", PD_QZ_GGUF, PD_Q_Q5_0, PD_F32, 8 },
	{ "q5_1", PD_QZ_GGUF, PD_Q_Q5_1, PD_F32, 9 },
	{ "q4_k", PD_QZ_GGUF, PD_Q_Q4_K, PD_F32, 14 },
	{ "q5_k", PD_QZ_GGUF, PD_Q_Q5_K, PD_F32, 16 },
	{ "q6_k", PD_QZ_GGUF, PD_Q_Q6_K, PD_F32, 18 },
	{ "fp8", PD_QZ_FP8, PD_Q_F8_E4M3, PD_F8_E4M3, 0 },
	{ "f8_e4m3fn", PD_QZ_FP8, PD_Q_F8_E4M3, PD_F8_E4M3, 0 },
	{ "f8_e5m2", PD_QZ_FP8, PD_Q_F8_E5M2, PD_F8_E5M2, 0 },
};

/* The input and output layers ComfyUI-GGUF's llama-quantize never
 * quantizes (lcpp.patch), FLUX's under BFL's names and diffusers', then
 * Wan's under the original names and diffusers'. */
static const char *const pd_qz_keep[] = { "txt_in.", "img_in.", "time_in.", "vector_in.", "guidance_in.",
					  "final_layer.", "x_embedder.", "context_embedder.", "time_text_embed.",
					  "norm_out.", "proj_out.",
					  "patch_embedding.", "text_embedding.", "time_embedding.", "time_projection.",
					  "img_emb.", "head.", "condition_embedder.", NULL };

static int pd_ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The same, whatever the letters' case: for a file's extension
 * (model.GGUF). */
static int pd_ends_with_ci(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* Whether paths A and B name one file (./a.gguf and a.gguf, a link). */
static int pd_qz_same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	return strcmp(a, b) == 0 ||
	       (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
}

/* A 2-D weight: what fp8 and the block types replace. */
static int pd_qz_is_weight(const struct pd_st_tensor *t, const char *name)
{
	return t->ndim == 2 && pd_ends_with(name, "weight");
}

/* ComfyUI-GGUF's type of tensor T (NAME without the prefix) for TARGET:
 * convert.py's (BF16 from BF16, else F16; 1-D and up to 1024 elements
 * F32) in *VIA, then llama-quantize's in *OUT: TARGET for 2-D weights
 * outside the kept layers whose rows are whole blocks, F16 for K-types
 * whose rows are not (lcpp.patch), else *VIA. */
/* Whether NAME holds one of LIST's strings (a NULL-ended list, or NULL). */
static int pd_qz_listed(const char *name, const char *const *list)
{
	for (; list && *list; list++)
		if (strstr(name, *list))
			return 1;
	return 0;
}

static void pd_qz_gguf_type(const struct pd_st_tensor *t, const char *name, const struct pd_gguf_rules *rules,
			    enum pd_qtype target, enum pd_qtype *via, enum pd_qtype *out)
{
	const struct pd_qtype_info *q = pd_quant_info(target);

	/* F32 too: the family's keys_hiprec (Wan's modulation tables) and
	 * tensors of 5 dimensions (Conv3d weights, which fix_5d_tensors.py
	 * adds back as F32) */
	if (t->ndim <= 1 || t->numel <= 1024 || t->ndim > 4 || pd_qz_listed(name, rules->keep_f32))
		*via = PD_Q_F32;
	else
		*via = t->dtype == PD_BF16 && !t->q ? PD_Q_BF16 : PD_Q_F16;
	*out = *via;
	if (!pd_qz_is_weight(t, name))
		return;
	for (const char *const *k = pd_qz_keep; *k; k++)
		if (strncmp(name, *k, strlen(*k)) == 0)
			return;
	/* lcpp.patch's rule for an FFN's second layer (Wan's original name) */
	if (pd_qz_listed(name, rules->q_1) && (target == PD_Q_Q4_0 || target == PD_Q_Q5_0))
		target = target == PD_Q_Q4_0 ? PD_Q_Q4_1 : PD_Q_Q5_1;
	if (t->shape[1] % q->block_size == 0)
		*out = target;
	else if (q->block_size == 256)
		*out = PD_Q_F16;
}

/* A language model (Qwen2's, Qwen2.5-VL's: a text_encoder folder, one
 * file, a GGUF) as llama.cpp's GGUF files hold one: its names, its sizes as
 * ARCH.* metadata, every 2-D weight of the decoder in TY's blocks (Q4_K
 * throughout for q4_k; rows not whole blocks F16), norms and biases F32;
 * the head and a vision tower left out, as the encoder never reads them. */
static int pd_qz_llm(const struct pd_qz_type *ty, const char *in, const char *out)
{
	struct pd_llm *m = NULL;
	struct pd_gguf_writer *gw = NULL;
	struct pd_qz_fill *fills = NULL;
	struct pd_qz_progress progress = { .t0 = pd_now() };
	const struct pd_llm_config *c;
	const struct pd_st *st;
	const char *pre, *arch;
	char key[96], name[128];
	int rc = -1, written = 0, quantized = 0, skipped = 0;

	if (pd_llm_open_weights(&m, in))
		return -1;
	c = pd_llm_get_config(m);
	st = pd_llm_weights(m, &pre);
	arch = c->vl ? "qwen2vl" : "qwen2";
	gw = pd_gguf_writer_new();
	fills = pd_calloc((size_t)st->n_tensors + 1, sizeof(*fills), "tensors");
	if (!gw || !fills)
		goto out;
#define PD_U32(k, v) (snprintf(key, sizeof(key), "%s.%s", arch, k), pd_gguf_writer_u32(gw, key, (uint32_t)(v)))
#define PD_F32(k, v) (snprintf(key, sizeof(key), "%s.%s", arch, k), pd_gguf_writer_f32(gw, key, (float)(v)))
	if (pd_gguf_writer_str(gw, "general.architecture", arch) ||
	    pd_gguf_writer_u32(gw, "general.quantization_version", 2) ||
	    pd_gguf_writer_u32(gw, "general.file_type", ty->file_type) || PD_U32("embedding_length", c->hidden) ||
	    PD_U32("block_count", c->layers) || PD_U32("feed_forward_length", c->intermediate) ||
	    PD_U32("attention.head_count", c->heads) || PD_U32("attention.head_count_kv", c->kv_heads) ||
	    PD_F32("attention.layer_norm_rms_epsilon", c->eps) || PD_F32("rope.freq_base", c->theta))
		goto out;
#undef PD_U32
#undef PD_F32
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];
		struct pd_qz_fill *f = &fills[i];

		if (!pd_llm_gguf_name(t->name, pre, name, sizeof(name))) {
			skipped++;
			continue;
		}
		if (!pd_dtype_is_float(t->dtype) || t->ndim < 1 || t->ndim > 2) {
			pd_errorf("%s: tensor '%s' is not a float vector or matrix", in, t->name);
			goto out;
		}
		f->t = t;
		f->p = &progress;
		progress.total += (double)t->numel;
		f->via = f->q = PD_Q_F32;
		if (t->ndim == 2) {
			f->via = t->dtype == PD_BF16 && !t->q ? PD_Q_BF16 : PD_Q_F16;
			f->q = t->shape[1] % pd_quant_info(ty->q)->block_size == 0 ? ty->q : PD_Q_F16;
		}
		quantized += f->q == ty->q;
		if (pd_gguf_writer_add(gw, name, (int)f->q, t->ndim, t->shape, pd_qz_fill_q, f))
			goto out;
		written++;
	}
	if (pd_gguf_writer_save(gw, out))
		goto out;
	pd_log(1, "pdit: wrote %s (a language model in llama.cpp's %s layout: %d tensors, %d of them %s; %d the encoder "
		  "never reads left out: the head, a vision tower)\n", out, arch, written, quantized, ty->name, skipped);
	rc = 0;
out:
	free(fills);
	pd_gguf_writer_free(gw);
	pd_llm_free(m);
	return rc;
}

int pd_cmd_quantize(int argc, char **argv)
{
	static const char prefix[] = "model.diffusion_model.";
	const char *type = NULL, *pos[2];
	const struct pd_arg opts[] = {
		{ "--type", 0, PD_ARG_STRING, &type, "T",
		  "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, fp8 or f8_e5m2 (required)", NULL },
		{ 0 },
	};
	const struct pd_qz_type *ty = NULL;
	struct pd_qz_progress progress = { .t0 = pd_now() };
	struct pd_st *st = NULL;
	struct pd_st_writer *w = NULL;
	struct pd_gguf_writer *gw = NULL;
	struct pd_qz_fill *fills = NULL;
	struct pd_gguf_rules rules = { 0 };
	int n_pos, hr, rc = 1, written = 0, quantized = 0;

	hr = pd_args_parse("quantize", opts, argc, argv, 2, pos, 2, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_quantize_usage, opts, pd_quantize_examples);
		return 0;
	}
	if (hr)
		return pd_cli_fail();
	if (n_pos != 2) {
		pd_errorf("quantize needs the file to read and the file to write: pdit quantize IN OUT --type T");
		return pd_cli_fail();
	}
	if (!type) {
		pd_errorf("quantize needs --type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, fp8 or f8_e5m2)");
		return pd_cli_fail();
	}
	for (size_t i = 0; i < sizeof(pd_qz_types) / sizeof(pd_qz_types[0]); i++)
		if (strcmp(type, pd_qz_types[i].name) == 0)
			ty = &pd_qz_types[i];
	if (!ty) {
		pd_errorf("--type %s: pdit writes f32, f16, bf16 (safetensors), q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k "
			  "(GGUF) or fp8, f8_e5m2 (safetensors)", type);
		return pd_cli_fail();
	}
	if (pd_qz_same_file(pos[0], pos[1])) {
		pd_errorf("quantize: OUT must be another file than IN (%s)", pos[0]);
		return pd_cli_fail();
	}
	/* the name says what the file is: pdit and other programs read by it */
	if (ty->mode == PD_QZ_GGUF ? pd_ends_with_ci(pos[1], ".safetensors") : pd_ends_with_ci(pos[1], ".gguf")) {
		pd_errorf("quantize: --type %s writes %s: give OUT a %s name, not %s", type,
			  ty->mode == PD_QZ_GGUF ? "a GGUF file" : "safetensors",
			  ty->mode == PD_QZ_GGUF ? ".gguf" : ".safetensors", pos[1]);
		return pd_cli_fail();
	}
	if (pd_out_check(pos[1]))
		return pd_cli_fail();
	if (ty->mode == PD_QZ_GGUF && pd_llm_is(pos[0]))
		return pd_qz_llm(ty, pos[0], pos[1]) ? pd_cli_fail() : 0;
	/* a folder: its diffusers weights (one file or the shards of an
	 * index), or a text encoder's (model.safetensors) */
	if (pd_st_open_path(&st, pos[0],
			    pd_is_dir(pos[0]) && !pd_st_has_component(pos[0], "diffusion_pytorch_model") &&
					    pd_st_has_component(pos[0], "model")
				    ? "model"
				    : "diffusion_pytorch_model"))
		return pd_cli_fail();
	/* a VAE alone: pdit reads VAEs as published (a diffusers folder with
	 * its config, or the single file's layout), never from a converted
	 * file (a checkpoint holding a transformer beside its VAE converts) */
	pd_weights_gguf_rules(st, &rules);
	if (!rules.arch && (pd_st_find_suffix(st, "decoder.conv_in.weight") ||
			    pd_st_find_suffix(st, "decoder.conv_in.conv.weight") || pd_st_find_suffix(st, "decoder.conv1.weight"))) {
		pd_errorf("%s is a VAE: pdit quantize converts transformers and language models; a VAE loads as it is "
			  "published (--vae DIR|FILE)", pos[0]);
		pd_st_close(st);
		return pd_cli_fail();
	}
	if (ty->mode == PD_QZ_GGUF)
		gw = pd_gguf_writer_new();
	else
		w = pd_st_writer_new();
	fills = pd_calloc((size_t)st->n_tensors + 1, sizeof(*fills), "tensors");
	if ((!w && !gw) || !fills)
		goto out;
	if (gw && ((rules.arch && pd_gguf_writer_str(gw, "general.architecture", rules.arch)) ||
		   pd_gguf_writer_u32(gw, "general.quantization_version", 2) ||
		   pd_gguf_writer_u32(gw, "general.file_type", ty->file_type)))
		goto out;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];
		const char *name = t->name;
		struct pd_qz_fill *f = &fills[i];

		if (pd_qz_skip(t->name))
			continue;
		if (ty->mode == PD_QZ_GGUF && !pd_dtype_is_float(t->dtype)) {
			pd_errorf("%s: tensor '%s' holds integers (%s): a GGUF of --type %s takes float tensors only",
				  pos[0], t->name, pd_dtype_name(t->dtype), type);
			goto out;
		}
		f->t = t;
		f->p = &progress;
		if (ty->mode != PD_QZ_PLAIN && pd_dtype_is_float(t->dtype))
			progress.total += (double)t->numel;
		if (ty->mode == PD_QZ_GGUF) {
			int64_t one = 1;

			name += strncmp(name, prefix, sizeof(prefix) - 1) == 0 ? sizeof(prefix) - 1 : 0;
			pd_qz_gguf_type(t, name, &rules, ty->q, &f->via, &f->q);
			quantized += f->q == ty->q;
			if (pd_gguf_writer_add(gw, name, (int)f->q, t->ndim ? t->ndim : 1, t->ndim ? t->shape : &one,
					       pd_qz_fill_q, f))
				goto out;
		} else if (!pd_dtype_is_float(t->dtype)) {
			/* integers pass through unchanged */
			if (pd_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data))
				goto out;
		} else if (ty->mode == PD_QZ_FP8) {
			int fp8 = pd_qz_is_weight(t, name);

			f->via = PD_Q_F32;
			f->q = fp8 ? ty->q : PD_Q_BF16;
			quantized += fp8;
			if (pd_st_writer_add_fill(w, t->name, fp8 ? ty->out : PD_BF16, t->ndim, t->shape, pd_qz_fill_q, f))
				goto out;
		} else {
			f->out = ty->out;
			if (pd_st_writer_add_fill(w, t->name, ty->out, t->ndim, t->shape, pd_qz_fill, f))
				goto out;
		}
		written++;
	}
	if (w)
		for (int i = 0; i < st->n_meta; i++)
			if (pd_st_writer_meta(w, st->meta_keys[i], st->meta_vals[i]))
				goto out;
	if (gw ? pd_gguf_writer_save(gw, pos[1]) : pd_st_writer_save(w, pos[1]))
		goto out;
	if (ty->mode == PD_QZ_PLAIN)
		pd_log(1, "pdit: wrote %s (%d tensors, %s)\n", pos[1], written, type);
	else
		pd_log(1, "pdit: wrote %s (%d tensors, %d of them %s)\n", pos[1], written, quantized, type);
	rc = 0;
out:
	if (rc)
		pd_cli_fail();
	pd_st_writer_free(w);
	pd_gguf_writer_free(gw);
	free(fills);
	pd_st_close(st);
	return rc;
}
