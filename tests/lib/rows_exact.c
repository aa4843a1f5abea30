/*
 * rows_exact.c - says whether this CPU's products give each row the same
 * bits however many rows a call has (pd_test_rows.h): the shell tests
 * compare meshes with one process bit for bit where they do, and within a
 * stated tolerance where they do not.
 *
 *   rows_exact        # prints "exact: ..." and exits 0, or "not exact: ..." and exits 1
 *   rows_exact TOL    # prints 0 where exact, else TOL; what it found on stderr; exits 0
 */
#include "pd_test_rows.h"

int main(int argc, char **argv)
{
	char why[256];
	int exact = pd_test_rows_exact(why, sizeof(why));

	fprintf(argc > 1 ? stderr : stdout, "this CPU's products: %s: %s\n", exact ? "exact" : "not exact", why);
	if (argc > 1) {
		printf("%s\n", exact ? "0" : argv[1]);
		return 0;
	}
	return exact ? 0 : 1;
}
