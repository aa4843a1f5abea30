/*
 * pd_plan.c - the cost model behind `pdit plan` (see pd_plan.h).
 *
 * Symbols below: S tokens (text + image), L image tokens, D inner width,
 * A = S D 4 bytes (one f32 activation of the whole sequence), U, R, T, N, F
 * the Ulysses, ring, tensor, pipeline and DistriFusion degrees, P = U R the
 * sequence-parallel degree. The byte counts are those of
 * parallel-methods.md for f32 activations, as pdit sends them.
 */
#include "pd_plan.h"
#include "pd_par_pipe.h"
#include "pd_safetensors.h"
#include "pd_vae.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int pd_plan_images(const struct pd_plan_work *w, const struct pd_plan_mesh *m)
{
	int dp = m->degree[PD_AXIS_DP];

	return (w->images + dp - 1) / dp;
}

static int pd_plan_branches(const struct pd_plan_work *w, const struct pd_plan_mesh *m)
{
	return m->degree[PD_AXIS_CFG] > 1 ? 1 : w->branches;
}

/* Bytes the largest rank sends per step, by the mesh axis whose groups
 * carry them (a sequence-parallel gather goes to the outer of ring and
 * Ulysses), and the blocking transfers it waits for (latency terms). */
static void pd_plan_traffic(const struct pd_plan_work *w, const struct pd_plan_mesh *m, double bytes[PD_AXIS_COUNT],
			    double msgs[PD_AXIS_COUNT])
{
	const struct pd_flux_config *c = w->cfg;
	double S = (double)(w->txt_len + w->img_len), L = (double)w->img_len, D = c->dim;
	double A = S * D * 4.0, pred = L * c->in_channels * 4.0, scale = pd_plan_images(w, m) * pd_plan_branches(w, m);
	int layers = c->num_layers + c->num_single_layers;
	int U = m->degree[PD_AXIS_ULYSSES], T = m->degree[PD_AXIS_TP], N = m->degree[PD_AXIS_PP];
	int R = m->distrifusion ? 1 : m->degree[PD_AXIS_RING], F = m->distrifusion ? m->degree[PD_AXIS_RING] : 1;
	int P = U * R;
	enum pd_axis sp = m->degree[PD_AXIS_RING] > 1 ? PD_AXIS_RING : PD_AXIS_ULYSSES;

	memset(bytes, 0, sizeof(double) * PD_AXIS_COUNT);
	memset(msgs, 0, sizeof(double) * PD_AXIS_COUNT);
	/* DistriFusion: every layer's own K and V rows to every other band, and
	 * the predictions gathered at the end of the step */
	if (F > 1)
		bytes[PD_AXIS_RING] += layers * 2.0 * A / F * (F - 1) + pred / F * (F - 1);
	if (N > 1) {
		/* per stage: its hidden states to the next stage once per step
		 * (the last stage: its predictions, gathered over its sequence
		 * shards, to every other stage); with sequence parallel inside
		 * the stage each of its layers' K/V rows to the stage's other
		 * ranks; with tensor parallel its all-reduces (two per double
		 * block, one per single). The busiest stage counts. */
		double most = -1, b[PD_AXIS_COUNT], n[PD_AXIS_COUNT];
		int M = m->patches > 0 ? m->patches : N;

		for (int st = 0; st < N; st++) {
			int first, count, reduces = 0;

			memset(b, 0, sizeof(b));
			memset(n, 0, sizeof(n));
			n[PD_AXIS_PP] = M;	/* a stage waits for each patch it receives */
			if (st < N - 1) {
				b[PD_AXIS_PP] = A / P;
			} else {
				b[sp] = pred / P * (P - 1);
				b[PD_AXIS_PP] = pred * (N - 1);
			}
			pd_pipe_stage_blocks(c, N, st, &first, &count);
			for (int k = first; k < first + count; k++)
				reduces += k < c->num_layers ? 2 : 1;
			if (P > 1) {	/* K and V gathered per layer and patch (and the
					 * last stage's prediction per patch) */
				b[sp] += count * 2.0 * A / ((double)P * T) * (P - 1);
				n[sp] = 2.0 * count * M + (st == N - 1 ? M : 0);
			}
			if (T > 1) {	/* an all-reduce per row-parallel layer and patch */
				b[PD_AXIS_TP] += reduces * A / P * 2.0 * (T - 1) / T;
				n[PD_AXIS_TP] = (double)reduces * M;
			}
			if (b[PD_AXIS_PP] + b[sp] + b[PD_AXIS_TP] > most) {
				most = b[PD_AXIS_PP] + b[sp] + b[PD_AXIS_TP];
				memcpy(bytes, b, sizeof(b));
				memcpy(msgs, n, sizeof(n));
			}
		}
		P = U = R = T = 1;
	}
	if (U > 1) {	/* the q, k, v and output all-to-alls of the heads a shard holds */
		bytes[PD_AXIS_ULYSSES] += layers * 4.0 * A / ((double)U * R * T) * (U - 1) / U;
		msgs[PD_AXIS_ULYSSES] += 2 * layers;
	}
	if (R > 1) {	/* the K/V hops of the ring */
		bytes[PD_AXIS_RING] += layers * 2.0 * A / ((double)U * R * T) * (R - 1);
		msgs[PD_AXIS_RING] += layers * (R - 1);
	}
	if (T > 1) {	/* the row-parallel all-reduces: two per double block, one per single */
		bytes[PD_AXIS_TP] += (2.0 * c->num_layers + c->num_single_layers) * A / P * 2.0 * (T - 1) / T;
		msgs[PD_AXIS_TP] += 2 * c->num_layers + c->num_single_layers;
	}
	if (P > 1)	/* the predictions gathered over the sequence shards */
		bytes[sp] += pred / P * (P - 1);
	if (m->degree[PD_AXIS_CFG] > 1) {	/* the CFG pair's exchange */
		bytes[PD_AXIS_CFG] += pred;
		msgs[PD_AXIS_CFG] += 1;
	}
	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		bytes[a] *= scale;
		msgs[a] *= scale;
	}
}

double pd_plan_bytes(const struct pd_plan_work *w, const struct pd_plan_mesh *m)
{
	double bytes[PD_AXIS_COUNT], msgs[PD_AXIS_COUNT], sum = 0;

	pd_plan_traffic(w, m, bytes, msgs);
	for (int a = 0; a < PD_AXIS_COUNT; a++)
		sum += bytes[a];
	return sum;
}

int pd_plan_axis_local(const struct pd_plan_mesh *m, int a, int per_node)
{
	int span = m->degree[a];

	for (int b = 0; b < a; b++)
		span *= m->degree[b];
	return m->degree[a] == 1 || (span <= per_node && per_node % span == 0);
}

/* Parameters of the blocks [first, first + count) of the block list
 * (double blocks first) at the given tensor-parallel degree, plus the
 * replicated embedders on every rank. */
static double pd_plan_params(const struct pd_flux_config *c, int first, int count, int tp)
{
	double D = c->dim, M = c->mlp_dim, p = 0;

	for (int k = first; k < first + count; k++)
		p += k < c->num_layers ? 20.0 * D * D + 4.0 * D * M : 7.0 * D * D + 2.0 * D * M;
	p /= tp;
	/* x_embedder, context_embedder, time/guidance/text embedders, norm_out, proj_out */
	p += D * c->in_channels + D * c->joint_attention_dim + 2.0 * 256 * D + 2.0 * D * D +
	     c->pooled_projection_dim * D + D * D + 2.0 * D * D + D * c->in_channels;
	return p;
}

int pd_plan_cost(const struct pd_plan_work *w, const struct pd_plan_machine *mc, const struct pd_plan_mesh *m,
		 struct pd_plan_cost *out)
{
	const struct pd_flux_config *c = w->cfg;
	struct pd_flux_flops fl = pd_flux_count_flops(c, w->txt_len, w->img_len);
	int world = 1, T = m->degree[PD_AXIS_TP], N = m->degree[PD_AXIS_PP];
	int P = m->degree[PD_AXIS_ULYSSES] * m->degree[PD_AXIS_RING], M = m->patches > 0 ? m->patches : N;
	int node = mc->per_node > 0 && mc->per_node < mc->devices ? mc->per_node : mc->devices;
	double S = (double)(w->txt_len + w->img_len), D = c->dim, GB = 1e9, work, rate;
	double params = -1, params_min = -1, wake = 0;

	for (int a = 0; a < PD_AXIS_COUNT; a++)
		world *= m->degree[a];
	if (world != mc->devices)
		return pd_errorf("internal error: a mesh of %d processes for %d devices", world, mc->devices);
	memset(out, 0, sizeof(*out));
	/* processes beyond one a core wait for their peer at each exchange */
	if (mc->shared && mc->cores > 0 && node > mc->cores)
		wake = mc->wake_s * ((double)node / mc->cores - 1);
	/* the heaviest stage's weights (and the lightest's) */
	for (int st = 0; st < N; st++) {
		int first, count;
		double p;

		pd_pipe_stage_blocks(c, N, st, &first, &count);
		p = pd_plan_params(c, first, count, T);
		params = p > params ? p : params;
		params_min = params_min < 0 || p < params_min ? p : params_min;
	}
	out->weights_gb = params * w->weight_bytes / GB;
	out->weights_min_gb = params_min * w->weight_bytes / GB;
	/* work of the busiest rank: its images and branches, split over the
	 * model-parallel degrees (stages are balanced by compute) */
	work = (fl.linear + fl.attention) * pd_plan_images(w, m) * pd_plan_branches(w, m);
	out->gflop = work / ((double)T * P * N) / 1e9;
	rate = mc->gflops;
	if (mc->shared)
		/* the node's cores are shared by its processes */
		rate = mc->gflops / node;
	out->compute_s = out->gflop / rate;
	if (N > 1) {
		/* the pipeline fills and drains every step: patches of s_j tokens
		 * through N stages take sum s_j + (N - 1) max s_j token times of
		 * a stage ((M + N - 1) / M of its work when equal); the first
		 * carries the text, so it is the largest when the text outweighs
		 * a band */
		double bubble = (double)(M + N - 1) / M;

		if (w->img_w > 0 && w->img_len % w->img_w == 0 && M <= w->img_len / w->img_w) {
			double sum = 0, most = 0;

			for (int j = 0; j < M; j++) {
				double t = (double)pd_pipe_piece_tokens(w->txt_len, w->img_len / w->img_w, w->img_w, M, j);

				sum += t;
				most = fmax(most, t);
			}
			bubble = (sum + (N - 1) * most) / sum;
		}

		if (mc->shared && mc->cores > 0) {
			/* a waiting stage leaves its cores to the others, but one
			 * process uses no more cores than its threads: the node's
			 * whole work at its rate, or the pipeline's critical path at
			 * one process's rate, whichever is longer */
			int threads = mc->cores / node > 0 ? mc->cores / node : 1;
			double alone = mc->gflops * (threads < mc->cores ? threads : mc->cores) / mc->cores;

			out->compute_s = fmax(out->compute_s, bubble * out->gflop / alone);
		} else {
			out->compute_s *= bubble;
		}
	}
	if (mc->mem_bw > 0)
		/* no shorter than reading the rank's weights once per forward
		 * pass (a PipeFusion stage's once per patch): what bounds a GPU
		 * whose share of the tokens has become small */
		out->compute_s = fmax(out->compute_s, out->weights_gb * GB * pd_plan_images(w, m) *
							      pd_plan_branches(w, m) * (N > 1 ? M : 1) / mc->mem_bw);
	/* transfers: each axis's over the link its groups span. PipeFusion's
	 * sends between stages and DistriFusion's gathers run behind the
	 * compute (only what exceeds it shows), a ring hop behind the previous
	 * chunk's attention; the rest (all-to-alls, all-reduces, gathers
	 * inside a stage) is waited for. */
	{
		double bytes[PD_AXIS_COUNT], msgs[PD_AXIS_COUNT], hidden = 0;

		pd_plan_traffic(w, m, bytes, msgs);
		for (int a = 0; a < PD_AXIS_COUNT; a++) {
			int local = pd_plan_axis_local(m, a, node);
			double bw = local ? mc->bw_intra : mc->bw_inter, lat = local ? mc->lat_intra : mc->lat_inter;
			double t = (bw > 0 ? bytes[a] / bw : 0);

			out->bytes += bytes[a];
			out->messages += (int)msgs[a];
			if (!local)
				out->inter_bytes += bytes[a];
			/* the latencies are waited for, even where the bytes travel
			 * behind compute */
			out->comm_s += msgs[a] * (lat + wake);
			if (a == PD_AXIS_PP || (a == PD_AXIS_RING && m->distrifusion))
				hidden += t;
			else if (a == PD_AXIS_RING && N == 1)
				out->comm_s += fmax(0, t - fl.attention * pd_plan_images(w, m) * pd_plan_branches(w, m) /
							     ((double)T * P) / 1e9 / rate);
			else
				out->comm_s += t;
		}
		out->comm_s += fmax(0, hidden - out->compute_s);
	}
	out->seconds = out->compute_s + out->comm_s;
	/* the decode: each data-parallel group's pictures, in bands over its
	 * ranks, every 3x3 convolution and GroupNorm an exchange */
	if (w->vae_gflop > 0) {
		int bands = mc->devices / m->degree[PD_AXIS_DP];
		double vrate = mc->vae_gflops > 0 ? mc->vae_gflops : mc->gflops;

		if (mc->shared)
			vrate /= node;
		out->vae_s = pd_plan_images(w, m) * (w->vae_gflop / bands / vrate +
						     (bands > 1 ? w->vae_exchanges * (mc->lat_intra + wake) : 0));
		out->vae_gb = w->vae_map_gb / bands;
	}
	/* memory: the activations pdit allocates, the stale K/V the
	 * approximate methods keep */
	out->activations_gb = S / P * (3.0 * D + 4.0 * D / T + (double)c->mlp_dim / T + 256.0) * 4.0 / GB;
	/* the K/V buffers are kept per image and branch the rank runs */
	if (N > 1)
		out->activations_gb += ceil((double)(c->num_layers + c->num_single_layers) / N) * 2.0 * S * D / T * 4.0 /
				       GB * pd_plan_images(w, m) * pd_plan_branches(w, m);
	if (m->distrifusion)
		out->activations_gb += 2.0 * (c->num_layers + c->num_single_layers) * 2.0 * S * D * 4.0 / GB *
				       pd_plan_images(w, m) * pd_plan_branches(w, m);
	out->memory_gb = fmax(fmax(out->weights_gb + out->activations_gb, w->encoders_gb), out->vae_gb);
	if (mc->shared) {
		/* a node's processes together; while one rank per data-parallel
		 * group encodes, the others hold nothing yet */
		int dp = m->degree[PD_AXIS_DP], group = mc->devices / dp;
		int encoding = (node + group - 1) / group < dp ? (node + group - 1) / group : dp;

		out->fits = mc->mem_gb <= 0 || fmax(node * fmax(out->weights_gb + out->activations_gb, out->vae_gb),
						    encoding * w->encoders_gb) <= mc->mem_gb;
	} else {
		out->fits = mc->mem_gb <= 0 || out->memory_gb <= mc->mem_gb;
	}
	return 0;
}

int pd_plan_encoder_gb(const char *path, int weight_bytes, double *gb)
{
	static const char *const tables[] = { "shared.weight", "embed_tokens.weight", "token_embedding.weight" };
	struct pd_st *st;
	double n = 0;

	if (pd_st_open_path(&st, path, "model"))
		return -1;
	for (int i = 0; i < st->n_tensors; i++) {
		const char *name = st->sorted[i]->name;
		size_t len = strlen(name);
		int table = 0;

		for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++)
			table |= len >= strlen(tables[k]) && strcmp(name + len - strlen(tables[k]), tables[k]) == 0;
		if (!table)
			n += (double)st->sorted[i]->numel;
	}
	pd_st_close(st);
	*gb = n * weight_bytes / 1e9;
	return 0;
}

static int pd_plan_cmp(const void *a, const void *b)
{
	const struct pd_plan_row *x = a, *y = b;

	if (x->cost.fits != y->cost.fits)
		return y->cost.fits - x->cost.fits;
	return (x->cost.seconds > y->cost.seconds) - (x->cost.seconds < y->cost.seconds);
}

int pd_plan_list(const struct pd_plan_work *w, const struct pd_plan_machine *mc, const struct pd_mesh_limits *lim,
		 struct pd_plan_row **rows_out, int *n_out)
{
	int (*meshes)[PD_AXIS_COUNT] = NULL;
	struct pd_plan_row *rows = NULL;
	int n = pd_mesh_enumerate(lim, NULL, 0), k = 0;

	*rows_out = NULL;
	*n_out = 0;
	meshes = pd_calloc((size_t)n + 1, sizeof(*meshes), "meshes");
	rows = pd_calloc((size_t)(2 * n) + 1, sizeof(*rows), "meshes");
	if (!meshes || !rows)
		goto fail;
	pd_mesh_enumerate(lim, meshes, n);
	for (int i = 0; i < n; i++) {
		for (int df = 0; df < 2; df++) {
			struct pd_plan_row *r = &rows[k];

			/* DistriFusion on the ring axis, with CFG and data parallel only */
			if (df && (meshes[i][PD_AXIS_RING] < 2 || meshes[i][PD_AXIS_ULYSSES] > 1 ||
				   meshes[i][PD_AXIS_TP] > 1 || meshes[i][PD_AXIS_PP] > 1))
				continue;
			memcpy(r->mesh.degree, meshes[i], sizeof(meshes[i]));
			r->mesh.distrifusion = df;
			r->stale = df || meshes[i][PD_AXIS_PP] > 1;
			if (pd_plan_cost(w, mc, &r->mesh, &r->cost))
				goto fail;
			k++;
		}
	}
	qsort(rows, (size_t)k, sizeof(*rows), pd_plan_cmp);
	free(meshes);
	*rows_out = rows;
	*n_out = k;
	return 0;
fail:
	free(meshes);
	free(rows);
	return -1;
}

void pd_plan_vae(struct pd_plan_work *w, const struct pd_vae_config *c, int height, int width)
{
	/* FLOPs of a k x k convolution of CI to CO channels on an h x w map */
#define PD_CONV(k, ci, co, h, w) (2.0 * (k) * (k) * (ci) * (co) * (double)(h) * (double)(w))
	int n = c->n_blocks, top = c->block_out[n - 1], prev = top;
	double h = height, wd = width, f = 0;
	int ex = 0;

	for (int i = 1; i < n; i++) {
		h /= 2;
		wd /= 2;
	}
	/* conv_in, the mid block's two resnets and its attention */
	f += PD_CONV(3, c->latent_channels, top, h, wd) + 4 * PD_CONV(3, top, top, h, wd);
	ex += 5 + 4;
	if (c->mid_attention) {
		f += 4 * 2.0 * h * wd * top * top + 4.0 * (h * wd) * (h * wd) * top;
		ex += 1;
	}
	for (int i = 0; i < n; i++) {
		int ch = c->block_out[n - 1 - i];

		for (int j = 0; j <= c->layers_per_block; j++) {
			int ci = j == 0 ? prev : ch;

			f += PD_CONV(3, ci, ch, h, wd) + PD_CONV(3, ch, ch, h, wd) + (ci != ch ? PD_CONV(1, ci, ch, h, wd) : 0);
			ex += 4;
		}
		if (i < n - 1) {
			h *= 2;
			wd *= 2;
			f += PD_CONV(3, ch, ch, h, wd);
			ex += 1;
		}
		prev = ch;
	}
	f += PD_CONV(3, c->block_out[0], c->out_channels, h, wd);
	ex += 2;
#undef PD_CONV
	w->vae_gflop = f / 1e9;
	w->vae_exchanges = ex;
	w->vae_map_gb = 2.0 * c->block_out[0] * (double)height * width * 4.0 / 1e9;
}
