/*
 * pd_par_data.c - data parallelism over the images of a batch.
 */
#include "pd_par_data.h"
#include "pd_parallel.h"
#include "pd_par_seq.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>

void pd_dp_slice(int64_t B, int dp, int r, int64_t *first, int64_t *count)
{
	*first = pd_chunk_start(B, dp, r);
	*count = pd_chunk_len(B, dp, r);
}

int pd_dp_gather(struct pd_comm *dp, const float *mine, int64_t per_image, int64_t B, float *all)
{
	size_t *bytes = pd_calloc((size_t)dp->size, sizeof(size_t), "counts");
	int rc;

	if (!bytes)
		return -1;
	for (int j = 0; j < dp->size; j++)
		bytes[j] = (size_t)(pd_chunk_len(B, dp->size, j) * per_image) * sizeof(float);
	rc = dp->ops->allgatherv(dp, mine, bytes[dp->rank], all, bytes);
	free(bytes);
	return rc;
}

static const char *pd_dp_problem(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
				 size_t len)
{
	if (degree[PD_AXIS_DP] > lim->images) {
		snprintf(buf, len, "--data-parallel-degree %d exceeds the %d image%s of the batch", degree[PD_AXIS_DP],
			 lim->images, lim->images == 1 ? "" : "s");
		return buf;
	}
	return NULL;
}

/* Every group takes its share of the batch (one group: all of it). */
static int pd_dp_setup(struct pd_parallel *par, void *state, struct pd_dit *m, const struct pd_par_options *opt)
{
	(void)state;
	(void)m;
	(void)opt;
	pd_dp_slice(par->batch, par->mesh->degree[PD_AXIS_DP], par->mesh->coord[PD_AXIS_DP], &par->runner.first_image,
		    &par->runner.n_images);
	return 0;
}

const struct pd_par_method pd_par_method_data = {
	.name = "data",
	.axes = 1u << PD_AXIS_DP,
	.problem = pd_dp_problem,
	.setup = pd_dp_setup,
};
