/*
 * pd_mesh.h - the process mesh: degrees dp x cfg x pp x distrifusion x ring
 * x ulysses x tp (pd_axis.h) that multiply to the world size, each rank's
 * coordinates, and the sub-communicators each parallel method works in.
 *
 * Rank order, fastest-varying first: tp, ulysses, ring, distrifusion, pp,
 * cfg, dp
 *   rank = tp + T (uly + U (ring + R (df + F (pp + P (cfg + C dp)))))
 * so Ulysses peers are neighbouring ranks, as in xDiT, ParaAttention and
 * diffusers. The sequence-parallel group flattens distrifusion x ring x
 * ulysses with chunk index (df R + ring) U + uly.
 */
#ifndef PD_MESH_H
#define PD_MESH_H

#include <stddef.h>

#include "pd_axis.h"
#include "pd_comm.h"
#include "pd_dit.h"

/* What limits the choice of degrees. */
struct pd_mesh_limits {
	int world;                      /* processes */
	int heads;                      /* attention heads: tp x ulysses must divide them */
	int mlp;                        /* the MLP's columns: tp must divide them too (0: unknown) */
	int cfg_possible;               /* true CFG is on, so a cfg degree of 2 is allowed */
	int images;                     /* images in the batch: dp may not exceed it */
	int max_pp;                     /* largest pipeline degree: the model's blocks (1: no PipeFusion) */
	int distri;                     /* enumerations take DistriFusion degrees above 1 too */
};

struct pd_mesh {
	int degree[PD_AXIS_COUNT];      /* degrees; their product is the world size */
	int coord[PD_AXIS_COUNT];       /* this rank's coordinates */
	struct pd_comm *world;          /* all ranks (borrowed) */
	struct pd_comm *axis[PD_AXIS_COUNT]; /* ranks differing only along one axis */
	struct pd_comm *sp;             /* distrifusion x ring x ulysses, rank = its sequence index */
	struct pd_comm *model;          /* every rank working on the same image and branch: tp x sp x pp */
	struct pd_comm *replica;        /* every rank of one data-parallel group (decodes its images together) */
};

const char *pd_axis_name(enum pd_axis a);

/* 0 when the degrees fit the limits; otherwise -1 with a message saying why
 * and listing valid meshes. */
int pd_mesh_check(const int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim);

/* Fills DEGREE with a sensible mesh for the limits (data parallel over the
 * images, CFG parallel when true CFG is on, then Ulysses as far as the heads
 * divide, then ring; no DistriFusion). Degrees already set (> 0) are kept. */
int pd_mesh_choose(int degree[PD_AXIS_COUNT], const struct pd_mesh_limits *lim);

/* Every valid mesh, at most MAX of them, in the order of the axes from dp
 * down (tp takes what is left); returns how many there are. */
int pd_mesh_enumerate(const struct pd_mesh_limits *lim, int (*out)[PD_AXIS_COUNT], int max);

/* "dp=1 cfg=2 pp=1 ring=1 ulysses=2 tp=1" ("distrifusion=F" in the ring's
 * place when DistriFusion's degree F is above 1: the two do not compose) */
void pd_mesh_format(const int degree[PD_AXIS_COUNT], char *buf, size_t len);
/* The degrees above 1, the slowest-varying axis first ("ulysses=2 cfg=2"),
 * or "one process". */
void pd_mesh_format_short(const int degree[PD_AXIS_COUNT], char *buf, size_t len);
/* The sequence-parallel degree: the product of the axes that split the
 * tokens (Ulysses x ring, or DistriFusion's bands). */
int pd_mesh_seq_degree(const int degree[PD_AXIS_COUNT]);
/* Whether a mesh attends to some keys and values a step old: DistriFusion,
 * or PipeFusion with more than one patch a stage (PATCHES 0: one per stage). */
int pd_mesh_stale(const int degree[PD_AXIS_COUNT], int patches);

/* The rank arithmetic every method uses, here alone. */

/* Rank RANK's coordinates (the order above). */
void pd_mesh_coords(const int degree[PD_AXIS_COUNT], int rank, int coord[PD_AXIS_COUNT]);
/* The sequence-parallel index of COORD: (df R + ring) U + ulysses (its
 * token chunk). */
int pd_mesh_seq_index(const int degree[PD_AXIS_COUNT], const int coord[PD_AXIS_COUNT]);
/* PipeFusion's stages: the blocks of stage STAGE of STAGES, contiguous,
 * balanced by the blocks' costs, at least one block each. */
void pd_mesh_stage_blocks(const struct pd_dit_info *info, int stages, int stage, int *first, int *count);
/* PipeFusion's patches: bands of whole token rows of an image of HP x WP
 * tokens after T text tokens, balancing tokens with the text counted in band
 * 0 (which carries it), each at least one row: band I of BANDS starts at row
 * round(((T + L) i / bands - T) / wp), clamped to [i, hp - bands + i]
 * (consecutive targets differ by at least hp / bands >= 1 row, so no band
 * is empty). */
int64_t pd_mesh_band_row(int64_t T, int64_t hp, int64_t wp, int bands, int i);
/* Tokens of band I (the text with band 0). */
int64_t pd_mesh_band_tokens(int64_t T, int64_t hp, int64_t wp, int bands, int i);

/* Splits WORLD into the mesh's communicators (collective over WORLD). */
int pd_mesh_create(struct pd_mesh *m, struct pd_comm *world, const int degree[PD_AXIS_COUNT]);
void pd_mesh_free(struct pd_mesh *m);

#endif /* PD_MESH_H */
