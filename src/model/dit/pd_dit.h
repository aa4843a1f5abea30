/*
 * pd_dit.h - a diffusion transformer as everything outside the model sees
 * it: the parallel methods, First Block Cache, the denoising loop and the
 * planner know a model only through this header.
 *
 *   struct pd_dit_info info;
 *   pd_flux_dit_info(&fc, &info);                  // a family's sizes
 *   struct pd_dit_shard sh = { .rank = 0, .count = 1 };
 *   struct pd_dit *d;
 *   pd_flux_load_dit(&d, "model/transformer", NULL, be, &sh);
 *   struct pd_dit_call call = { .txt_len = T, .img_len = L, ... };
 *   pd_dit_forward(d, &call, out, NULL);            // out: [L, out_channels]
 *   pd_dit_free(d);
 *
 * A model is a sequence of blocks over a hidden state of `dim` channels
 * per token; the tokens are text rows first, then image rows. A call runs
 * one image (batch 1): a batch is a loop, which keeps every image
 * bit-identical to its batch-1 run and maps directly onto data and CFG
 * parallelism. Position ids are given per token, n_axes of them.
 */
#ifndef PD_DIT_H
#define PD_DIT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pd_backend.h"
#include "pd_dump.h"

/* Blocks a model may have (FLUX.1: 57); more are refused with a message. */
#define PD_DIT_MAX_BLOCKS 256

/* Sizes of a model as the outside needs them. */
struct pd_dit_info {
	int in_channels;                /* channels of an image token in (packed latents) */
	int out_channels;               /* prediction channels of an image token */
	int txt_width;                  /* channels of a text token in (prompt embeddings) */
	int pooled_width;               /* channels of the pooled embedding (0: none) */
	int n_axes;                     /* position ids per token */
	int dim;                        /* hidden channels per token */
	int heads, head_dim;            /* attention heads and channels per head */
	int mlp_width;                  /* the widest activation a token has inside a block (the MLP's) */
	int blocks;                     /* blocks, in forward order */
	int guidance;                   /* takes a distilled guidance scale */
	int txt_context;                /* the text is a context every image token reads whole (Wan's
					 * cross-attention), not rows of the attention sequence (FLUX's
					 * joint attention): sequence parallelism gives it to every rank */
	/* Per block, what PipeFusion cuts stages by and what the planner
	 * counts (every block attends once over the whole sequence): */
	double block_cost[PD_DIT_MAX_BLOCKS];   /* FLOPs per token of its linear layers */
	double block_params[PD_DIT_MAX_BLOCKS]; /* its weights, all of them split by tensor parallel */
	int block_reduces[PD_DIT_MAX_BLOCKS];   /* row-parallel sums per call (and as many gathers) */
	/* floats per token its row-parallel layers take in: what they gather
	 * with whole inputs (pd_dit_shard.whole_inputs); 0 in every block: the
	 * family has no such form and always sums its shards */
	double block_row_inputs[PD_DIT_MAX_BLOCKS];
	int block_row_gathers[PD_DIT_MAX_BLOCKS]; /* and the gathers of those inputs per call */
	int block_passes[PD_DIT_MAX_BLOCKS];    /* elementwise passes over a row of its stream */
	/* Per block, small all-reduces over the tensor-parallel shards besides
	 * the row-parallel sums (Wan's RMSNorm across heads adds its rows'
	 * sums of squares): how many, and the floats they carry per image and
	 * per text row (with whole inputs, each such sum's row is gathered
	 * whole instead, dim floats). */
	int tp_norm_reduces;
	double tp_norm_img, tp_norm_txt;
	double fixed_params;            /* weights outside the blocks, held whole (embedders, final layers) */
	double img_flops, txt_flops;    /* FLOPs per image token and per text token outside the blocks */
	double call_flops;              /* FLOPs per call that do not grow with the tokens (modulations) */
	/* Weights a single file keeps in a block format (GGUF, fp8): held as
	 * stored, the others in the compute precision (pd_dit_weight_bytes). */
	double kept_fraction;           /* of the linear layers' weights, by count (0: none) */
	double kept_bytes;              /* bytes per kept weight, averaged */
	double kept_bytes_stored;       /* kept_bytes as the file stores them where auto's int8 layout
					 * holds more (0: no such layout): a run decodes them instead
					 * where only the file's fit, and the planner counts that */
	int tp_whole_inputs;            /* tensor parallel runs with whole inputs (pd_dit_shard.whole_inputs):
					 * the engine's choice, which the planner counts */
	int ring_gathered;              /* ring attention in its gathered form (pd_par_options.ring_gathered):
					 * 1 auto's choice for int8 products, 2 asked for (--ring-attention
					 * gathered), 0 merged; the engine's choice, which the planner counts */
	double int8_fraction;           /* of the kept weights, by count, those whose products are int8
					 * (the engine's choice; 0: none), which the planner times */
	int int8_type;                  /* the block format (enum pd_qtype) of most of them */
};

/* INFO as auto's fallback where only the file's blocks fit in memory
 * (kept_bytes_stored > 0): the kept weights held as stored and decoded
 * for their products, so no int8 layers and tensor parallel summing its
 * shards. */
static inline void pd_dit_info_as_stored(struct pd_dit_info *info)
{
	info->kept_bytes = info->kept_bytes_stored;
	info->kept_bytes_stored = 0;
	info->int8_fraction = 0;
	info->tp_whole_inputs = 0;
	/* auto's gathered ring was for the int8 products */
	if (info->ring_gathered == 1)
		info->ring_gathered = 0;
}

/* Bytes a weight takes as the backend holds it, averaged: the kept ones as
 * stored, the others at PLAIN (the compute precision's size). */
static inline double pd_dit_weight_bytes(const struct pd_dit_info *info, double plain)
{
	return info->kept_fraction * info->kept_bytes + (1 - info->kept_fraction) * plain;
}

/* Floating-point operations of one call on T text and L image tokens: the
 * matrix products of every linear layer (2 m n k each) and of attention
 * (4 S^2 dim per block); elementwise work is not counted. */
struct pd_dit_flops {
	double linear;                  /* linear layers */
	double attention;               /* Q K^T and P V */
};
struct pd_dit_flops pd_dit_count_flops(const struct pd_dit_info *info, int64_t T, int64_t L);

/* One linear layer of a model as single files and adapters name it: the
 * name the model loads it by (diffusers'), and where the family's own
 * checkpoint layout keeps it (Black Forest Labs' for FLUX: perhaps a part
 * of a fused tensor, perhaps with its halves swapped). A family lists
 * every linear layer of a model this way (pd_flux_linears). */
struct pd_dit_linear {
	char name[96];                  /* the model's name, without ".weight" */
	char native[96];                /* the tensor holding it in the family's layout, without ".weight" */
	int64_t r0;                     /* its first row there */
	int64_t native_rows;            /* that tensor's rows (several layers' when fused) */
	int64_t n_out, n_in;            /* its weight's shape */
	int64_t roll;                   /* its row r is the native row r0 + (r + roll) mod n_out */
	char alias[64];                 /* the module name XLabs' adapters give the run of layers this
					 * one begins ("double_blocks.0.processor.qkv_lora1": to_q, to_k,
					 * to_v, their up matrices stacked, as diffusers converts them),
					 * or "" */
	int alias_count;                /* the layers of that run, in this table's order */
};

/* A linear layer loaded here, as adapters find it again (pd_lora_set). */
struct pd_dit_held {
	char name[96];                  /* the model's name for it (pd_dit_linear.name) */
	struct pd_slice s;              /* the part of its weight held here (a shard's) */
	struct pd_linear *l;            /* the backend's layer (freed with the model) */
	int adapted;                    /* an adapter's term is beside it */
};

/* The share of the model one process holds. Tensor parallel: shard RANK of
 * COUNT owns heads [RANK H/COUNT, (RANK+1) H/COUNT) and the same part of
 * every other split width (the family decides which rows and columns of
 * which weights that is, and adds a row-parallel bias on shard 0 only).
 * Pipeline stages: blocks [block_first, block_first + block_count); 0
 * blocks means all. */
struct pd_dit_shard {
	int rank;                       /* this process's shard */
	int count;                      /* shards (the tensor-parallel degree) */
	int block_first, block_count;   /* the stage's blocks; block_count 0: block_first to the last */
	/* The blocks' weights a file stores as plain floats, encoded at load
	 * into this block type and kept so (pdit --quantize); PD_Q_F32 (0):
	 * as stored. */
	enum pd_qtype quantize;
	/* Row-parallel layers take their whole input rows, gathered from every
	 * shard, and hold a share of the output rows (pd_dit_rows_in and
	 * pd_dit_rows_out): each output sums its inputs as one process does.
	 * Set for int8 products, whose 8-bit rounding of the next layer's input
	 * can turn a last-bit difference of a sum over shards into a step of
	 * 1/127 of a block. 0: a shard holds a share of the input columns and
	 * the partial outputs are summed over the shards. Only a family whose
	 * info has block_row_inputs reads it. */
	int whole_inputs;
};

/* First Block Cache (ParaAttention's): after the first block, r = its
 * change of the image tokens; when mean|r_ref - r| / mean|r_ref| is below
 * the threshold, r_ref being r at the last fully computed step, the other
 * blocks are skipped and their stored effect (output minus input at that
 * step) is added instead. The two sums are added over every process of the
 * call first (pd_dit_hooks.sum), so all of them decide alike. One state per
 * image and branch (the positive and negative passes differ). Host memory.
 * PipeFusion keeps the arrays across its stages itself and decides through
 * pd_fbcache_decide. */
struct pd_fbcache {
	float threshold;                /* 0: never skip (the cache only records) */
	int64_t rows;                   /* image rows the buffers hold */
	float *r_ref;                   /* [rows, D] first block's change at the last computed step */
	float *r;                       /* [rows, D] this step's */
	float *rest;                    /* [rows, D] the other blocks' effect at the last computed step */
	int valid;                      /* a step has been decided to be computed: r_ref holds its
					 * change (rest its blocks' effect once they have run) */
	int computed, skipped;          /* steps run and steps skipped */
	double last_change;             /* the last measure, for the log */
};

/* Frees the buffers (not C itself); the threshold and counters stay. */
void pd_fbcache_free(struct pd_fbcache *c);

/* The cache's decision from the two sums over the call's rows (SUMS[0] =
 * sum |r_ref - r|, SUMS[1] = sum |r_ref|, already added over every process
 * of the call): 1 to skip the other blocks, 0 to compute them. Counts the
 * step as skipped or computed; a computed step makes the cache valid. The
 * caller swaps r into r_ref on a computed step. */
int pd_fbcache_decide(struct pd_fbcache *c, const double *sums);

/* One call of the model: one image, one branch, one step. */
struct pd_dit_call {
	int64_t txt_len;                /* text tokens */
	int64_t img_len;                /* image tokens */
	const float *img;               /* [img_len, in_channels] packed latents */
	const float *txt;               /* [txt_len, txt_width] prompt embeddings */
	const float *pooled;            /* [pooled_width] pooled embedding */
	const float *img_ids;           /* [img_len, n_axes] position ids */
	const float *txt_ids;           /* [txt_len, n_axes] position ids */
	float timestep;                 /* what the pipeline passes: t / 1000 */
	float guidance;                 /* distilled guidance scale; ignored without info.guidance */
	struct pd_fbcache *cache;       /* First Block Cache state, or NULL */
	/* Which call this is, for methods that keep state from one step to
	 * the next (DistriFusion, PipeFusion): */
	int step;                       /* denoising step */
	int64_t image;                  /* image of the batch */
	int branch;                     /* 1 positive, 0 negative (true CFG) */
	/* A part of a larger call (a sequence-parallel chunk, a PipeFusion
	 * piece): the call it was cut from, and where this call's rows lie in
	 * it. NULL: the call is whole. */
	const struct pd_dit_call *whole;
	int64_t txt0, img0;             /* first text and image row in WHOLE (not the root) */
};
/* A part points txt, img and the ids at its own rows and keeps the step,
 * image and branch of the call it was cut from. */

/* The outermost call this one was cut from. */
static inline const struct pd_dit_call *pd_dit_call_root(const struct pd_dit_call *c)
{
	while (c->whole)
		c = c->whole;
	return c;
}

/* The seams where parallel methods attach; any may be NULL. Each returns 0
 * or -1 with a message. */
struct pd_dit_hooks {
	/* Attention for this process's ROWS tokens of CALL: q, k, v [rows,
	 * heads x head_dim] (row stride ld, positions applied) against the
	 * whole sequence; OUT gets [rows, heads x head_dim] with row stride
	 * ldo. HEADS are the heads this shard holds. LAYER counts the blocks
	 * from 0. NULL: the local sequence is the whole sequence. */
	int (*attention)(void *ctx, struct pd_backend *be, const struct pd_dit_call *call, int layer, float *out,
			 int64_t ldo, const float *q, const float *k, const float *v, int64_t ld, int64_t rows,
			 int heads, int head_dim);
	void *attention_ctx;
	/* Sums row-parallel partial results over the shards, in place. BUF
	 * (and PART, OUT below) are the model's backend's memory. */
	int (*reduce)(void *ctx, float *buf, size_t n);
	/* Gathers column-parallel parts of N floats, in shard order, into OUT. */
	int (*gather)(void *ctx, const float *part, size_t n, float *out);
	void *shard_ctx;
	/* Adds N doubles over every process taking part in this call (First
	 * Block Cache's statistics), in place; NULL: this process alone. */
	int (*sum)(void *ctx, double *buf, size_t n);
	void *sum_ctx;
};

/* Latent geometry of one picture or video: the VAE's latent [channels,
 * frames, h, w] and the transformer's tokens of it. */
struct pd_latent_shape {
	int channels;                   /* latent channels C */
	int frames;                     /* latent frames (1: a picture) */
	int h, w;                       /* latent rows and columns */
	int64_t tokens;                 /* image tokens L */
	int packed_channels;            /* channels of a token's latents (the model's out_channels) */
	int cond_channels;              /* channels the transformer takes after a token's latents, the
					 * pipeline's conditioning of every call (FLUX.1 Fill's masked
					 * picture and mask); 0: none (in_channels = packed_channels) */
};

/* What a family's pipeline does around its transformer: how a latent
 * becomes tokens and where each token sits. Every function is given sizes
 * that latent_shape accepted. */
struct pd_dit;
struct pd_embeds;
struct pd_model_paths;
struct pd_vae_kind;

/* How a family's pipeline runs a model when the request does not say:
 * its steps and its flow-matching schedule (as the published scheduler
 * folder sets it, for a model given without one). */
/* A size a model card recommends for an aspect ratio. */
struct pd_dit_size {
	const char *aspect;             /* "16:9": width to height */
	int width, height;              /* pixels, multiples of 16 */
};

struct pd_dit_defaults {
	int steps;                      /* denoising steps */
	double shift;                   /* static sigma shift */
	int dynamic_shift;              /* shift by the image token count instead (mu) */
	double base_shift, max_shift;   /* mu at base_seq and at max_seq image tokens */
	double base_seq, max_seq;       /* the token counts of base_shift and max_shift */
	double shift_terminal;          /* the last sigma stretched to this (Qwen-Image's 0.02); 0: not */
	const char *whose;              /* whose settings, for the log ("FLUX.1-dev's") */
	int frames, height, width;      /* the picture or video made when the request does not say */
	const struct pd_dit_size *sizes; /* the card's sizes by aspect ratio (aspect NULL ends), or NULL:
					 * a ratio gets the default size's area */
	float guidance;                 /* the guidance scale when the request does not say */
	float true_cfg_scale;           /* true CFG's scale when the request does not say but gives a
					 * negative prompt (QwenImagePipeline's 4; without one it runs
					 * plain); 0: 1, off (FluxPipeline) */
	double strength;                /* pictures in: the share of the steps run when the request does
					 * not say (img2img's 0.75; a model conditioned on the picture, as
					 * FLUX.1 Fill: 1) */
	int guidance_cfg;               /* the guidance scale is classifier-free guidance over the
					 * prompt and the negative prompt ("" when none is given), as
					 * WanPipeline's guidance_scale; 0: a distilled scale the model
					 * embeds (FLUX.1-dev) */
};

/* What a family's transformer predicts: the denoising loop's step takes it
 * so (pipeline/pd_pipeline.c). */
enum pd_prediction {
	PD_PREDICT_FLOW,                /* the flow-matching velocity, noise - data (FLUX, Wan, Qwen-Image) */
};

/* The sampler a family's pipeline steps with when no scheduler folder is
 * given (the one its published folder names). */
enum pd_sampler {
	PD_SAMPLER_EULER,               /* FlowMatchEulerDiscreteScheduler */
	PD_SAMPLER_UNIPC,               /* UniPCMultistepScheduler: order 2, bh2, flow sigmas (the
					 * defaults' shift is its flow_shift) */
};

/* One of a family's text encoders, in the order of the model folder's
 * slots (text_encoder, text_encoder_2, ...; pd_model_paths.h). */
struct pd_encoder_spec {
	const char *kind;               /* what it is, for the log and messages ("CLIP", "T5", "UMT5") */
	const char *file;               /* the flag of its single file, as stable-diffusion.cpp names it
					 * ("clip_l", "t5xxl", "llm"): --NAME FILE; NULL: none */
	const char *tokenizer;          /* what its tokenizer folder holds ("vocab.json, merges.txt"), or NULL */
	int seq_len;                    /* the tokens it reads: fixed (CLIP: 77), or 0: the request's
					 * text length (max_seq) */
	int optional;                   /* a request may leave it out (its embeddings then zeros) */
};

struct pd_st;
struct pd_tiny_opts;
struct pd_tiny_flag;

/* A family's prompt encoder: what pd_dit_encode loads, runs and frees. */
struct pd_prompt_encoder_kind {
	size_t size;                    /* bytes of the family's encoder (zeroed, then loaded) */
	int (*load)(void *pe, const struct pd_model_paths *mp, struct pd_backend *be);
	/* the embeddings of PROMPTS[first, first + count) of N (with
	 * NEGATIVE's, when not NULL) in E, the other rows zero; with
	 * KEEP_EXTRA what else the encoders saw and made (E's extras) */
	int (*embeds)(struct pd_embeds *e, void *pe, char *const *prompts, int n, const char *negative, int max_seq,
		      int64_t first, int64_t count, int keep_extra);
	void (*free)(void *pe);         /* what load took (not PE itself) */
};

/* `pdit tiny` for a family (tiny/pd_tiny.h has the options and the shared
 * parts): a random model folder in DIR laid out as its published one; its
 * options' defaults (REAL: its real widths with few blocks, bf16); its own
 * flags (ended by a NULL name). */
struct pd_family_tiny {
	int (*write)(const char *dir, const struct pd_tiny_opts *o);
	void (*defaults)(struct pd_tiny_opts *o, int real);
	const struct pd_tiny_flag *flags;
	/* what O writes, in a few words ("4 heads x 16, 2 + 2 blocks") */
	void (*summary)(const struct pd_tiny_opts *o, char *buf, size_t len);
};

struct pd_dit_family {
	const char *name;               /* "flux" */
	const char *title;              /* what it makes, for help ("FLUX.1 pictures") */
	/* Its GGUF files as ComfyUI-GGUF's convert.py and city96's
	 * lcpp.patch write them: general.architecture ("flux"), the tensors
	 * kept F32 whatever the type (names holding one of GGUF_F32), and the
	 * weights whose Q4_0/Q5_0 become Q4_1/Q5_1 (names holding one of
	 * GGUF_Q_1); the lists NULL-terminated, or NULL. */
	const char *gguf_arch;
	const char *const *gguf_f32;
	const char *const *gguf_q_1;
	/* whether ST's tensors are this family's transformer by their names
	 * alone (any layout, any prefix; nothing probed): pdit quantize's
	 * choice of these rules */
	int (*names_are)(const struct pd_st *st);
	enum pd_prediction prediction;  /* what its transformer predicts */
	enum pd_sampler sampler;        /* its sampler when no scheduler folder says */
	int latents_unpacked;           /* its pipeline's latents are [B, C, F, h, w] (Wan), not the
					 * packed tokens [B, L, C] (FLUX): --out-latents writes them so */
	float timestep_div;             /* the transformer sees the scheduler's timestep / this, in float32
					 * (FLUX: 1000, as FluxPipeline divides it; Wan: 1) */
	/* the sizes of the transformer at PATH (a folder or one file) from its
	 * config or its tensors' shapes, without loading weights; CONFIG (may
	 * be NULL) a config.json for a single file that carries none */
	int (*probe)(const char *path, const char *config, struct pd_dit_info *info);
	/* how a transformer is recognised without loading it: the classes
	 * its config.json may name (NULL-terminated), and whether a single
	 * file ST without a config holds one (NULL: the family tried last) */
	const char *const *classes;
	int (*file_is)(const struct pd_st *st);
	/* this process's SHARD of it (NULL: all of it) */
	int (*load)(struct pd_dit **out, const char *path, const char *config, struct pd_backend *be,
		    const struct pd_dit_shard *shard);
	/* the geometry of FRAMES frames (1: a picture) of HEIGHT x WIDTH, or -1
	 * with a message naming -H/--height, -W/--width or --frames */
	int (*latent_shape)(struct pd_latent_shape *ls, const struct pd_dit_info *info, int frames, int height,
			    int width);
	/* latent [C, frames, h, w] -> tokens [L, packed_channels], and back */
	void (*pack)(const struct pd_latent_shape *ls, const float *unpacked, float *packed);
	void (*unpack)(const struct pd_latent_shape *ls, const float *packed, float *unpacked);
	/* position ids [L, n_axes] of the image tokens */
	void (*image_ids)(const struct pd_latent_shape *ls, int n_axes, float *ids);
	/* position ids [txt_len, n_axes] of the text tokens beside LS's
	 * image (Qwen-Image's follow the image's); NULL: zeros (FLUX) */
	void (*text_ids)(const struct pd_latent_shape *ls, int64_t txt_len, int n_axes, float *ids);
	/* true CFG's combination neg + s (pos - neg) rescaled per token to
	 * the positive prediction's norm (QwenImagePipeline) */
	int cfg_renorm;
	/* the defaults for the model INFO describes */
	void (*defaults)(const struct pd_dit_info *info, struct pd_dit_defaults *d);
	/* The VAE its pipeline decodes with (model/vae's pd_vae.h; Wan's video
	 * VAE), fed the unpacked latents; vae_scale: pixels per latent
	 * position its pipeline assumes (0: 8). */
	const struct pd_vae_kind *vae;
	int vae_scale;
	/* Prompts (none: the family takes embeddings only, and the functions
	 * are NULL): its text encoders in slot order, the widths they make
	 * (from their configs, nothing loaded), the default text length, and
	 * the embeddings of PROMPTS[first, first + count) of N (with
	 * NEGATIVE's, when not NULL) in E, the other rows zero, and with
	 * KEEP_EXTRA what else the encoders saw and made (E's extras). */
	const struct pd_encoder_spec *encoders;
	int n_encoders;                 /* at most PD_MAX_ENCODERS (pd_model_paths.h) */
	int (*prompt_widths)(const struct pd_model_paths *mp, int64_t *txt_width, int64_t *pooled_width);
	int (*default_max_seq)(const struct pd_dit_info *info); /* info NULL: no transformer known */
	/* its prompt encoder (pd_dit_encode runs it, model/dit/pd_embeds.h), or
	 * NULL: embeddings from files only */
	const struct pd_prompt_encoder_kind *prompt_encoder;
	/* The text rows each of PROMPTS[0..n) (into LENS[n]) and NEGATIVE
	 * (may be NULL) will have, the encoders not run (tokenizing only), for
	 * a family whose text length follows the prompt (Qwen-Image: its
	 * tokens, at most MAX_SEQ); NULL: MAX_SEQ for every prompt (padded
	 * text) */
	int (*text_lens)(const struct pd_model_paths *mp, char *const *prompts, int n, const char *negative, int max_seq,
			 int64_t *lens, int64_t *neg_len);
	const struct pd_family_tiny *tiny; /* its random models (pdit tiny) */
};

/* Values of one latent: C x frames x h x w. */
static inline int64_t pd_latent_numel(const struct pd_latent_shape *ls)
{
	return (int64_t)ls->channels * ls->frames * ls->h * ls->w;
}

/* What a family implements. */
struct pd_dit_ops {
	/* A part of a call: blocks [first, first+count) on the rows of IN.
	 * X_IN (host, [txt_len + img_len, dim], text rows first) holds the
	 * hidden states after block first - 1, or is NULL to run the
	 * embedders (first must be 0; count 0: the embedders alone). With OUT
	 * not NULL the final layers follow and OUT (host) gets the prediction
	 * of the image rows; otherwise X_OUT (host) gets the hidden states.
	 * The final layers read the image rows alone: first == blocks with
	 * txt_len 0 runs them on X_IN's image rows (First Block Cache does).
	 * Ignores in->cache. */
	int (*forward_blocks)(struct pd_dit *d, const struct pd_dit_call *in, int first, int count,
			      const float *x_in, float *x_out, float *out, const struct pd_dump *dump);
	/* Frees the model (its pd_dit_release included). */
	void (*free)(struct pd_dit *d);
};

/* A loaded model (a family's struct begins with it). */
struct pd_dit {
	const struct pd_dit_ops *ops;   /* the family's implementation */
	const struct pd_dit_family *family; /* its pipeline's side */
	struct pd_dit_info info;        /* sizes of the whole model */
	struct pd_dit_shard shard;      /* what this process holds */
	struct pd_dit_hooks hooks;      /* the parallel seams; zeroed: one process */
	int64_t local_width;            /* attention width held here: heads / shard.count x head_dim */
	struct pd_backend *be;          /* the backend it computes on (borrowed): the parallel methods'
					 * buffers come from it */
	float *scratch;                 /* First Block Cache's two hidden states of a call (host) */
	size_t scratch_cap;             /* its capacity in floats */
	/* Whole inputs (shard.whole_inputs), backend memory: */
	float *whole[2];                /* the gathered inputs of up to two layers summed into one output */
	size_t whole_cap[2];            /* their capacities in floats */
	float *stage;                   /* what one gather receives, shard after shard */
	size_t stage_cap;               /* its capacity in floats */
	/* Adapters (model/adapter's pd_lora_set) find the layers here: */
	struct pd_dit_linear *layers;   /* every linear layer of the whole model (the family's table);
					 * NULL: the family lists none, and adapters are refused */
	int n_layers;
	struct pd_dit_held *held;       /* the linear layers loaded here (pd_dit_hold_linear) */
	int n_held, cap_held;
};

/* For a family's loader (struct pd_loader's each_linear, CTX the struct
 * pd_dit): records the layer L, its NAME and the part S held here. */
int pd_dit_hold_linear(void *ctx, struct pd_backend *be, struct pd_linear *l, const char *name,
		       const struct pd_slice *s);

/* For a family's blocks: a hook's failure (RC not 0) becomes the backend's
 * sticky error, so the block-boundary checks see it like any other. */
void pd_dit_hook_result(struct pd_dit *d, int rc);
/* Sums a row-parallel layer's partial results over the tensor-parallel
 * shards (nothing with one shard, or after a failure). */
void pd_dit_shard_reduce(struct pd_dit *d, float *buf, size_t n);

/* A gather with whole inputs receives at most this many floats at a time
 * (the rows go in chunks): its staging buffer stays small beside the
 * activations. */
#define PD_DIT_STAGE_FLOATS ((int64_t)1 << 22)

/* A row-parallel layer, either way tensor parallel runs it
 * (pd_dit_shard.whole_inputs):
 *
 *   x = pd_dit_rows_in(d, 0, part_in, ld_part, rows, part, &ldx);
 *   linear(l, x, ldx, rows, y, pd_dit_rows_width(d, n_out));
 *   pd_dit_rows_out(d, y, rows, n_out);
 *
 * rows_in returns the input to multiply: X itself (this shard's PART
 * columns of ROWS rows, row stride ldx = part), or with whole inputs every shard's
 * columns in shard order from the model's buffer SLOT (0 or 1: two inputs
 * can be in use at once), row stride *LD. rows_width is the row stride of
 * the layer's output before rows_out: N_OUT, or with whole inputs this
 * shard's N_OUT / count rows of the weight. rows_out makes Y [rows, n_out]
 * (row stride n_out) whole on every shard: the sum of the shards' partial
 * outputs, or the shards' output columns gathered. Nothing with one shard;
 * after a failure the backend stays failed and X is returned. */
const float *pd_dit_rows_in(struct pd_dit *d, int slot, const float *x, int64_t ldx, int64_t rows, int64_t part,
			    int64_t *ld);
int64_t pd_dit_rows_width(const struct pd_dit *d, int64_t n_out);
/* Every shard's PART columns of ROWS rows of X (contiguous: row stride
 * ldx = part), in shard order, into the model's buffer SLOT (row stride
 * part x count), which it returns; NULL with the backend failed (or
 * nothing to gather). */
float *pd_dit_gather_cols(struct pd_dit *d, int slot, const float *x, int64_t ldx, int64_t rows, int64_t part);
void pd_dit_rows_out(struct pd_dit *d, float *y, int64_t rows, int64_t n_out);

/* For a family's names_are: whether one of ST's tensors, without the
 * prefix ComfyUI's files carry ("model.diffusion_model."), starts with
 * one of PREFIXES (NULL-ended). */
int pd_dit_names_start(const struct pd_st *st, const char *const *prefixes);

/* Frees what pd_dit_forward keeps in D (a family's free calls it). */
void pd_dit_release(struct pd_dit *d);

/* The family's forward_blocks. */
static inline int pd_dit_forward_blocks(struct pd_dit *d, const struct pd_dit_call *in, int first, int count,
					const float *x_in, float *x_out, float *out, const struct pd_dump *dump)
{
	return d->ops->forward_blocks(d, in, first, count, x_in, x_out, out, dump);
}

/* One whole call: every block, with First Block Cache when in->cache is
 * set. OUT (host) gets [img_len, out_channels]. */
int pd_dit_forward(struct pd_dit *d, const struct pd_dit_call *in, float *out, const struct pd_dump *dump);

/* Installs HOOKS (a copy); NULL removes every hook (one process). */
static inline void pd_dit_set_hooks(struct pd_dit *d, const struct pd_dit_hooks *hooks)
{
	if (hooks)
		d->hooks = *hooks;
	else
		memset(&d->hooks, 0, sizeof(d->hooks));
}

/* Frees the model; NULL is allowed. */
static inline void pd_dit_free(struct pd_dit *d)
{
	if (d)
		d->ops->free(d);
}

/* Sinusoidal timestep embedding as diffusers computes it in float32
 * ([cos | sin], 2 x half values); freqs receives the half frequencies. */
void pd_timestep_embedding(float t, int half, float *emb, float *freqs);

/* Rotary tables [n, head_dim] for position ids [n, n_axes]: axis a takes
 * AXES_DIMS[a] channels, frequencies 10000^(-2k/d) in float64, each cos
 * and sin repeated for its interleaved pair. */
void pd_dit_rope_tables(int n_axes, const int *axes_dims, int head_dim, const float *ids, int64_t n, float *cos_out,
			float *sin_out);

#endif /* PD_DIT_H */
