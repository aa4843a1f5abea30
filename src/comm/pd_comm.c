/*
 * pd_comm.c - choosing the world communicator, and helpers over any
 * implementation.
 */
#include "pd_comm_impl.h"

#include "pd_util.h"
#ifdef PDIT_NCCL
#include "pd_cuda_plugin.h"
#endif

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef PDIT_MPI
/* Built without MPI (-DPDIT_MPI=OFF): a launcher's job of one process still
 * runs; more are refused, since each would compute the whole picture alone. */
static int pd_comm_mpi_world_init(int *argc, char ***argv, struct pd_comm **world)
{
	const char *n = getenv("OMPI_COMM_WORLD_SIZE");

	(void)argc;
	(void)argv;
	if (!n)
		n = getenv("PMI_SIZE");
	if (n && atoi(n) > 1)
		return pd_errorf("this pdit was built without MPI (-DPDIT_MPI=OFF) and runs one process, "
				 "not %s: rebuild with -DPDIT_MPI=ON", n);
	return pd_comm_self_new(world);
}

static void pd_comm_mpi_finalize(void)
{
}

static int pd_comm_mpi_local_size(struct pd_comm *world)
{
	(void)world;
	return 1;
}

static void pd_comm_mpi_cpu_share(struct pd_cpu_share *s)
{
	pd_comm_cpu_alone(s);
}

static const char *pd_comm_mpi_activity(void)
{
	return "";
}
#endif

/* Environment variables a launcher sets for the processes it starts. */
static int pd_launched(void)
{
	static const char *vars[] = { "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
				      "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]))
			return 1;
	return 0;
}

int pd_comm_world_init(int *argc, char ***argv, struct pd_comm **world)
{
	/* A single process needs no MPI: it skips MPI_Init's startup cost
	 * and works where MPI is not configured at all. */
	int rc = pd_launched() ? pd_comm_mpi_world_init(argc, argv, world) : pd_comm_self_new(world);

	if (rc == 0)
		snprintf((*world)->name, sizeof((*world)->name), "world");
	return rc;
}

void pd_comm_world_finalize(struct pd_comm *world)
{
	int mpi = world && world->impl != NULL;

	if (world)
		world->ops->free(world);
	if (mpi)
		pd_comm_mpi_finalize();
}

int pd_comm_mpi_available(void)
{
#ifdef PDIT_MPI
	return 1;
#else
	return 0;
#endif
}

int pd_comm_local_size(struct pd_comm *world)
{
	return world->impl ? pd_comm_mpi_local_size(world) : 1;
}

void pd_comm_cpu_alone(struct pd_cpu_share *s)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t init;

	s->cpus = pd_cpus_here();
	s->sharing = 1;
	s->used = s->cpus;
	s->online = online > 0 ? (int)online : s->cpus;
	/* a container's processes may use its cpuset, not the host's CPUs:
	 * what its first process (pid 1) may run on */
	if (sched_getaffinity(1, sizeof(init), &init) == 0 && CPU_COUNT(&init) > 0 && CPU_COUNT(&init) < s->online)
		s->online = CPU_COUNT(&init);
}

void pd_comm_cpu_share(struct pd_comm *world, struct pd_cpu_share *s)
{
	if (world->impl)
		pd_comm_mpi_cpu_share(s);
	else
		pd_comm_cpu_alone(s);
}

const char *pd_comm_activity(void)
{
	return pd_comm_mpi_activity();
}

int pd_comm_any(struct pd_comm *c, int failed)
{
	int32_t v = failed ? 1 : 0;

	if (c->size == 1)
		return v;
	if (c->ops->allreduce(c, &v, 1, PD_COMM_I32, PD_COMM_MAX))
		return -1;
	return v;
}

int pd_comm_agree(struct pd_comm *c, int failed, int *dead)
{
	int32_t lowest = failed ? c->rank : c->size;

	c->failed_rank = -1;
	if (c->size > 1 && c->ops->allreduce(c, &lowest, 1, PD_COMM_I32, PD_COMM_MIN)) {
		if (dead)
			*dead = 1;
		c->failed_rank = c->rank;
		return -1;
	}
	if (lowest == c->size)
		return 0;
	c->failed_rank = lowest;
	if (c->rank != lowest)
		pd_errorf("rank %d failed", lowest);
	return -1;
}

int pd_comm_allgather(struct pd_comm *c, const void *send, size_t bytes, void *recv)
{
	size_t *counts = pd_malloc(sizeof(size_t) * (size_t)c->size, "counts");
	int rc;

	if (!counts)
		return -1;
	for (int i = 0; i < c->size; i++)
		counts[i] = bytes;
	rc = c->ops->allgatherv(c, send, bytes, recv, counts);
	free(counts);
	return rc;
}

/* NCCL is the CUDA module's (pd_cuda_plugin.h); built without it, device
 * buffers go through pd_comm_staged. */
int pd_comm_nccl_available(void)
{
#ifdef PDIT_NCCL
	return 1;
#else
	return 0;
#endif
}

int pd_comm_nccl_new(struct pd_comm *host, void *stream, struct pd_comm **out)
{
	*out = NULL;
#ifdef PDIT_NCCL
	const struct pd_cuda_plugin *p = pd_cuda_plugin_load();

	if (!p)
		return pd_error_prefix("NCCL on '%s'", host->name);
	if (!p->nccl_new)
		return pd_errorf("NCCL on '%s': the CUDA module was built without NCCL", host->name);
	return p->nccl_new(host, stream, out);
#else
	(void)stream;
	return pd_errorf("NCCL on '%s': this pdit was built without NCCL", host->name);
#endif
}
