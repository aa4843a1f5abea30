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
#include "pd_util.h"

#include <math.h>
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

double pd_plan_bytes(const struct pd_plan_work *w, const struct pd_plan_mesh *m)
{
	const struct pd_flux_config *c = w->cfg;
	double S = (double)(w->txt_len + w->img_len), L = (double)w->img_len, D = c->dim;
	double A = S * D * 4.0, pred = L * c->in_channels * 4.0, b = 0;
	int layers = c->num_layers + c->num_single_layers;
	int U = m->degree[PD_AXIS_ULYSSES], T = m->degree[PD_AXIS_TP], N = m->degree[PD_AXIS_PP];
	int R = m->distrifusion ? 1 : m->degree[PD_AXIS_RING], F = m->distrifusion ? m->degree[PD_AXIS_RING] : 1;
	int P = U * R;

	/* DistriFusion: every layer's own K and V rows to every other band, and
	 * the predictions gathered at the end of the step */
	if (F > 1)
		b += layers * 2.0 * A / F * (F - 1) + pred / F * (F - 1);
	if (N > 1) {
		/* per stage: its hidden states to the next stage once per step
		 * (the last stage: its predictions, gathered over its sequence
		 * shards, to every other stage); with sequence parallel inside
		 * the stage each of its layers' K/V rows to the stage's other
		 * ranks; with tensor parallel its all-reduces (two per double
		 * block, one per single). The busiest stage counts. */
		double most = 0;

		for (int st = 0; st < N; st++) {
			int first, count, reduces = 0;
			double x = st < N - 1 ? A / P : pred / P * (P - 1) + pred * (N - 1);

			pd_pipe_stage_blocks(c, N, st, &first, &count);
			for (int k = first; k < first + count; k++)
				reduces += k < c->num_layers ? 2 : 1;
			if (P > 1)
				x += count * 2.0 * A / ((double)P * T) * (P - 1);
			if (T > 1)
				x += reduces * A / P * 2.0 * (T - 1) / T;
			most = x > most ? x : most;
		}
		b += most;
		P = U = R = T = 1;
	}
	if (U > 1)	/* the q, k, v and output all-to-alls of the heads a shard holds */
		b += layers * 4.0 * A / ((double)U * R * T) * (U - 1) / U;
	if (R > 1)	/* the K/V hops of the ring */
		b += layers * 2.0 * A / ((double)U * R * T) * (R - 1);
	if (T > 1)	/* the row-parallel all-reduces: two per double block, one per single */
		b += (2.0 * c->num_layers + c->num_single_layers) * A / P * 2.0 * (T - 1) / T;
	if (P > 1)	/* the predictions gathered over the sequence shards */
		b += pred / P * (P - 1);
	if (m->degree[PD_AXIS_CFG] > 1)	/* the CFG pair's exchange */
		b += pred;
	return b * pd_plan_images(w, m) * pd_plan_branches(w, m);
}

/* Blocking transfers per step and image a rank waits for (latency terms). */
static int pd_plan_messages(const struct pd_plan_work *w, const struct pd_plan_mesh *m)
{
	const struct pd_flux_config *c = w->cfg;
	int layers = c->num_layers + c->num_single_layers, n = 0;
	int U = m->degree[PD_AXIS_ULYSSES], T = m->degree[PD_AXIS_TP], R = m->degree[PD_AXIS_RING];

	if (m->degree[PD_AXIS_PP] > 1 || m->distrifusion)
		return m->degree[PD_AXIS_CFG] > 1;
	if (U > 1)
		n += 2 * layers;
	if (R > 1)
		n += layers * (R - 1);
	if (T > 1)
		n += 2 * c->num_layers + c->num_single_layers;
	return n + (m->degree[PD_AXIS_CFG] > 1);
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
	double S = (double)(w->txt_len + w->img_len), D = c->dim, GB = 1e9, work, rate, bw, lat;
	double params = -1, params_min = -1;

	for (int a = 0; a < PD_AXIS_COUNT; a++)
		world *= m->degree[a];
	if (world != mc->devices)
		return pd_errorf("internal error: a mesh of %d processes for %d devices", world, mc->devices);
	memset(out, 0, sizeof(*out));
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
		/* the pipeline fills and drains every step: M patches through N
		 * stages take M + N - 1 patch times of a stage */
		double bubble = (double)(M + N - 1) / M;

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
	/* transfers: the ones within a node when the method's group fits in one */
	out->bytes = pd_plan_bytes(w, m);
	out->messages = pd_plan_messages(w, m) * pd_plan_images(w, m) * pd_plan_branches(w, m);
	{
		int span = T * P * (N > 1 ? N : 1);

		bw = span <= node ? mc->bw_intra : mc->bw_inter;
		lat = span <= node ? mc->lat_intra : mc->lat_inter;
	}
	out->comm_s = (bw > 0 ? out->bytes / bw : 0) + out->messages * lat;
	if (m->distrifusion || N > 1)
		/* DistriFusion's gathers and PipeFusion's sends run behind a
		 * step's (a patch's) compute: only what exceeds it shows */
		out->comm_s = out->comm_s > out->compute_s ? out->comm_s - out->compute_s : 0;
	else if (m->degree[PD_AXIS_RING] > 1)
		/* a ring hop travels while the previous chunk's attention runs */
		out->comm_s = fmax(0, out->comm_s - fl.attention * pd_plan_images(w, m) * pd_plan_branches(w, m) /
						 ((double)T * P) / 1e9 / rate);
	out->seconds = out->compute_s + out->comm_s;
	/* memory: the heaviest stage's weights (and the lightest's), the activations
	 * pdit allocates, the stale K/V the approximate methods keep */
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
	out->activations_gb = S / P * (3.0 * D + 4.0 * D / T + (double)c->mlp_dim / T + 256.0) * 4.0 / GB;
	if (N > 1)
		out->activations_gb += ceil((double)(c->num_layers + c->num_single_layers) / N) * 2.0 * S * D / T * 4.0 / GB;
	if (m->distrifusion)
		out->activations_gb += 2.0 * (c->num_layers + c->num_single_layers) * 2.0 * S * D * 4.0 / GB;
	out->memory_gb = out->weights_gb + out->activations_gb;
	out->fits = mc->mem_gb <= 0 || out->memory_gb * (mc->shared ? node : 1) <= mc->mem_gb;
	return 0;
}
