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

void pd_cpu_conv_free(struct pd_backend *be, struct pd_conv *c)
{
	if (!c)
		return;
	be->weight_bytes -= c->bytes;
	for (int i = 0; i < c->n_prim; i++) {
		dnnl_primitive_destroy(c->p[i].prim);
		dnnl_memory_destroy(c->p[i].wts);
		dnnl_memory_destroy(c->p[i].src);
		dnnl_memory_destroy(c->p[i].dst);
	}
	if (c->w_user)
		dnnl_memory_destroy(c->w_user);
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

int pd_cpu_conv_create(struct pd_backend *be, struct pd_conv *c, struct pd_conv_prim *p, int h, int w,
		       int halo)
{
	struct pd_cpu *cpu = CPU(be);
	dnnl_memory_desc_t src_md, dst_md, w_any, b_md;
	dnnl_convolution_desc_t desc;
	dnnl_primitive_desc_t pd = NULL, rpd = NULL;
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
		dnnl_exec_arg_t args[2];

		DNNL_TRY(be, dnnl_memory_get_memory_desc(c->w_user, &have), out);
		DNNL_TRY(be, dnnl_memory_create(&p->wts, want, cpu->eng, DNNL_MEMORY_ALLOCATE), out);
		p->wbytes = dnnl_memory_desc_get_size(want);
		DNNL_TRY(be, dnnl_reorder_primitive_desc_create(&rpd, have, cpu->eng, want, cpu->eng, NULL), out);
		DNNL_TRY(be, dnnl_primitive_create(&reorder, rpd), out);
		args[0] = (dnnl_exec_arg_t){ DNNL_ARG_FROM, c->w_user };
		args[1] = (dnnl_exec_arg_t){ DNNL_ARG_TO, p->wts };
		DNNL_TRY(be, dnnl_primitive_execute(reorder, cpu->stream, 2, args), out);
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
	if (rpd)
		dnnl_primitive_desc_destroy(rpd);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (rc) {
		if (p->prim)
			dnnl_primitive_destroy(p->prim);
		if (p->wts)
			dnnl_memory_destroy(p->wts);
		if (p->src)
			dnnl_memory_destroy(p->src);
		memset(p, 0, sizeof(*p));
	}
	return rc;
}

void pd_cpu_conv(struct pd_backend *be, struct pd_conv *c, const float *x, int h, int w, int halo, float *y)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_conv_prim *p = NULL;

	if (be->failed)
		return;
	if (halo < 0 || halo > (c->k - 1) / 2) {
		pd_backend_fail(be, "convolution: halo of %d rows for a %dx%d kernel", halo, c->k, c->k);
		return;
	}
	for (int i = 0; i < c->n_prim; i++)
		if (c->p[i].h == h && c->p[i].w == w && c->p[i].halo == halo)
			p = &c->p[i];
	if (!p) {
		struct pd_conv_prim fresh;

		int threads = omp_get_max_threads(), rc;

		/* made for one thread where it runs on one (see below): oneDNN
		 * fixes its partition of the work when the primitive is made */
		if (c->c_out < 16)
			omp_set_num_threads(1);
		rc = pd_cpu_conv_create(be, c, &fresh, h, w, halo);
		omp_set_num_threads(threads);
		if (rc)
			return;
		be->allocations++;
		if (c->n_prim < PD_CONV_CACHE) {
			p = &c->p[c->n_prim++];
		} else {
			p = &c->p[c->next];
			c->next = (c->next + 1) % PD_CONV_CACHE;
			c->bytes -= p->wbytes;
			be->weight_bytes -= p->wbytes;
			dnnl_primitive_destroy(p->prim);
			dnnl_memory_destroy(p->wts);
			dnnl_memory_destroy(p->src);
			dnnl_memory_destroy(p->dst);
		}
		*p = fresh;
		c->bytes += p->wbytes;
		be->weight_bytes += p->wbytes;
	}
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
