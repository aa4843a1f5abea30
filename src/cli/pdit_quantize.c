/*
 * pdit_quantize.c - pdit quantize IN OUT --type T: a weights file pdit reads
 * (GGUF, fp8 or scaled fp8, BF16/F16/F32 safetensors, an index set) written
 * as plain safetensors of type T with the same names and torch-order shapes,
 * dequantized. Writing GGUF block types and fp8 is the next step.
 */
#include "pd_args.h"
#include "pd_safetensors.h"
#include "pd_st_writer.h"
#include "pd_util.h"
#include "pdit_cli.h"

#include <stdlib.h>
#include <string.h>

static const char pd_quantize_usage[] =
	"usage: pdit quantize IN OUT --type f32|f16|bf16\n"
	"\n"
	"Writes the weights of IN (a GGUF file from ComfyUI-GGUF or stable-diffusion.cpp,\n"
	"fp8 or ComfyUI's scaled fp8 safetensors, BF16/F16/F32 safetensors or an\n"
	"*.safetensors.index.json set) into OUT as plain safetensors of --type, with the\n"
	"same tensor names and torch-order shapes: quantized blocks decoded as ggml\n"
	"decodes them, scaled fp8 times its scales (its scale tensors and marker are\n"
	"left out). Metadata is kept. Quantizing to GGUF block types and fp8 comes next.";

static const char pd_quantize_examples[] =
	"  pdit quantize flux1-dev-Q8_0.gguf flux1-dev-dequant.safetensors --type bf16\n"
	"  pdit inspect flux1-dev-dequant.safetensors\n";

struct pd_qz_fill {
	const struct pd_st_tensor *t;   /* the tensor read */
	enum pd_dtype out;              /* the type written */
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

/* Scaled fp8's bookkeeping: folded into the weights written. */
static int pd_qz_skip(const char *name)
{
	size_t n = strlen(name);

	return (n >= 10 && strcmp(name + n - 10, "scaled_fp8") == 0) ||
	       (n >= 13 && strcmp(name + n - 13, ".scale_weight") == 0) ||
	       (n >= 12 && strcmp(name + n - 12, ".scale_input") == 0);
}

int pd_cmd_quantize(int argc, char **argv)
{
	const char *type = NULL, *pos[2];
	const struct pd_arg opts[] = {
		{ "--type", 0, PD_ARG_STRING, &type, "T", "f32, f16 or bf16 (required)", NULL },
		{ 0 },
	};
	struct pd_st *st = NULL;
	struct pd_st_writer *w = NULL;
	struct pd_qz_fill *fills = NULL;
	enum pd_dtype out;
	int n_pos, hr, rc = 1, written = 0;

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
		pd_errorf("quantize needs --type (f32, f16 or bf16)");
		return pd_cli_fail();
	}
	if (strcmp(type, "f32") == 0)
		out = PD_F32;
	else if (strcmp(type, "f16") == 0)
		out = PD_F16;
	else if (strcmp(type, "bf16") == 0)
		out = PD_BF16;
	else {
		pd_errorf("--type %s: pdit writes f32, f16 or bf16 today (GGUF block types and fp8 come next)", type);
		return pd_cli_fail();
	}
	if (strcmp(pos[0], pos[1]) == 0) {
		pd_errorf("quantize: OUT must be another file than IN (%s)", pos[0]);
		return pd_cli_fail();
	}
	if (pd_out_check(pos[1]) || pd_st_open(&st, pos[0]))
		return pd_cli_fail();
	w = pd_st_writer_new();
	fills = pd_calloc((size_t)st->n_tensors + 1, sizeof(*fills), "tensors");
	if (!w || !fills)
		goto out;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];

		if (pd_qz_skip(t->name))
			continue;
		if (!pd_dtype_is_float(t->dtype)) {
			/* integers pass through unchanged */
			if (pd_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data))
				goto out;
		} else {
			fills[i] = (struct pd_qz_fill){ t, out };
			if (pd_st_writer_add_fill(w, t->name, out, t->ndim, t->shape, pd_qz_fill, &fills[i]))
				goto out;
		}
		written++;
	}
	for (int i = 0; i < st->n_meta; i++)
		if (pd_st_writer_meta(w, st->meta_keys[i], st->meta_vals[i]))
			goto out;
	if (pd_st_writer_save(w, pos[1]))
		goto out;
	pd_log(1, "pdit: wrote %s (%d tensors, %s)\n", pos[1], written, type);
	rc = 0;
out:
	if (rc)
		pd_cli_fail();
	pd_st_writer_free(w);
	free(fills);
	pd_st_close(st);
	return rc;
}
