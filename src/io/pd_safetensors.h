/*
 * pd_safetensors.h - memory-mapped safetensors reader (single files and
 * sharded "*.safetensors.index.json" sets); the writer is pd_st_writer.h.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON describing each tensor (dtype, shape, byte range relative to the end
 * of the header), then the raw little-endian data.  Everything in the header
 * is validated before any tensor is handed out, so that code reading a
 * tensor can trust shape x dtype == byte range and the range lies inside the
 * mapping: a hostile file can make pdit refuse, never read out of bounds.
 *
 *   struct pd_st *st;
 *   if (pd_st_open_component(&st, "model/transformer", "diffusion_pytorch_model"))
 *           fprintf(stderr, "%s\n", pd_last_error());
 *   const struct pd_st_tensor *t = pd_st_get(st, "x_embedder.weight");
 *   pd_st_read_block_f32(t, 0, rows, 0, cols, dst, cols);   // converts to f32
 *   pd_st_close(st);
 */
#ifndef PD_SAFETENSORS_H
#define PD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "pd_dtype.h"
#include "pd_quant.h"

#define PD_ST_MAX_DIMS 8
/* The Rust reference implementation refuses headers above 100 MB as well. */
#define PD_ST_MAX_HEADER (100u << 20)


struct pd_st_file;

struct pd_st_tensor {
	char *name;                     /* tensor name as in the header */
	enum pd_dtype dtype;            /* element type on disk */
	int ndim;                       /* number of dimensions, 0..PD_ST_MAX_DIMS */
	int64_t shape[PD_ST_MAX_DIMS];  /* dimensions, outermost first */
	int64_t numel;                  /* product of shape (1 for a scalar) */
	const unsigned char *data;      /* first byte inside the file mapping */
	size_t nbytes;                  /* numel * element size, checked */
	const struct pd_st_file *file;  /* the file holding it (for messages) */
	/* In a view (pd_st_view_*): the first ROLL stored rows come last, so
	 * logical row r is stored row (r + roll) mod shape[0]; 0 elsewhere. */
	int64_t roll;
	/* A GGUF tensor in one of ggml's block formats (pd_quant.h) holding
	 * several elements a block: its type id and the format, else NULL;
	 * dtype then says F32 (what a read gives). */
	int qtype;
	const struct pd_qtype_info *q;
	float fp8_scale;                /* scaled fp8: the weight's scale_weight (0: none) */
};

/* One opened safetensors file or a set of shards seen as one. */
struct pd_st {
	char *path;                     /* file or index path, for messages */
	int n_files;                    /* number of mapped files */
	struct pd_st_file **files;      /* the mapped files */
	int n_tensors;                  /* tensors over all files */
	struct pd_st_tensor **sorted;   /* all tensors, sorted by name */
	int n_meta;                     /* __metadata__ entries of the first file */
	char **meta_keys;               /* their keys */
	char **meta_vals;               /* their (string) values */
	/* A view: renamed, sliced tensors of BASE (closed with the view). */
	struct pd_st *base;
	struct pd_st_tensor *own;       /* the view's tensors */
	int n_own, cap_own;
};

/* Opens PATH: a .safetensors file, a .safetensors.index.json whose
 * weight_map names shard files in the same directory, or a GGUF file (its
 * tensors under their names in torch order, its string and number pairs
 * as metadata; block-quantized tensors decode when read). */
int pd_st_open(struct pd_st **out, const char *path);

/* Opens DIR/STEM.safetensors or, failing that, DIR/STEM.safetensors.index.json
 * (how diffusers and transformers name a component's weights). */
int pd_st_open_component(struct pd_st **out, const char *dir, const char *stem);
/* Whether DIR holds a component's weights under STEM (either name above). */
int pd_st_has_component(const char *dir, const char *stem);

/* Views: the tensors of BASE under other names, as row ranges, reshaped,
 * with halves swapped (pd_st_tensor.roll): how a checkpoint in another
 * layout (fused q/k/v, a final norm's (shift, scale) for (scale, shift))
 * is read without copying it. The view takes BASE over. */
int pd_st_view_new(struct pd_st **out, struct pd_st *base);
/* NAME = rows [r0, r0 + nr) of SRC (a tensor of the base), as NDIM
 * dimensions SHAPE (same element count; NULL: SRC's with nr rows), the
 * first ROLL of them read last. */
int pd_st_view_add(struct pd_st *v, const char *name, const struct pd_st_tensor *src, int64_t r0, int64_t nr,
		   int64_t roll, int ndim, const int64_t *shape);
/* Ends adding: sorts the names (pd_st_get works from here on). */
int pd_st_view_done(struct pd_st *v);

/* PATH a folder: as pd_st_open_component(PATH, STEM); a file: pd_st_open. */
int pd_st_open_path(struct pd_st **out, const char *path, const char *stem);

void pd_st_close(struct pd_st *st);

/* NULL when absent. */
const struct pd_st_tensor *pd_st_get(const struct pd_st *st, const char *name);

/* Like pd_st_get, but an absent tensor or a shape other than the expected
 * one (ndim dims; a negative expected dim matches anything) is an error
 * naming the file and the tensor. */
int pd_st_require(const struct pd_st *st, const char *name, int ndim, const int64_t *shape,
		  const struct pd_st_tensor **out);

/* The first tensor whose name ends with SUFFIX (single files name their
 * tensors with differing prefixes); NULL when none. */
const struct pd_st_tensor *pd_st_find_suffix(const struct pd_st *st, const char *suffix);

/* Metadata value for KEY, NULL when absent. */
const char *pd_st_meta(const struct pd_st *st, const char *key);
/* The "config" metadata entry of a single file parsed into J (free it with
 * pd_config_free): 1, or 0 when there is none, -1 when it is not JSON. */
struct pd_config;
int pd_st_meta_config(const struct pd_st *st, struct pd_config *j);

/* Value I of an integer or boolean tensor T (a mask, token ids): T's dtype
 * must not be a floating one. */
int64_t pd_st_int_at(const struct pd_st_tensor *t, int64_t i);

/* Converts COUNT elements starting at element START to float32. */
int pd_st_read_f32(const struct pd_st_tensor *t, size_t start, size_t count, float *dst);

/* Reads the block [r0, r0+nr) x [c0, c0+nc) of T seen as a matrix
 * [shape[0], numel/shape[0]] into DST with row stride LDD, converting to
 * float32.  Only the bytes of the block are touched, so a rank that needs a
 * slice of a weight never pages in the rest. */
int pd_st_read_block_f32(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
			 float *dst, int64_t ldd);

/* Whether T is stored in a block format a backend can keep as it is (a
 * GGUF block type, or fp8): 1 with its format in *TYPE and the factor of
 * its decoded values in *SCALE (scaled fp8's scale_weight, else 1); 0 for
 * plain float types. */
int pd_st_block_format(const struct pd_st_tensor *t, enum pd_qtype *type, float *scale);

/* Copies the stored bytes of the block [r0, r0+nr) x [c0, c0+nc) of a
 * block-format tensor T (pd_st_block_format) into DST, row after row
 * (pd_quant_row_bytes(nc) each); c0 and nc must be multiples of the block
 * size. Only the bytes of the block are touched. */
int pd_st_read_blocks(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc, void *dst);

/* The 2-D float tensors of ST (the weights of linear layers): their
 * elements in *PARAMS, of them those in a block format (pd_st_block_format)
 * in *KEPT, and the bytes those are stored in, in *KEPT_BYTES. */
void pd_st_weight_stats(const struct pd_st *st, double *params, double *kept, double *kept_bytes);

/* Where the block [r0, r0+nr) x [c0, c0+nc) of a block-format tensor lies
 * in the mapping when its rows are whole and in file order (as
 * pd_st_read_blocks would copy them); NULL otherwise. */
const void *pd_st_blocks_at(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc);

/* Where the block [r0, r0+nr) x [c0, c0+nc) of a plainly stored F32 or
 * BF16 tensor T (seen as pd_st_read_block_f32 sees it) starts in the
 * mapping, its rows *LD elements apart; NULL for other types, for views
 * whose rows are not in file order and for a block outside T. A backend
 * reads weights from there without a converted copy. */
const void *pd_st_plain_at(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
			   int64_t *ld);

/* Gives the pages that lie wholly inside T's bytes back to the kernel; used
 * after a weight has been converted into the backend's own layout, so the
 * weights stay resident once. */
void pd_st_release(const struct pd_st_tensor *t);

#endif /* PD_SAFETENSORS_H */
