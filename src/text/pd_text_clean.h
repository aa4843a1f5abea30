/*
 * pd_text_clean.h - what pipelines do to a prompt before tokenizing it.
 *
 *   char *s;
 *   pd_html_unescape("Rock &amp;amp; roll", &s);   // "Rock &amp; roll"
 *
 * pd_html_unescape is Python's html.unescape (3.11): numeric references
 * (with Windows-1252's replacements, U+FFFD for surrogates and beyond
 * U+10FFFF, some code points dropped) and the WHATWG named references,
 * the longest known name when no ';' ends it. pd_whitespace_clean is
 * WanPipeline's whitespace_clean after strip(): every run of Unicode
 * White_Space becomes one space, and Python's str.strip() at both ends.
 */
#ifndef PD_TEXT_CLEAN_H
#define PD_TEXT_CLEAN_H

/* A named character reference (NAME without '&', with or without its
 * ';') and its UTF-8 text. */
struct pd_html_entity {
	const char *name;               /* "amp;", "amp" */
	const char *text;               /* "&" */
};
struct pd_html_charref {
	unsigned from, to;              /* &#FROM; gives TO */
};
extern const struct pd_html_entity pd_html_entities[]; /* sorted by name, bytewise */
extern const int pd_html_entity_count;
extern const struct pd_html_charref pd_html_charrefs[];
extern const int pd_html_charref_count;
extern const unsigned pd_html_dropped[];  /* &#N; of these gives nothing */
extern const int pd_html_dropped_count;

/* *OUT (malloc'd) = html.unescape(IN); -1 when out of memory. */
int pd_html_unescape(const char *in, char **out);

/* *OUT (malloc'd) = IN with White_Space runs as one space, stripped. */
int pd_whitespace_clean(const char *in, char **out);

#endif /* PD_TEXT_CLEAN_H */
