/*
 * cuda_emu.h - just enough of CUDA to run a kernel's own source on the CPU
 * for a test: each thread of a block is a host thread (the blocks one after
 * another, so a block's __shared__ arrays are function statics), a warp's
 * shuffles and tensor-core products meet at a barrier of its 32 threads.
 * The product mma.m16n8k16 (bf16 in, f32 accumulate) is computed from the
 * 32 lanes' registers by the fragment layout the PTX ISA documents, so a
 * kernel that puts a value in the wrong register or lane gets a wrong
 * answer here as on a GPU. Nothing of a GPU's timing is modelled.
 */
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <thread>
#include <vector>

#define PD_CUDA_EMULATE 1
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 {
	uint32_t x, y, z, w;
};
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
	return uint4{ a, b, c, d };
}

struct __nv_bfloat16 {
	uint16_t x;
};
struct __nv_bfloat162 {
	__nv_bfloat16 x, y;
};

/* round to nearest even, as __float2bfloat16_rn */
static inline uint16_t emu_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float emu_float(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
	return __nv_bfloat162{ { emu_bf16(lo) }, { emu_bf16(hi) } };
}

static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

/* a block's barrier, and each warp's */
static pthread_barrier_t emu_block_bar, emu_warp_bar[32];
static float emu_lane_f[32][32];
static uint32_t emu_lane_a[32][32][4], emu_lane_b[32][32][2];

static inline void __syncthreads(void)
{
	pthread_barrier_wait(&emu_block_bar);
}

static inline float __shfl_xor_sync(unsigned mask, float v, int lanes)
{
	int w = (int)threadIdx.x >> 5, l = (int)threadIdx.x & 31;
	float r;

	(void)mask;
	emu_lane_f[w][l] = v;
	pthread_barrier_wait(&emu_warp_bar[w]);
	r = emu_lane_f[w][l ^ lanes];
	pthread_barrier_wait(&emu_warp_bar[w]);
	return r;
}

/* One lane's part of mma.m16n8k16.row.col.f32.bf16.bf16.f32: C += A B.
 * A 16x16: lane 4 * (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8);
 * B 16x8: lane 4 * n + (k % 8) / 2, register (k >= 8); the lower k of a pair
 * in a register's low half. C 16x8: lane 4 * (row % 8) + col / 2, value
 * 2 (row >= 8) + col % 2. */
static inline void pd_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	int w = (int)threadIdx.x >> 5, l = (int)threadIdx.x & 31, g = l >> 2, t = l & 3;

	memcpy(emu_lane_a[w][l], a, sizeof(emu_lane_a[w][l]));
	emu_lane_b[w][l][0] = b0;
	emu_lane_b[w][l][1] = b1;
	pthread_barrier_wait(&emu_warp_bar[w]);
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
		float acc = c[i];

		for (int k = 0; k < 16; k++) {
			uint32_t ar = emu_lane_a[w][4 * (row & 7) + ((k & 7) >> 1)][(row >= 8) + 2 * (k >= 8)];
			uint32_t br = emu_lane_b[w][4 * col + ((k & 7) >> 1)][k >= 8];

			acc += emu_float((uint16_t)(ar >> (16 * (k & 1)))) * emu_float((uint16_t)(br >> (16 * (k & 1))));
		}
		c[i] = acc;
	}
	pthread_barrier_wait(&emu_warp_bar[w]);
}

/* Runs FN (the kernel's call) on every thread of every block of GRID. */
template <typename F> static void emu_launch(dim3 grid, dim3 block, F fn)
{
	unsigned n = block.x * block.y * block.z;

	blockDim = block;
	gridDim = grid;
	for (unsigned bz = 0; bz < grid.z; bz++)
		for (unsigned by = 0; by < grid.y; by++)
			for (unsigned bx = 0; bx < grid.x; bx++) {
				std::vector<std::thread> th;

				pthread_barrier_init(&emu_block_bar, NULL, n);
				for (unsigned w = 0; w < (n + 31) / 32; w++)
					pthread_barrier_init(&emu_warp_bar[w], NULL, n - 32 * w < 32 ? n - 32 * w : 32);
				for (unsigned i = 0; i < n; i++)
					th.emplace_back([=] {
						threadIdx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
						blockIdx = dim3(bx, by, bz);
						fn();
					});
				for (auto &x : th)
					x.join();
				pthread_barrier_destroy(&emu_block_bar);
				for (unsigned w = 0; w < (n + 31) / 32; w++)
					pthread_barrier_destroy(&emu_warp_bar[w]);
			}
}

#endif /* CUDA_EMU_H */
