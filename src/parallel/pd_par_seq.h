/*
 * pd_par_seq.h - sequence parallelism over ring x ulysses ranks (USP), and
 * the token partition DistriFusion's bands use.
 *
 * The text tokens and the image tokens are each cut into P nearly equal
 * chunks (chunk i holds n/P tokens, one more for i < n % P), and SP rank i
 * runs the transformer on [text chunk i | image chunk i] with the position
 * ids of exactly those tokens. Lengths that do not divide need no padding:
 * chunks just differ by one token, every exchange uses per-rank counts, and
 * attention only ever sees real keys. Everything but attention is per
 * token; attention goes through pd_seq_attention: a Ulysses all-to-all
 * (pd_par_ulysses.c) inside the group of U neighbouring ranks, then ring
 * attention (pd_par_ring.c) across the R groups, then the way back.
 */
#ifndef PD_PAR_SEQ_H
#define PD_PAR_SEQ_H

#include "pd_comm.h"
#include "pd_dit.h"
#include "pd_util.h"

struct pd_seq_par {
	struct pd_dit *model;           /* runs the local tokens (borrowed) */
	struct pd_backend *be;          /* the model's backend, which holds the scratch (borrowed; outlives
					 * the model) */
	struct pd_comm *sp;             /* the sequence group (pd_mesh.h: rank = its sequence index; borrowed) */
	struct pd_comm *sp_data;        /* the same group for the backend's buffers (pd_parallel_data_comm;
					 * borrowed): DistriFusion's gathers */
	struct pd_comm *ulysses;        /* the U neighbouring ranks, for the backend's buffers (borrowed) */
	struct pd_comm *ring;           /* the R ranks with the same Ulysses index, for the backend's
					 * buffers (borrowed) */
	int U, R;                       /* degrees */
	int gathered;                   /* ring attention in its gathered form, one process's result
					 * (pd_ring_attention_gathered; pd_par_options.ring_gathered) */
	int64_t out_width;              /* prediction channels */
	float *local_out;               /* [image chunk, out_width] */
	size_t local_cap;               /* its capacity in floats */
	size_t *bytes;                  /* per-rank byte counts, sp->size entries */
	/* Ulysses and ring scratch, grown as needed (floats), the model's
	 * backend's memory. */
	float *uq, *uk, *uv, *uo;       /* gathered q, k, v and attention output [S_u, H/U x Dh] */
	float *xsend, *xrecv;           /* all-to-all buffers */
	float *kv[2];                   /* ring: the chunk being used and the one arriving */
	float *part, *lse, *plse;       /* ring: a partial output and the log-sum-exps */
	float *gsend, *grecv;           /* gathered ring: my chunk's K (then V), and every chunk's as
					 * received (only where chunks have text rows) */
	float *kf, *vf;                 /* gathered ring: the sequence's K and V in its order */
	size_t cap_u, cap_x, cap_kv, cap_q; /* capacities (floats) of uq..uo, xsend/xrecv, kv, part..plse */
	size_t cap_gs, cap_gr, cap_f;   /* and of gsend, grecv, kf/vf */
};

/* Sets up P for the mesh's sequence-parallel groups and installs the
 * attention hook into HOOKS. SP carries host memory; SP_DATA, ULYSSES and
 * RING carry the model backend's buffers (pd_parallel_data_comm). GATHERED:
 * ring attention in its gathered form. */
int pd_seq_init(struct pd_seq_par *p, struct pd_dit *model, struct pd_comm *sp, struct pd_comm *sp_data,
		struct pd_comm *ulysses, struct pd_comm *ring, int gathered, struct pd_dit_hooks *hooks);
void pd_seq_free(struct pd_seq_par *p);

/* One transformer call on the whole-sequence input IN: this rank computes
 * its chunks and the image rows of every rank are gathered, so OUT receives
 * the whole [img_len, out_channels] prediction on every SP rank. */
int pd_seq_predict(void *ctx, const struct pd_dit_call *in, float *out, const struct pd_dump *dump);

/* Rows (text + image) of SP rank J for a part of CALL (its root is the
 * whole sequence). */
int64_t pd_seq_rows(const struct pd_seq_par *p, const struct pd_dit_call *call, int j);
/* The text rows among them (first: a rank's rows are its text chunk, then
 * its image chunk). */
int64_t pd_seq_txt_rows(const struct pd_seq_par *p, const struct pd_dit_call *call, int j);

#endif /* PD_PAR_SEQ_H */
