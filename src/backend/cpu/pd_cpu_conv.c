/*
 * pd_cpu_conv.c - 2-D convolutions through oneDNN (the VAE).
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

/* ----------------------------------------------------------------------- */
/* Convolution                                                             */
/* ----------------------------------------------------------------------- */

static void pd_cpu_conv_prim_free(struct pd_conv_prim *p)
{
	if (p->prim)
		dnnl_primitive_destroy(p->prim);
	if (p->to_src)
		dnnl_primitive_destroy(p->to_src);
	if (p->from_dst)
		dnnl_primitive_destroy(p->from_dst);
	/* shared weights belong to the primitive that made them */
	if (p->wts && p->wbytes)
		dnnl_memory_destroy(p->wts);
	if (p->src)
		dnnl_memory_destroy(p->src);
	if (p->dst)
		dnnl_memory_destroy(p->dst);
	if (p->src_user)
		dnnl_memory_destroy(p->src_user);
	if (p->dst_user)
		dnnl_memory_destroy(p->dst_user);
	memset(p, 0, sizeof(*p));
}

void pd_cpu_conv_free(struct pd_backend *be, struct pd_conv *c)
{
	if (!c)
		return;
	be->weight_bytes -= c->bytes;
	for (int i = 0; i < c->n_prim; i++)
		pd_cpu_conv_prim_free(&c->p[i]);
	if (c->w_user)
		dnnl_memory_destroy(c->w_user);
	if (c->w_bf16)
		dnnl_memory_destroy(c->w_bf16);
	if (c->bias)
		dnnl_memory_destroy(c->bias);
	free(c);
}

struct pd_conv *pd_cpu_conv_new(struct pd_backend *be, int c_out, int c_in, int k, const float *w,
				const float *bias)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_conv *c;
	dnnl_memory_desc_t w_md, b_md;
	dnnl_dims_t wd = { c_out, c_in, k, k }, bd = { c_out };
	void *h;

	if (be->failed)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c) {
		pd_backend_fail(be, "out of memory");
		return NULL;
	}
	c->c_out = c_out;
	c->c_in = c_in;
	c->k = k;
	c->bf16 = be->conv_compute == PD_BF16;
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&w_md, 4, wd, dnnl_f32, dnnl_oihw), fail);
	DNNL_TRY(be, dnnl_memory_create(&c->w_user, &w_md, cpu->eng, DNNL_MEMORY_ALLOCATE), fail);
	DNNL_TRY(be, dnnl_memory_get_data_handle(c->w_user, &h), fail);
	memcpy(h, w, (size_t)c_out * (size_t)c_in * (size_t)k * (size_t)k * sizeof(float));
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a), fail);
	DNNL_TRY(be, dnnl_memory_create(&c->bias, &b_md, cpu->eng, DNNL_MEMORY_ALLOCATE), fail);
	DNNL_TRY(be, dnnl_memory_get_data_handle(c->bias, &h), fail);
	memcpy(h, bias, (size_t)c_out * sizeof(float));
	c->bytes = ((size_t)c_out * (size_t)c_in * (size_t)k * (size_t)k + (size_t)c_out) * sizeof(float);
	be->weight_bytes += c->bytes;
	return c;
fail:
	pd_cpu_conv_free(be, c);
	return NULL;
}

/* A reorder (layout and type conversion) from FROM to TO. */
static int pd_cpu_reorder(struct pd_backend *be, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
			  dnnl_primitive_t *out)
{
	struct pd_cpu *cpu = CPU(be);
	dnnl_primitive_desc_t rpd = NULL;
	int rc = -1;

	*out = NULL;
	DNNL_TRY(be, dnnl_reorder_primitive_desc_create(&rpd, from, cpu->eng, to, cpu->eng, NULL), out);
	DNNL_TRY(be, dnnl_primitive_create(out, rpd), out);
	rc = 0;
out:
	if (rpd)
		dnnl_primitive_desc_destroy(rpd);
	return rc;
}

static int pd_cpu_run_reorder(struct pd_backend *be, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
	dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, from }, { DNNL_ARG_TO, to } };

	DNNL_TRY(be, dnnl_primitive_execute(r, CPU(be)->stream, 2, args), fail);
	return 0;
fail:
	return -1;
}

static int pd_cpu_conv_create(struct pd_backend *be, struct pd_conv *c, struct pd_conv_prim *p, int h, int w,
		       int halo)
{
	struct pd_cpu *cpu = CPU(be);
	dnnl_memory_desc_t src_md, dst_md, w_any, b_md;
	dnnl_convolution_desc_t desc;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_t reorder = NULL;
	dnnl_dims_t sd = { 1, c->c_in, h + 2 * halo, w }, dd = { 1, c->c_out, h, w };
	dnnl_dims_t wd = { c->c_out, c->c_in, c->k, c->k }, bd = { c->c_out };
	dnnl_dims_t strides = { 1, 1 }, pad = { (c->k - 1) / 2 - halo, (c->k - 1) / 2 };
	int rc = -1;

	memset(p, 0, sizeof(*p));
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&src_md, 4, sd, dnnl_f32, dnnl_nchw), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, dnnl_f32, dnnl_nchw), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a), out);
	DNNL_TRY(be, dnnl_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
							&src_md, &w_any, &b_md, &dst_md, strides, pad, pad), out);
	DNNL_TRY(be, dnnl_primitive_desc_create(&pd, &desc, NULL, cpu->eng, NULL), out);
	DNNL_TRY(be, dnnl_primitive_create(&p->prim, pd), out);
	{
		const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
		const dnnl_memory_desc_t *have = NULL;

		DNNL_TRY(be, dnnl_memory_get_memory_desc(c->w_user, &have), out);
		DNNL_TRY(be, dnnl_memory_create(&p->wts, want, cpu->eng, DNNL_MEMORY_ALLOCATE), out);
		p->wbytes = dnnl_memory_desc_get_size(want);
		if (pd_cpu_reorder(be, have, want, &reorder) || pd_cpu_run_reorder(be, reorder, c->w_user, p->wts))
			goto out;
		DNNL_TRY(be, dnnl_stream_wait(cpu->stream), out);
	}
	DNNL_TRY(be, dnnl_memory_create(&p->src, &src_md, cpu->eng, DNNL_MEMORY_NONE), out);
	DNNL_TRY(be, dnnl_memory_create(&p->dst, &dst_md, cpu->eng, DNNL_MEMORY_NONE), out);
	p->h = h;
	p->w = w;
	p->halo = halo;
	rc = 0;
out:
	if (reorder)
		dnnl_primitive_destroy(reorder);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (rc)
		pd_cpu_conv_prim_free(p);
	return rc;
}

/* The bf16 primitive for output rows [r0, r0 + rows) of a call on an h x w
 * picture whose input has HALO rows above and below, with PAD_T and PAD_B
 * rows of zero padding. oneDNN picks the layouts (its brgemm convolution:
 * about 2.3x the f32 im2col + sgemm at the VAE's widths on AVX-512 bf16);
 * the reorders from and to the caller's f32 rows convert on the way. */
static int pd_cpu_conv_create_bf16(struct pd_backend *be, struct pd_conv *c, struct pd_conv_prim *p, int h, int w,
				   int halo, int rows, int pad_t, int pad_b)
{
	struct pd_cpu *cpu = CPU(be);
	int half = (c->k - 1) / 2, srows = rows + 2 * half - pad_t - pad_b;
	int64_t xs = (int64_t)(h + 2 * halo) * w, ys = (int64_t)h * w;
	dnnl_memory_desc_t src_any, dst_any, w_any, b_md, su_md, du_md;
	dnnl_convolution_desc_t desc;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_t wr = NULL;
	dnnl_dims_t sd = { 1, c->c_in, srows, w }, dd = { 1, c->c_out, rows, w };
	dnnl_dims_t wd = { c->c_out, c->c_in, c->k, c->k }, bd = { c->c_out };
	dnnl_dims_t ss = { c->c_in * xs, xs, w, 1 }, ds = { c->c_out * ys, ys, w, 1 };
	dnnl_dims_t strides = { 1, 1 }, pl = { pad_t, half }, pr = { pad_b, half };
	const char *impl = NULL;
	dnnl_status_t st;
	int rc = -1;

	memset(p, 0, sizeof(*p));
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&src_any, 4, sd, dnnl_bf16, dnnl_format_tag_any), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&dst_any, 4, dd, dnnl_f32, dnnl_format_tag_any), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_bf16, dnnl_format_tag_any), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&su_md, 4, sd, dnnl_f32, ss), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&du_md, 4, dd, dnnl_f32, ds), out);
	DNNL_TRY(be, dnnl_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
							&src_any, &w_any, &b_md, &dst_any, strides, pl, pr), out);
	/* no bf16 kernel on this CPU (oneDNN has them from AVX-512 cores on),
	 * or only the reference one, far slower than f32's sgemm: the caller
	 * takes the f32 path for this convolution instead */
	st = dnnl_primitive_desc_create(&pd, &desc, NULL, cpu->eng, NULL);
	if (st == dnnl_unimplemented ||
	    (st == dnnl_success && (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
				    !impl || !strncmp(impl, "ref", 3)))) {
		rc = 1;
		goto out;
	}
	DNNL_TRY(be, st, out);
	DNNL_TRY(be, dnnl_primitive_create(&p->prim, pd), out);
	{
		const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
		const dnnl_memory_desc_t *have = NULL, *shared = NULL;
		const dnnl_memory_desc_t *s_md = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
		const dnnl_memory_desc_t *d_md = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);

		if (c->w_bf16)
			DNNL_TRY(be, dnnl_memory_get_memory_desc(c->w_bf16, &shared), out);
		if (shared && dnnl_memory_desc_equal(shared, want)) {
			p->wts = c->w_bf16;
		} else {
			DNNL_TRY(be, dnnl_memory_get_memory_desc(c->w_user, &have), out);
			DNNL_TRY(be, dnnl_memory_create(&p->wts, want, cpu->eng, DNNL_MEMORY_ALLOCATE), out);
			/* this primitive's until they are the conv's (freed on failure) */
			p->wbytes = dnnl_memory_desc_get_size(want);
			if (pd_cpu_reorder(be, have, want, &wr) || pd_cpu_run_reorder(be, wr, c->w_user, p->wts))
				goto out;
			DNNL_TRY(be, dnnl_stream_wait(cpu->stream), out);
			if (!c->w_bf16) {
				/* the conv's own from now on, freed with it */
				c->w_bf16 = p->wts;
				c->bytes += p->wbytes;
				be->weight_bytes += p->wbytes;
				p->wbytes = 0;
			}
		}
		p->src_bytes = dnnl_memory_desc_get_size(s_md);
		p->dst_bytes = dnnl_memory_desc_get_size(d_md);
		DNNL_TRY(be, dnnl_memory_create(&p->src, s_md, cpu->eng, DNNL_MEMORY_NONE), out);
		DNNL_TRY(be, dnnl_memory_create(&p->dst, d_md, cpu->eng, DNNL_MEMORY_NONE), out);
		DNNL_TRY(be, dnnl_memory_create(&p->src_user, &su_md, cpu->eng, DNNL_MEMORY_NONE), out);
		DNNL_TRY(be, dnnl_memory_create(&p->dst_user, &du_md, cpu->eng, DNNL_MEMORY_NONE), out);
		if (pd_cpu_reorder(be, &su_md, s_md, &p->to_src) || pd_cpu_reorder(be, d_md, &du_md, &p->from_dst))
			goto out;
	}
	p->h = h;
	p->w = w;
	p->halo = halo;
	p->rows = rows;
	p->pad_t = pad_t;
	p->pad_b = pad_b;
	rc = 0;
out:
	if (wr)
		dnnl_primitive_destroy(wr);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (rc)
		pd_cpu_conv_prim_free(p);
	return rc;
}

/* The cached primitive for this call (and chunk), made when missing; NULL
 * on failure, or for bf16 (with *F32 set) where the f32 path must serve. */
static struct pd_conv_prim *pd_cpu_conv_prim(struct pd_backend *be, struct pd_conv *c, int h, int w, int halo,
					     int rows, int pad_t, int pad_b, int *f32)
{
	struct pd_conv_prim fresh, *p;
	int threads = omp_get_max_threads(), rc;

	for (int i = 0; i < c->n_prim; i++) {
		p = &c->p[i];
		if (p->h == h && p->w == w && p->halo == halo && p->rows == rows && p->pad_t == pad_t &&
		    p->pad_b == pad_b)
			return p;
	}
	if (c->bf16) {
		rc = pd_cpu_conv_create_bf16(be, c, &fresh, h, w, halo, rows, pad_t, pad_b);
		if (rc > 0) {
			*f32 = 1;
			return NULL;
		}
	} else {
		/* made for one thread where it runs on one (see pd_cpu_conv):
		 * oneDNN fixes its partition of the work when the primitive is
		 * made */
		if (c->c_out < 16)
			omp_set_num_threads(1);
		rc = pd_cpu_conv_create(be, c, &fresh, h, w, halo);
		omp_set_num_threads(threads);
	}
	if (rc)
		return NULL;
	be->allocations++;
	if (c->n_prim < PD_CONV_CACHE) {
		p = &c->p[c->n_prim++];
	} else {
		p = &c->p[c->next];
		c->next = (c->next + 1) % PD_CONV_CACHE;
		c->bytes -= p->wbytes;
		be->weight_bytes -= p->wbytes;
		pd_cpu_conv_prim_free(p);
	}
	*p = fresh;
	c->bytes += p->wbytes;
	be->weight_bytes += p->wbytes;
	return p;
}

/* Back to f32 for good: the bf16 primitives (which are all of the cache:
 * a conv is bf16 from its start) and weights are freed. */
static void pd_cpu_conv_drop_bf16(struct pd_backend *be, struct pd_conv *c)
{
	be->conv_f32_fallbacks++;
	for (int i = 0; i < c->n_prim; i++) {
		c->bytes -= c->p[i].wbytes;
		be->weight_bytes -= c->p[i].wbytes;
		pd_cpu_conv_prim_free(&c->p[i]);
	}
	c->n_prim = 0;
	c->next = 0;
	if (c->w_bf16) {
		const dnnl_memory_desc_t *md = NULL;

		if (dnnl_memory_get_memory_desc(c->w_bf16, &md) == dnnl_success) {
			c->bytes -= dnnl_memory_desc_get_size(md);
			be->weight_bytes -= dnnl_memory_desc_get_size(md);
		}
		dnnl_memory_destroy(c->w_bf16);
		c->w_bf16 = NULL;
	}
	c->bf16 = 0;
}

/* bf16: the output rows in chunks that bound the blocked copies; each
 * output pixel's sum is the same whatever chunk makes it (as whatever band:
 * the pictures of one process and of a banded decode agree). */
static void pd_cpu_conv_bf16(struct pd_backend *be, struct pd_conv *c, const float *x, int h, int w, int halo,
			     float *y, int *f32)
{
	struct pd_cpu *cpu = CPU(be);
	int half = (c->k - 1) / 2;
	size_t per_row = (size_t)w * ((size_t)c->c_in * 2 + (size_t)c->c_out * 4);
	int chunk;

	if (h < 1 || w < 1)
		return;
	chunk = (int)(cpu->conv_chunk_bytes / per_row);
	chunk = chunk < 1 ? 1 : chunk > h ? h : chunk;
	/* chunks as equal as the count allows: two kinds of rows, not a tail */
	chunk = (h + (h + chunk - 1) / chunk - 1) / ((h + chunk - 1) / chunk);
	for (int r0 = 0; r0 < h && !be->failed; r0 += chunk) {
		int rows = h - r0 < chunk ? h - r0 : chunk;
		int pad_t = half - halo - r0 > 0 ? half - halo - r0 : 0;
		int pad_b = r0 + rows + half - (h + halo) > 0 ? r0 + rows + half - (h + halo) : 0;
		int64_t x0 = r0 - half + halo > 0 ? r0 - half + halo : 0;
		struct pd_conv_prim *p = pd_cpu_conv_prim(be, c, h, w, halo, rows, pad_t, pad_b, f32);

		if (!p)
			return;
		if (pd_cpu_grow(be, &cpu->csrc, &cpu->csrc_cap, p->src_bytes, 1) ||
		    pd_cpu_grow(be, &cpu->cdst, &cpu->cdst_cap, p->dst_bytes, 1))
			return;
		DNNL_TRY(be, dnnl_memory_set_data_handle(p->src_user, (void *)(x + x0 * w)), fail);
		DNNL_TRY(be, dnnl_memory_set_data_handle(p->src, cpu->csrc), fail);
		DNNL_TRY(be, dnnl_memory_set_data_handle(p->dst, cpu->cdst), fail);
		DNNL_TRY(be, dnnl_memory_set_data_handle(p->dst_user, y + (int64_t)r0 * w), fail);
		if (pd_cpu_run_reorder(be, p->to_src, p->src_user, p->src))
			return;
		{
			dnnl_exec_arg_t args[4] = {
				{ DNNL_ARG_SRC, p->src },
				{ DNNL_ARG_WEIGHTS, p->wts },
				{ DNNL_ARG_BIAS, c->bias },
				{ DNNL_ARG_DST, p->dst },
			};

			DNNL_TRY(be, dnnl_primitive_execute(p->prim, cpu->stream, 4, args), fail);
		}
		if (pd_cpu_run_reorder(be, p->from_dst, p->dst, p->dst_user))
			return;
		DNNL_TRY(be, dnnl_stream_wait(cpu->stream), fail);
	}
fail:
	return;
}

void pd_cpu_conv(struct pd_backend *be, struct pd_conv *c, const float *x, int h, int w, int halo, float *y)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_conv_prim *p;
	int f32 = 0;

	if (be->failed)
		return;
	if (halo < 0 || halo > (c->k - 1) / 2) {
		pd_backend_fail(be, "convolution: halo of %d rows for a %dx%d kernel", halo, c->k, c->k);
		return;
	}
	be->flop += 2.0 * c->c_out * c->c_in * c->k * c->k * (double)h * w;
	if (c->bf16) {
		pd_cpu_conv_bf16(be, c, x, h, w, halo, y, &f32);
		if (!f32)
			return;
		/* no fast bf16 kernel for this shape: f32 from now on, and the
		 * bf16 primitives and weights go */
		pd_cpu_conv_drop_bf16(be, c);
	}
	p = pd_cpu_conv_prim(be, c, h, w, halo, 0, 0, 0, &f32);
	if (!p)
		return;
	DNNL_TRY(be, dnnl_memory_set_data_handle(p->src, (void *)x), fail);
	DNNL_TRY(be, dnnl_memory_set_data_handle(p->dst, y), fail);
	{
		dnnl_exec_arg_t args[4] = {
			{ DNNL_ARG_SRC, p->src },
			{ DNNL_ARG_WEIGHTS, p->wts },
			{ DNNL_ARG_BIAS, c->bias },
			{ DNNL_ARG_DST, p->dst },
		};

		/* With plain layouts oneDNN convolves by im2col + sgemm, and for
		 * few output channels (the VAE's last layer) sgemm splits the sums
		 * among the threads: the picture would differ by a level between
		 * 1 and 2 threads, so between one process and a data-parallel
		 * rank. One thread there; that layer is a small part of the decode. */
		int threads = omp_get_max_threads(), alone = c->c_out < 16 && threads > 1;
		dnnl_status_t st;

		if (alone)
			omp_set_num_threads(1);
		st = dnnl_primitive_execute(p->prim, cpu->stream, 4, args);
		if (st == dnnl_success)
			st = dnnl_stream_wait(cpu->stream);
		if (alone)
			omp_set_num_threads(threads);
		if (st != dnnl_success)
			pd_backend_fail(be, "oneDNN error %d running a convolution", (int)st);
	}
fail:
	return;
}
