/*
 * test_fbcache.c - First Block Cache on every valid mesh of this world.
 *
 *   mpirun --oversubscribe -np N test_fbcache
 *
 * Every mesh includes PipeFusion's (pp > 1) and DistriFusion's, with every
 * step warm so both are exact. A tiny model with 2 prompts and true CFG,
 * 6 steps:
 *   threshold 1e-12  never skips: bit-identical to the uncached run
 *   threshold 0.6    skips some steps (this model's changes are 0.5 to 0.7):
 *                    every rank of a call takes the same decisions, the
 *                    same as one process, and the final latents match one
 *                    process's within 1e-5
 *   threshold 10     skips every step after the first
 */
#include "pd_engine_tools.h"
#include "pd_mesh.h"
#include "pd_test.h"
#include "pd_tiny.h"
#include "pdit.h"
#include "pd_util.h"
#include "test_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 6

static struct pd_comm *world;

/* Every rank's decisions; ranks that run the same call (same dp and cfg
 * coordinates) must agree, and those running image 0's positive branch must
 * agree with one process. */
static void check_decisions(const char *desc, const int *deg, const unsigned char *mine, const unsigned char *one)
{
	unsigned char *all = malloc((size_t)(STEPS * world->size));

	pd_comm_allgather(world, mine, STEPS, all);
	for (int q = 0; q < world->size; q++) {
		int rest = q, coord[PD_AXIS_COUNT];

		for (int x = 0; x < PD_AXIS_COUNT; x++) {
			coord[x] = rest % deg[x];
			rest /= deg[x];
		}
		for (int p = 0; p < q; p++) {
			int rp = p, cp[PD_AXIS_COUNT];

			for (int x = 0; x < PD_AXIS_COUNT; x++) {
				cp[x] = rp % deg[x];
				rp /= deg[x];
			}
			if (cp[PD_AXIS_DP] == coord[PD_AXIS_DP] && cp[PD_AXIS_CFG] == coord[PD_AXIS_CFG])
				PD_CHECK(memcmp(all + p * STEPS, all + q * STEPS, STEPS) == 0,
					 "%s: ranks %d and %d of one call decided differently", desc, p, q);
		}
		if (coord[PD_AXIS_DP] == 0 && coord[PD_AXIS_CFG] == (deg[PD_AXIS_CFG] > 1 ? 1 : 0))
			PD_CHECK(memcmp(all + q * STEPS, one, STEPS) == 0, "%s: rank %d decided unlike one process", desc,
				 q);
	}
	free(all);
}

int main(int argc, char **argv)
{
	char tmp[256] = "/tmp/pdit-fbc-XXXXXX";
	struct pd_tiny_opts o;
	struct pcase c;
	struct pd_mesh_limits lim;
	int meshes[128][PD_AXIS_COUNT], n_mesh, n_distri, n_mesh_all = 0, distri[128];
	unsigned char one_dec[STEPS], dec[STEPS], mid_dec[STEPS];
	struct pd_fbcache_report one_rep = { 0, 0, STEPS, one_dec }, rep = { 0, 0, STEPS, dec };
	float *one_mid, *one_all;
	int64_t n = 0;
	int32_t rc = 0;

	if (pd_comm_world_init(&argc, &argv, &world)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	pd_log_level = 0;
	pd_tiny_defaults(&o);
	o.batch = 2;
	o.txt_len = 7;
	if (world->rank == 0)
		rc = mkdtemp(tmp) ? pd_tiny_model(NULL, tmp, &o) : -1;
	world->ops->bcast(world, tmp, sizeof(tmp), 0);
	world->ops->bcast(world, &rc, sizeof(rc), 0);
	PD_CHECK(rc == 0, "writing the tiny model");
	memset(&c, 0, sizeof(c));
	c.name = "tiny";
	snprintf(c.tdir, sizeof(c.tdir), "%s/transformer", tmp);
	snprintf(c.sdir, sizeof(c.sdir), "%s/scheduler", tmp);
	snprintf(c.embeds, sizeof(c.embeds), "%s/embeds.safetensors", tmp);
	c.height = 64;
	c.width = 48;
	c.steps = STEPS;
	c.guidance = 3.5f;
	c.cfg_scale = 2.0f;
	c.seed = 3;
	/* DistriFusion and PipeFusion exact: every step warm */
	c.warmup = STEPS;
	if (rc || test_case_limits(world, &c, &lim)) {
		PD_CHECK(0, "setup: %s", pd_last_error());
		goto out;
	}
	n_mesh = pd_mesh_enumerate(&lim, meshes, 128);
	/* then the DistriFusion meshes (its own axis) */
	lim.distri = 1;
	n_distri = pd_mesh_enumerate(&lim, meshes + n_mesh, 128 - n_mesh);
	n_distri = n_distri < 128 - n_mesh ? n_distri : 128 - n_mesh;
	for (int k = n_mesh; k < n_mesh + n_distri; k++)
		if (meshes[k][PD_AXIS_DISTRI] > 1)
			distri[n_mesh_all++] = k;
	for (int k = 0; k < n_mesh_all; k++)
		memcpy(meshes[n_mesh + k], meshes[distri[k]], sizeof(meshes[0]));
	n_distri = n_mesh_all;
	n_mesh_all = n_mesh + n_distri;
	/* one process's runs, on every rank */
	c.fbcache = 0.6f;
	one_mid = test_run_case(world, &c, NULL, &n, &one_rep);
	c.fbcache = 10.0f;
	one_all = test_run_case(world, &c, NULL, &n, NULL);
	PD_CHECK(one_mid && one_all, "one-process runs");
	PD_CHECK(one_rep.skipped > 0 && one_rep.computed > 0, "threshold 0.6: %d skipped, %d computed (want both)",
		 one_rep.skipped, one_rep.computed);
	for (int k = 0; k < n_mesh_all && one_mid && one_all; k++) {
		char desc[128];
		int64_t np = 0;
		float *plain, *never, *mid, *all;
		int skipped_never, skipped_all, calls_all;

		pd_mesh_format(meshes[k], desc, sizeof(desc));
		c.fbcache = 0.0f;
		plain = test_run_case(world, &c, meshes[k], &np, NULL);
		c.fbcache = 1e-12f;
		never = test_run_case(world, &c, meshes[k], &np, &rep);
		skipped_never = rep.skipped;
		c.fbcache = 0.6f;
		mid = test_run_case(world, &c, meshes[k], &np, &rep);
		PD_CHECK(plain && never && mid, "%s: runs failed", desc);
		if (!plain || !never || !mid)
			break;
		check_decisions(desc, meshes[k], dec, one_dec);
		memcpy(mid_dec, dec, STEPS);
		c.fbcache = 10.0f;
		all = test_run_case(world, &c, meshes[k], &np, &rep);
		skipped_all = rep.skipped;
		calls_all = rep.skipped + rep.computed;
		PD_CHECK(memcmp(plain, never, (size_t)n * sizeof(float)) == 0, "%s: a cache that never skips changed the result",
			 desc);
		PD_CHECK(skipped_never == 0, "%s: threshold 1e-12 skipped %d", desc, skipped_never);
		PD_CHECK(pd_rel_err(mid, one_mid, (size_t)n) <= 1e-5, "%s: threshold 0.6 differs from one process by %.3g",
			 desc, pd_rel_err(mid, one_mid, (size_t)n));
		PD_CHECK(all && pd_rel_err(all, one_all, (size_t)n) <= 1e-5, "%s: threshold 10 differs from one process",
			 desc);
		/* every call after each branch's first step skips */
		PD_CHECK(calls_all > 0 && skipped_all == calls_all - calls_all / STEPS,
			 "%s: threshold 10 skipped %d of %d calls", desc, skipped_all, calls_all);
		if (world->rank == 0)
			printf("  %-44s decisions at 0.6 %c%c%c%c%c%c, vs one process %.2e\n", desc, '0' + mid_dec[0],
			       '0' + mid_dec[1], '0' + mid_dec[2], '0' + mid_dec[3], '0' + mid_dec[4], '0' + mid_dec[5],
			       pd_rel_err(mid, one_mid, (size_t)n));
		free(plain);
		free(never);
		free(mid);
		free(all);
	}
	if (world->rank == 0)
		printf("one process: decisions %c%c%c%c%c%c (1 = skipped), %d of %d calls skipped at 0.6\n",
		       '0' + one_dec[0], '0' + one_dec[1], '0' + one_dec[2], '0' + one_dec[3], '0' + one_dec[4],
		       '0' + one_dec[5], one_rep.skipped, one_rep.skipped + one_rep.computed);
	free(one_mid);
	free(one_all);
out:
	return pd_test_finish(world, tmp);
}
