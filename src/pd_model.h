/*
 * pd_model.h - where a model's components live.
 *
 * A diffusers pipeline folder (--model DIR) has model_index.json and one
 * folder per component; --transformer, --vae and --scheduler point at
 * component folders directly (and override the model folder's).
 */
#ifndef PD_MODEL_H
#define PD_MODEL_H

struct pd_model_paths {
	char *root;                     /* --model DIR, or NULL */
	char *transformer;              /* transformer folder */
	char *vae;                      /* VAE folder, or NULL when none is known */
	char *scheduler;                /* scheduler folder, or NULL (defaults apply) */
};

/* Fills P from the flags; any argument may be NULL. The model folder must
 * hold a model_index.json that is a JSON object; a component it names must
 * exist. */
int pd_model_paths_resolve(struct pd_model_paths *p, const char *model, const char *transformer, const char *vae,
			   const char *scheduler);
void pd_model_paths_free(struct pd_model_paths *p);

#endif /* PD_MODEL_H */
