/*
 * pdit_flags.h - the flags generate, check, bench and serve share (the
 * model's parts, the prompt, the picture, the mesh, precision and threads),
 * as one table: each command adds its own (pdit_generate.c, pdit_check.c,
 * pdit_bench.c, pdit_serve.c), and the parsed flags become the engine's
 * options and a request (engine/pdit.h).
 */
#ifndef PDIT_FLAGS_H
#define PDIT_FLAGS_H

#include "pd_args.h"
#include "pd_comm.h"
#include "pdit.h"

/* The commands that share the table: which of its flags each takes. */
enum pd_cmd_kind { PD_CMD_GENERATE, PD_CMD_CHECK, PD_CMD_BENCH, PD_CMD_SERVE };

/* Room for the shared flags and a command's own, with the ending entry. */
#define PD_GEN_MAX_FLAGS 80

/* The text encoders' flags, made from what the families have (pdit.h's
 * pd_encoders_known): --text-encoder[-N] DIR|FILE and --tokenizer[-N] DIR a
 * slot, --NAME FILE a single file's name (--clip_l, --t5xxl). */
struct pd_cli_encoders {
	struct pd_encoders_known known; /* what the families have */
	const char *dir[PD_MAX_ENCODERS]; /* --text-encoder[-N]: a slot's folder or file */
	const char *tok[PD_MAX_ENCODERS]; /* --tokenizer[-N] */
	const char *file[2 * PD_MAX_ENCODERS]; /* --NAME, as known.files */
	char name[4 * PD_MAX_ENCODERS][40]; /* the flags' names */
	char help[4 * PD_MAX_ENCODERS][280]; /* and their help */
};
/* C's flags into OPTS from N on (with TOKENIZERS the tokenizers' too);
 * returns the new N. */
int pd_cli_encoder_flags(struct pd_cli_encoders *c, struct pd_arg *opts, int n, int tokenizers);
/* What they name, into the engine's options; -1 with a message when more
 * single files are given than a family can have. */
int pd_cli_encoder_options(const struct pd_cli_encoders *c, struct pd_engine_options *o);

struct pd_gen_args {
	/* the model's parts (--model's folder, or each given) */
	const char *model, *transformer, *vae, *scheduler;
	const char *diffusion_model;
	struct pd_cli_encoders enc;     /* the text encoders and tokenizers */
	const char *config;             /* --config: a single-file transformer's config.json */
	const char *quantize;           /* --quantize: the blocks' plain weights encoded at load */
	struct pd_arg_list lora;        /* --lora FILE[:SCALE], as given */
	struct pd_lora_spec loras[PD_MAX_LORAS]; /* and parsed (pd_gen_parse) */
	int lora_lenient;               /* --lora-lenient */
	const char *lora_dir;           /* --lora-model-dir */
	/* what to make */
	const char *prompt, *negative, *prompts_file;
	int max_seq;                    /* --max-sequence-length (0: the family's) */
	const char *embeds;             /* --embeds FILE instead of prompts */
	const char *output, *out_latents, *init_latents; /* generate's files */
	const char *init_img;           /* -i/--init-img: img2img's picture */
	const char *ref_img;            /* -r/--ref-image: Kontext's reference picture */
	const char *mask;               /* --mask: inpainting's mask */
	double strength;                /* --strength */
	int strength_seen;              /* given */
	int warmup_seen;                /* --warmup-steps given */
	const char *dtype, *vae_dtype;  /* precisions */
	int height, width, frames, steps, fps;
	const char *aspect;             /* --aspect W:H, or NULL */
	int frames_seen, steps_seen, output_seen, guidance_seen, true_cfg_seen; /* given (a given 0 is not "not given") */
	float flow_shift, guidance, true_cfg_scale, fbcache, comm_timeout;
	uint64_t seed;
	int batch;                      /* bench's --batch: copies of the first prompt */
	int threads, verbose, quiet;
	const char *backend;            /* --backend cpu|cuda|auto */
	const char *quant_products;     /* --quant-products int8|bf16|auto */
	const char *ring_attention;     /* --ring-attention merged|gathered|auto */
	int device, device_seen;        /* --device N: this process's GPU */
	const char *comm;               /* --comm mpi|nccl|auto */
	/* the mesh: a degree per axis (pd_axis.h; -1 not given, a switch's 0
	 * or 1), PipeFusion's patches, the stale methods' exact steps */
	int degree[PD_AXIS_COUNT];
	int warmup_steps, patches;
	int no_vae_parallel, vae_parallel;
	const char *parallel;           /* --parallel auto|auto-stale, or NULL */
};

/* The defaults, then the shared flags KIND takes into OPTS and the ending
 * entry; returns how many (a command appends its own there, and the ending
 * entry after them). */
int pd_gen_flags(struct pd_gen_args *a, struct pd_arg *opts, enum pd_cmd_kind kind);
/* Parses ARGV with OPTS for command NAME: 0 go on, 1 help asked (shown on
 * rank 0 with USAGE and EXAMPLES when WORLD is not NULL), -1 refused with
 * a message. -v/-q set this process's log level (with WORLD). */
int pd_gen_parse(struct pd_comm *world, struct pd_gen_args *a, const struct pd_arg *opts, const char *name,
		 const char *usage, const char *examples, int argc, char **argv);
/* The engine's options from the flags: DECODE loads a VAE. */
int pd_gen_engine_options(const struct pd_gen_args *a, struct pd_engine_options *o, int decode);
/* The request from the flags; *PROMPTS holds --prompts FILE's lines (free
 * them with pd_gen_free_prompts). */
int pd_gen_request(const struct pd_gen_args *a, struct pd_request *rq, char ***prompts, int *n);
void pd_gen_free_prompts(char **prompts, int n);
/* The model as a picture's parameters name it: the folder or the file. */
const char *pd_gen_model_name(const struct pd_gen_args *a);
/* An engine call failed: the lowest failing rank says why; a collective
 * failure (the engine is dead) ends the whole job. */
void pd_gen_failed(struct pd_comm *world, struct pd_engine *e);

/* Whether PATTERN holds exactly one number conversion, %d or %0Nd, and no
 * other '%': the only patterns -o takes. */
int pd_pattern_ok(const char *pattern);
/* Picture B's name of BATCH from -o's PATTERN (malloc'd). */
char *pd_output_name(const char *pattern, int64_t b, int64_t batch);

#endif /* PDIT_FLAGS_H */
