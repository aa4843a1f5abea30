/*
 * pd_gguf.h - memory-mapped GGUF reader (ggml's container: the quantized
 * FLUX files of ComfyUI-GGUF and stable-diffusion.cpp).
 *
 * Every field is checked, in the order ggml's gguf_init_from_file checks
 * them, before anything sized by the file is allocated: counts against the
 * bytes left, string lengths, value types, keys, the alignment, each
 * tensor's name, dimensions, type, element count (overflow tested by
 * division), row against the block size, and offsets (aligned, in order,
 * inside the file). A hostile file is refused with one message naming the
 * file and the defect; a tensor handed out can be trusted.
 *
 *   struct pd_gguf *g;
 *   if (pd_gguf_open(&g, "flux1-dev-Q8_0.gguf"))
 *           fprintf(stderr, "%s\n", pd_last_error());
 *   const struct pd_gguf_tensor *t = pd_gguf_get(g, "img_in.weight");
 *   ... t->type, t->shape (torch order), t->data, t->nbytes ...
 *   pd_gguf_close(g);
 */
#ifndef PD_GGUF_H
#define PD_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* ggml's own files stop at 4 (GGML_MAX_DIMS); city96's fix_5d_tensors.py
 * adds Wan's and HunyuanVideo's Conv3d weights with 5, as F32 */
#define PD_GGUF_MAX_DIMS 5
/* stable-diffusion.cpp's ggml names up to 159 bytes (GGML_MAX_NAME 160) */
#define PD_GGUF_MAX_NAME 4096

/* GGUF value types */
enum pd_gguf_vtype {
	PD_GGUF_U8, PD_GGUF_I8, PD_GGUF_U16, PD_GGUF_I16, PD_GGUF_U32, PD_GGUF_I32, PD_GGUF_F32, PD_GGUF_BOOL,
	PD_GGUF_STRING, PD_GGUF_ARRAY, PD_GGUF_U64, PD_GGUF_I64, PD_GGUF_F64, PD_GGUF_VTYPE_COUNT
};

/* One key-value pair. */
struct pd_gguf_kv {
	char *key;                      /* UTF-8, NUL-terminated copy */
	enum pd_gguf_vtype type;        /* its value's type */
	enum pd_gguf_vtype elem;        /* arrays: the elements' type */
	uint64_t count;                 /* arrays: elements */
	int64_t i;                      /* integer and bool values */
	uint64_t u;                     /* unsigned values (also in i when they fit) */
	double f;                       /* float values */
	char *str;                      /* string values (a copy) */
	const unsigned char *raw;       /* arrays: the first element inside the mapping */
};

struct pd_gguf_tensor {
	char *name;                     /* NUL-terminated copy */
	int type;                       /* ggml type id (pd_quant.h enum pd_qtype) */
	int ndim;                       /* 1..4 */
	int64_t ne[PD_GGUF_MAX_DIMS];   /* ggml order: ne[0] contiguous */
	int64_t shape[PD_GGUF_MAX_DIMS]; /* torch order: ne reversed */
	int64_t numel;                  /* elements */
	uint64_t offset;                /* from the data section's start */
	const unsigned char *data;      /* first byte inside the mapping */
	size_t nbytes;                  /* numel / block_size * block_bytes */
};

struct pd_gguf {
	char *path;                     /* for messages */
	unsigned char *map;             /* the whole file, read-only */
	size_t size;                    /* its bytes */
	uint32_t version;               /* 2 or 3 */
	int64_t n_kv;                   /* pairs */
	struct pd_gguf_kv *kv;
	int64_t n_tensors;              /* tensors, in file order */
	struct pd_gguf_tensor *tensors;
	uint64_t alignment;             /* general.alignment, or 32 */
	size_t data_start;              /* absolute offset of the data section */
};

/* Maps PATH and checks all of it; -1 with "PATH: defect". */
int pd_gguf_open(struct pd_gguf **out, const char *path);
void pd_gguf_close(struct pd_gguf *g);

const struct pd_gguf_tensor *pd_gguf_get(const struct pd_gguf *g, const char *name);
const struct pd_gguf_kv *pd_gguf_kv_find(const struct pd_gguf *g, const char *key);

/* True when the first bytes of PATH are "GGUF" (what pdit loads it as). */
int pd_gguf_is(const char *path);

/* The value type's name ("u32", "string"). */
const char *pd_gguf_vtype_name(enum pd_gguf_vtype t);

/* Writer: GGUF version 3 as ggml writes it (pairs, tensor infos in the
 * order added, data aligned to 32 and padded with zeros), to PATH.tmp and
 * renamed, so an interrupted run leaves nothing half-written. Tensor bytes
 * come from a fill callback at save time, one tensor in memory at a time. */
struct pd_gguf_writer;

/* Produces NBYTES bytes of a tensor into DST; 0, or -1 with a message. */
typedef int (*pd_gguf_fill_fn)(void *ctx, void *dst, size_t nbytes);

struct pd_gguf_writer *pd_gguf_writer_new(void);
void pd_gguf_writer_free(struct pd_gguf_writer *w);
int pd_gguf_writer_str(struct pd_gguf_writer *w, const char *key, const char *value);
int pd_gguf_writer_u32(struct pd_gguf_writer *w, const char *key, uint32_t value);
int pd_gguf_writer_f32(struct pd_gguf_writer *w, const char *key, float value);
/* A tensor of ggml type TYPE and torch-order SHAPE (NDIM 1..4; the row,
 * SHAPE[NDIM-1], a multiple of the type's block); CTX is borrowed. */
int pd_gguf_writer_add(struct pd_gguf_writer *w, const char *name, int type, int ndim, const int64_t *shape,
		       pd_gguf_fill_fn fill, void *ctx);
int pd_gguf_writer_save(struct pd_gguf_writer *w, const char *path);

#endif /* PD_GGUF_H */
