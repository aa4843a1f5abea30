/*
 * pd_engine_tools.h - what the commands reach the model families through
 * beyond pdit.h: `pdit tiny`'s random models and `pdit quantize`'s GGUF
 * conventions. Their arguments are pdit's internal types (tiny/pd_tiny.h,
 * io/pd_safetensors.h), so they are neither installed nor exported from
 * libpdit.so.
 */
#ifndef PD_ENGINE_TOOLS_H
#define PD_ENGINE_TOOLS_H

#include <stddef.h>

/* How the GGUF files of the family whose transformer the opened weights
 * ST hold are written (pdit quantize): ComfyUI-GGUF's convert.py and
 * city96's lcpp.patch, per family. All NULL when ST holds no transformer
 * pdit knows (a text encoder, a VAE). */
struct pd_st;
struct pd_gguf_rules {
	const char *arch;               /* general.architecture ("flux", "wan") */
	const char *const *keep_f32;    /* tensors whose names hold one of these stay F32 (NULL-ended) */
	const char *const *q_1;         /* weights whose names hold one of these take Q4_1/Q5_1 for
					 * Q4_0/Q5_0 (NULL-ended) */
};
void pd_weights_gguf_rules(const struct pd_st *st, struct pd_gguf_rules *r);

/* pdit tiny: a family's random model folders (tiny/pd_tiny.h has the
 * options). FAMILY NULL: the first. Its options' defaults (REAL: its real
 * widths with few blocks, bf16), or -1 with a message naming the families;
 * its own flags (NULL-named end); the folder DIR written. */
struct pd_tiny_opts;
struct pd_tiny_flag;
int pd_tiny_model_defaults(const char *family, int real, struct pd_tiny_opts *o);
const struct pd_tiny_flag *pd_tiny_model_flags(const char *family);
int pd_tiny_model(const char *family, const char *dir, const struct pd_tiny_opts *o);
/* What O makes of FAMILY, in a few words, into BUF. */
void pd_tiny_model_summary(const char *family, const struct pd_tiny_opts *o, char *buf, size_t len);

#endif /* PD_ENGINE_TOOLS_H */
