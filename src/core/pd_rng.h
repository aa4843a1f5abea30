/*
 * pd_rng.h - PyTorch's CPU generator (mt19937) and its normal fill, so that
 * `-s S` gives the initial latents diffusers draws with
 * torch.Generator("cpu").manual_seed(S).  See tests/golden/torch-cpu-rng.md
 * for the steps and their sources.
 */
#ifndef PD_RNG_H
#define PD_RNG_H

#include <stddef.h>
#include <stdint.h>

struct pd_rng {
	uint32_t state[624];            /* Mersenne Twister state */
	int next;                       /* index of the next output in state */
	int has_next_double;            /* torch caches the second Box-Muller value ... */
	double next_double;             /* ... of its double-precision normal sampler */
};

/* torch.Generator("cpu").manual_seed(seed). */
void pd_rng_seed(struct pd_rng *g, uint64_t seed);
uint32_t pd_rng_u32(struct pd_rng *g);

/* torch.randn(n, generator=g) for a contiguous float32 tensor. */
void pd_rng_randn(struct pd_rng *g, float *out, size_t n);

#endif /* PD_RNG_H */
