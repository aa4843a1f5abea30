/*
 * pd_par_cfg.h - CFG parallelism: of the two ranks of a CFG pair, rank 0
 * runs the negative pass and rank 1 the positive (xDiT's convention); the
 * predictions are exchanged in that order and both ranks combine them and
 * step the scheduler identically, so their latents never drift apart.
 */
#ifndef PD_PAR_CFG_H
#define PD_PAR_CFG_H

#include "pd_comm.h"

/* MINE [n] -> BOTH [2n] = [negative | positive] on both ranks of the
 * pair CTX (a struct pd_comm): the runner's cfg_exchange. */
int pd_cfg_exchange(void *ctx, const float *mine, size_t n, float *both);

#endif /* PD_PAR_CFG_H */
