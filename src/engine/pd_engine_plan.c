/*
 * pd_engine_plan.c - the mesh and the memory: the work of a request as the
 * cost model takes it (for the engine's own choice and for pdit plan, the
 * same description), the mesh chosen or checked, and a request refused
 * before anything big is read when it cannot fit.
 */
#include "pd_backend_cpu.h"
#include "pd_backend_new.h"
#include "pd_engine.h"
#include "pdit_plan.h"
#include "pd_plan.h"
#include "pd_png.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_vae.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ----------------------------------------------------------------------- */
/* The mesh and memory                                                     */
/* ----------------------------------------------------------------------- */

/* W: the work of IMAGES pictures of LS's geometry and TXT_LEN text tokens,
 * BRANCHES passes each, on the model MP, FAM, INFO with products in DT;
 * with VAE the decode (from the VAE folder's config, when it has one), with
 * ENCODERS the text encoders' weights. 0, or -1 when a config that is there
 * cannot be read. */
static int pd_engine_fill_work(const struct pd_model_paths *mp, const struct pd_dit_family *fam,
			       const struct pd_dit_info *info, const struct pd_latent_shape *ls, enum pd_dtype dt,
			       int64_t txt_len, int images, int branches, int vae, int encoders, struct pd_plan_work *w)
{
	double bytes = (double)pd_dtype_size(dt);

	memset(w, 0, sizeof(*w));
	w->info = info;
	w->txt_len = txt_len;
	w->img_len = ls->tokens;
	w->img_w = ls->w / 2;
	w->images = images;
	w->branches = branches;
	w->weight_bytes = pd_dit_weight_bytes(info, bytes);
	w->compute_bytes = (int)bytes;
	/* a VAE given as one file carries no config to count from */
	if (vae && mp->vae && pd_is_dir(mp->vae)) {
		struct pd_vae_cost cost;

		if (fam->vae->cost(mp->vae, ls->frames, ls->h, ls->w, &cost))
			return -1;
		pd_plan_vae_cost(w, &cost);
	}
	for (int i = 0; encoders && i < fam->n_encoders && i < PD_MAX_ENCODERS; i++) {
		double gb;

		if (!mp->encoder[i])
			continue;
		if (pd_plan_encoder_gb(mp->encoder[i], bytes, &gb))
			return -1;
		w->encoders_gb += gb;
	}
	return 0;
}

/* The work of the prepared request: BRANCHES passes per picture, and with
 * VAE the decode (a VAE config that cannot be read counts no decode here:
 * loading the VAE says why). */
static void pd_engine_plan_work(const struct pd_engine *e, int branches, int vae, struct pd_plan_work *w)
{
	struct pd_latent_shape rs;

	/* kept text encoders (a service) are held beside everything else */
	if (pd_engine_fill_work(&e->mp, e->fam, &e->info, &e->ls, e->dt, e->e.txt_len, (int)e->e.batch, branches,
				vae, e->o.keep_encoders, w)) {
		w->vae_gflop = w->vae_map_gb = 0;
		w->vae_exchanges = 0;
	}
	w->encoders_kept = e->o.keep_encoders;
	w->adapter_bytes = pd_engine_adapter_bytes(e);
	if (e->ref_rgb && !e->fam->latent_shape(&rs, &e->info, 1, e->ref_h, e->ref_w))
		w->ref_len = rs.tokens;
}

/* The bytes of the adapter files SPECS names (up to a NULL path): what
 * their terms hold at most (every rank's share, in the file's precision or
 * less). 0, or -1 with a message naming a file that is not there. */
static int pd_engine_lora_bytes(const struct pd_lora_spec *specs, double *bytes)
{
	struct stat sb;

	*bytes = 0;
	for (int i = 0; i < PD_MAX_LORAS && specs[i].path; i++) {
		if (stat(specs[i].path, &sb))
			return pd_errorf("--lora %s: %s", specs[i].path, strerror(errno));
		*bytes += (double)sb.st_size;
	}
	return 0;
}

/* W's reference tokens for Kontext's picture PATH (its size rounded down
 * to 16, as the engine takes it); a PipeFusion mesh needs them whole rows
 * of the picture's width, or W's limits allow none. */
static int pd_engine_work_ref(const char *path, const struct pd_dit_family *fam, struct pd_engine_work *w)
{
	struct pd_latent_shape rs;
	uint8_t *rgb = NULL;
	int rw, rh;

	if (pd_png_read(path, &rgb, &rw, &rh))
		return -1;
	free(rgb);
	if (rw < 16 || rh < 16)
		return pd_errorf("-r/--ref-image %s: %dx%d is smaller than 16x16", path, rw, rh);
	if (fam->latent_shape(&rs, &w->info, 1, rh - rh % 16, rw - rw % 16))
		return -1;
	w->work.ref_len = rs.tokens;
	if (w->work.img_w > 0 && rs.tokens % w->work.img_w)
		w->lim.max_pp = 1;
	return 0;
}

/* What a mesh of WORLD processes must allow for IMAGES pictures of the
 * model INFO, with CFG when the request has two branches. */
static void pd_engine_fill_limits(const struct pd_dit_info *info, int world, int images, int cfg,
				  struct pd_mesh_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->world = world;
	lim->heads = info->heads;
	lim->mlp = info->mlp_width;
	lim->cfg_possible = cfg;
	lim->images = images;
	lim->max_pp = info->blocks;
}

enum pd_qtype pd_engine_encoded_info(enum pd_qtype quantize, struct pd_dit_info *info)
{
	const struct pd_qtype_info *q = pd_quant_info(quantize);
	double blocks = 0;

	if (quantize == PD_Q_F32 || !q || info->kept_fraction != 0)
		return PD_Q_F32;
	for (int b = 0; b < info->blocks; b++)
		blocks += info->block_params[b];
	info->kept_fraction = blocks + info->fixed_params > 0 ? blocks / (blocks + info->fixed_params) : 0;
	info->kept_bytes = (double)q->block_bytes / q->block_size;
	return quantize;
}

int pd_engine_ring_form(const char *name, int *form)
{
	if (!name || !strcmp(name, "auto"))
		*form = -1;
	else if (!strcmp(name, "gathered"))
		*form = 1;
	else if (!strcmp(name, "merged"))
		*form = 0;
	else
		return pd_errorf("--ring-attention %s: unknown (merged, gathered or auto)", name);
	return 0;
}

int pd_engine_held_layout(const struct pd_engine_options *o, enum pd_dtype dt, const char *transformer,
			  enum pd_qtype quantize, struct pd_dit_info *info)
{
	const char *be = o->backend ? o->backend : "auto";
	struct pd_st *st = NULL;
	int qp, int8 = 0, ring;
	enum pd_qproducts qpr;
	double stored = 0, held = 0, kept = 0, by_type[PD_Q_F8_E5M2 + 1] = { 0 };
	double stored_bytes = info->kept_bytes;

	if (pd_backend_qproducts(o->quant_products, &qp) || pd_engine_ring_form(o->ring_attention, &ring))
		return -1;
	info->kept_bytes_stored = 0;
	info->ring_gathered = ring > 0 ? 2 : 0;
	/* a GPU holds them as stored */
	if (!strcmp(be, "cuda") || (!strcmp(be, "auto") && pd_backend_gpus() > 0))
		return 0;
	qpr = pd_backend_qproducts_for(qp, pd_backend_cpu_int8_auto(), dt);
	if (qpr == PD_QP_DECODE || !(info->kept_fraction > 0) || !transformer)
		return 0;
	if (quantize != PD_Q_F32) {
		/* encoded at load: the layout's ratio to TYPE's blocks at a
		 * FLUX-wide square (the layout's padding is per 16 rows) */
		int64_t n = 3072;

		info->kept_bytes *= (double)pd_backend_cpu_held_bytes(quantize, n, n, qpr) /
				    ((double)pd_quant_row_bytes(pd_quant_info(quantize), n) * (double)n);
		int8 = pd_backend_cpu_int8_takes(qpr, quantize, n);
		info->int8_fraction = int8;
		info->int8_type = quantize;
		goto whole;
	}
	if (pd_st_open_path(&st, transformer, "diffusion_pytorch_model"))
		return -1;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];
		enum pd_qtype q;
		float scale;

		if (t->ndim != 2 || !pd_dtype_is_float(t->dtype) || !pd_st_block_format(t, &q, &scale))
			continue;
		stored += (double)pd_quant_row_bytes(pd_quant_info(q), t->shape[1]) * (double)t->shape[0];
		held += (double)pd_backend_cpu_held_bytes(q, t->shape[0], t->shape[1], qpr);
		kept += (double)t->shape[0] * (double)t->shape[1];
		if (pd_backend_cpu_int8_takes(qpr, q, t->shape[1]) && (int)q <= PD_Q_F8_E5M2)
			by_type[q] += (double)t->shape[0] * (double)t->shape[1];
	}
	pd_st_close(st);
	if (stored > 0)
		info->kept_bytes *= held / stored;
	info->int8_fraction = 0;
	info->int8_type = 0;
	for (int q = 0; q <= PD_Q_F8_E5M2; q++) {
		info->int8_fraction += kept > 0 ? by_type[q] / kept : 0;
		if (by_type[q] > by_type[info->int8_type])
			info->int8_type = q;
	}
	int8 = info->int8_fraction > 0;
whole:
	/* auto falls back on the file's blocks where only they fit */
	if (qp < 0 && info->kept_bytes > stored_bytes)
		info->kept_bytes_stored = stored_bytes;
	/* int8 products' tensor parallel sums in one process's order where the
	 * family can (pd_dit_shard.whole_inputs): where any layer is int8 */
	info->tp_whole_inputs = int8 && info->blocks > 0 && info->block_row_inputs[0] > 0;
	/* and auto's ring attends as one process does (pd_ring_attention_gathered) */
	if (ring < 0)
		info->ring_gathered = int8;
	return 0;
}

int pd_engine_work(const struct pd_engine_options *o, const struct pd_request *rq, int world,
		   struct pd_engine_work *w)
{
	struct pd_model_paths mp = { 0 };
	const struct pd_dit_family *fam;
	struct pd_dit_defaults d = { 0 };
	struct pd_request r = *rq;
	struct pd_latent_shape ls;
	enum pd_qtype quantize;
	enum pd_dtype dt;
	int rc = -1, info_ok;

	memset(w, 0, sizeof(*w));
	if (pd_dtype_compute("--dtype", o->dtype ? o->dtype : "f32", &dt) ||
	    pd_engine_resolve(o, 0, &mp, &fam, &w->info, &info_ok))
		goto out;
	fam->defaults(&w->info, &d);
	/* --quantize's blocks as the run will hold them (an unknown type is
	 * the run's error to give) */
	if (!o->quantize || pd_quant_parse(o->quantize, &quantize) || !pd_quant_encodes(quantize) ||
	    (pd_quant_info(quantize)->block_size == 1 && quantize != PD_Q_F8_E4M3 && quantize != PD_Q_F8_E5M2))
		quantize = PD_Q_F32;
	quantize = pd_engine_encoded_info(quantize, &w->info);
	if (pd_engine_request_defaults(&d, fam->name, &r) || fam->latent_shape(&ls, &w->info, r.frames, r.height, r.width) ||
	    pd_engine_held_layout(o, dt, mp.transformer, quantize, &w->info))
		goto out;
	w->height = r.height;
	w->width = r.width;
	w->frames = r.frames;
	w->steps = r.steps == PD_DEFAULT ? d.steps : r.steps;
	r.batch = r.batch == PD_DEFAULT ? 1 : r.batch;
	if (pd_engine_fill_work(&mp, fam, &w->info, &ls, dt,
				r.max_seq != PD_DEFAULT ? r.max_seq : fam->default_max_seq ? fam->default_max_seq(&w->info) : 0, r.batch,
				r.true_cfg_scale > 1 ? 2 : 1, 1, 1, &w->work))
		goto out;
	w->work.encoders_kept = o->keep_encoders;
	pd_engine_fill_limits(&w->info, world, r.batch, w->work.branches == 2, &w->lim);
	if (pd_engine_lora_bytes(o->loras, &w->work.adapter_bytes) ||
	    (rq->ref_image && pd_engine_work_ref(rq->ref_image, fam, w)))
		goto out;
	if (!(w->transformer = pd_strdup(mp.transformer)))
		goto out;
	rc = 0;
out:
	pd_model_paths_free(&mp);
	return rc;
}

void pd_engine_work_free(struct pd_engine_work *w)
{
	free(w->transformer);
	memset(w, 0, sizeof(*w));
}

/* Refuses a request that cannot fit before anything big is read or
 * allocated: a low estimate of a process's peak (its share of the
 * transformer's weights and the activations it allocates, or the VAE
 * decode's two largest feature maps, whichever is larger: the transformer
 * is freed before decoding) times the processes on this machine, against
 * the memory it has available. What is hard to know here (oneDNN's
 * scratch, the libraries, the text encoders) is left out, so a refusal is
 * certain, not cautious. */
/* MB mebibytes as a size to read: GB from one up, MB below. */
static const char *pd_engine_mb(double mb, char buf[32])
{
	if (mb >= 1024)
		snprintf(buf, 32, "%.1f GB", mb / 1024);
	else
		snprintf(buf, 32, "%.*f MB", mb < 10 ? 2 : mb < 100 ? 1 : 0, mb);
	return buf;
}

double pd_engine_adapter_bytes(const struct pd_engine *e)
{
	double n = 0;

	/* (the files were read when the adapters went on) */
	return pd_engine_lora_bytes(e->o.loras, &n) ? 0 : n;
}

int pd_engine_check_memory(const struct pd_engine *e, int decodes, int loaded)
{
	double MB = 1048576.0, avail = pd_mem_available_mb(), weights, act, vae = 0, enc, need;
	char kept[96] = "", t_need[32], t_w[32], t_act[32], t_vae[32], t_enc[32], t_avail[32];
	int local = pd_comm_local_size(e->world);
	struct pd_plan_work w;
	struct pd_plan_machine mc = { .devices = e->world->size, .gflops = 1 };
	struct pd_plan_mesh mesh = { .patches = 0 };
	struct pd_plan_cost cost;

	if (avail <= 0)
		return 0;
	memcpy(mesh.degree, e->degree, sizeof(mesh.degree));
	pd_engine_plan_work(e, 1, decodes, &w);
	if (pd_plan_cost(&w, &mc, &mesh, &cost))
		return -1;
	/* the lightest stage: low whichever stage a rank runs (its share of
	 * the adapters with its layers; Kontext's reference tokens in the
	 * activations) */
	weights = cost.weights_min_gb * 1e9 / MB;
	act = cost.activations_gb * 1e9 / MB;
	/* the decode in bands over the data-parallel group, or whole */
	if (w.vae_gflop > 0)
		vae = (e->o.vae_parallel < 0 || e->world->size == 1 ? w.vae_map_gb : cost.vae_gb) * 1e9 / MB;
	/* kept text encoders, until they are resident too (one rank of each
	 * data-parallel group holds them) */
	enc = e->o.keep_encoders && !e->encoders ? w.encoders_gb * 1e9 / MB : 0;
	/* loaded: the weights are resident (and counted as used), and the
	 * transformer stays while the VAE decodes */
	need = loaded ? (act + vae) * local + enc : (weights + act > vae ? weights + act : vae) * local + enc;
	if (need <= avail)
		return 0;
	if (enc > 0)
		snprintf(kept, sizeof(kept), "; the kept text encoders %s", pd_engine_mb(enc, t_enc));
	pd_engine_mb(need, t_need);
	pd_engine_mb(weights, t_w);
	pd_engine_mb(act, t_act);
	pd_engine_mb(vae, t_vae);
	pd_engine_mb(avail, t_avail);
	if (loaded)
		return pd_errorf("%dx%d needs at least %s more on this machine (%d process%s, each: activations %s and "
				 "the VAE decode %s beside the loaded weights%s) and %s are available: choose a smaller "
				 "-H/--height and -W/--width", e->p.width, e->p.height, t_need, local, local > 1 ? "es" : "", t_act, t_vae, kept,
				 t_avail);
	return pd_errorf("%dx%d needs at least %s on this machine (%d process%s, each: transformer weights%s %s + "
			 "activations %s, or the VAE decode %s%s) and %s are available: choose a smaller -H/--height "
			 "and -W/--width, or more machines with tensor, sequence, pipeline parallel or the banded decode",
			 e->p.width, e->p.height, t_need, local, local > 1 ? "es" : "", e->n_loras ? " and adapters" : "", t_w,
			 t_act, t_vae, kept, t_avail);
}

int pd_engine_products_auto(const struct pd_engine_options *o)
{
	int qp = 0;

	return pd_backend_qproducts(o->quant_products, &qp) == 0 && qp < 0;
}

/* Auto's fallback taken (e->info.kept_bytes_stored > 0), WHY said in the
 * log: the file's blocks held and decoded. */
static void pd_engine_decode_kept(struct pd_engine *e, const char *why)
{
	pd_log(1, "pdit: the quantized layers' int8 layout (%.2f x the file's blocks) %s, the file's does: their "
		  "products decode them instead (as --quant-products bf16)\n",
	       e->info.kept_bytes / e->info.kept_bytes_stored, why);
	pd_dit_info_as_stored(&e->info);
	e->int8_unfit = 1;
}

int pd_engine_check_memory_layout(struct pd_engine *e, int decodes)
{
	struct pd_dit_info held = e->info;

	if (pd_engine_check_memory(e, decodes, 0) == 0)
		return 0;
	/* auto's int8 layout is larger than the file's for some types (Q5_K
	 * 1.57x, Q6_K 1.3x): where only the file's fits, decode instead */
	if (!(held.kept_bytes_stored > 0))
		return -1;
	pd_dit_info_as_stored(&e->info);
	if (pd_engine_check_memory(e, decodes, 0)) {
		e->info = held;
		return -1;
	}
	e->info = held;
	pd_engine_decode_kept(e, "does not fit in this machine's memory");
	return 0;
}

/* parallel = auto: rank 0 ranks the meshes as `pdit plan` does on this
 * machine (a product timed here, the processes of a node sharing its cores
 * and memory; int8 layers not timed apart: their speed moves the ranking
 * little) and every rank takes its first choice; exact methods only
 * unless STALE. */
static int pd_engine_plan_mesh(struct pd_engine *e, const struct pd_mesh_limits *lim, int stale)
{
	/* ok, the degrees, and whether the mesh fits only decoded */
	int msg[PD_AXIS_COUNT + 2] = { 0 };

	if (e->world->size == 1) {
		for (int x = 0; x < PD_AXIS_COUNT; x++)
			e->degree[x] = 1;
		return 0;
	}
	if (e->world->rank == 0) {
		struct pd_plan_work w;
		struct pd_plan_machine mc;
		struct pd_plan_row *rows = NULL;
		struct pd_cpu_share cs;
		int n = 0, here;

		pd_engine_plan_work(e, lim->cfg_possible ? 2 : 1, 1, &w);
		pd_comm_cpu_share(e->world, &cs);
		here = pd_plan_machine_here(&mc, &w, e->world->size, pd_comm_local_size(e->world), 1, 0, -1);
		/* the job's processes here run on the CPUs their masks cover
		 * together, not on rank 0's alone (one core under mpirun's
		 * default binding) */
		if (here == 0 && cs.used > 0)
			mc.cores = cs.used;
		if (here == 0 && pd_plan_list(&w, &mc, lim, &rows, &n) == 0) {
			for (int i = 0; i < n && !msg[0]; i++)
				if (rows[i].cost.fits && (stale || !rows[i].stale)) {
					msg[0] = 1;
					memcpy(msg + 1, rows[i].mesh.degree, sizeof(rows[i].mesh.degree));
					msg[PD_AXIS_COUNT + 1] = rows[i].cost.decoded;
				}
			if (!msg[0])
				pd_errorf("--parallel %s: no %smesh of %d processes fits this machine's memory (see pdit plan)",
					  stale ? "auto-stale" : "auto", stale ? "" : "exact ", e->world->size);
		}
		free(rows);
	}
	if (e->world->ops->bcast(e->world, msg, sizeof(msg), 0))
		return -1;
	if (!msg[0])
		return e->world->rank == 0 ? -1 : pd_errorf("--parallel: rank 0 could not choose a mesh");
	memcpy(e->degree, msg + 1, sizeof(e->degree));
	/* on every rank alike, before anything is loaded (the memory check
	 * of a request would find the same) */
	if (msg[PD_AXIS_COUNT + 1] && e->info.kept_bytes_stored > 0)
		pd_engine_decode_kept(e, "does not fit on the mesh chosen");
	return 0;
}

/* What the mesh must allow for the prepared request. */
void pd_engine_limits(const struct pd_engine *e, struct pd_mesh_limits *lim)
{
	pd_engine_fill_limits(&e->info, e->world->size, (int)e->e.batch, pd_gen_uses_cfg(&e->p, &e->e), lim);
}


/* The mesh for the prepared request (or a picture of the defaults). */
int pd_engine_choose_mesh(struct pd_engine *e)
{
	const struct pd_engine_options *o = &e->o;
	struct pd_mesh_limits lim;
	int given = 0;

	for (int a = 0; a < PD_AXIS_COUNT; a++)
		given |= o->degree[a] != 0;
	pd_engine_limits(e, &lim);
	if (o->parallel) {
		int stale = strcmp(o->parallel, "auto-stale") == 0;

		if (!stale && strcmp(o->parallel, "auto"))
			return pd_errorf("--parallel must be auto or auto-stale (got '%s')", o->parallel);
		if (given)
			return pd_errorf("--parallel %s chooses the mesh: give it or degree flags, not both", o->parallel);
		e->mesh_auto = 2;
		if (pd_engine_plan_mesh(e, &lim, stale))
			return -1;
		/* the first step has no earlier keys and values to attend to */
		if (o->warmup_steps < 1 && pd_mesh_stale(e->degree, o->patches))
			return pd_errorf("--warmup-steps must be at least 1 with --parallel auto-stale's choice (a stale "
					 "mesh)");
		return 0;
	}
	if (!given) {
		e->mesh_auto = e->world->size > 1;
		return pd_mesh_choose(e->degree, &lim);
	}
	for (int x = 0; x < PD_AXIS_COUNT; x++)
		if (e->degree[x] <= 0)
			e->degree[x] = 1;
	return pd_mesh_check(e->degree, &lim);
}

