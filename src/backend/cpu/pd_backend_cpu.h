/*
 * pd_backend_cpu.h - the CPU backend: oneDNN matrix products and
 * convolutions, OpenMP kernels of pdit's own (AVX-512 where the machine has
 * it, AVX2 for attention's softmax where it has only that, portable C
 * elsewhere; PDIT_NO_AVX512=1 and PDIT_NO_AVX2=1 force the portable ones).
 */
#ifndef PD_BACKEND_CPU_H
#define PD_BACKEND_CPU_H

#include "pd_backend.h"
#include "pd_quant.h"

/* Creates the CPU backend. THREADS: how many it computes with inside
 * pd_backend_enter / pd_backend_leave (<= 0: the creating thread's OpenMP
 * setting); outside such a scope, the calling thread's setting. */
int pd_backend_cpu_new(struct pd_backend **out, enum pd_dtype compute, int threads);
/* Where this CPU's int8 products beat its bf16 ones (VNNI, 512- or
 * 256-bit: PD_QP_INT8; none or turned off, or bf16 products on AMX tiles:
 * PD_QP_DECODE): what a backend's int8_auto will say, without one. */
enum pd_qproducts pd_backend_cpu_int8_auto(void);
/* Whether a CPU backend multiplies a kept-quantized weight of type T,
 * N_IN inputs wide, in int8 under QP (its products as chosen). */
int pd_backend_cpu_int8_takes(enum pd_qproducts qp, enum pd_qtype t, int64_t n_in);
/* Bytes a CPU backend holds for a kept-quantized weight of type T, N_OUT x
 * N_IN, under QP: in the int8 layout where it multiplies in int8 (that of
 * pd_cpu_i8.c: Q4_K 2.8% above the file, fp8 6%), else as the file holds
 * it. */
size_t pd_backend_cpu_held_bytes(enum pd_qtype t, int64_t n_out, int64_t n_in, enum pd_qproducts qp);

#endif /* PD_BACKEND_CPU_H */
