/*
 * pd_mesh.c - degrees, coordinates and sub-communicators of the process mesh.
 */
#include "pd_mesh.h"
#include "pd_par_method.h"
#include "pd_util.h"

#include <stdio.h>
#include <string.h>

static const char *pd_axis_names[PD_AXIS_COUNT] = { "tp", "ulysses", "ring", "pp", "cfg", "dp" };

/* The flags that set each degree, for messages. */
static const char *pd_axis_flags[PD_AXIS_COUNT] = {
	"--tensor-parallel-degree", "--ulysses-degree", "--ring-degree", "--pipefusion-degree", "--cfg-parallel",
	"--data-parallel-degree",
};

const char *pd_axis_name(enum pd_axis a)
{
	return (unsigned)a < PD_AXIS_COUNT ? pd_axis_names[a] : "?";
}

void pd_mesh_format(const int degree[PD_AXIS_COUNT], int distrifusion, char *buf, size_t len)
{
	snprintf(buf, len, "dp=%d cfg=%d pp=%d %s=%d ulysses=%d tp=%d", degree[PD_AXIS_DP], degree[PD_AXIS_CFG],
		 degree[PD_AXIS_PP], distrifusion ? "distrifusion" : "ring", degree[PD_AXIS_RING],
		 degree[PD_AXIS_ULYSSES], degree[PD_AXIS_TP]);
}

/* Why DEGREE does not fit, or NULL when it does. */
static const char *pd_mesh_problem(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
				   size_t len)
{
	long prod = 1;

	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		if (degree[a] < 1) {
			snprintf(buf, len, "%s must be at least 1", pd_axis_flags[a]);
			return buf;
		}
		prod *= degree[a];
	}
	if (prod != lim->world) {
		if (lim->world == 1)
			snprintf(buf, len, "the degrees multiply to %ld, but this is one process: start %ld with "
				 "mpirun -np %ld pdit ...", prod, prod, prod);
		else
			snprintf(buf, len, "the degrees multiply to %ld, but there are %d processes", prod, lim->world);
		return buf;
	}
	/* what each method allows */
	for (int i = 0; pd_par_methods[i]; i++) {
		const char *why = pd_par_methods[i]->problem ? pd_par_methods[i]->problem(degree, lim, buf, len) : NULL;

		if (why)
			return why;
	}
	return NULL;
}

int pd_mesh_enumerate(const struct pd_mesh_limits *lim, int (*out)[PD_AXIS_COUNT], int max)
{
	int d[PD_AXIS_COUNT], n = 0, W = lim->world;
	char why[256];

	/* dp, cfg, pp, ring, ulysses over divisors; tp takes what is left */
	for (d[PD_AXIS_DP] = 1; d[PD_AXIS_DP] <= W; d[PD_AXIS_DP]++) {
		if (W % d[PD_AXIS_DP])
			continue;
		for (d[PD_AXIS_CFG] = 1; d[PD_AXIS_CFG] <= 2; d[PD_AXIS_CFG]++) {
			int w1 = W / d[PD_AXIS_DP];

			if (w1 % d[PD_AXIS_CFG])
				continue;
			for (d[PD_AXIS_PP] = 1; d[PD_AXIS_PP] <= w1 / d[PD_AXIS_CFG]; d[PD_AXIS_PP]++) {
				int w2 = w1 / d[PD_AXIS_CFG];

				if (w2 % d[PD_AXIS_PP])
					continue;
				for (d[PD_AXIS_RING] = 1; d[PD_AXIS_RING] <= w2 / d[PD_AXIS_PP]; d[PD_AXIS_RING]++) {
					int w3 = w2 / d[PD_AXIS_PP];

					if (w3 % d[PD_AXIS_RING])
						continue;
					for (d[PD_AXIS_ULYSSES] = 1; d[PD_AXIS_ULYSSES] <= w3 / d[PD_AXIS_RING];
					     d[PD_AXIS_ULYSSES]++) {
						int w4 = w3 / d[PD_AXIS_RING];

						if (w4 % d[PD_AXIS_ULYSSES])
							continue;
						d[PD_AXIS_TP] = w4 / d[PD_AXIS_ULYSSES];
						if (pd_mesh_problem(d, lim, why, sizeof(why)))
							continue;
						if (n < max)
							memcpy(out[n], d, sizeof(d));
						n++;
					}
				}
			}
		}
	}
	return n;
}

int pd_mesh_check(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim)
{
	char why[256], list[1200], one[80];
	int valid[12][PD_AXIS_COUNT], n, shown = 0, more = 0;
	size_t k = 0;
	const char *s = lim->world > 1 ? "es" : "";

	if (!pd_mesh_problem(degree, lim, why, sizeof(why)))
		return 0;
	list[0] = 0;
	/* the exact meshes, then those whose ring axis runs DistriFusion */
	for (int df = 0; df < 2; df++) {
		struct pd_mesh_limits l = *lim;

		l.distrifusion = df;
		n = pd_mesh_enumerate(&l, valid, 12);
		for (int i = 0; i < n && i < 12; i++) {
			if (df && valid[i][PD_AXIS_RING] < 2)
				continue;
			if (shown == 12) {
				more = 1;
				break;
			}
			pd_mesh_format(valid[i], df, one, sizeof(one));
			k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%s", shown ? "; " : "", one);
			shown++;
			if (k >= sizeof(list))
				break;
		}
		more |= n > 12;
	}
	if (shown == 0)
		return pd_errorf("impossible mesh: %s; no mesh fits %d process%s with %d heads", why, lim->world, s,
				 lim->heads);
	return pd_errorf("impossible mesh: %s. Valid for %d process%s: %s%s", why, lim->world, s, list,
			 more ? "; ..." : "");
}

static int pd_largest_divisor(int n, int limit, int also_divides)
{
	for (int d = n < limit ? n : limit; d > 1; d--)
		if (n % d == 0 && also_divides % d == 0)
			return d;
	return 1;
}

int pd_mesh_choose(int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim)
{
	int left = lim->world;

	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (degree[a] > 0) {
			if (left % degree[a])
				return pd_mesh_check(degree, lim);
			left /= degree[a];
		}
	if (degree[PD_AXIS_PP] <= 0)
		degree[PD_AXIS_PP] = 1;
	if (degree[PD_AXIS_TP] <= 0)
		degree[PD_AXIS_TP] = 1;
	if (degree[PD_AXIS_DP] <= 0) {
		/* whole images per process need no communication at all */
		degree[PD_AXIS_DP] = pd_largest_divisor(left, lim->images, left);
		left /= degree[PD_AXIS_DP];
	}
	if (degree[PD_AXIS_CFG] <= 0) {
		degree[PD_AXIS_CFG] = lim->cfg_possible && left % 2 == 0 ? 2 : 1;
		left /= degree[PD_AXIS_CFG];
	}
	if (degree[PD_AXIS_ULYSSES] <= 0) {
		/* what is left after a given ring degree goes to Ulysses; otherwise
		 * Ulysses takes as much as the local heads allow, ring the rest */
		int hl = lim->heads % degree[PD_AXIS_TP] ? 1 : lim->heads / degree[PD_AXIS_TP];

		degree[PD_AXIS_ULYSSES] = degree[PD_AXIS_RING] > 0 ? left : pd_largest_divisor(left, left, hl);
		left /= degree[PD_AXIS_ULYSSES];
	}
	if (degree[PD_AXIS_RING] <= 0)
		degree[PD_AXIS_RING] = left;
	return pd_mesh_check(degree, lim);
}

/* Index of the rank's coordinates with the axes in MASK left out. */
static int pd_mesh_color(const struct pd_mesh *m, unsigned mask)
{
	int color = 0;

	for (int a = PD_AXIS_COUNT - 1; a >= 0; a--) {
		if (mask & (1u << a))
			continue;
		color = color * m->degree[a] + m->coord[a];
	}
	return color;
}

int pd_mesh_create(struct pd_mesh *m, struct pd_comm *world, const int degree[PD_AXIS_COUNT])
{
	int r = world->rank;
	unsigned sp_mask = (1u << PD_AXIS_RING) | (1u << PD_AXIS_ULYSSES);
	unsigned model_mask = sp_mask | (1u << PD_AXIS_TP) | (1u << PD_AXIS_PP);

	memset(m, 0, sizeof(*m));
	m->world = world;
	memcpy(m->degree, degree, sizeof(m->degree));
	pd_mesh_coords(degree, r, m->coord);
	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		if (world->ops->split(world, pd_mesh_color(m, 1u << a), m->coord[a], &m->axis[a]))
			goto fail;
		snprintf(m->axis[a]->name, sizeof(m->axis[a]->name), "%s", pd_axis_names[a]);
	}
	if (world->ops->split(world, pd_mesh_color(m, sp_mask),
			      pd_mesh_seq_index(degree, m->coord), &m->sp) ||
	    world->ops->split(world, pd_mesh_color(m, model_mask), world->rank, &m->model) ||
	    world->ops->split(world, m->coord[PD_AXIS_DP], world->rank, &m->replica))
		goto fail;
	snprintf(m->sp->name, sizeof(m->sp->name), "sequence");
	snprintf(m->model->name, sizeof(m->model->name), "model");
	snprintf(m->replica->name, sizeof(m->replica->name), "replica");
	return 0;
fail:
	pd_mesh_free(m);
	return -1;
}

void pd_mesh_free(struct pd_mesh *m)
{
	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (m->axis[a])
			m->axis[a]->ops->free(m->axis[a]);
	if (m->sp)
		m->sp->ops->free(m->sp);
	if (m->model)
		m->model->ops->free(m->model);
	if (m->replica)
		m->replica->ops->free(m->replica);
	memset(m, 0, sizeof(*m));
}

/* ----------------------------------------------------------------------- */
/* Rank arithmetic                                                         */
/* ----------------------------------------------------------------------- */

void pd_mesh_coords(const int degree[PD_AXIS_COUNT], int rank, int coord[PD_AXIS_COUNT])
{
	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		coord[a] = rank % degree[a];
		rank /= degree[a];
	}
}

int pd_mesh_seq_index(const int degree[PD_AXIS_COUNT], const int coord[PD_AXIS_COUNT])
{
	return coord[PD_AXIS_RING] * degree[PD_AXIS_ULYSSES] + coord[PD_AXIS_ULYSSES];
}

void pd_mesh_stage_blocks(const struct pd_dit_info *info, int stages, int stage, int *first, int *count)
{
	int n = info->blocks, prev = 0, k = 0;
	double total = 0, acc = 0;

	for (int j = 0; j < n; j++)
		total += info->block_cost[j];
	/* boundary i (where stage i starts) is where the running cost comes
	 * nearest to i / N of the total, each stage keeping at least one block */
	*first = 0;
	*count = n;
	for (int i = 1; i <= stages; i++) {
		double target = total * i / stages;
		int b;

		while (k < n && acc + info->block_cost[k] / 2 < target)
			acc += info->block_cost[k++];
		b = k;
		if (b <= prev)
			b = prev + 1;
		if (b > n - (stages - i))
			b = n - (stages - i);
		if (i == stages)
			b = n;
		if (i == stage)
			*first = b;
		if (i == stage + 1)
			*count = b - *first;
		prev = b;
	}
}

int64_t pd_mesh_band_row(int64_t T, int64_t hp, int64_t wp, int pieces, int i)
{
	int64_t num = (T + hp * wp) * i - T * pieces, den = (int64_t)pieces * wp;
	int64_t a = 2 * num + den, d = 2 * den, r = a / d;

	if (i <= 0)
		return 0;
	if (i >= pieces)
		return hp;
	if (a % d != 0 && a < 0)
		r--;	/* floor, not truncation */
	if (r < i)
		r = i;
	if (r > hp - pieces + i)
		r = hp - pieces + i;
	return r;
}

int64_t pd_mesh_band_tokens(int64_t T, int64_t hp, int64_t wp, int pieces, int i)
{
	return (i == 0 ? T : 0) + (pd_mesh_band_row(T, hp, wp, pieces, i + 1) - pd_mesh_band_row(T, hp, wp, pieces, i)) * wp;
}
