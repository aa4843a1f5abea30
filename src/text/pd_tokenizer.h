/*
 * pd_tokenizer.h - the tokenizers of the text encoders, as transformers'
 * slow tokenizers (without ftfy) and sentencepiece compute them:
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
 *   Qwen2 (Qwen-Image's tokenizer/: vocab.json + merges.txt +
 *   tokenizer_config.json, or tokenizer.json): added tokens matched whole,
 *   NFC, Qwen2's pre-tokenizer pattern, byte-level BPE without word ends,
 *   nothing added around the text.
 *
 * tests/golden/text-encoders-tiny/README.md gives every rule with its source
 * lines.
 */
#ifndef PD_TOKENIZER_H
#define PD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "pd_strmap.h"

struct cJSON;

/* A list of token ids being built. */
struct pd_ids {
	int32_t *v;                     /* malloc'd */
	size_t n, cap;
};
int pd_ids_push(struct pd_ids *ids, int32_t id);

/* What the byte-level BPE tokenizers share (pd_tok_bpe.c). */
struct pd_bpe {
	struct pd_strmap vocab;         /* BPE symbol (UTF-8 of byte stand-ins) -> id */
	struct pd_strmap ranks;         /* "first second" -> merge rank (line order) */
	size_t n_merges;                /* merges read */
	char byte_sym[256][3];          /* each byte's stand-in character, UTF-8 */
	int byte_len[256];
};
/* The byte stand-ins (GPT-2's bytes_to_unicode), no vocabulary yet. */
void pd_bpe_init(struct pd_bpe *b);
void pd_bpe_free(struct pd_bpe *b);
/* VOCAB (a JSON object of symbol -> id) into B; PATH names it in messages. */
int pd_bpe_vocab_json(struct pd_bpe *b, const struct cJSON *vocab, const char *path);
/* PATH's merges ("#version" line, then "first second" a line), at most
 * MAX_MERGES of them (0: all); or one merge LINE of N bytes. */
int pd_bpe_merges_txt(struct pd_bpe *b, const char *path, int max_merges);
int pd_bpe_merge_line(struct pd_bpe *b, const char *line, size_t n, const char *path);
/* The ids of one pre-token, its UTF-8 bytes S[0..n): each byte as its
 * stand-in, merged by rank (SUFFIX, may be NULL, appended to the last
 * character first: CLIP's "</w>"); a symbol not in the vocabulary becomes
 * UNK. Appended to IDS. */
int pd_bpe_word(const struct pd_bpe *b, const char *s, size_t n, const char *suffix, int32_t unk, struct pd_ids *ids);

struct pd_clip_tok {
	struct pd_bpe bpe;              /* vocabulary ("</w>" ends words) and merges */
	int32_t bos, eos, pad;          /* <|startoftext|>, <|endoftext|>, the pad token */
	int max_len;                    /* model_max_length: 77 */
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
/* TEXT split on A's tokens as the slow tokenizers split it, each other
 * piece (NUL-terminated) appended to IDS by ENCODE(CTX, piece, ids). */
int pd_added_encode(const struct pd_added_tokens *a, const char *text,
		    int (*encode)(const void *ctx, const char *piece, struct pd_ids *ids), const void *ctx,
		    struct pd_ids *ids);

/* Qwen2's tokenizer (transformers' Qwen2Tokenizer). */
struct pd_qwen_tok {
	struct pd_bpe bpe;              /* vocabulary and merges */
	struct pd_added_tokens added;   /* <|endoftext|>, <|im_start|>, ...: matched whole first */
	int32_t pad;                    /* pad_token (<|endoftext|>), or -1 */
};
/* DIR/vocab.json, merges.txt and tokenizer_config.json (its added tokens
 * and pad_token), or DIR/tokenizer.json alone. */
int pd_qwen_tok_load(struct pd_qwen_tok *t, const char *dir);
void pd_qwen_tok_free(struct pd_qwen_tok *t);
/* The ids of TEXT (UTF-8), nothing added around them; *IDS malloc'd. */
int pd_qwen_tok_encode(const struct pd_qwen_tok *t, const char *text, int32_t **ids, size_t *n);

/* Fits IDS (N of them, BOS/EOS already in place for CLIP) to LEN as the
 * pipelines do: cut to LEN - 1 and end with LAST (CLIP's EOS, T5's "</s>"
 * appended by the caller beforehand), or pad with PAD. OUT has LEN
 * entries. */
void pd_tok_fit(const int32_t *ids, size_t n, int32_t last, int32_t pad, int64_t *out, int len);

#endif /* PD_TOKENIZER_H */
