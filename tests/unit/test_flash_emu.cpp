/*
 * test_flash_emu.cpp - the CUDA backend's fused attention kernel
 * (src/backend/cuda/pd_cuda_flash.cuh) run from its own source on the CPU
 * (cuda_emu.h: a fiber a lane, the tensor-core product computed from
 * the lanes' registers by the PTX ISA's fragment layout, ldmatrix's loads
 * from the lanes' row addresses), against attention
 * in double precision on the same bf16-rounded inputs: random shapes with
 * partial tiles of queries and keys, heads of 64 and 128 channels, keys
 * whose scores grow from tile to tile (the running maximum rescales),
 * outputs poisoned with NaN and a row stride wider than the rows (nothing
 * written past them); each case through both block sizes (64 and 128 query
 * rows). On a GPU the conformance suite (test_backend cuda)
 * checks the kernel itself; this checks its arithmetic and indexing where
 * no GPU is.
 *
 * Tolerances: outputs 1e-2 of the largest (the probabilities enter the
 * second product as bf16, as on the chunked path), the log-sum-exp 1e-4.
 */
#include "cuda_emu.h"

#include "pd_cuda_flash.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <vector>

static uint64_t rng_state;
static int failed;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int rnd(int lo, int hi)
{
	return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}

static float randn(void)
{
	double u = ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
	double v = ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	failed |= !ok;
}

/* The kernel of WARPS warps a block on the case's inputs, against REF
 * (softmax(scale q k^T) v in double, [sq][W]) and RLSE ([heads][sq]). */
template <int D, int WARPS>
static void run_variant(int heads, int64_t sq, int64_t skv, int64_t W, int64_t ldo, float scale, int with_lse,
			const std::vector<__nv_bfloat16> &q, const std::vector<__nv_bfloat16> &k,
			const std::vector<__nv_bfloat16> &v, const std::vector<double> &ref, const std::vector<double> &rlse)
{
	std::vector<float> out((size_t)(sq * ldo), NAN), lse((size_t)(heads * sq), NAN);
	double err = 0, big = 0, lerr = 0;
	int pad_kept = 1, written = 1;
	char what[200];
	dim3 grid((unsigned)((sq + 16 * WARPS - 1) / (16 * WARPS)), (unsigned)heads);
	float *lp = with_lse ? lse.data() : NULL, *O = out.data();
	const __nv_bfloat16 *Q = q.data(), *K = k.data(), *V = v.data();

	emu_launch(grid, dim3(32 * WARPS), [=] { k_flash<D, WARPS>(Q, K, V, W, O, ldo, lp, sq, sq, skv, scale); });
	for (int64_t i = 0; i < sq; i++)
		for (int64_t c = 0; c < W; c++) {
			double x = out[(size_t)(i * ldo + c)], r = ref[(size_t)(i * W + c)];

			written &= !isnan(x);
			err = fabs(x - r) > err || isnan(x) ? (isnan(x) ? INFINITY : fabs(x - r)) : err;
			big = fabs(r) > big ? fabs(r) : big;
		}
	for (int64_t i = 0; with_lse && i < heads * sq; i++) {
		double l = lse[(size_t)i], r = rlse[(size_t)i];

		lerr = fabs(l - r) / (1 + fabs(r)) > lerr || isnan(l) ? (isnan(l) ? INFINITY : fabs(l - r) / (1 + fabs(r)))
								       : lerr;
	}
	for (int64_t i = 0; i < sq; i++)
		for (int64_t c = W; c < ldo; c++)
			pad_kept &= isnan(out[(size_t)(i * ldo + c)]);
	snprintf(what, sizeof(what),
		 "flash (%d rows a block) %lld queries x %lld keys, %d heads of %d, scale %.3f: error %.2e of %.2f%s",
		 16 * WARPS, (long long)sq, (long long)skv, heads, D, scale, err, big, with_lse ? "" : ", no log-sum-exp");
	check(written && err <= 1e-2 * big, what);
	check(pad_kept, "  nothing written past the rows' columns");
	if (with_lse) {
		snprintf(what, sizeof(what), "  log-sum-exp error %.2e", lerr);
		check(lerr <= 1e-4, what);
	}
}

/* One case's inputs and reference, then each block size's kernel on them. */
static void one_case(int hd, int heads, int64_t sq, int64_t skv, int with_lse)
{
	int64_t W = (int64_t)heads * hd, ldo = W + rnd(0, 5);
	float scale = 1.0f / sqrtf((float)hd) * (0.5f + (float)rnd(0, 10) / 10.0f);
	std::vector<__nv_bfloat16> q((size_t)(sq * W)), k((size_t)(skv * W)), v((size_t)(skv * W));
	std::vector<double> ref((size_t)(sq * W)), rlse((size_t)(heads * sq)), s((size_t)skv);

	/* later keys score higher: a row's maximum grows from tile to tile */
	for (int64_t i = 0; i < sq * W; i++)
		q[(size_t)i].x = emu_bf16(randn());
	for (int64_t j = 0; j < skv; j++)
		for (int64_t c = 0; c < W; c++) {
			k[(size_t)(j * W + c)].x = emu_bf16(randn() * (1.0f + 2.0f * (float)j / (float)skv));
			v[(size_t)(j * W + c)].x = emu_bf16(randn());
		}

	/* the reference: softmax(scale q k^T) v in double */
	for (int h = 0; h < heads; h++)
		for (int64_t i = 0; i < sq; i++) {
			double m = -INFINITY, sum = 0, *r = &ref[(size_t)(i * W + h * hd)];

			for (int64_t j = 0; j < skv; j++) {
				double d = 0;

				for (int c = 0; c < hd; c++)
					d += (double)emu_float(q[(size_t)(i * W + h * hd + c)].x) *
					     emu_float(k[(size_t)(j * W + h * hd + c)].x);
				s[(size_t)j] = d * scale;
				m = s[(size_t)j] > m ? s[(size_t)j] : m;
			}
			for (int c = 0; c < hd; c++)
				r[c] = 0;
			for (int64_t j = 0; j < skv; j++) {
				double p = exp(s[(size_t)j] - m);

				sum += p;
				for (int c = 0; c < hd; c++)
					r[c] += p * emu_float(v[(size_t)(j * W + h * hd + c)].x);
			}
			for (int c = 0; c < hd; c++)
				r[c] /= sum;
			rlse[(size_t)(h * sq + i)] = m + log(sum);
		}
	if (hd == 128) {
		run_variant<128, 4>(heads, sq, skv, W, ldo, scale, with_lse, q, k, v, ref, rlse);
		run_variant<128, 8>(heads, sq, skv, W, ldo, scale, with_lse, q, k, v, ref, rlse);
	} else {
		run_variant<64, 4>(heads, sq, skv, W, ldo, scale, with_lse, q, k, v, ref, rlse);
		run_variant<64, 8>(heads, sq, skv, W, ldo, scale, with_lse, q, k, v, ref, rlse);
	}
}

int main(void)
{
	const char *seed = getenv("PDIT_TEST_SEED");

	rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
	printf("seed %llu (PDIT_TEST_SEED to repeat)\n", (unsigned long long)rng_state);
	rng_state = rng_state * 0x9E3779B97F4A7C15ull + 1;
	/* a single query and key; whole tiles; then random partial ones */
	one_case(64, 1, 1, 1, 1);
	one_case(128, 2, 128, 128, 1);
	/* heads of 64 over several key tiles, and over exactly one */
	one_case(64, 1, 130, 150, 1);
	one_case(64, 2, 70, 64, 0);
	for (int c = 0; c < 4; c++)
		one_case(rnd(0, 1) ? 128 : 64, rnd(1, 3), rnd(1, 300), rnd(1, 200), rnd(0, 3) != 0);
	printf("%s\n", failed ? "flash kernel: FAILS" : "flash kernel: conforms");
	return failed;
}
