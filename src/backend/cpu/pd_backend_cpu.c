/*
 * pd_backend_cpu.c - the CPU backend: matrix products and convolutions
 * through oneDNN (v2 C API, Debian's libdnnl 2.6), everything else in own
 * OpenMP kernels. This file holds its memory and its operation table; the
 * kernels are in pd_cpu_matmul.c, pd_cpu_conv.c, pd_cpu_attention.c and
 * pd_cpu_elementwise.c.
 */
#include "pd_backend_cpu.h"
#include "pd_cpu.h"
#include "pd_util.h"

#include <limits.h>
#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_cpu_count_work(struct pd_backend *be, size_t add, size_t sub)
{
	be->work_bytes += add;
	be->work_bytes -= sub;
	if (add)
		be->allocations++;
	if (be->work_bytes > be->work_peak)
		be->work_peak = be->work_bytes;
}

/* Scratch grows to the largest request and stays: after the first step
 * nothing is allocated. */
int pd_cpu_grow(struct pd_backend *be, void **buf, size_t *cap, size_t need, size_t elem)
{
	void *p;

	if (need <= *cap)
		return 0;
	p = aligned_alloc(64, ((need * elem) + 63) & ~(size_t)63);
	if (!p) {
		pd_backend_fail(be, "out of memory (%zu MB scratch)", (need * elem) >> 20);
		return -1;
	}
	free(*buf);
	pd_cpu_count_work(be, need * elem, *cap * elem);
	*buf = p;
	*cap = need;
	return 0;
}


/* ----------------------------------------------------------------------- */
/* Memory                                                                  */
/* ----------------------------------------------------------------------- */

/* Each block starts with a 64-byte header that holds its size, for the
 * accounting of work_bytes; the floats after it stay 64-byte aligned. */
float *pd_cpu_alloc(struct pd_backend *be, size_t n)
{
	size_t bytes = ((n * sizeof(float)) + 63) & ~(size_t)63;
	char *p;

	if (n > (SIZE_MAX - 128) / sizeof(float))
		return NULL;
	p = aligned_alloc(64, bytes + 64);
	if (!p)
		return NULL;
	*(size_t *)p = bytes;
	pd_cpu_count_work(be, bytes, 0);
	return (float *)(p + 64);
}

void pd_cpu_free(struct pd_backend *be, float *p)
{
	char *b;

	if (!p)
		return;
	b = (char *)p - 64;
	pd_cpu_count_work(be, 0, *(size_t *)b);
	free(b);
}

void pd_cpu_copy(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	(void)be;
	if (n)
		memcpy(dst, src, n * sizeof(float));
}

void pd_cpu_copy2d(struct pd_backend *be, float *dst, int64_t ldd, const float *src, int64_t lds,
		   int64_t rows, int64_t cols)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
	for (int64_t r = 0; r < rows; r++)
		memcpy(dst + r * ldd, src + r * lds, (size_t)cols * sizeof(float));
}


/* ----------------------------------------------------------------------- */
/* Creation                                                                */
/* ----------------------------------------------------------------------- */

void pd_cpu_destroy(struct pd_backend *be)
{
	struct pd_cpu *cpu = CPU(be);

	pd_cpu_attn_free(cpu);
	pd_cpu_free(be, cpu->adapt);
	if (cpu->stream)
		dnnl_stream_destroy(cpu->stream);
	if (cpu->eng)
		dnnl_engine_destroy(cpu->eng);
	free(cpu->bf16);
	free(cpu->qpanel);
	free(cpu->qout);
	free(cpu->qrow);
	free(cpu->xq);
	free(cpu->xd);
	free(cpu->xc);
	free(cpu->xs);
	free(cpu->xh);
	free(cpu->csrc);
	free(cpu->cdst);
	free(cpu);
}

/* OpenMP's thread count is the calling thread's setting (an ICV of its
 * task), which oneDNN reads when it makes and runs a primitive: set for the
 * scope, put back after it. */
static int pd_cpu_enter(struct pd_backend *be)
{
	int saved = omp_get_max_threads();

	if (be->threads != saved)
		omp_set_num_threads(be->threads);
	return saved;
}

static void pd_cpu_leave(struct pd_backend *be, int saved)
{
	(void)be;
	if (omp_get_max_threads() != saved)
		omp_set_num_threads(saved);
}

static const struct pd_backend_ops pd_cpu_ops = {
	.name = "cpu",
	.destroy = pd_cpu_destroy,
	.enter = pd_cpu_enter,
	.leave = pd_cpu_leave,
	.alloc = pd_cpu_alloc,
	.free = pd_cpu_free,
	.upload = pd_cpu_copy,
	.download = pd_cpu_copy,
	.copy2d = pd_cpu_copy2d,
	.linear_new = pd_cpu_linear_new,
	.linear_new_q = pd_cpu_linear_new_q,
	.linear_free = pd_cpu_linear_free,
	.linear_adapt = pd_cpu_linear_adapt,
	.linear = pd_cpu_linear,
	.conv_new = pd_cpu_conv_new,
	.conv_free = pd_cpu_conv_free,
	.conv = pd_cpu_conv,
	.fill = pd_cpu_fill,
	.silu = pd_cpu_silu,
	.quick_gelu = pd_cpu_quick_gelu,
	.mul = pd_cpu_mul,
	.add = pd_cpu_add,
	.sub = pd_cpu_sub,
	.layernorm_mod = pd_cpu_layernorm_mod,
	.layernorm = pd_cpu_layernorm,
	.rmsnorm_heads = pd_cpu_rmsnorm_heads,
	.row_sumsq = pd_cpu_row_sumsq,
	.rms_apply = pd_cpu_rms_apply,
	.rope = pd_cpu_rope,
	.gated_add = pd_cpu_gated_add,
	.attention = pd_cpu_attention,
	.attention_masked = pd_cpu_attention_masked,
	.lse_merge = pd_cpu_lse_merge,
	.group_stats = pd_cpu_group_stats,
	.group_apply = pd_cpu_group_apply,
	.rms_channels = pd_cpu_rms_channels,
	.upsample2x = pd_cpu_upsample2x,
	.transpose = pd_cpu_transpose,
};

/* Whether oneDNN has bf16 matrix products here (2.6: AVX-512 and up). */
static int pd_cpu_has_bf16_products(struct pd_cpu *cpu)
{
	dnnl_memory_desc_t a, w, c;
	dnnl_dims_t ad = { 16, 32 }, wd = { 32, 16 }, cd = { 16, 16 };
	dnnl_matmul_desc_t desc;
	dnnl_primitive_desc_t pd = NULL;

	if (dnnl_memory_desc_init_by_tag(&a, 2, ad, dnnl_bf16, dnnl_ab) != dnnl_success ||
	    dnnl_memory_desc_init_by_tag(&w, 2, wd, dnnl_bf16, dnnl_format_tag_any) != dnnl_success ||
	    dnnl_memory_desc_init_by_tag(&c, 2, cd, dnnl_f32, dnnl_ab) != dnnl_success ||
	    dnnl_matmul_desc_init(&desc, &a, &w, NULL, &c) != dnnl_success ||
	    dnnl_primitive_desc_create(&pd, &desc, NULL, cpu->eng, NULL) != dnnl_success)
		return 0;
	dnnl_primitive_desc_destroy(pd);
	return 1;
}

/* The processor's model name, as the logs say what a backend computes on. */
static void pd_cpu_name(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(buf, len, "CPU");
	while (f && fgets(line, sizeof(line), f)) {
		char *v = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !v)
			continue;
		v += 1 + strspn(v + 1, " \t");
		v[strcspn(v, "\n")] = 0;
		snprintf(buf, len, "%s", v);
		break;
	}
	if (f)
		fclose(f);
}

int pd_cpu_f16c(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	unsigned a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
#else
	return 0;
#endif
}

int pd_cpu_avx_vnni(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	unsigned a, b, c, d;

	return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
#else
	return 0;
#endif
}

/* This CPU's 512-bit VNNI kernels, in use. */
static int pd_cpu_vnni512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	/* PDIT_NO_VNNI runs int8 products through the AVX2 and portable
	 * kernels (and the VNNI kernel needs AVX-512 itself) */
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && !pd_env_on("PDIT_NO_AVX512") &&
	       __builtin_cpu_supports("avx512vnni") && !pd_env_on("PDIT_NO_VNNI");
#else
	return 0;
#endif
}

/* Without those, its 256-bit VNNI: 1 AVX-VNNI, 2 AVX-512 VNNI's 256-bit
 * form (AVX-512 turned off for pdit); 0 none. */
static int pd_cpu_vnni256(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (pd_cpu_vnni512() || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
	    !pd_cpu_f16c() || pd_env_on("PDIT_NO_AVX2") || pd_env_on("PDIT_NO_VNNI"))
		return 0;
	if (pd_cpu_avx_vnni())
		return 1;
	if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
		return 2;
#endif
	return 0;
}

/* Whether oneDNN's bf16 products take AMX tiles here (its effective ISA:
 * ONEDNN_MAX_CPU_ISA below AVX512_CORE_AMX turns them off). */
static int pd_cpu_bf16_amx(void)
{
	unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();

	return (isa & (unsigned)dnnl_cpu_isa_avx512_core_amx) == (unsigned)dnnl_cpu_isa_avx512_core_amx;
}

enum pd_qproducts pd_backend_cpu_int8_auto(void)
{
	/* measured (bench/quant.sh): VNNI's int8 products beat bf16 ones, the
	 * 256-bit kernels' too (AVX-512 off: Q8_0 0.58 x BF16's step, Q4_K
	 * 0.61, decoded 1.03); the AVX2 kernel's do not (1.005 x BF16's step
	 * for Q8_0, decoded 1.019). Where bf16 products take AMX tiles,
	 * decoded ones beat both (Xeon, 512²: Q8_0 0.96 x BF16's step decoded,
	 * 1.19 on AMX-INT8; Q4_K 0.97 against 1.30; fp8 0.94 against 1.36):
	 * Q8_0's scales every 32 inputs give each tdpbsud half its depth, no
	 * more than a bf16 tile product does, and add the f32 work after each. */
	if (pd_cpu_bf16_amx())
		return PD_QP_DECODE;
	return pd_cpu_vnni512() || pd_cpu_vnni256() ? PD_QP_INT8 : PD_QP_DECODE;
}

int pd_backend_cpu_int8_takes(enum pd_qproducts qp, enum pd_qtype t, int64_t n_in)
{
	return pd_cpu_i8_has(t, n_in) && qp != PD_QP_DECODE;
}

size_t pd_backend_cpu_held_bytes(enum pd_qtype t, int64_t n_out, int64_t n_in, enum pd_qproducts qp)
{
	if (pd_backend_cpu_int8_takes(qp, t, n_in))
		return pd_cpu_i8_bytes(t, n_out, n_in, pd_cpu_i8_w256(qp, t, n_in));
	return pd_quant_row_bytes(pd_quant_info(t), n_in) * (size_t)n_out;
}

int pd_backend_cpu_new(struct pd_backend **out, enum pd_dtype compute, int threads)
{
	struct pd_cpu *cpu;

	if (compute != PD_F32 && compute != PD_BF16)
		return pd_errorf("the CPU backend computes in f32 or bf16, not %s", pd_dtype_name(compute));
	cpu = calloc(1, sizeof(*cpu));
	if (!cpu)
		return pd_errorf("out of memory");
	cpu->be.ops = &pd_cpu_ops;
	cpu->be.compute = compute;
	cpu->be.conv_compute = PD_F32;
	cpu->be.host_memory = 1;
	cpu->be.int8_products = 1;
	cpu->be.threads = threads > 0 ? threads : omp_get_max_threads();
	pd_cpu_name(cpu->be.device, sizeof(cpu->be.device));
#if defined(__x86_64__) && defined(__GNUC__)
	/* PDIT_NO_AVX512 lets the tests run the portable kernels here too */
	cpu->avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl") && !pd_env_on("PDIT_NO_AVX512");
	/* PDIT_NO_AVX512_BF16 takes attention's block products back to oneDNN */
	cpu->avx512bf16 = cpu->avx512 && __builtin_cpu_supports("avx512bf16") && !pd_env_on("PDIT_NO_AVX512_BF16");
	/* PDIT_NO_AVX2 (with PDIT_NO_AVX512) leaves the portable C alone */
	cpu->avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !pd_env_on("PDIT_NO_AVX2");
	cpu->vnni = pd_cpu_vnni512();
	cpu->vnni256 = pd_cpu_vnni256();
	cpu->amx = cpu->vnni ? pd_cpu_amx_int8() : 0;
	/* the logs say which kernels the int8 products take */
	if (cpu->amx) {
		size_t n = strlen(cpu->be.device);

		snprintf(cpu->be.device + n, sizeof(cpu->be.device) - n, " (AMX-INT8%s)",
			 cpu->amx == 2 ? " emulated" : "");
	}
#endif
	cpu->be.int8_auto = pd_backend_cpu_int8_auto();
	/* PDIT_QPANEL_MB lets the tests cut small weights into many panels */
	cpu->qpanel_bytes = (size_t)pd_env_long("PDIT_QPANEL_MB", 1, 4095, PD_QPANEL_BYTES >> 20) << 20;
	/* PDIT_QDENSE_ROWS lets the tests take the strided products too */
	cpu->qdense_rows = (int)pd_env_long("PDIT_QDENSE_ROWS", 0, INT_MAX, PD_QDENSE_ROWS);
	/* PDIT_ATTN_QBLOCK and PDIT_ATTN_KBLOCK set attention's blocks (the
	 * tests make them small; benchmarks of the choice) */
	cpu->attn_qblock = (int)pd_env_long("PDIT_ATTN_QBLOCK", 1, 65536, PD_ATTN_QBLOCK);
	cpu->attn_kblock = (int)pd_env_long("PDIT_ATTN_KBLOCK", 1, 65536, PD_ATTN_KBLOCK);
	/* PDIT_ATTN_PACK_KB lets the tests pack attention's heads in many groups */
	cpu->attn_pack_bytes = (size_t)pd_env_long("PDIT_ATTN_PACK_KB", 1, (1 << 22) - 1, PD_ATTN_PACK_BYTES >> 10) << 10;
	/* PDIT_CONV_CHUNK_KB lets the tests cut small pictures into many chunks */
	cpu->conv_chunk_bytes = (size_t)pd_env_long("PDIT_CONV_CHUNK_KB", 1, (1 << 22) - 1, PD_CONV_CHUNK_BYTES >> 10)
				<< 10;
	if (dnnl_engine_create(&cpu->eng, dnnl_cpu, 0) != dnnl_success ||
	    dnnl_stream_create(&cpu->stream, cpu->eng, dnnl_stream_default_flags) != dnnl_success) {
		pd_cpu_destroy(&cpu->be);
		return pd_errorf("cannot create the oneDNN CPU engine");
	}
	/* PDIT_BF16_AS_F32 lets the tests run that path on any CPU */
	cpu->bf16_f32 = compute == PD_BF16 && (pd_env_on("PDIT_BF16_AS_F32") ||
					       !pd_cpu_has_bf16_products(cpu));
	if (cpu->bf16_f32)
		cpu->be.note = "bf16 products run as f32 products of bf16 values here (oneDNN 2.6 has bf16 ones "
			       "only with AVX-512): the numbers of bf16, the speed of f32";
	*out = &cpu->be;
	return 0;
}
