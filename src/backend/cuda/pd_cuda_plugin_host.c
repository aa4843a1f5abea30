/*
 * pd_cuda_plugin_host.c - the CUDA module's entry, and pdit's own functions
 * its code calls, forwarded to the loading program's (pd_cuda_plugin.h's
 * host table): the module links none of pdit's code, so a message it
 * records is the caller's pd_last_error(), and one helper serves every
 * backend. The module's link (--no-undefined) fails when its code calls a
 * function of pdit's that is not forwarded here.
 */
#include "pd_backend_cuda.h"
#include "pd_cuda_plugin.h"
#include "pd_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef PDIT_NCCL
#include "pd_comm_impl.h"
#endif

/* set by the entry, before the loader can call anything else */
static const struct pd_cuda_host *pd_host;

int pd_errorf(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return pd_host->errorf("%s", msg);
}

void pd_backend_fail(struct pd_backend *be, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pd_host->backend_fail(be, "%s", msg);
}

void *pd_calloc(size_t count, size_t size, const char *what)
{
	return pd_host->calloc(count, size, what);
}

int pd_env_on(const char *name)
{
	return pd_host->env_on(name);
}

const char *pd_dtype_name(enum pd_dtype dt)
{
	return pd_host->dtype_name(dt);
}

float pd_bf16_to_f32(uint16_t h)
{
	return pd_host->bf16_to_f32(h);
}

uint16_t pd_f32_to_bf16(float f)
{
	return pd_host->f32_to_bf16(f);
}

float pd_fp8_e4m3_to_f32(uint8_t c)
{
	return pd_host->fp8_e4m3_to_f32(c);
}

float pd_fp8_e5m2_to_f32(uint8_t c)
{
	return pd_host->fp8_e5m2_to_f32(c);
}

const struct pd_qtype_info *pd_quant_info(enum pd_qtype t)
{
	return pd_host->quant_info(t);
}

size_t pd_quant_row_bytes(const struct pd_qtype_info *q, int64_t n)
{
	return pd_host->quant_row_bytes(q, n);
}

int pd_adapter_set(struct pd_backend *be, struct pd_adapter *ad, int64_t n_out, int64_t n_in, int64_t rank,
		   const float *a, const float *b)
{
	return pd_host->adapter_set(be, ad, n_out, n_in, rank, a, b);
}

void pd_adapter_clear(struct pd_backend *be, struct pd_adapter *ad)
{
	pd_host->adapter_clear(be, ad);
}

int pd_adapter_term(struct pd_backend *be, const struct pd_adapter *ad, float **t, size_t *cap, const float *x,
		    int64_t ldx, int64_t rows, float *y, int64_t ldy, int flags)
{
	return pd_host->adapter_term(be, ad, t, cap, x, ldx, rows, y, ldy, flags);
}

static const struct pd_cuda_plugin pd_cuda_plugin_table = {
	.abi = PD_CUDA_PLUGIN_ABI,
	.devices = pd_backend_cuda_devices,
	.why = pd_backend_cuda_why,
	.backend_new = pd_backend_cuda_new,
#ifdef PDIT_NCCL
	.nccl_new = pd_comm_nccl_new,
#endif
};

/* the module's one exported name (its version script hides every other) */
__attribute__((visibility("default"))) const struct pd_cuda_plugin *
pd_cuda_plugin_entry(const struct pd_cuda_host *host, char *err, size_t err_size)
{
	/* the table's other fields are read only once its first says they are where this build has them */
	if (host->abi != PD_CUDA_PLUGIN_ABI) {
		snprintf(err, err_size, "made for the module ABI %d, not this program's %d: rebuild or reinstall "
			 "them together", PD_CUDA_PLUGIN_ABI, host->abi);
		return NULL;
	}
	if (strcmp(host->version, PDIT_VERSION) != 0 || host->backend_size != sizeof(struct pd_backend)) {
		snprintf(err, err_size, "built with pdit %s, not this program's %s (or with another struct "
			 "pd_backend): rebuild or reinstall them together", PDIT_VERSION, host->version);
		return NULL;
	}
	pd_host = host;
	return &pd_cuda_plugin_table;
}
