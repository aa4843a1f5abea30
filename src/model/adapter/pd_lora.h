/*
 * pd_lora.h - LoRA adapters: files in the layouts people download, resolved
 * against a model's linear layers and put beside them as they load.
 *
 *   struct pd_lora_spec spec = { "style.safetensors", 0.8f };
 *   pd_lora_set(dit, &spec, 1, 0);     // beside the loaded model's layers
 *   ...                                // run it
 *   pd_lora_set(dit, NULL, 0, 0);      // and without
 *
 * A layer of weight W acts as W + sum_i scale_i (alpha_i / rank_i) B_i A_i
 * (alpha = rank where a file has none, as PEFT reads it), computed beside
 * the layer as x A^T B^T (struct pd_backend_ops.linear_adapt), never merged:
 * kept-quantized weights stay as stored, the model is not copied, and a
 * long-lived engine can change adapters without reloading. Several adapters
 * on one layer are one term of their summed ranks.
 *
 * Layouts (told per key, so a file may mix them):
 * - diffusers / PEFT / ai-toolkit: `transformer.<module>.lora_A.weight`
 *   [r, in] and `.lora_B.weight` [out, r], with the model's own names;
 * - kohya sd-scripts: `lora_unet_<native module, '.' as '_'>.lora_down.weight`,
 *   `.lora_up.weight`, `.alpha` (and `lora_transformer_<module>` for
 *   diffusers names), where a fused native tensor (FLUX's q, k, v) shares
 *   one lora_down and its lora_up's rows split as the weight's do;
 * - the family's native names (Black Forest Labs' as ComfyUI saves them):
 *   `diffusion_model.<native module>.lora_A.weight`, `.lora_B.weight`, `.alpha`;
 *   fal's Kontext trainer writes them after `base_model.model.`;
 * - XLabs' (FLUX): `double_blocks.N.processor.qkv_lora1.down.weight`,
 *   `.up.weight`, no alpha: each processor name stands for a run of the
 *   model's layers (pd_dit_linear.alias; qkv_lora1 = to_q, to_k, to_v with
 *   up's rows stacked), as diffusers' _convert_xlabs_flux_lora_to_diffusers
 *   reads it.
 * A key no layer of the model has is refused with its name (or skipped,
 * lenient).
 *
 * Tensor parallel: a column-parallel layer's shard takes its rows of B, a
 * row-parallel one's its columns of A (the shards' terms add up in the
 * layer's reduction as its products do).
 */
#ifndef PD_LORA_H
#define PD_LORA_H

#include <stdint.h>

#include "pd_backend.h"
#include "pd_dit.h"
#include "pd_model_paths.h"

/* struct pd_lora_spec (an adapter file and its multiplier): pd_model_paths.h */

/* Adapters resolved against one model's layers. */
struct pd_lora;

/* Opens the files of SPECS[0..n) and matches every key to one of LAYERS
 * (the family's table, pd_dit_linear), checking shapes: 0, or -1 with one
 * message naming the file and key. LENIENT: keys of no layer are skipped
 * (listed at log level 2) instead. */
int pd_lora_resolve(struct pd_lora **out, const struct pd_lora_spec *specs, int n, const struct pd_dit_linear *layers,
		    int n_layers, int lenient);

/* Puts the adapters' term for layer NAME, part S of its weight (a
 * tensor-parallel shard), beside L, S's own layer (S's rows by S's columns:
 * the backend reads the term's arrays at L's sizes); nothing when no
 * adapter touches it.
 * 0, or -1 with a message (a NaN in an adapter names its file and key). */
int pd_lora_apply(struct pd_lora *lo, struct pd_backend *be, struct pd_linear *l, const char *name,
		  const struct pd_slice *s);

/* Puts the adapters SPECS[0..n) beside the layers model D holds (its
 * pd_dit_held, matched through its pd_dit_linear table), in place of those
 * there; n 0 removes them all. No reload: the layers' own weights are not
 * touched. 0, or -1 with one message and no adapter left on D. */
int pd_lora_set(struct pd_dit *d, const struct pd_lora_spec *specs, int n, int lenient);

void pd_lora_free(struct pd_lora *lo);

/* Adapter sets built before, their terms kept on the host up to a size
 * (the least recently used go first), so that a long-lived engine that
 * switches between sets puts one back without reading and checking its
 * files again. A set is its files (path, size, modification time: a file
 * changed on disk is read again), their scales and the leniency. */
struct pd_lora_cache;
int pd_lora_cache_new(struct pd_lora_cache **out, size_t max_bytes);
void pd_lora_cache_free(struct pd_lora_cache *c);
/* pd_lora_set through cache C (NULL: none): a set C holds is put back from
 * it (*HIT 1); another is built from its files and kept when it fits. */
int pd_lora_set_cached(struct pd_dit *d, struct pd_lora_cache *c, const struct pd_lora_spec *specs, int n, int lenient,
		       int *hit);
/* The bytes C's sets hold now. */
size_t pd_lora_cache_bytes(const struct pd_lora_cache *c);

/* What an adapter file holds, without a model (pdit inspect). */
struct pd_lora_about {
	char layout[64];                /* "kohya", "peft", "native" or several joined with '+' */
	int modules;                    /* modules with a low-rank pair */
	int rank_min, rank_max;         /* their ranks */
	int alphas;                     /* modules with an alpha */
	float alpha_min, alpha_max;     /* the alphas (when alphas > 0) */
	double params;                  /* values of all the pairs */
	int other;                      /* keys of no pair (refused unless lenient) */
	char first_other[128];          /* the first of them */
	char example[160];              /* one module's name as the file has it */
};
int pd_lora_describe(const char *path, struct pd_lora_about *a);

#endif /* PD_LORA_H */
