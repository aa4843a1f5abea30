/*
 * pd_par_distri.h - DistriFusion (arXiv 2402.19481) for a diffusion
 * transformer: each rank owns a band of the tokens for the whole model (the
 * text and image chunks of the sequence-parallel partition, pd_par_seq.h)
 * and, after the warm-up, attends with its own fresh keys and values and the
 * other bands' from the previous step.
 *
 * Warm-up, exactly: steps 0 .. W-1 are synchronous (every layer gathers all
 * bands' fresh keys and values before attending: equal to one process);
 * from step W on, a layer uses what the previous step gathered, replaces its
 * own band with the fresh rows, and starts a non-blocking all-gather of its
 * fresh rows that the same layer awaits at the next step. (distrifuser's
 * `counter <= warmup_steps` runs W + 1 synchronous steps; here W means W.)
 * With W >= the number of steps the result equals one process's.
 *
 * State is kept per call: per image and branch, per layer, two buffers of
 * the whole sequence's keys and values (one in use, one being filled).
 */
#ifndef PD_PAR_DISTRI_H
#define PD_PAR_DISTRI_H

#include "pd_par_seq.h"

struct pd_distri_call;

struct pd_distri {
	struct pd_seq_par *seq;         /* the token partition (borrowed) */
	struct pd_backend *be;          /* holds the key/value buffers (borrowed) */
	int warmup;                     /* synchronous steps */
	int layers;                     /* attention layers of the model */
	int n_calls;                    /* states in use */
	struct pd_distri_call *calls;   /* one per (image, branch) */
	size_t *bytes;                  /* per-rank byte counts, sp->size entries */
};

/* Installs DistriFusion's attention into HOOKS, over SEQ's partition. */
int pd_distri_init(struct pd_distri *d, struct pd_seq_par *seq, int warmup, int layers, struct pd_dit_hooks *hooks);
/* Waits for the transfers still in flight and frees the buffers. */
void pd_distri_free(struct pd_distri *d);

#endif /* PD_PAR_DISTRI_H */
