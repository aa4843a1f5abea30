/*
 * test_wan_golden.c - the Wan2.1 transformer against diffusers'
 * WanTransformer3DModel, call by call.
 *
 *   test_wan_golden WAN_TINY_DIR [f32|bf16]
 *
 * For every forward-*.safetensors (1, 3 and 2 latent frames, 6 to 24
 * tokens, text of 512 and 77 rows, a batch of two prompts): each batch
 * item's latents are patchified, run through the DiT interface and
 * unpatchified; out.sample, and on the way emb.temb, emb.timestep_proj,
 * emb.text_embedder and every block's output, are within
 * 1e-5 of the reference, max|a - b| / max|ref| (2e-2 with bf16 products).
 * The output buffer is poisoned first.
 */
#include "pd_backend_cpu.h"
#include "pd_safetensors.h"
#include "pd_test.h"
#include "pd_test_st.h"
#include "pd_util.h"
#include "pd_wan.h"

#include <string.h>

static double tol = 1e-5, worst;

/* MINE (batch item B's values) against item B of the reference REF. */
static void compare(const char *file, const char *what, const float *mine, int64_t n, const struct pd_st *st,
		    const char *ref, int64_t b)
{
	worst = pd_test_compare(file, what, mine, (size_t)n, st, ref, (size_t)(b * n), tol, worst);
}

static void one_file(const char *path, struct pd_dit *d, const struct pd_wan_config *c)
{
	struct pd_st *st = NULL;
	const struct pd_st_tensor *hs, *ts, *es;
	struct pd_test_store s = { 0 };
	struct pd_dump dump = { .fn = pd_test_store_fn, .ctx = &s, .index = -1 };
	int64_t B, C, F, h, w, L, T, E, P;
	float *lat, *tok, *ids, *txt, *out, *pred;

	if (pd_st_open(&st, path)) {
		PD_CHECK(0, "%s", pd_last_error());
		return;
	}
	hs = pd_st_get(st, "in.hidden_states");
	ts = pd_st_get(st, "in.timestep");
	es = pd_st_get(st, "in.encoder_hidden_states");
	if (!hs || !ts || !es || hs->ndim != 5 || es->ndim != 3 || ts->dtype != PD_I64) {
		PD_CHECK(0, "%s: inputs missing", path);
		pd_st_close(st);
		return;
	}
	B = hs->shape[0], C = hs->shape[1], F = hs->shape[2], h = hs->shape[3], w = hs->shape[4];
	T = es->shape[1], E = es->shape[2];
	L = F / c->patch[0] * (h / c->patch[1]) * (w / c->patch[2]);
	P = d->info.in_channels;
	lat = malloc((size_t)hs->numel * sizeof(float));
	txt = malloc((size_t)es->numel * sizeof(float));
	tok = malloc((size_t)(L * P) * sizeof(float));
	ids = malloc((size_t)(L * 3) * sizeof(float));
	out = malloc((size_t)(L * d->info.out_channels) * sizeof(float));
	pred = malloc((size_t)(C * F * h * w) * sizeof(float));
	pd_st_read_f32(hs, 0, (size_t)hs->numel, lat);
	pd_st_read_f32(es, 0, (size_t)es->numel, txt);
	for (int64_t b = 0; b < B; b++) {
		struct pd_dit_call call = { .txt_len = T, .img_len = L, .img = tok, .txt = txt + b * T * E, .img_ids = ids,
					    .timestep = (float)pd_test_i64(ts, b) };
		char name[64];

		for (int64_t i = 0; i < L * d->info.out_channels; i++)
			out[i] = NAN;
		pd_wan_patchify(c->patch, (int)C, (int)F, (int)h, (int)w, lat + b * C * F * h * w, tok, ids);
		PD_CHECK(pd_dit_forward(d, &call, out, &dump) == 0, "%s: %s", path, pd_last_error());
		pd_wan_unpatchify(c->patch, (int)C, (int)F, (int)h, (int)w, out, pred);
		compare(path, "out.sample", pred, C * F * h * w, st, "out.sample", b);
		for (int i = 0; i < s.n; i++) {
			char ref[96];
			const char *tail = strstr(s.name[i], ".out.hidden_states");

			if (strcmp(s.name[i], "emb.patch_tokens") == 0)
				continue;
			/* pdit's block.i.out.hidden_states is diffusers' block.i.out */
			snprintf(ref, sizeof(ref), "%.*s%s", tail ? (int)(tail - s.name[i]) : (int)strlen(s.name[i]), s.name[i],
				 tail ? ".out" : "");
			compare(path, ref, s.data[i], s.count[i], st, ref, b);
		}
		for (int l = 0; l < d->info.blocks; l++) {
			int seen = 0;

			snprintf(name, sizeof(name), "block.%d.out.hidden_states", l);
			for (int i = 0; i < s.n; i++)
				seen |= strcmp(s.name[i], name) == 0;
			PD_CHECK(seen, "%s: %s was not dumped", path, name);
		}
		pd_test_store_clear(&s);
	}
	free(lat);
	free(txt);
	free(tok);
	free(ids);
	free(out);
	free(pred);
	pd_st_close(st);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/wan-tiny";
	int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0;
	char *tr = pd_strfmt("%s/model/transformer", dir);
	struct pd_backend *be;
	struct pd_dit *d;
	struct pd_wan_config c;
	char **paths;
	int nf;

	if (bf16)
		tol = 2e-2;
	if (pd_test_backend_new(&be, bf16 ? PD_BF16 : PD_F32, 0) || pd_wan_probe(tr, NULL, &c) ||
	    pd_wan_load_dit(&d, tr, NULL, be, NULL)) {
		fprintf(stderr, "setup: %s\n", pd_last_error());
		return 1;
	}
	paths = pd_test_files(dir, "forward-", &nf);
	for (int i = 0; i < nf; i++)
		one_file(paths[i], d, &c);
	pd_test_files_free(paths, nf);
	PD_CHECK(nf == 4, "%d forward files", nf);
	printf("%d forward files, %s, worst max|diff|/max|ref| %.2e (limit %g)\n", nf, bf16 ? "bf16" : "f32", worst,
	       tol);
	pd_dit_free(d);
	pd_backend_free(be);
	free(tr);
	return pd_test_report();
}
