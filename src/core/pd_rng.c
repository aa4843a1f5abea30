/*
 * pd_rng.c - PyTorch's CPU generator and normal fill.
 *
 * Sources (pytorch/pytorch, v1.13): aten/src/ATen/core/MT19937RNGEngine.h,
 * aten/src/ATen/core/DistributionsHelper.h,
 * aten/src/ATen/native/cpu/DistributionTemplates.h (normal_fill, and the
 * AVX2 twin that the golden data came from: float32 log/sqrt/cos/sin).
 */
#include "pd_rng.h"

#include <math.h>

#define MT_N 624
#define MT_M 397

void pd_rng_seed(struct pd_rng *g, uint64_t seed)
{
	g->state[0] = (uint32_t)(seed & 0xffffffffu);
	for (int i = 1; i < MT_N; i++)
		g->state[i] = 1812433253u * (g->state[i - 1] ^ (g->state[i - 1] >> 30)) + (uint32_t)i;
	g->next = MT_N;
	g->has_next_double = 0;
}

static void pd_rng_twist(struct pd_rng *g)
{
	for (int i = 0; i < MT_N; i++) {
		uint32_t y = (g->state[i] & 0x80000000u) | (g->state[(i + 1) % MT_N] & 0x7fffffffu);
		uint32_t v = g->state[(i + MT_M) % MT_N] ^ (y >> 1);

		g->state[i] = (y & 1) ? v ^ 0x9908b0dfu : v;
	}
	g->next = 0;
}

uint32_t pd_rng_u32(struct pd_rng *g)
{
	uint32_t y;

	if (g->next >= MT_N)
		pd_rng_twist(g);
	y = g->state[g->next++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

/* uniform_real_distribution<float>(0, 1): 24 random bits. */
static float pd_rng_uniform_f32(struct pd_rng *g)
{
	return (float)(pd_rng_u32(g) & 0xffffffu) * (1.0f / 16777216.0f);
}

/* uniform_real_distribution<double>(0, 1): 53 bits of random64(), which
 * joins two draws, the first as the high word. */
static double pd_rng_uniform_f64(struct pd_rng *g)
{
	uint64_t hi = pd_rng_u32(g), lo = pd_rng_u32(g);
	uint64_t v = (hi << 32) | lo;

	return (double)(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* Box-Muller on 16 uniforms in place: the first 8 give cosines, the last 8
 * sines (normal_fill_16). */
static void pd_rng_fill16(float *d)
{
	const float two_pi = (float)(2.0 * 3.14159265358979323846);

	for (int j = 0; j < 8; j++) {
		float u1 = 1.0f - d[j];
		float u2 = d[j + 8];
		float radius = sqrtf(-2.0f * logf(u1));
		float theta = two_pi * u2;

		d[j] = radius * cosf(theta);
		d[j + 8] = radius * sinf(theta);
	}
}

/* at::normal_distribution<double>, torch's path for tensors under 16
 * elements (it caches the sine of each pair for the next call). */
static double pd_rng_normal_f64(struct pd_rng *g)
{
	double u1, u2, r, theta;

	if (g->has_next_double) {
		g->has_next_double = 0;
		return g->next_double;
	}
	u1 = pd_rng_uniform_f64(g);
	u2 = pd_rng_uniform_f64(g);
	r = sqrt(-2.0 * log1p(-u2));
	theta = 2.0 * 3.14159265358979323846 * u1;
	g->next_double = r * sin(theta);
	g->has_next_double = 1;
	return r * cos(theta);
}

void pd_rng_randn(struct pd_rng *g, float *out, size_t n)
{
	if (n < 16) {
		for (size_t i = 0; i < n; i++)
			out[i] = (float)pd_rng_normal_f64(g);
		return;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = pd_rng_uniform_f32(g);
	/* each 16 on its own: the same values on any number of threads (a
	 * model pdit tiny writes at FLUX.1's sizes draws 12 billion) */
#pragma omp parallel for if (n >= ((size_t)1 << 20)) schedule(static)
	for (size_t b = 0; b < n / 16; b++)
		pd_rng_fill16(out + 16 * b);
	if (n % 16) {
		/* torch recomputes the last 16 values from 16 fresh uniforms. */
		float *tail = out + n - 16;

		for (int i = 0; i < 16; i++)
			tail[i] = pd_rng_uniform_f32(g);
		pd_rng_fill16(tail);
	}
}
