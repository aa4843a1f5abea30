/*
 * pdit_main.c - the pdit command: the communicator around pd_dispatch.
 */
#include "pd_util.h"
#include "pdit_cli.h"

#include <stdio.h>

int main(int argc, char **argv)
{
	struct pd_comm *world;
	int rc;

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
	pd_comm_world_finalize(world);
	return rc;
}
