/*
 * pd_forward.c - inputs of one transformer call under the golden names.
 */
#include "pd_forward.h"
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
	if (pd_st_read_f32(t, 0, (size_t)t->numel, p)) {
		free(p);
		return -1;
	}
	for (int64_t b = t->numel; b < B; b++)
		p[b] = p[0];
	*out = p;
	return 0;
}

int pd_forward_inputs_read(struct pd_forward_inputs *in, const struct pd_st *st, const struct pd_flux_config *cfg)
{
	const struct pd_st_tensor *h, *e;
	int64_t B, L, T, A = cfg->n_axes;

	memset(in, 0, sizeof(*in));
	{
		int64_t hs[3] = { -1, -1, cfg->in_channels };

		if (pd_st_require(st, "in.hidden_states", 3, hs, &h))
			return -1;
	}
	B = h->shape[0];
	L = h->shape[1];
	{
		int64_t es[3] = { B, -1, cfg->joint_attention_dim };

		if (pd_st_require(st, "in.encoder_hidden_states", 3, es, &e))
			return -1;
	}
	T = e->shape[1];
	if (B < 1 || L < 1)
		return pd_errorf("%s: in.hidden_states is empty", st->path);
	in->batch = B;
	in->img_len = L;
	in->txt_len = T;
	{
		int64_t hs[3] = { B, L, cfg->in_channels }, es[3] = { B, T, cfg->joint_attention_dim };
		int64_t ps[2] = { B, cfg->pooled_projection_dim }, is[2] = { L, A }, ts[2] = { T, A };

		if (pd_st_load_f32(st, "in.hidden_states", 3, hs, &in->img) ||
		    pd_st_load_f32(st, "in.encoder_hidden_states", 3, es, &in->txt) ||
		    pd_st_load_f32(st, "in.pooled_projections", 2, ps, &in->pooled) ||
		    pd_st_load_f32(st, "in.img_ids", 2, is, &in->img_ids) ||
		    pd_st_load_f32(st, "in.txt_ids", 2, ts, &in->txt_ids) ||
		    pd_read_batch_scalar(st, "in.timestep", B, &in->timestep))
			goto fail;
	}
	if (cfg->guidance_embeds) {
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

struct pd_dit_call pd_forward_inputs_image(const struct pd_forward_inputs *in, const struct pd_flux_config *cfg,
					     int64_t b)
{
	struct pd_dit_call x = {
		.txt_len = in->txt_len,
		.img_len = in->img_len,
		.img = in->img + b * in->img_len * cfg->in_channels,
		.txt = in->txt + b * in->txt_len * cfg->joint_attention_dim,
		.pooled = in->pooled + b * cfg->pooled_projection_dim,
		.img_ids = in->img_ids,
		.txt_ids = in->txt_ids,
		.timestep = in->timestep[b],
		.guidance = in->guidance[b],
	};

	return x;
}
