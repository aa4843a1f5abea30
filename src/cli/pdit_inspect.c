/*
 * pdit_inspect.c - pdit inspect FILE: what a weights file holds (GGUF or
 * safetensors): its format, metadata, and every tensor's name, type, shape
 * in torch order and bytes. A broken file gets one line naming the defect.
 */
#include "pd_args.h"
#include "pd_gguf.h"
#include "pd_llm.h"
#include "pd_lora.h"
#include "pd_quant.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pdit_cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char pd_inspect_usage[] =
	"usage: pdit inspect FILE|DIR\n"
	"\n"
	"Prints what a weights file holds: GGUF (ComfyUI-GGUF's and stable-diffusion.cpp's\n"
	"quantized files) or safetensors (a single file or a *.safetensors.index.json set;\n"
	"a component folder: its weights):\n"
	"the format, the metadata, and for every tensor its name, type, shape in torch\n"
	"order (outermost first) and bytes; a LoRA adapter also its layout, rank, alpha and\n"
	"modules. Every header field is checked first: a broken file gets one line naming\n"
	"the defect and a nonzero exit.";

static const char pd_inspect_examples[] =
	"  pdit inspect flux1-dev-Q8_0.gguf\n"
	"  pdit inspect FLUX.1-dev/transformer\n"
	"  pdit inspect my-style-lora.safetensors\n";

static void pd_print_shape(const int64_t *shape, int ndim)
{
	printf("[");
	for (int d = 0; d < ndim; d++)
		printf("%s%" PRId64, d ? ", " : "", shape[d]);
	printf("]");
}

static void pd_print_kv(const struct pd_gguf_kv *kv)
{
	printf("  %s = ", kv->key);
	switch (kv->type) {
	case PD_GGUF_STRING:
		printf("\"%s\"", kv->str);
		break;
	case PD_GGUF_ARRAY:
		printf("[%" PRIu64 " %s values]", kv->count, pd_gguf_vtype_name(kv->elem));
		break;
	case PD_GGUF_F32:
	case PD_GGUF_F64:
		printf("%.9g", kv->f);
		break;
	case PD_GGUF_BOOL:
		printf("%s", kv->u ? "true" : "false");
		break;
	case PD_GGUF_U64:
		printf("%" PRIu64, kv->u);
		break;
	default:
		printf("%" PRId64, kv->i);
		break;
	}
	printf(" (%s)\n", pd_gguf_vtype_name(kv->type));
}

/* A decoder-only language model (a text encoder, read by --llm): its
 * sizes, as the encoder reads them. */
static void pd_inspect_llm(const char *path)
{
	struct pd_llm *m;
	const struct pd_llm_config *c;

	if (!pd_llm_is(path) || pd_llm_open_weights(&m, path))
		return;
	c = pd_llm_get_config(m);
	printf("language model: %s decoder, %d layers %d wide, %d heads (%d of keys and values) of %d, a vocabulary of "
	       "%d: a text encoder (Qwen-Image's: --llm FILE)\n", c->vl ? "Qwen2.5-VL's" : "Qwen2's", c->layers, c->hidden,
	       c->heads, c->kv_heads, c->head_dim, c->vocab);
	pd_llm_free(m);
}

static int pd_inspect_gguf(const char *path)
{
	struct pd_gguf *g;
	size_t total = 0;

	if (pd_gguf_open(&g, path))
		return -1;
	printf("%s: GGUF version %u, alignment %" PRIu64 ", %" PRId64 " pairs, %" PRId64 " tensors\n", path,
	       g->version, g->alignment, g->n_kv, g->n_tensors);
	for (int64_t i = 0; i < g->n_kv; i++)
		pd_print_kv(&g->kv[i]);
	for (int64_t i = 0; i < g->n_tensors; i++) {
		const struct pd_gguf_tensor *t = &g->tensors[i];

		printf("  %-60s %-5s ", t->name, pd_qtype_get(t->type)->name);
		pd_print_shape(t->shape, t->ndim);
		printf(" %zu bytes\n", t->nbytes);
		total += t->nbytes;
	}
	printf("%zu bytes of tensors\n", total);
	pd_gguf_close(g);
	return 0;
}

/* A LoRA adapter: its layout, rank, alpha and the modules it touches (the
 * names as its layout has them; which layers they are shows against a
 * model: pdit forward/generate --lora). */
static void pd_inspect_lora(const char *path)
{
	struct pd_lora_about a;

	if (pd_lora_describe(path, &a) || !a.modules)
		return;
	printf("LoRA adapter: %s layout, %d modules (such as %s), rank %d", a.layout, a.modules, a.example, a.rank_min);
	if (a.rank_max != a.rank_min)
		printf("..%d", a.rank_max);
	if (a.alphas)
		printf(", alpha %g", a.alpha_min);
	if (a.alphas && a.alpha_max != a.alpha_min)
		printf("..%g", a.alpha_max);
	if (a.alphas && a.alphas < a.modules)
		printf(" on %d of them (the others: alpha = rank)", a.alphas);
	if (!a.alphas)
		printf(", no alpha (alpha = rank)");
	printf(", %.0f parameters\n", a.params);
	if (a.other)
		printf("  %d keys of no low-rank pair (such as %s): refused unless --lora-lenient\n", a.other,
		       a.first_other);
}

static int pd_inspect_st(const char *path)
{
	struct pd_st *st;
	size_t total = 0;

	if (pd_st_open(&st, path))
		return -1;
	printf("%s: safetensors, %d file%s, %d tensors\n", path, st->n_files, st->n_files > 1 ? "s" : "",
	       st->n_tensors);
	for (int i = 0; i < st->n_meta; i++)
		printf("  %s = \"%s\"\n", st->meta_keys[i], st->meta_vals[i]);
	pd_inspect_lora(path);
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];

		printf("  %-60s %-7s ", t->name, pd_dtype_name(t->dtype));
		pd_print_shape(t->shape, t->ndim);
		printf(" %zu bytes\n", t->nbytes);
		total += t->nbytes;
	}
	printf("%zu bytes of tensors\n", total);
	pd_st_close(st);
	return 0;
}

int pd_cmd_inspect(int argc, char **argv)
{
	const struct pd_arg opts[] = { { 0 } };
	const char *pos[1];
	int n_pos, hr;

	hr = pd_args_parse("inspect", opts, argc, argv, 2, pos, 1, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_inspect_usage, opts, pd_inspect_examples);
		return 0;
	}
	if (hr)
		return pd_cli_fail();
	if (n_pos != 1) {
		pd_errorf("inspect needs the file: pdit inspect FILE");
		return pd_cli_fail();
	}
	if (pd_is_dir(pos[0])) {
		/* a component folder: its weights, as diffusers (the transformer,
		 * the VAE) or transformers (the text encoders) name them, one file
		 * or an index's shards */
		static const char *const names[] = { "diffusion_pytorch_model.safetensors",
						     "diffusion_pytorch_model.safetensors.index.json", "model.safetensors",
						     "model.safetensors.index.json" };

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			char *path = pd_strfmt("%s/%s", pos[0], names[i]);
			int rc = !path ? -1 : !pd_file_exists(path) ? 1 : pd_inspect_st(path);

			free(path);
			if (rc == 0)
				pd_inspect_llm(pos[0]);
			if (rc <= 0)
				return rc ? pd_cli_fail() : 0;
		}
		pd_errorf("%s: a folder without diffusers' or transformers' weights (diffusion_pytorch_model or model "
			  ".safetensors, or its .index.json): give a weights file", pos[0]);
		return pd_cli_fail();
	}
	if (!pd_file_exists(pos[0])) {
		pd_errorf("%s: no such file", pos[0]);
		return pd_cli_fail();
	}
	if (pd_gguf_is(pos[0]) ? pd_inspect_gguf(pos[0]) : pd_inspect_st(pos[0]))
		return pd_cli_fail();
	pd_inspect_llm(pos[0]);
	return 0;
}
