/*
 * pd_par_tensor.h - tensor parallelism (Megatron): the model loads its shard
 * (struct pd_dit_shard); these hooks sum row-parallel partial results and
 * gather column-parallel modulation vectors over the tensor-parallel group
 * (and, with whole inputs, the row-parallel layers' inputs and outputs).
 */
#ifndef PD_PAR_TENSOR_H
#define PD_PAR_TENSOR_H

#include "pd_comm.h"
#include "pd_dit.h"

/* Sets HOOKS' reduce and gather to work over TP (borrowed). */
void pd_tp_hooks(struct pd_dit_hooks *hooks, struct pd_comm *tp);

/* Adds the bytes, exchanges and rounds of COUNT blocks from FIRST: their
 * row-parallel layers (all-reduces of the outputs, or with whole inputs,
 * pd_dit_info.tp_whole_inputs, gathers of the inputs and of the outputs)
 * and the modulations' gathers, over PATCHES pieces of a step. */
struct pd_par_step;
void pd_tp_block_sends(const struct pd_par_step *s, int first, int count, int patches, double *bytes, double *msgs,
		       double *rounds);
/* Adds the bytes, exchanges and rounds of BLOCKS blocks' small norm
 * all-reduces (pd_dit_info.tp_norm_*) over PATCHES pieces of a step. */
void pd_tp_norm_sends(const struct pd_par_step *s, int blocks, int patches, double *bytes, double *msgs,
		      double *rounds);

#endif /* PD_PAR_TENSOR_H */
