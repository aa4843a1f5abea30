/*
 * pd_parallel.c - the parallel methods assembled on a mesh.
 */
#include "pd_parallel.h"
#include "pd_par_cfg.h"
#include "pd_par_data.h"
#include "pd_par_tensor.h"

#include <string.h>

struct pd_dit_shard pd_parallel_shard(const struct pd_mesh *mesh, const struct pd_dit_info *info)
{
	struct pd_dit_shard s = { mesh->coord[PD_AXIS_TP], mesh->degree[PD_AXIS_TP], 0, 0 };

	pd_pipe_stage_blocks(info, mesh->degree[PD_AXIS_PP], mesh->coord[PD_AXIS_PP], &s.block_first, &s.block_count);
	return s;
}

static int pd_model_sum(void *ctx, double *buf, size_t n)
{
	struct pd_comm *c = ctx;

	return c->ops->allreduce(c, buf, n, PD_COMM_F64, PD_COMM_SUM);
}

int pd_parallel_setup(struct pd_parallel *par, struct pd_mesh *mesh, struct pd_dit *m, int64_t batch,
		      const struct pd_par_options *opt)
{
	memset(par, 0, sizeof(*par));
	par->mesh = mesh;
	par->runner = pd_runner_local(m);
	if (mesh->degree[PD_AXIS_TP] > 1) {
		/* its sums and gathers take the model's activations as they are */
		if (pd_backend_host_check(m->be, "tensor parallelism"))
			return -1;
		pd_tp_hooks(&par->hooks, mesh->axis[PD_AXIS_TP]);
	}
	if (mesh->degree[PD_AXIS_PP] > 1 || (opt && opt->pipefusion)) {
		/* the stage's sequence-parallel ranks share its key/value buffers */
		if (pd_pipe_init(&par->pipe, m, mesh->axis[PD_AXIS_PP], mesh->sp, opt ? opt->patches : 0,
				 opt ? opt->warmup_steps : 1, &par->hooks))
			return -1;
		par->has_pipe = 1;
		par->runner.predict = pd_pipe_predict;
		par->runner.predict_ctx = &par->pipe;
	} else if (mesh->sp->size > 1) {
		if (pd_seq_init(&par->seq, m, mesh->sp, mesh->axis[PD_AXIS_ULYSSES], mesh->axis[PD_AXIS_RING],
				&par->hooks))
			return -1;
		par->has_seq = 1;
		par->runner.predict = pd_seq_predict;
		par->runner.predict_ctx = &par->seq;
		if (opt && opt->distrifusion) {
			if (pd_distri_init(&par->distri, &par->seq, opt->warmup_steps, m->info.blocks, &par->hooks))
				return -1;
			par->has_distri = 1;
		}
	}
	/* First Block Cache: every rank of a call takes the same decision */
	if (mesh->model->size > 1) {
		par->hooks.sum = pd_model_sum;
		par->hooks.sum_ctx = mesh->model;
	}
	pd_dit_set_hooks(m, &par->hooks);
	pd_dp_slice(batch, mesh->degree[PD_AXIS_DP], mesh->coord[PD_AXIS_DP], &par->runner.first_image,
		    &par->runner.n_images);
	if (mesh->degree[PD_AXIS_CFG] > 1) {
		par->runner.cfg_branch = mesh->axis[PD_AXIS_CFG]->rank;
		par->runner.cfg_exchange = pd_cfg_exchange;
		par->runner.cfg_ctx = mesh->axis[PD_AXIS_CFG];
	}
	return 0;
}

void pd_parallel_free(struct pd_parallel *par)
{
	if (par->has_pipe)
		pd_pipe_free(&par->pipe);
	if (par->has_distri)
		pd_distri_free(&par->distri);
	if (par->has_seq)
		pd_seq_free(&par->seq);
	memset(par, 0, sizeof(*par));
}

int pd_parallel_is_writer(const struct pd_mesh *mesh)
{
	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (a != PD_AXIS_DP && mesh->coord[a] != 0)
			return 0;
	return 1;
}
