/*
 * pd_cpu_attention.c - softmax attention in blocks of queries and keys
 * (flash-style online softmax), and ring attention's merge.
 *
 * Each thread takes one head's block of queries at a time and walks the
 * keys in blocks: S = Q Kᵀ and O += P V are oneDNN products on one thread,
 * the running maximum and sum per query row fold each block's scores in.
 * A block's scores, probabilities and output stay in the thread's cache;
 * no row of scores over the whole sequence exists. The operands are copied
 * head-major (and to bf16) a group of heads at a time, so memory stays
 * bounded whatever the length.
 */
#include "pd_cpu.h"
#include "pd_util.h"

#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* How a block's probabilities are written for P V: f32, bf16 values held
 * as f32 (bf16 compute without bf16 products), or bf16. */
enum { PD_P_F32, PD_P_ROUNDED, PD_P_BF16 };

/* ----------------------------------------------------------------------- */
/* Exponentials of a score row                                             */
/* ----------------------------------------------------------------------- */

/* exp(d) for softmax arguments (d <= 0), branch-free so that loops over it
 * vectorise: SLEEF's expf_u10 reduction and polynomial, rounding by the
 * 1.5 x 2^23 trick instead of rintf (no SSE4 at the baseline). */
static inline float pd_exp_vec(float d)
{
	const float r_ln2 = 1.442695040888963407f, l2u = 0.693145751953125f, l2l = 1.428606765330187045e-06f;
	const float magic = 12582912.0f;
	union { float f; int32_t i; } pw;
	float q, s, u;

	d = d < -87.0f ? -87.0f : d;
	q = (d * r_ln2 + magic) - magic;
	s = d - q * l2u;
	s = s - q * l2l;
	u = 0.000198527617612853646278381f;
	u = u * s + 0.00139304355252534151077271f;
	u = u * s + 0.00833336077630519866943359f;
	u = u * s + 0.0416664853692054748535156f;
	u = u * s + 0.166666671633720397949219f;
	u = u * s + 0.5f;
	u = 1.0f + (s * s * u + s);
	pw.i = ((int32_t)q + 127) << 23;
	return u * pw.f;
}

static float pd_max_row(const float *s, int64_t n)
{
	float m = -INFINITY;

	for (int64_t j = 0; j < n; j++)
		m = s[j] > m ? s[j] : m;
	return m;
}

/* exp(s[j] scale - m) for j < n into P as MODE says; returns their sum
 * (of the f32 values, before any rounding). */
static float pd_exp_row(const float *s, int64_t n, float scale, float m, int mode, void *p)
{
	float sum = 0.0f;

	for (int64_t j = 0; j < n; j++) {
		union { float f; uint32_t u; } e = { .f = pd_exp_vec(s[j] * scale - m) };

		sum += e.f;
		if (mode == PD_P_BF16) {
			((uint16_t *)p)[j] = (uint16_t)pd_bf16_bits(e.u);
		} else {
			if (mode == PD_P_ROUNDED)
				e.u = pd_bf16_bits(e.u) << 16;
			((float *)p)[j] = e.f;
		}
	}
	return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with AVX-512, sixteen lanes at a time: the exponential is
 * pd_exp_vec's reduction and polynomial with fused multiply-adds (a few
 * ulps apart from it), the sum kept per lane. The compiler does not
 * vectorise the scalar loops (their sum and maximum are ordered). */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static float pd_max_row_avx512(const float *s, int64_t n)
{
	const __m512 ninf = _mm512_set1_ps(-INFINITY);
	__m512 vm = ninf;

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);

		vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, k, s + j));
	}
	return _mm512_reduce_max_ps(vm);
}

/* The loop of pd_exp_row_avx512 (NATIVE 0) and of its AVX-512 BF16 form
 * (NATIVE 1): bf16 probabilities by the BF16 conversion (round to nearest
 * even as the integer rounding; it flushes subnormals, which these
 * exponentials, at least e^-87, never are), 2^q by scalef, exactly the
 * product with the power the integer construction makes. A macro: the
 * two take different targets. */
#define PD_EXP_ROW_AVX512(native)                                                                                  \
{                                                                                                             \
	const __m512 lo = _mm512_set1_ps(-87.0f), r_ln2 = _mm512_set1_ps(1.442695040888963407f);              \
	const __m512 l2u = _mm512_set1_ps(0.693145751953125f), l2l = _mm512_set1_ps(1.428606765330187045e-06f); \
	const __m512 one = _mm512_set1_ps(1.0f), c0 = _mm512_set1_ps(0.000198527617612853646278381f);         \
	const __m512 c1 = _mm512_set1_ps(0.00139304355252534151077271f), c2 = _mm512_set1_ps(0.00833336077630519866943359f); \
	const __m512 c3 = _mm512_set1_ps(0.0416664853692054748535156f), c4 = _mm512_set1_ps(0.166666671633720397949219f); \
	const __m512 c5 = _mm512_set1_ps(0.5f);                                                               \
	const __m512i rnd = _mm512_set1_epi32(0x7fff), bit = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(127); \
	const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);                                               \
	__m512 vs = _mm512_setzero_ps(), vsc = _mm512_set1_ps(scale), vmx = _mm512_set1_ps(m);                \
                                                                                                              \
	for (int64_t j = 0; j < n; j += 16) {                                                                 \
		__mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);             \
		__m512 d = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + j), vsc, vmx), q, t, u, e;            \
		__m512i pw, b;                                                                                \
                                                                                                              \
		d = _mm512_max_ps(d, lo);                                                                     \
		q = _mm512_roundscale_ps(_mm512_mul_ps(d, r_ln2), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); \
		t = _mm512_fnmadd_ps(q, l2u, d);                                                              \
		t = _mm512_fnmadd_ps(q, l2l, t);                                                              \
		u = _mm512_fmadd_ps(c0, t, c1);                                                               \
		u = _mm512_fmadd_ps(u, t, c2);                                                                \
		u = _mm512_fmadd_ps(u, t, c3);                                                                \
		u = _mm512_fmadd_ps(u, t, c4);                                                                \
		u = _mm512_fmadd_ps(u, t, c5);                                                                \
		u = _mm512_add_ps(one, _mm512_fmadd_ps(_mm512_mul_ps(t, t), u, t));                           \
		if (native) {                                                                                 \
			e = _mm512_maskz_scalef_ps(k, u, q);                                                  \
		} else {                                                                                      \
			pw = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(q), bias), 23);            \
			e = _mm512_maskz_mul_ps(k, u, _mm512_castsi512_ps(pw));                               \
		}                                                                                             \
		vs = _mm512_add_ps(vs, e);                                                                    \
		if (mode == PD_P_F32) {                                                                       \
			_mm512_mask_storeu_ps((float *)p + j, k, e);                                          \
			continue;                                                                             \
		}                                                                                             \
		if (native && mode == PD_P_BF16) {                                                            \
			_mm256_mask_storeu_epi16((uint16_t *)p + j, k, (__m256i)_mm512_cvtneps_pbh(e));       \
			continue;                                                                             \
		}                                                                                             \
		b = _mm512_castps_si512(e);                                                                   \
		b = _mm512_add_epi32(b, _mm512_add_epi32(rnd, _mm512_and_si512(_mm512_srli_epi32(b, 16), bit))); \
		if (mode == PD_P_BF16)                                                                        \
			_mm256_mask_storeu_epi16((uint16_t *)p + j, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16))); \
		else                                                                                          \
			_mm512_mask_storeu_ps((float *)p + j, k, _mm512_castsi512_ps(_mm512_and_si512(b, hi))); \
	}                                                                                                     \
	return _mm512_reduce_add_ps(vs);                                                                      \
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static float pd_exp_row_avx512(const float *s, int64_t n, float scale, float m, int mode, void *p)
PD_EXP_ROW_AVX512(0)

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
static float pd_exp_row_avx512bf16(const float *s, int64_t n, float scale, float m, int mode, void *p)
PD_EXP_ROW_AVX512(1)

/* And with AVX2 and FMA, eight lanes at a time (CPUs without AVX-512). */
__attribute__((target("avx2,fma")))
static __m256i pd_tail_mask_avx2(int64_t left)
{
	const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);

	return _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : (int)left), idx);
}

__attribute__((target("avx2,fma")))
static float pd_max_row_avx2(const float *s, int64_t n)
{
	__m256 vm = _mm256_set1_ps(-INFINITY);
	__m128 h;
	int64_t j = 0;

	for (; j + 8 <= n; j += 8)
		vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
	if (j < n) {
		__m256i k = pd_tail_mask_avx2(n - j);

		vm = _mm256_max_ps(vm, _mm256_blendv_ps(vm, _mm256_maskload_ps(s + j, k), _mm256_castsi256_ps(k)));
	}
	h = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
	return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma")))
static float pd_exp_row_avx2(const float *s, int64_t n, float scale, float m, int mode, void *p)
{
	const __m256 lo = _mm256_set1_ps(-87.0f), r_ln2 = _mm256_set1_ps(1.442695040888963407f);
	const __m256 l2u = _mm256_set1_ps(0.693145751953125f), l2l = _mm256_set1_ps(1.428606765330187045e-06f);
	const __m256 one = _mm256_set1_ps(1.0f), c0 = _mm256_set1_ps(0.000198527617612853646278381f);
	const __m256 c1 = _mm256_set1_ps(0.00139304355252534151077271f), c2 = _mm256_set1_ps(0.00833336077630519866943359f);
	const __m256 c3 = _mm256_set1_ps(0.0416664853692054748535156f), c4 = _mm256_set1_ps(0.166666671633720397949219f);
	const __m256 c5 = _mm256_set1_ps(0.5f);
	const __m256i rnd = _mm256_set1_epi32(0x7fff), bit = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(127);
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	__m256 vs = _mm256_setzero_ps(), vsc = _mm256_set1_ps(scale), vmx = _mm256_set1_ps(m);
	__m128 h;

	for (int64_t j = 0; j < n; j += 8) {
		__m256i k = pd_tail_mask_avx2(n - j), pw, b;
		__m256 d = _mm256_fmsub_ps(_mm256_maskload_ps(s + j, k), vsc, vmx), q, t, u, e;

		d = _mm256_max_ps(d, lo);
		q = _mm256_round_ps(_mm256_mul_ps(d, r_ln2), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		t = _mm256_fnmadd_ps(q, l2u, d);
		t = _mm256_fnmadd_ps(q, l2l, t);
		u = _mm256_fmadd_ps(c0, t, c1);
		u = _mm256_fmadd_ps(u, t, c2);
		u = _mm256_fmadd_ps(u, t, c3);
		u = _mm256_fmadd_ps(u, t, c4);
		u = _mm256_fmadd_ps(u, t, c5);
		u = _mm256_add_ps(one, _mm256_fmadd_ps(_mm256_mul_ps(t, t), u, t));
		pw = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(q), bias), 23);
		e = _mm256_and_ps(_mm256_mul_ps(u, _mm256_castsi256_ps(pw)), _mm256_castsi256_ps(k));
		vs = _mm256_add_ps(vs, e);
		if (mode == PD_P_F32) {
			_mm256_maskstore_ps((float *)p + j, k, e);
			continue;
		}
		b = _mm256_castps_si256(e);
		b = _mm256_add_epi32(b, _mm256_add_epi32(rnd, _mm256_and_si256(_mm256_srli_epi32(b, 16), bit)));
		if (mode == PD_P_ROUNDED) {
			_mm256_maskstore_ps((float *)p + j, k, _mm256_castsi256_ps(_mm256_and_si256(b, hi)));
		} else {
			/* bf16 (only with AVX-512 turned off on a CPU that has it) */
			__m128i w;
			uint16_t t16[8];

			b = _mm256_srli_epi32(b, 16);
			w = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
			if (n - j >= 8) {
				_mm_storeu_si128((__m128i *)((uint16_t *)p + j), w);
			} else {
				_mm_storeu_si128((__m128i *)t16, w);
				memcpy((uint16_t *)p + j, t16, (size_t)(n - j) * sizeof(uint16_t));
			}
		}
	}
	h = _mm_add_ps(_mm256_castps256_ps128(vs), _mm256_extractf128_ps(vs, 1));
	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
	return _mm_cvtss_f32(h);
}
#endif

/* One query row's scores against a block of keys folded into its running
 * maximum *M and sum *L (online softmax): S[0..n) times SCALE, whose
 * exponentials against the new maximum go to P[0..n) as MODE says, zeros
 * to P[n..np) (the padding keys). Returns the factor the row's output so
 * far is multiplied by (exp(old maximum - new)). A row whose scores are all
 * -inf so far (masked) adds nothing. */
static float pd_online_row(const struct pd_cpu *cpu, const float *s, int64_t n, int64_t np, float scale, int mode,
			   void *p, float *m, float *l)
{
	size_t es = mode == PD_P_BF16 ? 2 : 4;
	float mx, mnew, alpha, sum;

#if defined(__x86_64__) && defined(__GNUC__)
	if (cpu->avx512)
		mx = pd_max_row_avx512(s, n);
	else if (cpu->avx2)
		mx = pd_max_row_avx2(s, n);
	else
#endif
		mx = pd_max_row(s, n);
	mx *= scale;
	mnew = mx > *m ? mx : *m;
	if (mnew == -INFINITY) {
		memset(p, 0, (size_t)np * es);
		return 1.0f;
	}
	alpha = *m == -INFINITY ? 0.0f : pd_exp_vec(*m - mnew);
#if defined(__x86_64__) && defined(__GNUC__)
	if (cpu->avx512)
		sum = cpu->avx512bf16 ? pd_exp_row_avx512bf16(s, n, scale, mnew, mode, p) :
					pd_exp_row_avx512(s, n, scale, mnew, mode, p);
	else if (cpu->avx2)
		sum = pd_exp_row_avx2(s, n, scale, mnew, mode, p);
	else
#endif
		sum = pd_exp_row(s, n, scale, mnew, mode, p);
	if (np > n)
		memset((char *)p + (size_t)n * es, 0, (size_t)(np - n) * es);
	*l = *l * alpha + sum;
	*m = mnew;
	return alpha;
}

/* ----------------------------------------------------------------------- */
/* The block products                                                      */
/* ----------------------------------------------------------------------- */

/* One thread's memory objects of a block product: A, B, C and scratchpad,
 * their handles set per call. */
enum { PD_AG_A, PD_AG_B, PD_AG_C, PD_AG_SCRATCH, PD_AG_MEMS };

static void pd_attn_gemm_destroy(struct pd_attn_gemm *g)
{
	for (int i = 0; g->mem && i < g->nthr * PD_AG_MEMS; i++)
		if (g->mem[i])
			dnnl_memory_destroy(g->mem[i]);
	free(g->mem);
	if (g->prim)
		dnnl_primitive_destroy(g->prim);
	memset(g, 0, sizeof(*g));
}

void pd_cpu_attn_free(struct pd_cpu *cpu)
{
	for (int i = 0; i < cpu->n_agemm; i++)
		pd_attn_gemm_destroy(&cpu->agemm[i]);
	cpu->n_agemm = 0;
	for (int i = 0; i < cpu->n_astream; i++)
		dnnl_stream_destroy(cpu->astream[i]);
	free(cpu->astream);
	cpu->astream = NULL;
	cpu->n_astream = 0;
	free(cpu->aws);
	cpu->aws = NULL;
	cpu->aws_cap = 0;
	free(cpu->abf);
	cpu->abf = NULL;
	cpu->abf_cap = 0;
}

/* The product C[m, n] = A[m, k] B on one thread, for NTHR threads running
 * it at once, all contiguous: B is [k, n] rows, or (trans_b) [n, k] rows;
 * ACC adds to C. Cached by shape. Made with a scratchpad the caller gives,
 * so that the threads each use their own. */
static struct pd_attn_gemm *pd_attn_gemm_get(struct pd_backend *be, int64_t m, int64_t n, int64_t k, int trans_b,
					     int acc, dnnl_data_type_t dt, int nthr)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_attn_gemm *g = NULL;
	dnnl_memory_desc_t a_md, b_md, c_md, s_md;
	dnnl_dims_t ad = { m, k }, bd = { k, n }, cd = { m, n }, bs_t = { 1, k };
	dnnl_matmul_desc_t desc;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_status_t st;
	int saved = omp_get_max_threads();

	for (int i = 0; i < cpu->n_agemm; i++) {
		struct pd_attn_gemm *x = &cpu->agemm[i];

		if (x->m == m && x->n == n && x->k == k && x->trans_b == trans_b && x->acc == acc && x->dt == dt &&
		    x->nthr >= nthr) {
			x->used = ++cpu->clock;
			return x;
		}
	}
	if (cpu->n_agemm < PD_AGEMM_CACHE) {
		g = &cpu->agemm[cpu->n_agemm++];
	} else {
		g = &cpu->agemm[0];
		for (int i = 1; i < PD_AGEMM_CACHE; i++)
			if (cpu->agemm[i].used < g->used)
				g = &cpu->agemm[i];
		pd_attn_gemm_destroy(g);
	}
	be->allocations++;
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dt, dnnl_ab), fail);
	if (trans_b)
		DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&b_md, 2, bd, dt, bs_t), fail);
	else
		DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dt, dnnl_ab), fail);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_f32, dnnl_ab), fail);
	DNNL_TRY(be, dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md), fail);
	DNNL_TRY(be, dnnl_primitive_attr_create(&attr), fail);
	DNNL_TRY(be, dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), fail);
	if (acc) {
		DNNL_TRY(be, dnnl_post_ops_create(&po), fail);
		DNNL_TRY(be, dnnl_post_ops_append_sum(po, 1.0f), fail);
		DNNL_TRY(be, dnnl_primitive_attr_set_post_ops(attr, po), fail);
	}
	/* made for the one thread that runs it: oneDNN divides a product's
	 * work by the thread count it was made for, and inside the parallel
	 * region it runs on the calling thread alone */
	omp_set_num_threads(1);
	st = dnnl_primitive_desc_create(&pd, &desc, attr, cpu->eng, NULL);
	if (st == dnnl_success)
		st = dnnl_primitive_create(&g->prim, pd);
	omp_set_num_threads(saved);
	if (st != dnnl_success) {
		pd_backend_fail(be, "oneDNN error %d making an attention product", (int)st);
		goto fail;
	}
	if (dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0))
		s_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	else
		memset(&s_md, 0, sizeof(s_md));
	g->scratch = dnnl_memory_desc_get_size(&s_md);
	g->mem = calloc((size_t)nthr * PD_AG_MEMS, sizeof(*g->mem));
	if (!g->mem) {
		pd_backend_fail(be, "out of memory");
		goto fail;
	}
	g->nthr = nthr;
	for (int t = 0; t < nthr; t++) {
		dnnl_memory_t *mt = g->mem + t * PD_AG_MEMS;

		DNNL_TRY(be, dnnl_memory_create(&mt[PD_AG_A], &a_md, cpu->eng, DNNL_MEMORY_NONE), fail);
		DNNL_TRY(be, dnnl_memory_create(&mt[PD_AG_B], &b_md, cpu->eng, DNNL_MEMORY_NONE), fail);
		DNNL_TRY(be, dnnl_memory_create(&mt[PD_AG_C], &c_md, cpu->eng, DNNL_MEMORY_NONE), fail);
		if (g->scratch)
			DNNL_TRY(be, dnnl_memory_create(&mt[PD_AG_SCRATCH], &s_md, cpu->eng, DNNL_MEMORY_NONE), fail);
	}
	g->m = m;
	g->n = n;
	g->k = k;
	g->trans_b = trans_b;
	g->acc = acc;
	g->dt = dt;
	g->used = ++cpu->clock;
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	if (po)
		dnnl_post_ops_destroy(po);
	return g;
fail:
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (po)
		dnnl_post_ops_destroy(po);
	pd_attn_gemm_destroy(g);
	/* a half-made entry must not be found again */
	*g = cpu->agemm[--cpu->n_agemm];
	memset(&cpu->agemm[cpu->n_agemm], 0, sizeof(*g));
	return NULL;
}

/* Runs G on thread T (inside the parallel region: oneDNN then runs it on
 * this thread alone) with its scratchpad SCRATCH; oneDNN's status. */
static dnnl_status_t pd_attn_gemm_run(struct pd_cpu *cpu, struct pd_attn_gemm *g, int t, const void *a, const void *b, float *c,
			    void *scratch)
{
	dnnl_memory_t *mt = g->mem + t * PD_AG_MEMS;
	dnnl_status_t st;
	dnnl_exec_arg_t args[4] = {
		{ DNNL_ARG_SRC, mt[PD_AG_A] },
		{ DNNL_ARG_WEIGHTS, mt[PD_AG_B] },
		{ DNNL_ARG_DST, mt[PD_AG_C] },
		{ DNNL_ARG_SCRATCHPAD, mt[PD_AG_SCRATCH] },
	};

	if ((st = dnnl_memory_set_data_handle(mt[PD_AG_A], (void *)a)) != dnnl_success ||
	    (st = dnnl_memory_set_data_handle(mt[PD_AG_B], (void *)b)) != dnnl_success ||
	    (st = dnnl_memory_set_data_handle(mt[PD_AG_C], c)) != dnnl_success ||
	    (g->scratch && (st = dnnl_memory_set_data_handle(mt[PD_AG_SCRATCH], scratch)) != dnnl_success))
		return st;
	if ((st = dnnl_primitive_execute(g->prim, cpu->astream[t], g->scratch ? 4 : 3, args)) != dnnl_success)
		return st;
	return dnnl_stream_wait(cpu->astream[t]);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The block products of our own on AVX-512 BF16 (bf16 operands, f32
 * sums): oneDNN 2.6 multiplied a block at 0.7-0.8 of its rate on large
 * products, a reduction of only head_dim for the scores and its copy of
 * every block of keys and values into its own layout per call taking a
 * sixth of attention's time. Here B is packed in pairs once per head
 * (pd_attn_pack_pairs) and a tile of 6 rows x 64 columns stays in 24
 * registers over the whole reduction. */
#define PD_DP_ROWS 6

/* C[R, 64] (+)= A[R, 2 k2] B[2 k2, 64]: A bf16 rows of stride LDA, B in
 * pairs [k2][ldb][2] from its first column, C f32 rows of stride LDC. */
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) static inline void
pd_dp_tile(const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, int64_t k2, float *c, int64_t ldc, int R,
	   int acc)
{
	__m512 s[PD_DP_ROWS][4];

	for (int r = 0; r < R; r++)
		for (int u = 0; u < 4; u++)
			s[r][u] = acc ? _mm512_loadu_ps(c + r * ldc + 16 * u) : _mm512_setzero_ps();
	for (int64_t p = 0; p < k2; p++) {
		const uint16_t *bp = b + (size_t)p * (size_t)ldb * 2;
		__m512bh b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 32);
		__m512bh b2 = (__m512bh)_mm512_loadu_si512(bp + 64), b3 = (__m512bh)_mm512_loadu_si512(bp + 96);

		for (int r = 0; r < R; r++) {
			int32_t pair;
			__m512bh x;

			memcpy(&pair, a + r * lda + 2 * p, sizeof(pair));
			x = (__m512bh)_mm512_set1_epi32(pair);
			s[r][0] = _mm512_dpbf16_ps(s[r][0], x, b0);
			s[r][1] = _mm512_dpbf16_ps(s[r][1], x, b1);
			s[r][2] = _mm512_dpbf16_ps(s[r][2], x, b2);
			s[r][3] = _mm512_dpbf16_ps(s[r][3], x, b3);
		}
	}
	for (int r = 0; r < R; r++)
		for (int u = 0; u < 4; u++)
			_mm512_storeu_ps(c + r * ldc + 16 * u, s[r][u]);
}

/* C[m, n] (+)= A[m, 2 k2] B: B in pairs [k2][n][2], N a multiple of 64;
 * the columns outer, so that a strip of B stays in the core's cache while
 * the rows go by. */
#define PD_DP_GEMM(name, acc)                                                                                      \
	__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void name(                                  \
		const uint16_t *a, int64_t lda, const uint16_t *b, int64_t n, int64_t k2, float *c, int64_t ldc,  \
		int64_t m)                                                                                         \
	{                                                                                                          \
		for (int64_t c0 = 0; c0 < n; c0 += 64)                                                             \
			for (int64_t r0 = 0; r0 < m; r0 += PD_DP_ROWS) {                                           \
				const uint16_t *ar = a + r0 * lda, *bc = b + c0 * 2;                               \
				float *cr = c + r0 * ldc + c0;                                                     \
				switch (m - r0 < PD_DP_ROWS ? (int)(m - r0) : PD_DP_ROWS) {                        \
				case 6: pd_dp_tile(ar, lda, bc, n, k2, cr, ldc, 6, acc); break;                    \
				case 5: pd_dp_tile(ar, lda, bc, n, k2, cr, ldc, 5, acc); break;                    \
				case 4: pd_dp_tile(ar, lda, bc, n, k2, cr, ldc, 4, acc); break;                    \
				case 3: pd_dp_tile(ar, lda, bc, n, k2, cr, ldc, 3, acc); break;                    \
				case 2: pd_dp_tile(ar, lda, bc, n, k2, cr, ldc, 2, acc); break;                    \
				default: pd_dp_tile(ar, lda, bc, n, k2, cr, ldc, 1, acc); break;                   \
				}                                                                                  \
			}                                                                                          \
	}
PD_DP_GEMM(pd_dp_gemm, 0)
PD_DP_GEMM(pd_dp_gemm_acc, 1)
#endif

/* ----------------------------------------------------------------------- */
/* Attention                                                               */
/* ----------------------------------------------------------------------- */

/* ROWS rows of SRC (row stride LD) as the products' operands, head by head:
 * DST is [heads][rows_p][head_dim], the rows past ROWS zero. */
static void pd_attn_pack(struct pd_cpu *cpu, int mode, void *dst, const float *src, int64_t ld, int64_t rows,
			 int64_t rows_p, int heads, int head_dim)
{
	size_t es = mode == PD_P_BF16 ? 2 : 4;

#pragma omp parallel for collapse(2) schedule(static)
	for (int h = 0; h < heads; h++) {
		for (int64_t r = 0; r < rows_p; r++) {
			char *d = (char *)dst + (((size_t)h * (size_t)rows_p + (size_t)r) * (size_t)head_dim) * es;
			const float *s = src + r * ld + (int64_t)h * head_dim;

			if (r >= rows)
				memset(d, 0, (size_t)head_dim * es);
			else if (mode == PD_P_F32)
				memcpy(d, s, (size_t)head_dim * sizeof(float));
			else if (mode == PD_P_ROUNDED)
				pd_cpu_round_bf16_row(cpu, (float *)d, s, head_dim);
			else
				pd_cpu_bf16_row(cpu, (uint16_t *)d, s, head_dim);
		}
	}
}

/* ROWS rows of SRC (row stride LD) in bf16 pairs for pd_dp_gemm, head by
 * head in blocks of BLK rows (the rows past ROWS zero): keys (VALUES 0) as
 * [head][block][head_dim / 2][BLK][2], the pairs along head_dim (the
 * scores' reduction); values as [head][block][BLK / 2][head_dim][2], the
 * pairs along the rows (P V's reduction). A block's place is a plain
 * head-major block's. */
static void pd_attn_pack_pairs(struct pd_cpu *cpu, uint16_t *dst, const float *src, int64_t ld, int64_t rows,
			       int64_t rows_p, int64_t blk, int heads, int head_dim, int values)
{
	int64_t hd = head_dim, steps = values ? rows_p / 2 : rows_p;

	/* a row's bf16 values in order are its pairs along head_dim: keys
	 * scatter them 32 bits at a time; values interleave two rows */
#pragma omp parallel for collapse(2) schedule(static)
	for (int h = 0; h < heads; h++) {
		for (int64_t i = 0; i < steps; i++) {
			int64_t r = values ? 2 * i : i, c = r % blk;
			uint32_t *d = (uint32_t *)(dst + ((size_t)h * (size_t)rows_p + (size_t)(r - c)) * (size_t)hd);
			uint16_t b0[hd], b1[hd];

			for (int k = 0; k < 1 + values; k++) {
				uint16_t *b = k ? b1 : b0;

				if (r + k < rows)
					pd_cpu_bf16_row(cpu, b, src + (r + k) * ld + (int64_t)h * hd, hd);
				else
					memset(b, 0, sizeof(uint16_t) * (size_t)hd);
			}
			if (values) {
				for (int64_t x = 0; x < hd; x++)
					d[(c >> 1) * hd + x] = (uint32_t)b0[x] | (uint32_t)b1[x] << 16;
			} else {
				for (int64_t p = 0; p < hd / 2; p++) {
					uint32_t u;

					memcpy(&u, b0 + 2 * p, sizeof(u));
					d[p * blk + c] = u;
				}
			}
		}
	}
}

/* A count of N cut into blocks of at most B, as equal as the count of
 * blocks allows: sets *nb and returns the block size. */
static int64_t pd_attn_blocks(int64_t n, int64_t b, int64_t *nb)
{
	*nb = (n + b - 1) / b;
	return (n + *nb - 1) / *nb;
}

/* What one block of queries needs besides the operands. */
struct pd_attn_job {
	struct pd_attn_gemm *gs, *gpv;  /* S = Q Kᵀ and O += P V for a block */
	const char *q, *k, *v;          /* operands of heads h0.., [group][rows_p][head_dim] */
	int h0;                         /* the first head of the group packed in q, k, v */
	int64_t sq, skv;                /* queries and keys */
	int64_t bq, bk;                 /* queries and keys per block */
	int64_t nqb, nkb;               /* blocks of each */
	int64_t sqp, skvp;              /* rows of the operands, padded to whole blocks */
	int heads, head_dim;            /* the heads, each attending on its own */
	int mode;                       /* PD_P_*: the operands' and probabilities' type */
	int causal;                     /* query i sees keys 0..i only */
	int own;                        /* the block products are pd_dp_gemm's (k and v packed in pairs),
					 * not gs and gpv */
	float scale;                    /* the softmax's factor on the scores: the attention's
					 * scale, or 1 where scale_in was applied first */
	float scale_in;                 /* the attention's scale, applied before bias and mask */
	const float *bias;              /* [heads, sq, skv] added to the scaled scores, or NULL */
	size_t es;                      /* bytes of an operand element */
	size_t ws;                      /* bytes of one thread's working memory */
	float *out;                     /* [sq, heads * head_dim], row stride ldo */
	float *lse;                     /* [heads, sq] log-sum-exp, or NULL */
	int64_t ldo;                    /* out's row stride */
};

/* Head H's block QB of queries against every key, on thread T; oneDNN's
 * status. */
static dnnl_status_t pd_attn_block(struct pd_cpu *cpu, const struct pd_attn_job *j, int t, int h, int64_t qb)
{
	char *ws = (char *)cpu->aws + (size_t)t * j->ws;
	float *S = (float *)ws, *O, *m, *l;
	char *P;
	void *scratch;
	int64_t i0 = qb * j->bq, rows = j->sq - i0 < j->bq ? j->sq - i0 : j->bq, hd = j->head_dim;
	const char *qblk = j->q + ((size_t)(h - j->h0) * (size_t)j->sqp + (size_t)i0) * (size_t)hd * j->es;
	dnnl_status_t st;

	P = ws + PD_ALIGN64((size_t)(j->bq * j->bk) * sizeof(float));
	O = (float *)(P + PD_ALIGN64((size_t)(j->bq * j->bk) * j->es));
	m = O + j->bq * hd;
	l = m + j->bq;
	scratch = j->own ? NULL :
		  (char *)ws + j->ws - PD_ALIGN64(j->gs->scratch > j->gpv->scratch ? j->gs->scratch : j->gpv->scratch);
	memset(O, 0, sizeof(float) * (size_t)(j->bq * hd));
	for (int64_t r = 0; r < j->bq; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
	}
	for (int64_t kb = 0; kb < j->nkb; kb++) {
		int64_t j0 = kb * j->bk, nv = j->skv - j0 < j->bk ? j->skv - j0 : j->bk;
		size_t koff = ((size_t)(h - j->h0) * (size_t)j->skvp + (size_t)j0) * (size_t)hd * j->es;

		/* keys after every query of the block are masked for all its rows */
		if (j->causal && j0 > i0 + rows - 1)
			break;
#if defined(__x86_64__) && defined(__GNUC__)
		if (j->own)
			pd_dp_gemm((const uint16_t *)qblk, hd, (const uint16_t *)(j->k + koff), j->bk, hd / 2, S, j->bk,
				   j->bq);
		else
#endif
		if ((st = pd_attn_gemm_run(cpu, j->gs, t, qblk, j->k + koff, S, scratch)) != dnnl_success)
			return st;
		if (j->bias || j->causal) {
			for (int64_t r = 0; r < rows; r++) {
				float *row = S + r * j->bk;
				const float *b = j->bias ? j->bias + ((int64_t)h * j->sq + i0 + r) * j->skv + j0 : NULL;

				for (int64_t c = 0; c < nv; c++)
					row[c] = b ? row[c] * j->scale_in + b[c] : row[c] * j->scale_in;
				/* -inf: e^-87 (1e-38) next to a finite maximum, 0 beside the
				 * row's weight; a row of nothing else adds nothing */
				if (j->causal)
					for (int64_t c = i0 + r + 1 - j0 < 0 ? 0 : i0 + r + 1 - j0; c < nv; c++)
						row[c] = -INFINITY;
			}
		}
		for (int64_t r = 0; r < j->bq; r++) {
			float a = pd_online_row(cpu, S + r * j->bk, nv, j->bk, j->scale, j->mode,
						P + (size_t)(r * j->bk) * j->es, &m[r], &l[r]);

			if (a != 1.0f)
				for (int64_t c = 0; c < hd; c++)
					O[r * hd + c] *= a;
		}
#if defined(__x86_64__) && defined(__GNUC__)
		if (j->own)
			pd_dp_gemm_acc((const uint16_t *)P, j->bk, (const uint16_t *)(j->v + koff), hd, j->bk / 2, O, hd,
				       j->bq);
		else
#endif
		if ((st = pd_attn_gemm_run(cpu, j->gpv, t, P, j->v + koff, O, scratch)) != dnnl_success)
			return st;
	}
	for (int64_t r = 0; r < rows; r++) {
		float *o = j->out + (i0 + r) * j->ldo + (int64_t)h * hd, f = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;

		for (int64_t c = 0; c < hd; c++)
			o[c] = O[r * hd + c] * f;
		if (j->lse)
			j->lse[(int64_t)h * j->sq + i0 + r] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
	}
	return dnnl_success;
}

static void pd_cpu_attention_impl(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
				  int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
				  int64_t skv, int heads, int head_dim, float scale, const float *bias, int causal)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_attn_job j = { 0 };
	dnnl_data_type_t dt = pd_cpu_mm_type(be);
	int nthr = omp_get_max_threads(), hg;
	int64_t W = (int64_t)heads * head_dim;
	dnnl_status_t failed = dnnl_success;
	size_t scratch, per_head;

	if (be->failed || sq == 0)
		return;
	/* a causal mask counted as the full product */
	be->flop += 4.0 * (double)sq * (double)skv * (double)W;
	if (skv == 0) {
		/* no keys: nothing to attend to (ring chunks may be empty) */
		for (int64_t i = 0; i < sq; i++)
			memset(out + i * ldo, 0, sizeof(float) * (size_t)W);
		for (int64_t i = 0; lse && i < (int64_t)heads * sq; i++)
			lse[i] = -INFINITY;
		return;
	}
	j.mode = be->compute != PD_BF16 ? PD_P_F32 : dt == dnnl_bf16 ? PD_P_BF16 : PD_P_ROUNDED;
	j.es = pd_cpu_operand_size(be);
	j.sq = sq;
	j.skv = skv;
	j.heads = heads;
	j.head_dim = head_dim;
	j.bq = pd_attn_blocks(sq, cpu->attn_qblock, &j.nqb);
	j.bk = pd_attn_blocks(skv, cpu->attn_kblock, &j.nkb);
	/* our own products take bf16 blocks of whole 64-key strips and heads
	 * of whole 64-column strips */
	j.own = j.mode == PD_P_BF16 && cpu->avx512bf16 && head_dim % 64 == 0;
	if (j.own) {
		/* fewer blocks where the wider ones cover the keys (none empty) */
		j.bk = (j.bk + 63) / 64 * 64;
		j.nkb = (skv + j.bk - 1) / j.bk;
	}
	j.sqp = j.bq * j.nqb;
	j.skvp = j.bk * j.nkb;
	j.bias = bias;
	j.causal = causal;
	j.scale = bias || causal ? 1.0f : scale;
	j.scale_in = scale;
	j.out = out;
	j.ldo = ldo;
	j.lse = lse;
	if (!j.own) {
		j.gs = pd_attn_gemm_get(be, j.bq, j.bk, head_dim, 1, 0, dt, nthr);
		j.gpv = j.gs ? pd_attn_gemm_get(be, j.bq, head_dim, j.bk, 0, 1, dt, nthr) : NULL;
		if (!j.gpv)
			return;
	}
	/* per thread: scores, probabilities, output, maximum and sum, scratchpad */
	scratch = j.own ? 0 : j.gs->scratch > j.gpv->scratch ? j.gs->scratch : j.gpv->scratch;
	j.ws = PD_ALIGN64((size_t)(j.bq * j.bk) * sizeof(float)) + PD_ALIGN64((size_t)(j.bq * j.bk) * j.es) +
	       PD_ALIGN64((size_t)(j.bq * head_dim + 2 * j.bq) * sizeof(float)) + PD_ALIGN64(scratch);
	/* the operands of as many heads as about attn_pack_bytes hold (at
	 * least one): more heads give the threads more blocks to share */
	per_head = (size_t)(j.sqp + 2 * j.skvp) * (size_t)head_dim * j.es;
	hg = cpu->attn_pack_bytes / per_head < 1 ? 1 : cpu->attn_pack_bytes / per_head > (size_t)heads ? heads :
		(int)(cpu->attn_pack_bytes / per_head);
	if (pd_cpu_grow(be, &cpu->aws, &cpu->aws_cap, j.ws * (size_t)nthr, 1) ||
	    pd_cpu_grow(be, &cpu->abf, &cpu->abf_cap, per_head * (size_t)hg, 1))
		return;
	if (cpu->n_astream < nthr) {
		dnnl_stream_t *s = realloc(cpu->astream, sizeof(*s) * (size_t)nthr);

		if (!s) {
			pd_backend_fail(be, "out of memory");
			return;
		}
		cpu->astream = s;
		for (; cpu->n_astream < nthr; cpu->n_astream++, be->allocations++)
			if (dnnl_stream_create(&s[cpu->n_astream], cpu->eng, dnnl_stream_default_flags) != dnnl_success) {
				pd_backend_fail(be, "cannot create a oneDNN stream for attention");
				return;
			}
	}
	for (j.h0 = 0; j.h0 < heads && failed == dnnl_success; j.h0 += hg) {
		int nh = heads - j.h0 < hg ? heads - j.h0 : hg;

		j.q = cpu->abf;
		j.k = j.q + (size_t)(j.sqp * nh * head_dim) * j.es;
		j.v = j.k + (size_t)(j.skvp * nh * head_dim) * j.es;
		pd_attn_pack(cpu, j.mode, (void *)j.q, q + j.h0 * head_dim, ldq, sq, j.sqp, nh, head_dim);
		if (j.own) {
			pd_attn_pack_pairs(cpu, (uint16_t *)j.k, k + j.h0 * head_dim, ldk, skv, j.skvp, j.bk, nh, head_dim,
					   0);
			pd_attn_pack_pairs(cpu, (uint16_t *)j.v, v + j.h0 * head_dim, ldv, skv, j.skvp, j.bk, nh, head_dim,
					   1);
		} else {
			pd_attn_pack(cpu, j.mode, (void *)j.k, k + j.h0 * head_dim, ldk, skv, j.skvp, nh, head_dim);
			pd_attn_pack(cpu, j.mode, (void *)j.v, v + j.h0 * head_dim, ldv, skv, j.skvp, nh, head_dim);
		}
		/* consecutive blocks share a head's keys and values; after a
		 * failure the others skip theirs */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
		for (int64_t b = 0; b < (int64_t)nh * j.nqb; b++) {
			dnnl_status_t st;

#pragma omp atomic read
			st = failed;
			if (st != dnnl_success)
				continue;
			st = pd_attn_block(cpu, &j, omp_get_thread_num(), j.h0 + (int)(b / j.nqb), b % j.nqb);
			if (st != dnnl_success) {
#pragma omp atomic write
				failed = st;
			}
		}
	}
	if (failed != dnnl_success)
		pd_backend_fail(be, "oneDNN error %d in an attention product", (int)failed);
}
void pd_cpu_attention(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
		      int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
		      int64_t skv, int heads, int head_dim, float scale)
{
	pd_cpu_attention_impl(be, out, ldo, lse, q, ldq, k, ldk, v, ldv, sq, skv, heads, head_dim, scale, NULL, 0);
}

void pd_cpu_attention_masked(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
			     const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
			     int head_dim, float scale, const float *bias, int causal)
{
	pd_cpu_attention_impl(be, out, ldo, NULL, q, ldq, k, ldk, v, ldv, s, s, heads, head_dim, scale, bias, causal);
}

void pd_cpu_lse_merge(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part,
		      int64_t ldp, const float *plse, int64_t sq, int heads, int head_dim)
{
	if (be->failed)
		return;
#pragma omp parallel for collapse(2) schedule(static)
	for (int h = 0; h < heads; h++) {
		for (int64_t i = 0; i < sq; i++) {
			float l1 = lse[(int64_t)h * sq + i], l2 = plse[(int64_t)h * sq + i], w, d;
			float *o = out + i * ldo + (int64_t)h * head_dim;
			const float *p = part + i * ldp + (int64_t)h * head_dim;

			if (l2 == -INFINITY)
				continue;
			if (l1 == -INFINITY) {
				memcpy(o, p, sizeof(float) * (size_t)head_dim);
				lse[(int64_t)h * sq + i] = l2;
				continue;
			}
			/* w = sigmoid(l2 - l1), evaluated without overflow either way */
			d = l2 - l1;
			w = d >= 0 ? 1.0f / (1.0f + expf(-d)) : expf(d) / (1.0f + expf(d));
			for (int c = 0; c < head_dim; c++)
				o[c] = o[c] - w * (o[c] - p[c]);
			lse[(int64_t)h * sq + i] = (d >= 0 ? l2 : l1) + log1pf(expf(-fabsf(d)));
		}
	}
}
