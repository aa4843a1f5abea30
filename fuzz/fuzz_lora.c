/*
 * fuzz_lora.c - the LoRA adapter loader on one file: its description (pdit
 * inspect), then matched to a small FLUX model's layers (strict and
 * lenient) and put beside each of them on the CPU backend (every shard of
 * a 2-way tensor-parallel split too, each on a layer of its shard's size,
 * as the engine makes them), then taken off.
 */
#include "fuzz.h"
#include "pd_backend_new.h"
#include "pd_flux.h"
#include "pd_lora.h"
#include "pd_util.h"

/* dim 8 (2 heads of 4), MLP 16, one block of each kind: what the seeds fit */
static const struct pd_flux_config pd_fuzz_flux = {
	.in_channels = 4, .out_channels = 4, .num_layers = 1, .num_single_layers = 1, .heads = 2, .head_dim = 4,
	.dim = 8, .mlp_dim = 16, .joint_attention_dim = 8, .pooled_projection_dim = 8, .guidance_embeds = 1,
	.n_axes = 3, .axes_dims = { 2, 1, 1 },
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pd_backend *be;
	const char *path = pd_fuzz_file(0, "lora.safetensors", data, size);
	struct pd_dit_linear *layers = NULL;
	struct pd_lora_about about;
	int n = 0;

	if (!be) {
		struct pd_backend_config cfg = { PD_F32, 1, -1, 0, PD_QP_DECODE };

		if (pd_backend_new(&be, "cpu", &cfg))
			abort();
	}
	pd_lora_describe(path, &about);
	if (pd_flux_linears(&pd_fuzz_flux, &layers, &n))
		abort();
	for (int lenient = 0; lenient < 2; lenient++) {
		struct pd_lora_spec spec = { path, lenient ? -0.5f : 1.0f };
		struct pd_lora *lo = NULL;

		if (pd_lora_resolve(&lo, &spec, 1, layers, n, lenient))
			continue;
		for (int i = 0; i < n; i++) {
			const struct pd_dit_linear *l = &layers[i];
			float *w = calloc((size_t)(l->n_out * l->n_in), sizeof(float));

			/* the whole layer, then each half of a row split and of a column split */
			for (int part = 0; w && part < 5; part++) {
				struct pd_slice s = pd_slice_all(l->n_out, l->n_in);
				struct pd_linear *lin;

				if (part == 1 || part == 2) {
					s.nr = l->n_out / 2;
					s.r0 = part == 2 ? s.nr : 0;
				} else if (part == 3 || part == 4) {
					s.nc = l->n_in / 2;
					s.c0 = part == 4 ? s.nc : 0;
				}
				lin = be->ops->linear_new(be, s.nr, s.nc, w + s.r0 * l->n_in + s.c0, PD_F32, l->n_in, NULL);
				if (!lin)
					break;
				pd_lora_apply(lo, be, lin, l->name, &s);
				pd_backend_recover(be);
				be->ops->linear_adapt(be, lin, 0, NULL, NULL);
				be->ops->linear_free(be, lin);
			}
			free(w);
		}
		pd_lora_free(lo);
	}
	free(layers);
	return 0;
}
