/*
 * pd_unicode.c - UTF-8 and the Unicode tables, through utf8proc.
 */
#include "pd_unicode.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int pd_utf8_decode(const char *s, size_t n, int32_t *cp)
{
	utf8proc_int32_t c;
	utf8proc_ssize_t len = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)(n > 4 ? 4 : n), &c);

	if (len <= 0 || c < 0) {
		*cp = 0xFFFD;
		return -1;
	}
	*cp = c;
	return (int)len;
}

int pd_utf8_encode(int32_t cp, char *out)
{
	return (int)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

enum pd_ucat pd_unicode_class(int32_t cp)
{
	switch (utf8proc_category(cp)) {
	case UTF8PROC_CATEGORY_LU:
	case UTF8PROC_CATEGORY_LL:
	case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM:
	case UTF8PROC_CATEGORY_LO:
		return PD_UCAT_LETTER;
	case UTF8PROC_CATEGORY_MN:
	case UTF8PROC_CATEGORY_MC:
	case UTF8PROC_CATEGORY_ME:
		return PD_UCAT_MARK;
	case UTF8PROC_CATEGORY_ND:
	case UTF8PROC_CATEGORY_NL:
	case UTF8PROC_CATEGORY_NO:
		return PD_UCAT_NUMBER;
	case UTF8PROC_CATEGORY_PC:
	case UTF8PROC_CATEGORY_PD:
	case UTF8PROC_CATEGORY_PS:
	case UTF8PROC_CATEGORY_PE:
	case UTF8PROC_CATEGORY_PI:
	case UTF8PROC_CATEGORY_PF:
	case UTF8PROC_CATEGORY_PO:
		return PD_UCAT_PUNCT;
	case UTF8PROC_CATEGORY_SM:
	case UTF8PROC_CATEGORY_SC:
	case UTF8PROC_CATEGORY_SK:
	case UTF8PROC_CATEGORY_SO:
		return PD_UCAT_SYMBOL;
	case UTF8PROC_CATEGORY_ZS:
		return PD_UCAT_SPACE;
	case UTF8PROC_CATEGORY_ZL:
	case UTF8PROC_CATEGORY_ZP:
		return PD_UCAT_SEPARATOR;
	default:
		return PD_UCAT_OTHER;
	}
}

char *pd_unicode_nfc(const char *s, size_t n)
{
	utf8proc_uint8_t *out = NULL;
	utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
					  UTF8PROC_STABLE | UTF8PROC_COMPOSE);

	if (r < 0) {
		pd_errorf("Unicode normalisation failed: %s", utf8proc_errmsg(r));
		return NULL;
	}
	return (char *)out;
}

/* Unicode's Cased property, near enough: letters with case. */
static int pd_unicode_cased(int32_t c)
{
	int cat = utf8proc_category(c);

	return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
	       utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
}

/* Unicode's Case_Ignorable: marks, format characters, modifiers, and the
 * word-internal punctuation of Word_Break MidLetter, MidNumLet and
 * Single_Quote. */
static int pd_unicode_case_ignorable(int32_t c)
{
	static const int32_t mid[] = { 0x27, 0x2E, 0x3A, 0xB7, 0x387, 0x55F, 0x5F4, 0x2018, 0x2019, 0x2024,
				       0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A };
	int cat = utf8proc_category(c);

	if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_CF ||
	    cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK)
		return 1;
	for (size_t i = 0; i < sizeof(mid) / sizeof(mid[0]); i++)
		if (c == mid[i])
			return 1;
	return 0;
}

size_t pd_unicode_lower(const int32_t *in, size_t n, int32_t *out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		int32_t c = in[i];

		if (c == 0x130) {
			out[k++] = 'i';
			out[k++] = 0x307;
		} else if (c == 0x3A3) {
			/* CPython's handle_capital_sigma: a cased letter before
			 * (skipping case-ignorables) and none after */
			size_t j = i;
			int final = 0;

			while (j > 0 && pd_unicode_case_ignorable(in[j - 1]))
				j--;
			if (j > 0 && pd_unicode_cased(in[j - 1])) {
				j = i + 1;
				while (j < n && pd_unicode_case_ignorable(in[j]))
					j++;
				final = j == n || !pd_unicode_cased(in[j]);
			}
			out[k++] = final ? 0x3C2 : 0x3C3;
		} else {
			out[k++] = utf8proc_tolower(c);
		}
	}
	return k;
}

int pd_unicode_is_space(int32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
	       c == 0x3000;
}

size_t pd_unicode_lstrip(const char *s, size_t start, size_t end)
{
	while (start < end) {
		int32_t cp;
		int l = pd_utf8_decode(s + start, end - start, &cp);

		if (l < 1 || !pd_unicode_is_space(cp))
			break;
		start += (size_t)l;
	}
	return start;
}

size_t pd_unicode_rstrip(const char *s, size_t start, size_t end)
{
	while (end > start) {
		size_t b = end - 1;
		int32_t cp;

		/* back to the lead byte of the last character */
		while (b > start && ((unsigned char)s[b] & 0xC0) == 0x80)
			b--;
		if (pd_utf8_decode(s + b, end - b, &cp) < 1 || !pd_unicode_is_space(cp))
			break;
		end = b;
	}
	return end;
}
