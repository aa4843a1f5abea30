/*
 * pd_families.c - the table of model families. A new family adds its
 * record here (and its folder under model/).
 */
#include "pd_families.h"
#include "pd_flux.h"
#include "pd_util.h"

#include <stdio.h>
#include <string.h>

static const struct pd_dit_family *const pd_families[] = {
	&pd_flux_family,
};

int pd_family_find(const char *path, const char *config, const struct pd_dit_family **fam, struct pd_dit_info *info)
{
	/* FLUX is the only family yet: its message is the one to give. With a
	 * second one this reads config.json's _class_name first. */
	for (size_t i = 0; i < sizeof(pd_families) / sizeof(pd_families[0]); i++) {
		if (pd_families[i]->probe(path, config, info) == 0) {
			*fam = pd_families[i];
			return 0;
		}
	}
	return -1;
}

const struct pd_dit_family *pd_family_named(const char *name)
{
	char known[256] = "";
	size_t n = sizeof(pd_families) / sizeof(pd_families[0]);

	for (size_t i = 0; i < n; i++) {
		if (strcmp(pd_families[i]->name, name) == 0)
			return pd_families[i];
		snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s", i ? ", " : "",
			 pd_families[i]->name);
	}
	pd_errorf("no model family '%s' (pdit knows %s)", name, known);
	return NULL;
}
