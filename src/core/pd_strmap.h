/*
 * pd_strmap.h - a hash map from byte strings to integers (vocabularies,
 * merge ranks): open addressing, keys copied in.
 */
#ifndef PD_STRMAP_H
#define PD_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct pd_strmap_slot {
	char *key;                      /* NULL: empty */
	uint32_t len;                   /* key bytes */
	uint32_t hash;                  /* FNV-1a of the key */
	int32_t value;
};

struct pd_strmap {
	struct pd_strmap_slot *slots;   /* cap slots, a power of two */
	size_t cap;
	size_t count;                   /* keys stored */
};

int pd_strmap_init(struct pd_strmap *m, size_t expected);
/* Stores KEY (LEN bytes) -> VALUE, replacing an earlier value. */
int pd_strmap_put(struct pd_strmap *m, const char *key, size_t len, int32_t value);
/* 1 and *VALUE when KEY is present, else 0. */
int pd_strmap_get(const struct pd_strmap *m, const char *key, size_t len, int32_t *value);
void pd_strmap_free(struct pd_strmap *m);

#endif /* PD_STRMAP_H */
