/*
 * pd_cuda_plugin.c - finds and loads the CUDA module (pd_cuda_plugin.h says
 * why it is one): once a process, under a lock, keeping the first outcome;
 * a failure is told again to every later caller, in its own thread's
 * pd_last_error().
 */
#include "pd_cuda_plugin.h"
#include "pd_util.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* From an installed bin/ to the installed library folder (CMake's
 * GNUInstallDirs; lib/x86_64-linux-gnu under /usr). */
#ifndef PDIT_BIN_TO_LIB
#define PDIT_BIN_TO_LIB "../lib"
#endif

static const struct pd_cuda_host pd_cuda_host_table = {
	.abi = PD_CUDA_PLUGIN_ABI,
	.version = PDIT_VERSION,
	.backend_size = sizeof(struct pd_backend),
	.errorf = pd_errorf,
	.calloc = pd_calloc,
	.env_on = pd_env_on,
	.dtype_name = pd_dtype_name,
	.bf16_to_f32 = pd_bf16_to_f32,
	.f32_to_bf16 = pd_f32_to_bf16,
	.fp8_e4m3_to_f32 = pd_fp8_e4m3_to_f32,
	.fp8_e5m2_to_f32 = pd_fp8_e5m2_to_f32,
	.quant_info = pd_quant_info,
	.quant_row_bytes = pd_quant_row_bytes,
	.backend_fail = pd_backend_fail,
	.adapter_set = pd_adapter_set,
	.adapter_clear = pd_adapter_clear,
	.adapter_term = pd_adapter_term,
};

static pthread_mutex_t pd_plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct pd_cuda_plugin *pd_plugin;
static int pd_plugin_tried;
static char pd_plugin_failure[2048];

/* Appends "PATH: WHY" to the failure's list. */
static void pd_plugin_note(const char *path, const char *why)
{
	size_t k = strlen(pd_plugin_failure);

	snprintf(pd_plugin_failure + k, sizeof(pd_plugin_failure) - k, "%s%s: %s", k ? "; " : "", path, why);
}

/* Loads PATH's module; 0, or -1 with the reason noted. */
static int pd_plugin_try(const char *path)
{
	pd_cuda_plugin_entry_fn entry;
	char why[512] = "";
	void *h;

	if (access(path, F_OK) != 0) {
		pd_plugin_note(path, "no such file");
		return -1;
	}
	/* RTLD_LOCAL: the CUDA libraries' names stay the module's own */
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		size_t k = strlen(path);

		/* glibc's message starts with the path, which the note has */
		if (e && !strncmp(e, path, k) && !strncmp(e + k, ": ", 2))
			e += k + 2;
		pd_plugin_note(path, e ? e : "dlopen failed");
		return -1;
	}
	/* POSIX's way from a data pointer to a function's */
	*(void **)&entry = dlsym(h, PD_CUDA_PLUGIN_ENTRY);
	if (!entry) {
		pd_plugin_note(path, "not pdit's CUDA module (no " PD_CUDA_PLUGIN_ENTRY ")");
		dlclose(h);
		return -1;
	}
	pd_plugin = entry(&pd_cuda_host_table, why, sizeof(why));
	if (!pd_plugin) {
		pd_plugin_note(path, why);
		dlclose(h);
		return -1;
	}
	/* kept loaded for the process's life: backends made by it outlive any caller */
	return 0;
}

/* The folder of the file (program or libpdit.so) this code was loaded
 * from, into DIR; -1 when it cannot be told. */
static int pd_plugin_home(char *dir, size_t size)
{
	struct link_map *lm = NULL;
	char path[PATH_MAX];
	Dl_info info;
	char *slash;

	if (!dladdr1((void *)pd_cuda_plugin_load, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return -1;
	/* the program itself has no name in its link map */
	if (lm->l_name && lm->l_name[0]) {
		if (!realpath(lm->l_name, path))
			return -1;
	} else {
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);

		if (n <= 0)
			return -1;
		path[n] = 0;
	}
	slash = strrchr(path, '/');
	if (!slash)
		return -1;
	*slash = 0;
	snprintf(dir, size, "%s", path);
	return 0;
}

static void pd_plugin_find(void)
{
	const char *env = getenv("PDIT_CUDA_PLUGIN");
	static const char *const beside[] = { "", "/" PDIT_BIN_TO_LIB, "/.." };
	char dir[PATH_MAX], path[PATH_MAX + 64];

	if (env && *env) {
		if (pd_plugin_try(env))
			snprintf(pd_plugin_failure + strlen(pd_plugin_failure),
				 sizeof(pd_plugin_failure) - strlen(pd_plugin_failure), " (PDIT_CUDA_PLUGIN)");
		return;
	}
	if (pd_plugin_home(dir, sizeof(dir))) {
		pd_plugin_note(PD_CUDA_PLUGIN_FILE, "the folder of this program is unknown (PDIT_CUDA_PLUGIN names the file)");
		return;
	}
	for (size_t i = 0; i < sizeof(beside) / sizeof(beside[0]); i++) {
		snprintf(path, sizeof(path), "%s%s/" PD_CUDA_PLUGIN_FILE, dir, beside[i]);
		/* a file there that fails to load is the answer: another would be of another build */
		if (!pd_plugin_try(path) || access(path, F_OK) == 0)
			return;
	}
}

const struct pd_cuda_plugin *pd_cuda_plugin_load(void)
{
	const struct pd_cuda_plugin *p;

	pthread_mutex_lock(&pd_plugin_lock);
	if (!pd_plugin_tried) {
		pd_plugin_tried = 1;
		pd_plugin_find();
	}
	p = pd_plugin;
	pthread_mutex_unlock(&pd_plugin_lock);
	if (!p)
		pd_errorf("the CUDA backend's module (%s) did not load: %s", PD_CUDA_PLUGIN_FILE, pd_plugin_failure);
	return p;
}

int pd_cuda_driver_here(void)
{
	static const char *const files[] = { "/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version",
					      "/dev/dxg" };

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (access(files[i], F_OK) == 0)
			return 1;
	return 0;
}
