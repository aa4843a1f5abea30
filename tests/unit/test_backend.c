/*
 * test_backend.c - the conformance suite for any backend: every operation of
 * struct pd_backend_ops against the CPU backend, through alloc, upload and
 * download only (never a host pointer into the backend's memory), on fresh
 * random inputs of random shapes (odd sizes, row strides wider than the
 * rows, column ranges of wider buffers), outputs poisoned with NaN first,
 * in f32 and bf16 products.
 *
 * usage: test_backend [BACKEND...]   (default: staged; "cuda" on a GPU)
 *
 * Tolerances are max |x - ref| / max |ref| per operation:
 *  - exact operations (copies, fill, upsampling, transposes): 0;
 *  - elementwise and normalisations: 2e-6 (a device's expf, rsqrtf and
 *    summation order move results by a few ulps);
 *  - f32 products, attention and convolutions: 2e-5 (another summation
 *    order over up to a few hundred terms; TF32 must be off);
 *  - bf16 products and attention: 1e-2 (both round their inputs to bf16;
 *    the CPU also rounds attention's probabilities to bf16 on some paths).
 * Layers with an adapter beside them are checked against a double-precision
 * reference of their formula instead, with the products' tolerance.
 */
#include "pd_backend.h"
#include "pd_backend_new.h"
#include "pd_comm_impl.h"
#include "pd_quant.h"
#include "pd_rng.h"
#include "pd_test.h"
#include "pd_test_crash.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOL_EXACT 0.0
#define TOL_ELEM 2e-6
#define TOL_F32 2e-5
#define TOL_BF16 1e-2

static struct pd_rng rng;
static const char *be_name;

/* B[0] is the CPU reference, B[1] the backend under test. */
static struct pd_backend *B[2];

static int rnd(int lo, int hi)
{
	return lo + (int)(pd_rng_u32(&rng) % (uint32_t)(hi - lo + 1));
}

static float *host_randn(size_t n, float scale)
{
	float *h = malloc((n ? n : 1) * sizeof(float));

	pd_rng_randn(&rng, h, n);
	for (size_t i = 0; i < n; i++)
		h[i] *= scale;
	return h;
}

/* A buffer of N floats on backend K holding H (NULL: NaN everywhere). */
static float *dev(int k, const float *h, size_t n)
{
	float *d = pd_backend_alloc(B[k], n ? n : 1, "test");
	float *tmp = NULL;

	if (!d)
		return NULL;
	if (!h) {
		tmp = malloc((n ? n : 1) * sizeof(float));
		pd_poison(tmp, n);
		h = tmp;
	}
	B[k]->ops->upload(B[k], d, h, n);
	free(tmp);
	return d;
}

static float *host_of(int k, const float *d, size_t n)
{
	float *h = malloc((n ? n : 1) * sizeof(float));

	B[k]->ops->download(B[k], h, d, n);
	return h;
}

/* Compares backend 1's N floats at D1 with the reference's at D0. */
static void compare(const char *what, const float *d0, const float *d1, size_t n, double tol)
{
	float *r = host_of(0, d0, n), *x = host_of(1, d1, n);
	double e = pd_rel_err(x, r, n);

	PD_CHECK(!pd_backend_check(B[0]) && !pd_backend_check(B[1]), "%s on %s: backend failed: %s", what, be_name,
		 B[1]->failed ? B[1]->error : B[0]->error);
	PD_CHECK(e <= tol, "%s on %s: error %.3g above %.1g", what, be_name, e, tol);
	free(r);
	free(x);
}

/* Compares the [rows, cols] region of row stride LD; the columns past COLS
 * must be as they were (poisoned: NaN on both). */
static void compare_rows(const char *what, const float *d0, const float *d1, int64_t rows, int64_t cols, int64_t ld,
			 double tol)
{
	size_t n = (size_t)(rows * ld);
	float *r = host_of(0, d0, n), *x = host_of(1, d1, n);
	float *rr = malloc(n * sizeof(float)), *xx = malloc(n * sizeof(float));
	int pad_kept = 1;

	for (int64_t i = 0; i < rows; i++) {
		memcpy(rr + i * cols, r + i * ld, (size_t)cols * sizeof(float));
		memcpy(xx + i * cols, x + i * ld, (size_t)cols * sizeof(float));
		for (int64_t j = cols; j < ld; j++)
			pad_kept &= isnan(x[i * ld + j]);
	}
	PD_CHECK(!pd_backend_check(B[0]) && !pd_backend_check(B[1]), "%s on %s: backend failed: %s", what, be_name,
		 B[1]->failed ? B[1]->error : B[0]->error);
	PD_CHECK(pad_kept, "%s on %s: wrote past its columns", what, be_name);
	{
		double e = pd_rel_err(xx, rr, (size_t)(rows * cols));

		PD_CHECK(e <= tol, "%s on %s: error %.3g above %.1g", what, be_name, e, tol);
	}
	free(r), free(x), free(rr), free(xx);
}

/* Inputs: the same host data on both backends. */
struct pair {
	float *d[2];
};

static struct pair both(const float *h, size_t n)
{
	struct pair p = { { dev(0, h, n), dev(1, h, n) } };

	return p;
}

static struct pair both_randn(size_t n, float scale)
{
	float *h = host_randn(n, scale);
	struct pair p = both(h, n);

	free(h);
	return p;
}

static void release(struct pair *p)
{
	for (int k = 0; k < 2; k++)
		pd_backend_release(B[k], p->d[k]);
}

static double tol_products(void)
{
	return B[1]->compute == PD_BF16 ? TOL_BF16 : TOL_F32;
}

static void test_copy2d(void)
{
	int64_t rows = rnd(1, 37), cols = rnd(1, 70), lds = cols + rnd(0, 9), ldd = cols + rnd(0, 9);
	struct pair x = both_randn((size_t)(rows * lds), 1), y = both(NULL, (size_t)(rows * ldd));

	for (int k = 0; k < 2; k++) {
		B[k]->ops->fill(B[k], y.d[k], 0.5f, (size_t)(rows * ldd));
		B[k]->ops->copy2d(B[k], y.d[k], ldd, x.d[k], lds, rows, cols);
	}
	compare("copy2d", y.d[0], y.d[1], (size_t)(rows * ldd), TOL_EXACT);
	release(&x);
	release(&y);
}

static void test_elementwise(void)
{
	size_t n = (size_t)rnd(1, 5000);
	struct pair a = both_randn(n, 3), b = both_randn(n, 3), y = both(NULL, n);
	const char *names[] = { "fill", "silu", "quick_gelu", "mul", "add", "sub" };

	for (int op = 0; op < 6; op++) {
		for (int k = 0; k < 2; k++) {
			struct pd_backend *be = B[k];

			switch (op) {
			case 0: be->ops->fill(be, y.d[k], -1.25f, n); break;
			case 1: be->ops->silu(be, y.d[k], a.d[k], n); break;
			case 2: be->ops->quick_gelu(be, y.d[k], a.d[k], n); break;
			case 3: be->ops->mul(be, y.d[k], a.d[k], b.d[k], n); break;
			case 4: be->ops->add(be, y.d[k], a.d[k], b.d[k], n); break;
			default: be->ops->sub(be, y.d[k], a.d[k], b.d[k], n); break;
			}
		}
		compare(names[op], y.d[0], y.d[1], n, op == 0 ? TOL_EXACT : TOL_ELEM);
	}
	/* in place */
	for (int k = 0; k < 2; k++)
		B[k]->ops->silu(B[k], a.d[k], a.d[k], n);
	compare("silu in place", a.d[0], a.d[1], n, TOL_ELEM);
	release(&a);
	release(&b);
	release(&y);
}

/* The block formats a layer keeps, and where a block's f16 scales sit
 * (-1: none) */
static const struct {
	enum pd_qtype t;                /* the format */
	int half[2];                    /* byte offsets of its f16 fields */
} qtypes[] = {
	{ PD_Q_Q8_0, { 0, -1 } },   { PD_Q_Q4_0, { 0, -1 } },   { PD_Q_Q4_1, { 0, 2 } },
	{ PD_Q_Q5_0, { 0, -1 } },   { PD_Q_Q5_1, { 0, 2 } },    { PD_Q_Q2_K, { 80, 82 } },
	{ PD_Q_Q3_K, { 108, -1 } }, { PD_Q_Q4_K, { 0, 2 } },    { PD_Q_Q5_K, { 0, 2 } },
	{ PD_Q_Q6_K, { 208, -1 } }, { PD_Q_F8_E4M3, { -1, -1 } }, { PD_Q_F8_E5M2, { -1, -1 } },
};
#define N_QTYPES ((int)(sizeof(qtypes) / sizeof(qtypes[0])))

/* N_OUT rows of N_IN elements of qtypes[K] from random bytes: every bit
 * pattern of the quants and packed sub-block scales, the f16 scales finite
 * (about 0.02), no fp8 NaN or infinity. */
static uint8_t *random_blocks(int k, int64_t n_out, int64_t n_in)
{
	const struct pd_qtype_info *qi = pd_quant_info(qtypes[k].t);
	size_t n = pd_quant_row_bytes(qi, n_in) * (size_t)n_out;
	uint8_t *b = malloc(n);

	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)pd_rng_u32(&rng);
	for (size_t i = 0; i < n; i++) {
		if (qtypes[k].t == PD_Q_F8_E4M3 && (b[i] & 0x7F) == 0x7F)
			b[i] &= 0xFE;
		else if (qtypes[k].t == PD_Q_F8_E5M2 && (b[i] & 0x7C) == 0x7C)
			b[i] &= 0x83;
	}
	for (size_t at = 0; at < n; at += (size_t)qi->block_bytes)
		for (int h = 0; h < 2; h++)
			if (qtypes[k].half[h] >= 0) {
				float v;
				uint16_t f;

				pd_rng_randn(&rng, &v, 1);
				f = pd_f32_to_f16(v * 0.02f);
				b[at + (size_t)qtypes[k].half[h]] = (uint8_t)f;
				b[at + (size_t)qtypes[k].half[h] + 1] = (uint8_t)(f >> 8);
			}
	return b;
}

/* A kept layer of qtypes[K] times the identity (no bias): its weights as
 * the backend expands them, which must be pd_quant_decode's values times
 * the scale, exactly (bf16 products: rounded to bf16, to nearest even). A
 * slip in a format's bit layout moves whole sub-blocks of values. */
static void test_linear_blocks(int k)
{
	const struct pd_qtype_info *qi = pd_quant_info(qtypes[k].t);
	int64_t n_in = qi->block_size * rnd(1, qi->block_size == 1 ? 300 : qi->block_size == 32 ? 12 : 3);
	int64_t n_out = rnd(1, 24), rows = n_in, ldx = n_in + rnd(0, 3), ldy = n_out + rnd(0, 5);
	float scale = qi->block_size == 1 && rnd(0, 1) ? 0.5f + (float)rnd(0, 1000) / 1000.0f : 1.0f;
	uint8_t *blocks = random_blocks(k, n_out, n_in);
	size_t rb = pd_quant_row_bytes(qi, n_in);
	float *xh = calloc((size_t)(rows * ldx), sizeof(float)), *w = malloc((size_t)n_in * sizeof(float));
	float *ref = calloc((size_t)(rows * ldy), sizeof(float)), *x = NULL, *y = NULL, *r = NULL;
	struct pd_linear *l = NULL;
	char what[160];

	snprintf(what, sizeof(what), "%s weights %lldx%lld expanded%s", qi->name, (long long)n_out, (long long)n_in,
		 scale != 1.0f ? ", scaled" : "");
	if (!B[1]->ops->linear_new_q || (B[1]->ops->keeps_q && !B[1]->ops->keeps_q(B[1], qtypes[k].t))) {
		printf("  (%s keeps no %s weights: skipped)\n", be_name, qi->name);
		goto out;
	}
	for (int64_t i = 0; i < rows; i++)
		xh[i * ldx + i] = 1.0f;
	for (int64_t o = 0; o < n_out; o++) {
		pd_quant_decode(qtypes[k].t, blocks + (size_t)o * rb, w, n_in);
		for (int64_t i = 0; i < n_in; i++) {
			float v = w[i] * scale;

			ref[i * ldy + o] = B[1]->compute == PD_BF16 ? pd_bf16_to_f32(pd_f32_to_bf16(v)) : v;
		}
	}
	l = B[1]->ops->linear_new_q(B[1], n_out, n_in, qtypes[k].t, scale, blocks, NULL);
	PD_CHECK(l != NULL, "%s: linear_new_q on %s: %s", what, be_name, B[1]->error);
	if (!l)
		goto out;
	x = dev(1, xh, (size_t)(rows * ldx));
	y = dev(1, NULL, (size_t)(rows * ldy));
	r = dev(0, ref, (size_t)(rows * ldy));
	B[1]->ops->linear(B[1], l, x, ldx, rows, y, ldy, 0);
	compare_rows(what, r, y, rows, n_out, ldy, TOL_EXACT);
	B[1]->ops->linear_free(B[1], l);
out:
	pd_backend_release(B[1], x);
	pd_backend_release(B[1], y);
	pd_backend_release(B[0], r);
	free(blocks);
	free(xh);
	free(w);
	free(ref);
}

static void test_linear(enum pd_dtype wt, int flags, int quant)
{
	int64_t n_in = rnd(1, 300), n_out = rnd(1, 200), rows = rnd(1, 90);
	int64_t ldw = n_in + rnd(0, 5), ldx = n_in + rnd(0, 7), ldy = n_out + rnd(0, 7);
	/* the output may start anywhere in its buffer, as a column slice does
	 * (a product may not assume the allocation's alignment) */
	const int64_t yo = rnd(0, 1) ? rnd(1, 67) : 0;
	float *w = host_randn((size_t)(n_out * ldw), 0.1f), *bias = host_randn((size_t)n_out, 1);
	struct pair x = both_randn((size_t)(rows * ldx), 1), y = both_randn((size_t)(yo + rows * ldy), 1);
	struct pd_linear *l[2] = { NULL, NULL };
	void *blocks = NULL;
	uint16_t *wb = NULL;
	const void *wsrc = w;
	/* kept layers: any format, random blocks */
	const int qk = rnd(0, N_QTYPES - 1);
	const struct pd_qtype_info *qi = pd_quant_info(qtypes[qk].t);
	char what[160];

	if (quant) {
		/* whole blocks, packed rows */
		n_in = (n_in + qi->block_size - 1) / qi->block_size * qi->block_size;
		ldx = n_in + rnd(0, 3);
		release(&x);
		x = both_randn((size_t)(rows * ldx), 1);
		blocks = random_blocks(qk, n_out, n_in);
	} else if (wt == PD_BF16) {
		wb = malloc((size_t)(n_out * ldw) * sizeof(uint16_t));
		for (int64_t i = 0; i < n_out * ldw; i++)
			wb[i] = pd_f32_to_bf16(w[i]);
		wsrc = wb;
	}
	for (int k = 0; k < 2; k++) {
		l[k] = quant ? B[k]->ops->linear_new_q ? B[k]->ops->linear_new_q(B[k], n_out, n_in, qtypes[qk].t, 1.0f, blocks,
										 flags & PD_LIN_NO_BIAS ? NULL : bias)
						       : NULL
			     : B[k]->ops->linear_new(B[k], n_out, n_in, wsrc, wt, ldw, flags & PD_LIN_NO_BIAS ? NULL : bias);
		if (!l[k] && quant && k == 1) {
			printf("  (%s keeps no quantized weights: %s product skipped)\n", be_name, qi->name);
			goto out;
		}
		PD_CHECK(l[k] != NULL, "linear_new on %s", k ? be_name : "cpu");
		if (!l[k])
			goto out;
		B[k]->ops->linear(B[k], l[k], x.d[k], ldx, rows, y.d[k] + yo, ldy, flags);
	}
	snprintf(what, sizeof(what), "linear %lldx%lld, %lld rows, %s weights%s%s%s, output at +%lld",
		 (long long)n_out, (long long)n_in, (long long)rows, quant ? qi->name : pd_dtype_name(wt),
		 flags & PD_LIN_GELU_TANH ? ", GELU" : "", flags & PD_LIN_NO_BIAS ? ", no bias" : "",
		 flags & PD_LIN_ACCUMULATE ? ", accumulate" : "", (long long)yo);
	/* bf16 weights or activations: the products' tolerance */
	compare(what, y.d[0], y.d[1], (size_t)(yo + rows * ldy),
		wt == PD_BF16 || quant ? fmax(tol_products(), B[1]->compute == PD_BF16 ? TOL_BF16 : 1e-4) : tol_products());
out:
	for (int k = 0; k < 2; k++)
		if (l[k])
			B[k]->ops->linear_free(B[k], l[k]);
	release(&x);
	release(&y);
	free(w);
	free(wb);
	free(bias);
	free(blocks);
}

/* Layers reading one input (PD_LIN_SAME_INPUT, as q, k and v do): a backend
 * may reuse what it made of the input, but not after it made something of
 * another (a call on another input, an adapter's own products). The same
 * calls on both backends, each output against the CPU's. */
static void test_linear_same_input(void)
{
	int64_t n_in = rnd(1, 200), rows = rnd(1, 60), ldx = n_in + rnd(0, 5), rank = rnd(1, 9);
	struct pair x1 = both_randn((size_t)(rows * ldx), 1), x2 = both_randn((size_t)(rows * ldx), 1), y[5];
	/* the layer, what it reads, the flag; layer 3 has an adapter */
	const struct {
		int x, flags;
	} calls[5] = { { 1, 0 }, { 1, PD_LIN_SAME_INPUT }, { 2, PD_LIN_SAME_INPUT }, { 2, PD_LIN_SAME_INPUT },
		       { 2, PD_LIN_SAME_INPUT } };
	float *a = host_randn((size_t)(rank * n_in), 0.1f), *w[5], *bias[5];
	int64_t n_out[5];
	struct pd_linear *l[2][5] = { { NULL } };
	const char *said[5] = { "its first", "reused", "another input", "an adapter", "after the adapter" };
	char what[120];

	for (int i = 0; i < 5; i++) {
		n_out[i] = rnd(1, 100);
		w[i] = host_randn((size_t)(n_out[i] * n_in), 0.1f);
		bias[i] = host_randn((size_t)n_out[i], 1);
		y[i] = both_randn((size_t)(rows * n_out[i]), 1);
	}
	{
		float *b = host_randn((size_t)(n_out[3] * rank), 0.1f);

		for (int k = 0; k < 2; k++) {
			for (int i = 0; i < 5; i++) {
				l[k][i] = B[k]->ops->linear_new(B[k], n_out[i], n_in, w[i], PD_F32, n_in, bias[i]);
				PD_CHECK(l[k][i] != NULL, "linear_new on %s", k ? be_name : "cpu");
				if (!l[k][i])
					goto out_b;
			}
			PD_CHECK(!B[k]->ops->linear_adapt(B[k], l[k][3], rank, a, b), "linear_adapt on %s",
				 k ? be_name : "cpu");
			for (int i = 0; i < 5; i++)
				B[k]->ops->linear(B[k], l[k][i], calls[i].x == 1 ? x1.d[k] : x2.d[k], ldx, rows, y[i].d[k],
						  n_out[i], calls[i].flags);
		}
		for (int i = 0; i < 5; i++) {
			snprintf(what, sizeof(what), "linear %lldx%lld, %lld rows, call %d of 5 on one input (%s)",
				 (long long)n_out[i], (long long)n_in, (long long)rows, i + 1, said[i]);
			compare(what, y[i].d[0], y[i].d[1], (size_t)(rows * n_out[i]), tol_products());
		}
out_b:
		free(b);
	}
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 5; i++)
			if (l[k][i])
				B[k]->ops->linear_free(B[k], l[k][i]);
	for (int i = 0; i < 5; i++) {
		release(&y[i]);
		free(w[i]);
		free(bias[i]);
	}
	release(&x1);
	release(&x2);
	free(a);
}

static double gelu_tanh(double v)
{
	return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

/* A layer with a low-rank term beside it (linear_adapt: LoRA) against a
 * double-precision reference of act(x W^T + b + (x A^T) B^T (+ y)), not
 * against the CPU backend: its meaning, on whatever backend; then the term
 * replaced by one of another rank, then removed (rank 0). */
static void test_linear_adapter(int flags, int quant)
{
	const struct pd_qtype_info *qi = pd_quant_info(PD_Q_Q8_0);
	int64_t n_in = rnd(1, 300), n_out = rnd(1, 200), rows = rnd(1, 90), rank = rnd(1, 17);
	int64_t ldx, ldy = n_out + rnd(0, 7);
	float *w, *bias = host_randn((size_t)n_out, 1), *xh, *y0 = NULL, *a = NULL, *b = NULL;
	float *x = NULL, *y = NULL, *got = NULL;
	void *blocks = NULL;
	struct pd_linear *l = NULL;
	double *ref = NULL;
	char what[200];

	if (quant)
		n_in = (n_in + qi->block_size - 1) / qi->block_size * qi->block_size;
	ldx = n_in + rnd(0, 7);
	w = host_randn((size_t)(n_out * n_in), 0.1f);
	xh = host_randn((size_t)(rows * ldx), 1);
	if (quant) {
		size_t rb = pd_quant_row_bytes(qi, n_in);

		blocks = malloc(rb * (size_t)n_out);
		for (int64_t r = 0; r < n_out; r++) {
			pd_quant_encode(PD_Q_Q8_0, w + r * n_in, (char *)blocks + r * rb, n_in);
			/* the reference multiplies what the layer holds */
			pd_quant_decode(PD_Q_Q8_0, (char *)blocks + r * rb, w + r * n_in, n_in);
		}
		l = B[1]->ops->linear_new_q ? B[1]->ops->linear_new_q(B[1], n_out, n_in, PD_Q_Q8_0, 1.0f, blocks,
								       flags & PD_LIN_NO_BIAS ? NULL : bias)
					    : NULL;
		if (!l) {
			printf("  (%s keeps no quantized weights: q8_0 adapter skipped)\n", be_name);
			goto out;
		}
	} else {
		l = B[1]->ops->linear_new(B[1], n_out, n_in, w, PD_F32, n_in, flags & PD_LIN_NO_BIAS ? NULL : bias);
	}
	PD_CHECK(l != NULL, "linear_new on %s", be_name);
	if (!l)
		goto out;
	x = dev(1, xh, (size_t)(rows * ldx));
	if (flags & PD_LIN_ACCUMULATE)
		y0 = host_randn((size_t)(rows * ldy), 1);
	ref = malloc((size_t)(rows * n_out) * sizeof(double));
	got = malloc((size_t)(rows * ldy) * sizeof(float));
	for (int round = 0; round < 3; round++) {
		double err = 0, scale = 0;
		int pad_kept = 1;

		/* a term, another of another rank in its place, none */
		if (round == 1)
			rank = rnd(1, 17);
		if (round == 2)
			rank = 0;
		free(a);
		free(b);
		a = host_randn((size_t)((rank ? rank : 1) * n_in), 0.1f);
		b = host_randn((size_t)(n_out * (rank ? rank : 1)), 0.1f);
		PD_CHECK(!B[1]->ops->linear_adapt(B[1], l, rank, a, b), "linear_adapt rank %lld on %s", (long long)rank,
			 be_name);
		pd_backend_release(B[1], y);
		y = dev(1, y0, (size_t)(rows * ldy));
		B[1]->ops->linear(B[1], l, x, ldx, rows, y, ldy, flags);
		B[1]->ops->download(B[1], got, y, (size_t)(rows * ldy));
		for (int64_t i = 0; i < rows; i++) {
			const float *xi = xh + i * ldx;
			double t[17];

			for (int64_t k = 0; k < rank; k++) {
				t[k] = 0;
				for (int64_t c = 0; c < n_in; c++)
					t[k] += (double)xi[c] * a[k * n_in + c];
			}
			for (int64_t j = 0; j < n_out; j++) {
				double v = flags & PD_LIN_NO_BIAS ? 0 : bias[j];

				for (int64_t c = 0; c < n_in; c++)
					v += (double)xi[c] * w[j * n_in + c];
				for (int64_t k = 0; k < rank; k++)
					v += t[k] * b[j * rank + k];
				if (flags & PD_LIN_ACCUMULATE)
					v += y0[i * ldy + j];
				ref[i * n_out + j] = flags & PD_LIN_GELU_TANH ? gelu_tanh(v) : v;
				/* measured against the sum's size, not GELU's: GELU
				 * squeezes negative sums toward 0 but passes their
				 * error on with a slope up to 1.13 (a layer of one
				 * output whose 33 sums were all below 0.4 after it
				 * failed at 1.3e-2 with bf16's usual error) */
				scale = fmax(scale, fmax(fabs(v), fabs(ref[i * n_out + j])));
			}
			for (int64_t j = 0; j < ldy; j++)
				if (j < n_out)
					err = fmax(err, fabs(got[i * ldy + j] - ref[i * n_out + j]));
				else if (!(flags & PD_LIN_ACCUMULATE))
					pad_kept &= isnan(got[i * ldy + j]);
		}
		snprintf(what, sizeof(what), "linear %lldx%lld, %lld rows, %s, an adapter of rank %lld%s%s%s",
			 (long long)n_out, (long long)n_in, (long long)rows, quant ? "q8_0" : "f32", (long long)rank,
			 flags & PD_LIN_GELU_TANH ? ", GELU" : "", flags & PD_LIN_NO_BIAS ? ", no bias" : "",
			 flags & PD_LIN_ACCUMULATE ? ", accumulate" : "");
		PD_CHECK(!pd_backend_check(B[1]), "%s on %s: backend failed: %s", what, be_name, B[1]->error);
		PD_CHECK(pad_kept, "%s on %s: wrote past its columns", what, be_name);
		PD_CHECK(err <= tol_products() * fmax(scale, 1e-30), "%s on %s: error %.3g above %.1g", what, be_name,
			 err / fmax(scale, 1e-30), tol_products());
	}
out:
	if (l)
		B[1]->ops->linear_free(B[1], l);
	pd_backend_release(B[1], x);
	pd_backend_release(B[1], y);
	free(w), free(bias), free(xh), free(y0), free(a), free(b), free(got), free(ref), free(blocks);
}

static void test_conv(void)
{
	int k3 = rnd(0, 1) ? 3 : 1, c_in = rnd(1, 12), c_out = rnd(1, 12), h = rnd(1, 13), w = rnd(1, 17);
	int halo = k3 == 3 ? rnd(0, 1) : 0;
	float *wt = host_randn((size_t)(c_out * c_in * k3 * k3), 0.3f), *bias = host_randn((size_t)c_out, 1);
	size_t nx = (size_t)c_in * (size_t)(h + 2 * halo) * (size_t)w, ny = (size_t)c_out * h * w;
	struct pair x = both_randn(nx, 1), y = both(NULL, ny);
	struct pd_conv *cv[2];
	char what[96];

	for (int k = 0; k < 2; k++) {
		cv[k] = B[k]->ops->conv_new(B[k], c_out, c_in, k3, wt, bias);
		B[k]->ops->conv(B[k], cv[k], x.d[k], h, w, halo, y.d[k]);
	}
	snprintf(what, sizeof(what), "conv %dx%d %d->%d on %dx%d, halo %d", k3, k3, c_in, c_out, h, w, halo);
	compare(what, y.d[0], y.d[1], ny, B[1]->conv_compute == PD_BF16 ? TOL_BF16 : TOL_F32);
	for (int k = 0; k < 2; k++)
		if (cv[k])
			B[k]->ops->conv_free(B[k], cv[k]);
	release(&x);
	release(&y);
	free(wt);
	free(bias);
}

static void test_norms(void)
{
	int64_t rows = rnd(1, 40), heads = rnd(1, 4), hd = 2 * rnd(1, 24), dim = heads * hd;
	int64_t ldx = dim + rnd(0, 6), ldy = dim + rnd(0, 6);
	struct pair x = both_randn((size_t)(rows * ldx), 2), y = both(NULL, (size_t)(rows * ldy));
	struct pair sc = both_randn((size_t)dim, 0.5f), sh = both_randn((size_t)dim, 0.5f);
	struct pair wh = both_randn((size_t)hd, 1), sumsq = both(NULL, (size_t)rows);
	struct pair cs = both_randn((size_t)(rows * hd), 1), sn = both_randn((size_t)(rows * hd), 1);
	struct pair g = both_randn((size_t)dim, 1), z = both_randn((size_t)(rows * ldy), 1);

	for (int mod = 0; mod < 2; mod++) {
		for (int k = 0; k < 2; k++) {
			B[k]->ops->fill(B[k], y.d[k], 0, (size_t)(rows * ldy));
			B[k]->ops->layernorm_mod(B[k], y.d[k], ldy, x.d[k], ldx, rows, dim, mod ? sc.d[k] : NULL,
						 mod ? sh.d[k] : NULL, 1e-6f);
		}
		compare(mod ? "layernorm_mod" : "layernorm_mod, plain", y.d[0], y.d[1], (size_t)(rows * ldy), TOL_ELEM);
		for (int k = 0; k < 2; k++)
			B[k]->ops->layernorm(B[k], y.d[k], ldy, x.d[k], ldx, rows, dim, mod ? sc.d[k] : NULL,
					     mod ? sh.d[k] : NULL, 1e-5f);
		compare(mod ? "layernorm, affine" : "layernorm", y.d[0], y.d[1], (size_t)(rows * ldy), TOL_ELEM);
	}
	for (int k = 0; k < 2; k++) {
		B[k]->ops->copy2d(B[k], y.d[k], ldy, x.d[k], ldx, rows, dim);
		B[k]->ops->rmsnorm_heads(B[k], y.d[k], ldy, rows, (int)heads, (int)hd, wh.d[k], 1e-6f);
	}
	compare("rmsnorm_heads", y.d[0], y.d[1], (size_t)(rows * ldy), TOL_ELEM);
	for (int k = 0; k < 2; k++) {
		B[k]->ops->row_sumsq(B[k], sumsq.d[k], x.d[k], ldx, rows, dim);
		B[k]->ops->copy2d(B[k], y.d[k], ldy, x.d[k], ldx, rows, dim);
		B[k]->ops->rms_apply(B[k], y.d[k], ldy, rows, dim, sumsq.d[k], dim + 3, g.d[k], 1e-6f);
	}
	compare("row_sumsq", sumsq.d[0], sumsq.d[1], (size_t)rows, TOL_ELEM);
	compare("rms_apply", y.d[0], y.d[1], (size_t)(rows * ldy), TOL_ELEM);
	for (int k = 0; k < 2; k++) {
		B[k]->ops->copy2d(B[k], y.d[k], ldy, x.d[k], ldx, rows, dim);
		B[k]->ops->rope(B[k], y.d[k], ldy, rows, (int)heads, (int)hd, cs.d[k], sn.d[k]);
	}
	compare("rope", y.d[0], y.d[1], (size_t)(rows * ldy), TOL_ELEM);
	for (int k = 0; k < 2; k++)
		B[k]->ops->gated_add(B[k], z.d[k], ldy, x.d[k], ldx, rows, dim, g.d[k]);
	compare("gated_add", z.d[0], z.d[1], (size_t)(rows * ldy), TOL_ELEM);
	release(&x), release(&y), release(&sc), release(&sh), release(&wh), release(&sumsq);
	release(&cs), release(&sn), release(&g), release(&z);
}

static void test_attention(void)
{
	/* every other call the models' head sizes, which CUDA's bf16 path
	 * fuses (so a run of one bf16 round after an even number of f32 ones
	 * has one) */
	static int calls;
	int heads = rnd(1, 4), hd = calls++ % 2 == 0 ? (rnd(0, 1) ? 64 : 128) : rnd(1, 3) * 16 + (rnd(0, 3) == 0 ? 8 : 0);
	int64_t W = (int64_t)heads * hd, sq = rnd(1, 150), skv = rnd(1, 300), ld = W + rnd(0, 8) * 4;
	int64_t ldo = W + rnd(0, 3);
	float scale = 1.0f / sqrtf((float)hd);
	struct pair q = both_randn((size_t)(sq * ld), 1), kk = both_randn((size_t)(skv * ld), 1);
	struct pair v = both_randn((size_t)(skv * ld), 1), o = both(NULL, (size_t)(sq * ldo));
	struct pair lse = both(NULL, (size_t)(heads * sq)), part = both(NULL, (size_t)(sq * W));
	struct pair plse = both(NULL, (size_t)(heads * sq));
	char what[96];

	for (int k = 0; k < 2; k++)
		B[k]->ops->attention(B[k], o.d[k], ldo, lse.d[k], q.d[k], ld, kk.d[k], ld, v.d[k], ld, sq, skv, heads, hd,
				     scale);
	snprintf(what, sizeof(what), "attention %lld x %lld keys, %d heads of %d", (long long)sq, (long long)skv, heads,
		 hd);
	compare_rows(what, o.d[0], o.d[1], sq, W, ldo, B[1]->compute == PD_BF16 ? TOL_BF16 : TOL_F32);
	compare("attention's log-sum-exp", lse.d[0], lse.d[1], (size_t)(heads * sq), TOL_F32 * 10);
	/* ring attention's merge with a second key set (the same keys again) */
	for (int k = 0; k < 2; k++) {
		B[k]->ops->attention(B[k], part.d[k], W, plse.d[k], q.d[k], ld, v.d[k], ld, kk.d[k], ld, sq, skv, heads, hd,
				     scale);
		B[k]->ops->lse_merge(B[k], o.d[k], ldo, lse.d[k], part.d[k], W, plse.d[k], sq, heads, hd);
	}
	compare_rows("lse_merge", o.d[0], o.d[1], sq, W, ldo, B[1]->compute == PD_BF16 ? TOL_BF16 : TOL_F32);
	compare("lse_merge's log-sum-exp", lse.d[0], lse.d[1], (size_t)(heads * sq), TOL_F32 * 10);
	/* an empty key set (-inf) merges as nothing */
	{
		float *h = malloc((size_t)(heads * sq) * sizeof(float));

		for (int64_t i = 0; i < heads * sq; i++)
			h[i] = -INFINITY;
		for (int k = 0; k < 2; k++) {
			B[k]->ops->upload(B[k], plse.d[k], h, (size_t)(heads * sq));
			B[k]->ops->lse_merge(B[k], o.d[k], ldo, lse.d[k], part.d[k], W, plse.d[k], sq, heads, hd);
		}
		compare_rows("lse_merge with an empty part", o.d[0], o.d[1], sq, W, ldo,
			     B[1]->compute == PD_BF16 ? TOL_BF16 : TOL_F32);
		free(h);
	}
	release(&q), release(&kk), release(&v), release(&o), release(&lse), release(&part), release(&plse);
}

static void test_attention_masked(void)
{
	int heads = rnd(1, 4), hd = rnd(2, 40), causal = rnd(0, 1), with_bias = rnd(0, 1);
	int64_t W = (int64_t)heads * hd, s = rnd(1, 77), ld = W + rnd(0, 5);
	struct pair q = both_randn((size_t)(s * ld), 1), kk = both_randn((size_t)(s * ld), 1);
	struct pair v = both_randn((size_t)(s * ld), 1), o = both(NULL, (size_t)(s * W));
	struct pair bias = both_randn((size_t)(heads * s * s), 2);
	char what[96];

	for (int k = 0; k < 2; k++)
		B[k]->ops->attention_masked(B[k], o.d[k], W, q.d[k], ld, kk.d[k], ld, v.d[k], ld, s, heads, hd, 0.3f,
					    with_bias ? bias.d[k] : NULL, causal);
	snprintf(what, sizeof(what), "attention_masked s %lld, %d heads of %d%s%s", (long long)s, heads, hd,
		 causal ? ", causal" : "", with_bias ? ", bias" : "");
	compare(what, o.d[0], o.d[1], (size_t)(s * W), B[1]->compute == PD_BF16 ? TOL_BF16 : TOL_F32);
	release(&q), release(&kk), release(&v), release(&o), release(&bias);
}

static void test_vae_ops(void)
{
	int groups = rnd(1, 4), c = groups * rnd(1, 5), h = rnd(1, 11), w = rnd(1, 13), silu = rnd(0, 1);
	int64_t hw = (int64_t)h * w, cs = hw + rnd(0, 2) * w;
	struct pair x = both_randn((size_t)(c * hw), 2), y = both(NULL, (size_t)(c * cs));
	struct pair st = both(NULL, (size_t)(4 * groups)), gm = both_randn((size_t)c, 1), bt = both_randn((size_t)c, 1);
	struct pair up = both(NULL, (size_t)c * (size_t)(4 * hw + 3)), tr = both(NULL, (size_t)(c * hw));
	double *s[2];

	for (int k = 0; k < 2; k++) {
		B[k]->ops->fill(B[k], y.d[k], 0, (size_t)(c * cs));
		B[k]->ops->group_stats(B[k], x.d[k], c, hw, groups, (double *)st.d[k]);
		B[k]->ops->group_apply(B[k], y.d[k], cs, x.d[k], c, hw, groups, (const double *)st.d[k],
				       (double)(c / groups) * hw, gm.d[k], bt.d[k], 1e-6f, silu);
	}
	/* the statistics are doubles: compared as such */
	for (int k = 0; k < 2; k++) {
		s[k] = malloc((size_t)(2 * groups) * sizeof(double));
		B[k]->ops->download(B[k], (float *)s[k], st.d[k], (size_t)(4 * groups));
	}
	{
		double e = 0, m = 0;

		for (int i = 0; i < 2 * groups; i++) {
			e = fmax(e, fabs(s[1][i] - s[0][i]));
			m = fmax(m, fabs(s[0][i]));
		}
		PD_CHECK(e <= 1e-9 * fmax(m, 1), "group_stats on %s: error %.3g of %.3g", be_name, e, m);
	}
	free(s[0]);
	free(s[1]);
	compare(silu ? "group_apply + SiLU" : "group_apply", y.d[0], y.d[1], (size_t)(c * cs), TOL_ELEM);
	for (int k = 0; k < 2; k++)
		B[k]->ops->rms_channels(B[k], y.d[k], x.d[k], c, hw, gm.d[k], silu);
	compare("rms_channels", y.d[0], y.d[1], (size_t)(c * hw), TOL_ELEM);
	for (int k = 0; k < 2; k++) {
		B[k]->ops->fill(B[k], up.d[k], 7, (size_t)c * (size_t)(4 * hw + 3));
		B[k]->ops->upsample2x(B[k], up.d[k], 4 * hw + 3, x.d[k], c, h, w);
		B[k]->ops->transpose(B[k], tr.d[k], x.d[k], c, hw);
	}
	compare("upsample2x", up.d[0], up.d[1], (size_t)c * (size_t)(4 * hw + 3), TOL_EXACT);
	compare("transpose", tr.d[0], tr.d[1], (size_t)(c * hw), TOL_EXACT);
	release(&x), release(&y), release(&st), release(&gm), release(&bt), release(&up), release(&tr);
}

/* A communicator over the backend's buffers (one process: every
 * collective is a copy), each operation against the data it must move. */
static void test_comm(struct pd_comm *c, const char *what)
{
	size_t n = (size_t)rnd(1, 3000), bytes = n * sizeof(float);
	float *h = host_randn(n, 1), *got;
	float *a = dev(1, h, n), *b = dev(1, NULL, n);
	struct pd_comm_req r1 = { .active = 0 }, r2 = { .active = 0 };
	const char *names[] = { "allreduce", "allgatherv", "alltoallv", "gatherv", "bcast", "isend/irecv",
				"iallgatherv" };

	for (int op = 0; op < 7; op++) {
		int rc = 0;

		B[1]->ops->fill(B[1], b, NAN, n);
		switch (op) {
		case 0:
			B[1]->ops->copy2d(B[1], b, (int64_t)n, a, (int64_t)n, 1, (int64_t)n);
			rc = c->ops->allreduce(c, b, n, PD_COMM_F32, PD_COMM_SUM);
			break;
		case 1: rc = c->ops->allgatherv(c, a, bytes, b, &bytes); break;
		case 2: rc = c->ops->alltoallv(c, a, &bytes, b, &bytes); break;
		case 3: rc = c->ops->gatherv(c, a, bytes, b, &bytes, 0); break;
		case 4:
			B[1]->ops->copy2d(B[1], b, (int64_t)n, a, (int64_t)n, 1, (int64_t)n);
			rc = c->ops->bcast(c, b, bytes, 0);
			break;
		case 5:
			rc = c->ops->isend(c, a, bytes, 0, 5, &r1) || c->ops->irecv(c, b, bytes, 0, 5, &r2) ||
			     c->ops->wait(c, &r1) || c->ops->wait(c, &r2);
			break;
		default:
			rc = c->ops->iallgatherv(c, a, bytes, b, &bytes, &r1) || c->ops->wait(c, &r1);
			break;
		}
		got = host_of(1, b, n);
		PD_CHECK(!rc && pd_max_abs_err(got, h, n) == 0, "%s communicator on %s: %s of %zu floats: %s", what,
			 be_name, names[op], n, rc ? pd_last_error() : "wrong data");
		free(got);
	}
	pd_backend_release(B[1], a);
	pd_backend_release(B[1], b);
	free(h);
}

/* Whether BE is the CUDA backend on tests/emu's emulation (its device's
 * name says so): no NCCL, no timing. */
static int emulated(const struct pd_backend *be)
{
	return strstr(be->device, "emulation") != NULL;
}

static void test_comms(void)
{
	struct pd_comm *self = NULL, *c = NULL;

	if (B[1]->host_memory || pd_comm_self_new(&self))
		return;
	if (!pd_comm_staged_new(self, B[1], &c)) {
		test_comm(c, "staged");
		c->ops->free(c);
	}
	/* NCCL needs a GPU, which the emulation is not */
	if (B[1]->queue && pd_comm_nccl_available() && !emulated(B[1])) {
		if (pd_comm_nccl_new(self, B[1]->queue, &c))
			PD_CHECK(0, "NCCL on %s: %s", be_name, pd_last_error());
		else {
			test_comm(c, "NCCL");
			c->ops->free(c);
		}
	}
	self->ops->free(self);
}

/* A failure is sticky and reported: an allocation far beyond any memory. */
static void test_sticky(void)
{
	float *p = B[1]->ops->alloc(B[1], (size_t)1 << 60);

	PD_CHECK(p == NULL, "%s allocated 4 EiB", be_name);
	if (p)
		B[1]->ops->free(B[1], p);
	PD_CHECK(pd_backend_alloc(B[1], (size_t)1 << 60, "a test") == NULL && B[1]->failed,
		 "%s: a failed allocation is recorded", be_name);
	pd_backend_recover(B[1]);
	p = pd_backend_alloc(B[1], 16, "a test");
	PD_CHECK(p != NULL && !B[1]->failed, "%s recovers after a failure", be_name);
	pd_backend_release(B[1], p);
}

/* A bf16 CUDA backend made with the switch SW set to VAL (a switch is read
 * when a backend is made; the caller unsets it); nonzero, checked, when it
 * cannot be made. */
static int cuda_with(const char *sw, const char *val, struct pd_backend **b)
{
	struct pd_backend_config cfg = { PD_BF16, 0, -1, 0, PD_QP_DECODE };

	setenv(sw, val, 1);
	if (pd_backend_new(b, "cuda", &cfg)) {
		PD_CHECK(0, "a second CUDA backend with %s=%s: %s", sw, val, pd_last_error());
		return -1;
	}
	return 0;
}

/* Two of them, SW off in FB[0] and on in FB[1]. */
static int cuda_pair(const char *sw, struct pd_backend *fb[2])
{
	return cuda_with(sw, "0", &fb[0]) || cuda_with(sw, "1", &fb[1]);
}

/* Attention on backend B of SQ queries over SKV keys (HEADS of HD, packed
 * rows) from host Q, K, V into host OUT; nonzero, checked, on a failure. */
static int attention_on(struct pd_backend *b, const float *q, const float *k, const float *v, float *out, int64_t sq,
			int64_t skv, int heads, int hd)
{
	const int64_t W = (int64_t)heads * hd;
	float *d[4] = { pd_backend_alloc(b, (size_t)(sq * W), "attention"), pd_backend_alloc(b, (size_t)(skv * W), "attention"),
			pd_backend_alloc(b, (size_t)(skv * W), "attention"), pd_backend_alloc(b, (size_t)(sq * W), "attention") };
	int rc = -1;

	if (d[0] && d[1] && d[2] && d[3]) {
		b->ops->upload(b, d[0], q, (size_t)(sq * W));
		b->ops->upload(b, d[1], k, (size_t)(skv * W));
		b->ops->upload(b, d[2], v, (size_t)(skv * W));
		b->ops->attention(b, d[3], W, NULL, d[0], W, d[1], W, d[2], W, sq, skv, heads, hd, 1.0f / sqrtf((float)hd));
		b->ops->download(b, out, d[3], (size_t)(sq * W));
		rc = pd_backend_check(b);
	}
	PD_CHECK(rc == 0, "attention of %lld x %lld on %s: %s", (long long)sq, (long long)skv, b->device, b->error);
	for (int i = 0; i < 4; i++)
		if (d[i])
			pd_backend_release(b, d[i]);
	return rc;
}

/* The fused kernels FB[0] and FB[1] against the chunked path FB[2] on shapes
 * whose query and key tiles are partial, with scores spread wide (q and k
 * of deviation 2: each output leans on few keys, so a wrong tile shows
 * instead of averaging away); the first shape, minutes on the emulation,
 * only on a GPU (BIG). */
static void check_attention_rows(struct pd_backend *fb[3], int big)
{
	static const struct {
		int64_t sq, skv;
		int heads, hd;
	} cases[] = { { 1000, 777, 3, 128 }, { 130, 64, 2, 64 }, { 77, 200, 1, 64 } };

	for (size_t c = big ? 0 : 1; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const int64_t W = (int64_t)cases[c].heads * cases[c].hd, sq = cases[c].sq, skv = cases[c].skv;
		float *q = host_randn((size_t)(sq * W), 2), *k = host_randn((size_t)(skv * W), 2),
		      *v = host_randn((size_t)(skv * W), 1), *o[3];

		for (int b = 0; b < 3; b++)
			o[b] = malloc((size_t)(sq * W) * sizeof(float));
		if (!attention_on(fb[2], q, k, v, o[2], sq, skv, cases[c].heads, cases[c].hd))
			for (int b = 0; b < 2; b++)
				if (!attention_on(fb[b], q, k, v, o[b], sq, skv, cases[c].heads, cases[c].hd)) {
					double e = pd_rel_err(o[b], o[2], (size_t)(sq * W));

					PD_CHECK(e <= TOL_BF16,
						 "fused attention by %d rows, %lld x %lld, heads of %d, against chunked: %.3g above %.1g",
						 b ? 128 : 64, (long long)sq, (long long)skv, cases[c].hd, e, TOL_BF16);
				}
		for (int b = 0; b < 3; b++)
			free(o[b]);
		free(q);
		free(k);
		free(v);
	}
}

/* CUDA's fused attention, by 64 and by 128 query rows a block, against
 * its chunked path: on partial tiles (check_attention_rows), then, TIMED
 * (on a GPU), at FLUX.1's size at 1024^2 (4608 tokens, 24 heads of 128),
 * bf16: the same result within the bf16 tolerance, and each one's time
 * (median of 5, after one unmeasured), for choosing between them by
 * measurement. */
static void time_attention(int timed)
{
	struct pd_backend *fb[3] = { NULL, NULL, NULL };
	const int heads = 24, hd = 128;
	const int64_t s = 4608, W = (int64_t)heads * hd;
	const size_t n = (size_t)(s * W);
	double ms[3] = { 0, 0, 0 }, tflop = 4.0 * (double)s * (double)s * (double)W / 1e12;
	float *in[3] = { NULL, NULL, NULL }, *x[3] = { NULL, NULL, NULL };

	/* [0] fused by 64 rows, [1] by 128, [2] chunked; the first two fused
	 * whatever the environment said */
	setenv("PDIT_CUDA_NO_FLASH", "0", 1);
	if (cuda_with("PDIT_CUDA_FLASH_ROWS", "64", &fb[0]) || cuda_with("PDIT_CUDA_FLASH_ROWS", "128", &fb[1]) ||
	    cuda_with("PDIT_CUDA_NO_FLASH", "1", &fb[2]))
		goto out;
	check_attention_rows(fb, timed);
	if (!timed)
		goto out;
	for (int i = 0; i < 3; i++)
		in[i] = host_randn(n, 1);
	for (int k = 0; k < 3; k++) {
		struct pd_backend *b = fb[k];
		float *d[4], one;
		double t[5];

		for (int i = 0; i < 4; i++) {
			d[i] = pd_backend_alloc(b, n, "attention's timing");
			if (d[i] && i < 3)
				b->ops->upload(b, d[i], in[i], n);
		}
		for (int i = -1; i < 5 && d[0] && d[1] && d[2] && d[3]; i++) {
			double t0 = pd_now();

			b->ops->attention(b, d[3], W, NULL, d[0], W, d[1], W, d[2], W, s, s, heads, hd, 1.0f / sqrtf((float)hd));
			/* a download waits for the stream */
			b->ops->download(b, &one, d[3], 1);
			if (i >= 0)
				t[i] = pd_now() - t0;
		}
		if (d[3] && !pd_backend_check(b)) {
			ms[k] = pd_median_sort(t, 5) * 1e3;
			x[k] = malloc(n * sizeof(float));
			b->ops->download(b, x[k], d[3], n);
		}
		for (int i = 0; i < 4; i++)
			if (d[i])
				pd_backend_release(b, d[i]);
	}
	for (int k = 0; k < 3; k++)
		PD_CHECK(x[k] && !pd_backend_check(fb[k]), "attention at %lld tokens on CUDA (%s): %s", (long long)s,
			 k == 2 ? "chunked" : k ? "fused by 128 rows" : "fused by 64 rows", fb[k]->error);
	if (x[0] && x[1] && x[2]) {
		double e[2] = { pd_rel_err(x[0], x[2], n), pd_rel_err(x[1], x[2], n) };

		printf("attention %lld tokens, %d heads of %d, bf16: fused %.2f ms (%.0f TFLOP/s), fused by 128 rows "
		       "%.2f ms (%.0f TFLOP/s), chunked %.2f ms (%.0f TFLOP/s); fused against chunked %.2e, by 128 rows "
		       "%.2e\n",
		       (long long)s, heads, hd, ms[0], tflop / (ms[0] / 1e3), ms[1], tflop / (ms[1] / 1e3), ms[2],
		       tflop / (ms[2] / 1e3), e[0], e[1]);
		for (int k = 0; k < 2; k++)
			PD_CHECK(e[k] <= TOL_BF16, "fused attention by %d rows against chunked at %lld tokens: %.3g above %.1g",
				 k ? 128 : 64, (long long)s, e[k], TOL_BF16);
	}
out:
	unsetenv("PDIT_CUDA_NO_FLASH");
	unsetenv("PDIT_CUDA_FLASH_ROWS");
	for (int k = 0; k < 3; k++) {
		free(x[k]);
		pd_backend_free(fb[k]);
	}
	for (int i = 0; i < 3; i++)
		free(in[i]);
}

/* A bf16 linear layer with its bias and GELU through cuBLASLt (the
 * product's epilogue) and through cuBLAS and a kernel (PDIT_CUDA_NO_LT=1),
 * against each other; on a GPU at FLUX.1-dev's MLP size (4608 rows, 3072
 * to 12288), timed, in the emulation small (the second path runs in CI
 * only here). */
static void time_linear(int timed)
{
	struct pd_backend *fb[2] = { NULL, NULL };
	const int64_t rows = timed ? 4608 : rnd(1, 70), n_in = timed ? 3072 : rnd(1, 90),
		      n_out = timed ? 12288 : rnd(1, 90);
	const size_t nx = (size_t)(rows * n_in), ny = (size_t)(rows * n_out);
	double ms[2] = { 0, 0 }, tflop = 2.0 * (double)rows * (double)n_in * (double)n_out / 1e12;
	float *w = host_randn((size_t)(n_out * n_in), 0.03f), *bias = host_randn((size_t)n_out, 1),
	      *xh = host_randn(nx, 1), *got[2] = { NULL, NULL };

	/* [0] cuBLASLt, [1] cuBLAS */
	if (cuda_pair("PDIT_CUDA_NO_LT", fb))
		goto out;
	for (int k = 0; k < 2; k++) {
		struct pd_backend *b = fb[k];
		struct pd_linear *l = b->ops->linear_new(b, n_out, n_in, w, PD_F32, n_in, bias);
		float *x = pd_backend_alloc(b, nx, "a linear layer's timing"), *y = pd_backend_alloc(b, ny, "its output");
		float one;
		double t[5];

		if (l && x && y) {
			b->ops->upload(b, x, xh, nx);
			for (int i = -1; i < (timed ? 5 : 0); i++) {
				double t0 = pd_now();

				for (int j = 0; j < 10; j++)
					b->ops->linear(b, l, x, n_in, rows, y, n_out, PD_LIN_GELU_TANH);
				/* a download waits for the stream */
				b->ops->download(b, &one, y, 1);
				if (i >= 0)
					t[i] = (pd_now() - t0) / 10;
			}
			if (!pd_backend_check(b)) {
				ms[k] = timed ? pd_median_sort(t, 5) * 1e3 : 0;
				got[k] = malloc(ny * sizeof(float));
				b->ops->download(b, got[k], y, ny);
			}
		}
		if (l)
			b->ops->linear_free(b, l);
		pd_backend_release(b, x);
		pd_backend_release(b, y);
	}
	PD_CHECK(got[0] && got[1], "a linear layer through cuBLASLt and cuBLAS: %s",
		 fb[0]->failed ? fb[0]->error : fb[1]->error);
	if (got[0] && got[1]) {
		double e = pd_rel_err(got[0], got[1], ny);

		if (timed)
			printf("linear %lld rows, %lld to %lld, bias and GELU, bf16: cuBLASLt %.3f ms (%.0f TFLOP/s), "
			       "cuBLAS and a kernel %.3f ms (%.0f TFLOP/s); against each other %.2e\n",
			       (long long)rows, (long long)n_in, (long long)n_out, ms[0], tflop / (ms[0] / 1e3), ms[1],
			       tflop / (ms[1] / 1e3), e);
		/* the same bf16 products; the epilogue's GELU may be cuBLASLt's own */
		PD_CHECK(e <= 1e-3, "linear %lldx%lld, %lld rows, bias and GELU: cuBLASLt against cuBLAS %.3g above 1e-3",
			 (long long)n_out, (long long)n_in, (long long)rows, e);
	}
out:
	unsetenv("PDIT_CUDA_NO_LT");
	for (int k = 0; k < 2; k++) {
		free(got[k]);
		pd_backend_free(fb[k]);
	}
	free(w);
	free(bias);
	free(xh);
}

static void run(const char *name, enum pd_dtype dt, int rounds)
{
	/* quantized layers decoded on both (CUDA has no int8 products) */
	struct pd_backend_config cfg = { dt, 0, -1, 0, PD_QP_DECODE };
	int f0 = pd_test_failed;

	be_name = name;
	if (pd_backend_new(&B[0], "cpu", &cfg) || pd_backend_new(&B[1], name, &cfg)) {
		PD_CHECK(0, "backend %s: %s", name, pd_last_error());
		pd_backend_free(B[0]);
		return;
	}
	B[1]->conv_compute = B[0]->conv_compute = dt;
	pd_backend_enter(B[0]);
	for (int r = 0; r < rounds; r++) {
		test_copy2d();
		test_elementwise();
		test_linear(PD_F32, 0, 0);
		test_linear(PD_F32, PD_LIN_GELU_TANH, 0);
		test_linear(PD_BF16, PD_LIN_NO_BIAS, 0);
		test_linear(PD_F32, PD_LIN_ACCUMULATE, 0);
		test_linear(PD_F32, PD_LIN_ACCUMULATE | PD_LIN_NO_BIAS, 0);
		test_linear_same_input();
		if (r == 0)
			test_linear(PD_F32, 0, 1);
		if (r < 2)
			for (int k = 0; k < N_QTYPES; k++)
				test_linear_blocks(k);
		test_linear_adapter(0, 0);
		test_linear_adapter(PD_LIN_GELU_TANH | PD_LIN_ACCUMULATE, 0);
		test_linear_adapter(PD_LIN_NO_BIAS, r == 0);
		test_conv();
		test_norms();
		test_attention();
		test_attention_masked();
		test_vae_ops();
	}
	test_comms();
	test_sticky();
	if (dt == PD_BF16 && strcmp(name, "cuda") == 0) {
		time_attention(!emulated(B[1]));
		for (int r = 0; r < (emulated(B[1]) ? 3 : 1); r++)
			time_linear(!emulated(B[1]));
	}
	printf("%-8s %s products: %s (%s)\n", name, pd_dtype_name(dt), pd_test_failed == f0 ? "conforms" : "FAILS",
	       B[1]->device);
	pd_backend_free(B[1]);
	pd_backend_free(B[0]);
}

int main(int argc, char **argv)
{
	const char *seed = getenv("PDIT_TEST_SEED");
	uint64_t s = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);

	pd_test_catch_crashes();
	printf("seed %llu (PDIT_TEST_SEED to repeat)\n", (unsigned long long)s);
	pd_rng_seed(&rng, s);
	for (int i = 1; i < argc || i == 1; i++) {
		const char *name = argc > 1 ? argv[i] : "staged";

		run(name, PD_F32, 12);
		run(name, PD_BF16, 6);
	}
	return pd_test_report();
}
