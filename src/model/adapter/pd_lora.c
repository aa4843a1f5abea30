/*
 * pd_lora.c - LoRA adapter files matched to a model's layers and put beside
 * them (pd_lora.h says the layouts and the arithmetic).
 */
#include "pd_lora.h"
#include "pd_safetensors.h"
#include "pd_strmap.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { PD_LK_DOWN, PD_LK_UP, PD_LK_ALPHA };

/* What a module name means: one layer; the fused native tensor a layer is
 * part of (the layers sharing its native name, up's rows as the tensor's);
 * or a run of layers another layout names together (pd_dit_linear.alias:
 * up's rows the run's stacked). Kept with the layer in one int32. */
enum pd_lora_to { PD_LT_LAYER, PD_LT_GROUP, PD_LT_RUN };
#define PD_LORA_TO(layer, to) ((int32_t)(4 * (layer) + (to)))

/* The key endings of a low-rank pair, in every layout. */
static const struct {
	const char *suffix;
	int kind;
} pd_lora_suffixes[] = {
	{ ".lora_A.weight", PD_LK_DOWN },  { ".lora_B.weight", PD_LK_UP }, { ".lora_down.weight", PD_LK_DOWN },
	{ ".lora_up.weight", PD_LK_UP },   { ".alpha", PD_LK_ALPHA },
	/* XLabs' */
	{ ".down.weight", PD_LK_DOWN },    { ".up.weight", PD_LK_UP },
};

/* Prefixes the files put before a module's name: ComfyUI's BFL names,
 * diffusers' and PEFT's. */
static const char *const pd_lora_prefixes[] = { "model.diffusion_model.", "diffusion_model.", "transformer.",
						"base_model.model.", "unet." };

/* kohya's names: the module's with '.' as '_' after one of these. */
#define PD_KOHYA_NATIVE "lora_unet_"
#define PD_KOHYA_OURS "lora_transformer_"
/* LyCORIS' plain low-rank files (algo lora): kohya's names of diffusers'
 * modules under its own prefix */
#define PD_LYCORIS "lycoris_"

/* One layer's term as built (host), for the cache. */
struct pd_lora_term {
	int64_t rank;                   /* the summed ranks; 0: no term on this layer */
	float *a, *b;                   /* A [rank, the shard's columns], B [the shard's rows, rank] */
	size_t n_a, n_b;                /* their floats */
};

static int pd_lora_apply_keep(struct pd_lora *lo, struct pd_backend *be, struct pd_linear *l, const char *name,
			      const struct pd_slice *s, struct pd_lora_term *keep);

/* The module part of KEY (*LEN bytes) and what the key holds; -1 when KEY
 * is no part of a low-rank pair. */
static int pd_lora_split(const char *key, size_t *len)
{
	size_t n = strlen(key);

	for (size_t i = 0; i < sizeof(pd_lora_suffixes) / sizeof(pd_lora_suffixes[0]); i++) {
		size_t k = strlen(pd_lora_suffixes[i].suffix);

		if (n > k && !strcmp(key + n - k, pd_lora_suffixes[i].suffix)) {
			*len = n - k;
			return pd_lora_suffixes[i].kind;
		}
	}
	return -1;
}

/* One adapter's term on one layer. */
struct pd_lora_part {
	int file;                       /* which file */
	const struct pd_st_tensor *a;   /* down [rank, n_in] */
	const struct pd_st_tensor *b;   /* up: [n_out, rank], or the fused native tensor's [native_rows, rank] */
	int64_t b_r0;                   /* the layer's first row in b */
	int64_t roll;                   /* the layer's row r is b's row b_r0 + (r + roll) mod n_out */
	int64_t rank;                   /* a's rows */
	float scale;                    /* multiplier * alpha / rank */
	int next;                       /* the layer's next part, or -1 */
};

struct pd_lora {
	int n_files;
	struct pd_st **files;           /* the adapter files, mapped */
	struct pd_dit_linear *layers;   /* the model's layers (a copy) */
	int n_layers;
	struct pd_strmap names;         /* a module name -> where its pair goes (enum pd_lora_to): "d:"
					 * ours and "k:" kohya's -> a layer, "n:" native and "k:" kohya's
					 * -> its fused group, "x:" XLabs' -> a run of layers */
	struct pd_lora_part *parts;
	int n_parts, cap_parts;
	int *head, *tail;               /* per layer: its first and last part, or -1 */
	int touched;                    /* layers with a part */
	int applied;                    /* terms put beside layers */
};

static int pd_lora_put(struct pd_strmap *m, const char *tag, const char *name, int32_t v)
{
	char key[256];
	int n = snprintf(key, sizeof(key), "%s%s", tag, name);
	int32_t old;

	if (n < 0 || (size_t)n >= sizeof(key))
		return pd_errorf("layer name '%s' too long", name);
	/* a fused native tensor is its first layer's */
	if (pd_strmap_get(m, key, (size_t)n, &old))
		return 0;
	return pd_strmap_put(m, key, (size_t)n, v);
}

static int pd_lora_get(const struct pd_strmap *m, const char *tag, const char *name, size_t len, int32_t *v)
{
	char key[256];
	int n = snprintf(key, sizeof(key), "%s%.*s", tag, (int)len, name);

	return n > 0 && (size_t)n < sizeof(key) && pd_strmap_get(m, key, (size_t)n, v);
}

static void pd_lora_underscored(char *dst, size_t cap, const char *pre, const char *name)
{
	snprintf(dst, cap, "%s%s", pre, name);
	for (char *p = dst + strlen(pre); *p; p++)
		if (*p == '.')
			*p = '_';
}

static int pd_lora_index(struct pd_lora *lo)
{
	char k[256];

	if (pd_strmap_init(&lo->names, (size_t)lo->n_layers * 5))
		return pd_errorf("out of memory for the adapters' names");
	for (int i = 0; i < lo->n_layers; i++) {
		const struct pd_dit_linear *l = &lo->layers[i];

		pd_lora_underscored(k, sizeof(k), PD_KOHYA_OURS, l->name);
		if (pd_lora_put(&lo->names, "d:", l->name, PD_LORA_TO(i, PD_LT_LAYER)) ||
		    pd_lora_put(&lo->names, "k:", k, PD_LORA_TO(i, PD_LT_LAYER)) ||
		    pd_lora_put(&lo->names, "n:", l->native, PD_LORA_TO(i, PD_LT_GROUP)))
			return -1;
		pd_lora_underscored(k, sizeof(k), PD_KOHYA_NATIVE, l->native);
		if (pd_lora_put(&lo->names, "k:", k, PD_LORA_TO(i, PD_LT_GROUP)) ||
		    (l->alias[0] && pd_lora_put(&lo->names, "x:", l->alias, PD_LORA_TO(i, PD_LT_RUN))))
			return -1;
	}
	return 0;
}

/* Where a module name M (LEN bytes) puts its pair (PD_LORA_TO), or -1. */
static int32_t pd_lora_target(const struct pd_lora *lo, const char *m, size_t len)
{
	int32_t v;

	if (pd_lora_get(&lo->names, "k:", m, len, &v))
		return v;
	if (len > strlen(PD_LYCORIS) && !strncmp(m, PD_LYCORIS, strlen(PD_LYCORIS))) {
		char k[320];
		int n = snprintf(k, sizeof(k), "%s%.*s", PD_KOHYA_OURS, (int)(len - strlen(PD_LYCORIS)),
				 m + strlen(PD_LYCORIS));

		if (n > 0 && (size_t)n < sizeof(k) && pd_lora_get(&lo->names, "k:", k, (size_t)n, &v))
			return v;
	}
	for (int p = -1; p < (int)(sizeof(pd_lora_prefixes) / sizeof(pd_lora_prefixes[0])); p++) {
		size_t pl = p < 0 ? 0 : strlen(pd_lora_prefixes[p]);

		if (p >= 0 && (len <= pl || strncmp(m, pd_lora_prefixes[p], pl)))
			continue;
		if (pd_lora_get(&lo->names, "d:", m + pl, len - pl, &v) || pd_lora_get(&lo->names, "n:", m + pl, len - pl, &v) ||
		    pd_lora_get(&lo->names, "x:", m + pl, len - pl, &v))
			return v;
	}
	return -1;
}

static int pd_lora_add_part(struct pd_lora *lo, int layer, const struct pd_lora_part *p)
{
	if (lo->n_parts == lo->cap_parts) {
		int cap = lo->cap_parts ? 2 * lo->cap_parts : 64;
		struct pd_lora_part *q = realloc(lo->parts, (size_t)cap * sizeof(*q));

		if (!q)
			return pd_errorf("out of memory for the adapters");
		lo->parts = q;
		lo->cap_parts = cap;
	}
	lo->parts[lo->n_parts] = *p;
	lo->parts[lo->n_parts].next = -1;
	if (lo->tail[layer] < 0) {
		lo->head[layer] = lo->n_parts;
		lo->touched++;
	} else {
		lo->parts[lo->tail[layer]].next = lo->n_parts;
	}
	lo->tail[layer] = lo->n_parts++;
	return 0;
}

/* A module of one file: its pair and alpha. */
struct pd_lora_mod {
	const char *name;               /* the key's module part (not terminated: len) */
	size_t len;
	const struct pd_st_tensor *t[3]; /* down, up, alpha */
};

/* The pair of module MOD as parts of the layers V (PD_LORA_TO) means. */
static int pd_lora_module(struct pd_lora *lo, int file, float mult, const struct pd_lora_mod *mod, int32_t v)
{
	const char *path = lo->files[file]->path;
	const struct pd_st_tensor *a = mod->t[PD_LK_DOWN], *b = mod->t[PD_LK_UP], *al = mod->t[PD_LK_ALPHA];
	int first = v / 4, to = v % 4, group = to == PD_LT_GROUP, count = to == PD_LT_RUN ? lo->layers[first].alias_count : 1;
	const struct pd_dit_linear *l = &lo->layers[first];
	int64_t rank, rows = group ? l->native_rows : 0, r0 = 0;
	float alpha;

	for (int i = 0; !group && i < count && first + i < lo->n_layers; i++)
		rows += lo->layers[first + i].n_out;

	if (!a && !b)
		return pd_errorf("%s: '%.*s' has an alpha but no down (A) or up (B) matrix", path, (int)mod->len, mod->name);
	if (!a || !b)
		return pd_errorf("%s: '%.*s' has %s but no %s", path, (int)mod->len, mod->name, a ? "a down (A) matrix" : "an up (B) matrix",
				 a ? "up (B) matrix" : "down (A) matrix");
	rank = a->ndim == 2 ? a->shape[0] : 0;
	if (a->ndim != 2 || b->ndim != 2 || rank < 1 || b->shape[1] != rank || a->shape[1] != l->n_in ||
	    b->shape[0] != rows)
		return pd_errorf("%s: '%.*s' is [%lld, %lld] x [%lld, %lld]; the model's %s%s needs [%lld, r] x [r, %lld]",
				 path, (int)mod->len, mod->name, b->ndim > 0 ? (long long)b->shape[0] : 0LL,
				 b->ndim > 1 ? (long long)b->shape[1] : 0LL, a->ndim > 0 ? (long long)a->shape[0] : 0LL,
				 a->ndim > 1 ? (long long)a->shape[1] : 0LL, group ? l->native : l->name,
				 group ? " (fused)" : count > 1 ? " and the layers after it" : "", (long long)rows,
				 (long long)l->n_in);
	alpha = (float)rank;
	if (al) {
		if (al->numel != 1 || pd_st_read_f32(al, 0, 1, &alpha))
			return pd_errorf("%s: '%s' is not one number", path, al->name);
		if (!isfinite(alpha))
			return pd_errorf("%s: '%s' is not a finite number", path, al->name);
	}
	for (int i = first; i < lo->n_layers; i++) {
		const struct pd_dit_linear *li = &lo->layers[i];
		/* the model's own names are in its own row order: only a native
		 * tensor's rows are fused or rolled; a run's are its layers' in turn */
		struct pd_lora_part p = { file, a, b, group ? li->r0 : r0, group ? li->roll : 0, rank, mult * alpha / (float)rank,
					  -1 };

		if (group ? i > first && strcmp(li->native, l->native) : i >= first + count)
			break;
		if (pd_lora_add_part(lo, i, &p))
			return -1;
		r0 += li->n_out;
	}
	return 0;
}

static int pd_lora_mod_cmp(const void *x, const void *y)
{
	const struct pd_lora_mod *a = x, *b = y;
	int c = strncmp(a->name, b->name, a->len < b->len ? a->len : b->len);

	return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* The keys of file F grouped by module (sorted: a module's keys are
 * adjacent once sorted by module name). */
static int pd_lora_modules(const struct pd_st *st, struct pd_lora_mod **out, int *n, int lenient, int *skipped)
{
	struct pd_lora_mod *m = pd_calloc((size_t)st->n_tensors + 1, sizeof(*m), "an adapter's keys");
	int k = 0, w = 0;

	*out = NULL;
	*n = 0;
	if (!m)
		return -1;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];
		size_t len;
		int kind = pd_lora_split(t->name, &len);

		if (kind < 0) {
			if (!lenient) {
				free(m);
				return pd_errorf("%s: '%s' is not part of a low-rank pair (lora_A/lora_B, lora_down/lora_up, "
						 "alpha); --lora-lenient skips such keys",
						 st->path, t->name);
			}
			pd_log(2, "%s: skipped '%s' (not part of a low-rank pair)\n", st->path, t->name);
			(*skipped)++;
			continue;
		}
		m[k].name = t->name;
		m[k].len = len;
		m[k].t[kind] = t;
		k++;
	}
	qsort(m, (size_t)k, sizeof(*m), pd_lora_mod_cmp);
	for (int i = 0; i < k; i++) {
		if (w > 0 && !pd_lora_mod_cmp(&m[w - 1], &m[i])) {
			for (int j = 0; j < 3; j++) {
				/* lora_A and lora_down of one module: which is meant? */
				if (m[i].t[j] && m[w - 1].t[j]) {
					pd_errorf("%s: '%s' and '%s' are the same part of one module; keep one", st->path,
						  m[w - 1].t[j]->name, m[i].t[j]->name);
					free(m);
					return -1;
				}
				if (m[i].t[j])
					m[w - 1].t[j] = m[i].t[j];
			}
			continue;
		}
		m[w++] = m[i];
	}
	*out = m;
	*n = w;
	return 0;
}

int pd_lora_resolve(struct pd_lora **out, const struct pd_lora_spec *specs, int n, const struct pd_dit_linear *layers,
		    int n_layers, int lenient)
{
	struct pd_lora *lo = pd_calloc(1, sizeof(*lo), "adapters");
	struct pd_lora_mod *mods = NULL;
	int n_mods = 0;

	*out = NULL;
	if (!lo)
		return -1;
	lo->files = pd_calloc((size_t)n + 1, sizeof(*lo->files), "adapters");
	lo->layers = pd_calloc((size_t)n_layers + 1, sizeof(*lo->layers), "adapters");
	lo->head = pd_calloc((size_t)n_layers + 1, sizeof(int), "adapters");
	lo->tail = pd_calloc((size_t)n_layers + 1, sizeof(int), "adapters");
	if (!lo->files || !lo->layers || !lo->head || !lo->tail)
		goto fail;
	memcpy(lo->layers, layers, (size_t)n_layers * sizeof(*layers));
	lo->n_layers = n_layers;
	for (int i = 0; i < n_layers; i++)
		lo->head[i] = lo->tail[i] = -1;
	if (pd_lora_index(lo))
		goto fail;
	for (int f = 0; f < n; f++) {
		int skipped = 0, used = 0;

		if (!isfinite(specs[f].scale)) {
			pd_errorf("--lora %s: the scale is not a finite number", specs[f].path);
			goto fail;
		}
		if (pd_st_open(&lo->files[f], specs[f].path))
			goto fail;
		lo->n_files++;
		if (pd_lora_modules(lo->files[f], &mods, &n_mods, lenient, &skipped))
			goto fail;
		for (int i = 0; i < n_mods; i++) {
			int32_t v = pd_lora_target(lo, mods[i].name, mods[i].len);

			if (v < 0) {
				if (!lenient) {
					pd_errorf("%s: '%.*s' is no layer of this model (layouts read: diffusers/PEFT, kohya, "
						  "Black Forest Labs' names, XLabs'); --lora-lenient skips such keys",
						  specs[f].path, (int)mods[i].len, mods[i].name);
					goto fail;
				}
				pd_log(2, "%s: skipped '%.*s' (no layer of this model)\n", specs[f].path, (int)mods[i].len,
				       mods[i].name);
				skipped++;
				continue;
			}
			if (pd_lora_module(lo, f, specs[f].scale, &mods[i], v))
				goto fail;
			used++;
		}
		free(mods);
		mods = NULL;
		if (!used) {
			pd_errorf("%s: no layer of this model is adapted (%d keys skipped)", specs[f].path, skipped);
			goto fail;
		}
		if (skipped)
			pd_log(1, "%s: %d keys of no layer skipped (-v lists them)\n", specs[f].path, skipped);
	}
	*out = lo;
	return 0;
fail:
	free(mods);
	pd_lora_free(lo);
	return -1;
}

/* A read part of an adapter, checked for NaN and infinity. */
static int pd_lora_finite(const struct pd_lora *lo, const struct pd_lora_part *p, const struct pd_st_tensor *t,
			  const float *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(v[i]))
			return pd_errorf("%s: '%s' holds NaN or infinity", lo->files[p->file]->path, t->name);
	return 0;
}

int pd_lora_apply(struct pd_lora *lo, struct pd_backend *be, struct pd_linear *l, const char *name,
		  const struct pd_slice *s)
{
	return pd_lora_apply_keep(lo, be, l, name, s, NULL);
}

/* As pd_lora_apply; with KEEP, the term's host arrays are handed to it
 * (rank 0 and no arrays when no adapter touches the layer). */
static int pd_lora_apply_keep(struct pd_lora *lo, struct pd_backend *be, struct pd_linear *l, const char *name,
			      const struct pd_slice *s, struct pd_lora_term *keep)
{
	int32_t v;
	int64_t R = 0, off = 0, n_out;
	float *a = NULL, *b = NULL, *row = NULL;
	int rc = -1;

	if (!lo || !pd_lora_get(&lo->names, "d:", name, strlen(name), &v) || v % 4 != PD_LT_LAYER || lo->head[v / 4] < 0)
		return 0;
	n_out = lo->layers[v / 4].n_out;
	for (int i = lo->head[v / 4]; i >= 0; i = lo->parts[i].next)
		R += lo->parts[i].rank;
	if (!be->ops->linear_adapt)
		return pd_errorf("the %s backend cannot put adapters beside its layers", be->ops->name);
	a = pd_malloc((size_t)(R * s->nc) * sizeof(float), "an adapter");
	b = pd_malloc((size_t)(R * s->nr) * sizeof(float), "an adapter");
	row = pd_malloc((size_t)R * sizeof(float), "an adapter");
	if (!a || !b || !row)
		goto out;
	for (int i = lo->head[v / 4]; i >= 0; i = lo->parts[i].next) {
		const struct pd_lora_part *p = &lo->parts[i];

		/* A's columns of the shard's input, B's rows of its output */
		if (pd_st_read_block_f32(p->a, 0, p->rank, s->c0, s->nc, a + off * s->nc, s->nc) ||
		    pd_lora_finite(lo, p, p->a, a + off * s->nc, (size_t)(p->rank * s->nc)))
			goto out;
		for (int64_t r = 0; r < s->nr; r++) {
			int64_t src = p->b_r0 + (s->r0 + r + p->roll) % n_out;

			if (pd_st_read_block_f32(p->b, src, 1, 0, p->rank, row, p->rank) ||
			    pd_lora_finite(lo, p, p->b, row, (size_t)p->rank))
				goto out;
			for (int64_t k = 0; k < p->rank; k++) {
				b[r * R + off + k] = p->scale * row[k];
				if (!isfinite(b[r * R + off + k])) {
					pd_errorf("%s: '%s' times its scale %g is past float's range",
						  lo->files[p->file]->path, p->b->name, p->scale);
					goto out;
				}
			}
		}
		off += p->rank;
	}
	if (be->ops->linear_adapt(be, l, R, a, b)) {
		pd_errorf("adapters on %s: %s", name, be->error);
		goto out;
	}
	lo->applied++;
	if (keep) {
		keep->rank = R;
		keep->a = a;
		keep->b = b;
		keep->n_a = (size_t)(R * s->nc);
		keep->n_b = (size_t)(R * s->nr);
		a = b = NULL;
	}
	rc = 0;
out:
	free(a);
	free(b);
	free(row);
	return rc;
}

/* Takes every term off D's layers (rank 0). */
static void pd_lora_clear(struct pd_dit *d)
{
	for (int i = 0; i < d->n_held; i++)
		if (d->held[i].adapted) {
			d->be->ops->linear_adapt(d->be, d->held[i].l, 0, NULL, NULL);
			d->held[i].adapted = 0;
		}
}

/* pd_lora_set, and with KEPT (an array of d->n_held) the terms' host
 * arrays handed to it, layer by layer. */
static int pd_lora_build(struct pd_dit *d, const struct pd_lora_spec *specs, int n, int lenient,
			 struct pd_lora_term *kept)
{
	struct pd_lora *lo = NULL;
	int rc = 0;

	/* every file is read and checked before a layer changes; a failure
	 * leaves no adapter on, as a success with none would */
	if (n > 0 && !d->layers)
		rc = pd_errorf("this model's family lists no layers for adapters");
	else if (n > 0 && !d->be->ops->linear_adapt)
		rc = pd_errorf("the %s backend cannot put adapters beside its layers", d->be->ops->name);
	else if (n > 0)
		rc = pd_lora_resolve(&lo, specs, n, d->layers, d->n_layers, lenient);
	if (d->be->ops->linear_adapt)
		pd_lora_clear(d);
	if (rc)
		return -1;
	for (int i = 0; i < d->n_held && lo && !rc; i++) {
		int before = lo->applied;

		rc = pd_lora_apply_keep(lo, d->be, d->held[i].l, d->held[i].name, &d->held[i].s, kept ? &kept[i] : NULL);
		d->held[i].adapted = lo->applied > before;
	}
	if (rc)
		pd_lora_clear(d);
	else if (lo)
		pd_log(2, "pdit: adapters on %d of the model's layers (%d terms here)\n", lo->touched, lo->applied);
	pd_lora_free(lo);
	return rc;
}

int pd_lora_set(struct pd_dit *d, const struct pd_lora_spec *specs, int n, int lenient)
{
	return pd_lora_build(d, specs, n, lenient, NULL);
}

/* ----------------------------------------------------------------------- */
/* The cache of built terms                                                */
/* ----------------------------------------------------------------------- */

/* One adapter set's terms, as pd_lora_build made them. */
struct pd_lora_entry {
	char *key;                      /* the set (pd_lora_key) */
	struct pd_lora_term *terms;     /* [n_held]: layer i of the model's held list; rank 0: none */
	int n_held;                     /* the model's held layers when it was built */
	size_t bytes;                   /* the arrays' */
	uint64_t used;                  /* the cache's clock when last put on */
};

struct pd_lora_cache {
	size_t max_bytes;               /* the limit: the entries' bytes stay within it */
	size_t bytes;                   /* the entries' bytes now */
	struct pd_lora_entry *e;        /* the entries */
	int n, cap;
	uint64_t clock;                 /* counts the sets put on */
};

int pd_lora_cache_new(struct pd_lora_cache **out, size_t max_bytes)
{
	*out = pd_calloc(1, sizeof(**out), "the adapters' cache");
	if (!*out)
		return -1;
	(*out)->max_bytes = max_bytes;
	return 0;
}

static void pd_lora_terms_free(struct pd_lora_term *t, int n)
{
	for (int i = 0; t && i < n; i++) {
		free(t[i].a);
		free(t[i].b);
	}
	free(t);
}

static void pd_lora_entry_drop(struct pd_lora_cache *c, int i)
{
	c->bytes -= c->e[i].bytes;
	free(c->e[i].key);
	pd_lora_terms_free(c->e[i].terms, c->e[i].n_held);
	c->e[i] = c->e[--c->n];
}

void pd_lora_cache_free(struct pd_lora_cache *c)
{
	while (c && c->n > 0)
		pd_lora_entry_drop(c, c->n - 1);
	if (c)
		free(c->e);
	free(c);
}

/* The set SPECS[0..n) with LENIENT as a key: each file's path, size and
 * modification time (a file changed on disk is another set) and its scale
 * exactly; NULL when a file cannot be looked at (building it says why). */
static char *pd_lora_key(const struct pd_lora_spec *specs, int n, int lenient)
{
	size_t cap = 64, k;
	char *key;

	for (int i = 0; i < n; i++)
		cap += strlen(specs[i].path) + 96;
	key = pd_malloc(cap, "an adapter set's key");
	if (!key)
		return NULL;
	k = (size_t)snprintf(key, cap, "%d", lenient);
	for (int i = 0; i < n; i++) {
		struct stat sb;

		if (stat(specs[i].path, &sb)) {
			free(key);
			return NULL;
		}
		k += (size_t)snprintf(key + k, cap - k, "\n%s\n%lld %lld.%09ld %a", specs[i].path, (long long)sb.st_size,
				      (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec, (double)specs[i].scale);
	}
	return key;
}

int pd_lora_set_cached(struct pd_dit *d, struct pd_lora_cache *c, const struct pd_lora_spec *specs, int n, int lenient,
		       int *hit)
{
	struct pd_lora_term *kept;
	struct pd_lora_entry *en;
	char *key;
	size_t bytes = 0;

	*hit = 0;
	if (!c || n == 0 || !c->max_bytes || !d->be->ops->linear_adapt || !(key = pd_lora_key(specs, n, lenient)))
		return pd_lora_set(d, specs, n, lenient);
	for (int i = 0; i < c->n; i++) {
		if (strcmp(c->e[i].key, key) || c->e[i].n_held != d->n_held)
			continue;
		free(key);
		en = &c->e[i];
		pd_lora_clear(d);
		for (int j = 0; j < d->n_held; j++) {
			const struct pd_lora_term *t = &en->terms[j];

			if (!t->rank)
				continue;
			if (d->be->ops->linear_adapt(d->be, d->held[j].l, t->rank, t->a, t->b)) {
				pd_errorf("adapters on %s: %s", d->held[j].name, d->be->error);
				pd_lora_clear(d);
				return -1;
			}
			d->held[j].adapted = 1;
		}
		en->used = ++c->clock;
		*hit = 1;
		return 0;
	}
	kept = pd_calloc((size_t)d->n_held + 1, sizeof(*kept), "the adapters' cache");
	if (!kept) {
		free(key);
		return -1;
	}
	if (pd_lora_build(d, specs, n, lenient, kept)) {
		pd_lora_terms_free(kept, d->n_held);
		free(key);
		return -1;
	}
	for (int j = 0; j < d->n_held; j++)
		bytes += (kept[j].n_a + kept[j].n_b) * sizeof(float);
	/* the least recently used make room; a set larger than the whole
	 * cache is not kept */
	while (bytes <= c->max_bytes && c->n > 0 && c->bytes + bytes > c->max_bytes) {
		int old = 0;

		for (int i = 1; i < c->n; i++)
			old = c->e[i].used < c->e[old].used ? i : old;
		pd_lora_entry_drop(c, old);
	}
	if (bytes <= c->max_bytes && c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 4;
		struct pd_lora_entry *e = realloc(c->e, (size_t)cap * sizeof(*e));

		if (e) {
			c->e = e;
			c->cap = cap;
		}
	}
	/* not kept (too large, or no room for its entry): on, all the same */
	if (bytes > c->max_bytes || c->n == c->cap) {
		pd_lora_terms_free(kept, d->n_held);
		free(key);
		return 0;
	}
	c->e[c->n++] = (struct pd_lora_entry){ key, kept, d->n_held, bytes, ++c->clock };
	c->bytes += bytes;
	return 0;
}

size_t pd_lora_cache_bytes(const struct pd_lora_cache *c)
{
	return c ? c->bytes : 0;
}

void pd_lora_free(struct pd_lora *lo)
{
	if (!lo)
		return;
	for (int i = 0; i < lo->n_files; i++)
		pd_st_close(lo->files[i]);
	free(lo->files);
	free(lo->layers);
	free(lo->parts);
	free(lo->head);
	free(lo->tail);
	pd_strmap_free(&lo->names);
	free(lo);
}

/* The layout a module name M is in, by its look. */
static const char *pd_lora_layout(const char *m, size_t len)
{
	if (len > strlen(PD_KOHYA_NATIVE) && !strncmp(m, PD_KOHYA_NATIVE, strlen(PD_KOHYA_NATIVE)))
		return "kohya";
	if (len > strlen(PD_KOHYA_OURS) && !strncmp(m, PD_KOHYA_OURS, strlen(PD_KOHYA_OURS)))
		return "kohya (diffusers names)";
	if (len > strlen(PD_LYCORIS) && !strncmp(m, PD_LYCORIS, strlen(PD_LYCORIS)))
		return "LyCORIS (plain low-rank)";
	if (len > 15 && !strncmp(m, "diffusion_model.", 16))
		return "native (ComfyUI)";
	if (len > 12 && !strncmp(m, "transformer.", 12))
		return "diffusers/PEFT";
	if (len > 17 && !strncmp(m, "base_model.model.", 17))
		return "native (fal's Kontext trainer)";
	for (size_t i = 0; i + 11 <= len; i++)
		if (!strncmp(m + i, ".processor.", 11))
			return "XLabs";
	return "unprefixed";
}

int pd_lora_describe(const char *path, struct pd_lora_about *ab)
{
	struct pd_st *st = NULL;
	struct pd_lora_mod *m = NULL;
	int n = 0, other = 0;

	memset(ab, 0, sizeof(*ab));
	if (pd_st_open(&st, path))
		return -1;
	if (pd_lora_modules(st, &m, &n, 1, &other)) {
		pd_st_close(st);
		return -1;
	}
	for (int i = 0; i < st->n_tensors; i++) {
		size_t len;

		if (pd_lora_split(st->sorted[i]->name, &len) < 0) {
			snprintf(ab->first_other, sizeof(ab->first_other), "%s", st->sorted[i]->name);
			break;
		}
	}
	ab->other = other;
	for (int i = 0; i < n; i++) {
		const struct pd_st_tensor *a = m[i].t[PD_LK_DOWN], *b = m[i].t[PD_LK_UP], *al = m[i].t[PD_LK_ALPHA];
		const char *lay = pd_lora_layout(m[i].name, m[i].len);
		float alpha;

		if (!strstr(ab->layout, lay) && strlen(ab->layout) + strlen(lay) + 2 < sizeof(ab->layout))
			snprintf(ab->layout + strlen(ab->layout), sizeof(ab->layout) - strlen(ab->layout), "%s%s",
				 ab->layout[0] ? " + " : "", lay);
		if (!a || !b || a->ndim != 2 || b->ndim != 2)
			continue;
		if (!ab->modules)
			snprintf(ab->example, sizeof(ab->example), "%.*s", (int)m[i].len, m[i].name);
		if (!ab->modules || a->shape[0] < ab->rank_min)
			ab->rank_min = (int)a->shape[0];
		if (a->shape[0] > ab->rank_max)
			ab->rank_max = (int)a->shape[0];
		ab->modules++;
		ab->params += (double)a->numel + (double)b->numel;
		if (al && al->numel == 1 && !pd_st_read_f32(al, 0, 1, &alpha)) {
			if (!ab->alphas || alpha < ab->alpha_min)
				ab->alpha_min = alpha;
			if (!ab->alphas || alpha > ab->alpha_max)
				ab->alpha_max = alpha;
			ab->alphas++;
		}
	}
	free(m);
	pd_st_close(st);
	return 0;
}
