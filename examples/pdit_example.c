/*
 * pdit_example.c - a program on the engine's public header alone: opens a
 * model once and makes a picture for each prompt given, written as a PPM.
 *
 *   pdit_example MODEL_DIR OUT_PREFIX "a prompt" ["another prompt" ...]
 *   mpirun -np 2 pdit_example MODEL_DIR out "a red fox"     (a mesh pdit chooses)
 */
#include "pdit.h"

#include <stdio.h>
#include <stdlib.h>

/* Picture I of RES as OUT_PREFIX-N.ppm. */
static int write_ppm(const char *prefix, int n, const struct pd_result *res, int64_t i)
{
	char name[512];
	FILE *f;
	size_t bytes = (size_t)res->width * res->height * 3;

	snprintf(name, sizeof(name), "%s-%d.ppm", prefix, n);
	f = fopen(name, "wb");
	if (!f)
		return -1;
	fprintf(f, "P6\n%d %d\n255\n", res->width, res->height);
	if (fwrite(res->rgb + (size_t)i * bytes, 1, bytes, f) != bytes) {
		fclose(f);
		return -1;
	}
	printf("wrote %s\n", name);
	return fclose(f);
}

int main(int argc, char **argv)
{
	struct pd_comm *world;
	struct pd_engine *e;
	struct pd_engine_options o;
	int rc = 0;

	if (pd_comm_world_init(&argc, &argv, &world))
		return 1;
	if (argc < 4) {
		if (world->rank == 0)
			fprintf(stderr, "usage: %s MODEL_DIR OUT_PREFIX PROMPT [PROMPT ...]\n", argv[0]);
		pd_comm_world_finalize(world);
		return 2;
	}
	pd_engine_options_init(&o);
	o.model = argv[1];
	if (pd_engine_open(&e, world, &o, NULL)) {
		if (world->failed_rank == world->rank || world->failed_rank < 0)
			fprintf(stderr, "%s\n", pd_last_error());
		pd_comm_world_finalize(world);
		return 1;
	}
	/* one request per prompt: the model stays loaded between them */
	for (int k = 3; k < argc && !rc; k++) {
		const char *prompt = argv[k];
		struct pd_request rq;
		struct pd_result res;

		pd_request_init(&rq);
		rq.prompts = &prompt;
		rq.n_prompts = 1;
		rq.height = rq.width = 64;
		rq.steps = 4;
		rq.seed = (uint64_t)k;
		rc = pd_engine_run(e, &rq, &res);
		if (!rc) {
			for (int64_t i = 0; !rc && i < res.n_pictures; i++)
				rc = write_ppm(argv[2], k - 3, &res, i) ? pd_errorf("cannot write %s-%d.ppm", argv[2], k - 3)
									 : 0;
			/* the next request is collective: every process stops, or none */
			rc = pd_comm_agree(world, rc, NULL);
		}
		if (rc && world->failed_rank == world->rank)
			fprintf(stderr, "%s\n", pd_last_error());
		pd_result_free(&res);
	}
	pd_engine_close(e);
	pd_comm_world_finalize(world);
	return rc ? 1 : 0;
}
