/*
 * pd_tokenizer.h - the two tokenizers of FLUX.1's text encoders, as
 * transformers' slow tokenizers (without ftfy) and sentencepiece compute
 * them:
 *
 *   CLIP (tokenizer/vocab.json + merges.txt): clean-up, CJK spacing, NFC,
 *   lower case, CLIP's pre-tokenizer pattern, byte-level BPE with "</w>"
 *   word ends, BOS and EOS, padded with the pad token to 77.
 *
 *   T5 (tokenizer_2/spiece.model): sentencepiece unigram with the model's
 *   precompiled normalizer (NFKC-based charsmap), the dummy prefix "▁",
 *   Viterbi segmentation, runs of <unk> merged, "</s>" appended, padded
 *   with <pad>.
 *
 * tests/golden/text-encoders-tiny/README.md gives every rule with its source
 * lines.
 */
#ifndef PD_TOKENIZER_H
#define PD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "pd_strmap.h"

struct pd_clip_tok {
	struct pd_strmap vocab;         /* BPE symbol (UTF-8 of byte stand-ins, "</w>" ends) -> id */
	struct pd_strmap ranks;         /* "first second" -> merge rank (line order) */
	int32_t bos, eos, pad;          /* <|startoftext|>, <|endoftext|>, the pad token */
	int max_len;                    /* model_max_length: 77 */
	char byte_sym[256][3];          /* each byte's stand-in character, UTF-8 */
	int byte_len[256];
};

/* Reads DIR/vocab.json, DIR/merges.txt and (when present) the special
 * tokens and length from tokenizer_config.json / special_tokens_map.json. */
int pd_clip_tok_load(struct pd_clip_tok *t, const char *dir);
void pd_clip_tok_free(struct pd_clip_tok *t);
/* The ids of TEXT (UTF-8) with BOS and EOS, not truncated: *IDS is
 * malloc'd, *N its length. */
int pd_clip_tok_encode(const struct pd_clip_tok *t, const char *text, int32_t **ids, size_t *n);

/* A sentencepiece unigram model. */
struct pd_t5_tok {
	int n_pieces;                   /* vocabulary size of the model file */
	float *score;                   /* [n_pieces] */
	int *type;                      /* [n_pieces]: 1 normal, 2 unknown, 3 control, 4 user-defined, ... */
	struct pd_strmap normal;        /* normal piece -> id (what segmentation may use) */
	int max_piece;                  /* longest normal piece in bytes */
	float min_score;                /* lowest normal score: <unk> costs min_score - 10 */
	int32_t unk, eos, pad;          /* ids of <unk>, </s>, <pad> */
	int byte_fallback;              /* unknown characters become their UTF-8 bytes' pieces (umT5's) */
	int32_t byte_id[256];           /* the piece "<0xNN>" of each byte, or -1 */
	int add_dummy_prefix;           /* normalizer flags (all true for T5) */
	int remove_extra_whitespaces;
	int escape_whitespaces;
	uint8_t *charsmap;              /* the precompiled normalizer: trie size, trie, replacements */
	size_t charsmap_len;
	const uint32_t *trie;           /* darts-clone double array inside charsmap */
	size_t trie_units;
	const char *repl;               /* NUL-terminated replacement strings */
	size_t repl_len;
};

/* Reads a sentencepiece model (DIR/spiece.model when PATH is a folder). */
int pd_t5_tok_load(struct pd_t5_tok *t, const char *path);
void pd_t5_tok_free(struct pd_t5_tok *t);
/* The normalized text (UTF-8 with "▁"), malloc'd. */
int pd_t5_tok_normalize(const struct pd_t5_tok *t, const char *text, char **out, size_t *len);
/* sentencepiece's ids of TEXT: no "</s>", not truncated; malloc'd. */
int pd_t5_tok_encode(const struct pd_t5_tok *t, const char *text, int32_t **ids, size_t *n);

/* The added tokens of a transformers tokenizer folder (its
 * tokenizer_config.json's added_tokens_decoder; none without one). */
struct pd_added_token {
	char *text;                     /* what the text must contain */
	size_t len;                     /* its bytes */
	int32_t id;                     /* the id it becomes */
	int lstrip, rstrip;             /* the text before / after it loses its whitespace there */
};
struct pd_added_tokens {
	int n;                          /* tokens */
	struct pd_added_token *tok;     /* [n] */
};
int pd_added_tokens_load(struct pd_added_tokens *a, const char *dir);
void pd_added_tokens_free(struct pd_added_tokens *a);
/* IDS of TEXT as a slow transformers tokenizer (legacy T5Tokenizer) gives
 * them: split on A's tokens, each other piece through pd_t5_tok_encode;
 * no "</s>" appended. */
int pd_t5_tok_encode_added(const struct pd_t5_tok *t, const struct pd_added_tokens *a, const char *text,
			   int32_t **ids, size_t *n);

/* Fits IDS (N of them, BOS/EOS already in place for CLIP) to LEN as the
 * pipelines do: cut to LEN - 1 and end with LAST (CLIP's EOS, T5's "</s>"
 * appended by the caller beforehand), or pad with PAD. OUT has LEN
 * entries. */
void pd_tok_fit(const int32_t *ids, size_t n, int32_t last, int32_t pad, int64_t *out, int len);

#endif /* PD_TOKENIZER_H */
