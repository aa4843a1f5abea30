/*
 * pd_wan_vae.c - Wan2.1's video decoder (pd_wan_vae.h): its config, its
 * weights loaded and checked layer by layer, and what a decode costs
 * (pd_wan_vae_decode.c runs it).
 */
#include "pd_config.h"
#include "pd_dit.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_vae.h"
#include "pd_wan_vae.h"
#include "pd_wan_vae_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_wan_vae_set_hooks(struct pd_wan_vae *v, const struct pd_vae_hooks *hooks)
{
	v->hooks = *hooks;
}

int pd_wan_vae_has_video(const struct pd_wan_vae *v)
{
	return v->hooks.bands <= 1 || v->hooks.band == 0;
}

const struct pd_wan_vae_config *pd_wan_vae_get_config(const struct pd_wan_vae *v)
{
	return &v->cfg;
}

/* ---------------------------------------------------------------------- */
/* Loading                                                                */
/* ---------------------------------------------------------------------- */

struct pd_wload {
	struct pd_st *st;               /* the weights */
	struct pd_backend *be;          /* where they go */
	float *zeros;                   /* a zero bias for the taps without one */
	int64_t zeros_n;                /* its length (grown to the widest layer) */
	int failed;                     /* the first error is recorded */
};

static const struct pd_st_tensor *pd_wl_get(struct pd_wload *l, const char *name)
{
	const struct pd_st_tensor *t = pd_st_get(l->st, name);

	if (!t && !l->failed) {
		pd_errorf("%s: no tensor %s", l->st->path, name);
		l->failed = 1;
	}
	return t;
}

static float *pd_wl_host(struct pd_wload *l, const struct pd_st_tensor *t)
{
	float *h;

	if (!t || l->failed)
		return NULL;
	h = pd_malloc((size_t)t->numel * sizeof(float) + 4, t->name);
	if (!h || pd_st_read_f32(t, 0, (size_t)t->numel, h)) {
		free(h);
		l->failed = 1;
		return NULL;
	}
	return h;
}

/* A 1-D tensor (any shape of N values) into backend memory. */
static float *pd_wl_vector(struct pd_wload *l, const char *name, int64_t n)
{
	const struct pd_st_tensor *t = pd_wl_get(l, name);
	float *h, *d;

	if (t && t->numel != n) {
		pd_errorf("%s: %s has %lld values, not %lld", l->st->path, name, (long long)t->numel, (long long)n);
		l->failed = 1;
	}
	h = pd_wl_host(l, t);
	if (!h)
		return NULL;
	d = pd_backend_alloc(l->be, (size_t)n, name);
	if (d)
		l->be->ops->upload(l->be, d, h, (size_t)n);
	else
		l->failed = 1;
	free(h);
	return d;
}

/* PREFIX.weight [c_out, c_in, kt, k, k] (or [c_out, c_in, k, k] with KT
 * 0: a plain 2-D convolution into *plain) and PREFIX.bias. */
static int pd_wl_conv(struct pd_wload *l, struct pd_cconv *c, struct pd_conv **plain, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int pd_wl_conv(struct pd_wload *l, struct pd_cconv *c, struct pd_conv **plain, const char *fmt, ...)
{
	char base[200], name[240];
	const struct pd_st_tensor *w, *b;
	float *hw = NULL, *hb = NULL, *tap = NULL;
	int kt, k, co, ci;
	va_list ap;

	if (l->failed)
		return -1;
	va_start(ap, fmt);
	vsnprintf(base, sizeof(base), fmt, ap);
	va_end(ap);
	snprintf(name, sizeof(name), "%s.weight", base);
	w = pd_wl_get(l, name);
	snprintf(name, sizeof(name), "%s.bias", base);
	b = pd_wl_get(l, name);
	if (l->failed)
		return -1;
	if (w->ndim != (plain ? 4 : 5) || w->shape[w->ndim - 1] != w->shape[w->ndim - 2] ||
	    (w->shape[w->ndim - 1] != 1 && w->shape[w->ndim - 1] != 3) || (!plain && w->shape[2] != 1 && w->shape[2] != 3) ||
	    b->ndim != 1 || b->shape[0] != w->shape[0]) {
		l->failed = 1;
		return pd_errorf("%s: %s.weight is not a 1- or 3-wide %s convolution with its bias", l->st->path, base,
				 plain ? "2-D" : "3-D");
	}
	co = (int)w->shape[0];
	ci = (int)w->shape[1];
	kt = plain ? 1 : (int)w->shape[2];
	k = (int)w->shape[w->ndim - 1];
	if (co > l->zeros_n) {
		float *z = realloc(l->zeros, (size_t)co * sizeof(float));

		if (!z) {
			l->failed = 1;
			return pd_errorf("out of memory loading the Wan VAE");
		}
		memset(z, 0, (size_t)co * sizeof(float));
		l->zeros = z;
		l->zeros_n = co;
	}
	hw = pd_wl_host(l, w);
	hb = pd_wl_host(l, b);
	tap = pd_malloc((size_t)co * ci * k * k * sizeof(float), base);
	if (!hw || !hb || !tap)
		goto fail;
	if (plain) {
		*plain = l->be->ops->conv_new(l->be, co, ci, k, hw, hb);
		if (!*plain)
			goto fail;
	} else {
		memset(c, 0, sizeof(*c));
		c->c_in = ci;
		c->c_out = co;
		c->kt = kt;
		c->k = k;
		for (int dt = 0; dt < kt; dt++) {
			for (int o = 0; o < co; o++)
				for (int i = 0; i < ci; i++)
					memcpy(tap + ((size_t)o * ci + i) * k * k, hw + (((size_t)o * ci + i) * kt + dt) * k * k,
					       (size_t)(k * k) * sizeof(float));
			c->tap[dt] = l->be->ops->conv_new(l->be, co, ci, k, tap, dt == kt - 1 ? hb : l->zeros);
			if (!c->tap[dt])
				goto fail;
		}
	}
	free(hw);
	free(hb);
	free(tap);
	return 0;
fail:
	if (!l->failed)
		pd_errorf("%s: %s: %s", l->st->path, base, l->be->error);
	l->failed = 1;
	free(hw);
	free(hb);
	free(tap);
	return -1;
}

static void pd_cconv_free(struct pd_backend *be, struct pd_cconv *c)
{
	for (int i = 0; i < 3; i++)
		if (c->tap[i])
			be->ops->conv_free(be, c->tap[i]);
	if (c->cache)
		be->ops->free(be, c->cache);
	memset(c, 0, sizeof(*c));
}

static void pd_wl_res(struct pd_wload *l, struct pd_wres *r, const char *p)
{
	char name[200];

	memset(r, 0, sizeof(*r));
	if (pd_wl_conv(l, &r->conv1, NULL, "%s.conv1", p) || pd_wl_conv(l, &r->conv2, NULL, "%s.conv2", p))
		return;
	r->c_in = r->conv1.c_in;
	r->c_out = r->conv1.c_out;
	snprintf(name, sizeof(name), "%s.norm1.gamma", p);
	r->g1 = pd_wl_vector(l, name, r->c_in);
	snprintf(name, sizeof(name), "%s.norm2.gamma", p);
	r->g2 = pd_wl_vector(l, name, r->c_out);
	snprintf(name, sizeof(name), "%s.conv_shortcut.weight", p);
	if (pd_st_get(l->st, name))
		pd_wl_conv(l, &r->shortcut, NULL, "%s.conv_shortcut", p);
	if (!l->failed && (r->conv2.c_in != r->c_out || r->conv2.c_out != r->c_out ||
			   (r->shortcut.tap[0] ? r->shortcut.c_in != r->c_in || r->shortcut.c_out != r->c_out
					       : r->c_in != r->c_out))) {
		pd_errorf("%s: residual block %s has inconsistent channels", l->st->path, p);
		l->failed = 1;
	}
}

static void pd_wres_free(struct pd_backend *be, struct pd_wres *r)
{
	pd_cconv_free(be, &r->conv1);
	pd_cconv_free(be, &r->conv2);
	pd_cconv_free(be, &r->shortcut);
	if (r->g1)
		be->ops->free(be, r->g1);
	if (r->g2)
		be->ops->free(be, r->g2);
}

void pd_wan_vae_free(struct pd_wan_vae *v)
{
	struct pd_backend *be;

	if (!v)
		return;
	be = v->be;
	pd_cconv_free(be, &v->post_quant);
	pd_cconv_free(be, &v->conv_in);
	pd_cconv_free(be, &v->conv_out);
	for (int i = 0; i < 2; i++)
		pd_wres_free(be, &v->mid[i]);
	for (int j = 0; j < PD_WAN_MAX_UP; j++) {
		for (int r = 0; r < v->up[j].n_res; r++)
			pd_wres_free(be, &v->up[j].res[r]);
		pd_cconv_free(be, &v->up[j].time_conv);
		if (v->up[j].resample)
			be->ops->conv_free(be, v->up[j].resample);
	}
	if (v->to_qkv)
		be->ops->conv_free(be, v->to_qkv);
	if (v->proj)
		be->ops->conv_free(be, v->proj);
	if (v->attn_g)
		be->ops->free(be, v->attn_g);
	if (v->norm_out_g)
		be->ops->free(be, v->norm_out_g);
	free(v->zero_bias);
	free(v);
}

static int pd_wan_vae_config(struct pd_wan_vae_config *c, const char *dir)
{
	struct pd_config j;
	double mean[PD_WAN_VAE_MAX_Z], std[PD_WAN_VAE_MAX_Z];
	int64_t v;
	int nm = 0, ns = 0, rc = -1;
	const char *cls = NULL;

	memset(c, 0, sizeof(*c));
	if (pd_config_load_in(&j, dir, "config.json", "Wan VAE"))
		return -1;
	/* Qwen-Image's AutoencoderKLQwenImage is this decoder under another
	 * name (the same layers and keys; its RMS norm's float32 upcast only
	 * matters in half precision) */
	if (pd_config_string(&j, "_class_name", 0, "AutoencoderKLWan", &cls) ||
	    (strcmp(cls, "AutoencoderKLWan") != 0 && strcmp(cls, "AutoencoderKLQwenImage") != 0)) {
		pd_errorf("%s: _class_name \"%s\" is neither AutoencoderKLWan nor AutoencoderKLQwenImage", j.path,
			  cls ? cls : "?");
		goto out;
	}
	if (pd_config_int(&j, "z_dim", 0, 16, 1, PD_WAN_VAE_MAX_Z, &v))
		goto out;
	c->z_dim = (int)v;
	{
		const char *keys[2] = { "latents_mean", "latents_std" };
		double *dst[2] = { mean, std };
		int *n[2] = { &nm, &ns };

		for (int k = 0; k < 2; k++) {
			if (pd_config_double_array(&j, keys[k], PD_WAN_VAE_MAX_Z, dst[k], n[k]))
				goto out;
		}
	}
	if (nm != c->z_dim || ns != c->z_dim) {
		pd_errorf("%s: latents_mean and latents_std must have z_dim (%d) values", j.path, c->z_dim);
		goto out;
	}
	for (int i = 0; i < c->z_dim; i++) {
		c->mean[i] = (float)mean[i];
		c->std[i] = (float)std[i];
		if (!(std[i] > 0)) {
			pd_errorf("%s: latents_std[%d] is not positive", j.path, i);
			goto out;
		}
	}
	{
		int res = 0;

		if (pd_config_bool(&j, "is_residual", 0, 0, &res))
			goto out;
		if (res) {
			pd_errorf("%s: is_residual (Wan2.2's VAE) is not supported", j.path);
			goto out;
		}
	}
	c->out_channels = 3;
	c->spatial = 8;
	c->temporal = 4;
	rc = 0;
out:
	pd_config_free(&j);
	return rc;
}

/* Whether tensor NAME is a 2-D convolution [co, ci, k, k]. */
static int pd_wan_conv2_is(const struct pd_st *st, const char *name, int64_t co, int64_t ci, int64_t k)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);

	return t && t->ndim == 4 && t->shape[0] == co && t->shape[1] == ci && t->shape[2] == k && t->shape[3] == k;
}

/* The decoder's layers chain as AutoencoderKLWan's (WanDecoder3d) do, so
 * every buffer the decode sizes from them holds what it gets: 1x1x1
 * post_quant_conv and shortcuts, channels from z through the mid block
 * and each up block to RGB, two temporal and three spatial upsamplers
 * (the 4 and 8 of the config), none in the last block. */
static int pd_wan_vae_check(const struct pd_wan_vae *v, const struct pd_st *st, const char *path)
{
	int z = v->cfg.z_dim, c = v->mid_c, temporal = 0, spatial = 0;
	char name[200];

	if (v->post_quant.kt != 1 || v->post_quant.k != 1 || v->post_quant.c_in != z || v->post_quant.c_out != z)
		return pd_errorf("%s: post_quant_conv is not 1x1x1 from %d to %d channels", path, z, z);
	if (v->conv_in.c_in != z || v->conv_in.c_out != v->mid[0].c_in || v->mid[0].c_in != c || v->mid[1].c_in != c ||
	    v->mid[1].c_out != c)
		return pd_errorf("%s: conv_in and the mid block do not chain (%d latent channels)", path, z);
	if (!pd_wan_conv2_is(st, "decoder.mid_block.attentions.0.to_qkv.weight", 3 * c, c, 1) ||
	    !pd_wan_conv2_is(st, "decoder.mid_block.attentions.0.proj.weight", c, c, 1))
		return pd_errorf("%s: the mid attention is not 1x1 convolutions of %d channels", path, c);
	for (int j = 0; j < v->cfg.up_blocks; j++) {
		const struct pd_wup *u = &v->up[j];

		snprintf(name, sizeof(name), "decoder.up_blocks.%d.resnets.%d.conv1.weight", j, u->n_res);
		if (u->n_res == 0 || pd_st_get(st, name))
			return pd_errorf("%s: up block %d has %s residual blocks", path, j, u->n_res ? "too many" : "no");
		for (int r = 0; r < u->n_res; r++) {
			const struct pd_wres *rb = &u->res[r];

			if (rb->c_in != c || (rb->shortcut.tap[0] && (rb->shortcut.kt != 1 || rb->shortcut.k != 1)))
				return pd_errorf("%s: up block %d's residual block %d takes %d channels, not %d (or its "
						 "shortcut is not 1x1x1)", path, j, r, rb->c_in, c);
			c = rb->c_out;
		}
		if (u->mode) {
			snprintf(name, sizeof(name), "decoder.up_blocks.%d.upsamplers.0.resample.1.weight", j);
			if (c % 2 || !pd_wan_conv2_is(st, name, c / 2, c, 3))
				return pd_errorf("%s: up block %d's resample is not a 3x3 convolution from %d to %d channels",
						 path, j, c, c / 2);
			if (j == v->cfg.up_blocks - 1)
				return pd_errorf("%s: the last up block has an upsampler", path);
			temporal += u->mode == 3;
			spatial++;
			c /= 2;
		}
	}
	snprintf(name, sizeof(name), "decoder.up_blocks.%d.resnets.0.conv1.weight", v->cfg.up_blocks);
	if (pd_st_get(st, name))
		return pd_errorf("%s: more than %d up blocks", path, PD_WAN_MAX_UP);
	if (temporal != 2 || spatial != 3)
		return pd_errorf("%s: %d temporal and %d spatial upsamplers; Wan2.1's VAE has 2 and 3 (4x frames, 8x "
				 "pixels)", path, temporal, spatial);
	if (v->out_c_in != c || v->conv_out.c_in != c || v->conv_out.c_out != 3)
		return pd_errorf("%s: norm_out and conv_out do not take the last block's %d channels to RGB", path, c);
	return 0;
}

int pd_wan_vae_load(struct pd_wan_vae **out, const char *path, struct pd_backend *be)
{
	struct pd_wan_vae *v = pd_calloc(1, sizeof(*v), "the Wan VAE");
	struct pd_wload l = { 0 };
	char name[200];

	*out = NULL;
	if (!v)
		return -1;
	v->be = be;
	if (!pd_is_dir(path)) {
		pd_errorf("%s: the Wan VAE is a folder (config.json and its weights)", path);
		goto fail;
	}
	if (pd_wan_vae_config(&v->cfg, path) || pd_st_open_path(&l.st, path, "diffusion_pytorch_model"))
		goto fail;
	l.be = be;
	pd_wl_conv(&l, &v->post_quant, NULL, "post_quant_conv");
	pd_wl_conv(&l, &v->conv_in, NULL, "decoder.conv_in");
	pd_wl_res(&l, &v->mid[0], "decoder.mid_block.resnets.0");
	pd_wl_res(&l, &v->mid[1], "decoder.mid_block.resnets.1");
	v->mid_c = v->mid[0].c_out;
	v->attn_g = pd_wl_vector(&l, "decoder.mid_block.attentions.0.norm.gamma", v->mid_c);
	pd_wl_conv(&l, NULL, &v->to_qkv, "decoder.mid_block.attentions.0.to_qkv");
	pd_wl_conv(&l, NULL, &v->proj, "decoder.mid_block.attentions.0.proj");
	for (int j = 0; j < PD_WAN_MAX_UP && !l.failed; j++) {
		struct pd_wup *u = &v->up[j];

		snprintf(name, sizeof(name), "decoder.up_blocks.%d.resnets.0.conv1.weight", j);
		if (!pd_st_get(l.st, name))
			break;
		v->cfg.up_blocks = j + 1;
		for (u->n_res = 0; u->n_res < PD_WAN_MAX_RES; u->n_res++) {
			snprintf(name, sizeof(name), "decoder.up_blocks.%d.resnets.%d.conv1.weight", j, u->n_res);
			if (!pd_st_get(l.st, name))
				break;
			snprintf(name, sizeof(name), "decoder.up_blocks.%d.resnets.%d", j, u->n_res);
			pd_wl_res(&l, &u->res[u->n_res], name);
		}
		snprintf(name, sizeof(name), "decoder.up_blocks.%d.upsamplers.0.resample.1.weight", j);
		if (pd_st_get(l.st, name)) {
			u->c = u->res[u->n_res - 1].c_out;
			pd_wl_conv(&l, NULL, &u->resample, "decoder.up_blocks.%d.upsamplers.0.resample.1", j);
			snprintf(name, sizeof(name), "decoder.up_blocks.%d.upsamplers.0.time_conv.weight", j);
			u->mode = 2;
			if (pd_st_get(l.st, name)) {
				u->mode = 3;
				pd_wl_conv(&l, &u->time_conv, NULL, "decoder.up_blocks.%d.upsamplers.0.time_conv", j);
				if (!l.failed && (u->time_conv.c_in != u->c || u->time_conv.c_out != 2 * u->c ||
						  u->time_conv.k != 1 || u->time_conv.kt != 3)) {
					pd_errorf("%s: up block %d's time_conv is not (3, 1, 1) from %d to %d channels", path, j,
						  u->c, 2 * u->c);
					l.failed = 1;
				}
			}
		}
	}
	{
		/* the last block's last residual block's channels (0: none; the
		 * check below says why) */
		const struct pd_wup *last = v->cfg.up_blocks ? &v->up[v->cfg.up_blocks - 1] : NULL;

		v->out_c_in = last && last->n_res ? last->res[last->n_res - 1].c_out : 0;
	}
	v->norm_out_g = pd_wl_vector(&l, "decoder.norm_out.gamma", v->out_c_in);
	pd_wl_conv(&l, &v->conv_out, NULL, "decoder.conv_out");
	v->zero_bias = l.zeros;
	if (!l.failed && pd_wan_vae_check(v, l.st, path))
		l.failed = 1;
	if (l.failed)
		goto fail;
	pd_st_close(l.st);
	*out = v;
	return 0;
fail:
	pd_st_close(l.st);
	if (v->zero_bias != l.zeros)
		free(l.zeros);
	pd_wan_vae_free(v);
	return -1;
}

int pd_wan_vae_cost(const char *dir, int F, int h, int w, struct pd_vae_cost *out)
{
	struct pd_config j;
	int64_t mult[8], base, dbase, nres, z;
	int n = 0;
	/* tc: a chunk's frames at the stage (1, then 2 and 4 after the
	 * temporal upsamplers); big: the largest chunk activation */
	double hw = (double)h * w, fr = F, f = 0, cache = 0, big, c, ex = 0, tc = 1;

	memset(out, 0, sizeof(*out));
	if (pd_config_load_in(&j, dir, "config.json", "Wan VAE"))
		return -1;
	if (pd_config_int(&j, "base_dim", 0, 96, 1, 1 << 16, &base) || pd_config_int(&j, "decoder_base_dim", 0, base, 1, 1 << 16, &dbase) ||
	    pd_config_int(&j, "num_res_blocks", 0, 2, 1, PD_WAN_MAX_RES - 1, &nres) ||
	    pd_config_int(&j, "z_dim", 0, 16, 1, PD_WAN_VAE_MAX_Z, &z) ||
	    (pd_config_has(&j, "dim_mult") ? pd_config_int_array(&j, "dim_mult", 8, 1, 64, mult, &n) : 0)) {
		pd_config_free(&j);
		return -1;
	}
	pd_config_free(&j);
	if (n == 0) {
		int64_t def[4] = { 1, 2, 4, 4 };

		memcpy(mult, def, sizeof(def));
		n = 4;
	}
	/* 3x3x3 causal convolutions: all three taps on every frame */
#define CONV3(ci, co) (f += 2.0 * 27 * (ci) * (co) * hw * fr, cache += 2.0 * (ci) * hw, ex += fr)
	c = (double)dbase * mult[n - 1];
	f += 2.0 * z * z * hw * fr;
	CONV3(z, c);
	big = c * hw;
	for (int r = 0; r < 4; r++)
		CONV3(c, c);
	/* the mid attention, per frame: to_qkv, proj, the scores */
	f += fr * (2.0 * hw * c * 4 * c + 4.0 * hw * hw * c);
	ex += 2 * fr;
	for (int i = 0; i < n; i++) {
		double in = i == 0 ? c : c / 2, o = (double)dbase * mult[n - 1 - i];

		for (int r = 0; r <= nres; r++) {
			double ci = r == 0 ? in : o;

			CONV3(ci, o);
			CONV3(o, o);
			if (ci != o)
				f += 2.0 * ci * o * hw * fr;
			big = fmax(big, tc * fmax(ci, o) * hw);
		}
		c = o;
		if (i == n - 1)
			break;
		if (i < 2) {
			/* time_conv (3, 1, 1) to 2c, then twice the frames after the first */
			f += 2.0 * 3 * c * 2 * c * hw * fr;
			cache += 2.0 * c * hw;
			fr = 1 + 2 * (fr - 1);
			tc = F > 1 ? 2 * tc : 1;
		}
		hw *= 4;
		f += 2.0 * 9 * c * (c / 2) * hw * fr;
		ex += fr;
		big = fmax(big, tc * c / 2 * hw);
	}
	CONV3(c, 3);
	/* band 0 collects each output frame */
	ex += fr;
#undef CONV3
	out->gflop = f / 1e9;
	out->exchanges = (int)fmin(ex, 1e9);
	/* low, as the planner's memory check wants it: the decoder's five
	 * buffers of the largest stage's chunk (its input, output, a residual
	 * block's temporaries), and the caches (none for one latent frame: one
	 * chunk); at 1328² one frame measured 1.05 of it beside the process */
	out->map_gb = (5 * big + (F > 1 ? cache : 0)) * 4.0 / 1e9;
	return 0;
}

