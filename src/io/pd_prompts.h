/*
 * pd_prompts.h - prompts files: one prompt a line (--prompts FILE).
 */
#ifndef PD_PROMPTS_H
#define PD_PROMPTS_H

/* The prompts of PATH, blank lines skipped; *OUT (N strings) is malloc'd.
 * A file without a prompt is an error naming it. */
int pd_prompt_read_file(const char *path, char ***out, int *n);

#endif /* PD_PROMPTS_H */
