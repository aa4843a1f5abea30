/*
 * pd_par_vae.h - parallel VAE decode: the latent's rows are cut into one
 * band per rank, and the decoder's three seams (pd_vae_hooks) go over the
 * communicator: 3x3 convolutions exchange one halo row with each neighbour
 * band, GroupNorm adds the bands' sums and sums of squares in double, and
 * the mid-block attention gathers every band's keys and values so each
 * query sees all pixels. Upsampling doubles each band's own rows, so bands
 * stay aligned at every resolution. The result equals the one-process
 * decode to float rounding; per-rank activations fall about 1/N.
 */
#ifndef PD_PAR_VAE_H
#define PD_PAR_VAE_H

#include "pd_comm.h"
#include "pd_vae.h"

struct pd_vae_par {
	struct pd_comm *comm;           /* one band per rank (borrowed): the picture's rows (host) */
	struct pd_comm *data;           /* the same ranks for the backend's buffers: COMM itself, or a
					 * staged communicator on it (owned) where the backend's memory is
					 * not host memory */
	float *buf;                     /* halo rows in flight: 4 x c x w, the backend's memory */
	size_t cap;                     /* its capacity in floats */
	struct pd_backend *be;          /* the decoder's backend (borrowed) */
};

/* Fills HOOKS for LATENT_H latent rows of a decoder on BE; when there are
 * more ranks than rows, rank 0 decodes alone (HOOKS->bands = 1 there, 0
 * elsewhere: nothing to do). 0, or -1 with a message (no staging buffers). */
int pd_vae_par_hooks(struct pd_vae_par *p, struct pd_comm *comm, struct pd_backend *be, int latent_h,
		     struct pd_vae_hooks *hooks);
void pd_vae_par_free(struct pd_vae_par *p);

#endif /* PD_PAR_VAE_H */
