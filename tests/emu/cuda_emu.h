/*
 * cuda_emu.h - just enough of CUDA's kernel language to run a kernel's own
 * source on the CPU for a test. A launch runs its blocks one after another.
 * A kernel whose threads work alone (PD_LAUNCH) runs them one after another
 * on the calling thread; one whose threads meet (PD_LAUNCH_COOP: block
 * barriers, warp shuffles, tensor-core products) runs each of a block's
 * threads on a host thread of its own (a block's __shared__ arrays are
 * then function statics), and a warp's shuffles and products meet at a
 * barrier of its 32 threads. A cooperative call from a kernel launched as
 * independent stops the program, naming it. The product mma.m16n8k16 (bf16
 * in, f32 accumulate) is computed from the 32 lanes' registers by the
 * fragment layout the PTX ISA documents, so a kernel that puts a value in
 * the wrong register or lane gets a wrong answer here as on a GPU. Nothing
 * of a GPU's timing is modelled.
 */
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>

#define PD_CUDA_EMULATE 1
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c)
	{
	}
};
struct uint4 {
	uint32_t x, y, z, w;
};
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
	return uint4{ a, b, c, d };
}

/* bf16 and half as their bits */
struct __nv_bfloat16 {
	uint16_t x;
};
struct __align__(4) __nv_bfloat162
{
	__nv_bfloat16 x, y;
};
struct __half_raw {
	unsigned short x;
};
struct __half {
	unsigned short x;
	__half(__half_raw r) : x(r.x)
	{
	}
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

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
	return __nv_bfloat16{ emu_bf16(f) };
}

static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
	return __nv_bfloat162{ { emu_bf16(lo) }, { emu_bf16(hi) } };
}

static inline float __half2float(__half h)
{
	int s = h.x >> 15, e = (h.x >> 10) & 31, m = h.x & 1023;
	float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);

	return s ? -v : v;
}

static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

/* the running launch: cooperative (threads of their own) or not, and its
 * kernel's name for the refusal */
static int emu_coop;
static const char *emu_kernel;

/* the runtime's record of a launch a GPU would refuse (cuda_emu_runtime.c;
 * absent in a test of a kernel alone, which then stops) */
extern "C" __attribute__((weak)) void pd_emu_launch_failed(const char *kernel);

/* A barrier of N threads: the last to arrive moves the generation on; the
 * others yield until it moves (on 2 cores, waking 64 sleepers through the
 * kernel cost more than the kernels' work). */
struct emu_barrier {
	unsigned n;
	std::atomic<unsigned> count{ 0 }, gen{ 0 };
};

static void emu_barrier_init(emu_barrier *b, unsigned n)
{
	b->n = n;
	b->count = 0;
}

static const char *emu_kernel_name(void);

/* A barrier that does not fill in 60 s (a thread of the block returned
 * before it, which a GPU may tolerate and this cannot) stops the program,
 * naming the kernel, rather than spin for ever. */
static void emu_wait(emu_barrier *b)
{
	unsigned g = b->gen.load(std::memory_order_acquire);
	time_t t0 = 0;

	if (b->count.fetch_add(1, std::memory_order_acq_rel) + 1 == b->n) {
		b->count.store(0, std::memory_order_relaxed);
		b->gen.fetch_add(1, std::memory_order_acq_rel);
		return;
	}
	for (unsigned spins = 0; b->gen.load(std::memory_order_acquire) == g; spins++) {
		sched_yield();
		if (spins % 4096 == 0) {
			if (!t0)
				t0 = time(NULL);
			else if (time(NULL) - t0 > 60) {
				fprintf(stderr, "cuda_emu: a barrier in kernel %s waited 60 s for its threads\n",
					emu_kernel_name());
				abort();
			}
		}
	}
}

/* a block's barrier, and each warp's */
static emu_barrier emu_block_bar, emu_warp_bar[32];
static uint64_t emu_lane_x[32][32];
static uint32_t emu_lane_a[32][32][4], emu_lane_b[32][32][2];

static const char *emu_kernel_name(void)
{
	return emu_kernel;
}

/* this thread's warp and lane: from its index within the block, all three
 * dimensions (a 32x8 block has eight warps) */
static inline int emu_tid(void)
{
	return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

static inline void emu_need_coop(const char *what)
{
	if (!emu_coop) {
		fprintf(stderr,
			"cuda_emu: %s in kernel %s, launched as one of independent threads (PD_LAUNCH, not "
			"PD_LAUNCH_COOP)\n",
			what, emu_kernel);
		abort();
	}
}

static inline void __syncthreads(void)
{
	emu_need_coop("__syncthreads");
	emu_wait(&emu_block_bar);
}

/* lane SRC's V (its own where SRC is outside the warp) */
template <typename T> static inline T emu_shuffle(T v, int src)
{
	int w = emu_tid() >> 5, l = emu_tid() & 31;
	T r;

	emu_need_coop("a warp shuffle");
	memcpy(&emu_lane_x[w][l], &v, sizeof(T));
	emu_wait(&emu_warp_bar[w]);
	memcpy(&r, &emu_lane_x[w][src >= 0 && src < 32 ? src : l], sizeof(T));
	emu_wait(&emu_warp_bar[w]);
	return r;
}

template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lanes)
{
	(void)mask;
	return emu_shuffle(v, (emu_tid() & 31) ^ lanes);
}

template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta)
{
	(void)mask;
	return emu_shuffle(v, (emu_tid() & 31) + (int)delta);
}

/* One lane's part of mma.m16n8k16.row.col.f32.bf16.bf16.f32: C += A B.
 * A 16x16: lane 4 * (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8);
 * B 16x8: lane 4 * n + (k % 8) / 2, register (k >= 8); the lower k of a pair
 * in a register's low half. C 16x8: lane 4 * (row % 8) + col / 2, value
 * 2 (row >= 8) + col % 2. */
static inline void pd_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	int w = emu_tid() >> 5, l = emu_tid() & 31, g = l >> 2, t = l & 3;

	emu_need_coop("mma.sync");
	memcpy(emu_lane_a[w][l], a, sizeof(emu_lane_a[w][l]));
	emu_lane_b[w][l][0] = b0;
	emu_lane_b[w][l][1] = b1;
	emu_wait(&emu_warp_bar[w]);
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
		float acc = c[i];

		for (int k = 0; k < 16; k++) {
			uint32_t ar = emu_lane_a[w][4 * (row & 7) + ((k & 7) >> 1)][(row >= 8) + 2 * (k >= 8)];
			uint32_t br = emu_lane_b[w][4 * col + ((k & 7) >> 1)][k >= 8];

			acc += emu_float((uint16_t)(ar >> (16 * (k & 1)))) *
			       emu_float((uint16_t)(br >> (16 * (k & 1))));
		}
		c[i] = acc;
	}
	emu_wait(&emu_warp_bar[w]);
}

/* The host threads a cooperative block runs on, kept from launch to
 * launch (making 64 threads a block cost more than the kernels): worker i
 * runs thread i of the current block when its own semaphore is posted, so
 * a block of N wakes N workers however many the pool holds. */
struct emu_pool {
	sem_t go[1024]; /* worker i's turn */
	sem_t done; /* a worker finished its thread */
	unsigned started = 0; /* workers made */
	dim3 block, idx; /* the running block's shape and index */
	void (*call)(void *) = nullptr; /* and its kernel call */
	void *ctx = nullptr;
};
static emu_pool emu_p;

static void *emu_worker(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;

	for (;;) {
		while (sem_wait(&emu_p.go[i]))
			;
		threadIdx =
			dim3(i % emu_p.block.x, i / emu_p.block.x % emu_p.block.y, i / (emu_p.block.x * emu_p.block.y));
		blockIdx = emu_p.idx;
		emu_p.call(emu_p.ctx);
		sem_post(&emu_p.done);
	}
	return NULL;
}

/* one block of N threads on the pool (grown to N workers) */
static void emu_block(unsigned n, dim3 block, dim3 idx, void (*call)(void *), void *ctx)
{
	if (!emu_p.started)
		sem_init(&emu_p.done, 0, 0);
	while (emu_p.started < n) {
		pthread_t t;
		pthread_attr_t at;

		sem_init(&emu_p.go[emu_p.started], 0, 0);
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, emu_worker, (void *)(uintptr_t)emu_p.started)) {
			fprintf(stderr, "cuda_emu: cannot start thread %u\n", emu_p.started);
			abort();
		}
		pthread_attr_destroy(&at);
		emu_p.started++;
	}
	/* the posts order these stores before the workers read them */
	emu_p.block = block;
	emu_p.idx = idx;
	emu_p.call = call;
	emu_p.ctx = ctx;
	for (unsigned i = 0; i < n; i++)
		sem_post(&emu_p.go[i]);
	for (unsigned i = 0; i < n; i++)
		while (sem_wait(&emu_p.done))
			;
}

template <typename F> static void emu_call(void *ctx)
{
	(*(F *)ctx)();
}

/* Runs FN (the kernel's call) on every thread of every block of GRID, the
 * threads of a block together (COOP) or one after another. */
template <typename F> static void emu_run(const char *name, int coop, dim3 grid, dim3 block, F fn)
{
	unsigned n = block.x * block.y * block.z;

	/* what a GPU refuses to launch: the launch error the next
	 * cudaGetLastError returns */
	if (!n || n > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535) {
		if (!pd_emu_launch_failed) {
			fprintf(stderr, "cuda_emu: kernel %s launched with a configuration a GPU refuses\n", name);
			abort();
		}
		pd_emu_launch_failed(name);
		return;
	}
	blockDim = block;
	gridDim = grid;
	emu_coop = coop;
	emu_kernel = name;
	if (coop) {
		emu_barrier_init(&emu_block_bar, n);
		for (unsigned w = 0; w < (n + 31) / 32; w++)
			emu_barrier_init(&emu_warp_bar[w], n - 32 * w < 32 ? n - 32 * w : 32);
	}
	for (unsigned bz = 0; bz < grid.z; bz++)
		for (unsigned by = 0; by < grid.y; by++)
			for (unsigned bx = 0; bx < grid.x; bx++) {
				if (coop) {
					emu_block(n, block, dim3(bx, by, bz), emu_call<F>, &fn);
					continue;
				}
				blockIdx = dim3(bx, by, bz);
				for (unsigned i = 0; i < n; i++) {
					threadIdx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
					fn();
				}
			}
	threadIdx = dim3(0, 0, 0);
	blockIdx = dim3(0, 0, 0);
}

template <typename F> static void emu_launch(dim3 grid, dim3 block, F fn)
{
	emu_run("(test)", 1, grid, block, fn);
}

/* whether P lies in live device memory (cuda_emu_runtime.c; absent in a
 * test of a kernel alone, whose arguments are its own) */
extern "C" __attribute__((weak)) int pd_emu_is_device(const void *p, size_t bytes);

/* A kernel handed a host pointer faults on a GPU (an illegal address, the
 * context lost) but reads happily here: every pointer argument of a launch
 * must be null or inside one live device allocation. */
template <typename T> static inline void emu_arg(const char *, int, const T &)
{
}

template <typename T> static inline void emu_arg(const char *kernel, int i, T *p)
{
	if (p && pd_emu_is_device && !pd_emu_is_device((const void *)p, 1)) {
		fprintf(stderr, "cuda_emu: kernel %s given a pointer outside device memory as argument %d\n", kernel,
			i);
		abort();
	}
}

template <typename... A> static inline void emu_args(const char *kernel, const A &...a)
{
	int i = 0;

	(emu_arg(kernel, ++i, a), ...);
}

#define PD_LAUNCH(k, grid, block, s, ...) \
	((void)(s), emu_args(#k, __VA_ARGS__), emu_run(#k, 0, dim3(grid), dim3(block), [=] { k(__VA_ARGS__); }))
#define PD_LAUNCH_COOP(k, grid, block, s, ...) \
	((void)(s), emu_args(#k, __VA_ARGS__), emu_run(#k, 1, dim3(grid), dim3(block), [=] { k(__VA_ARGS__); }))

#endif /* CUDA_EMU_H */
