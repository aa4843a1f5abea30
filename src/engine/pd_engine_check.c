/*
 * pd_engine_check.c - pdit check: the mesh against one process. The mesh
 * runs the request and records its first step's block outputs (each
 * process its tokens, its stage's blocks); rank 0 then runs the same
 * computation alone, the slices come to it and every block and the final
 * latents are compared. Or the final latents (and the noise) against a
 * file's.
 */
#include "pd_engine.h"
#include "pd_backend_new.h"
#include "pd_safetensors.h"
#include "pd_lora.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The block outputs (text and image streams) of the first step, as the dump
 * hands them over: for a process's own tokens in the parallel run, for all
 * tokens in the reference. */
struct pd_blocks {
	int n;                          /* blocks recorded */
	char **names;                   /* "double.0", "single.3", ... */
	float **txt, **img;             /* [rows, D] each */
	int64_t *txt_rows, *img_rows;
	int failed;
};

static void pd_blocks_dump(void *ctx, const char *name, int64_t index, const float *data, int ndim,
			   const int64_t *shape)
{
	struct pd_blocks *b = ctx;
	const char *tail = strstr(name, ".out.");
	int img, k = -1;
	int64_t rows = ndim == 3 ? shape[1] : 0, D = ndim == 3 ? shape[2] : 0;
	size_t base;

	(void)index;
	if (!tail || b->failed)
		return;
	img = strcmp(tail, ".out.hidden_states") == 0;
	if (!img && strcmp(tail, ".out.encoder_hidden_states") != 0)
		return;
	base = (size_t)(tail - name);
	for (int i = 0; i < b->n; i++)
		if (strlen(b->names[i]) == base && strncmp(b->names[i], name, base) == 0)
			k = i;
	if (k < 0) {
		char **nn = realloc(b->names, sizeof(char *) * (size_t)(b->n + 1));
		float **nt = realloc(b->txt, sizeof(float *) * (size_t)(b->n + 1));
		float **ni = realloc(b->img, sizeof(float *) * (size_t)(b->n + 1));
		int64_t *rt = realloc(b->txt_rows, sizeof(int64_t) * (size_t)(b->n + 1));
		int64_t *ri = realloc(b->img_rows, sizeof(int64_t) * (size_t)(b->n + 1));

		if (nn)
			b->names = nn;
		if (nt)
			b->txt = nt;
		if (ni)
			b->img = ni;
		if (rt)
			b->txt_rows = rt;
		if (ri)
			b->img_rows = ri;
		if (!nn || !nt || !ni || !rt || !ri) {
			b->failed = 1;
			return;
		}
		k = b->n++;
		b->names[k] = strndup(name, base);
		b->txt[k] = b->img[k] = NULL;
		b->txt_rows[k] = b->img_rows[k] = 0;
	}
	if (img) {
		b->img[k] = malloc((size_t)(rows * D) * sizeof(float) + 1);
		b->img_rows[k] = rows;
		if (b->img[k])
			memcpy(b->img[k], data, (size_t)(rows * D) * sizeof(float));
	} else {
		b->txt[k] = malloc((size_t)(rows * D) * sizeof(float) + 1);
		b->txt_rows[k] = rows;
		if (b->txt[k])
			memcpy(b->txt[k], data, (size_t)(rows * D) * sizeof(float));
	}
	if (!b->names[k] || (img && !b->img[k]) || (!img && !b->txt[k]))
		b->failed = 1;
}

static void pd_blocks_free(struct pd_blocks *b)
{
	for (int i = 0; i < b->n; i++) {
		free(b->names[i]);
		free(b->txt[i]);
		free(b->img[i]);
	}
	free(b->names);
	free(b->txt);
	free(b->img);
	free(b->txt_rows);
	free(b->img_rows);
	memset(b, 0, sizeof(*b));
}

/* True for the ranks whose first-step block outputs are compared: image 0,
 * the positive branch, tensor shard 0 (the hidden states are replicated),
 * every pipeline stage (each records its own blocks). */
static int pd_check_contributes(const int degree[PD_AXIS_COUNT], const int coord[PD_AXIS_COUNT])
{
	int cfg_branch = degree[PD_AXIS_CFG] > 1 ? 1 : 0;

	return coord[PD_AXIS_DP] == 0 && coord[PD_AXIS_CFG] == cfg_branch && coord[PD_AXIS_TP] == 0;
}

/* Gathers the contributing ranks' token slices of their stage's blocks onto
 * rank 0 into FULL (which has the reference's layout: all rows per block). */
static int pd_check_gather(struct pd_engine *r, const struct pd_blocks *mine, const struct pd_blocks *ref,
			   struct pd_blocks *full)
{
	struct pd_comm *w = r->world;
	int P = r->mesh.sp->size, D = r->info.dim, nb = ref ? ref->n : 0, first, count;
	/* a text context (Wan's) is no block output: image rows alone */
	int64_t T = r->info.txt_context ? 0 : pd_embeds_len(&r->e, 0), L = r->ls.tokens, total = 0;
	size_t *bytes = pd_calloc((size_t)w->size, sizeof(size_t), "counts"), send_bytes = 0;
	float *send = NULL, *recv = NULL;
	int32_t recorded = mine->n > 0;
	int rc = -1;

	if (!bytes)
		return -1;
	/* a pipeline run records nothing when its first step is patched */
	if (w->size > 1 && w->ops->allreduce(w, &recorded, 1, PD_COMM_I32, PD_COMM_MAX))
		goto out;
	for (int q = 0; q < w->size && recorded; q++) {
		int coord[PD_AXIS_COUNT], j;

		pd_mesh_coords(r->degree, q, coord);
		if (!pd_check_contributes(r->degree, coord))
			continue;
		pd_mesh_stage_blocks(&r->info, r->degree[PD_AXIS_PP], coord[PD_AXIS_PP], &first, &count);
		j = pd_mesh_seq_index(r->degree, coord);
		bytes[q] = (size_t)(count * (pd_chunk_len(T, P, j) + pd_chunk_len(L, P, j)) * D) * sizeof(float);
		total += (int64_t)bytes[q];
	}
	if (bytes[w->rank]) {
		int64_t off = 0;

		send_bytes = bytes[w->rank];
		send = pd_malloc(send_bytes + 1, "check");
		if (!send)
			goto out;
		memset(send, 0, send_bytes);
		for (int k = 0; k < mine->n && (size_t)off * sizeof(float) < send_bytes; k++) {
			/* a text context (Wan's) records no text rows: no buffer */
			if (mine->txt_rows[k])
				memcpy(send + off, mine->txt[k], (size_t)(mine->txt_rows[k] * D) * sizeof(float));
			off += mine->txt_rows[k] * D;
			if (mine->img_rows[k])
				memcpy(send + off, mine->img[k], (size_t)(mine->img_rows[k] * D) * sizeof(float));
			off += mine->img_rows[k] * D;
		}
	}
	if (w->rank == 0) {
		recv = pd_malloc((size_t)total + 1, "check");
		if (!recv)
			goto out;
	}
	if (w->ops->gatherv(w, send, send_bytes, recv, bytes, 0))
		goto out;
	/* nothing recorded (a patched first step): no blocks to lay out */
	if (w->rank == 0 && recorded) {
		/* lay the slices out by token: SP rank j's text rows start at its
		 * chunk start, likewise its image rows; stage s's blocks at its first */
		const float *p = recv;

		full->names = pd_calloc((size_t)nb + 1, sizeof(char *), "check");
		full->txt = pd_calloc((size_t)nb + 1, sizeof(float *), "check");
		full->img = pd_calloc((size_t)nb + 1, sizeof(float *), "check");
		full->txt_rows = pd_calloc((size_t)nb + 1, sizeof(int64_t), "check");
		full->img_rows = pd_calloc((size_t)nb + 1, sizeof(int64_t), "check");
		if (!full->names || !full->txt || !full->img || !full->txt_rows || !full->img_rows)
			goto out;
		/* the arrays exist: pd_blocks_free may walk them from here */
		full->n = nb;
		for (int k = 0; k < nb; k++) {
			full->names[k] = pd_strdup(ref->names[k]);
			full->txt[k] = pd_malloc((size_t)(T * D) * sizeof(float) + 1, "check");
			full->img[k] = pd_malloc((size_t)(L * D) * sizeof(float) + 1, "check");
			full->txt_rows[k] = T;
			full->img_rows[k] = L;
			if (!full->names[k] || !full->txt[k] || !full->img[k])
				goto out;
		}
		for (int q = 0; q < w->size; q++) {
			int coord[PD_AXIS_COUNT], j;

			if (!bytes[q])
				continue;
			pd_mesh_coords(r->degree, q, coord);
			pd_mesh_stage_blocks(&r->info, r->degree[PD_AXIS_PP], coord[PD_AXIS_PP], &first, &count);
			j = pd_mesh_seq_index(r->degree, coord);
			for (int k = first; k < first + count; k++) {
				int64_t tn = pd_chunk_len(T, P, j), in = pd_chunk_len(L, P, j);

				if (k < nb) {
					memcpy(full->txt[k] + pd_chunk_start(T, P, j) * D, p,
					       (size_t)(tn * D) * sizeof(float));
					memcpy(full->img[k] + pd_chunk_start(L, P, j) * D, p + tn * D,
					       (size_t)(in * D) * sizeof(float));
				}
				p += (tn + in) * D;
			}
		}
	}
	rc = 0;
out:
	free(bytes);
	free(send);
	free(recv);
	return rc;
}

static double pd_rel_diff(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);

		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		num = d > num ? d : num;
		den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
	}
	return den > 0 ? num / den : num;
}

/* The single-process reference on rank 0: the whole model, every image. */
static int pd_check_reference(struct pd_engine *r, float *latents, struct pd_blocks *blocks)
{
	struct pd_backend *be = NULL;
	struct pd_dit *m = NULL;
	struct pd_runner run;
	struct pd_dump dump = { pd_blocks_dump, blocks, 0 };
	/* on the backend the mesh runs on: the check is of the methods */
	struct pd_backend_config cfg = { r->dt, r->be->threads, r->o.device, 0, (int)r->be->qproducts };
	/* the whole model, its weights as the mesh holds them (--quantize's
	 * blocks too: a reference of other weights failed every check) */
	struct pd_dit_shard whole = { .rank = 0, .count = 1, .quantize = r->quantize };
	int rc = -1;

	if (pd_backend_new(&be, r->be->ops->name, &cfg) || r->fam->load(&m, r->mp.transformer, r->mp.config, be, &whole) ||
	    pd_lora_set(m, r->on, r->n_on, r->o.lora_lenient))
		goto out;
	run = pd_runner_local(m);
	pd_log(1, "pdit: running the single-process reference\n");
	rc = pd_denoise(&run, r->fam, &r->info, &r->sched, &r->e, &r->p, r->init, latents, NULL, &dump);
	if (!rc && blocks->failed)
		rc = pd_errorf("out of memory recording the reference");
out:
	pd_dit_free(m);
	pd_backend_free(be);
	return rc;
}

/* A row of REP: NAME's difference D, which passes within the tolerance. */
static int pd_check_add(struct pd_check_report *rep, const char *name, double d)
{
	struct pd_check_row *r = realloc(rep->rows, sizeof(*r) * (size_t)(rep->n_rows + 1));

	if (!r)
		return pd_errorf("out of memory for the check's report");
	rep->rows = r;
	r += rep->n_rows++;
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->diff = d;
	if (!(d <= rep->tolerance))
		rep->pass = 0;
	return 0;
}

/* --golden: the final latents (and the noise) against a file. */
static int pd_check_golden(struct pd_engine *r, const char *path, const float *all, struct pd_check_report *rep)
{
	int64_t n = r->e.batch * r->ls.tokens * r->ls.packed_channels;
	const char *names[2] = { "latents.init", "latents.final" };
	float *ref = pd_malloc((size_t)n * sizeof(float), "reference"), *init = NULL;
	struct pd_st *st = NULL;
	int rc = -1;

	if (!ref || pd_st_open(&st, path))
		goto out;
	for (int k = 0; k < 2; k++) {
		const struct pd_st_tensor *t = pd_st_get(st, names[k]);
		const float *got = all;

		if (!t) {
			if (k == 1) {
				pd_errorf("%s: no latents.final to compare with", path);
				goto out;
			}
			continue;
		}
		if (t->numel != n) {
			pd_errorf("%s: %s has %lld values, the run makes %lld", path, names[k], (long long)t->numel,
				  (long long)n);
			goto out;
		}
		if (pd_st_read_f32(t, 0, (size_t)n, ref))
			goto out;
		if (t->ndim >= 4) {
			/* a video pipeline's latents, unpacked: packed as pdit holds them */
			int64_t per = r->ls.tokens * r->ls.packed_channels;
			float *u = pd_malloc((size_t)n * sizeof(float), "reference");

			if (!u)
				goto out;
			memcpy(u, ref, (size_t)n * sizeof(float));
			for (int64_t b = 0; b < r->e.batch; b++)
				r->fam->pack(&r->ls, u + b * per, ref + b * per);
			free(u);
		}
		if (k == 0) {
			init = pd_engine_initial(r);
			if (!init)
				goto out;
			got = init;
		}
		if (pd_check_add(rep, k ? "final latents" : "initial noise", pd_rel_diff(got, ref, (size_t)n)))
			goto out;
	}
	rc = 0;
out:
	free(ref);
	free(init);
	pd_st_close(st);
	return rc;
}

/* Against the single-process reference: rank 0 runs it, the mesh's slices
 * of the first step's blocks (MINE) come to it, and every row is compared. */
static int pd_check_one_process(struct pd_engine *e, struct pd_blocks *mine, const float *all,
				struct pd_check_report *rep)
{
	struct pd_comm *world = e->world;
	struct pd_blocks ref = { 0 }, full = { 0 };
	int64_t n = e->e.batch * e->ls.tokens * e->ls.packed_channels;
	float *ref_lat = pd_malloc((size_t)n * sizeof(float), "latents");
	int hr, rc = -1;

	hr = !ref_lat || mine->failed || (world->rank == 0 && pd_check_reference(e, ref_lat, &ref));
	/* the others wait for rank 0's reference */
	if (pd_engine_agree_waiting(e, hr))
		goto out;
	hr = pd_check_gather(e, mine, world->rank == 0 ? &ref : NULL, &full);
	if (!hr && world->rank == 0) {
		rep->patched = full.n == 0;
		for (int k = 0; k < full.n && !hr; k++) {
			double dt = pd_rel_diff(full.txt[k], ref.txt[k], (size_t)(ref.txt_rows[k] * e->info.dim));
			double di = pd_rel_diff(full.img[k], ref.img[k], (size_t)(ref.img_rows[k] * e->info.dim));

			/* a NaN difference (inf / inf) on either side stays NaN and fails */
			hr = pd_check_add(rep, ref.names[k], ref.txt_rows[k] == 0 ? di : isnan(dt) || dt > di ? dt : di);
		}
		hr = hr || pd_check_add(rep, "final latents", pd_rel_diff(all, ref_lat, (size_t)n));
		if (ref.n == 0)
			rep->pass = 0;	/* nothing was compared: not a pass */
	}
	rc = pd_engine_agree(e, hr);
out:
	pd_blocks_free(&ref);
	pd_blocks_free(&full);
	free(ref_lat);
	return rc;
}

static int pd_engine_check_scoped(struct pd_engine *e, const struct pd_request *rq, const char *golden,
				  struct pd_check_report *rep)
{
	struct pd_comm *world = e->world;
	struct pd_blocks mine = { 0 };
	struct pd_dump dump = { pd_blocks_dump, &mine, 0 };
	float *all = NULL;
	int32_t pass;
	int rc = -1;

	if (e->dead)
		return pd_errorf("the engine stopped after a failure of rank %d; close it", e->world->failed_rank);
	if (!e->m)
		return pd_errorf("this engine has no transformer left to check (a check or a decode freed it)");
	if (pd_engine_ready(e, rq))
		return -1;
	all = pd_malloc((size_t)(e->e.batch * e->ls.tokens * e->ls.packed_channels) * sizeof(float), "latents");
	if (pd_engine_agree(e, !all))
		goto out;
	pd_engine_notes(e, rq);
	if (pd_engine_denoise(e, all, golden ? NULL : &dump))
		goto out;
	e->requests++;
	/* the reference needs the memory */
	pd_engine_free_transformer(e);
	pd_mesh_format(e->degree, rep->mesh, sizeof(rep->mesh));
	if (golden) {
		rc = world->rank == 0 ? pd_check_golden(e, golden, all, rep) : 0;
		rc = pd_engine_agree(e, rc);
	} else {
		rc = pd_check_one_process(e, &mine, all, rep);
		if (pd_mesh_stale(e->degree, e->opt.patches) && e->opt.warmup_steps < e->p.steps) {
			rep->stale = e->degree[PD_AXIS_DISTRI] > 1 ? "DistriFusion" : "PipeFusion";
			rep->warmup_steps = e->opt.warmup_steps;
			rep->steps = e->p.steps;
		}
	}
	if (rc)
		goto out;
	/* rank 0's verdict is every rank's */
	pass = rep->pass;
	if (world->size > 1 && world->ops->bcast(world, &pass, sizeof(pass), 0)) {
		e->dead = 1;
		rc = -1;
		goto out;
	}
	rep->pass = pass;
out:
	pd_blocks_free(&mine);
	free(all);
	return rc;
}

int pd_engine_check(struct pd_engine *e, const struct pd_request *rq, const char *golden, double tolerance,
		    struct pd_check_report *rep)
{
	struct pd_engine_scope scope;
	int rc;

	memset(rep, 0, sizeof(*rep));
	rep->pass = 1;
	rep->tolerance = tolerance >= 0 ? tolerance : e->dt == PD_BF16 ? 2e-2 : 1e-5;
	/* the reference runs below compute as the engine does */
	pd_engine_enter(e, &scope);
	rc = pd_engine_check_scoped(e, rq, golden, rep);
	pd_engine_leave(&scope);
	if (rc)
		pd_check_report_free(rep);
	return rc;
}

void pd_check_report_free(struct pd_check_report *rep)
{
	free(rep->rows);
	memset(rep, 0, sizeof(*rep));
}
