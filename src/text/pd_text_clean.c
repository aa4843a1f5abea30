/*
 * pd_text_clean.c - html.unescape and whitespace_clean (pd_text_clean.h).
 */
#include "pd_text_clean.h"
#include "pd_unicode.h"
#include "pd_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The entity whose name is S[0..n), or NULL. */
static const struct pd_html_entity *pd_html_find(const char *s, size_t n)
{
	int lo = 0, hi = pd_html_entity_count - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2, c = strncmp(pd_html_entities[mid].name, s, n);

		if (c == 0 && pd_html_entities[mid].name[n])
			c = 1;
		if (c == 0)
			return &pd_html_entities[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static int pd_is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A numeric reference's replacement into O (html._replace_charref);
 * returns its length. DIGITS overflowing count as beyond U+10FFFF. */
static int pd_html_number(const char *d, size_t n, int hex, char *o)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++) {
		int x = d[i] <= '9' ? d[i] - '0' : (d[i] | 0x20) - 'a' + 10;

		v = v * (hex ? 16 : 10) + (uint64_t)x;
		if (v > 0x10FFFF)
			v = 0x110000;
	}
	for (int i = 0; i < pd_html_charref_count; i++)
		if (pd_html_charrefs[i].from == v)
			return pd_utf8_encode((int32_t)pd_html_charrefs[i].to, o);
	if ((v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
		return pd_utf8_encode(0xFFFD, o);
	for (int i = 0; i < pd_html_dropped_count; i++)
		if (pd_html_dropped[i] == v)
			return 0;
	return pd_utf8_encode((int32_t)v, o);
}

int pd_html_unescape(const char *in, char **out)
{
	size_t n = strlen(in), w = 0;
	/* a replacement is never longer than what it replaces, but for
	 * "&#N" (3 bytes, up to 4 out) and named ones without ';' */
	char *o = pd_malloc(2 * n + 8, "unescaping the prompt");

	*out = NULL;
	if (!o)
		return -1;
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;

		if (in[i] != '&' || j >= n) {
			o[w++] = in[i++];
			continue;
		}
		if (in[j] == '#') {
			int hex = j + 1 < n && (in[j + 1] == 'x' || in[j + 1] == 'X');
			size_t d0 = j + 1 + (size_t)hex, d = d0;

			while (d < n && (hex ? pd_is_hex(in[d]) : (in[d] >= '0' && in[d] <= '9')))
				d++;
			if (d == d0) {
				o[w++] = in[i++];
				continue;
			}
			w += (size_t)pd_html_number(in + d0, d - d0, hex, o + w);
			i = d + (d < n && in[d] == ';');
			continue;
		}
		/* [^\t\n\f <&#;]{1,32};? */
		{
			size_t e = j, len;
			const struct pd_html_entity *ent;

			while (e < n && e - j < 32 && !strchr("\t\n\f <&#;", in[e]))
				e++;
			if (e == j) {
				o[w++] = in[i++];
				continue;
			}
			if (e < n && in[e] == ';')
				e++;
			len = e - j;
			ent = pd_html_find(in + j, len);
			/* else the longest name that is a prefix (at least 2) */
			for (size_t x = len - 1; !ent && x > 1; x--) {
				ent = pd_html_find(in + j, x);
				if (ent)
					len = x;
			}
			if (!ent) {
				memcpy(o + w, in + i, e - i);
				w += e - i;
			} else {
				size_t tl = strlen(ent->text);

				memcpy(o + w, ent->text, tl);
				w += tl;
				memcpy(o + w, in + j + len, e - j - len);
				w += e - j - len;
			}
			i = e;
		}
	}
	o[w] = 0;
	*out = o;
	return 0;
}

/* Unicode White_Space (what the regex module's \s matches in text). */
static int pd_is_white_space(int32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
	       c == 0x3000;
}

int pd_whitespace_clean(const char *in, char **out)
{
	size_t n = strlen(in), w = 0, i = 0, start, end;
	char *o = pd_malloc(n + 1, "cleaning the prompt");
	int space = 0;

	*out = NULL;
	if (!o)
		return -1;
	while (i < n) {
		int32_t cp;
		int l = pd_utf8_decode(in + i, n - i, &cp);

		if (l < 1)
			l = 1;
		if (pd_is_white_space(cp)) {
			space = 1;
		} else {
			if (space)
				o[w++] = ' ';
			space = 0;
			memcpy(o + w, in + i, (size_t)l);
			w += (size_t)l;
		}
		i += (size_t)l;
	}
	if (space)
		o[w++] = ' ';
	o[w] = 0;
	/* str.strip(): isspace() at both ends (a few more than White_Space) */
	start = pd_unicode_lstrip(o, 0, w);
	end = pd_unicode_rstrip(o, start, w);
	memmove(o, o + start, end - start);
	o[end - start] = 0;
	*out = o;
	return 0;
}
