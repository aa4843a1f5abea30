/*
 * pd_cpu_elementwise.c - elementwise, normalisation and layout kernels.
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
/* Elementwise and normalisation kernels                                   */
/* ----------------------------------------------------------------------- */

void pd_cpu_fill(struct pd_backend *be, float *y, float v, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = v;
}

void pd_cpu_silu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] / (1.0f + expf(-x[i]));
}

void pd_cpu_quick_gelu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] * (1.0f / (1.0f + expf(-1.702f * x[i])));
}

void pd_cpu_mul(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] * b[i];
}

void pd_cpu_add(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}

void pd_cpu_sub(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] - b[i];
}

/* A row's mean and 1 / sqrt(variance + eps), summed in double (two
 * passes, as torch's layer_norm keeps the mean apart from the spread).
 * The mean comes as two floats, MEAN + LOW: x - mean is exact where x is
 * near the mean (Sterbenz), so (x - mean) - low keeps the digits a mean
 * rounded to float would lose there (up to half its ulp / sqrt(eps), 4e-5
 * of the output at |mean| 2, eps 1e-5). */
static void pd_row_stats(const float *xr, int64_t dim, float eps, float *mean, float *low, float *rstd)
{
	double sum = 0, sq = 0, md;

	for (int64_t j = 0; j < dim; j++)
		sum += xr[j];
	md = sum / (double)dim;
	for (int64_t j = 0; j < dim; j++) {
		double d = (double)xr[j] - md;

		sq += d * d;
	}
	*mean = (float)md;
	*low = (float)(md - (double)*mean);
	*rstd = (float)(1.0 / sqrt(sq / (double)dim + (double)eps));
}

void pd_cpu_layernorm(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
		      int64_t rows, int64_t dim, const float *w, const float *b, float eps)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * ldx;
		float *yr = y + r * ldy;
		float mean, low, rstd;

		pd_row_stats(xr, dim, eps, &mean, &low, &rstd);
		for (int64_t j = 0; j < dim; j++) {
			float t = ((xr[j] - mean) - low) * rstd;

			if (w)
				t = t * w[j];
			yr[j] = b ? t + b[j] : t;
		}
	}
}

void pd_cpu_layernorm_mod(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
			  int64_t rows, int64_t dim, const float *scale, const float *shift, float eps)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * ldx;
		float *yr = y + r * ldy;
		float mean, low, rstd;

		pd_row_stats(xr, dim, eps, &mean, &low, &rstd);
		if (scale) {
			for (int64_t j = 0; j < dim; j++) {
				float t = ((xr[j] - mean) - low) * rstd;

				t = t * (1.0f + scale[j]);
				yr[j] = t + shift[j];
			}
		} else {
			for (int64_t j = 0; j < dim; j++)
				yr[j] = ((xr[j] - mean) - low) * rstd;
		}
	}
}

void pd_cpu_rmsnorm_heads(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads,
			  int head_dim, const float *w, float eps)
{
	if (be->failed)
		return;
#pragma omp parallel for collapse(2) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		for (int h = 0; h < heads; h++) {
			float *v = x + r * ldx + (int64_t)h * head_dim;
			double sq = 0;
			float rs;

			for (int d = 0; d < head_dim; d++)
				sq += (double)v[d] * v[d];
			rs = (float)(1.0 / sqrt(sq / head_dim + (double)eps));
			for (int d = 0; d < head_dim; d++)
				v[d] = (v[d] * rs) * w[d];
		}
	}
}

void pd_cpu_row_sumsq(struct pd_backend *be, float *sumsq, const float *x, int64_t ldx, int64_t rows, int64_t cols)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *v = x + r * ldx;
		double sq = 0;

		for (int64_t d = 0; d < cols; d++)
			sq += (double)v[d] * v[d];
		sumsq[r] = (float)sq;
	}
}

void pd_cpu_rms_apply(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int64_t cols, const float *sumsq,
		      int64_t n, const float *w, float eps)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		float *v = x + r * ldx;
		float rs = (float)(1.0 / sqrt((double)sumsq[r] / (double)n + (double)eps));

		for (int64_t d = 0; d < cols; d++)
			v[d] = (v[d] * rs) * w[d];
	}
}

void pd_cpu_rope(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
		 const float *cos, const float *sin)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *c = cos + r * head_dim, *s = sin + r * head_dim;

		for (int h = 0; h < heads; h++) {
			float *v = x + r * ldx + (int64_t)h * head_dim;

			for (int d = 0; d < head_dim; d += 2) {
				float a = v[d], b = v[d + 1];
				float t0 = a * c[d], t1 = b * s[d];
				float u0 = b * c[d + 1], u1 = a * s[d + 1];

				v[d] = t0 - t1;
				v[d + 1] = u0 + u1;
			}
		}
	}
}

void pd_cpu_gated_add(struct pd_backend *be, float *x, int64_t ldx, const float *y, int64_t ldy,
		      int64_t rows, int64_t dim, const float *gate)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		float *xr = x + r * ldx;
		const float *yr = y + r * ldy;

		for (int64_t j = 0; j < dim; j++) {
			float t = gate[j] * yr[j];

			xr[j] = xr[j] + t;
		}
	}
}


void pd_cpu_group_stats(struct pd_backend *be, const float *x, int c, int64_t hw, int groups,
			double *stats)
{
	int cpg = c / groups;

	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int g = 0; g < groups; g++) {
		const float *xg = x + (int64_t)g * cpg * hw;
		int64_t n = (int64_t)cpg * hw;
		double sum = 0, sq = 0;

		for (int64_t i = 0; i < n; i++) {
			sum += xg[i];
			sq += (double)xg[i] * xg[i];
		}
		stats[2 * g] = sum;
		stats[2 * g + 1] = sq;
	}
}

void pd_cpu_group_apply(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c,
			int64_t hw, int groups, const double *stats, double count, const float *gamma,
			const float *beta, float eps, int silu)
{
	int cpg = c / groups;

	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int ch = 0; ch < c; ch++) {
		int g = ch / cpg;
		double mean_d = stats[2 * g] / count, var = stats[2 * g + 1] / count - mean_d * mean_d;
		float mean = (float)mean_d, rstd = (float)(1.0 / sqrt((var > 0 ? var : 0) + (double)eps));
		const float *xc = x + (int64_t)ch * hw;
		float *yc = y + (int64_t)ch * y_cstride;

		for (int64_t i = 0; i < hw; i++) {
			float t = ((xc[i] - mean) * rstd) * gamma[ch] + beta[ch];

			yc[i] = silu ? t / (1.0f + expf(-t)) : t;
		}
	}
}

void pd_cpu_rms_channels(struct pd_backend *be, float *y, const float *x, int c, int64_t hw, const float *gamma,
			  int silu)
{
	float scale = sqrtf((float)c);

	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < hw; i++) {
		float s = 0, d;

		for (int ch = 0; ch < c; ch++)
			s += x[(int64_t)ch * hw + i] * x[(int64_t)ch * hw + i];
		/* F.normalize's x / max(|x|, eps), then * sqrt(c) * gamma */
		d = sqrtf(s);
		d = d > 1e-12f ? d : 1e-12f;
		for (int ch = 0; ch < c; ch++) {
			float t = (x[(int64_t)ch * hw + i] / d) * scale * gamma[ch];

			y[(int64_t)ch * hw + i] = silu ? t / (1.0f + expf(-t)) : t;
		}
	}
}

void pd_cpu_upsample2x(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c, int h,
		       int w)
{
	if (be->failed)
		return;
#pragma omp parallel for collapse(2) schedule(static)
	for (int ch = 0; ch < c; ch++) {
		for (int i = 0; i < 2 * h; i++) {
			const float *xr = x + ((int64_t)ch * h + i / 2) * w;
			float *yr = y + (int64_t)ch * y_cstride + (int64_t)i * 2 * w;

			for (int j = 0; j < 2 * w; j++)
				yr[j] = xr[j / 2];
		}
	}
}

void pd_cpu_transpose(struct pd_backend *be, float *y, const float *x, int64_t rows, int64_t cols)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t c = 0; c < cols; c++)
		for (int64_t r = 0; r < rows; r++)
			y[c * rows + r] = x[r * cols + c];
}
