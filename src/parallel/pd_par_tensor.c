/*
 * pd_par_tensor.c - tensor parallelism's two collectives.
 *
 * Every shard holds the same rows (the whole sequence part of this process)
 * and an identical residual stream, so an all-reduce returns the same bits
 * on every shard and the shards never drift apart.
 */
#include "pd_par_tensor.h"
#include "pd_parallel.h"

#include <stdio.h>

static int pd_tp_reduce(void *ctx, float *buf, size_t n)
{
	return pd_comm_allreduce_f32(ctx, buf, n);
}

static int pd_tp_gather(void *ctx, const float *part, size_t n, float *out)
{
	return pd_comm_allgather(ctx, part, n * sizeof(float), out);
}

void pd_tp_hooks(struct pd_dit_hooks *hooks, struct pd_comm *tp)
{
	hooks->reduce = pd_tp_reduce;
	hooks->gather = pd_tp_gather;
	hooks->shard_ctx = tp;
}

static const char *pd_tp_problem(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
				 size_t len)
{
	/* heads split over tensor parallel, and again over Ulysses */
	if (lim->heads % (degree[PD_AXIS_TP] * degree[PD_AXIS_ULYSSES])) {
		snprintf(buf, len, "tensor parallel x Ulysses = %d does not divide the model's %d attention heads",
			 degree[PD_AXIS_TP] * degree[PD_AXIS_ULYSSES], lim->heads);
		return buf;
	}
	if (lim->mlp > 0 && lim->mlp % degree[PD_AXIS_TP]) {
		snprintf(buf, len, "tensor parallel %d does not divide the model's %d MLP columns", degree[PD_AXIS_TP],
			 lim->mlp);
		return buf;
	}
	return NULL;
}

static int pd_tp_setup(struct pd_parallel *par, void *state, struct pd_dit *m, const struct pd_par_options *opt)
{
	struct pd_comm *tp;

	(void)state;
	(void)opt;
	(void)m;
	if (par->mesh->degree[PD_AXIS_TP] <= 1)
		return 1;
	/* its sums and gathers take the model's activations */
	tp = pd_parallel_data_comm(par, par->mesh->axis[PD_AXIS_TP]);
	if (!tp)
		return -1;
	pd_tp_hooks(&par->hooks, tp);
	return 0;
}

/* Every block's row-parallel traffic (of the activation's sequence share).
 * Inside PipeFusion's stages they are PipeFusion's count. */
static void pd_tp_sends(const struct pd_par_step *s, struct pd_par_sends *out)
{
	if (s->degree[PD_AXIS_TP] <= 1 || s->degree[PD_AXIS_PP] > 1)
		return;
	pd_tp_block_sends(s, 0, s->info->blocks, 1, out->bytes + PD_AXIS_TP, out->msgs + PD_AXIS_TP,
			  out->rounds + PD_AXIS_TP);
	pd_tp_norm_sends(s, s->info->blocks, 1, out->bytes + PD_AXIS_TP, out->msgs + PD_AXIS_TP,
			 out->rounds + PD_AXIS_TP);
}

void pd_tp_block_sends(const struct pd_par_step *s, int first, int count, int patches, double *bytes, double *msgs,
		       double *rounds)
{
	const struct pd_dit_info *c = s->info;
	int T = s->degree[PD_AXIS_TP];
	int P = s->degree[PD_AXIS_ULYSSES] * s->degree[PD_AXIS_RING];
	double A, pred, n = 0;

	if (T <= 1)
		return;
	pd_par_step_sizes(s, &A, &pred);
	for (int k = first; k < first + count; k++) {
		if (c->tp_whole_inputs && c->block_row_inputs[k] > 0) {
			/* each shard sends its share of the inputs and of the
			 * outputs to the others: once, where a sum goes twice
			 * (and the modulation's gathers as below) */
			*bytes += (c->block_row_inputs[k] / c->dim + c->block_reduces[k]) * A / P * (T - 1) / T;
			n += (2.0 * c->block_reduces[k] + c->block_row_gathers[k]) * patches;
		} else {
			/* an all-reduce per row-parallel layer and patch, and
			 * as many gathers of the modulation */
			*bytes += c->block_reduces[k] * A / P * 2.0 * (T - 1) / T;
			n += 2.0 * c->block_reduces[k] * patches;
		}
	}
	*msgs += n;
	*rounds += n * (T - 1);
}

void pd_tp_norm_sends(const struct pd_par_step *s, int blocks, int patches, double *bytes, double *msgs,
		      double *rounds)
{
	const struct pd_dit_info *c = s->info;
	int T = s->degree[PD_AXIS_TP];
	int P = s->degree[PD_AXIS_ULYSSES] * s->degree[PD_AXIS_RING];
	/* a rank's share of the image rows, and every text row with each patch
	 * (the text is whole on every rank) */
	double rows = c->tp_norm_img * (double)s->img_len / P + c->tp_norm_txt * (double)s->txt_len * patches;

	if (T <= 1 || c->tp_norm_reduces == 0)
		return;
	if (c->tp_whole_inputs && c->block_row_inputs[0] > 0) {
		/* whole inputs: each sum's row gathered whole instead (D
		 * floats, each shard's share sent once), one gather each */
		*bytes += blocks * rows * c->dim * 4.0 * (T - 1) / T;
		*msgs += (double)blocks * (c->tp_norm_img + c->tp_norm_txt) * patches;
		*rounds += (double)blocks * (c->tp_norm_img + c->tp_norm_txt) * patches * (T - 1);
		return;
	}
	*bytes += blocks * rows * 4.0 * 2.0 * (T - 1) / T;
	*msgs += (double)blocks * c->tp_norm_reduces * patches;
	*rounds += (double)blocks * c->tp_norm_reduces * patches * (T - 1);
}

const struct pd_par_method pd_par_method_tensor = {
	.name = "tensor",
	.axes = 1u << PD_AXIS_TP,
	.problem = pd_tp_problem,
	.setup = pd_tp_setup,
	.sends = pd_tp_sends,
};
