/*
 * pd_backend_cpu.h - the CPU backend: oneDNN matrix products and
 * convolutions, OpenMP kernels of pdit's own (AVX-512 where the machine has
 * it, AVX2 for attention's softmax where it has only that, portable C
 * elsewhere; PDIT_NO_AVX512=1 and PDIT_NO_AVX2=1 force the portable ones).
 */
#ifndef PD_BACKEND_CPU_H
#define PD_BACKEND_CPU_H

#include "pd_backend.h"

/* Creates the CPU backend. THREADS: how many it computes with inside
 * pd_backend_enter / pd_backend_leave (<= 0: the creating thread's OpenMP
 * setting); outside such a scope, the calling thread's setting. */
int pd_backend_cpu_new(struct pd_backend **out, enum pd_dtype compute, int threads);

#endif /* PD_BACKEND_CPU_H */
