/*
 * pd_par_vae.c - the parallel VAE decode's halo, sum and gather.
 */
#include "pd_par_vae.h"
#include "pd_comm_impl.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

#define PD_HALO_TO_LOWER 7301  /* a band's first rows, for the band above it */
#define PD_HALO_TO_UPPER 7302  /* a band's last rows, for the band below it */

static int pd_vae_par_halo(void *ctx, struct pd_backend *be, float *x, int c, int rows, int w, int halo)
{
	struct pd_vae_par *p = ctx;
	struct pd_comm *cm = p->data;
	int r = cm->rank, n = cm->size;
	int64_t stride = (int64_t)(rows + 2 * halo) * w, blk = (int64_t)halo * w;
	size_t bytes = (size_t)(c * blk) * sizeof(float), need = 4 * (size_t)(c * blk);
	struct pd_comm_req req[4];
	float *send_top, *send_bot, *recv_top, *recv_bot;
	int rc = 0;

	memset(req, 0, sizeof(req));
	if (pd_backend_grow(be, &p->buf, &p->cap, need, "the VAE's halo rows"))
		return -1;
	send_top = p->buf;
	send_bot = send_top + c * blk;
	recv_top = send_bot + c * blk;
	recv_bot = recv_top + c * blk;
	/* my first and last rows of every channel */
	be->ops->copy2d(be, send_top, blk, x + blk, stride, c, blk);
	be->ops->copy2d(be, send_bot, blk, x + (int64_t)rows * w, stride, c, blk);
	if (pd_backend_check(be))
		return -1;
	if (r > 0)
		rc = cm->ops->isend(cm, send_top, bytes, r - 1, PD_HALO_TO_LOWER, &req[0]) ||
		     cm->ops->irecv(cm, recv_top, bytes, r - 1, PD_HALO_TO_UPPER, &req[1]);
	if (!rc && r < n - 1)
		rc = cm->ops->isend(cm, send_bot, bytes, r + 1, PD_HALO_TO_UPPER, &req[2]) ||
		     cm->ops->irecv(cm, recv_bot, bytes, r + 1, PD_HALO_TO_LOWER, &req[3]);
	for (int i = 0; i < 4; i++)
		rc |= cm->ops->wait(cm, &req[i]);
	if (rc)
		return -1;
	/* the picture's edges are zero padding, as in one piece */
	if (r == 0)
		be->ops->fill(be, recv_top, 0.0f, (size_t)(c * blk));
	if (r == n - 1)
		be->ops->fill(be, recv_bot, 0.0f, (size_t)(c * blk));
	be->ops->copy2d(be, x, stride, recv_top, blk, c, blk);
	be->ops->copy2d(be, x + (int64_t)(halo + rows) * w, stride, recv_bot, blk, c, blk);
	return pd_backend_check(be);
}

static int pd_vae_par_reduce(void *ctx, double *buf, size_t n)
{
	struct pd_vae_par *p = ctx;

	return p->data->ops->allreduce(p->data, buf, n, PD_COMM_F64, PD_COMM_SUM);
}

static int pd_vae_par_gather(void *ctx, const float *mine, size_t n, float *all, const size_t *n_all)
{
	struct pd_vae_par *p = ctx;
	size_t *bytes = pd_calloc((size_t)p->comm->size, sizeof(size_t), "counts");
	int rc;

	if (!bytes)
		return -1;
	for (int i = 0; i < p->comm->size; i++)
		bytes[i] = n_all[i] * sizeof(float);
	rc = p->data->ops->allgatherv(p->data, mine, n * sizeof(float), all, bytes);
	free(bytes);
	return rc;
}

static int pd_vae_par_collect(void *ctx, const float *mine, size_t n, float *all, const size_t *n_all)
{
	struct pd_vae_par *p = ctx;
	size_t *bytes = pd_calloc((size_t)p->comm->size, sizeof(size_t), "counts");
	int rc;

	if (!bytes)
		return -1;
	for (int i = 0; i < p->comm->size; i++)
		bytes[i] = n_all[i] * sizeof(float);
	rc = p->comm->ops->gatherv(p->comm, mine, n * sizeof(float), all, bytes, 0);
	free(bytes);
	return rc;
}

int pd_vae_par_hooks(struct pd_vae_par *p, struct pd_comm *comm, struct pd_backend *be, int latent_h,
		     struct pd_vae_hooks *hooks)
{
	memset(p, 0, sizeof(*p));
	memset(hooks, 0, sizeof(*hooks));
	p->comm = comm;
	p->data = comm;
	p->be = be;
	if (comm->size > latent_h || comm->size == 1) {
		/* too few rows to cut: rank 0 decodes the whole picture */
		hooks->bands = comm->rank == 0 ? 1 : 0;
		return 0;
	}
	/* the halo rows, the GroupNorm sums and the attention's keys and
	 * values are the decoder's buffers */
	if (!be->host_memory && pd_comm_staged_new(comm, be, &p->data))
		return -1;
	hooks->band = comm->rank;
	hooks->bands = comm->size;
	hooks->halo = pd_vae_par_halo;
	hooks->reduce = pd_vae_par_reduce;
	hooks->gather = pd_vae_par_gather;
	hooks->collect = pd_vae_par_collect;
	hooks->ctx = p;
	return 0;
}

void pd_vae_par_free(struct pd_vae_par *p)
{
	if (p->be)
		pd_backend_release(p->be, p->buf);
	if (p->data && p->data != p->comm)
		p->data->ops->free(p->data);
	memset(p, 0, sizeof(*p));
}
