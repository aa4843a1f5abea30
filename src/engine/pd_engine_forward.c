/*
 * pd_engine_forward.c - one transformer call on the golden files' inputs
 * (pdit forward): out.sample, and with a dump every intermediate under the
 * golden names, for tests and debugging.
 */
#include "pd_backend_new.h"
#include "pd_engine.h"
#include "pd_families.h"
#include "pd_forward.h"
#include "pd_lora.h"
#include "pd_st_writer.h"
#include "pd_util.h"
#include "pdit.h"

#include <stdlib.h>
#include <string.h>

/* Collects dumped tensors; per-image ones are stacked over the batch. */
struct pd_dump_store {
	struct pd_st_writer *w;         /* the output file */
	int64_t batch;                  /* images */
	int n;                          /* stored entries */
	struct pd_dump_entry {
		char *name;
		int ndim;
		int64_t shape[8];
		float *data;
	} *e;
	int failed;
};

static void pd_store_dump(void *ctx, const char *name, int64_t index, const float *data, int ndim,
			  const int64_t *shape)
{
	struct pd_dump_store *s = ctx;
	struct pd_dump_entry *x = NULL;
	int64_t n = 1;

	for (int i = 0; i < ndim; i++)
		n *= shape[i];
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->e[i].name, name) == 0)
			x = &s->e[i];
	if (!x) {
		struct pd_dump_entry *ne = realloc(s->e, sizeof(*ne) * (size_t)(s->n + 1));

		if (!ne) {
			s->failed = 1;
			return;
		}
		s->e = ne;
		x = &s->e[s->n++];
		x->name = strdup(name);
		x->ndim = ndim;
		memcpy(x->shape, shape, sizeof(int64_t) * (size_t)ndim);
		if (index >= 0)
			x->shape[0] = s->batch;
		x->data = calloc((size_t)(index >= 0 ? n * s->batch : n), sizeof(float));
		if (!x->name || !x->data) {
			s->failed = 1;
			return;
		}
	} else if (index < 0) {
		return;	/* batch-independent: the first image's copy stands */
	}
	memcpy(x->data + (index >= 0 ? index * n : 0), data, (size_t)n * sizeof(float));
}

int pd_forward_file(const struct pd_forward_options *o)
{
	const char *transformer = o->transformer, *config = o->config, *outp = o->out;
	int dump_all = o->dump;
	struct pd_backend_config cfg = { PD_F32, o->threads, -1, 0, -1 };
	int n_loras = 0;
	struct pd_backend *be = NULL;
	struct pd_dit *m = NULL;
	struct pd_st *st = NULL;
	struct pd_forward_inputs in = { 0 };
	struct pd_dump_store store = { 0 };
	struct pd_dump dump = { pd_store_dump, &store, 0 };
	const struct pd_dit_family *fam;
	struct pd_dit_info info;
	float *out = NULL, *lat = NULL;
	enum pd_dtype dt = PD_F32;
	int64_t C;
	int rc = -1, saved = -1;

	while (n_loras < PD_MAX_LORAS && o->loras[n_loras].path)
		n_loras++;
	if (pd_engine_threads_ok(o->threads))
		return -1;
	if (pd_out_check(outp) || pd_dtype_compute("--dtype", o->dtype ? o->dtype : "f32", &dt) ||
	    pd_backend_qproducts(o->quant_products, &cfg.quant_products) || pd_st_open(&st, o->inputs) ||
	    pd_family_find(transformer, config, &fam, &info) ||
	    (cfg.compute = dt, pd_backend_new(&be, o->backend, &cfg)) ||
	    (saved = pd_backend_enter(be), fam->load(&m, transformer, config, be, NULL)) ||
	    pd_lora_set(m, o->loras, n_loras, o->lora_lenient))
		goto out;
	if (pd_forward_inputs_read(&in, st, fam, &m->info))
		goto out;
	C = m->info.out_channels;
	out = pd_malloc((size_t)(in.batch * in.img_len * C) * sizeof(float), "output");
	store.w = pd_st_writer_new();
	store.batch = in.batch;
	if (!out || !store.w)
		goto out;
	for (int64_t b = 0; b < in.batch; b++) {
		struct pd_dit_call x = pd_forward_inputs_image(&in, &m->info, b);

		dump.index = b;
		if (pd_dit_forward(m, &x, out + b * in.img_len * C, dump_all ? &dump : NULL))
			goto out;
	}
	if (store.failed) {
		pd_errorf("out of memory storing the dump");
		goto out;
	}
	if (in.unpacked) {
		/* back into the latents' shape, as the file gave them */
		int64_t per = pd_latent_numel(&in.ls);
		int64_t shape[5] = { in.batch, in.ls.channels, in.ls.frames, in.ls.h, in.ls.w };

		lat = pd_malloc((size_t)(in.batch * per) * sizeof(float), "output");
		if (!lat)
			goto out;
		for (int64_t b = 0; b < in.batch; b++)
			fam->unpack(&in.ls, out + b * in.img_len * C, lat + b * per);
		if (pd_st_writer_add(store.w, "out.sample", PD_F32, 5, shape, lat))
			goto out;
	} else {
		int64_t shape[3] = { in.batch, in.img_len, C };

		if (pd_st_writer_add(store.w, "out.sample", PD_F32, 3, shape, out))
			goto out;
	}
	for (int i = 0; i < store.n; i++)
		if (pd_st_writer_add(store.w, store.e[i].name, PD_F32, store.e[i].ndim, store.e[i].shape,
				     store.e[i].data))
			goto out;
	if (pd_st_writer_meta(store.w, "pdit_version", PDIT_VERSION) || pd_st_writer_save(store.w, outp))
		goto out;
	pd_log(1, "pdit: wrote %s (%d tensors)\n", outp, store.n + 1);
	rc = 0;
out:
	for (int i = 0; i < store.n; i++) {
		free(store.e[i].name);
		free(store.e[i].data);
	}
	free(store.e);
	pd_st_writer_free(store.w);
	free(out);
	free(lat);
	pd_forward_inputs_free(&in);
	pd_dit_free(m);
	if (saved >= 0)
		pd_backend_leave(be, saved);
	pd_backend_free(be);
	pd_st_close(st);
	return rc;
}
