/*
 * pd_par_tensor.h - tensor parallelism (Megatron): the model loads its shard
 * (struct pd_dit_shard); these hooks sum row-parallel partial results and
 * gather column-parallel modulation vectors over the tensor-parallel group.
 */
#ifndef PD_PAR_TENSOR_H
#define PD_PAR_TENSOR_H

#include "pd_comm.h"
#include "pd_dit.h"

/* Sets HOOKS' reduce and gather to work over TP (borrowed). */
void pd_tp_hooks(struct pd_dit_hooks *hooks, struct pd_comm *tp);

#endif /* PD_PAR_TENSOR_H */
