/*
 * pd_par_data.c - data parallelism over the images of a batch.
 */
#include "pd_par_data.h"
#include "pd_par_seq.h"
#include "pd_util.h"

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
