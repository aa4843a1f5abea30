/*
 * pd_strmap.c - string hash map.
 */
#include "pd_strmap.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

static uint32_t pd_strmap_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 16777619u;
	}
	return h;
}

int pd_strmap_init(struct pd_strmap *m, size_t expected)
{
	size_t cap = 16;

	while (cap < expected * 2)
		cap *= 2;
	memset(m, 0, sizeof(*m));
	m->slots = pd_calloc(cap, sizeof(*m->slots), "a string map");
	if (!m->slots)
		return -1;
	m->cap = cap;
	return 0;
}

static struct pd_strmap_slot *pd_strmap_find(const struct pd_strmap *m, const char *key, size_t len, uint32_t h)
{
	size_t i = h & (m->cap - 1);

	for (;;) {
		struct pd_strmap_slot *s = &m->slots[i];

		if (!s->key || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0))
			return s;
		i = (i + 1) & (m->cap - 1);
	}
}

static int pd_strmap_grow(struct pd_strmap *m)
{
	struct pd_strmap n;

	if (pd_strmap_init(&n, m->cap))
		return -1;
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].key)
			*pd_strmap_find(&n, m->slots[i].key, m->slots[i].len, m->slots[i].hash) = m->slots[i];
	n.count = m->count;
	free(m->slots);
	*m = n;
	return 0;
}

int pd_strmap_put(struct pd_strmap *m, const char *key, size_t len, int32_t value)
{
	uint32_t h = pd_strmap_hash(key, len);
	struct pd_strmap_slot *s;

	if ((m->count + 1) * 2 > m->cap && pd_strmap_grow(m))
		return -1;
	s = pd_strmap_find(m, key, len, h);
	if (!s->key) {
		s->key = pd_malloc(len + 1, "a string map key");
		if (!s->key)
			return -1;
		memcpy(s->key, key, len);
		s->key[len] = 0;
		s->len = (uint32_t)len;
		s->hash = h;
		m->count++;
	}
	s->value = value;
	return 0;
}

int pd_strmap_get(const struct pd_strmap *m, const char *key, size_t len, int32_t *value)
{
	const struct pd_strmap_slot *s;

	if (!m->cap)
		return 0;
	s = pd_strmap_find(m, key, len, pd_strmap_hash(key, len));
	if (!s->key)
		return 0;
	*value = s->value;
	return 1;
}

void pd_strmap_free(struct pd_strmap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i].key);
	free(m->slots);
	memset(m, 0, sizeof(*m));
}
