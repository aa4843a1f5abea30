/*
 * pd_par_method.h - the parallel methods as a table. Each method's file
 * exports one record: its name, the mesh axes its degrees are, what it
 * allows (a message when a mesh's degrees do not suit the model and the
 * request), and how it installs itself on a rank (hooks into the model,
 * the denoising loop's runner) and leaves. pd_mesh_check asks every record;
 * pd_parallel_setup installs them in table order (tensor parallel's hooks
 * first, the methods that take the transformer call, then those above it),
 * pd_parallel_free removes them in reverse. Adding a method is its file,
 * its record in pd_par_methods (pd_parallel.c) and its tests; what it sends
 * per step is pdit plan's (plan/pd_plan.c).
 */
#ifndef PD_PAR_METHOD_H
#define PD_PAR_METHOD_H

#include <stddef.h>

#include "pd_mesh.h"

struct pd_parallel;
struct pd_par_options;

struct pd_par_method {
	const char *name;               /* as meshes and messages name it */
	unsigned axes;                  /* the mesh axes it runs on: 1 << PD_AXIS_* */
	/* Why DEGREE does not suit LIM for this method (written into BUF), or
	 * NULL; may be NULL itself. */
	const char *(*problem)(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim, char *buf,
			       size_t len);
	/* Installs it on this rank when the mesh (and OPT) call for it: 0, 1
	 * when it is not used, or -1 with a message. */
	int (*setup)(struct pd_parallel *par, struct pd_dit *m, const struct pd_par_options *opt);
	/* Removes what setup installed (only called when it did; may be NULL). */
	void (*free)(struct pd_parallel *par);
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
