/*
 * pd_cuda_plugin.h - the CUDA backend and the NCCL communicator as a module
 * loaded when first asked for (libpdit-cuda.so), and the two tables the
 * module and the program that loads it hand each other.
 *
 * Why a module: cuBLASLt alone is 540 MB of library whose start-up code runs
 * in every process that links it, before main. A pdit linked with the CUDA
 * libraries paid 0.2-0.5 s at every start on a machine without a GPU (every
 * test, every rank, `pdit --version`), and more where the page cache had let
 * the libraries go. Loaded on demand, only a process that computes on a GPU
 * pays it.
 *
 * The module's code calls a few of pdit's own functions (errors, the
 * backend's shared helpers, the block formats). It does not link them: they
 * come in the host table, so that its errors land in the loading thread's
 * pd_last_error() and its backend uses the same helpers as every other,
 * whether the program is pdit, a test or a program linking libpdit.so.
 */
#ifndef PD_CUDA_PLUGIN_H
#define PD_CUDA_PLUGIN_H

#include "pd_backend.h"
#include "pd_quant.h"

#include <stddef.h>

/* Raised whenever either table, or a struct either side reaches into,
 * changes its layout. */
#define PD_CUDA_PLUGIN_ABI 1

/* The module's file name, and its one exported symbol. */
#define PD_CUDA_PLUGIN_FILE "libpdit-cuda.so"
#define PD_CUDA_PLUGIN_ENTRY "pd_cuda_plugin_entry"

struct pd_comm;

/* What the loading program lends the module: the functions of pdit's own
 * that its code calls, by the names it calls them (the module's
 * pd_cuda_plugin_host.c forwards each). */
struct pd_cuda_host {
	int abi;                        /* PD_CUDA_PLUGIN_ABI of the program's build */
	const char *version;            /* PDIT_VERSION of the program's build */
	size_t backend_size;            /* sizeof(struct pd_backend) there: a module of another build refuses */
	int (*errorf)(const char *fmt, ...);
	void *(*calloc)(size_t count, size_t size, const char *what);
	int (*env_on)(const char *name);
	const char *(*dtype_name)(enum pd_dtype dt);
	float (*bf16_to_f32)(uint16_t h);
	uint16_t (*f32_to_bf16)(float f);
	float (*fp8_e4m3_to_f32)(uint8_t c);
	float (*fp8_e5m2_to_f32)(uint8_t c);
	const struct pd_qtype_info *(*quant_info)(enum pd_qtype t);
	size_t (*quant_row_bytes)(const struct pd_qtype_info *q, int64_t n);
	void (*backend_fail)(struct pd_backend *be, const char *fmt, ...);
	int (*adapter_set)(struct pd_backend *be, struct pd_adapter *ad, int64_t n_out, int64_t n_in, int64_t rank,
			   const float *a, const float *b);
	void (*adapter_clear)(struct pd_backend *be, struct pd_adapter *ad);
	int (*adapter_term)(struct pd_backend *be, const struct pd_adapter *ad, float **t, size_t *cap,
			    const float *x, int64_t ldx, int64_t rows, float *y, int64_t ldy, int flags);
};

/* What the module gives back: pd_backend_cuda.h's calls, and NCCL's. */
struct pd_cuda_plugin {
	int abi;                        /* PD_CUDA_PLUGIN_ABI of the module's build */
	int (*devices)(void);           /* CUDA devices this process sees (0: none, see why) */
	const char *(*why)(void);       /* why devices() found none */
	/* a backend on GPU DEVICE computing products in COMPUTE */
	int (*backend_new)(struct pd_backend **out, enum pd_dtype compute, int device);
	/* an NCCL communicator beside HOST on the backend's STREAM; NULL where
	 * the module was built without NCCL */
	int (*nccl_new)(struct pd_comm *host, void *stream, struct pd_comm **out);
};

/* The module's entry: its table, or NULL with the reason in ERR when HOST
 * is of another build. */
typedef const struct pd_cuda_plugin *(*pd_cuda_plugin_entry_fn)(const struct pd_cuda_host *host, char *err,
								 size_t err_size);

/* The module, loaded once a process: PDIT_CUDA_PLUGIN's file when set, else
 * libpdit-cuda.so beside the program or library holding this code (the build
 * folder, its tests/ one below, or an installed bin/'s lib/). NULL with a
 * message naming the files tried and why each failed. */
const struct pd_cuda_plugin *pd_cuda_plugin_load(void);

/* Whether a GPU driver's files are here (/dev/nvidiactl, /dev/nvidia0,
 * /proc/driver/nvidia; /dev/dxg under WSL): where none is, `auto` is the CPU
 * without loading the module. */
int pd_cuda_driver_here(void);

#endif /* PD_CUDA_PLUGIN_H */
