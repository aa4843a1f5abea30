/*
 * pd_plan.c - the cost model behind `pdit plan` (see pd_plan.h).
 *
 * Symbols below: S tokens (text + image), L image tokens, D inner width,
 * A = S D 4 bytes (one f32 activation of the whole sequence), U, R, T, N, F
 * the Ulysses, ring, tensor, pipeline and DistriFusion degrees, P = U R the
 * sequence-parallel degree. What each method sends is its record's count
 * (parallel/pd_par_method.h).
 */
#include "pd_plan.h"
#include "pd_par_method.h"
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

/* What the busiest rank sends per step: every method's count of one
 * transformer pass (pd_par_method.h), times the passes a rank runs. */
static void pd_plan_traffic(const struct pd_plan_work *w, const struct pd_plan_mesh *m, double bytes[PD_AXIS_COUNT],
			    double msgs[PD_AXIS_COUNT], double rounds[PD_AXIS_COUNT])
{
	struct pd_par_step st = { w->info, w->txt_len, w->img_len + w->ref_len, { 0 }, m->patches };
	struct pd_par_sends out = { { 0 }, { 0 }, { 0 } };
	double scale = pd_plan_images(w, m) * pd_plan_branches(w, m);

	memcpy(st.degree, m->degree, sizeof(st.degree));
	for (int i = 0; pd_par_methods[i]; i++)
		if (pd_par_methods[i]->sends)
			pd_par_methods[i]->sends(&st, &out);
	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		bytes[a] = out.bytes[a] * scale;
		msgs[a] = out.msgs[a] * scale;
		rounds[a] = out.rounds[a] * scale;
	}
}

double pd_plan_bytes(const struct pd_plan_work *w, const struct pd_plan_mesh *m)
{
	double bytes[PD_AXIS_COUNT], msgs[PD_AXIS_COUNT], rounds[PD_AXIS_COUNT], sum = 0;

	pd_plan_traffic(w, m, bytes, msgs, rounds);
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

/* Parameters of the blocks [first, first + count) at the given
 * tensor-parallel degree, plus the replicated ones on every rank. */
static double pd_plan_params(const struct pd_dit_info *c, int first, int count, int tp)
{
	double p = 0;

	for (int k = first; k < first + count; k++)
		p += c->block_params[k];
	return p / tp + c->fixed_params;
}

/* The share of a forward pass's block work that blocks [first, first + count)
 * do (their linear layers per token; attention is alike in every block). */
static double pd_plan_share(const struct pd_dit_info *c, int first, int count)
{
	double part = 0, all = 0;

	for (int k = 0; k < c->blocks; k++) {
		all += c->block_cost[k];
		if (k >= first && k < first + count)
			part += c->block_cost[k];
	}
	return all > 0 ? part / all : (double)count / c->blocks;
}

/* The passes over each row of its stream that blocks [first, first + count)
 * make in the elementwise kernels. */
static double pd_plan_passes(const struct pd_dit_info *c, int first, int count)
{
	double e = 0;

	for (int k = first; k < first + count; k++)
		e += c->block_passes[k];
	return e;
}

/* Seconds (-1: out of memory) for M patches through N stages: stage j
 * takes STAGE[j] x PATCH[i] seconds at full speed for patch i (STAGE: its
 * step's work, PATCH: the patches' shares of it), and takes patch i once the stage
 * before has finished it and it has finished patch i - 1. The stages that
 * can run share CAPACITY full speeds (each at most one): on devices of their
 * own, CAPACITY >= N and this is the longest path, sum w + (N - 1) max w
 * for equal stages; on shared cores fewer, and the step is longer than
 * both that path and the node's whole work at the node's rate: in the fill
 * and the drain cores stand idle, in between the stages queue for them. */
static double pd_plan_pipeline(int N, int M, const double *stage, const double *patch, double capacity)
{
	int *done = calloc((size_t)N * 2, sizeof(int)), *ready = done + N;
	double *left = malloc(sizeof(double) * (size_t)N), t = 0, eps = 0;

	if (!done || !left) {
		free(done);
		free(left);
		return -1;
	}
	for (int j = 0; j < N; j++) {
		if (!isfinite(stage[j]) || stage[j] < 0) {
			t = INFINITY;
			goto out;
		}
		eps += 1e-12 * stage[j];
		left[j] = stage[j] * patch[0];
	}
	/* each pass ends at least one stage's patch */
	for (long pass = 0; pass <= (long)N * M; pass++) {
		int k = 0;
		double speed, dt = -1;

		for (int j = 0; j < N; j++) {
			ready[j] = done[j] < M && (j == 0 || done[j - 1] > done[j]);
			k += ready[j];
		}
		if (k == 0)
			break;
		speed = fmin(1.0, capacity / k);
		for (int j = 0; j < N; j++)
			if (ready[j] && (dt < 0 || left[j] / speed < dt))
				dt = left[j] / speed;
		t += dt;
		for (int j = 0; j < N; j++) {
			if (!ready[j])
				continue;
			left[j] -= dt * speed;
			if (left[j] <= eps && ++done[j] < M)
				left[j] = stage[j] * patch[done[j]];
		}
	}
out:
	free(done);
	free(left);
	return t;
}

static int pd_plan_cost_held(const struct pd_plan_work *w, const struct pd_plan_machine *mc,
			     const struct pd_plan_mesh *m, struct pd_plan_cost *out)
{
	double kept;
	const struct pd_dit_info *c = w->info;
	/* the image's tokens and a reference's: one sequence for every method */
	int64_t L = w->img_len + w->ref_len;
	struct pd_dit_flops fl = pd_dit_count_flops(c, w->txt_len, L);
	int world = 1, T = m->degree[PD_AXIS_TP], N = m->degree[PD_AXIS_PP];
	int P = pd_mesh_seq_degree(m->degree), M = m->patches > 0 ? m->patches : N;
	int node = mc->per_node > 0 && mc->per_node < mc->devices ? mc->per_node : mc->devices;
	double S = (double)(w->txt_len + L), D = c->dim, GB = 1e9, work, rate;
	double fwd = pd_plan_images(w, m) * pd_plan_branches(w, m);
	/* the layers on int8 products run int8_speed times the rate: their
	 * weights' share of the linear work (a stand-in for their work), the
	 * rest of it and attention as timed */
	double lin_q = mc->int8_speed > 0 ? fl.linear * c->kept_fraction * c->int8_fraction : 0;
	double slow = fl.linear + fl.attention > 0 ?
		(fl.linear - lin_q + (lin_q > 0 ? lin_q / mc->int8_speed : 0) + fl.attention) / (fl.linear + fl.attention) : 1;
	/* the processes that share one set of cores: a node's, or with nodes
	 * that are namespaces of one machine, all of them */
	int sharers = mc->shared ? (mc->one_machine ? mc->devices : node) : 1;
	double params = -1, params_min = -1, passes = 0, pass_bytes = 0, most = 0;
	/* processes per core beyond one: on shared cores a transfer is a copy
	 * the cores make and gets their share of them (none of it runs behind
	 * the compute), and each round of an exchange waits for the peer to be
	 * scheduled */
	double crowd = mc->shared && mc->cores > 0 && sharers > mc->cores ? (double)sharers / mc->cores : 1;
	double wake = mc->wake_s * (crowd - 1), elem_bw = mc->elem_bw > 0 ? mc->elem_bw : mc->mem_bw;

	for (int a = 0; a < PD_AXIS_COUNT; a++)
		world *= m->degree[a];
	if (world != mc->devices)
		return pd_errorf("internal error: a mesh of %d processes for %d devices", world, mc->devices);
	memset(out, 0, sizeof(*out));
	/* the heaviest stage's weights (and the lightest's), blocks and
	 * elementwise passes */
	for (int st = 0; st < N; st++) {
		int first, count;
		double p;

		pd_mesh_stage_blocks(c, N, st, &first, &count);
		p = pd_plan_params(c, first, count, T);
		params = p > params ? p : params;
		params_min = params_min < 0 || p < params_min ? p : params_min;
		passes = fmax(passes, pd_plan_passes(c, first, count));
		most = fmax(most, pd_plan_share(c, first, count));
	}
	out->weights_gb = params * w->weight_bytes / GB;
	out->weights_min_gb = params_min * w->weight_bytes / GB;
	/* adapters sit beside the layers: the rank's share of them is its
	 * share of the weights */
	if (w->adapter_bytes > 0) {
		double all = pd_plan_params(c, 0, c->blocks, 1);

		out->weights_gb += w->adapter_bytes * params / all / GB;
		out->weights_min_gb += w->adapter_bytes * params_min / all / GB;
	}
	/* work of the busiest rank: its images and branches, split over the
	 * tensor- and sequence-parallel degrees, and its stage's share of the
	 * blocks (the layers outside the blocks counted with them) */
	work = (fl.linear + fl.attention) * pd_plan_images(w, m) * pd_plan_branches(w, m) / ((double)T * P);
	out->gflop = work * most / 1e9;
	/* the node's cores are shared by its processes */
	rate = mc->gflops / sharers;
	/* tensor parallel shards the products, not the elementwise work over
	 * the rank's rows: each shard repeats it (the rest of it is in the
	 * whole-step rate) */
	if (T > 1 && elem_bw > 0)
		pass_bytes = S / P * D * 4.0 * pd_plan_images(w, m) * pd_plan_branches(w, m) * (1.0 - 1.0 / T);
	out->compute_s = out->gflop * slow / rate + (pass_bytes > 0 ? passes * pass_bytes / (elem_bw / sharers) : 0);
	/* a product pays for its weights whatever its rows (weight_s): the
	 * rate holds that at the whole sequence's rows, one product a layer
	 * and forward pass; a rank of sequence parallel runs 1/P of the rows
	 * through all its weights */
	if (mc->weight_s > 0 && N == 1) {
		out->weight_extra_s = mc->weight_s * sharers * params * fwd * (1.0 - 1.0 / P);
		out->compute_s += out->weight_extra_s;
	}
	if (N > 1) {
		/* the pipeline fills and drains every step; the first patch
		 * carries the text, so it is the largest when the text outweighs
		 * an image band. A stage's process alone runs at its threads'
		 * share of the node; on shared cores the stages that can run
		 * share them, on devices each has its own. */
		double sum = 0, bare_s, *patch = malloc(sizeof(double) * (size_t)(M + 2 * N)), *stage = patch + M;
		double *bare = stage + N;
		double alone = mc->gflops, elem_alone = elem_bw, capacity = N;
		int bands = w->img_w > 0 && L % w->img_w == 0 && M <= L / w->img_w;

		if (!patch)
			return pd_errorf("out of memory");
		for (int j = 0; j < M; j++) {
			patch[j] = bands ? (double)pd_mesh_band_tokens(w->txt_len, L / w->img_w, w->img_w, M, j)
					 : 1.0;
			sum += patch[j];
		}
		for (int j = 0; j < M; j++)
			patch[j] /= sum;
		if (mc->shared && mc->cores > 0) {
			int threads = mc->cores / sharers > 0 ? mc->cores / sharers : 1;

			alone = mc->gflops * threads / mc->cores;
			elem_alone = elem_bw * threads / mc->cores;
			/* stages at full speed the cores hold at once: each
			 * stage has sharers / N processes of THREADS threads
			 * here (stages on nodes of their own do not queue) */
			if (mc->one_machine || pd_plan_axis_local(m, PD_AXIS_PP, node))
				capacity = (double)mc->cores * N / ((double)sharers * threads);
		}
		for (int st = 0; st < N; st++) {
			int first, count;

			pd_mesh_stage_blocks(c, N, st, &first, &count);
			bare[st] = work * slow * pd_plan_share(c, first, count) / 1e9 / alone +
				   (pass_bytes > 0 ? pd_plan_passes(c, first, count) * pass_bytes / elem_alone : 0);
			/* each of the M patches (1/(P M) of the rows) runs through
			 * the stage's weights: M - 1/P products' weights beyond
			 * what the rate holds */
			stage[st] = bare[st] + mc->weight_s * mc->gflops / alone * pd_plan_params(c, first, count, T) *
						       fwd * (M - 1.0 / P);
		}
		out->compute_s = pd_plan_pipeline(N, M, stage, patch, capacity);
		bare_s = mc->weight_s > 0 ? pd_plan_pipeline(N, M, bare, patch, capacity) : out->compute_s;
		free(patch);
		if (out->compute_s < 0 || bare_s < 0)
			return pd_errorf("out of memory");
		/* (an endless pipeline's inf - inf is no part) */
		out->weight_extra_s = isfinite(out->compute_s) ? out->compute_s - bare_s : 0;
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
	 * chunk's attention, except through shared memory on shared cores,
	 * where a transfer is a copy those cores make (across a network link
	 * the wire's time is not theirs: ring 4 on 2 x 2 namespaces at 1
	 * Gbit/s cost nothing measurable, where charged as a copy it was
	 * predicted 22% slower than unshaped); the rest (all-to-alls,
	 * all-reduces, gathers inside a stage) is waited for. */
	{
		double bytes[PD_AXIS_COUNT], msgs[PD_AXIS_COUNT], rounds[PD_AXIS_COUNT], hidden = 0;

		pd_plan_traffic(w, m, bytes, msgs, rounds);
		for (int a = 0; a < PD_AXIS_COUNT; a++) {
			int local = pd_plan_axis_local(m, a, node);
			double bw = local ? mc->bw_intra : mc->bw_inter, lat = local ? mc->lat_intra : mc->lat_inter;
			double t = (bw > 0 ? bytes[a] * crowd / bw : 0);

			out->bytes += bytes[a];
			out->messages += (int)msgs[a];
			out->rounds += (int)rounds[a];
			if (!local)
				out->inter_bytes += bytes[a];
			/* the latencies are waited for, even where the bytes travel
			 * behind compute; an oversubscribed process waits for each
			 * peer of a round to be scheduled */
			out->comm_s += msgs[a] * lat + rounds[a] * wake;
			if (mc->shared && local)
				out->comm_s += t;
			else if (pd_axes[a].overlap == PD_OVERLAP_STEP)
				hidden += t;
			/* (ring's gathered form waits for its gathers) */
			else if (pd_axes[a].overlap == PD_OVERLAP_ATTENTION && N == 1 &&
				 !(a == PD_AXIS_RING && c->ring_gathered))
				out->comm_s += fmax(0, t - fl.attention * pd_plan_images(w, m) * pd_plan_branches(w, m) /
							     ((double)T * P) / 1e9 / rate);
			else
				out->comm_s += t;
		}
		out->comm_s += fmax(0, hidden - out->compute_s);
	}
	out->seconds = out->compute_s + out->comm_s;
	/* the decode: each data-parallel group's pictures, in bands over its
	 * ranks, every 3x3 convolution and GroupNorm an exchange (taken as one
	 * round each: a GroupNorm's all-reduce has bands - 1, a halo one) */
	if (w->vae_gflop > 0) {
		int bands = mc->devices / m->degree[PD_AXIS_DP];
		double vrate = mc->vae_gflops > 0 ? mc->vae_gflops : mc->gflops;

		if (mc->shared)
			vrate /= sharers;
		out->vae_s = pd_plan_images(w, m) * (w->vae_gflop / bands / vrate +
						     (bands > 1 ? w->vae_exchanges * (mc->lat_intra + wake) : 0));
		out->vae_gb = w->vae_map_gb / bands;
	}
	/* memory: the activations pdit allocates, the stale K/V the
	 * approximate methods keep */
	out->activations_gb = S / P * (3.0 * D + 4.0 * D / T + (double)c->mlp_width / T + 256.0) * 4.0 / GB;
	/* tensor parallel's whole inputs (pd_dit_shard.whole_inputs): two
	 * layers' gathered rows at once, at most the MLP's width, and a gather's
	 * staging buffer */
	if (T > 1 && c->tp_whole_inputs)
		out->activations_gb += (S / P * 2.0 * c->mlp_width + (double)PD_DIT_STAGE_FLOATS) * 4.0 / GB;
	/* ring's gathered form: the sequence's K and V in order, and as
	 * received where text rows must move first (a context text is no
	 * key of the sequence), and my chunk sent; the merged form's two
	 * chunks not taken off; and attention's copies of the keys and values
	 * it reads (the CPU's head-major operands, f32 at most), as many more
	 * as keys than a chunk's: on a small model those outgrow the chunks */
	if (m->degree[PD_AXIS_RING] > 1 && N <= 1 && c->ring_gathered)
		out->activations_gb += ((c->txt_context ? 2.0 * L : 3.0 * S) / m->degree[PD_AXIS_ULYSSES] +
					(c->txt_context ? L : S) / P +
					2.0 * (c->txt_context ? L : S) / m->degree[PD_AXIS_ULYSSES] *
						(1.0 - 1.0 / m->degree[PD_AXIS_RING])) * D / T * 4.0 / GB;
	/* the K/V buffers are kept per image and branch the rank runs */
	if (N > 1)
		out->activations_gb += ceil((double)c->blocks / N) * 2.0 * S * D / T * 4.0 /
				       GB * pd_plan_images(w, m) * pd_plan_branches(w, m);
	if (m->degree[PD_AXIS_DISTRI] > 1)
		out->activations_gb += 2.0 * c->blocks * 2.0 * S * D * 4.0 / GB *
				       pd_plan_images(w, m) * pd_plan_branches(w, m);
	/* kept text encoders stay beside the transformer and the decode;
	 * otherwise they are freed before the transformer loads */
	kept = w->encoders_kept ? w->encoders_gb : 0;
	out->memory_gb = fmax(fmax(out->weights_gb + out->activations_gb, w->encoders_kept ? 0 : w->encoders_gb),
			      out->vae_gb) + kept;
	if (mc->shared) {
		/* a node's processes together; while one rank per data-parallel
		 * group encodes, the others hold nothing yet */
		int dp = m->degree[PD_AXIS_DP], group = mc->devices / dp;
		int encoding = (sharers + group - 1) / group < dp ? (sharers + group - 1) / group : dp;

		out->fits = mc->mem_gb <= 0 ||
			    fmax(sharers * fmax(out->weights_gb + out->activations_gb, out->vae_gb) + encoding * kept,
				 encoding * w->encoders_gb) <= mc->mem_gb;
	} else {
		out->fits = mc->mem_gb <= 0 || out->memory_gb <= mc->mem_gb;
	}
	return 0;
}

int pd_plan_cost(const struct pd_plan_work *w, const struct pd_plan_machine *mc, const struct pd_plan_mesh *m,
		 struct pd_plan_cost *out)
{
	const struct pd_dit_info *c = w->info;
	struct pd_dit_info file;
	struct pd_plan_work wf;
	struct pd_plan_cost cf;

	if (pd_plan_cost_held(w, mc, m, out))
		return -1;
	if (out->fits || !(c->kept_bytes_stored > 0))
		return 0;
	/* as a run does where auto's int8 layout does not fit
	 * (pd_engine_check_memory_layout): the file's blocks, decoded (and
	 * where they do not fit either, its refusal names their need) */
	file = *c;
	pd_dit_info_as_stored(&file);
	wf = *w;
	wf.info = &file;
	wf.weight_bytes = pd_dit_weight_bytes(&file, w->compute_bytes);
	if (pd_plan_cost_held(&wf, mc, m, &cf))
		return -1;
	*out = cf;
	out->decoded = 1;
	return 0;
}

int pd_plan_encoder_gb(const char *path, double weight_bytes, double *gb)
{
	static const char *const tables[] = { "shared.weight", "embed_tokens.weight", "token_embedding.weight" };
	/* (the token tables: only the prompt's rows are read) */
	struct pd_st *st;
	double bytes = 0;

	if (pd_st_open_path(&st, path, "model"))
		return -1;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];
		size_t len = strlen(t->name);
		enum pd_qtype type;
		float scale;
		int table = 0;

		for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++)
			table |= len >= strlen(tables[k]) && strcmp(t->name + len - strlen(tables[k]), tables[k]) == 0;
		/* never read either: a language model's head and a vision tower
		 * (Qwen2.5-VL's, beside the language model Qwen-Image reads) */
		table |= (len >= 14 && strcmp(t->name + len - 14, "lm_head.weight") == 0) || !strncmp(t->name, "visual.", 7) ||
			 strstr(t->name, ".visual.") != NULL;
		if (table)
			continue;
		/* a 2-D weight in a block format is held as stored */
		if (t->ndim == 2 && pd_st_block_format(t, &type, &scale))
			bytes += (double)t->nbytes;
		else
			bytes += (double)t->numel * weight_bytes;
	}
	pd_st_close(st);
	*gb = bytes / 1e9;
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
	struct pd_mesh_limits all = *lim;
	int n, k = 0;

	*rows_out = NULL;
	*n_out = 0;
	/* DistriFusion's meshes too */
	all.distri = 1;
	n = pd_mesh_enumerate(&all, NULL, 0);
	meshes = pd_calloc((size_t)n + 1, sizeof(*meshes), "meshes");
	rows = pd_calloc((size_t)n + 1, sizeof(*rows), "meshes");
	if (!meshes || !rows)
		goto fail;
	pd_mesh_enumerate(&all, meshes, n);
	for (int i = 0; i < n; i++) {
		struct pd_plan_row *r = &rows[k];

		memcpy(r->mesh.degree, meshes[i], sizeof(meshes[i]));
		/* PipeFusion is stale whatever its patches (they default to one
		 * per stage), DistriFusion by design */
		r->stale = pd_mesh_stale(meshes[i], 0);
		if (pd_plan_cost(w, mc, &r->mesh, &r->cost))
			goto fail;
		k++;
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

void pd_plan_vae_cost(struct pd_plan_work *w, const struct pd_vae_cost *c)
{
	w->vae_gflop = c->gflop;
	w->vae_map_gb = c->map_gb;
	w->vae_exchanges = c->exchanges;
}
