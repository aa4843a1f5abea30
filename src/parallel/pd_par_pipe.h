/*
 * pd_par_pipe.h - PipeFusion (arXiv 2405.14430): N stages own contiguous
 * ranges of the block list, the image tokens are cut into M row bands
 * ("patches"), and each attention layer keeps a buffer of the whole
 * sequence's keys and values. The bands balance tokens with the text
 * counted in the first one (which carries it), so the first band has fewer
 * image rows.
 *
 * Steps 0 .. W-1 (the warm-up) run the whole sequence through the stages
 * as one piece: every layer's buffer is refilled, attention is exact, and
 * the result equals one process's. From step W on, patch p goes through the
 * stages on its own, pipelined: while stage s works on patch p, stage s+1
 * works on patch p - 1. A layer writes patch p's fresh keys and values into
 * its buffer and attends to the whole buffer: patches before p are fresh
 * from this step, those after p one step old.
 *
 * The text stream travels with patch 0: the first piece of a step is
 * [text | patch 0], the others hold image rows only. The text is computed
 * once per step per stage (its queries see the fresh text, the fresh patch
 * 0 and the older other patches), where xDiT recomputes it with every patch
 * and keeps patch 0's.
 *
 * Hidden states go from stage to stage with non-blocking sends, one message
 * per piece (about one activation per stage boundary per step). The last
 * stage's prediction is broadcast to every stage, and the scheduler advances
 * once per step on every rank. Within a stage the tokens of each piece may
 * be split over sequence-parallel ranks: they gather a piece's fresh keys and
 * values into their (replicated) buffers. Tensor parallelism splits heads as
 * usual; CFG and data parallelism compose above.
 *
 * First Block Cache: stage 0 runs block 0 on every piece first (in piece
 * order, so each meets the same buffers as without the cache) and measures
 * the change over all image rows; the two sums go to every stage, and each
 * decides through pd_fbcache_decide, alike. It sends its state after block 0 to the last stage, which keeps
 * the other blocks' effect on computed steps and adds it on skipped ones;
 * the stages in between then idle, and the skipped layers' buffers keep
 * their last computed step.
 *
 * W >= the number of steps makes every step a warm-up step: the result is
 * one process's. With more than one patch W must be at least 1 (a patched
 * first step would find empty buffers).
 */
#ifndef PD_PAR_PIPE_H
#define PD_PAR_PIPE_H

#include "pd_comm.h"
#include "pd_dit.h"
#include "pd_mesh.h"

struct pd_pipe_call;

struct pd_pipe {
	struct pd_dit *model;           /* this stage's blocks (borrowed) */
	struct pd_backend *be;          /* the model's backend: the key/value buffers, kv and y are its
					 * memory (borrowed; outlives the model) */
	struct pd_comm *pp;             /* the stages, rank = stage (borrowed) */
	struct pd_comm *sp;             /* sequence-parallel ranks inside the stage (borrowed) */
	struct pd_comm *sp_data;        /* the same ranks for the backend's buffers (pd_parallel_data_comm;
					 * borrowed): the pieces' keys and values */
	int stage, stages;              /* this stage and how many */
	int first, count;               /* this stage's blocks */
	int patches;                    /* M */
	int told_rows;                  /* said once that M is more than the image's token rows */
	int warmup;                     /* W */
	int64_t width;                  /* local attention width (heads here x head_dim) */
	struct pd_pipe_call *calls;     /* per (image, branch) key/value buffers */
	int n_calls;
	float *x;                       /* host hidden states of a piece as received */
	size_t cap_x;
	float *y;                       /* a piece's keys and values packed for the gather */
	size_t cap_y;
	float *fin;                     /* last stage with the cache: a piece's hidden states after the blocks */
	size_t cap_fin;
	float *kv;                      /* gathered fresh keys and values of a piece (sequence parallel) */
	size_t cap_kv;
	float *fbx;                     /* host: First Block Cache's rows gathered over the stage */
	size_t cap_fbx;
	size_t *bytes;                  /* per-rank counts */
	float *pred;                    /* this rank's prediction rows of a piece */
	size_t cap_pred;
};

/* Sets up P and installs its attention into HOOKS. PP and SP carry host
 * memory, SP_DATA the model backend's buffers (pd_parallel_data_comm). */
int pd_pipe_init(struct pd_pipe *p, struct pd_dit *model, struct pd_comm *pp, struct pd_comm *sp,
		 struct pd_comm *sp_data, int patches, int warmup, struct pd_dit_hooks *hooks);
void pd_pipe_free(struct pd_pipe *p);

/* One transformer call through the stages; OUT receives the whole
 * prediction on every rank. */
int pd_pipe_predict(void *ctx, const struct pd_dit_call *in, float *out, const struct pd_dump *dump);

#endif /* PD_PAR_PIPE_H */
