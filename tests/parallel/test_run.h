/*
 * test_run.h - running one generation case on a mesh (or one process) inside
 * a multi-process test.
 */
#ifndef TEST_RUN_H
#define TEST_RUN_H

#include "pd_comm.h"
#include "pd_mesh.h"
#include "pd_pipeline.h"

struct pcase {
	const char *name;               /* for messages */
	char tdir[512], sdir[512];      /* transformer and scheduler folders */
	char embeds[512];               /* embeddings (a golden pipeline file, or tiny's) */
	const char *golden;             /* golden file with latents.final, or NULL */
	int height, width, steps;
	float guidance, cfg_scale;
	uint64_t seed;
	float fbcache;                  /* First Block Cache threshold (0: off) */
	int warmup;                     /* DistriFusion's and PipeFusion's exact steps */
	int patches;                    /* PipeFusion's patches (0: as many as stages) */
	int pipe_one_stage;             /* run PipeFusion's schedule even on one stage */
	int ring_gathered;              /* ring attention in its gathered form (pd_par_options) */
};

/* Runs C on DEGREE (NULL: this process alone, whatever the world) and
 * returns the whole batch's final latents on every rank of the mesh; *n gets
 * their count. REPORT (may be NULL) receives First Block Cache's decisions.
 * NULL on failure (message printed). */
float *test_run_case(struct pd_comm *world, const struct pcase *c, const int *degree, int64_t *n,
		     struct pd_fbcache_report *report);

/* The mesh limits of case C on WORLD. */
int test_case_limits(struct pd_comm *world, const struct pcase *c, struct pd_mesh_limits *lim);

#endif /* TEST_RUN_H */
