/*
 * pd_mesh.c - degrees, coordinates and sub-communicators of the process mesh.
 */
#include "pd_mesh.h"
#include "pd_par_method.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct pd_axis_info pd_axes[PD_AXIS_COUNT] = {
	[PD_AXIS_TP] = { "tp", "--tensor-parallel-degree", "split heads and MLP width over N processes (Megatron)", 0,
			 0, 0, 0, PD_OVERLAP_NONE },
	[PD_AXIS_ULYSSES] = { "ulysses", "--ulysses-degree", "sequence parallel with all-to-all between tokens and heads",
			      0, 0, 1, 0, PD_OVERLAP_NONE },
	[PD_AXIS_RING] = { "ring", "--ring-degree", "sequence parallel with ring attention", 0, 0, 1, 0,
			   PD_OVERLAP_ATTENTION },
	[PD_AXIS_DISTRI] = { "distrifusion", "--distrifusion-degree",
			     "DistriFusion over N bands of tokens: other bands' keys and values one step old", 0, 0, 1, 1,
			     PD_OVERLAP_STEP },
	[PD_AXIS_PP] = { "pp", "--pipefusion-degree", "PipeFusion: N pipeline stages, each a range of the blocks", 0, 0,
			 0, 0, PD_OVERLAP_STEP },
	[PD_AXIS_CFG] = { "cfg", "--cfg-parallel", "run the positive and negative passes of true CFG on two processes", 1,
			  2, 0, 0, PD_OVERLAP_NONE },
	[PD_AXIS_DP] = { "dp", "--data-parallel-degree", "split the batch of images over N groups", 0, 0, 0, 0,
			 PD_OVERLAP_NONE },
};

const char *pd_axis_name(enum pd_axis a)
{
	return (unsigned)a < PD_AXIS_COUNT ? pd_axes[a].name : "?";
}

void pd_mesh_format(const int degree[PD_AXIS_COUNT], char *buf, size_t len)
{
	int df = degree[PD_AXIS_DISTRI] > 1;

	snprintf(buf, len, "dp=%d cfg=%d pp=%d %s=%d ulysses=%d tp=%d", degree[PD_AXIS_DP], degree[PD_AXIS_CFG],
		 degree[PD_AXIS_PP], df ? "distrifusion" : "ring", degree[df ? PD_AXIS_DISTRI : PD_AXIS_RING],
		 degree[PD_AXIS_ULYSSES], degree[PD_AXIS_TP]);
}

void pd_mesh_format_short(const int degree[PD_AXIS_COUNT], char *buf, size_t len)
{
	size_t k = 0;

	buf[0] = 0;
	for (int a = PD_AXIS_COUNT - 1; a >= 0 && k < len; a--)
		if (degree[a] > 1)
			k += (size_t)snprintf(buf + k, len - k, "%s%s=%d", k ? " " : "", pd_axes[a].name, degree[a]);
	if (!buf[0])
		snprintf(buf, len, "one process");
}

int pd_mesh_seq_degree(const int degree[PD_AXIS_COUNT])
{
	int P = 1;

	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (pd_axes[a].sequence)
			P *= degree[a];
	return P;
}

int pd_mesh_stale(const int degree[PD_AXIS_COUNT], int patches)
{
	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (pd_axes[a].stale && degree[a] > 1)
			return 1;
	return degree[PD_AXIS_PP] > 1 && patches != 1;
}

/* Why DEGREE does not fit, or NULL when it does. */
static const char *pd_mesh_problem(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
				   size_t len)
{
	long prod = 1;

	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		if (degree[a] < 1) {
			snprintf(buf, len, "%s must be at least 1", pd_axes[a].flag);
			return buf;
		}
		prod *= degree[a];
	}
	if (prod != lim->world) {
		if (lim->world == 1)
			snprintf(buf, len, "the degrees multiply to %ld, but this is one process: start %ld with "
				 "mpirun -np %ld pdit (the same flags)", prod, prod, prod);
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

/* The degrees of axes A down to 1 for W processes, tp taking what is left;
 * each valid mesh into OUT (at most MAX), counted in *N. */
static void pd_mesh_enumerate_axis(const struct pd_mesh_limits *lim, int d[PD_AXIS_COUNT], int a, int W,
				   int (*out)[PD_AXIS_COUNT], int max, int *n)
{
	char why[256];
	int top = pd_axes[a].max > 0 && pd_axes[a].max < W ? pd_axes[a].max : W;

	if (a == PD_AXIS_TP) {
		d[a] = W;
		if (pd_mesh_problem(d, lim, why, sizeof(why)))
			return;
		if (*n < max)
			memcpy(out[*n], d, sizeof(int) * PD_AXIS_COUNT);
		(*n)++;
		return;
	}
	if (a == PD_AXIS_DISTRI && !lim->distri)
		top = 1;
	for (d[a] = 1; d[a] <= top; d[a]++)
		if (W % d[a] == 0)
			pd_mesh_enumerate_axis(lim, d, a - 1, W / d[a], out, max, n);
}

int pd_mesh_enumerate(const struct pd_mesh_limits *lim, int (*out)[PD_AXIS_COUNT], int max)
{
	int d[PD_AXIS_COUNT], n = 0;

	/* dp, cfg, pp, distrifusion, ring, ulysses over divisors; tp takes what is left */
	pd_mesh_enumerate_axis(lim, d, PD_AXIS_COUNT - 1, lim->world, out, max, &n);
	return n;
}

int pd_mesh_check(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim)
{
	struct pd_mesh_limits all = *lim;
	char why[256], list[1200], one[80];
	int (*valid)[PD_AXIS_COUNT], n, shown = 0, more = 0;
	size_t k = 0;
	const char *s = lim->world > 1 ? "es" : "";

	if (!pd_mesh_problem(degree, lim, why, sizeof(why)))
		return 0;
	list[0] = 0;
	all.distri = 1;
	n = pd_mesh_enumerate(&all, NULL, 0);
	valid = pd_calloc((size_t)n + 1, sizeof(*valid), "meshes");
	if (!valid)
		return -1;
	pd_mesh_enumerate(&all, valid, n);
	/* the exact meshes, then DistriFusion's */
	for (int df = 0; df < 2 && !more && k < sizeof(list); df++)
		for (int i = 0; i < n; i++) {
			if ((valid[i][PD_AXIS_DISTRI] > 1) != df)
				continue;
			if (shown == 12) {
				more = 1;
				break;
			}
			pd_mesh_format(valid[i], one, sizeof(one));
			k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%s", shown ? "; " : "", one);
			shown++;
			if (k >= sizeof(list))
				break;
		}
	free(valid);
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
	if (degree[PD_AXIS_DISTRI] <= 0)
		degree[PD_AXIS_DISTRI] = 1;
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
	unsigned sp_mask = 0, model_mask;

	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (pd_axes[a].sequence)
			sp_mask |= 1u << a;
	/* every rank working on the same image and branch */
	model_mask = sp_mask | (1u << PD_AXIS_TP) | (1u << PD_AXIS_PP);
	memset(m, 0, sizeof(*m));
	m->world = world;
	memcpy(m->degree, degree, sizeof(m->degree));
	pd_mesh_coords(degree, r, m->coord);
	for (int a = 0; a < PD_AXIS_COUNT; a++) {
		if (world->ops->split(world, pd_mesh_color(m, 1u << a), m->coord[a], &m->axis[a]))
			goto fail;
		snprintf(m->axis[a]->name, sizeof(m->axis[a]->name), "%s", pd_axes[a].name);
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
	return (coord[PD_AXIS_DISTRI] * degree[PD_AXIS_RING] + coord[PD_AXIS_RING]) * degree[PD_AXIS_ULYSSES] +
	       coord[PD_AXIS_ULYSSES];
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
