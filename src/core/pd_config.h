/*
 * pd_config.h - reading diffusers/transformers config.json files.
 *
 * Every size pdit uses comes from these files.  Getters report a missing or
 * mistyped key as "FILE: KEY ..." so a user sees which file to fix.  A JSON
 * null counts as absent (diffusers writes "out_channels": null).
 */
#ifndef PD_CONFIG_H
#define PD_CONFIG_H

#include <stdint.h>

struct pd_config {
	char *path;             /* file path, for messages */
	void *json;             /* parsed cJSON root object */
};

/* Parses TEXT; LABEL names it in messages (a file, a metadata key). */
int pd_config_parse(struct pd_config *c, const char *text, const char *label);
/* Reads and parses PATH (at most 16 MiB); the root must be an object. */
int pd_config_load(struct pd_config *c, const char *path);
/* Reads DIR/FILE; a missing file is reported as "DIR/FILE: missing (is DIR
 * a WHAT folder?)" so a user sees which folder is wrong. */
int pd_config_load_in(struct pd_config *c, const char *dir, const char *file, const char *what);
void pd_config_free(struct pd_config *c);

int pd_config_has(const struct pd_config *c, const char *key);
/* The object at KEY as a config of its own in *SUB (borrowing C's: free
 * C, not SUB). 0, or -1 with a message when it is absent or no object. */
int pd_config_object(const struct pd_config *c, const char *key, struct pd_config *sub);
/* Integer in [lo, hi]; when the key is absent, DEF is used unless
 * REQUIRED is set. */
int pd_config_int(const struct pd_config *c, const char *key, int required, int64_t def, int64_t lo,
		  int64_t hi, int64_t *out);
int pd_config_double(const struct pd_config *c, const char *key, int required, double def, double *out);
int pd_config_bool(const struct pd_config *c, const char *key, int required, int def, int *out);
/* String value (borrowed from the config); absent gives DEF. */
int pd_config_string(const struct pd_config *c, const char *key, int required, const char *def,
		     const char **out);
/* Array of integers, each in [lo, hi]; *n receives the count (at most max). */
/* Array of finite numbers; *n receives the count (at most max). */
int pd_config_double_array(const struct pd_config *c, const char *key, int max, double *out, int *n);
int pd_config_int_array(const struct pd_config *c, const char *key, int max, int64_t lo, int64_t hi,
			int64_t *out, int *n);

#endif /* PD_CONFIG_H */
