/*
 * test_run.c - one generation case on a mesh, for the multi-process tests.
 */
#include "pd_backend_cpu.h"
#include "test_run.h"
#include "pd_flux.h"
#include "pd_par_data.h"
#include "pd_parallel.h"
#include "pd_test.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int test_case_limits(struct pd_comm *world, const struct pcase *c, struct pd_mesh_limits *lim)
{
	struct pd_flux_config fc;
	struct pd_embeds e = { 0 };

	memset(lim, 0, sizeof(*lim));
	if (pd_flux_config_load(&fc, c->tdir) || pd_embeds_load(&e, c->embeds))
		return -1;
	lim->world = world->size;
	lim->heads = fc.heads;
	lim->cfg_possible = c->cfg_scale > 1 && e.neg_prompt;
	lim->images = (int)e.batch;
	lim->max_pp = pd_flux_blocks(&fc);
	pd_embeds_free(&e);
	return 0;
}

/* Runs the case on MESH degrees (NULL: one process, no MPI) and returns the
 * whole batch's final latents on every rank. */
float *test_run_case(struct pd_comm *world, const struct pcase *c, const int *degree, int64_t *n_out,
		     struct pd_fbcache_report *report)
{
	struct pd_flux_config fc;
	struct pd_embeds e = { 0 };
	struct pd_scheduler s = { 0 };
	struct pd_latent_shape ls;
	struct pd_gen_params p = { .frames = 1, .height = c->height, .width = c->width, .steps = c->steps, .guidance = c->guidance,
				     .true_cfg_scale = c->cfg_scale, .seed = c->seed, .fbcache_threshold = c->fbcache };
	struct pd_backend *be = NULL;
	struct pd_dit *m = NULL;
	struct pd_dit_info info;
	struct pd_mesh mesh;
	struct pd_parallel par;
	struct pd_runner run;
	float *all = NULL, *mine = NULL;
	int64_t per, ok = 0;

	memset(&mesh, 0, sizeof(mesh));
	memset(&par, 0, sizeof(par));
	if (pd_flux_config_load(&fc, c->tdir) || pd_embeds_load(&e, c->embeds) || pd_scheduler_load(&s, c->sdir) ||
	    pd_flux_dit_info(&fc, &info) || pd_flux_family.latent_shape(&ls, &info, 1, c->height, c->width) ||
	    pd_test_backend_new(&be, PD_F32, 1))
		goto out;
	/* one thread a rank: the ranks share the machine's cores */
	pd_backend_enter(be);
	per = ls.tokens * ls.packed_channels;
	all = malloc((size_t)(e.batch * per) * sizeof(float));
	pd_poison(all, (size_t)(e.batch * per));
	if (!degree) {
		if (pd_flux_load_dit(&m, c->tdir, NULL, be, NULL))
			goto out;
		run = pd_runner_local(m);
		run.fb_report = report;
		ok = pd_denoise(&run, &pd_flux_family, &info, &s, &e, &p, NULL, all, NULL, NULL) == 0;
	} else {
		struct pd_dit_shard sh;

		if (pd_mesh_create(&mesh, world, degree))
			goto out;
		/* PDIT_TEST_NCCL: a GPU's buffers through NCCL (one GPU a rank) */
		struct pd_par_options opt = { c->warmup, c->patches, c->pipe_one_stage, getenv("PDIT_TEST_NCCL") != NULL,
					      c->ring_gathered };

		sh = pd_parallel_shard(&mesh, &info);
		if (pd_flux_load_dit(&m, c->tdir, NULL, be, &sh) || pd_parallel_setup(&par, &mesh, m, e.batch, &opt))
			goto out;
		mine = malloc((size_t)((par.runner.n_images + 1) * per) * sizeof(float));
		par.runner.fb_report = report;
		ok = pd_denoise(&par.runner, &pd_flux_family, &info, &s, &e, &p, NULL, mine, NULL, NULL) == 0 &&
		     pd_dp_gather(mesh.axis[PD_AXIS_DP], mine, per, e.batch, all) == 0;
	}
	*n_out = e.batch * per;
out:
	if (!ok) {
		fprintf(stderr, "rank %d: %s: %s\n", world->rank, c->name, pd_last_error());
		free(all);
		all = NULL;
	}
	free(mine);
	if (par.mesh)
		pd_parallel_free(&par);
	pd_dit_free(m);
	if (mesh.world)
		pd_mesh_free(&mesh);
	pd_backend_free(be);
	pd_scheduler_free(&s);
	pd_embeds_free(&e);
	return all;
}

