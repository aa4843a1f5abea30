/*
 * cuda_emu.h - just enough of CUDA's kernel language to run a kernel's own
 * source on the CPU for a test. A launch runs its blocks one after another.
 * A kernel whose threads work alone (PD_LAUNCH) runs them one after another
 * on the calling thread; one whose threads meet (PD_LAUNCH_COOP: block
 * barriers, warp shuffles, tensor-core products, ldmatrix) runs each of a
 * block's threads as a fiber of its own on the calling thread (a block's
 * __shared__ arrays are then function statics), and a warp's shuffles,
 * products and matrix loads meet at a barrier of its threads (32, fewer in
 * a partial last warp). A cooperative call from a kernel launched as
 * independent stops the program, naming it. The product mma.m16n8k16 (bf16
 * in, f32 accumulate) is computed from the 32 lanes' registers by the
 * fragment layout the PTX ISA documents, so a kernel that puts a value in
 * the wrong register or lane gets a wrong answer here as on a GPU. Nothing
 * of a GPU's timing is modelled, but its freedoms are used against the
 * kernel: a block's warps run one at a time from one block barrier to the
 * next (in turn, first to last or last to first), as far apart as a GPU may
 * let them drift, and cp.async's copies land at the issuing thread's wait,
 * their destinations poisoned from the issue on; so shared data read
 * without the barrier that orders it reads a value not yet written, or
 * already overwritten, or NaN.
 */
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define PD_CUDA_EMULATE 1
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c)
	{
	}
};
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

static dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

/* the running launch: cooperative (a fiber a thread) or not, and its
 * kernel's name for the refusal */
static int emu_coop;
static const char *emu_kernel;

/* the runtime's record of a launch a GPU would refuse (cuda_emu_runtime.c;
 * absent in a test of a kernel alone, which then stops) */
extern "C" __attribute__((weak)) void pd_emu_launch_failed(const char *kernel);

/* A cooperative block's threads are fibers on the launching thread (a
 * stack and a saved context each): one runs until it waits at a barrier or
 * finishes, then hands the CPU back to the block's scheduler, which resumes
 * the next. A switch costs well under a microsecond; threads of the system
 * meeting at barriers cost tens, and two processes of them (a mesh under
 * mpirun) spent most of their time fighting for two cores. */
#define EMU_STACK (256u << 10)

#if defined(__x86_64__)
/* A switch pushes the callee-saved registers on the stack it leaves, keeps
 * that stack's top, and pops the other's (glibc's swapcontext also saves
 * the signal mask: a system call each switch, and most of the emulation's
 * time when it was used here). A new fiber's stack holds zeroed registers
 * and its function as the return address. */
typedef void *emu_ctx;
extern "C" void pd_emu_switch(emu_ctx *from, emu_ctx to);
__asm__(".pushsection .text\n"
	".p2align 4\n"
	".type pd_emu_switch, @function\n"
	"pd_emu_switch:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tmovq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
	"\tret\n"
	".size pd_emu_switch, .-pd_emu_switch\n"
	".popsection\n");

static void emu_ctx_make(emu_ctx *c, char *stack, size_t size, void (*fn)(void))
{
	void **sp = (void **)(stack + size);

	*--sp = NULL; /* FN's return address: it never returns */
	*--sp = (void *)fn;
	for (int i = 0; i < 6; i++)
		*--sp = NULL;
	*c = sp;
}

static inline void emu_ctx_switch(emu_ctx *from, emu_ctx *to)
{
	pd_emu_switch(from, *to);
}
/* Not saved: MXCSR and the x87 control word (one host thread; nothing here
 * changes rounding), nor a CET shadow stack (Debian's toolchain does not
 * mark programs for one; where it is enforced the first return into a
 * fiber faults). */
#else
typedef ucontext_t emu_ctx;

static void emu_ctx_make(emu_ctx *c, char *stack, size_t size, void (*fn)(void))
{
	if (getcontext(c)) {
		fprintf(stderr, "cuda_emu: getcontext failed\n");
		abort();
	}
	c->uc_stack.ss_sp = stack;
	c->uc_stack.ss_size = size;
	c->uc_link = NULL;
	makecontext(c, fn, 0);
}

static inline void emu_ctx_switch(emu_ctx *from, emu_ctx *to)
{
	swapcontext(from, to);
}
#endif

struct emu_fiber {
	emu_ctx ctx; /* where it stopped */
	char *stack; /* its stack: EMU_STACK bytes above a guard page */
	int done; /* finished its thread of the running block */
	int at_block; /* waits at the block's barrier ... */
	unsigned block_gen; /* ... of this generation */
	dim3 tid; /* its thread's index in the running block */
};

struct emu_sched {
	emu_ctx main; /* the launching thread, while a fiber runs */
	emu_fiber f[1024]; /* fiber i runs thread i of every block */
	unsigned started; /* fibers made */
	unsigned cur; /* the fiber running */
	void (*call)(void *); /* the running block's kernel call */
	void *ctx; /* and its argument */
	unsigned n; /* the running block's threads */
	unsigned idle; /* yields in a row by fibers that found their barrier still waiting */
	const void *main_bottom; /* (AddressSanitizer) the launching thread's stack */
	size_t main_size; /* and its size */
	pthread_t owner; /* the host thread whose stack main_bottom is: every launch's */
};
static emu_sched emu_s;

/* A barrier of N threads: the last to arrive moves the generation on. */
struct emu_barrier {
	unsigned n, count, gen;
};

static void emu_barrier_init(emu_barrier *b, unsigned n)
{
	b->n = n;
	b->count = 0;
}

static const char *emu_kernel_name(void);

/* from the running fiber back to the scheduler; PROGRESS: the fiber did
 * something since it last ran. Every live fiber resumed twice without one
 * finding its barrier moved is a block that can never finish (a thread
 * returned before a barrier, which a GPU may tolerate and this cannot):
 * the program stops, naming the kernel. */
static void emu_yield(int progress)
{
	emu_fiber *f = &emu_s.f[emu_s.cur];

	if (progress)
		emu_s.idle = 0;
	else if (++emu_s.idle > 2 * emu_s.n) {
		fprintf(stderr,
			"cuda_emu: a barrier in kernel %s can never fill (a thread of its block returned before it, "
			"or its threads wait at different barriers or shuffles)\n",
			emu_kernel_name());
		abort();
	}
#ifdef EMU_ASAN
	void *fake;

	__sanitizer_start_switch_fiber(&fake, emu_s.main_bottom, emu_s.main_size);
	emu_ctx_switch(&f->ctx, &emu_s.main);
	__sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
	emu_ctx_switch(&f->ctx, &emu_s.main);
#endif
}

static void emu_wait(emu_barrier *b)
{
	unsigned g = b->gen;

	if (++b->count == b->n) {
		b->count = 0;
		b->gen++;
		emu_s.idle = 0;
		return;
	}
	emu_yield(1);
	while (b->gen == g)
		emu_yield(0);
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
	emu_fiber *f = &emu_s.f[emu_s.cur];

	emu_need_coop("__syncthreads");
	f->block_gen = emu_block_bar.gen;
	f->at_block = 1;
	emu_wait(&emu_block_bar);
	f->at_block = 0;
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

/* One lane's part of ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lane
 * 8 i + r gives the address of row r of 8x8 matrix i (8 16-bit values, 16
 * bytes aligned: a GPU faults on less); register i of lane 4 r + c / 2
 * receives the matrix's (r, c) and (r, c + 1), or with .trans (c, r) and
 * (c + 1, r), the first in the low half. */
static inline void emu_ldmatrix(uint32_t *out, const void *p, int trans)
{
	int w = emu_tid() >> 5, l = emu_tid() & 31, g = l >> 2, t = l & 3;

	emu_need_coop("ldmatrix");
	/* .aligned: the whole warp (a partial one's missing lanes give no
	 * address, which a GPU leaves undefined) */
	if (emu_warp_bar[w].n != 32) {
		fprintf(stderr, "cuda_emu: ldmatrix in kernel %s by a warp of %u threads, not 32\n", emu_kernel,
			emu_warp_bar[w].n);
		abort();
	}
	if ((uintptr_t)p % 16) {
		fprintf(stderr, "cuda_emu: ldmatrix from %p in kernel %s: a row must be 16-byte aligned\n", p,
			emu_kernel);
		abort();
	}
	emu_lane_x[w][l] = (uint64_t)(uintptr_t)p;
	emu_wait(&emu_warp_bar[w]);
	for (int i = 0; i < 4; i++) {
		const uint16_t *lo, *hi;

		if (trans) {
			lo = (const uint16_t *)(uintptr_t)emu_lane_x[w][8 * i + 2 * t] + g;
			hi = (const uint16_t *)(uintptr_t)emu_lane_x[w][8 * i + 2 * t + 1] + g;
		} else {
			lo = (const uint16_t *)(uintptr_t)emu_lane_x[w][8 * i + g] + 2 * t;
			hi = lo + 1;
		}
		out[i] = (uint32_t)*lo | (uint32_t)*hi << 16;
	}
	emu_wait(&emu_warp_bar[w]);
}

template <bool TRANS> static inline void pd_ldm_x4(uint32_t *r, const void *p)
{
	emu_ldmatrix(r, p, TRANS);
}

/* cp.async: each thread's copies in flight, made at its wait (the latest a
 * GPU may make them), their destinations NaN from the issue on (the
 * earliest a GPU may change them) */
struct emu_async {
	void *dst; /* 16 bytes of shared memory */
	const void *src; /* global memory */
	int bytes; /* read of the 16; zeros after */
};
#define EMU_ASYNC_MAX 32
static emu_async emu_asyncs[1024][EMU_ASYNC_MAX];
static int emu_n_async[1024];

static inline void pd_cp_async16(void *dst, const void *src, int bytes)
{
	int i = emu_tid();

	if ((uintptr_t)dst % 16 || (uintptr_t)src % 16 || (bytes != 0 && bytes != 16)) {
		fprintf(stderr, "cuda_emu: cp.async of %d bytes from %p to %p in kernel %s: both ends 16-byte aligned\n",
			bytes, src, dst, emu_kernel);
		abort();
	}
	if (emu_n_async[i] == EMU_ASYNC_MAX) {
		fprintf(stderr, "cuda_emu: more than %d cp.async copies of one thread in flight in kernel %s\n",
			EMU_ASYNC_MAX, emu_kernel);
		abort();
	}
	memset(dst, 0xff, 16);
	emu_asyncs[i][emu_n_async[i]++] = emu_async{ dst, src, bytes };
}

static inline void pd_cp_wait_all(void)
{
	int i = emu_tid();

	for (int k = 0; k < emu_n_async[i]; k++) {
		memset(emu_asyncs[i][k].dst, 0, 16);
		memcpy(emu_asyncs[i][k].dst, emu_asyncs[i][k].src, (size_t)emu_asyncs[i][k].bytes);
	}
	emu_n_async[i] = 0;
}

/* a thread that ends with copies in flight: a GPU leaves them undefined */
static inline void emu_async_end(void)
{
	if (emu_n_async[emu_tid()]) {
		fprintf(stderr, "cuda_emu: a thread of kernel %s ended with cp.async copies not waited for\n",
			emu_kernel);
		abort();
	}
}

/* a fiber's life: thread i of each block it is resumed for */
static void emu_fiber_main(void)
{
	unsigned i = emu_s.cur;

#ifdef EMU_ASAN
	__sanitizer_finish_switch_fiber(NULL, &emu_s.main_bottom, &emu_s.main_size);
#endif
	for (;;) {
		emu_s.call(emu_s.ctx);
		emu_async_end();
		emu_s.f[i].done = 1;
		emu_yield(1);
	}
}

/* fiber number emu_s.started (a function of its own, as emu_resume) */
static __attribute__((noinline)) void emu_fiber_new(void)
{
	emu_fiber *f = &emu_s.f[emu_s.started];
	long page = 4096;
	char *m = (char *)mmap(NULL, EMU_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);

	/* an overflow faults on the guard page instead of writing over the
	 * next fiber's stack */
	if (m == MAP_FAILED || mprotect(m, page, PROT_NONE)) {
		fprintf(stderr, "cuda_emu: cannot make fiber %u\n", emu_s.started);
		abort();
	}
	f->stack = m + page;
	emu_ctx_make(&f->ctx, f->stack, EMU_STACK, emu_fiber_main);
	emu_s.started++;
}

/* from the scheduler into fiber I until it yields (a function of its own:
 * where ucontext switches, getcontext and swapcontext return twice, which
 * no caller's locals should see) */
static __attribute__((noinline)) void emu_resume(unsigned i)
{
	emu_s.cur = i;
#ifdef EMU_ASAN
	void *fake;

	__sanitizer_start_switch_fiber(&fake, emu_s.f[i].stack, EMU_STACK);
	emu_ctx_switch(&emu_s.main, &emu_s.f[i].ctx);
	__sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
	emu_ctx_switch(&emu_s.main, &emu_s.f[i].ctx);
#endif
}

/* whether fiber I waits at the block's barrier, which has not moved on */
static inline int emu_blocked(unsigned i)
{
	return emu_s.f[i].at_block && emu_s.f[i].block_gen == emu_block_bar.gen;
}

/* one block of N threads, each a fiber, until all finish: a warp at a time
 * until each of its threads waits at the block's barrier or has finished
 * (its lanes in turn, meeting at its own barriers), the warps in turn,
 * first to last or last to first by the round's Gray code, so that a
 * loop's stretches between barriers, two or more, each meet both orders */
static void emu_block(unsigned n, dim3 block, dim3 idx, void (*call)(void *), void *ctx)
{
	unsigned left = n, warps = (n + 31) / 32;

	/* the fibers keep the first launching thread's stack as the one to
	 * return to */
	if (!emu_s.started)
		emu_s.owner = pthread_self();
	else if (!pthread_equal(emu_s.owner, pthread_self())) {
		fprintf(stderr, "cuda_emu: kernel %s launched from a second host thread\n", emu_kernel_name());
		abort();
	}
	while (emu_s.started < n)
		emu_fiber_new();
	emu_s.call = call;
	emu_s.ctx = ctx;
	emu_s.n = n;
	emu_s.idle = 0;
	for (unsigned i = 0; i < n; i++) {
		emu_s.f[i].done = 0;
		emu_s.f[i].at_block = 0;
		emu_s.f[i].tid = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
	}
	for (unsigned round = 0; left; round++) {
		int any = 0;

		for (unsigned k = 0; k < warps; k++) {
			unsigned w = (round ^ round >> 1) & 1 ? warps - 1 - k : k, end = 32 * w + 32 < n ? 32 * w + 32 : n;

			for (int ran = 1; ran;) {
				ran = 0;
				for (unsigned i = 32 * w; i < end; i++) {
					emu_fiber *f = &emu_s.f[i];

					if (f->done || emu_blocked(i))
						continue;
					threadIdx = f->tid;
					blockIdx = idx;
					emu_resume(i);
					left -= f->done;
					ran = any = 1;
				}
			}
		}
		if (!any) {
			fprintf(stderr,
				"cuda_emu: the block barrier in kernel %s can never fill (a thread of its block "
				"returned before it)\n",
				emu_kernel_name());
			abort();
		}
	}
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
					emu_async_end();
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
 * must be null or inside one live device allocation (its end included, as
 * a zero-sized one's; pinned host memory, which a GPU could address, is
 * refused too: pdit only stages copies through it). */
template <typename T> static inline void emu_arg(const char *, int, const T &)
{
}

template <typename T> static inline void emu_arg(const char *kernel, int i, T *p)
{
	if (p && pd_emu_is_device && !pd_emu_is_device((const void *)p, 0)) {
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

/* A launch's arguments evaluated once, as a GPU launch evaluates them,
 * checked, then handed to every thread (each its own copies, as a GPU
 * thread has its parameters) */
template <typename K, typename... A>
static inline void emu_kernel_launch(const char *name, int coop, dim3 grid, dim3 block, K k, const A &...a)
{
	emu_args(name, a...);
	emu_run(name, coop, grid, block, [&] { k(a...); });
}

#define PD_LAUNCH(k, grid, block, s, ...) \
	((void)(s), emu_kernel_launch(#k, 0, dim3(grid), dim3(block), [](auto... v) { k(v...); }, __VA_ARGS__))
#define PD_LAUNCH_COOP(k, grid, block, s, ...) \
	((void)(s), emu_kernel_launch(#k, 1, dim3(grid), dim3(block), [](auto... v) { k(v...); }, __VA_ARGS__))

#endif /* CUDA_EMU_H */
