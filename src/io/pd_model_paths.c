/*
 * pd_model_paths.c - where a model's components live.
 */
#include "pd_model_paths.h"
#include "pd_config.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The component folder DIR/NAME when model_index.json lists NAME with a
 * class (diffusers writes [null, null] for a component left out). */
static int pd_model_component(const struct pd_config *idx, const char *root, const char *name, char **out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive((const cJSON *)idx->json, name);
	char *dir;

	*out = NULL;
	if (!e || !cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || cJSON_IsNull(cJSON_GetArrayItem(e, 1)))
		return 0;
	dir = pd_strfmt("%s/%s", root, name);
	if (!dir)
		return -1;
	if (!pd_is_dir(dir)) {
		int rc = pd_errorf("%s: model_index.json lists '%s' but the folder %s is missing", root, name, dir);

		free(dir);
		return rc;
	}
	*out = dir;
	return 0;
}

/* A flag's path: it must exist; DIR_ONLY refuses a file. */
static int pd_model_check(const char *flag, const char *path, int dir_only)
{
	if (!path)
		return 0;
	if (pd_is_dir(path))
		return 0;
	if (dir_only)
		return pd_errorf("%s %s: not a folder", flag, path);
	if (!pd_file_exists(path))
		return pd_errorf("%s %s: no such file or folder", flag, path);
	return 0;
}

void pd_model_encoder_names(int i, char *component, char *flag, int len)
{
	snprintf(component, (size_t)len, i ? "text_encoder_%d" : "text_encoder", i + 1);
	snprintf(flag, (size_t)len, i ? "--text-encoder-%d" : "--text-encoder", i + 1);
}

void pd_model_tokenizer_names(int i, char *component, char *flag, int len)
{
	snprintf(component, (size_t)len, i ? "tokenizer_%d" : "tokenizer", i + 1);
	snprintf(flag, (size_t)len, i ? "--tokenizer-%d" : "--tokenizer", i + 1);
}

/* The components: every field of P with its diffusers name, its flag's
 * value in F, its flag's name and whether only a folder will do. */
struct pd_model_part {
	char **field;
	const char *flag_value;
	char name[32], flag[48];
	int dir_only;
};

static int pd_model_parts(struct pd_model_paths *p, const struct pd_model_flags *f, struct pd_model_part *parts)
{
	int n = 0;

	parts[n++] = (struct pd_model_part){ &p->transformer, f->transformer, "transformer",
					     "--transformer/--diffusion-model", 0 };
	parts[n++] = (struct pd_model_part){ &p->vae, f->vae, "vae", "--vae", 0 };
	parts[n++] = (struct pd_model_part){ &p->scheduler, f->scheduler, "scheduler", "--scheduler", 1 };
	for (int i = 0; i < PD_MAX_ENCODERS; i++) {
		parts[n] = (struct pd_model_part){ &p->encoder[i], f->encoder[i], "", "", 0 };
		pd_model_encoder_names(i, parts[n].name, parts[n].flag, (int)sizeof(parts[n].name));
		n++;
		parts[n] = (struct pd_model_part){ &p->tokenizer[i], f->tokenizer[i], "", "", 1 };
		pd_model_tokenizer_names(i, parts[n].name, parts[n].flag, (int)sizeof(parts[n].name));
		n++;
	}
	return n;
}

int pd_model_paths_resolve(struct pd_model_paths *p, const struct pd_model_flags *f, int no_transformer)
{
	struct pd_model_part parts[3 + 2 * PD_MAX_ENCODERS];
	int n;

	memset(p, 0, sizeof(*p));
	n = pd_model_parts(p, f, parts);
	if (f->model) {
		struct pd_config idx;
		char *path;
		int rc = 0;

		if (!pd_is_dir(f->model) && pd_file_exists(f->model))
			/* stable-diffusion.cpp's -m takes one file: say where pdit takes it */
			return pd_errorf("--model %s: not a folder (--model takes a diffusers folder; a transformer in "
					 "one file goes to --diffusion-model, beside --vae and the text encoders' flags)",
					 f->model);
		if (!pd_is_dir(f->model))
			return pd_errorf("--model %s: no such folder", f->model);
		path = pd_strfmt("%s/model_index.json", f->model);
		if (!path)
			return -1;
		if (!pd_file_exists(path)) {
			rc = pd_errorf("%s: missing (a diffusers model folder has model_index.json)", path);
			free(path);
			return rc;
		}
		rc = pd_config_load(&idx, path);
		free(path);
		if (rc)
			return -1;
		p->root = pd_strdup(f->model);
		rc = !p->root;
		for (int i = 0; i < n && !rc; i++)
			rc = pd_model_component(&idx, f->model, parts[i].name, parts[i].field);
		pd_config_free(&idx);
		if (rc) {
			pd_model_paths_free(p);
			return -1;
		}
	}
	for (int i = 0; i < n; i++) {
		if (!parts[i].flag_value)
			continue;
		if (parts[i].field == &p->transformer && p->transformer && pd_is_dir(p->transformer)) {
			char *cfg = pd_strfmt("%s/config.json", p->transformer);

			if (cfg && pd_file_exists(cfg))
				p->folder_config = cfg;
			else
				free(cfg);
		}
		free(*parts[i].field);
		*parts[i].field = pd_strdup(parts[i].flag_value);
		if (!*parts[i].field)
			goto fail;
	}
	if (!p->transformer && !no_transformer) {
		pd_errorf(f->model ? "%s: model_index.json names no transformer" :
				     "give --model DIR, --transformer DIR or --diffusion-model FILE", f->model);
		goto fail;
	}
	for (int i = 0; i < n; i++)
		if (pd_model_check(parts[i].flag, *parts[i].field, parts[i].dir_only))
			goto fail;
	return 0;
fail:
	pd_model_paths_free(p);
	return -1;
}

int pd_model_paths_encoder(struct pd_model_paths *p, int i, const char *path, const char *flag, int given)
{
	char component[32], slot_flag[32];
	char *dup;

	pd_model_encoder_names(i, component, slot_flag, (int)sizeof(component));
	if (given)
		return pd_errorf("give each component once: %s or %s", slot_flag, flag);
	if (pd_model_check(flag, path, 0) || !(dup = pd_strdup(path)))
		return -1;
	free(p->encoder[i]);
	p->encoder[i] = dup;
	return 0;
}

void pd_model_paths_free(struct pd_model_paths *p)
{
	free(p->root);
	free(p->transformer);
	free(p->folder_config);
	free(p->config);
	free(p->vae);
	free(p->scheduler);
	for (int i = 0; i < PD_MAX_ENCODERS; i++) {
		free(p->encoder[i]);
		free(p->tokenizer[i]);
	}
	memset(p, 0, sizeof(*p));
}

void pd_lora_spec_parse(char *arg, struct pd_lora_spec *out)
{
	char *colon = strrchr(arg, ':'), *end;
	double v;

	out->path = arg;
	out->scale = 1.0f;
	if (!colon || colon == arg || !colon[1])
		return;
	errno = 0;
	v = strtod(colon + 1, &end);
	if (*end || errno || !isfinite(v))
		return;
	*colon = 0;
	out->scale = (float)v;
}
