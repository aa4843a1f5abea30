/*
 * pd_par_data.h - data parallelism: the images of the batch are cut into dp
 * contiguous slices; each dp group denoises its slice (image b keeps seed +
 * b, so an image does not depend on the degree) and the latents are
 * gathered where they are written.
 */
#ifndef PD_PAR_DATA_H
#define PD_PAR_DATA_H

#include "pd_comm.h"

/* Images [*first, *first + *count) of B for dp group R of DP groups (odd
 * batch sizes give slices that differ by one). */
void pd_dp_slice(int64_t B, int dp, int r, int64_t *first, int64_t *count);

/* Every group's latents [count, per_image] into ALL [B, per_image], on every
 * rank of DP. */
int pd_dp_gather(struct pd_comm *dp, const float *mine, int64_t per_image, int64_t B, float *all);

#endif /* PD_PAR_DATA_H */
