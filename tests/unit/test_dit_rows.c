/*
 * test_dit_rows.c - tensor parallel's whole inputs (pd_dit_rows_in,
 * pd_dit_rows_out) on one process: the gather hook plays the other shards,
 * whose parts are this shard's plus 1000 x (their shard - this one), so
 * every value of a gathered row says which shard's column it is. Random
 * shard counts, ranks, widths and row counts, the rows in several chunks
 * (PD_DIT_STAGE_FLOATS) most times; the outputs' buffers poisoned first.
 *
 *   test_dit_rows [SEED]
 */
#include "pd_backend.h"
#include "pd_backend_cpu.h"
#include "pd_dit.h"
#include "pd_rng.h"
#include "pd_test.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct pd_rng rng;

static int rnd_int(int lo, int hi)
{
	return lo + (int)(pd_rng_u32(&rng) % (uint32_t)(hi - lo + 1));
}

/* The other shards of this one. */
struct fake_shards {
	int rank, count;
	int calls;                      /* gathers asked for */
};

static int fake_gather(void *ctx, const float *part, size_t n, float *out)
{
	struct fake_shards *f = ctx;

	for (int t = 0; t < f->count; t++)
		for (size_t i = 0; i < n; i++)
			out[(size_t)t * n + i] = part[i] + 1000.0f * (float)(t - f->rank);
	f->calls++;
	return 0;
}

static void one_case(struct pd_backend *be)
{
	struct fake_shards f = { 0 };
	struct pd_dit d;
	int64_t T = rnd_int(2, 4), rows, part, ld, width, per, chunks;
	const float *in;
	float *x, *y;
	int bad = 0;

	f.count = (int)T;
	f.rank = rnd_int(0, (int)T - 1);
	/* wide enough most times that the rows go in several chunks */
	part = rnd_int(0, 3) ? rnd_int(1000, 3000) : rnd_int(1, 40);
	rows = rnd_int(1, 1500);
	width = part * T;
	/* rows a gather takes (as pd_dit.c cuts them) */
	per = PD_DIT_STAGE_FLOATS / width > 0 ? PD_DIT_STAGE_FLOATS / width : 1;
	chunks = (rows + per - 1) / per;
	memset(&d, 0, sizeof(d));
	d.be = be;
	d.shard = (struct pd_dit_shard){ .rank = f.rank, .count = (int)T, .whole_inputs = 1 };
	d.hooks.gather = fake_gather;
	d.hooks.shard_ctx = &f;
	x = be->ops->alloc(be, (size_t)(rows * part));
	y = be->ops->alloc(be, (size_t)(rows * width));
	if (!x || !y) {
		PD_CHECK(0, "buffers of %lld x %lld", (long long)rows, (long long)width);
		return;
	}
	pd_rng_randn(&rng, x, (size_t)(rows * part));

	/* the input: every shard's columns in shard order */
	in = pd_dit_rows_in(&d, rnd_int(0, 1), x, part, rows, part, &ld);
	PD_CHECK(in != x && ld == width && !be->failed, "rows_in T=%lld rows=%lld part=%lld: a gathered buffer, stride %lld",
		 (long long)T, (long long)rows, (long long)part, (long long)ld);
	for (int64_t r = 0; in != x && r < rows; r++)
		for (int64_t c = 0; c < width; c++)
			bad += in[r * ld + c] != x[r * part + c % part] + 1000.0f * (float)(c / part - f.rank);
	PD_CHECK(bad == 0, "rows_in T=%lld rank=%d rows=%lld part=%lld (%lld chunks): %d values misplaced", (long long)T,
		 f.rank, (long long)rows, (long long)part, (long long)chunks, bad);
	PD_CHECK(pd_dit_rows_width(&d, width) == part, "rows_width: this shard's share of the outputs");

	/* the output, in place: this shard's columns first, whole rows after */
	for (int64_t i = 0; i < rows * width; i++)
		y[i] = NAN;
	memcpy(y, x, sizeof(float) * (size_t)(rows * part));
	f.calls = 0;
	pd_dit_rows_out(&d, y, rows, width);
	bad = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < width; c++)
			bad += !(y[r * width + c] == x[r * part + c % part] + 1000.0f * (float)(c / part - f.rank));
	PD_CHECK(bad == 0 && f.calls == chunks && !be->failed,
		 "rows_out T=%lld rank=%d rows=%lld width=%lld: %d values misplaced, %d gathers (%lld chunks)",
		 (long long)T, f.rank, (long long)rows, (long long)width, bad, f.calls, (long long)chunks);

	/* one shard: nothing gathered, the input as it is */
	d.shard.count = 1;
	f.calls = 0;
	in = pd_dit_rows_in(&d, 0, x, part, rows, part, &ld);
	pd_dit_rows_out(&d, y, rows, part);
	PD_CHECK(in == x && ld == part && f.calls == 0 && pd_dit_rows_width(&d, part) == part,
		 "one shard: no gather, the input itself");
	be->ops->free(be, x);
	be->ops->free(be, y);
	pd_dit_release(&d);
}

int main(int argc, char **argv)
{
	unsigned long long seed = argc > 1 ? strtoull(argv[1], NULL, 10) :
						    (unsigned long long)time(NULL) * 1000003ull + (unsigned long long)getpid();
	struct pd_backend *be = NULL;

	printf("seed %llu (rerun with: test_dit_rows %llu)\n", seed, seed);
	pd_rng_seed(&rng, seed);
	if (pd_backend_cpu_new(&be, PD_F32, 0)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	for (int i = 0; i < 12; i++)
		one_case(be);
	pd_backend_free(be);
	return pd_test_report();
}
