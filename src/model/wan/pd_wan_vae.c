/*
 * pd_wan_vae.c - Wan2.1's video decoder (pd_wan_vae.h).
 */
#include "pd_config.h"
#include "pd_dit.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_vae.h"
#include "pd_wan_vae.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PD_WAN_MAX_UP 8
#define PD_WAN_MAX_RES 8

/* A causal convolution (WanCausalConv3d, VW:131-173): KT temporal taps of
 * a K x K convolution, 2 (KT / 2) frames of history in front. */
struct pd_cconv {
	int c_in, c_out, kt, k;         /* channels, temporal taps (1 or 3), spatial size (1 or 3) */
	struct pd_conv *tap[3];         /* tap[dt] multiplies frame t + dt - (kt - 1); the last has the bias */
	float *cache;                   /* backend [2][c_in][hw]: the last two frames given (kt 3) */
	int64_t cache_hw;               /* positions the cache is sized for (0: none yet) */
};

/* WanResidualBlock (VW:315-386) */
struct pd_wres {
	int c_in, c_out;                /* channels */
	float *g1, *g2;                 /* RMS gammas [c_in], [c_out] */
	struct pd_cconv conv1, conv2;   /* causal 3x3x3 */
	struct pd_cconv shortcut;       /* 1x1x1 when the channels change (c_out 0: none) */
};

/* An up block: residual blocks, then an upsampler (VW:269-299) */
struct pd_wup {
	int n_res;                      /* residual blocks */
	struct pd_wres res[PD_WAN_MAX_RES];
	int mode;                       /* 0 none, 2 spatial (upsample2d), 3 also temporal (upsample3d) */
	int c;                          /* the upsampler's channels in */
	struct pd_cconv time_conv;      /* upsample3d: (3, 1, 1), c -> 2c */
	struct pd_conv *resample;       /* 3x3, c -> c / 2, after the 2x upsample */
};

struct pd_wan_vae {
	struct pd_wan_vae_config cfg;   /* sizes and latent statistics */
	struct pd_backend *be;          /* compute (borrowed) */
	struct pd_cconv post_quant;     /* 1x1x1 */
	struct pd_cconv conv_in;        /* z -> top channels */
	struct pd_wres mid[2];          /* the mid block's residual blocks */
	int mid_c;                      /* their channels */
	float *attn_g;                  /* the mid attention's RMS gamma [mid_c] */
	struct pd_conv *to_qkv, *proj;  /* its 1x1 convolutions */
	struct pd_wup up[PD_WAN_MAX_UP];
	float *norm_out_g;              /* final RMS gamma */
	int out_c_in;                   /* conv_out's input channels */
	struct pd_cconv conv_out;       /* -> 3 channels */
	float *zero_bias;               /* host zeros for the taps without bias */
	struct pd_vae_hooks hooks;      /* the banded decode's seam (bands 1: the whole video here) */
};

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
	if (pd_config_string(&j, "_class_name", 0, "AutoencoderKLWan", &cls) || strcmp(cls, "AutoencoderKLWan") != 0) {
		pd_errorf("%s: _class_name \"%s\" is not AutoencoderKLWan", j.path, cls ? cls : "?");
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

/* ---------------------------------------------------------------------- */
/* Decoding                                                               */
/* ---------------------------------------------------------------------- */

void pd_wan_unnormalize(const struct pd_wan_vae *v, const float *lat, int64_t n, float *z)
{
	for (int c = 0; c < v->cfg.z_dim; c++) {
		float inv = 1.0f / v->cfg.std[c];

		for (int64_t i = 0; i < n; i++)
			z[(int64_t)c * n + i] = lat[(int64_t)c * n + i] / inv + v->cfg.mean[c];
	}
}

/* One decode. With bands, a process decodes rows [b0, b0 + bh) of every
 * frame at the latent's size (twice as many at each spatial upsample):
 * each 3x3 convolution's input frame gets a row above and below from the
 * neighbouring bands first (halo), and the causal caches keep frames with
 * those rows, so a band meets exactly what one pass over the whole frame
 * would; the mid attention gathers every band's keys and values of a
 * frame; band 0 collects the frames. */
struct pd_wdec {
	struct pd_wan_vae *v;
	struct pd_backend *be;
	float *buf[5];                  /* each 4 frames of the widest stage */
	float *hx;                      /* bands: 4 input frames of a convolution with their halo rows */
	float *qkv, *qt, *kt, *vt, *ot; /* the mid attention's, one frame (kt, vt: the whole frame's) */
	float *host;                    /* dumps */
	const struct pd_dump *dump;
	int chunk;                      /* the chunk being decoded */
	const struct pd_vae_hooks *hk;  /* the bands' seam */
	int halo;                       /* 1 with bands: rows a 3x3 convolution takes from its neighbours */
	int lat_h;                      /* the whole latent's rows */
};

/* A hook's failure becomes the backend's sticky error. */
static void pd_wdec_hook(struct pd_wdec *d, int rc)
{
	if (rc && !d->be->failed)
		pd_backend_fail(d->be, "%s", pd_last_error());
}

/* Frame X [c][h][w] into HX [c][h + 2][w] with the neighbours' rows. */
static void pd_wdec_halo(struct pd_wdec *d, float *hx, const float *x, int c, int h, int w)
{
	struct pd_backend *be = d->be;

	be->ops->copy2d(be, hx + w, (int64_t)(h + 2) * w, x, (int64_t)h * w, c, (int64_t)h * w);
	if (!be->failed)
		pd_wdec_hook(d, d->hk->halo(d->hk->ctx, be, hx, c, h, w, 1));
}

/* The rows above and below a frame that C's input keeps (bands, 3x3). */
static int pd_cconv_halo(const struct pd_wdec *d, const struct pd_cconv *c)
{
	return c->k == 3 ? d->halo : 0;
}

/* The cache of C sized for H x W frames (with their halo rows), zeroed (the
 * causal padding). */
static int pd_cconv_reset(struct pd_wdec *d, struct pd_cconv *c, int h, int w)
{
	struct pd_backend *be = d->be;
	int64_t hw = (int64_t)(h + 2 * pd_cconv_halo(d, c)) * w;

	if (c->kt < 2)
		return 0;
	if (c->cache_hw != hw) {
		if (c->cache)
			be->ops->free(be, c->cache);
		c->cache = pd_backend_alloc(be, (size_t)(2 * c->c_in * hw), "the VAE's frame cache");
		c->cache_hw = 0;
		if (!c->cache)
			return -1;
		c->cache_hw = hw;
	}
	be->ops->fill(be, c->cache, 0.0f, (size_t)(2 * c->c_in * hw));
	return 0;
}

/* Y [T][c_out][h w] = the causal convolution of X [T][c_in][h w] after the
 * frames it was given before; TMP holds one output frame. */
static void pd_cconv_run(struct pd_wdec *d, struct pd_cconv *c, const float *x, int T, int h, int w, float *y,
			 float *tmp)
{
	struct pd_backend *be = d->be;
	int halo = pd_cconv_halo(d, c);
	int64_t hw = (int64_t)h * w, fo = c->c_out * hw, fi = c->c_in * (int64_t)(h + 2 * halo) * w;

	if (halo) {
		for (int t = 0; t < T; t++)
			pd_wdec_halo(d, d->hx + t * fi, x + t * c->c_in * hw, c->c_in, h, w);
		x = d->hx;
	}
	for (int t = 0; t < T; t++) {
		be->ops->conv(be, c->tap[c->kt - 1], x + t * fi, h, w, halo, y + t * fo);
		for (int j = 1; j < c->kt; j++) {
			int s = t - j;
			const float *in = s >= 0 ? x + s * fi : c->cache + (2 + s) * fi;

			be->ops->conv(be, c->tap[c->kt - 1 - j], in, h, w, halo, tmp);
			be->ops->add(be, y + t * fo, y + t * fo, tmp, (size_t)fo);
		}
	}
	if (c->kt < 2)
		return;
	/* the last two frames of [cache, x] */
	if (T >= 2) {
		be->ops->copy2d(be, c->cache, fi, x + (T - 2) * fi, fi, 1, fi);
		be->ops->copy2d(be, c->cache + fi, fi, x + (T - 1) * fi, fi, 1, fi);
	} else if (T == 1) {
		be->ops->copy2d(be, c->cache, fi, c->cache + fi, fi, 1, fi);
		be->ops->copy2d(be, c->cache + fi, fi, x, fi, 1, fi);
	}
}

/* Dumps chunk-major [T][C][h w] as NAME [1, C, T, h, w] (diffusers'). */
static void pd_wdec_dump(struct pd_wdec *d, const char *name, const float *x, int T, int C, int h, int w)
{
	int64_t hw = (int64_t)h * w, shape[5] = { 1, C, T, h, w };
	float *f;

	if (!d->dump || d->be->failed)
		return;
	f = pd_malloc((size_t)(T * C * hw) * sizeof(float), "a dump");
	if (!f)
		return;
	d->be->ops->download(d->be, f, x, (size_t)(T * C * hw));
	for (int t = 0; t < T; t++)
		for (int c = 0; c < C; c++)
			memcpy(d->host + ((int64_t)c * T + t) * hw, f + ((int64_t)t * C + c) * hw, (size_t)hw * sizeof(float));
	free(f);
	d->dump->fn(d->dump->ctx, name, d->dump->index, d->host, 5, shape);
}

/* X [T][c_in][hw] -> Y [T][c_out][hw] through residual block R; uses
 * buf[2..4]. */
static void pd_wres_run(struct pd_wdec *d, struct pd_wres *r, const float *x, int T, int h, int w, float *y)
{
	struct pd_backend *be = d->be;
	int64_t hw = (int64_t)h * w;
	float *n = d->buf[2], *a = d->buf[3], *tmp = d->buf[4];

	for (int t = 0; t < T; t++)
		be->ops->rms_channels(be, n + t * r->c_in * hw, x + t * r->c_in * hw, r->c_in, hw, r->g1, 1);
	pd_cconv_run(d, &r->conv1, n, T, h, w, a, tmp);
	for (int t = 0; t < T; t++)
		be->ops->rms_channels(be, n + t * r->c_out * hw, a + t * r->c_out * hw, r->c_out, hw, r->g2, 1);
	pd_cconv_run(d, &r->conv2, n, T, h, w, y, tmp);
	if (r->shortcut.tap[0]) {
		pd_cconv_run(d, &r->shortcut, x, T, h, w, a, tmp);
		be->ops->add(be, y, y, a, (size_t)(T * r->c_out * hw));
	} else {
		be->ops->add(be, y, y, x, (size_t)(T * r->c_out * hw));
	}
}

/* The mid block's attention (VW:389-431): per frame, one head over the h w
 * positions, in place on X [T][C][hw]; uses buf[2]. With bands the keys and
 * values are the whole frame's (gathered in band order: row order). */
static void pd_wattn_run(struct pd_wdec *d, float *x, int T, int h, int w)
{
	struct pd_backend *be = d->be;
	struct pd_wan_vae *v = d->v;
	const struct pd_vae_hooks *hk = d->hk;
	int C = v->mid_c;
	int64_t hw = (int64_t)h * w, all = hw;
	float *n = d->buf[2], *o = d->buf[2] + C * hw, *k = d->kt, *vv = d->vt;
	size_t n_all[256];

	if (d->halo) {
		all = (int64_t)d->lat_h * w;
		for (int b = 0; b < hk->bands; b++)
			n_all[b] = (size_t)(pd_chunk_len(d->lat_h, hk->bands, b) * w * C);
		/* this band's keys and values after the gathered frame's */
		k = d->kt + all * C;
		vv = d->vt + all * C;
	}
	for (int t = 0; t < T; t++) {
		float *xt = x + t * C * hw;

		be->ops->rms_channels(be, n, xt, C, hw, v->attn_g, 0);
		be->ops->conv(be, v->to_qkv, n, h, w, 0, d->qkv);
		be->ops->transpose(be, d->qt, d->qkv, C, hw);
		be->ops->transpose(be, k, d->qkv + C * hw, C, hw);
		be->ops->transpose(be, vv, d->qkv + 2 * C * hw, C, hw);
		if (d->halo && !be->failed) {
			pd_wdec_hook(d, hk->gather(hk->ctx, k, (size_t)(hw * C), d->kt, n_all));
			if (!be->failed)
				pd_wdec_hook(d, hk->gather(hk->ctx, vv, (size_t)(hw * C), d->vt, n_all));
		}
		be->ops->attention(be, d->ot, C, NULL, d->qt, C, d->kt, C, d->vt, C, hw, all, 1, C,
				   1.0f / sqrtf((float)C));
		be->ops->transpose(be, n, d->ot, hw, C);
		be->ops->conv(be, v->proj, n, h, w, 0, o);
		be->ops->add(be, xt, xt, o, (size_t)(C * hw));
	}
}

/* One chunk: latent frame Z [z][hw] -> OUT frames [T][3][H W]; returns T. */
static int pd_wdec_chunk(struct pd_wdec *d, const float *z, int h, int w, float **out, int *out_h, int *out_w)
{
	struct pd_backend *be = d->be;
	struct pd_wan_vae *v = d->v;
	float *x = d->buf[0], *y = d->buf[1], *sw;
	int T = 1, c;
	char name[96];

#define SWAP() (sw = x, x = y, y = sw)
	pd_cconv_run(d, &v->conv_in, z, 1, h, w, x, d->buf[4]);
	snprintf(name, sizeof(name), "vae.chunk.%d.conv_in", d->chunk);
	pd_wdec_dump(d, name, x, T, v->conv_in.c_out, h, w);
	pd_wres_run(d, &v->mid[0], x, T, h, w, y);
	SWAP();
	pd_wattn_run(d, x, T, h, w);
	pd_wres_run(d, &v->mid[1], x, T, h, w, y);
	SWAP();
	snprintf(name, sizeof(name), "vae.chunk.%d.mid_block", d->chunk);
	pd_wdec_dump(d, name, x, T, v->mid_c, h, w);
	c = v->mid_c;
	for (int j = 0; j < v->cfg.up_blocks; j++) {
		struct pd_wup *u = &v->up[j];
		int64_t hw = (int64_t)h * w;

		for (int r = 0; r < u->n_res; r++) {
			pd_wres_run(d, &u->res[r], x, T, h, w, y);
			SWAP();
			c = u->res[r].c_out;
		}
		if (u->mode == 3 && d->chunk > 0) {
			/* frame t becomes two: channels [0, c) then [c, 2c) (VW:283-299);
			 * the first chunk's frame stays one and is not history */
			pd_cconv_run(d, &u->time_conv, x, T, h, w, y, d->buf[4]);
			snprintf(name, sizeof(name), "vae.chunk.%d.up_blocks.%d.time_conv", d->chunk, j);
			pd_wdec_dump(d, name, y, T, 2 * c, h, w);
			SWAP();
			T *= 2;
		}
		if (u->mode) {
			/* nearest 2x and the 3x3 convolution, frame by frame (bands:
			 * with a row of each neighbour's upsampled frame) */
			int64_t st = (int64_t)(2 * h + 2 * d->halo) * 2 * w;

			for (int t = 0; t < T; t++) {
				be->ops->upsample2x(be, d->buf[2] + d->halo * 2 * w, st, x + t * c * hw, c, h, w);
				if (d->halo && !be->failed)
					pd_wdec_hook(d, d->hk->halo(d->hk->ctx, be, d->buf[2], c, 2 * h, 2 * w, 1));
				be->ops->conv(be, u->resample, d->buf[2], 2 * h, 2 * w, d->halo,
					      y + t * (c / 2) * 4 * hw);
			}
			SWAP();
			c /= 2;
			h *= 2;
			w *= 2;
		}
		snprintf(name, sizeof(name), "vae.chunk.%d.up_blocks.%d", d->chunk, j);
		pd_wdec_dump(d, name, x, T, c, h, w);
	}
	for (int t = 0; t < T; t++)
		be->ops->rms_channels(be, y + t * c * (int64_t)h * w, x + t * c * (int64_t)h * w, c, (int64_t)h * w,
				      v->norm_out_g, 1);
	pd_cconv_run(d, &v->conv_out, y, T, h, w, x, d->buf[4]);
	snprintf(name, sizeof(name), "vae.chunk.%d.conv_out", d->chunk);
	pd_wdec_dump(d, name, x, T, 3, h, w);
#undef SWAP
	*out = x;
	*out_h = h;
	*out_w = w;
	return T;
}

/* The widest stage: channels x positions (x 2 for time_conv's output). */
static int64_t pd_wdec_widest(const struct pd_wan_vae *v, int h, int w)
{
	int64_t hw = (int64_t)h * w, m = (int64_t)v->cfg.z_dim * hw, c = v->mid_c;

#define MAX(a) (m = (a) > m ? (a) : m)
	MAX(c * hw);
	MAX((int64_t)v->conv_in.c_out * hw);
	for (int j = 0; j < v->cfg.up_blocks; j++) {
		const struct pd_wup *u = &v->up[j];

		for (int r = 0; r < u->n_res; r++) {
			MAX((int64_t)u->res[r].c_in * hw);
			MAX((int64_t)u->res[r].c_out * hw);
			c = u->res[r].c_out;
		}
		if (u->mode == 3)
			MAX(2 * c * hw);
		if (u->mode) {
			MAX(c * 4 * hw);
			hw *= 4;
			c /= 2;
		}
	}
#undef MAX
	return m;
}

int pd_wan_vae_decode(struct pd_wan_vae *v, const float *z_host, int F, int h, int w, float *out,
		      const struct pd_dump *dump)
{
	struct pd_backend *be = v->be;
	const struct pd_vae_hooks *hk = &v->hooks;
	struct pd_wdec d = { .v = v, .be = be, .dump = dump, .hk = hk, .lat_h = h };
	int bands = hk->bands > 1 ? hk->bands : 1, band = bands > 1 ? hk->band : 0;
	int b0 = (int)pd_chunk_start(h, bands, band), bh = (int)pd_chunk_len(h, bands, band);
	int64_t hw0 = (int64_t)bh * w, zc = v->cfg.z_dim, C = v->mid_c, sc = v->cfg.spatial;
	int64_t H = (int64_t)h * sc, W = (int64_t)w * sc, frames = 1 + (int64_t)4 * (F - 1), HB = (int64_t)bh * sc;
	int64_t wide;
	float *z = NULL, *pq = NULL, *frame = NULL, *whole = NULL;
	int written = 0, rc = -1;
	size_t n_all[256];

	if (F < 1 || h < 1 || w < 1)
		return pd_errorf("the Wan VAE needs at least one latent frame of one position");
	if (bands > 1 && (bands > h || bands > 256 || !hk->halo || !hk->gather || !hk->collect))
		return pd_errorf("the Wan VAE cannot cut %d latent rows into %d bands", h, bands);
	if (bands > 1 && dump)
		return pd_errorf("the Wan VAE dumps its stages from one process only");
	d.halo = bands > 1;
	/* room for the band's frames with their halo rows at every stage */
	wide = pd_wdec_widest(v, bh + 2 * d.halo, w);
	for (int i = 0; i < 5; i++)
		if (!(d.buf[i] = pd_backend_alloc(be, (size_t)(4 * wide), "the VAE's activations")))
			goto out;
	if (d.halo)
		d.hx = pd_backend_alloc(be, (size_t)(4 * wide), "the VAE's halo rows");
	d.qkv = pd_backend_alloc(be, (size_t)(3 * C * hw0), "the VAE's attention");
	d.qt = pd_backend_alloc(be, (size_t)(C * hw0), "the VAE's attention");
	/* the whole frame's keys and values, and this band's after them */
	d.kt = pd_backend_alloc(be, (size_t)(C * ((int64_t)h * w + (d.halo ? hw0 : 0))), "the VAE's attention");
	d.vt = pd_backend_alloc(be, (size_t)(C * ((int64_t)h * w + (d.halo ? hw0 : 0))), "the VAE's attention");
	d.ot = pd_backend_alloc(be, (size_t)(C * hw0), "the VAE's attention");
	z = pd_backend_alloc(be, (size_t)(zc * F * hw0), "latents");
	pq = pd_backend_alloc(be, (size_t)(zc * F * hw0), "latents");
	d.host = pd_malloc((size_t)(4 * wide > zc * F * hw0 ? 4 * wide : zc * F * hw0) * sizeof(float), "the VAE");
	frame = pd_malloc((size_t)(3 * HB * W) * sizeof(float), "a frame");
	if (d.halo && band == 0)
		whole = pd_malloc((size_t)(3 * H * W) * sizeof(float), "a frame");
	if (pd_backend_check(be) || !d.host || !frame || (d.halo && band == 0 && !whole))
		goto out;
	for (int b = 0; b < bands; b++)
		n_all[b] = (size_t)(3 * pd_chunk_len(h, bands, b) * sc * W);
	/* every cache starts as the causal zero padding */
	{
		int hh = bh, ww = w, rcache = pd_cconv_reset(&d, &v->conv_in, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[0].conv1, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[0].conv2, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[1].conv1, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[1].conv2, hh, ww);

		for (int j = 0; j < v->cfg.up_blocks && !rcache; j++) {
			struct pd_wup *u = &v->up[j];

			for (int r = 0; r < u->n_res && !rcache; r++)
				rcache = pd_cconv_reset(&d, &u->res[r].conv1, hh, ww) ||
					 pd_cconv_reset(&d, &u->res[r].conv2, hh, ww);
			if (u->mode == 3)
				rcache = rcache || pd_cconv_reset(&d, &u->time_conv, hh, ww);
			if (u->mode) {
				hh *= 2;
				ww *= 2;
			}
		}
		if (rcache || pd_cconv_reset(&d, &v->conv_out, hh, ww))
			goto out;
	}
	/* this band's rows of the latents, frame-major; post_quant_conv on all
	 * of them (VW:1195) */
	for (int t = 0; t < F; t++)
		for (int64_t c = 0; c < zc; c++)
			memcpy(d.host + ((int64_t)t * zc + c) * hw0, z_host + (((int64_t)c * F + t) * h + b0) * w,
			       (size_t)hw0 * sizeof(float));
	be->ops->upload(be, z, d.host, (size_t)(zc * F * hw0));
	pd_cconv_run(&d, &v->post_quant, z, F, bh, w, pq, d.buf[4]);
	pd_wdec_dump(&d, "vae.post_quant_conv", pq, F, (int)zc, bh, w);
	for (d.chunk = 0; d.chunk < F; d.chunk++) {
		float *o;
		int oh, ow, T = pd_wdec_chunk(&d, pq + d.chunk * zc * hw0, bh, w, &o, &oh, &ow);

		if (pd_backend_check(be))
			goto out;
		/* channel-major into OUT [3, frames, H, W] (bands: band 0 collects
		 * each frame, band after band: [3][band rows][W] each) */
		for (int t = 0; t < T && written < frames; t++, written++) {
			be->ops->download(be, frame, o + (int64_t)t * 3 * HB * W, (size_t)(3 * HB * W));
			if (d.halo) {
				if (hk->collect(hk->ctx, frame, (size_t)(3 * HB * W), whole, n_all))
					goto out;
				if (band != 0)
					continue;
				for (int b = 0, row = 0; b < bands; b++) {
					int64_t rb = pd_chunk_len(h, bands, b) * sc;

					for (int c = 0; c < 3; c++)
						memcpy(out + (((int64_t)c * frames + written) * H + row) * W,
						       whole + (3 * row + c * rb) * W, (size_t)(rb * W) * sizeof(float));
					row += (int)rb;
				}
				continue;
			}
			for (int c = 0; c < 3; c++)
				memcpy(out + ((int64_t)c * frames + written) * H * W, frame + (int64_t)c * H * W,
				       (size_t)(H * W) * sizeof(float));
		}
		pd_log(2, "pdit: decoded latent frame %d of %d\n", d.chunk + 1, F);
	}
	rc = written == frames ? 0 : pd_errorf("the Wan VAE made %d frames, not %lld", written, (long long)frames);
out:
	for (int i = 0; i < 5; i++)
		if (d.buf[i])
			be->ops->free(be, d.buf[i]);
	{
		float *bufs[] = { d.qkv, d.qt, d.kt, d.vt, d.ot, z, pq, d.hx };

		for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
			if (bufs[i])
				be->ops->free(be, bufs[i]);
	}
	free(d.host);
	free(frame);
	free(whole);
	if (rc && !pd_backend_check(be))
		return rc;
	return rc ? -1 : 0;
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
	/* low, as the planner's memory check wants it: at the largest stage a
	 * chunk's input, output and a residual block's two temporaries, and
	 * the caches */
	out->map_gb = (4 * big + cache) * 4.0 / 1e9;
	return 0;
}
