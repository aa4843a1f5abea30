/*
 * pd_families.c - the table of model families. A new family adds its
 * record here (and its folder under model/).
 */
#include "pd_families.h"
#include "pd_config.h"
#include "pd_safetensors.h"
#include "pd_flux.h"
#include "pd_qwen.h"
#include "pd_wan.h"
#include "pd_util.h"

#include <stdio.h>
#include <string.h>

static const struct pd_dit_family *const pd_families[] = {
	&pd_flux_family,
	&pd_wan_family,
	&pd_qwen_family,
};

/* The class a transformer's config names (diffusers' _class_name), "" when
 * it names none or cannot be read: the family's probe says why. */
static void pd_family_class(const char *path, const char *config, char *cls, size_t n)
{
	struct pd_config c;
	const char *v = NULL;

	cls[0] = 0;
	if (config ? pd_config_load(&c, config)
		   : !pd_is_dir(path) ? -1 : pd_config_load_in(&c, path, "config.json", "transformer"))
		return;
	if (!pd_config_string(&c, "_class_name", 0, "", &v))
		snprintf(cls, n, "%s", v);
	pd_config_free(&c);
}

int pd_family_find(const char *path, const char *config, const struct pd_dit_family **fam, struct pd_dit_info *info)
{
	size_t n = sizeof(pd_families) / sizeof(pd_families[0]);
	const struct pd_dit_family *fallback = NULL;
	char cls[128];

	/* the config's class decides; a single file without one, its tensor
	 * names; else the family without a recogniser (FLUX: its loader infers
	 * a config from the shapes), whose message is the one given */
	*fam = NULL;
	pd_family_class(path, config, cls, sizeof(cls));
	for (size_t i = 0; i < n && !*fam && cls[0]; i++)
		for (const char *const *c = pd_families[i]->classes; c && *c; c++)
			if (strcmp(cls, *c) == 0)
				*fam = pd_families[i];
	if (!*fam && !cls[0] && !config && !pd_is_dir(path)) {
		struct pd_st *st = NULL;

		if (pd_st_open(&st, path))
			return -1;
		for (size_t i = 0; i < n && !*fam; i++)
			if (pd_families[i]->file_is && pd_families[i]->file_is(st))
				*fam = pd_families[i];
		pd_st_close(st);
	}
	for (size_t i = 0; i < n && !fallback; i++)
		if (!pd_families[i]->file_is)
			fallback = pd_families[i];
	if (!*fam)
		*fam = fallback;
	return (*fam)->probe(path, config, info);
}

const struct pd_dit_family *pd_family_at(int i)
{
	return i >= 0 && (size_t)i < sizeof(pd_families) / sizeof(pd_families[0]) ? pd_families[i] : NULL;
}

const struct pd_dit_family *pd_family_named(const char *name)
{
	char known[256] = "";
	size_t n = sizeof(pd_families) / sizeof(pd_families[0]);

	if (!name)
		return pd_families[0];
	for (size_t i = 0; i < n; i++) {
		if (strcmp(pd_families[i]->name, name) == 0)
			return pd_families[i];
		snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s", i ? ", " : "",
			 pd_families[i]->name);
	}
	pd_errorf("no model family '%s' (pdit knows %s)", name, known);
	return NULL;
}
