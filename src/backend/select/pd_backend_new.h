/*
 * pd_backend_new.h - a backend by name: the one place that knows every
 * backend pdit was built with.
 *
 *   struct pd_backend_config cfg = { .compute = PD_BF16, .device = -1, .quant_products = -1 };
 *   struct pd_backend *be;
 *   if (pd_backend_new(&be, "auto", &cfg)) ... pd_last_error() ...
 */
#ifndef PD_BACKEND_NEW_H
#define PD_BACKEND_NEW_H

#include "pd_backend.h"

struct pd_backend_config {
	enum pd_dtype compute;          /* PD_F32 or PD_BF16 matrix products */
	int threads;                    /* CPU threads (<= 0: the calling thread's OpenMP setting) */
	int device;                     /* the GPU (-1: the process's local rank among its machine's
					 * processes, modulo the GPUs there) */
	int timed;                      /* each operation timed (backend/timed: pdit bench --op-times) */
	int quant_products;             /* how kept-quantized layers multiply (enum pd_qproducts), or -1:
					 * pd_backend_qproducts_for's choice */
};

/* NAME: "cpu", "cuda", "auto" (cuda where pdit was built with it and a GPU
 * is present, else cpu) or "staged" (the tests' CPU behind a device
 * boundary); NULL means "auto". 0, or -1 with a message. */
int pd_backend_new(struct pd_backend **out, const char *name, const struct pd_backend_config *cfg);

/* How kept-quantized layers multiply: CONFIGURED (a pd_backend_config's
 * quant_products) where it is set, else (auto) the backend's INT8_AUTO
 * where COMPUTE is bf16 (measured 0.71-0.81 of BF16's step for Q8_0, Q4_K
 * and fp8 on AVX-512 VNNI, 0.55-0.67 for every type on 256-bit VNNI; in f32 they would
 * be the only rounded products), else decoded. The planner asks it too. */
enum pd_qproducts pd_backend_qproducts_for(int configured, enum pd_qproducts int8_auto, enum pd_dtype compute);

/* "int8" (PD_QP_INT8), "int8-256" (PD_QP_INT8_W256), "bf16" (PD_QP_DECODE),
 * "auto" or NULL (-1) as a
 * pd_backend_config's quant_products, into *OUT; -1 with a message naming
 * --quant-products. */
int pd_backend_qproducts(const char *name, int *out);

/* Whether NAME is one pd_backend_new knows (for the command line's checks). */
int pd_backend_known(const char *name);

/* GPUs the CUDA backend sees here (0 without CUDA, a driver or a device). */
int pd_backend_gpus(void);
/* Whether the CUDA backend was built (-DPDIT_CUDA, the toolkit found). */
int pd_backend_cuda_built(void);

/* This process's rank among the job's processes on its machine, from the
 * launcher's environment (Open MPI, MPICH, Slurm); 0 without one. */
int pd_backend_local_rank(void);

#endif /* PD_BACKEND_NEW_H */
