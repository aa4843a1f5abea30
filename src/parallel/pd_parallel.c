/*
 * pd_parallel.c - the parallel methods assembled on a mesh.
 */
#include "pd_parallel.h"
#include "pd_comm_impl.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

struct pd_dit_shard pd_parallel_shard(const struct pd_mesh *mesh, const struct pd_dit_info *info)
{
	struct pd_dit_shard s = { .rank = mesh->coord[PD_AXIS_TP], .count = mesh->degree[PD_AXIS_TP] };

	pd_mesh_stage_blocks(info, mesh->degree[PD_AXIS_PP], mesh->coord[PD_AXIS_PP], &s.block_first, &s.block_count);
	return s;
}

static int pd_model_sum(void *ctx, double *buf, size_t n)
{
	struct pd_comm *c = ctx;

	return c->ops->allreduce(c, buf, n, PD_COMM_F64, PD_COMM_SUM);
}

const struct pd_par_method *const pd_par_methods[] = {
	&pd_par_method_tensor,
	&pd_par_method_pipefusion,
	&pd_par_method_sequence,
	&pd_par_method_distrifusion,
	&pd_par_method_cfg,
	&pd_par_method_data,
	NULL,
};

void pd_par_step_sizes(const struct pd_par_step *s, double *A, double *pred)
{
	/* a text context (Wan) is no row of the attention sequence: only
	 * the image rows travel */
	*A = (double)((s->info->txt_context ? 0 : s->txt_len) + s->img_len) * s->info->dim * 4.0;
	*pred = (double)s->img_len * s->info->out_channels * 4.0;
}

int pd_parallel_setup(struct pd_parallel *par, struct pd_mesh *mesh, struct pd_dit *m, int64_t batch,
		      const struct pd_par_options *opt)
{
	memset(par, 0, sizeof(*par));
	par->mesh = mesh;
	par->batch = batch;
	par->runner = pd_runner_local(m);
	par->be = m->be;
	par->nccl = opt && opt->nccl && m->be->queue;
	for (int i = 0; pd_par_methods[i]; i++) {
		const struct pd_par_method *pm = pd_par_methods[i];
		int rc;

		PD_ASSERT(i < PD_PAR_MAX_METHODS);
		if (pm->state_size && !(par->state[i] = pd_calloc(1, pm->state_size, pm->name))) {
			pd_parallel_free(par);
			return -1;
		}
		rc = pm->setup(par, par->state[i], m, opt);
		if (rc < 0) {
			pd_parallel_free(par);
			return -1;
		}
		if (rc == 0)
			par->installed |= 1u << i;
	}
	/* First Block Cache: every rank of a call takes the same decision */
	if (mesh->model->size > 1) {
		par->hooks.sum = pd_model_sum;
		par->hooks.sum_ctx = mesh->model;
	}
	pd_dit_set_hooks(m, &par->hooks);
	return 0;
}

void pd_parallel_free(struct pd_parallel *par)
{
	int n = 0;

	while (pd_par_methods[n])
		n++;
	for (int i = n - 1; i >= 0; i--) {
		if ((par->installed >> i & 1) && pd_par_methods[i]->free)
			pd_par_methods[i]->free(par, par->state[i]);
		free(par->state[i]);
	}
	for (int i = 0; i < PD_PAR_MAX_DATA_COMMS && par->data_comm[i]; i++)
		par->data_comm[i]->ops->free(par->data_comm[i]);
	memset(par, 0, sizeof(*par));
}

struct pd_comm *pd_parallel_data_comm(struct pd_parallel *par, struct pd_comm *c)
{
	int i;

	if (par->be->host_memory)
		return c;
	for (i = 0; i < PD_PAR_MAX_DATA_COMMS && par->data_comm[i]; i++)
		if (par->data_of[i] == c)
			return par->data_comm[i];
	PD_ASSERT(i < PD_PAR_MAX_DATA_COMMS);
	if (par->nccl ? pd_comm_nccl_new(c, par->be->queue, &par->data_comm[i]) : pd_comm_staged_new(c, par->be, &par->data_comm[i]))
		return NULL;
	par->data_of[i] = c;
	return par->data_comm[i];
}

void *pd_parallel_state(const struct pd_parallel *par, const struct pd_par_method *method)
{
	for (int i = 0; pd_par_methods[i]; i++)
		if (pd_par_methods[i] == method)
			return par->installed >> i & 1 ? par->state[i] : NULL;
	return NULL;
}

int pd_parallel_is_writer(const struct pd_mesh *mesh)
{
	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (a != PD_AXIS_DP && mesh->coord[a] != 0)
			return 0;
	return 1;
}
