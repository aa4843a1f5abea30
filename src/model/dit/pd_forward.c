/*
 * pd_forward.c - inputs of one transformer call under the golden names.
 */
#include "pd_forward.h"
#include "pd_embeds.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

int pd_st_load_f32(const struct pd_st *st, const char *name, int ndim, const int64_t *shape, float **out)
{
	const struct pd_st_tensor *t;
	float *p;

	if (pd_st_require(st, name, ndim, shape, &t))
		return -1;
	p = pd_malloc((size_t)t->numel * sizeof(float), name);
	if (!p)
		return -1;
	if (pd_st_read_f32(t, 0, (size_t)t->numel, p)) {
		free(p);
		return -1;
	}
	*out = p;
	return 0;
}

/* A per-batch scalar stored as [1] or [B]: expanded to B values. */
static int pd_read_batch_scalar(const struct pd_st *st, const char *name, int64_t B, float **out)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);
	float *p;

	if (!t)
		return pd_errorf("%s: tensor '%s' is missing", st->path, name);
	if (t->numel != 1 && t->numel != B)
		return pd_errorf("%s: tensor '%s' must hold 1 or %lld values", st->path, name, (long long)B);
	p = pd_malloc((size_t)B * sizeof(float), name);
	if (!p)
		return -1;
	if (t->dtype == PD_I64 || t->dtype == PD_I32) {
		/* integer timesteps (Wan's pipeline passes them so) */
		for (int64_t i = 0; i < t->numel; i++)
			p[i] = (float)pd_st_int_at(t, i);
	} else if (pd_st_read_f32(t, 0, (size_t)t->numel, p)) {
		free(p);
		return -1;
	}
	for (int64_t b = t->numel; b < B; b++)
		p[b] = p[0];
	*out = p;
	return 0;
}

/* Latents [B, C, F, h, w] of the file into packed tokens and their ids,
 * through the family (its geometry from F, h, w: frames 1 + 4 (F - 1) of
 * the VAE's scale). */
static int pd_forward_unpacked(struct pd_forward_inputs *in, const struct pd_st *st, const struct pd_st_tensor *h,
			       const struct pd_dit_family *fam, const struct pd_dit_info *info)
{
	int64_t B = h->shape[0], F = h->shape[2], hh = h->shape[3], ww = h->shape[4], per;
	int s = fam->vae_scale > 0 ? fam->vae_scale : 8, frames = F > 1 ? (int)(1 + 4 * (F - 1)) : 1;
	float *lat = NULL;
	char why[256] = "";

	if (!fam->pack || F < 1 || hh < 1 || ww < 1 || F > 100000 || hh > 100000 || ww > 100000 ||
	    fam->latent_shape(&in->ls, info, frames, (int)(hh * s), (int)(ww * s))) {
		if (fam->pack && F >= 1 && hh >= 1 && ww >= 1 && F <= 100000 && hh <= 100000 && ww <= 100000)
			snprintf(why, sizeof(why), ": %s", pd_last_error());
		return pd_errorf("%s: in.hidden_states [%lld, %lld, %lld, %lld, %lld] is no latent of this model%s",
				 st->path, (long long)B, (long long)h->shape[1], (long long)F, (long long)hh,
				 (long long)ww, why);
	}
	if (in->ls.channels != h->shape[1] || in->ls.frames != F || in->ls.h != hh || in->ls.w != ww)
		return pd_errorf("%s: in.hidden_states has %lld channels, %lld frames of %lldx%lld; the model takes %d "
				 "channels", st->path, (long long)h->shape[1], (long long)F, (long long)hh, (long long)ww,
				 in->ls.channels);
	per = pd_latent_numel(&in->ls);
	in->unpacked = 1;
	in->fam = fam;
	in->img_len = in->ls.tokens;
	in->img = pd_malloc((size_t)(B * in->ls.tokens * info->in_channels) * sizeof(float), "inputs");
	in->img_ids = pd_malloc((size_t)(in->ls.tokens * info->n_axes) * sizeof(float), "ids");
	if (!in->img || !in->img_ids || pd_st_load_f32(st, "in.hidden_states", 5, h->shape, &lat))
		return -1;
	for (int64_t b = 0; b < B; b++)
		fam->pack(&in->ls, lat + b * per, in->img + b * in->ls.tokens * info->in_channels);
	fam->image_ids(&in->ls, info->n_axes, in->img_ids);
	free(lat);
	return 0;
}

/* Packed tokens without ids: placed by the family, the picture's size from
 * the case's metadata (height and width in pixels, as the pipelines take
 * them). */
static int pd_forward_place(struct pd_forward_inputs *in, const struct pd_st *st, const struct pd_dit_family *fam,
			    const struct pd_dit_info *info)
{
	const char *hm = pd_st_meta(st, "height"), *wm = pd_st_meta(st, "width");
	int64_t A = info->n_axes;

	if (!hm || !wm)
		return pd_errorf("%s: no in.img_ids, and no height and width in its metadata to place the tokens", st->path);
	if (fam->latent_shape(&in->ls, info, 1, atoi(hm), atoi(wm)))
		return pd_error_prefix("%s: its height and width", st->path);
	if (in->ls.tokens != in->img_len)
		return pd_errorf("%s: in.hidden_states has %lld tokens; a %sx%s picture has %lld", st->path,
				 (long long)in->img_len, wm, hm, (long long)in->ls.tokens);
	in->img_ids = pd_malloc((size_t)(in->img_len * A + 1) * sizeof(float), "ids");
	in->txt_ids = pd_calloc((size_t)(in->txt_len * A + 1), sizeof(float), "ids");
	if (!in->img_ids || !in->txt_ids)
		return -1;
	fam->image_ids(&in->ls, (int)A, in->img_ids);
	if (fam->text_ids)
		fam->text_ids(&in->ls, in->txt_len, (int)A, in->txt_ids);
	return 0;
}

/* The text mask in.encoder_hidden_states_mask [B, T] (nonzero: a token),
 * when the case has one: padding at the end of every prompt alike, which
 * no token may see; the text is cut to the tokens (the same attention, and
 * their positions do not move). */
static int pd_forward_text_mask(struct pd_forward_inputs *in, const struct pd_st *st, int64_t J)
{
	int64_t B = in->batch, T = in->txt_len, n;
	int64_t *lens = pd_malloc((size_t)B * sizeof(int64_t), "the text mask");

	if (!lens || pd_embeds_mask_lens(st, "in.encoder_hidden_states_mask", B, T, lens)) {
		free(lens);
		return -1;
	}
	n = lens[0];
	for (int64_t b = 1; b < B; b++)
		if (lens[b] != n) {
			pd_errorf("%s: the prompts of in.encoder_hidden_states_mask have %lld and %lld tokens: give one "
				  "prompt a case", st->path, (long long)n, (long long)lens[b]);
			free(lens);
			return -1;
		}
	free(lens);
	for (int64_t b = 1; b < B; b++)
		memmove(in->txt + b * n * J, in->txt + b * T * J, (size_t)(n * J) * sizeof(float));
	in->txt_len = n;
	return 0;
}

int pd_forward_inputs_read(struct pd_forward_inputs *in, const struct pd_st *st, const struct pd_dit_family *fam,
			   const struct pd_dit_info *info)
{
	const struct pd_st_tensor *h = pd_st_get(st, "in.hidden_states"), *e;
	int64_t B, L = 0, T, A = info->n_axes;

	memset(in, 0, sizeof(*in));
	if (!h)
		return pd_errorf("%s: tensor 'in.hidden_states' is missing", st->path);
	if (h->ndim != 5) {
		int64_t hs[3] = { -1, -1, info->in_channels };

		if (pd_st_require(st, "in.hidden_states", 3, hs, &h))
			return -1;
		L = h->shape[1];
	}
	B = h->shape[0];
	{
		int64_t es[3] = { B, -1, info->txt_width };

		if (pd_st_require(st, "in.encoder_hidden_states", 3, es, &e))
			return -1;
	}
	T = e->shape[1];
	if (B < 1 || (h->ndim != 5 && L < 1))
		return pd_errorf("%s: in.hidden_states is empty", st->path);
	in->batch = B;
	in->img_len = L;
	in->txt_len = T;
	if (h->ndim == 5) {
		if (pd_forward_unpacked(in, st, h, fam, info))
			goto fail;
		L = in->img_len;
		/* text positions are zeros (a family placing text elsewhere gives
		 * packed inputs with their ids) */
		in->txt_ids = pd_calloc((size_t)(T * A + 1), sizeof(float), "ids");
		if (!in->txt_ids)
			goto fail;
	} else {
		int64_t hs[3] = { B, L, info->in_channels }, is[2] = { L, A }, ts[2] = { T, A };

		if (pd_st_load_f32(st, "in.hidden_states", 3, hs, &in->img))
			goto fail;
		if (pd_st_get(st, "in.img_ids") || !fam->image_ids) {
			if (pd_st_load_f32(st, "in.img_ids", 2, is, &in->img_ids) ||
			    pd_st_load_f32(st, "in.txt_ids", 2, ts, &in->txt_ids))
				goto fail;
		} else if (pd_forward_place(in, st, fam, info)) {
			goto fail;
		}
	}
	{
		int64_t es[3] = { B, T, info->txt_width }, ps[2] = { B, info->pooled_width };

		if (pd_st_load_f32(st, "in.encoder_hidden_states", 3, es, &in->txt) ||
		    (info->pooled_width > 0 && pd_st_load_f32(st, "in.pooled_projections", 2, ps, &in->pooled)) ||
		    pd_read_batch_scalar(st, "in.timestep", B, &in->timestep) || pd_forward_text_mask(in, st, info->txt_width))
			goto fail;
	}
	if (info->guidance) {
		if (pd_read_batch_scalar(st, "in.guidance", B, &in->guidance))
			goto fail;
	} else {
		in->guidance = pd_calloc((size_t)B, sizeof(float), "guidance");
		if (!in->guidance)
			goto fail;
	}
	return 0;
fail:
	pd_forward_inputs_free(in);
	return -1;
}

void pd_forward_inputs_free(struct pd_forward_inputs *in)
{
	free(in->img);
	free(in->txt);
	free(in->pooled);
	free(in->img_ids);
	free(in->txt_ids);
	free(in->timestep);
	free(in->guidance);
	memset(in, 0, sizeof(*in));
}

struct pd_dit_call pd_forward_inputs_image(const struct pd_forward_inputs *in, const struct pd_dit_info *info,
					     int64_t b)
{
	struct pd_dit_call x = {
		.txt_len = in->txt_len,
		.img_len = in->img_len,
		.img = in->img + b * in->img_len * info->in_channels,
		.txt = in->txt + b * in->txt_len * info->txt_width,
		.pooled = in->pooled ? in->pooled + b * info->pooled_width : NULL,
		.img_ids = in->img_ids,
		.txt_ids = in->txt_ids,
		.timestep = in->timestep[b],
		.guidance = in->guidance[b],
	};

	return x;
}
