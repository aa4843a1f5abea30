/*
 * pd_serve_api.c - the request bodies and answers of `pdit serve`:
 * OpenAI's images API (as its clients send it) and the A1111 txt2img
 * shape stable-diffusion.cpp's server accepts, both with pdit's own fields.
 * Every refusal names the field.
 */
#include "pd_serve.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A field of a dialect: its JSON name and what it sets. */
enum pd_sf_kind { PD_SF_PROMPT, PD_SF_NEGATIVE, PD_SF_N, PD_SF_SIZE, PD_SF_WIDTH, PD_SF_HEIGHT, PD_SF_STEPS,
		  PD_SF_SEED, PD_SF_GUIDANCE, PD_SF_TRUE_CFG, PD_SF_CFG, PD_SF_FBCACHE, PD_SF_FORMAT, PD_SF_IGNORED };

struct pd_serve_field {
	const char *name;               /* the JSON key */
	enum pd_sf_kind kind;           /* what it sets */
};

/* OpenAI's images.generate (model, quality, style and user are accepted
 * and have no effect here: one model, its own quality) and pdit's fields. */
static const struct pd_serve_field pd_sf_openai[] = {
	{ "prompt", PD_SF_PROMPT },           { "n", PD_SF_N },
	{ "size", PD_SF_SIZE },               { "response_format", PD_SF_FORMAT },
	{ "model", PD_SF_IGNORED },           { "quality", PD_SF_IGNORED },
	{ "style", PD_SF_IGNORED },           { "user", PD_SF_IGNORED },
	{ "seed", PD_SF_SEED },               { "steps", PD_SF_STEPS },
	{ "guidance", PD_SF_GUIDANCE },       { "negative_prompt", PD_SF_NEGATIVE },
	{ "true_cfg_scale", PD_SF_TRUE_CFG }, { "fbcache_threshold", PD_SF_FBCACHE },
	{ NULL, PD_SF_IGNORED },
};

/* A1111's txt2img as stable-diffusion.cpp's server reads it (sampler_name,
 * scheduler and the like are accepted: pdit's sampler is the model's). */
static const struct pd_serve_field pd_sf_a1111[] = {
	{ "prompt", PD_SF_PROMPT },           { "negative_prompt", PD_SF_NEGATIVE },
	{ "width", PD_SF_WIDTH },             { "height", PD_SF_HEIGHT },
	{ "steps", PD_SF_STEPS },             { "cfg_scale", PD_SF_CFG },
	{ "seed", PD_SF_SEED },               { "batch_size", PD_SF_N },
	{ "sampler_name", PD_SF_IGNORED },    { "scheduler", PD_SF_IGNORED },
	{ "n_iter", PD_SF_IGNORED },          { "send_images", PD_SF_IGNORED },
	{ "save_images", PD_SF_IGNORED },     { "guidance", PD_SF_GUIDANCE },
	{ "true_cfg_scale", PD_SF_TRUE_CFG }, { "fbcache_threshold", PD_SF_FBCACHE },
	{ NULL, PD_SF_IGNORED },
};

static int pd_sf_fail(const char **field, const char *name, const char *fmt, const char *detail)
{
	*field = name;
	return pd_errorf(fmt, name, detail);
}

/* An integer field in [LO, HI]. */
static int pd_sf_int(const cJSON *v, const char *name, double lo, double hi, double *out, const char **field)
{
	char range[64];

	snprintf(range, sizeof(range), "%.0f to %.0f", lo, hi);
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
		return pd_sf_fail(field, name, "%s must be an integer (%s)", range);
	if (v->valuedouble < lo || v->valuedouble > hi)
		return pd_sf_fail(field, name, "%s must be %s", range);
	*out = v->valuedouble;
	return 0;
}

static int pd_sf_float(const cJSON *v, const char *name, double lo, double hi, float *out, const char **field)
{
	char range[64];

	snprintf(range, sizeof(range), "between %g and %g", lo, hi);
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
		return pd_sf_fail(field, name, "%s must be a number %s", range);
	*out = (float)v->valuedouble;
	return 0;
}

static int pd_sf_text(const cJSON *v, const char *name, char **out, const char **field)
{
	if (!cJSON_IsString(v))
		return pd_sf_fail(field, name, "%s must be a string%s", "");
	if (strlen(v->valuestring) > PD_SERVE_MAX_PROMPT) {
		char lim[64];

		snprintf(lim, sizeof(lim), " (at most %d bytes)", PD_SERVE_MAX_PROMPT);
		return pd_sf_fail(field, name, "%s is too long%s", lim);
	}
	free(*out);
	*out = pd_strdup(v->valuestring);
	return *out ? 0 : -1;
}

/* A side: a multiple of 16 up to PD_SERVE_MAX_SIDE. */
static int pd_sf_side(double v, const char *name, int *out, const char **field)
{
	if (v < 16 || v > PD_SERVE_MAX_SIDE || fmod(v, 16) != 0) {
		char lim[64];

		snprintf(lim, sizeof(lim), "a multiple of 16 from 16 to %d", PD_SERVE_MAX_SIDE);
		return pd_sf_fail(field, name, "%s must be %s", lim);
	}
	*out = (int)v;
	return 0;
}

static int pd_sf_one(struct pd_serve_params *p, const struct pd_serve_field *f, const cJSON *v, const char **field)
{
	double d = 0;

	switch (f->kind) {
	case PD_SF_PROMPT:
		return pd_sf_text(v, f->name, &p->prompt, field);
	case PD_SF_NEGATIVE:
		return cJSON_IsNull(v) ? 0 : pd_sf_text(v, f->name, &p->negative, field);
	case PD_SF_N:
		if (pd_sf_int(v, f->name, 1, PD_SERVE_MAX_N, &d, field))
			return -1;
		p->n = (int)d;
		return 0;
	case PD_SF_SIZE: {
		unsigned w, h;
		char tail;

		if (!cJSON_IsString(v))
			return pd_sf_fail(field, f->name, "%s must be a string such as \"1024x1024\"%s", "");
		if (strcmp(v->valuestring, "auto") == 0)
			return 0;
		if (sscanf(v->valuestring, "%5ux%5u%c", &w, &h, &tail) != 2)
			return pd_sf_fail(field, f->name, "%s must be \"WIDTHxHEIGHT\" (such as \"1024x1024\") or \"auto\"%s",
					  "");
		return pd_sf_side(w, f->name, &p->width, field) || pd_sf_side(h, f->name, &p->height, field);
	}
	case PD_SF_WIDTH:
	case PD_SF_HEIGHT:
		if (!cJSON_IsNumber(v))
			return pd_sf_fail(field, f->name, "%s must be an integer%s", "");
		return pd_sf_side(v->valuedouble, f->name, f->kind == PD_SF_WIDTH ? &p->width : &p->height, field);
	case PD_SF_STEPS:
		if (pd_sf_int(v, f->name, 1, PD_SERVE_MAX_STEPS, &d, field))
			return -1;
		p->steps = (int)d;
		return 0;
	case PD_SF_SEED:
		/* A1111's -1: a seed of the server's choosing */
		if (cJSON_IsNumber(v) && v->valuedouble == -1) {
			p->seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
			p->seed &= (1ULL << 53) - 1;
			return 0;
		}
		if (pd_sf_int(v, f->name, 0, 9007199254740991.0, &d, field))
			return -1;
		p->seed = (uint64_t)d;
		return 0;
	case PD_SF_GUIDANCE:
		return pd_sf_float(v, f->name, 0, 100, &p->guidance, field);
	case PD_SF_TRUE_CFG:
		return pd_sf_float(v, f->name, 0, 100, &p->true_cfg_scale, field);
	case PD_SF_CFG:
		return pd_sf_float(v, f->name, 0, 100, &p->cfg_scale, field);
	case PD_SF_FBCACHE:
		return pd_sf_float(v, f->name, 0, 1, &p->fbcache_threshold, field);
	case PD_SF_FORMAT:
		if (!cJSON_IsString(v) || strcmp(v->valuestring, "b64_json") != 0)
			return pd_sf_fail(field, f->name, "%s must be \"b64_json\"%s (pdit keeps no files to link to)", "");
		return 0;
	case PD_SF_IGNORED:
		return 0;
	}
	return 0;
}

int pd_serve_params_parse(struct pd_serve_params *p, enum pd_serve_api api, const char *body, size_t len, int strict,
			  char *field, size_t field_len)
{
	const struct pd_serve_field *table = api == PD_API_OPENAI ? pd_sf_openai : pd_sf_a1111;
	const char *bad = NULL;
	cJSON *root, *v;
	int rc = -1;

	memset(p, 0, sizeof(*p));
	p->api = api;
	p->n = 1;
	p->seed = 42;
	p->guidance = -1;
	p->true_cfg_scale = 1;
	p->cfg_scale = -1;
	field[0] = 0;
	root = cJSON_ParseWithLength(body, len);
	if (!root)
		return pd_errorf("the body is not JSON");
	if (!cJSON_IsObject(root)) {
		pd_errorf("the body must be a JSON object");
		goto out;
	}
	cJSON_ArrayForEach(v, root) {
		const struct pd_serve_field *f = table;

		while (f->name && strcmp(f->name, v->string) != 0)
			f++;
		if (!f->name) {
			if (!strict)
				continue;
			bad = v->string;
			pd_errorf("%.100s is not a field of this request (strict mode)", v->string);
			goto out;
		}
		if (pd_sf_one(p, f, v, &bad))
			goto out;
	}
	if (!p->prompt) {
		bad = "prompt";
		pd_errorf("prompt is required");
		goto out;
	}
	if ((int64_t)p->n * p->width * p->height > PD_SERVE_MAX_PIXELS) {
		bad = api == PD_API_OPENAI ? "n" : "batch_size";
		pd_errorf("%s: %d pictures of %dx%d are more than %d pixels a request", bad, p->n, p->width, p->height,
			  PD_SERVE_MAX_PIXELS);
		goto out;
	}
	rc = 0;
out:
	if (bad)
		snprintf(field, field_len, "%s", bad);
	cJSON_Delete(root);
	if (rc)
		pd_serve_params_free(p);
	return rc;
}

void pd_serve_params_free(struct pd_serve_params *p)
{
	free(p->prompt);
	free(p->negative);
	p->prompt = p->negative = NULL;
}

char *pd_serve_params_encode(const struct pd_serve_params *p)
{
	cJSON *o = cJSON_CreateObject();
	char seed[32], *text = NULL;

	if (!o)
		return NULL;
	snprintf(seed, sizeof(seed), "%llu", (unsigned long long)p->seed);
	/* floats as their exact decimal so every rank reads the same bits */
	if (cJSON_AddNumberToObject(o, "api", p->api) && cJSON_AddStringToObject(o, "prompt", p->prompt) &&
	    (!p->negative || cJSON_AddStringToObject(o, "negative", p->negative)) &&
	    cJSON_AddNumberToObject(o, "width", p->width) && cJSON_AddNumberToObject(o, "height", p->height) &&
	    cJSON_AddNumberToObject(o, "steps", p->steps) && cJSON_AddNumberToObject(o, "n", p->n) &&
	    cJSON_AddStringToObject(o, "seed", seed) && cJSON_AddNumberToObject(o, "guidance", p->guidance) &&
	    cJSON_AddNumberToObject(o, "true_cfg_scale", p->true_cfg_scale) &&
	    cJSON_AddNumberToObject(o, "cfg_scale", p->cfg_scale) &&
	    cJSON_AddNumberToObject(o, "fbcache_threshold", p->fbcache_threshold))
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

int pd_serve_params_decode(struct pd_serve_params *p, const char *text)
{
	cJSON *o = cJSON_Parse(text), *v;
	const char *seed;

	memset(p, 0, sizeof(*p));
	if (!o)
		return pd_errorf("a job's parameters are not JSON");
#define NUM(key) ((v = cJSON_GetObjectItemCaseSensitive(o, key)) && cJSON_IsNumber(v) ? v->valuedouble : 0)
	p->api = (enum pd_serve_api)(int)NUM("api");
	p->width = (int)NUM("width");
	p->height = (int)NUM("height");
	p->steps = (int)NUM("steps");
	p->n = (int)NUM("n");
	p->guidance = (float)NUM("guidance");
	p->true_cfg_scale = (float)NUM("true_cfg_scale");
	p->cfg_scale = (float)NUM("cfg_scale");
	p->fbcache_threshold = (float)NUM("fbcache_threshold");
#undef NUM
	seed = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "seed"));
	p->seed = seed ? strtoull(seed, NULL, 10) : 0;
	v = cJSON_GetObjectItemCaseSensitive(o, "prompt");
	p->prompt = pd_strdup(cJSON_IsString(v) ? v->valuestring : "");
	v = cJSON_GetObjectItemCaseSensitive(o, "negative");
	if (cJSON_IsString(v))
		p->negative = pd_strdup(v->valuestring);
	cJSON_Delete(o);
	if (!p->prompt) {
		pd_serve_params_free(p);
		return -1;
	}
	return 0;
}

char *pd_base64(const uint8_t *data, size_t n)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = pd_malloc((n + 2) / 3 * 4 + 1, "base64");
	size_t i, k = 0;

	if (!out)
		return NULL;
	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];

		out[k++] = abc[v >> 18];
		out[k++] = abc[(v >> 12) & 63];
		out[k++] = abc[(v >> 6) & 63];
		out[k++] = abc[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < n ? (uint32_t)data[i + 1] << 8 : 0);

		out[k++] = abc[v >> 18];
		out[k++] = abc[(v >> 12) & 63];
		out[k++] = i + 1 < n ? abc[(v >> 6) & 63] : '=';
		out[k++] = '=';
	}
	out[k] = 0;
	return out;
}

char *pd_serve_answer(const struct pd_serve_params *p, int n, uint8_t *const *pngs, const size_t *lens,
		      const char *info)
{
	cJSON *o = cJSON_CreateObject(), *list;
	char *text = NULL;
	int ok = o != NULL;

	if (!ok)
		return NULL;
	if (p->api == PD_API_OPENAI) {
		ok = cJSON_AddNumberToObject(o, "created", (double)time(NULL)) != NULL;
		list = cJSON_AddArrayToObject(o, "data");
	} else {
		list = cJSON_AddArrayToObject(o, "images");
	}
	ok &= list != NULL;
	for (int i = 0; ok && i < n; i++) {
		char *b64 = pd_base64(pngs[i], lens[i]);
		cJSON *item = NULL;

		if (!b64) {
			ok = 0;
			break;
		}
		if (p->api == PD_API_OPENAI) {
			item = cJSON_CreateObject();
			ok = item && cJSON_AddStringToObject(item, "b64_json", b64) &&
			     cJSON_AddStringToObject(item, "revised_prompt", p->prompt);
		} else {
			item = cJSON_CreateString(b64);
			ok = item != NULL;
		}
		free(b64);
		if (item)
			cJSON_AddItemToArray(list, item);
	}
	if (ok && p->api == PD_API_A1111) {
		/* the parameters as A1111 echoes them, and the PNGs' text as "info" */
		cJSON *par = cJSON_AddObjectToObject(o, "parameters");
		char seed[32];

		snprintf(seed, sizeof(seed), "%llu", (unsigned long long)p->seed);
		ok = par && cJSON_AddStringToObject(par, "prompt", p->prompt) &&
		     cJSON_AddStringToObject(par, "negative_prompt", p->negative ? p->negative : "") &&
		     cJSON_AddNumberToObject(par, "width", p->width) && cJSON_AddNumberToObject(par, "height", p->height) &&
		     cJSON_AddNumberToObject(par, "steps", p->steps) &&
		     cJSON_AddNumberToObject(par, "batch_size", p->n) &&
		     cJSON_AddNumberToObject(par, "seed", (double)p->seed) &&
		     cJSON_AddStringToObject(o, "info", info ? info : "");
	}
	if (ok)
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

char *pd_serve_error_json(const char *message, const char *type, const char *param)
{
	cJSON *o = cJSON_CreateObject(), *e = o ? cJSON_AddObjectToObject(o, "error") : NULL;
	char *text = NULL;

	if (e && cJSON_AddStringToObject(e, "message", message) && cJSON_AddStringToObject(e, "type", type) &&
	    (param ? cJSON_AddStringToObject(e, "param", param) != NULL : cJSON_AddNullToObject(e, "param") != NULL))
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}
