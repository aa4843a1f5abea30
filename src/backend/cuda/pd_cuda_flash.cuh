/*
 * pd_cuda_flash.cuh - the fused attention kernel (k_flash), included by
 * pd_cuda_kernels.cu, whose launcher runs it; and by the emulation test
 * (tests/unit/test_flash_emu.cpp), which runs this same source on the CPU
 * with a fiber for each of its lanes, so that its indexing, masking and online
 * softmax are checked where no GPU is.
 */
#ifndef PD_CUDA_FLASH_CUH
#define PD_CUDA_FLASH_CUH

/* One block of WARPS warps attends 16 WARPS query rows of one head, each
 * warp 16 of them, over the keys in tiles of 64 (FlashAttention-2's
 * forward): the
 * scores of a tile (bf16 tensor-core products, f32 accumulators) never
 * leave the registers; each row keeps its running maximum M and sum L (in
 * log2 units: exp2 of prescaled scores), rescales its outputs when M grows,
 * and divides by L at the end, writing the log-sum-exp (natural units) for
 * ring attention's merge. The probabilities enter the second product as
 * bf16 (the chunked path rounds them too), the scores stay f32.
 *
 * Register layouts are mma.m16n8k16's (PTX ISA, "matrix fragments"): with
 * g = lane / 4 and t = lane % 4, A's registers hold (row g, columns 2t..2t+1),
 * (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); B's hold (k 2t..2t+1, n g)
 * and (k 2t + 8.., n g); C's hold (row g, columns 2t, 2t + 1) and (g + 8,
 * the same). A score tile's C registers are therefore the probabilities'
 * A registers for the second product, without a trip through memory.
 *
 * The B registers come from shared memory by ldmatrix, four 8x8 matrices
 * a load, two products' worth: K's rows as they lie (a key's channels are
 * B's k), V's transposed (a key is B's k, a channel its n). Read value by
 * value, V took four 16-bit loads a product, each half a wavefront of the
 * shared memory's bandwidth, which bounds this loop rather than the
 * tensor cores.
 *
 * The tiles come by cp.async (global to shared memory, no registers in
 * between), each while the other is in use, as FlashAttention-2 orders
 * them: V's tile lands while the scores and their softmax are worked out
 * from K's, and the next K tile while P V is. A load that waited in
 * registers left the tensor cores idle for its whole trip from L2. */
#define PD_FA_KEYS 64

#ifdef PD_CUDA_EMULATE
#define PD_UNROLL_1
#else
#define PD_UNROLL_1 _Pragma("unroll 1")
/* C += A B for one warp's 16x16 A, 16x8 B (bf16) and 16x8 C (f32); the
 * emulation (tests/emu/cuda_emu.h) computes it from the same registers */
__device__ static inline void pd_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
#if __CUDA_ARCH__ < 800
	/* bf16 tensor-core products begin with sm_80: the host never launches
	 * the kernel on an older GPU (pd_backend_cuda.c) */
	(void)c, (void)a, (void)b0, (void)b1;
	__trap();
#else
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
		     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane 8 i + r names row r
 * of matrix i (16 bytes, aligned); register i of lane 4 r + c / 2 gets its
 * (r, c) and (r, c + 1), with TRANS (c, r) and (c + 1, r). sm_75 on, the
 * emulation the same from the lanes' addresses. */
#define PD_LDM_X4(q, r, p)                                                                     \
	asm volatile("ldmatrix.sync.aligned.m8n8.x4" q ".shared.b16 {%0, %1, %2, %3}, [%4];\n" \
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                          \
		     : "r"((uint32_t)__cvta_generic_to_shared(p))                              \
		     : "memory")
template <bool TRANS> __device__ static inline void pd_ldm_x4(uint32_t *r, const void *p)
{
#if __CUDA_ARCH__ < 800
	(void)r, (void)p;
	__trap();
#else
	if (TRANS)
		PD_LDM_X4(".trans", r, p);
	else
		PD_LDM_X4("", r, p);
#endif
}

/* cp.async.cg.shared.global of 16 bytes (both ends 16-byte aligned) that
 * reads BYTES of them (0 or 16: src-size) and fills the rest with zeros;
 * in flight until this thread's pd_cp_wait_all, visible to the block after
 * a barrier behind that. sm_80 on; the emulation the same, late. */
__device__ static inline void pd_cp_async16(void *dst, const void *src, int bytes)
{
#if __CUDA_ARCH__ < 800
	(void)dst, (void)src, (void)bytes;
	__trap();
#else
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
		     "l"(src), "r"(bytes)
		     : "memory");
#endif
}

__device__ static inline void pd_cp_wait_all(void)
{
#if __CUDA_ARCH__ >= 800
	asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}
#endif

/* two floats as bf16 in one register, the first in the low half */
__device__ static inline uint32_t pd_pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

/* Keys K0 .. K0 + PD_FA_KEYS of head H of X (K or V) into T by cp.async,
 * 8 values a copy, zeros past the last key (a copy of no bytes still takes
 * an address: X's first). */
template <int D>
__device__ static inline void pd_fa_tile(__nv_bfloat16 (*t)[D + 8], const __nv_bfloat16 *X, int64_t W, int64_t h,
					 int64_t k0, int64_t skv)
{
	const int c8 = threadIdx.x % (D / 8) * 8, step = blockDim.x / (D / 8);
	int row = threadIdx.x / (D / 8);
	const __nv_bfloat16 *x = X + (k0 + row) * W + h * D + c8;

	/* one copy's registers at a time: unrolled, their addresses would
	 * spill the scores' */
	PD_UNROLL_1
	for (; row < PD_FA_KEYS; row += step, x += step * W)
		pd_cp_async16(&t[row][c8], k0 + row < skv ? x : X, k0 + row < skv ? 16 : 0);
}

/* Q, K, V packed bf16 [rows, W] (head h at columns h * D); OUT f32 of row
 * stride LDO; LSE [heads][lse_ld] or NULL. D: 64 or 128. WARPS 4: 64 rows
 * a block and 3 blocks an SM (12 warps, within 168 registers); 8: 128 rows
 * and one block, whose K and V tiles serve twice the rows (half the loads
 * from L2 a product). */
template <int D, int WARPS>
__global__ static void __launch_bounds__(32 * WARPS, WARPS == 4 ? 3 : 1)
	k_flash(const __nv_bfloat16 *Q, const __nv_bfloat16 *K, const __nv_bfloat16 *V, int64_t W, float *out,
		int64_t ldo, float *lse, int64_t lse_ld, int64_t sq, int64_t skv, float scale)
{
	/* rows padded by 8 values: a warp's reads of 8 rows fall in distinct banks */
	__shared__ __align__(16) __nv_bfloat16 ks[PD_FA_KEYS][D + 8];
	__shared__ __align__(16) __nv_bfloat16 vs[PD_FA_KEYS][D + 8];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
	const int64_t h = blockIdx.y, r0 = (int64_t)blockIdx.x * 16 * WARPS + warp * 16;
	const int64_t ra = r0 + g, rb = r0 + g + 8;
	const float l2e = 1.4426950408889634f, sl2 = scale * l2e;
	uint32_t qa[D / 16][4];
	float o[D / 8][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };

	/* this warp's 16 query rows as A registers, zeros past the last row */
	for (int kk = 0; kk < D / 16; kk++) {
		const __nv_bfloat16 *qa0 = Q + ra * W + h * D + kk * 16 + 2 * t,
				    *qb0 = Q + rb * W + h * D + kk * 16 + 2 * t;

		qa[kk][0] = ra < sq ? *(const uint32_t *)qa0 : 0u;
		qa[kk][1] = rb < sq ? *(const uint32_t *)qb0 : 0u;
		qa[kk][2] = ra < sq ? *(const uint32_t *)(qa0 + 8) : 0u;
		qa[kk][3] = rb < sq ? *(const uint32_t *)(qb0 + 8) : 0u;
	}
	for (int dn = 0; dn < D / 8; dn++)
		o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;

	pd_fa_tile<D>(ks, K, W, h, 0, skv);
	for (int64_t k0 = 0; k0 < skv; k0 += PD_FA_KEYS) {
		float s[PD_FA_KEYS / 8][4];

		/* K's tile here for every warp, the last V tile read by all:
		 * this tile's values on their way */
		pd_cp_wait_all();
		__syncthreads();
		pd_fa_tile<D>(vs, V, W, h, k0, skv);

		/* S [16 rows, 64 keys] = Q K^T; a load's matrices: keys nt * 8
		 * and nt * 8 + 8 (lane bit 4), channels kk * 16 and + 8 (bit 3) */
		for (int nt = 0; nt < PD_FA_KEYS / 8; nt++)
			s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
		for (int kk = 0; kk < D / 16; kk++)
			for (int nt = 0; nt < PD_FA_KEYS / 8; nt += 2) {
				uint32_t b[4];

				pd_ldm_x4<false>(b, &ks[(nt + (lane >> 4)) * 8 + (lane & 7)][kk * 16 + (lane >> 3 & 1) * 8]);
				pd_mma_bf16(s[nt], qa[kk], b[0], b[1]);
				pd_mma_bf16(s[nt + 1], qa[kk], b[2], b[3]);
			}

		/* scaled to log2 units, keys past the last masked; each row's
		 * maximum over the quad of lanes that holds it */
		float mx[2] = { -INFINITY, -INFINITY };

		for (int nt = 0; nt < PD_FA_KEYS / 8; nt++)
			for (int c = 0; c < 4; c++) {
				int64_t key = k0 + nt * 8 + 2 * t + (c & 1);

				s[nt][c] = key < skv ? s[nt][c] * sl2 : -INFINITY;
				mx[c >> 1] = fmaxf(mx[c >> 1], s[nt][c]);
			}
		float corr[2];

		for (int i = 0; i < 2; i++) {
			mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
			mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
			mx[i] = fmaxf(mx[i], m[i]);
			/* the first tile has a key: its maximum is finite */
			corr[i] = exp2f(m[i] - mx[i]);
			m[i] = mx[i];
			l[i] *= corr[i];
		}
		for (int dn = 0; dn < D / 8; dn++) {
			o[dn][0] *= corr[0];
			o[dn][1] *= corr[0];
			o[dn][2] *= corr[1];
			o[dn][3] *= corr[1];
		}

		/* the probabilities, 16 keys at a time as P's A registers (from
		 * two score tiles), packed before the next load's addresses
		 * need registers */
		uint32_t pa[PD_FA_KEYS / 16][4];

		for (int j = 0; j < PD_FA_KEYS / 16; j++) {
			float p[2][4];

			for (int u = 0; u < 2; u++)
				for (int c = 0; c < 4; c++) {
					p[u][c] = exp2f(s[2 * j + u][c] - m[c >> 1]);
					l[c >> 1] += p[u][c];
				}
			pa[j][0] = pd_pack_bf16(p[0][0], p[0][1]);
			pa[j][1] = pd_pack_bf16(p[0][2], p[0][3]);
			pa[j][2] = pd_pack_bf16(p[1][0], p[1][1]);
			pa[j][3] = pd_pack_bf16(p[1][2], p[1][3]);
		}

		/* V's tile here, K's read by all: the next K tile on its way */
		pd_cp_wait_all();
		__syncthreads();
		if (k0 + PD_FA_KEYS < skv)
			pd_fa_tile<D>(ks, K, W, h, k0 + PD_FA_KEYS, skv);

		/* O += P V, 16 keys a step; a load's matrices: keys j * 16 and
		 * + 8 (lane bit 3), channels dn * 8 and dn * 8 + 8 (bit 4),
		 * transposed */
		for (int j = 0; j < PD_FA_KEYS / 16; j++)
			for (int dn = 0; dn < D / 8; dn += 2) {
				uint32_t b[4];

				pd_ldm_x4<true>(b, &vs[j * 16 + (lane >> 3 & 1) * 8 + (lane & 7)][(dn + (lane >> 4)) * 8]);
				pd_mma_bf16(o[dn], pa[j], b[0], b[1]);
				pd_mma_bf16(o[dn + 1], pa[j], b[2], b[3]);
			}
	}

	/* each row's sum over its quad, then the outputs and log-sum-exp */
	for (int i = 0; i < 2; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
	}
	for (int i = 0; i < 2; i++) {
		int64_t r = i ? rb : ra;
		float inv = 1.0f / l[i];

		if (r >= sq)
			continue;
		for (int dn = 0; dn < D / 8; dn++) {
			float *y = out + r * ldo + h * D + dn * 8 + 2 * t;

			y[0] = o[dn][2 * i] * inv;
			y[1] = o[dn][2 * i + 1] * inv;
		}
		if (lse && t == 0)
			lse[h * lse_ld + r] = (m[i] + log2f(l[i])) / l2e;
	}
}

#endif /* PD_CUDA_FLASH_CUH */
