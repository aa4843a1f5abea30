/*
 * pd_model_paths.h - where a model's components live.
 *
 * A diffusers pipeline folder (--model DIR) has model_index.json and one
 * folder per component; flags name components directly and override the
 * model folder's: folders, or single .safetensors files for the weights
 * (the files Black Forest Labs and others publish).
 */
#ifndef PD_MODEL_H
#define PD_MODEL_H

/* The component flags as given (any may be NULL). */
struct pd_model_flags {
	const char *model;              /* --model DIR */
	const char *transformer;        /* --transformer DIR, or --diffusion-model FILE */
	const char *vae;                /* --vae DIR|FILE */
	const char *scheduler;          /* --scheduler DIR */
	const char *text_encoder;       /* --text-encoder DIR, or --clip_l FILE */
	const char *text_encoder_2;     /* --text-encoder-2 DIR, or --t5xxl FILE */
	const char *tokenizer;          /* --tokenizer DIR */
	const char *tokenizer_2;        /* --tokenizer-2 DIR */
};

struct pd_model_paths {
	char *root;                     /* --model DIR, or NULL */
	char *transformer;              /* transformer folder or file */
	char *vae;                      /* VAE folder or file, or NULL when none is known */
	char *scheduler;                /* scheduler folder, or NULL (defaults apply) */
	char *text_encoder;             /* CLIP text model folder or file, or NULL */
	char *text_encoder_2;           /* T5 encoder folder or file, or NULL */
	char *tokenizer;                /* CLIP tokenizer folder, or NULL */
	char *tokenizer_2;              /* T5 tokenizer folder, or NULL */
};

/* Fills P from the flags. The model folder must hold a model_index.json
 * that is a JSON object; a component it names must exist; every named path
 * must exist, as a folder where only a folder will do. A transformer is
 * required unless NO_TRANSFORMER (pdit encode). */
int pd_model_paths_resolve(struct pd_model_paths *p, const struct pd_model_flags *f, int no_transformer);
void pd_model_paths_free(struct pd_model_paths *p);

#endif /* PD_MODEL_H */
