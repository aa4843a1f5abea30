/*
 * pd_model.c - where a model's components live.
 */
#include "pd_model.h"
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

int pd_model_paths_resolve(struct pd_model_paths *p, const char *model, const char *transformer, const char *vae,
			   const char *scheduler)
{
	memset(p, 0, sizeof(*p));
	if (model) {
		struct pd_config idx;
		char *path;
		int rc;

		if (!pd_is_dir(model))
			return pd_errorf("--model %s: not a folder", model);
		path = pd_strfmt("%s/model_index.json", model);
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
		p->root = pd_strdup(model);
		rc = !p->root || pd_model_component(&idx, model, "transformer", &p->transformer) ||
		     pd_model_component(&idx, model, "vae", &p->vae) ||
		     pd_model_component(&idx, model, "scheduler", &p->scheduler);
		pd_config_free(&idx);
		if (rc) {
			pd_model_paths_free(p);
			return -1;
		}
	}
#define OVERRIDE(field, flag) \
	do { \
		if (flag) { \
			free(p->field); \
			p->field = pd_strdup(flag); \
			if (!p->field) \
				goto fail; \
		} \
	} while (0)
	OVERRIDE(transformer, transformer);
	OVERRIDE(vae, vae);
	OVERRIDE(scheduler, scheduler);
#undef OVERRIDE
	if (!p->transformer) {
		pd_errorf(model ? "%s: model_index.json names no transformer" :
				  "give --model DIR or --transformer DIR", model);
		goto fail;
	}
	if (!pd_is_dir(p->transformer)) {
		pd_errorf("--transformer %s: not a folder", p->transformer);
		goto fail;
	}
	if (p->vae && !pd_is_dir(p->vae)) {
		pd_errorf("--vae %s: not a folder", p->vae);
		goto fail;
	}
	if (p->scheduler && !pd_is_dir(p->scheduler)) {
		pd_errorf("--scheduler %s: not a folder", p->scheduler);
		goto fail;
	}
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
	memset(p, 0, sizeof(*p));
}
