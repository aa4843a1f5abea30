/*
 * pd_model_paths.h - where a model's components live.
 *
 * A diffusers pipeline folder (--model DIR) has model_index.json and one
 * folder per component; flags name components directly and override the
 * model folder's: folders, or single .safetensors files for the weights
 * (the files Black Forest Labs and others publish). A family's text
 * encoders are slots in its order, named as diffusers names them:
 * text_encoder, text_encoder_2, ... with tokenizer, tokenizer_2, ...
 */
#ifndef PD_MODEL_H
#define PD_MODEL_H

#include "pd_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Text encoders a family may have (SD3 has three). */
#define PD_MAX_ENCODERS 4

/* LoRA adapters a model may be loaded with (--lora, repeatable). */
#define PD_MAX_LORAS 16

/* An adapter file and its multiplier (--lora FILE[:SCALE]). */
struct pd_lora_spec {
	const char *path;               /* a .safetensors file */
	float scale;                    /* its multiplier (1: as trained; negative reverses it) */
};

/* ARG as --lora takes it: FILE, or FILE:SCALE when what follows the last
 * ':' is a number (then ARG's ':' is cut to end the path: ARG must be
 * writable, as argv's strings are). */
PD_API void pd_lora_spec_parse(char *arg, struct pd_lora_spec *out);

/* The component flags as given (any may be NULL). */
struct pd_model_flags {
	const char *model;              /* --model DIR */
	const char *transformer;        /* --transformer DIR, or --diffusion-model FILE */
	const char *vae;                /* --vae DIR|FILE */
	const char *scheduler;          /* --scheduler DIR */
	const char *encoder[PD_MAX_ENCODERS]; /* --text-encoder, --text-encoder-2, ...: folder or file */
	const char *tokenizer[PD_MAX_ENCODERS]; /* --tokenizer, --tokenizer-2, ...: folder */
};

struct pd_model_paths {
	char *root;                     /* --model DIR, or NULL */
	char *transformer;              /* transformer folder or file */
	char *vae;                      /* VAE folder or file, or NULL when none is known */
	char *scheduler;                /* scheduler folder, or NULL (defaults apply) */
	char *encoder[PD_MAX_ENCODERS]; /* text encoder I's folder or file, or NULL */
	char *tokenizer[PD_MAX_ENCODERS]; /* its tokenizer's folder, or NULL */
	/* the model folder's transformer/config.json when a single file
	 * (--diffusion-model) replaces that folder: the file's config when it
	 * carries none (a file pdit quantize wrote from the folder); or NULL */
	char *folder_config;
	char *config;                   /* the transformer's config as the engine resolved it, or NULL */
};

/* Fills P from the flags. The model folder must hold a model_index.json
 * that is a JSON object; a component it names must exist; every named path
 * must exist, as a folder where only a folder will do. A transformer is
 * required unless NO_TRANSFORMER (pdit encode). */
PD_API int pd_model_paths_resolve(struct pd_model_paths *p, const struct pd_model_flags *f, int no_transformer);
/* Text encoder slot I's weights at PATH instead (a single file named by
 * FLAG, which must exist): refused when the slot's flag was given too
 * (GIVEN). */
PD_API int pd_model_paths_encoder(struct pd_model_paths *p, int i, const char *path, const char *flag, int given);
PD_API void pd_model_paths_free(struct pd_model_paths *p);

/* Slot I's component folder and flag names as diffusers and pdit's
 * commands name them ("text_encoder_2", "--text-encoder-2"). */
PD_API void pd_model_encoder_names(int i, char *component, char *flag, int len);
PD_API void pd_model_tokenizer_names(int i, char *component, char *flag, int len);

#ifdef __cplusplus
}
#endif

#endif /* PD_MODEL_H */
