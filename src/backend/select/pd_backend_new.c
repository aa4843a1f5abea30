/*
 * pd_backend_new.c - the backends by name.
 */
#include "pd_backend_new.h"
#include "pd_backend_cpu.h"
#include "pd_backend_staged.h"
#include "pd_backend_timed.h"
#include "pd_util.h"
#ifdef PDIT_CUDA
#include "pd_cuda_plugin.h"
#endif
#ifdef PDIT_CUDA_LINKED
#include "pd_backend_cuda.h"
#endif

#include <stdlib.h>
#include <string.h>

int pd_backend_known(const char *name)
{
	return !name || !strcmp(name, "auto") || !strcmp(name, "cpu") || !strcmp(name, "cuda") ||
	       !strcmp(name, "staged");
}

int pd_backend_qproducts(const char *name, int *out)
{
	if (!name || !strcmp(name, "auto"))
		*out = -1;
	else if (!strcmp(name, "int8"))
		*out = PD_QP_INT8;
	else if (!strcmp(name, "int8-256"))
		*out = PD_QP_INT8_W256;
	else if (!strcmp(name, "bf16"))
		*out = PD_QP_DECODE;
	else
		return pd_errorf("--quant-products %s: unknown (int8, int8-256, bf16 or auto)", name);
	return 0;
}

enum pd_qproducts pd_backend_qproducts_for(int configured, enum pd_qproducts int8_auto, enum pd_dtype compute)
{
	if (configured >= 0)
		return (enum pd_qproducts)configured;
	return compute == PD_BF16 ? int8_auto : PD_QP_DECODE;
}

#ifdef PDIT_CUDA
/* The CUDA backend's calls: the module's, loaded on first use, or in the
 * tests' programs the emulated backend they link (PDIT_CUDA_LINKED). */
static const struct pd_cuda_plugin *pd_cuda(void)
{
#ifdef PDIT_CUDA_LINKED
	static const struct pd_cuda_plugin linked = { PD_CUDA_PLUGIN_ABI, pd_backend_cuda_devices,
						       pd_backend_cuda_why, pd_backend_cuda_new, NULL };

	return &linked;
#else
	return pd_cuda_plugin_load();
#endif
}
#endif

int pd_backend_gpus(void)
{
#ifdef PDIT_CUDA
	const struct pd_cuda_plugin *p;

#ifndef PDIT_CUDA_LINKED
	/* where no driver is, the module (and cuBLASLt's start-up) stays on disk */
	if (!pd_cuda_driver_here())
		return 0;
#endif
	p = pd_cuda();
	if (!p) {
		static int told;

		if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
			pd_log(1, "pdit: note: a GPU driver is here, but %s\n", pd_last_error());
		return 0;
	}
	return p->devices();
#else
	return 0;
#endif
}

int pd_backend_cuda_built(void)
{
#ifdef PDIT_CUDA
	return 1;
#else
	return 0;
#endif
}

int pd_backend_local_rank(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
					     "MV2_COMM_WORLD_LOCAL_RANK", NULL };

	for (int i = 0; vars[i]; i++) {
		const char *v = getenv(vars[i]);

		if (v && *v)
			return atoi(v) > 0 ? atoi(v) : 0;
	}
	return 0;
}

static int pd_backend_new_untimed(struct pd_backend **out, const char *name, const struct pd_backend_config *cfg)
{
	*out = NULL;
	if (!name || !strcmp(name, "auto"))
		name = pd_backend_gpus() > 0 ? "cuda" : "cpu";
	if (!strcmp(name, "cpu"))
		return pd_backend_cpu_new(out, cfg->compute, cfg->threads);
	if (!strcmp(name, "staged"))
		return pd_backend_staged_new(out, cfg->compute, cfg->threads);
	if (!strcmp(name, "cuda")) {
#ifdef PDIT_CUDA
		int n, dev = cfg->device;

		if (!pd_cuda())
			return pd_error_prefix("--backend cuda");
		n = pd_cuda()->devices();
		if (n <= 0)
			return pd_errorf("--backend cuda: no CUDA device here (%s)", pd_cuda()->why());
		if (dev < 0)
			dev = pd_backend_local_rank() % n;
		if (dev >= n)
			return pd_errorf("--device %d: this machine has %d CUDA device%s (0 to %d)", dev, n,
					 n == 1 ? "" : "s", n - 1);
		return pd_cuda()->backend_new(out, cfg->compute, dev);
#else
		return pd_errorf("--backend cuda: this pdit was built without CUDA (configure with -DPDIT_CUDA=ON "
				 "where the CUDA toolkit is installed)");
#endif
	}
	return pd_errorf("--backend %s: unknown (cpu, cuda or auto)", name);
}

int pd_backend_new(struct pd_backend **out, const char *name, const struct pd_backend_config *cfg)
{
	if (pd_backend_new_untimed(out, name, cfg))
		return -1;
	if (cfg->quant_products > PD_QP_DECODE && !(*out)->int8_products) {
		pd_errorf("--quant-products %s: the %s backend has no int8 products (its quantized layers are "
			  "decoded for bf16 or f32 products); bf16 or auto",
			  cfg->quant_products == PD_QP_INT8 ? "int8" : "int8-256", (*out)->ops->name);
		pd_backend_free(*out);
		*out = NULL;
		return -1;
	}
	(*out)->qproducts = pd_backend_qproducts_for(cfg->quant_products, (*out)->int8_auto, (*out)->compute);
	return cfg->timed ? pd_backend_timed_new(out, *out) : 0;
}
