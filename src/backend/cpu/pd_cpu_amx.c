/*
 * pd_cpu_amx.c - int8 products of Q8_0's layout (Q8_0, Q5_0, fp8) on
 * AMX-INT8 tiles (Intel Xeon since Sapphire Rapids).
 *
 * pd_cpu_i8.c's layout already is the tiles' B operand: a group's block
 * of 32 inputs is 8 rows of 64 bytes, [k / 4][column][k % 4], each byte
 * the weight plus 128. So each block is one tdpbsud: A the block's 32
 * inputs of up to 16 rows (signed, rows n_in bytes apart), B the block
 * of one group (unsigned), C the 16 x 16 int32 sums, which then get the
 * block's -128 sum(q_x) and its scales in AVX-512 as the VNNI kernel
 * applies them:
 *
 *   y += (float)(C + corr) * (d_w * d_x)         (blocks of 32)
 *   g += (float)(C + corr) * d_w, y += g * d_x   (wide layers: 8 blocks a g)
 *
 * A requantized wide layer (int8-256: one weight scale per 256 inputs,
 * pd_cpu_i8.c's PD_I8W_BLOCK units) takes four tdpbsud of full depth (A
 * 64 inputs, B 16 rows of 64 bytes) into the same C before its sums leave
 * the tiles and get their one scaling:
 *
 *   y += (float)(C + corr) * (D_w * d_x)       (each 256 inputs)
 *
 * The integers are exact and the f32 operations are the VNNI kernel's, in
 * its order: the same bits, so a mesh of machines with and without AMX
 * agrees. The tiles give each block's integers at one instruction a group
 * (VNNI: 8 a row and group); the f32 work per block stays, in a loop over
 * the tile's rows.
 *
 * Where no CPU here has AMX, the same kernel runs with the tiles emulated
 * in C (PDIT_AMX_EMULATE=1, for the tests): everything but the four tile
 * instructions is the code a Xeon runs.
 */
#include "pd_cpu.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

int pd_cpu_amx_int8(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	unsigned a, b, c, d, lo, hi;

	if (pd_env_on("PDIT_NO_AMX"))
		return 0;
	if (pd_env_on("PDIT_AMX_EMULATE") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"))
		return 2;
	/* CPUID 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8 */
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)) ||
	    !__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw"))
		return 0;
	/* the system saves the tiles (XCR0 bits 17 and 18; OSXSAVE first) */
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & (3u << 17)) != (3u << 17))
		return 0;
	/* Linux lends the tiles' 8 KB of state to a process that asks
	 * (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, since 5.16): granted
	 * to all its threads, asked again harmlessly; oneDNN asks the same.
	 * Refused (an older kernel): the VNNI kernels run. */
	if (syscall(SYS_arch_prctl, 0x1023, 18) != 0)
		return 0;
	return 1;
#else
	return 0;
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
/* ldtilecfg's 64 bytes (palette 1). */
struct pd_amx_cfg {
	uint8_t palette;                /* 1: 8 tiles of up to 16 rows of 64 bytes */
	uint8_t start_row;              /* 0 (a restarted instruction's row) */
	uint8_t reserved[14];           /* 0 */
	uint16_t colsb[16];             /* each tile's bytes a row */
	uint8_t rows[16];               /* each tile's rows */
};

/* The tiles in memory, for the emulation: the registers' bytes and the
 * shapes the configuration gave them. */
struct pd_amx_emu {
	unsigned char t[8][PD_AMX_ROWS][64]; /* tile, row, byte */
	const struct pd_amx_cfg *cfg;   /* the shapes */
};

static void pd_amx_emu_load(struct pd_amx_emu *e, int tile, const void *p, int64_t stride)
{
	for (int r = 0; r < e->cfg->rows[tile]; r++)
		memcpy(e->t[tile][r], (const unsigned char *)p + r * stride, e->cfg->colsb[tile]);
}

static void pd_amx_emu_store(struct pd_amx_emu *e, int tile, void *p, int64_t stride)
{
	for (int r = 0; r < e->cfg->rows[tile]; r++)
		memcpy((unsigned char *)p + r * stride, e->t[tile][r], e->cfg->colsb[tile]);
}

/* tdpbsud: C[m][n] += sum over k of A[m][k] (signed) * B[k / 4][4 n + k % 4] (unsigned). */
static void pd_amx_emu_dpbsud(struct pd_amx_emu *e, int c, int a, int b)
{
	for (int m = 0; m < e->cfg->rows[c]; m++)
		for (int n = 0; n < e->cfg->colsb[c] / 4; n++) {
			int32_t s;

			memcpy(&s, e->t[c][m] + 4 * n, 4);
			for (int k = 0; k < e->cfg->colsb[a]; k++)
				s += (int32_t)(int8_t)e->t[a][m][k] * (int32_t)e->t[b][k / 4][4 * n + k % 4];
			memcpy(e->t[c][m] + 4 * n, &s, 4);
		}
}

/* The four tile instructions, written out: GCC's intrinsics are inline
 * assembly usable anywhere, clang's are builtins that need the AMX target
 * on the function, which the emulated copy must not have (the fuzzing
 * build compiles this file with clang). The tiles' numbers are literal. */
#define PD_AMX_ASM_LOAD(tile, p, stride) \
	__asm__ volatile("{tileloadd (%0,%1,1), %%tmm" #tile "|tileloadd tmm" #tile \
			 ", [%0+%1*1]}" ::"r"((const void *)(p)), \
			 "r"((long)(stride)) \
			 : "memory")
#define PD_AMX_ASM_STORE(tile, p, stride) \
	__asm__ volatile("{tilestored %%tmm" #tile ", (%0,%1,1)|tilestored [%0+%1*1], tmm" #tile \
			 "}" ::"r"((void *)(p)), \
			 "r"((long)(stride)) \
			 : "memory")
#define PD_AMX_ASM_ZERO(tile) __asm__ volatile("{tilezero %%tmm" #tile "|tilezero tmm" #tile "}" ::)
/* C (tmm C) += A (signed) x B (unsigned) */
#define PD_AMX_ASM_DPBSUD(c, a, b) \
	__asm__ volatile("{tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c "|tdpbsud tmm" #c ", tmm" #a ", tmm" #b "}" ::)

/* The tile operations: on the tiles (E NULL) or on their emulation. */
#define PD_AMX_LOAD(e, tile, p, stride) \
	do { \
		if (e) \
			pd_amx_emu_load(e, tile, p, stride); \
		else \
			PD_AMX_ASM_LOAD(tile, p, stride); \
	} while (0)
#define PD_AMX_STORE(e, tile, p, stride) \
	do { \
		if (e) \
			pd_amx_emu_store(e, tile, p, stride); \
		else \
			PD_AMX_ASM_STORE(tile, p, stride); \
	} while (0)
#define PD_AMX_ZERO(e, tile) \
	do { \
		if (e) \
			memset((e)->t[tile], 0, sizeof((e)->t[tile])); \
		else \
			PD_AMX_ASM_ZERO(tile); \
	} while (0)
#define PD_AMX_DPBSUD(e, c, a, b) \
	do { \
		if (e) \
			pd_amx_emu_dpbsud(e, c, a, b); \
		else \
			PD_AMX_ASM_DPBSUD(c, a, b); \
	} while (0)

/* A requantized wide layer's tile (pd_amx_body's W256 form): each 256
 * inputs four tile products into the sums, then their scaling into T. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __attribute__((always_inline)) void pd_amx_w256(
	struct pd_amx_emu *e, const int8_t *xq, int64_t n_in, const float *xd, const int32_t *xc, int nr,
	const unsigned char *w0, const unsigned char *w1, float *t)
{
	int64_t nb = n_in / 32;
	int32_t ci[2][PD_AMX_ROWS * 16] __attribute__((aligned(64)));

	for (int64_t u = 0; u < n_in / 256; u++, w0 += PD_I8W_BLOCK, w1 += PD_I8W_BLOCK) {
		__m512 d0 = _mm512_loadu_ps(w0 + 4096), d1 = _mm512_loadu_ps(w1 + 4096);

		PD_AMX_ZERO(e, 0);
		PD_AMX_ZERO(e, 1);
		for (int k = 0; k < 4; k++) {
			PD_AMX_LOAD(e, 2, xq + u * 256 + k * 64, n_in);
			PD_AMX_LOAD(e, 3, w0 + k * 1024, 64);
			PD_AMX_LOAD(e, 4, w1 + k * 1024, 64);
			PD_AMX_DPBSUD(e, 0, 2, 3);
			PD_AMX_DPBSUD(e, 1, 2, 4);
		}
		PD_AMX_STORE(e, 0, ci[0], 64);
		PD_AMX_STORE(e, 1, ci[1], 64);
		for (int r = 0; r < nr; r++) {
			__m512i corr = _mm512_set1_epi32(pd_cpu_i8_corr256(xc + r * nb + u * 8));
			__m512 s = _mm512_set1_ps(xd[r * nb + u]);
			__m512 i0 = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(ci[0] + r * 16), corr));
			__m512 i1 = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(ci[1] + r * 16), corr));

			_mm512_storeu_ps(t + r * 32, _mm512_fmadd_ps(i0, _mm512_mul_ps(d0, s), _mm512_loadu_ps(t + r * 32)));
			_mm512_storeu_ps(t + r * 32 + 16,
					 _mm512_fmadd_ps(i1, _mm512_mul_ps(d1, s), _mm512_loadu_ps(t + r * 32 + 16)));
		}
	}
}

/* The tile's sums: rows NR (1 to 16) of the quantized inputs XQ (N_IN
 * bytes a row), their scales XD and corrections XC (NB a row: n_in / 32),
 * by the groups at W0 and W1 (Q8_0's layout as FORM lays it out), into
 * T[r * 32 + column]. The tiles: 0 and 1 the groups' sums, 2 the inputs,
 * 3 and 4 the groups' weights (32 inputs deep; 64 for int8-256). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __attribute__((always_inline)) void pd_amx_body(
	struct pd_amx_emu *e, const int8_t *xq, int64_t n_in, const float *xd, const int32_t *xc, int nr,
	const unsigned char *w0, const unsigned char *w1, enum pd_i8_form form, float *t)
{
	int wide = form == PD_I8_WIDE, deep = form == PD_I8_W256;
	int64_t nb = n_in / 32, per = wide ? 8 : 1;
	struct pd_amx_cfg cfg;
	int32_t ci[2][PD_AMX_ROWS * 16] __attribute__((aligned(64)));
	float g[PD_AMX_ROWS * 32] __attribute__((aligned(64)));

	memset(&cfg, 0, sizeof(cfg));
	cfg.palette = 1;
	cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = (uint8_t)nr;
	cfg.colsb[0] = cfg.colsb[1] = 64;
	cfg.colsb[2] = deep ? 64 : 32;
	cfg.rows[3] = cfg.rows[4] = deep ? 16 : 8;
	cfg.colsb[3] = cfg.colsb[4] = 64;
	if (e)
		e->cfg = &cfg;
	else
		/* GCC 12's _tile_loadconfig names 8 of the 64 bytes it reads */
		__asm__ volatile("ldtilecfg %0" ::"m"(cfg));
	memset(t, 0, sizeof(float) * 32 * (size_t)nr);
	if (deep) {
		pd_amx_w256(e, xq, n_in, xd, xc, nr, w0, w1, t);
		if (!e)
			__asm__ volatile("tilerelease" ::);
		return;
	}
	for (int64_t u = 0; u < nb / per; u++) {
		if (wide)
			memset(g, 0, sizeof(float) * 32 * (size_t)nr);
		for (int64_t xb = u * per; xb < u * per + per; xb++, w0 += PD_I8_BLOCK, w1 += PD_I8_BLOCK) {
			__m512 d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + 512)));
			__m512 d1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + 512)));

			PD_AMX_LOAD(e, 2, xq + xb * 32, n_in);
			PD_AMX_LOAD(e, 3, w0, 64);
			PD_AMX_LOAD(e, 4, w1, 64);
			PD_AMX_ZERO(e, 0);
			PD_AMX_ZERO(e, 1);
			PD_AMX_DPBSUD(e, 0, 2, 3);
			PD_AMX_DPBSUD(e, 1, 2, 4);
			PD_AMX_STORE(e, 0, ci[0], 64);
			PD_AMX_STORE(e, 1, ci[1], 64);
			for (int r = 0; r < nr; r++) {
				__m512i corr = _mm512_set1_epi32(xc[r * nb + xb]);
				__m512 i0 =
					_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(ci[0] + r * 16), corr));
				__m512 i1 =
					_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(ci[1] + r * 16), corr));
				float *o = wide ? g + r * 32 : t + r * 32;

				if (wide) {
					_mm512_store_ps(o, _mm512_fmadd_ps(i0, d0, _mm512_load_ps(o)));
					_mm512_store_ps(o + 16, _mm512_fmadd_ps(i1, d1, _mm512_load_ps(o + 16)));
				} else {
					__m512 s = _mm512_set1_ps(xd[r * nb + xb]);

					_mm512_storeu_ps(o,
							 _mm512_fmadd_ps(i0, _mm512_mul_ps(d0, s), _mm512_loadu_ps(o)));
					_mm512_storeu_ps(o + 16, _mm512_fmadd_ps(i1, _mm512_mul_ps(d1, s),
										 _mm512_loadu_ps(o + 16)));
				}
			}
		}
		for (int r = 0; wide && r < nr; r++) {
			__m512 dx = _mm512_set1_ps(xd[r * nb + u]);

			_mm512_storeu_ps(t + r * 32,
					 _mm512_fmadd_ps(_mm512_load_ps(g + r * 32), dx, _mm512_loadu_ps(t + r * 32)));
			_mm512_storeu_ps(t + r * 32 + 16, _mm512_fmadd_ps(_mm512_load_ps(g + r * 32 + 16), dx,
									  _mm512_loadu_ps(t + r * 32 + 16)));
		}
	}
	if (!e)
		__asm__ volatile("tilerelease" ::);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void pd_amx_tiles(const int8_t *xq, int64_t n_in,
									      const float *xd, const int32_t *xc,
									      int nr, const unsigned char *w0,
									      const unsigned char *w1, enum pd_i8_form form,
									      float *t)
{
	pd_amx_body(NULL, xq, n_in, xd, xc, nr, w0, w1, form, t);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void pd_amx_tiles_emulated(
	const int8_t *xq, int64_t n_in, const float *xd, const int32_t *xc, int nr, const unsigned char *w0,
	const unsigned char *w1, enum pd_i8_form form, float *t)
{
	struct pd_amx_emu e;

	pd_amx_body(&e, xq, n_in, xd, xc, nr, w0, w1, form, t);
}
#endif

void pd_cpu_amx_tile(int amx, const int8_t *xq, int64_t n_in, const float *xd, const int32_t *xc, int nr,
		     const unsigned char *w0, const unsigned char *w1, enum pd_i8_form form, float *t)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (amx == 1)
		pd_amx_tiles(xq, n_in, xd, xc, nr, w0, w1, form, t);
	else
		pd_amx_tiles_emulated(xq, n_in, xd, xc, nr, w0, w1, form, t);
#else
	(void)amx, (void)xq, (void)n_in, (void)xd, (void)xc, (void)nr, (void)w0, (void)w1, (void)form, (void)t;
#endif
}
