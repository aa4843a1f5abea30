/*
 * pd_config.c - reading config.json files.
 */
#include "pd_config.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int pd_config_parse(struct pd_config *c, const char *text, const char *label)
{
	cJSON *root = cJSON_Parse(text);

	memset(c, 0, sizeof(*c));
	if (!root || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return pd_errorf("%s: not a valid JSON object", label);
	}
	c->path = pd_strdup(label);
	if (!c->path) {
		cJSON_Delete(root);
		return -1;
	}
	c->json = root;
	return 0;
}

int pd_config_load(struct pd_config *c, const char *path)
{
	char *text;
	int rc;

	memset(c, 0, sizeof(*c));
	if (pd_read_file(path, 16u << 20, &text, NULL))
		return -1;
	rc = pd_config_parse(c, text, path);
	free(text);
	return rc;
}

int pd_config_load_in(struct pd_config *c, const char *dir, const char *file, const char *what)
{
	char *path = pd_strfmt("%s/%s", dir, file);
	int rc;

	memset(c, 0, sizeof(*c));
	if (!path)
		return -1;
	if (!pd_file_exists(path))
		rc = pd_errorf("%s: missing (is %s a %s folder?)", path, dir, what);
	else
		rc = pd_config_load(c, path);
	free(path);
	return rc;
}

void pd_config_free(struct pd_config *c)
{
	cJSON_Delete(c->json);
	free(c->path);
	memset(c, 0, sizeof(*c));
}

static const cJSON *pd_config_item(const struct pd_config *c, const char *key)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive((const cJSON *)c->json, key);

	return j && !cJSON_IsNull(j) ? j : NULL;
}

int pd_config_has(const struct pd_config *c, const char *key)
{
	return pd_config_item(c, key) != NULL;
}

int pd_config_object(const struct pd_config *c, const char *key, struct pd_config *sub)
{
	const cJSON *j = pd_config_item(c, key);

	if (!cJSON_IsObject(j))
		return pd_errorf("%s: %s %s", c->path, key, j ? "is not an object" : "missing");
	sub->path = c->path;
	sub->json = (void *)j;
	return 0;
}

int pd_config_int(const struct pd_config *c, const char *key, int required, int64_t def, int64_t lo,
		  int64_t hi, int64_t *out)
{
	const cJSON *j = pd_config_item(c, key);
	double v;

	if (!j) {
		if (required)
			return pd_errorf("%s: missing \"%s\"", c->path, key);
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble))
		return pd_errorf("%s: \"%s\" must be an integer", c->path, key);
	v = j->valuedouble;
	if (v < (double)lo || v > (double)hi)
		return pd_errorf("%s: \"%s\" is %.0f, outside [%lld, %lld]", c->path, key, v, (long long)lo,
				 (long long)hi);
	*out = (int64_t)v;
	return 0;
}

int pd_config_double(const struct pd_config *c, const char *key, int required, double def, double *out)
{
	const cJSON *j = pd_config_item(c, key);

	if (!j) {
		if (required)
			return pd_errorf("%s: missing \"%s\"", c->path, key);
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
		return pd_errorf("%s: \"%s\" must be a finite number", c->path, key);
	*out = j->valuedouble;
	return 0;
}

int pd_config_bool(const struct pd_config *c, const char *key, int required, int def, int *out)
{
	const cJSON *j = pd_config_item(c, key);

	if (!j) {
		if (required)
			return pd_errorf("%s: missing \"%s\"", c->path, key);
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(j))
		return pd_errorf("%s: \"%s\" must be true or false", c->path, key);
	*out = cJSON_IsTrue(j);
	return 0;
}

int pd_config_string(const struct pd_config *c, const char *key, int required, const char *def,
		     const char **out)
{
	const cJSON *j = pd_config_item(c, key);

	if (!j) {
		if (required)
			return pd_errorf("%s: missing \"%s\"", c->path, key);
		*out = def;
		return 0;
	}
	if (!cJSON_IsString(j))
		return pd_errorf("%s: \"%s\" must be a string", c->path, key);
	*out = j->valuestring;
	return 0;
}

int pd_config_int_array(const struct pd_config *c, const char *key, int max, int64_t lo, int64_t hi,
			int64_t *out, int *n)
{
	const cJSON *j = pd_config_item(c, key), *e;
	int k = 0;

	if (!j)
		return pd_errorf("%s: missing \"%s\"", c->path, key);
	if (!cJSON_IsArray(j))
		return pd_errorf("%s: \"%s\" must be an array of integers", c->path, key);
	if (cJSON_GetArraySize(j) > max || cJSON_GetArraySize(j) == 0)
		return pd_errorf("%s: \"%s\" must have 1 to %d entries", c->path, key, max);
	cJSON_ArrayForEach(e, j) {
		if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < (double)lo ||
		    e->valuedouble > (double)hi)
			return pd_errorf("%s: \"%s\" entries must be integers in [%lld, %lld]", c->path, key,
					 (long long)lo, (long long)hi);
		out[k++] = (int64_t)e->valuedouble;
	}
	*n = k;
	return 0;
}

int pd_config_double_array(const struct pd_config *c, const char *key, int max, double *out, int *n)
{
	const cJSON *j = pd_config_item(c, key), *e;
	int k = 0;

	if (!j)
		return pd_errorf("%s: missing \"%s\"", c->path, key);
	if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) > max || cJSON_GetArraySize(j) == 0)
		return pd_errorf("%s: \"%s\" must be an array of 1 to %d numbers", c->path, key, max);
	cJSON_ArrayForEach(e, j) {
		if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
			return pd_errorf("%s: \"%s\" entries must be finite numbers", c->path, key);
		out[k++] = e->valuedouble;
	}
	*n = k;
	return 0;
}
