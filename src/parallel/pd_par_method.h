/*
 * pd_par_method.h - the parallel methods as a table. Each method's file
 * exports one record: its name, the mesh axes its degrees are, what it
 * allows (a message when a mesh's degrees do not suit the model and the
 * request), and how it installs itself on a rank (hooks into the model,
 * the denoising loop's runner) and leaves. pd_mesh_check asks every record;
 * pd_parallel_setup installs them in table order (tensor parallel's hooks
 * first, the methods that take the transformer call, then those above it),
 * pd_parallel_free removes them in reverse. A record also says what its
 * method sends in a step, which the planner adds up over the table.
 * Adding a method is its file, its record in pd_par_methods (pd_parallel.c)
 * and its tests.
 */
#ifndef PD_PAR_METHOD_H
#define PD_PAR_METHOD_H

#include <stddef.h>

#include "pd_mesh.h"

struct pd_parallel;
struct pd_par_options;

/* One transformer pass of one picture on a mesh, as a method counts what
 * it sends. Symbols in the methods' counts: S tokens (text + image), L
 * image tokens, D inner width, A = S D 4 bytes (one f32 activation of the
 * whole sequence), pred = L out_channels 4 bytes (a prediction); U, R, T,
 * N, F the Ulysses, ring, tensor, pipeline and DistriFusion degrees, P = U
 * R the sequence-parallel degree (parallel-methods.md's counts, for f32
 * activations as pdit sends them). */
struct pd_par_step {
	const struct pd_dit_info *info; /* the transformer */
	int64_t txt_len, img_len;       /* its tokens */
	int degree[PD_AXIS_COUNT];      /* the mesh */
	int patches;                    /* PipeFusion's patches (0: as many as stages) */
};

/* What the busiest rank sends, by the mesh axis whose groups carry it (a
 * sequence-parallel gather goes to the outer of ring and Ulysses): bytes,
 * the exchanges it waits for (latency terms) and their rounds (a
 * collective over g ranks takes g - 1, a transfer between two ranks one).
 * Methods add to it. */
struct pd_par_sends {
	double bytes[PD_AXIS_COUNT];
	double msgs[PD_AXIS_COUNT];
	double rounds[PD_AXIS_COUNT];
};

/* A and pred of S above. */
void pd_par_step_sizes(const struct pd_par_step *s, double *A, double *pred);

struct pd_par_method {
	const char *name;               /* as meshes and messages name it */
	unsigned axes;                  /* the mesh axes it runs on: 1 << PD_AXIS_* */
	/* Why DEGREE does not suit LIM for this method (written into BUF), or
	 * NULL; may be NULL itself. */
	const char *(*problem)(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
			       size_t len);
	/* Its state: STATE_SIZE bytes the assembly allocates zeroed for it
	 * (0: none, STATE NULL) and frees after free. */
	size_t state_size;
	/* Installs it on this rank when the mesh (and OPT) call for it: 0, 1
	 * when it is not used, or -1 with a message. */
	int (*setup)(struct pd_parallel *par, void *state, struct pd_dit *m, const struct pd_par_options *opt);
	/* Removes what setup installed (only called when it did; may be NULL). */
	void (*free)(struct pd_parallel *par, void *state);
	/* Adds what it sends in step S to OUT, when the mesh uses it (may be
	 * NULL: it sends nothing in a step). */
	void (*sends)(const struct pd_par_step *s, struct pd_par_sends *out);
};

/* The table, in installation order, ended by a record with a NULL name. */
extern const struct pd_par_method *const pd_par_methods[];

extern const struct pd_par_method pd_par_method_tensor;
extern const struct pd_par_method pd_par_method_pipefusion;
extern const struct pd_par_method pd_par_method_sequence;
extern const struct pd_par_method pd_par_method_distrifusion;
extern const struct pd_par_method pd_par_method_cfg;
extern const struct pd_par_method pd_par_method_data;

#endif /* PD_PAR_METHOD_H */
