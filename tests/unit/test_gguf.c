/*
 * test_gguf.c - the GGUF reader and the block decoders against ggml's own
 * files and values (tests/golden/quant-tiny, made by ggml d99724f):
 *
 *   - every tensor of types/ggml-types.gguf and of its 64-byte-aligned twin
 *     decodes to the float32 values ggml's to_float gives, bit for bit, and
 *     sits where manifest.json says (type, ne, offset);
 *   - the pairs of every value type read back (u8 ... f64, bool, strings,
 *     arrays), general.alignment taken;
 *   - every fp8 code (e4m3fn, e5m2) and the rounded random tensors decode
 *     to the reference values (NaN where the reference is NaN);
 *   - the straight-to-bf16 decoder (fp8 e4m3fn) gives the float32 values
 *     rounded to bf16, on every code;
 *   - each quantized FLUX file (ComfyUI-GGUF Q8_0 and Q4_K_S,
 *     stable-diffusion.cpp's Q8_0, plain and scaled fp8) read under
 *     diffusers' names equals its dequant- folder, bit for bit;
 *   - every GGUF file in broken/ is refused with one message that names the
 *     file, and every GGUF file in edge/ is read; every broken fp8 file is
 *     refused when opened or when its weight is read.
 *
 *   test_gguf GOLDEN_QUANT_DIR
 */
#include "pd_flux.h"
#include "pd_gguf.h"
#include "pd_quant.h"
#include "pd_safetensors.h"
#include "pd_test.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A float32 tensor of the reference file, or NULL. */
static float *ref_values(const struct pd_st *st, const char *name, int64_t n)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);
	float *v;

	if (!t || t->numel != n)
		return NULL;
	v = malloc((size_t)n * sizeof(float));
	if (v && pd_st_read_f32(t, 0, (size_t)n, v)) {
		free(v);
		return NULL;
	}
	return v;
}

static void check_types_file(const char *dir, const char *file, const cJSON *layout)
{
	char path[512], vpath[512];
	struct pd_gguf *g = NULL;
	struct pd_st *vals = NULL;
	int decoded = 0, simd = 0, encoded = 0;

	snprintf(path, sizeof(path), "%s/types/%s", dir, file);
	snprintf(vpath, sizeof(vpath), "%s/types/ggml-types-values.safetensors", dir);
	PD_CHECK(pd_gguf_open(&g, path) == 0 && pd_st_open(&vals, vpath) == 0, "%s: %s", path, pd_last_error());
	if (!g || !vals)
		goto out;
	PD_CHECK(g->n_tensors == cJSON_GetArraySize(layout), "%s: %lld tensors, the manifest lists %d", file,
		 (long long)g->n_tensors, cJSON_GetArraySize(layout));
	for (int64_t i = 0; i < g->n_tensors; i++) {
		const struct pd_gguf_tensor *t = &g->tensors[i];
		const struct pd_qtype_info *q = pd_qtype_get(t->type);
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(layout, t->name);
		const cJSON *ne = cJSON_GetObjectItemCaseSensitive(m, "ne");
		float *want = ref_values(vals, t->name, t->numel), *got = malloc((size_t)t->numel * sizeof(float) + 4);
		int same_ne = cJSON_GetArraySize(ne) == t->ndim;

		for (int d = 0; same_ne && d < t->ndim; d++)
			same_ne = cJSON_GetArrayItem(ne, d)->valuedouble == (double)t->ne[d];
		PD_CHECK(m && q && strcmp(cJSON_GetObjectItemCaseSensitive(m, "type")->valuestring, q->name) == 0 && same_ne &&
				 cJSON_GetObjectItemCaseSensitive(m, "offset")->valuedouble == (double)t->offset,
			 "%s: %s: type, ne or offset not the manifest's", file, t->name);
		PD_CHECK(want && got && q && q->decodes, "%s: %s: no reference values or not decodable", file, t->name);
		if (want && got && q && q->decodes) {
			pd_poison(got, (size_t)t->numel);
			pd_quant_decode((enum pd_qtype)t->type, t->data, got, t->numel);
			PD_CHECK(memcmp(got, want, (size_t)t->numel * sizeof(float)) == 0,
				 "%s: %s (%s) decodes to other values than ggml's", file, t->name, q->name);
			decoded++;
			/* the vectorised decoder, where this CPU has one */
			if (pd_quant_avx512_has((enum pd_qtype)t->type)) {
				pd_poison(got, (size_t)t->numel);
				PD_CHECK(pd_quant_decode_avx512((enum pd_qtype)t->type, t->data, got, t->numel) == 0 &&
						 memcmp(got, want, (size_t)t->numel * sizeof(float)) == 0,
					 "%s: %s (%s): AVX-512 decodes to other values than ggml's", file, t->name,
					 q->name);
				simd++;
			}
		}
		/* the encoder: ggml's source values give ggml's bytes (the
		 * importance-matrix tensors took another quantizer) */
		if (q && pd_quant_encodes((enum pd_qtype)t->type) && !strstr(t->name, "imatrix")) {
			char sname[200];
			float *src;
			size_t bytes = (size_t)t->numel / (size_t)q->block_size * (size_t)q->block_bytes;
			unsigned char *enc = malloc(bytes + 1);

			snprintf(sname, sizeof(sname), "source.%s", t->name);
			src = ref_values(vals, sname, t->numel);
			PD_CHECK(src != NULL, "%s: no %s", file, sname);
			/* as llama-quantize saw it: an F16 file */
			for (int64_t e = 0; src && strstr(t->name, "via_f16") && e < t->numel; e++)
				src[e] = pd_f16_to_f32(pd_f32_to_f16(src[e]));
			if (src && enc) {
				memset(enc, 0xA5, bytes);
				pd_quant_encode((enum pd_qtype)t->type, src, enc, t->numel);
				PD_CHECK(memcmp(enc, t->data, bytes) == 0, "%s: %s (%s): encoded bytes differ from ggml's",
					 file, t->name, q->name);
				encoded++;
			}
			free(src);
			free(enc);
		}
		free(want);
		free(got);
	}
	/* 11 types, and q8_0.3d, f32.1d, q5_0.via_f16 */
	PD_CHECK(encoded >= 14, "%s: only %d tensors encoded (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, "
		 "q5_K, q6_K expected)", file, encoded);
	PD_CHECK(decoded == g->n_tensors && decoded >= 19, "%s: %d tensors decoded of %lld", file, decoded, (long long)g->n_tensors);
	if (pd_quant_avx512_has(PD_Q_Q8_0))
		PD_CHECK(simd >= 15, "%s: only %d tensors had an AVX-512 decoder (every block type expected)", file,
			 simd);
	fprintf(stderr, "%s: %d tensors, %d of them also by AVX-512, %d encoded\n", file, decoded, simd, encoded);
out:
	pd_gguf_close(g);
	pd_st_close(vals);
}

static void check_pairs(const char *dir)
{
	char path[512];
	struct pd_gguf *g = NULL;
	const struct pd_gguf_kv *kv;

	snprintf(path, sizeof(path), "%s/types/ggml-types-align64.gguf", dir);
	PD_CHECK(pd_gguf_open(&g, path) == 0, "%s: %s", path, pd_last_error());
	if (!g)
		return;
	PD_CHECK(g->alignment == 64 && g->data_start % 64 == 0, "%s: alignment %llu, data at %zu", path,
		 (unsigned long long)g->alignment, g->data_start);
	for (const char *const *k = (const char *const[]){ "test.u8", "test.i8", "test.u16", "test.i16", "test.u32",
							    "test.i32", "test.f32", "test.bool", "test.string",
							    "test.u64", "test.i64", "test.f64", NULL };
	     *k; k++) {
		kv = pd_gguf_kv_find(g, *k);
		PD_CHECK(kv != NULL, "%s: no pair %s", path, *k);
		if (kv)
			PD_CHECK(strcmp(pd_gguf_vtype_name(kv->type), *k + 5) == 0, "%s: %s is a %s", path, *k,
				 pd_gguf_vtype_name(kv->type));
	}
	kv = pd_gguf_kv_find(g, "test.empty_string");
	PD_CHECK(kv && kv->type == PD_GGUF_STRING && kv->str && kv->str[0] == 0, "%s: test.empty_string", path);
	pd_gguf_close(g);
}

static void check_fp8(const char *dir)
{
	char cpath[512], vpath[512];
	struct pd_st *codes = NULL, *vals = NULL;
	const char *names[] = { "e4m3fn.all_codes", "e5m2.all_codes", "e4m3fn.random", "e5m2.random" };

	snprintf(cpath, sizeof(cpath), "%s/types/fp8-codes.safetensors", dir);
	snprintf(vpath, sizeof(vpath), "%s/types/fp8-values.safetensors", dir);
	PD_CHECK(pd_st_open(&codes, cpath) == 0 && pd_st_open(&vals, vpath) == 0, "fp8 files: %s", pd_last_error());
	for (int k = 0; codes && vals && k < 4; k++) {
		const struct pd_st_tensor *c = pd_st_get(codes, names[k]);
		float *want = c ? ref_values(vals, names[k], c->numel) : NULL, *got;
		int bad = 0;

		PD_CHECK(c && want && c->dtype == (k % 2 ? PD_F8_E5M2 : PD_F8_E4M3), "fp8 %s missing", names[k]);
		if (!c || !want) {
			free(want);
			continue;
		}
		got = malloc((size_t)c->numel * sizeof(float));
		pd_fp8_decode(k % 2, c->data, got, c->numel, 1.0f);
		for (int64_t i = 0; i < c->numel; i++)
			bad += isnan(want[i]) ? !isnan(got[i]) : memcmp(&got[i], &want[i], sizeof(float)) != 0;
		PD_CHECK(bad == 0, "fp8 %s: %d of %lld values differ", names[k], bad, (long long)c->numel);
		/* the encoder: the random sources round to these codes */
		if (k >= 2) {
			char sname[64];
			float *src;
			unsigned char *enc = malloc((size_t)c->numel);

			snprintf(sname, sizeof(sname), "source.%s", names[k]);
			src = ref_values(vals, sname, c->numel);
			PD_CHECK(src && enc, "fp8 %s: no %s", names[k], sname);
			if (src && enc) {
				pd_quant_encode(k % 2 ? PD_Q_F8_E5M2 : PD_Q_F8_E4M3, src, enc, c->numel);
				PD_CHECK(memcmp(enc, c->data, (size_t)c->numel) == 0, "fp8 %s: encoded codes differ", names[k]);
			}
			free(src);
			free(enc);
		}
		/* the vectorised decoder (its scalar tail included: the counts
		 * are not all multiples of 16) */
		if (pd_quant_avx512_has(PD_Q_F8_E4M3)) {
			bad = 0;
			pd_poison(got, (size_t)c->numel);
			PD_CHECK(pd_quant_decode_avx512(k % 2 ? PD_Q_F8_E5M2 : PD_Q_F8_E4M3, c->data, got, c->numel) == 0,
				 "fp8 %s: no AVX-512 decoder", names[k]);
			for (int64_t i = 0; i < c->numel; i++)
				bad += isnan(want[i]) ? !isnan(got[i]) : memcmp(&got[i], &want[i], sizeof(float)) != 0;
			PD_CHECK(bad == 0, "fp8 %s: AVX-512: %d of %lld values differ", names[k], bad, (long long)c->numel);
		}
		free(got);
		free(want);
	}
	pd_st_close(codes);
	pd_st_close(vals);
}

static void check_folder(const char *dir, const char *sub, int want_ok)
{
	char path[1024];
	DIR *d;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	d = opendir(path);
	PD_CHECK(d != NULL, "%s: cannot open", path);
	while (d && (e = readdir(d))) {
		struct pd_gguf *g = NULL;
		size_t len = strlen(e->d_name);
		int rc;

		if (len < 5 || strcmp(e->d_name + len - 5, ".gguf"))
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, e->d_name);
		pd_errorf("(none)");
		rc = pd_gguf_open(&g, path);
		if (want_ok)
			PD_CHECK(rc == 0 && g, "%s: refused: %s", path, pd_last_error());
		else
			PD_CHECK(rc == -1 && !g && strncmp(pd_last_error(), path, strlen(path)) == 0 &&
					 !strchr(pd_last_error(), '\n'),
				 "%s: accepted, or a message without the file (%s)", path, pd_last_error());
		if (!want_ok && getenv("PD_TEST_VERBOSE"))
			printf("%s\n", pd_last_error());
		pd_gguf_close(g);
		n++;
	}
	if (d)
		closedir(d);
	PD_CHECK(n >= (want_ok ? 4 : 28), "%s: only %d GGUF files", sub, n);
}

/* The broken fp8 safetensors: refused when opened, or when a weight is read. */
static void check_fp8_broken(const char *dir)
{
	const char *names[] = { "fp8-header-length-past-end", "fp8-offsets-past-end", "fp8-scale-not-scalar",
				"fp8-size-mismatch", "fp8-truncated", "fp8-unknown-dtype" };

	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		char path[512];
		struct pd_st *st = NULL;
		int refused = 0;
		float v[64];

		snprintf(path, sizeof(path), "%s/broken/%s.safetensors", dir, names[k]);
		if (pd_st_open(&st, path)) {
			refused = strstr(pd_last_error(), path) != NULL;
		} else {
			for (int i = 0; i < st->n_tensors && !refused; i++)
				if (pd_dtype_is_float(st->sorted[i]->dtype) && st->sorted[i]->numel > 0)
					refused = pd_st_read_f32(st->sorted[i], 0, 1, v) != 0;
			pd_st_close(st);
		}
		PD_CHECK(refused, "%s: read without a complaint naming it (%s)", path, pd_last_error());
	}
}

/* Each quantized FLUX file read under diffusers' names (the BFL mapping's
 * views) equals its dequant- folder, tensor by tensor, bit for bit. */
static void check_flux_files(const char *dir)
{
	const char *files[][2] = { { "flux-tiny-dev-Q8_0.gguf", "dequant-Q8_0" },
				   { "flux-tiny-dev-Q8_0-sdcpp.gguf", "dequant-Q8_0" },
				   { "flux-tiny-dev-Q4_K_S.gguf", "dequant-Q4_K_S" },
				   { "flux-tiny-dev-fp8_e4m3fn.safetensors", "dequant-fp8_e4m3fn" },
				   { "flux-tiny-dev-fp8_e4m3fn_scaled.safetensors", "dequant-fp8_e4m3fn_scaled" } };

	for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
		char path[512], cfg_path[512], ref_path[512];
		struct pd_st *view = NULL, *ref = NULL;
		struct pd_flux_config cfg;
		int same = 0;

		snprintf(path, sizeof(path), "%s/flux/%s", dir, files[k][0]);
		snprintf(cfg_path, sizeof(cfg_path), "%s/flux/%s/config.json", dir, files[k][1]);
		snprintf(ref_path, sizeof(ref_path), "%s/flux/%s/diffusion_pytorch_model.safetensors", dir, files[k][1]);
		PD_CHECK(pd_flux_open_file(&view, path, &cfg, cfg_path) == 0 && pd_st_open(&ref, ref_path) == 0, "%s: %s",
			 path, pd_last_error());
		for (int i = 0; view && ref && i < ref->n_tensors; i++) {
			const struct pd_st_tensor *r = ref->sorted[i], *t = pd_st_get(view, r->name);
			float *a = malloc((size_t)r->numel * sizeof(float)), *b = malloc((size_t)r->numel * sizeof(float));

			if (t && t->numel == r->numel && a && b && pd_st_read_f32(t, 0, (size_t)t->numel, a) == 0 &&
			    pd_st_read_f32(r, 0, (size_t)r->numel, b) == 0 &&
			    memcmp(a, b, (size_t)r->numel * sizeof(float)) == 0)
				same++;
			else
				PD_CHECK(0, "%s: %s differs from %s's (%s)", files[k][0], r->name, files[k][1],
					 t ? pd_last_error() : "missing");
			free(a);
			free(b);
		}
		PD_CHECK(ref && same == ref->n_tensors, "%s: %d of %d tensors equal", files[k][0], same,
			 ref ? ref->n_tensors : 0);
		pd_st_close(view);
		pd_st_close(ref);
	}
}

/* A 1-D block-quantized tensor (stable-diffusion.cpp quantizes those too):
 * read through the safetensors interface, every element its own, from a
 * GGUF file written here with two Q8_0 blocks of the types file. */
static void check_1d_blocks(const char *dir)
{
	char path[512], vpath[512], out[] = "/tmp/pdit-gguf-1d-XXXXXX";
	struct pd_gguf *g = NULL;
	struct pd_st *st = NULL, *vals = NULL;
	float *ref = NULL;
	const struct pd_gguf_tensor *q8;
	unsigned char file[256] = { 0 };
	size_t k = 0;
	float want[64], got[64];
	int fd;

	snprintf(path, sizeof(path), "%s/types/ggml-types.gguf", dir);
	snprintf(vpath, sizeof(vpath), "%s/types/ggml-types-values.safetensors", dir);
	if (pd_gguf_open(&g, path) || !(q8 = pd_gguf_get(g, "q8_0")) || pd_st_open(&vals, vpath) ||
	    !(ref = ref_values(vals, "q8_0", q8->numel))) {
		PD_CHECK(0, "%s: %s", path, pd_last_error());
		pd_gguf_close(g);
		pd_st_close(vals);
		return;
	}
#define PUT(v, n) do { uint64_t x_ = (v); for (int b_ = 0; b_ < (n); b_++) file[k++] = (unsigned char)(x_ >> (8 * b_)); } while (0)
	memcpy(file, "GGUF", 4);
	k = 4;
	PUT(3, 4);                      /* version */
	PUT(1, 8);                      /* tensors */
	PUT(0, 8);                      /* pairs */
	PUT(1, 8);                      /* name length */
	file[k++] = 'v';
	PUT(1, 4);                      /* n_dims */
	PUT(64, 8);                     /* ne[0] */
	PUT(PD_Q_Q8_0, 4);
	PUT(0, 8);                      /* offset */
#undef PUT
	k = (k + 31) / 32 * 32;
	memcpy(file + k, q8->data, 68);
	k += 68;
	/* ggml's values of the first two blocks of the q8_0 tensor's first row */
	memcpy(want, ref, sizeof(want));
	fd = mkstemp(out);
	PD_CHECK(fd >= 0 && write(fd, file, k) == (ssize_t)k && close(fd) == 0, "writing %s", out);
	PD_CHECK(pd_st_open(&st, out) == 0, "%s: %s", out, pd_last_error());
	if (st) {
		const struct pd_st_tensor *t = pd_st_get(st, "v");

		pd_poison(got, 64);
		PD_CHECK(t && t->ndim == 1 && pd_st_read_f32(t, 0, 64, got) == 0 && !memcmp(got, want, sizeof(got)),
			 "a 1-D Q8_0 tensor reads other values than its blocks decode to");
		pd_poison(got, 64);
		PD_CHECK(t && pd_st_read_f32(t, 37, 20, got) == 0 && !memcmp(got, want + 37, 20 * sizeof(float)),
			 "a 1-D Q8_0 tensor's elements 37..56 are not its own");
	}
	pd_st_close(st);
	pd_st_close(vals);
	free(ref);
	pd_gguf_close(g);
	unlink(out);
}

/* The bf16 rounding the kernels promise, written out here. */
static uint16_t bf16_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* The straight-to-bf16 decoder of fp8 e4m3fn against the float32 decoder
 * rounded: every code, in a fresh order, with a tail shorter than a vector;
 * the types without such a decoder say so. */
static void check_bf16_decoders(void)
{
	const int64_t n = 256 * 4 + 7;
	uint8_t *codes = malloc((size_t)n);
	float *f = malloc((size_t)n * sizeof(float));
	uint16_t *got = malloc((size_t)n * sizeof(uint16_t));
	const char *given = getenv("PDIT_TEST_SEED");
	unsigned seed = given ? (unsigned)strtoul(given, NULL, 10) : (unsigned)time(NULL);
	int bad = 0;

	if (pd_quant_decode_bf16_avx512(PD_Q_F8_E4M3, NULL, NULL, 0) != 0) {
		printf("  (no AVX-512 here: the bf16 decoder is not checked)\n");
		goto out;
	}
	PD_CHECK(pd_quant_decode_bf16_avx512(PD_Q_Q8_0, NULL, NULL, 0) == -1 &&
			 pd_quant_decode_bf16_avx512(PD_Q_F8_E5M2, NULL, NULL, 0) == -1,
		 "a bf16 decoder claimed for Q8_0 or e5m2");
	printf("  fp8 decoder: seed %u (PDIT_TEST_SEED to repeat)\n", seed);
	srand(seed);
	/* the tail (scalar): both NaNs, -0, subnormals, the largest, one fresh */
	static const uint8_t tail[7] = { 0x7f, 0xff, 0x80, 0x01, 0x87, 0x7e, 0 };

	for (int64_t i = 0; i < n; i++)
		codes[i] = (uint8_t)(i < 256 * 4 ? i % 256 : i < n - 1 ? tail[i - 256 * 4] : rand());
	for (int64_t i = 0; i < 256 * 4; i++) {
		int64_t j = rand() % (256 * 4);
		uint8_t c = codes[i];

		codes[i] = codes[j];
		codes[j] = c;
	}
	pd_quant_decode(PD_Q_F8_E4M3, codes, f, n);
	memset(got, 0xA5, (size_t)n * sizeof(uint16_t));
	PD_CHECK(pd_quant_decode_bf16_avx512(PD_Q_F8_E4M3, codes, got, n) == 0, "no bf16 decoder for fp8");
	for (int64_t i = 0; i < n; i++)
		bad += got[i] != bf16_of(f[i]);
	PD_CHECK(bad == 0, "fp8 e4m3 to bf16: %d of %lld values differ (seed %u)", bad, (long long)n, seed);
out:
	free(codes);
	free(f);
	free(got);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/quant-tiny";
	char mpath[512], *text = NULL;
	size_t len;
	cJSON *man = NULL;
	const cJSON *layout;

	snprintf(mpath, sizeof(mpath), "%s/manifest.json", dir);
	PD_CHECK(pd_read_file(mpath, 1 << 24, &text, &len) == 0 && (man = cJSON_Parse(text)), "%s", mpath);
	layout = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "types"), "gguf");
	PD_CHECK(cJSON_IsObject(layout), "manifest: no types.gguf");
	if (layout) {
		check_types_file(dir, "ggml-types.gguf", layout);
		/* the same tensors at other offsets: only the layout check differs */
	}
	{
		char path[512], vpath[512];
		struct pd_gguf *a = NULL, *b = NULL;

		snprintf(path, sizeof(path), "%s/types/ggml-types.gguf", dir);
		snprintf(vpath, sizeof(vpath), "%s/types/ggml-types-align64.gguf", dir);
		PD_CHECK(pd_gguf_open(&a, path) == 0 && pd_gguf_open(&b, vpath) == 0, "%s", pd_last_error());
		for (int64_t i = 0; a && b && i < a->n_tensors; i++) {
			const struct pd_gguf_tensor *t = pd_gguf_get(b, a->tensors[i].name);

			PD_CHECK(t && t->nbytes == a->tensors[i].nbytes && t->offset % 64 == 0 &&
					 memcmp(t->data, a->tensors[i].data, t->nbytes) == 0,
				 "align64: %s differs", a->tensors[i].name);
		}
		pd_gguf_close(a);
		pd_gguf_close(b);
	}
	check_pairs(dir);
	check_fp8(dir);
	check_bf16_decoders();
	check_fp8_broken(dir);
	check_flux_files(dir);
	check_1d_blocks(dir);
	check_folder(dir, "broken", 0);
	check_folder(dir, "edge", 1);
	cJSON_Delete(man);
	free(text);
	return pd_test_report();
}
