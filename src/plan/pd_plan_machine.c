/*
 * pd_plan_machine.c - the machines pdit plan predicts for: published device
 * and link figures, and this machine as timed now.
 */
#include "pd_backend_cpu.h"
#include "pd_backend_rate.h"
#include "pd_plan.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const struct pd_plan_preset pd_plan_devices[] = {
	{ "h100", 989, 80, 3350 }, { "h200", 989, 141, 4800 }, { "a100", 312, 80, 2039 }, { "l40", 181, 48, 864 },
	{ NULL, 0, 0, 0 },
};

const struct pd_plan_preset pd_plan_links[] = {
	{ "nvlink", 450, 5, 0 }, { "pcie", 32, 10, 0 }, { "ib", 50, 5, 0 }, { "ethernet", 12.5, 30, 0 },
	{ "shm", 5, 20, 0 }, { NULL, 0, 0, 0 },
};

const struct pd_plan_preset *pd_plan_preset_find(const struct pd_plan_preset *p, const char *name,
						 const char *flag)
{
	char names[128] = "";

	for (; p->name; p++) {
		if (strcmp(p->name, name) == 0)
			return p;
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", names[0] ? ", " : "", p->name);
	}
	pd_errorf("%s: unknown '%s' (one of %s)", flag, name, names);
	return NULL;
}

int pd_plan_machine_here(struct pd_plan_machine *mc, const struct pd_plan_work *w, int devices, int per_node,
			 int timings, double matmul, double weight_s)
{
	/* a product at the model's widest shape, the whole-step rate taken as
	 * 0.85 of it (pdit bench measures 0.84 - 0.90 here), what a product
	 * spends on its weights whatever its rows, the cores and
	 * memory shared by the processes, the elementwise kernels timed too,
	 * links the shared-memory preset, and with more processes than cores a
	 * wait for the peer at each round of an exchange */
	const struct pd_plan_preset *shm = pd_plan_preset_find(pd_plan_links, "shm", "--link");
	struct pd_backend *be = NULL;
	double per[8];
	int n_per = 0;

	memset(mc, 0, sizeof(*mc));
	if (pd_backend_cpu_new(&be, w->compute_bytes == 4 ? PD_F32 : PD_BF16, 0))
		return -1;
	/* the best of TIMINGS medians: on a shared machine others only slow a
	 * product down, and a plan should not depend on a busy moment */
	timings = timings < 1 ? 1 : timings > 8 ? 8 : timings;
	for (int i = 0, given = matmul > 0; i < timings; i++) {
		/* the weights' part of a product, with each timing of the rate
		 * unless given: the median, a difference of two timings swings */
		if (!given || weight_s < 0) {
			double r = pd_backend_rate_matmul_weights(be, w->txt_len + w->img_len, w->info->dim,
								  w->info->mlp_width, &per[n_per]);

			n_per++;
			if (!given)
				matmul = fmax(matmul, r);
		}
		mc->elem_bw = fmax(mc->elem_bw, pd_backend_rate_elementwise(be, w->txt_len + w->img_len, w->info->dim));
	}
	if (n_per > 0)
		mc->weight_s = pd_median_sort(per, n_per);
	pd_backend_free(be);
	if (weight_s >= 0)
		mc->weight_s = weight_s;
	mc->gflops = 0.85 * matmul;
	/* the decode's convolutions run at about 0.3 of the product's rate
	 * here (f32, plain layouts: bench --vae-time, 512², one process) */
	mc->vae_gflops = mc->gflops * 0.3 / 0.85;
	if (mc->gflops <= 0)
		return pd_errorf("could not time a matrix product here; give --gflops");
	mc->devices = devices;
	mc->per_node = per_node;
	mc->shared = 1;
	mc->cores = pd_cpus_here();
	/* a tenth kept back: the libraries, MPI's buffers and oneDNN's scratch
	 * the estimate leaves out (bench measures peaks 1.02-1.1 of it), and
	 * the page cache the mapped weights are read through */
	mc->mem_gb = 0.9 * pd_mem_available_mb() / 1024.0;
	mc->bw_intra = mc->bw_inter = shm->a * 1e9;
	mc->lat_intra = mc->lat_inter = shm->b * 1e-6;
	/* fitted on meshes of 4 and 8 processes on 2 cores (pdit bench at 512²,
	 * docs/plan.md): a few milliseconds per round of an exchange for each
	 * process beyond one a core */
	mc->wake_s = 2.5e-3;
	return 0;
}

int pd_plan_machine_int8(struct pd_plan_machine *mc, const struct pd_plan_work *w)
{
	struct pd_backend *be = NULL;
	double r;

	if (!(w->info->int8_fraction > 0) || w->compute_bytes != 2)
		return 0;
	if (pd_backend_cpu_new(&be, PD_BF16, 0))
		return -1;
	/* the kernel a run on int8 products takes here; at the MLP's second
	 * shape where its first does not take the type's blocks */
	be->qproducts = PD_QP_INT8;
	r = pd_backend_rate_blocks(be, (enum pd_qtype)w->info->int8_type, w->txt_len + w->img_len, w->info->dim,
				   w->info->mlp_width);
	if (!(r > 0))
		r = pd_backend_rate_blocks(be, (enum pd_qtype)w->info->int8_type, w->txt_len + w->img_len,
					   w->info->mlp_width, w->info->dim);
	pd_backend_free(be);
	if (r > 0)
		mc->int8_speed = r;
	return 0;
}
