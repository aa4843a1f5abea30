/*
 * test_parallel.c - every valid mesh for this world size against the
 * single-process run and the golden files.
 *
 *   mpirun --oversubscribe -np N test_parallel GOLDEN_DIR [CASE...]
 *
 * (CASE: only the cases of these names, e.g. tiny-6-heads)
 *
 * For each case (the golden dev, true-CFG, batch-2 and schnell pipelines,
 * and `pdit tiny` models with 6 and 12 heads, so 3- and 6-way head splits
 * occur) and for each mesh dp x cfg x pp x distrifusion x ring x ulysses x tp = N that the
 * case allows, and then each DistriFusion mesh (PipeFusion and DistriFusion
 * with every step warm, so exact; their stale steps are checked by
 * crosscheck_stale.py), the final latents must equal the single-process run's within
 * 1e-5 relative (f32) and, for golden cases, the golden latents.final within
 * 1e-4. The cases' text and image lengths (5, 7, 9 and 12, 15, 18 tokens)
 * do not divide most degrees, down to chunks with no text token at all.
 * The first ring mesh without Ulysses and the first with it (neither with
 * tensor parallel, whose shards' sums are not one process's) run again with
 * ring attention in its gathered form (pd_ring_attention_gathered), which
 * must give the single-process latents bit for bit on the CPU (staged or
 * not) where its products keep each row's bits whatever the rows of a call
 * (pd_test_rows.h: oneDNN's on AVX-512, not its AVX2 ones), and within
 * 1e-5 elsewhere and on a GPU, whose libraries may choose their product
 * kernels by the rows a rank has.
 */
#include "pd_engine_tools.h"
#include "pd_mesh.h"
#include "test_run.h"
#include "pd_par_data.h"
#include "pd_parallel.h"
#include "pd_test.h"
#include "pd_test_rows.h"
#include "pd_tiny.h"
#include "pdit.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL_ONE 1e-5
#define TOL_GOLDEN 1e-4

static struct pd_comm *world;
static int rows_exact;                  /* pd_test_rows_exact(), rank 0's */

static float *golden_latents(const char *path, int64_t n)
{
	struct pd_st *st;
	const struct pd_st_tensor *t;
	float *ref = NULL;

	if (pd_st_open(&st, path))
		return NULL;
	t = pd_st_get(st, "latents.final");
	if (t && t->numel == n) {
		ref = malloc((size_t)n * sizeof(float));
		pd_st_read_f32(t, 0, (size_t)n, ref);
	}
	pd_st_close(st);
	return ref;
}

static void test_case(const struct pcase *c)
{
	struct pd_mesh_limits lim;
	int meshes[256][PD_AXIS_COUNT], n_mesh, n_distri, n_all = 0, gathered = 0;
	const char *tb = getenv("PDIT_TEST_BACKEND");
	int exact = rows_exact && (!tb || !*tb || !strcmp(tb, "cpu") || !strcmp(tb, "staged"));
	float *one, *gold = NULL;
	int64_t n = 0;

	if (test_case_limits(world, c, &lim)) {
		PD_CHECK(0, "%s: %s", c->name, pd_last_error());
		return;
	}
	n_mesh = pd_mesh_enumerate(&lim, meshes, 256);
	/* then DistriFusion's meshes (its own axis), every step warm */
	lim.distri = 1;
	n_distri = pd_mesh_enumerate(&lim, meshes + n_mesh, 256 - n_mesh);
	n_distri = n_distri < 256 - n_mesh ? n_distri : 256 - n_mesh;
	for (int k = n_mesh; k < n_mesh + n_distri; k++)
		if (meshes[k][PD_AXIS_DISTRI] > 1)
			memmove(meshes[n_all++ + n_mesh], meshes[k], sizeof(meshes[0]));
	n_distri = n_all;
	/* the reference: every rank runs one process's computation */
	one = test_run_case(world, c, NULL, &n, NULL);
	PD_CHECK(one != NULL, "%s: single-process run failed", c->name);
	if (c->golden)
		gold = golden_latents(c->golden, n);
	PD_CHECK(!c->golden || gold, "%s: golden latents.final unreadable", c->name);
	for (int k = 0; k < n_mesh + n_distri && one; k++) {
		char desc[128];
		int64_t np = 0;
		float *par = test_run_case(world, c, meshes[k], &np, NULL);
		double e1 = par && np == n ? pd_rel_err(par, one, (size_t)n) : INFINITY;
		double e2 = gold && par && np == n ? pd_rel_err(par, gold, (size_t)n) : 0;

		pd_mesh_format(meshes[k], desc, sizeof(desc));
		if (world->rank == 0) {
			printf("  %-28s %-44s vs one process %.2e%s", c->name, desc, e1, gold ? "" : "\n");
			if (gold)
				printf("  vs golden %.2e\n", e2);
		}
		PD_CHECK(e1 <= TOL_ONE, "%s, mesh %s: %.3g from the single-process run (> %g)", c->name, desc, e1,
			 TOL_ONE);
		PD_CHECK(e2 <= TOL_GOLDEN, "%s, mesh %s: %.3g from the golden file (> %g)", c->name, desc, e2,
			 TOL_GOLDEN);
		free(par);
		/* (tensor parallel sums its shards here: not one process's bits) */
		if (meshes[k][PD_AXIS_RING] > 1 && meshes[k][PD_AXIS_PP] == 1 && meshes[k][PD_AXIS_TP] == 1 &&
		    !(gathered & (1 << (meshes[k][PD_AXIS_ULYSSES] > 1)))) {
			struct pcase g = *c;

			gathered |= 1 << (meshes[k][PD_AXIS_ULYSSES] > 1);
			g.ring_gathered = 1;
			par = test_run_case(world, &g, meshes[k], &np, NULL);
			e1 = par && np == n ? (exact ? pd_max_abs_err(par, one, (size_t)n) : pd_rel_err(par, one, (size_t)n))
					    : INFINITY;
			if (world->rank == 0)
				printf("  %-28s %-44s gathered ring: %s %.2e\n", c->name, desc,
				       exact ? "largest difference" : "vs one process", e1);
			PD_CHECK(exact ? e1 == 0 : e1 <= TOL_ONE, "%s, mesh %s, ring gathered: %.3g from the single-process "
				 "run (> %g)", c->name, desc, e1, exact ? 0 : TOL_ONE);
			free(par);
		}
	}
	PD_CHECK(n_mesh > 0 || world->size == 1, "%s: no mesh to test", c->name);
	free(one);
	free(gold);
}

static void golden_case(struct pcase *c, const char *dir, const char *file, const char *cfg, int h, int w,
			uint64_t seed, float guidance, float cfg_scale)
{
	static char paths[8][512];
	static int next;
	char *g = paths[next++ % 8];

	memset(c, 0, sizeof(*c));
	c->name = file;
	snprintf(c->tdir, sizeof(c->tdir), "%s/transformer-%s", dir, cfg);
	snprintf(c->sdir, sizeof(c->sdir), "%s/scheduler-%s", dir, cfg);
	snprintf(c->embeds, sizeof(c->embeds), "%s/%s", dir, file);
	snprintf(g, 512, "%s/%s", dir, file);
	c->golden = g;
	c->height = h;
	c->width = w;
	c->steps = 4;
	c->seed = seed;
	c->guidance = guidance;
	c->cfg_scale = cfg_scale;
	c->warmup = c->steps;	/* PipeFusion exact: every step warm */
}

/* A `pdit tiny` model under TMP: rank 0 writes it, the others wait. */
static void tiny_case(struct pcase *c, const char *tmp, const char *name, int heads, int head_dim)
{
	struct pd_tiny_opts o;
	char dir[400];
	int32_t rc = 0;

	pd_tiny_defaults(&o);
	o.heads = heads;
	o.head_dim = head_dim;
	o.layers = 1;
	o.single_layers = 2;
	o.batch = 3;
	o.txt_len = 5;
	o.seed = (uint64_t)heads;
	snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
	if (world->rank == 0)
		rc = pd_tiny_model(NULL, dir, &o);
	world->ops->bcast(world, &rc, sizeof(rc), 0);
	memset(c, 0, sizeof(*c));
	c->name = name;
	snprintf(c->tdir, sizeof(c->tdir), "%s/transformer", dir);
	snprintf(c->sdir, sizeof(c->sdir), "%s/scheduler", dir);
	snprintf(c->embeds, sizeof(c->embeds), "%s/embeds.safetensors", dir);
	c->height = 48;
	c->width = 80;	/* 3 x 5 = 15 image tokens */
	c->steps = 2;
	c->seed = 11;
	c->guidance = 3.5f;
	c->cfg_scale = 2.5f;
	c->warmup = c->steps;
	PD_CHECK(rc == 0, "writing %s failed", dir);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/flux-tiny";
	char tmp[256] = "/tmp/pdit-par-XXXXXX";
	struct pcase cases[6];

	if (pd_comm_world_init(&argc, &argv, &world)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	pd_log_level = 0;
	if (world->rank == 0 && !mkdtemp(tmp))
		perror("mkdtemp");
	world->ops->bcast(world, tmp, sizeof(tmp), 0);
	if (world->rank == 0) {
		char why[256];

		rows_exact = pd_test_rows_exact(why, sizeof(why));
		printf("world size %d; this CPU's products: %s: %s\n", world->size, rows_exact ? "exact" : "not exact",
		       why);
	}
	world->ops->bcast(world, &rows_exact, sizeof(rows_exact), 0);
	golden_case(&cases[0], dir, "pipeline-dev-h64w48.safetensors", "dev", 64, 48, 5301, 3.5f, 1.0f);
	golden_case(&cases[1], dir, "pipeline-dev-truecfg-h64w48.safetensors", "dev", 64, 48, 5311, 3.5f, 4.0f);
	golden_case(&cases[2], dir, "pipeline-dev-batch2-h48w64.safetensors", "dev", 48, 64, 5321, 3.5f, 1.0f);
	golden_case(&cases[3], dir, "pipeline-schnell-h48w96.safetensors", "schnell", 48, 96, 5401, 0.0f, 1.0f);
	tiny_case(&cases[4], tmp, "tiny-6-heads", 6, 8);
	tiny_case(&cases[5], tmp, "tiny-12-heads", 12, 8);
	int chosen[6] = { 0 };

	for (int a = 2; a < argc; a++) {
		int i = 0;

		while (i < 6 && strcmp(argv[a], cases[i].name))
			i++;
		PD_CHECK(i < 6, "no case named %s", argv[a]);
		if (i < 6)
			chosen[i] = 1;
	}
	for (int i = 0; i < 6; i++)
		if (argc <= 2 || chosen[i])
			test_case(&cases[i]);
	return pd_test_finish(world, tmp);
}
