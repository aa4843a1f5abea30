/*
 * pd_model_paths.c - where a model's components live.
 */
#include "pd_model_paths.h"
#include "pd_config.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
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

int pd_model_paths_resolve(struct pd_model_paths *p, const struct pd_model_flags *f, int no_transformer)
{
	static const char *const names[] = { "transformer", "vae", "scheduler", "text_encoder", "text_encoder_2",
					     "tokenizer", "tokenizer_2" };
	char **fields[] = { &p->transformer, &p->vae, &p->scheduler, &p->text_encoder, &p->text_encoder_2,
			    &p->tokenizer, &p->tokenizer_2 };
	const char *flags[] = { f->transformer, f->vae, f->scheduler, f->text_encoder, f->text_encoder_2,
				f->tokenizer, f->tokenizer_2 };
	const int n = (int)(sizeof(names) / sizeof(names[0]));

	memset(p, 0, sizeof(*p));
	if (f->model) {
		struct pd_config idx;
		char *path;
		int rc = 0;

		if (!pd_is_dir(f->model))
			return pd_errorf("--model %s: not a folder", f->model);
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
			rc = pd_model_component(&idx, f->model, names[i], fields[i]);
		pd_config_free(&idx);
		if (rc) {
			pd_model_paths_free(p);
			return -1;
		}
	}
	for (int i = 0; i < n; i++) {
		if (!flags[i])
			continue;
		free(*fields[i]);
		*fields[i] = pd_strdup(flags[i]);
		if (!*fields[i])
			goto fail;
	}
	if (!p->transformer && !no_transformer) {
		pd_errorf(f->model ? "%s: model_index.json names no transformer" :
				     "give --model DIR, --transformer DIR or --diffusion-model FILE", f->model);
		goto fail;
	}
	if (pd_model_check("--transformer/--diffusion-model", p->transformer, 0) ||
	    pd_model_check("--vae", p->vae, 0) || pd_model_check("--scheduler", p->scheduler, 1) ||
	    pd_model_check("--text-encoder/--clip_l", p->text_encoder, 0) ||
	    pd_model_check("--text-encoder-2/--t5xxl", p->text_encoder_2, 0) ||
	    pd_model_check("--tokenizer", p->tokenizer, 1) || pd_model_check("--tokenizer-2", p->tokenizer_2, 1))
		goto fail;
	return 0;
fail:
	pd_model_paths_free(p);
	return -1;
}

void pd_model_paths_free(struct pd_model_paths *p)
{
	free(p->root);
	free(p->transformer);
	free(p->vae);
	free(p->scheduler);
	free(p->text_encoder);
	free(p->text_encoder_2);
	free(p->tokenizer);
	free(p->tokenizer_2);
	memset(p, 0, sizeof(*p));
}
