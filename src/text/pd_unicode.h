/*
 * pd_unicode.h - the Unicode the tokenizers need: UTF-8 decoding, general
 * categories, NFC and lower-casing as Python's str.lower() does it. Only
 * this file's implementation calls utf8proc.
 */
#ifndef PD_UNICODE_H
#define PD_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point from S (N bytes left) into *CP; returns its length
 * in bytes, or -1 for a malformed sequence (then *CP = U+FFFD, length 1 is
 * how far to skip). */
int pd_utf8_decode(const char *s, size_t n, int32_t *cp);
/* Writes CP as UTF-8 into OUT (4 bytes room); returns the length. */
int pd_utf8_encode(int32_t cp, char *out);

/* General category classes. */
enum pd_ucat {
	PD_UCAT_LETTER,                 /* Lu Ll Lt Lm Lo */
	PD_UCAT_MARK,                   /* Mn Mc Me */
	PD_UCAT_NUMBER,                 /* Nd Nl No */
	PD_UCAT_PUNCT,                  /* P* */
	PD_UCAT_SYMBOL,                 /* S* */
	PD_UCAT_SPACE,                  /* Zs */
	PD_UCAT_SEPARATOR,              /* Zl Zp */
	PD_UCAT_OTHER                   /* C*: control, format, surrogate, private use, unassigned */
};
enum pd_ucat pd_unicode_class(int32_t cp);

/* NFC of the UTF-8 string S (N bytes) as a new NUL-terminated string, or
 * NULL with a message. */
char *pd_unicode_nfc(const char *s, size_t n);

/* Python's str.lower() of the code points IN[0..n): simple lower-case
 * mappings, U+0130 to "i" + U+0307, and capital sigma to final sigma at the
 * end of a word. OUT needs room for 2n code points; returns the count. */
size_t pd_unicode_lower(const int32_t *in, size_t n, int32_t *out);

/* Python's str.isspace(). */
int pd_unicode_is_space(int32_t cp);
/* Python's str.lstrip() / rstrip() on S[start, end) (UTF-8): the first
 * position after the leading whitespace, the end before the trailing. */
size_t pd_unicode_lstrip(const char *s, size_t start, size_t end);
size_t pd_unicode_rstrip(const char *s, size_t start, size_t end);

#endif /* PD_UNICODE_H */
