/*
 * pdit_main.c - the pdit command: the communicator around pd_dispatch.
 */
#include "pd_util.h"
#include "pdit_cli.h"
#include "pd_video.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	struct pd_comm *world;
	int rc;

#ifdef M_MMAP_THRESHOLD
	/* glibc raises its mmap threshold to the largest block freed so far
	 * (up to 32 MB), after which oneDNN's per-call packing buffers and
	 * the scratch that grows with the first steps come from the heap and
	 * leave holes it cannot give back: 15 MB of peak at FLUX width, 1024²,
	 * quantized. A fixed 4 MB keeps large buffers mapped on their own. */
	mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
	/* FFmpeg reports errors only (x264 would print its statistics) */
	pd_video_quiet();
	if (pd_comm_world_init(&argc, &argv, &world)) {
		fprintf(stderr, "pdit: %s\n", pd_last_error());
		return 1;
	}
	/* progress and notes come from rank 0; errors from whoever has them */
	if (world->rank != 0)
		pd_log_level = 0;
	pd_fault_rank = world->rank;
	pd_cli_catch_signals(world->rank, world->size);
	rc = pd_dispatch(world, argc, argv);
	/* the tests' way to hold a process between its work and its end
	 * (PDIT_INJECT_FAULT=exit:0:hang): a signal there */
	pd_fault("exit", 0);
	pd_comm_world_finalize(world);
	return rc;
}
