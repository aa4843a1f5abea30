/*
 * pd_families.h - the model families pdit knows, and which one a
 * transformer is: the one place that names them, so that the engine (and
 * everything below it but the families themselves) sees a model only
 * through pd_dit.h.
 */
#ifndef PD_FAMILIES_H
#define PD_FAMILIES_H

#include "pd_dit.h"

/* The family of the transformer at PATH (a folder or one file) and its
 * sizes; -1 with the message of the family that came nearest. */
int pd_family_find(const char *path, const char *config, const struct pd_dit_family **fam, struct pd_dit_info *info);

/* The family called NAME ("flux"; NULL: the first, FLUX), or NULL with a
 * message listing them. */
const struct pd_dit_family *pd_family_named(const char *name);
/* Family I of the table, or NULL past its end. */
const struct pd_dit_family *pd_family_at(int i);

#endif /* PD_FAMILIES_H */
