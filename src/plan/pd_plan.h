/*
 * pd_plan.h - the cost of one denoising step under a mesh: floating-point
 * work, bytes each rank sends, memory each rank holds, and the time these
 * take on a given machine. `pdit plan` ranks the meshes with it.
 *
 * The bytes follow what the methods send (f32 activations, as pdit moves
 * them): bench reports the measured figure beside this one and the tests
 * hold them equal. The time is a model: compute at a per-device rate (with
 * the elementwise work tensor parallel repeats on every shard), PipeFusion's
 * pipeline followed patch by patch, plus the transfers a method cannot hide.
 */
#ifndef PD_PLAN_H
#define PD_PLAN_H

#include "pd_dit.h"
#include "pd_mesh.h"

/* The work of one generation. */
struct pd_plan_work {
	const struct pd_dit_info *info; /* the transformer's sizes */
	int64_t txt_len;                /* text tokens */
	int64_t img_len;                /* image tokens (the family's latent_shape) */
	int64_t img_w;                  /* of them, a row's (0: PipeFusion's bands taken as equal) */
	int64_t ref_len;                /* reference tokens every call appends to the image's (FLUX.1
					 * Kontext): in the sequence's work, exchanges and activations,
					 * not predicted; whole rows of img_w where PipeFusion runs */
	int images;                     /* images in the batch */
	int branches;                   /* 2 with true CFG, else 1 */
	double weight_bytes;            /* bytes per weight as held: 2 bf16, 4 f32, a quantized file's
					 * averaged (pd_dit_weight_bytes) */
	int compute_bytes;              /* the products' precision: 2 bf16, 4 f32 */
	double adapter_bytes;           /* LoRA adapters' terms for the whole transformer, bytes at most
					 * (their files): sharded and staged with the layers they sit
					 * beside */
	double vae_gflop;               /* the VAE decoder's work for one picture (0: no VAE known) */
	double vae_map_gb;              /* its two largest feature maps for the whole picture, GB */
	int vae_exchanges;              /* its 3x3 convolutions and GroupNorms: each an exchange
					 * (halo rows, summed statistics) when decoded in bands */
	double encoders_gb;             /* the text encoders' weights as computed (0: prompts come as
					 * embeddings); one rank per data-parallel group holds them before
					 * the transformer is loaded */
	int encoders_kept;              /* the text encoders stay loaded beside the transformer (a
					 * service, keep_encoders): their weights count with it, not
					 * instead of it */
};

/* The machine: devices (processes) and the links between them. */
struct pd_plan_machine {
	int devices;                    /* processes in the job */
	int per_node;                   /* processes per node, filled in rank order: an axis whose groups
					 * each lie within a node uses the node's link, else the link
					 * between nodes (one per device, as a NIC per GPU) */
	double gflops;                  /* whole-step rate of one device alone, GFLOP/s */
	int shared;                     /* the devices of a node share its compute (CPU cores): a node's
					 * rate is gflops, whatever the number of processes on it */
	int cores;                      /* with shared: the node's cores, which cap what one process
					 * alone can use (its threads: the cores divided among them) */
	int one_machine;                /* with shared: the nodes are network namespaces of one machine
					 * (tests/hosts): every process of every node shares its cores
					 * and memory, and only the links between nodes are theirs */
	double mem_gb;                  /* memory per device (per node when shared), GB; 0: unlimited */
	double mem_bw;                  /* bytes/s a device reads its memory at (0: not a limit) */
	double elem_bw;                 /* bytes/s a device streams through the elementwise kernels
					 * (norms, gated residuals) that tensor parallel repeats on every
					 * shard (a node's, when shared); 0: mem_bw */
	double vae_gflops;              /* the VAE decode's rate, GFLOP/s (0: gflops) */
	double int8_speed;              /* how many times the rate the layers on int8 products run
					 * (pd_dit_info.int8_fraction; 0: as the rate) */
	double weight_s;                /* seconds a product spends per weight whatever its rows (a
					 * node's, all its cores): decoding bf16 or quantized weights to
					 * the product's precision, reading them. gflops holds it at the
					 * whole sequence's rows; a rank with fewer rows a product, or
					 * a PipeFusion stage's patches, pay the rest. 0: not modelled */
	double wake_s;                  /* with shared: seconds a round of an exchange waits for its
					 * peer to be scheduled, per process beyond one a core (what
					 * oversubscribed CPU processes pay; 0 elsewhere) */
	double bw_intra, lat_intra;     /* bytes/s and seconds per message within a node */
	double bw_inter, lat_inter;     /* between nodes */
};

/* One mesh: its degrees and PipeFusion's patches. */
struct pd_plan_mesh {
	int degree[PD_AXIS_COUNT];      /* every axis's (pd_axis.h) */
	int patches;                    /* PipeFusion patches (0: as many as stages) */
};

/* What a step costs the busiest rank. */
struct pd_plan_cost {
	double gflop;                   /* floating-point work of the rank, GFLOP */
	double bytes;                   /* bytes it sends per step (largest rank) */
	double inter_bytes;             /* the part that crosses between nodes */
	int messages;                   /* exchanges it waits for per step (latency terms) */
	int rounds;                     /* their rounds: a collective over g ranks g - 1 (ring and
					 * pairwise algorithms), a transfer between two ranks one */
	double seconds;                 /* predicted seconds per step (steady state, after warm-up) */
	double vae_s;                   /* predicted seconds of the decode of the group's pictures, in
					 * bands over the data-parallel group when it has several ranks */
	double compute_s, comm_s;       /* the parts: compute (with the work tensor parallel repeats
					 * and weight_s's part), transfers not hidden */
	double weight_extra_s;          /* the part of compute_s that weight_s adds (the busiest rank's,
					 * or PipeFusion's stages' through the pipeline) */
	double weights_gb;              /* weights the rank holds (the heaviest stage's) */
	double weights_min_gb;          /* the lightest stage's: a low bound for any rank */
	double activations_gb;          /* activations and method buffers (K/V of PipeFusion, DistriFusion) */
	double vae_gb;                  /* the decode's feature maps on the rank (its band's) */
	double memory_gb;               /* the rank's peak: weights and activations, or the text
					 * encoders or the decode where they are larger */
	int fits;                       /* memory_gb within the machine's memory (1 when unlimited) */
	int decoded;                    /* auto's larger int8 layout does not fit: counted with the
					 * quantized layers held as the file stores them and decoded (timed
					 * at the rate, not int8_speed), as a run falls back (fits says
					 * whether that fits) */
};

/* A mesh and what it costs. */
struct pd_plan_row {
	struct pd_plan_mesh mesh;
	struct pd_plan_cost cost;
	int stale;                      /* PipeFusion (with patches) or DistriFusion: attention sees some
					 * keys and values a step old, so the picture differs a little
					 * from one process's */
};

/* Every valid mesh for LIM (DistriFusion's too), costed and sorted: those that fit first, by predicted
 * seconds. *ROWS is allocated (free it); *N may be 0. 0, or -1. */
int pd_plan_list(const struct pd_plan_work *work, const struct pd_plan_machine *machine,
		 const struct pd_mesh_limits *lim, struct pd_plan_row **rows, int *n);

/* The cost of WORK under MESH on MACHINE. 0, or -1 with a message. */
int pd_plan_cost(const struct pd_plan_work *work, const struct pd_plan_machine *machine,
		 const struct pd_plan_mesh *mesh, struct pd_plan_cost *out);

/* Bytes the largest rank sends per step (per image and branch it runs). */
double pd_plan_bytes(const struct pd_plan_work *work, const struct pd_plan_mesh *mesh);

/* Whether every group of MESH's axis A lies within one node of PER_NODE
 * devices: a group is DEGREE ranks STRIDE apart (the product of the faster
 * axes' degrees), so its ranks fill an aligned block of STRIDE x DEGREE. */
int pd_plan_axis_local(const struct pd_plan_mesh *mesh, int a, int per_node);

/* Fills WORK's VAE fields from a decoder's count (pd_vae.h: the family's
 * VAE kind counts it from its config). */
struct pd_vae_cost;
void pd_plan_vae_cost(struct pd_plan_work *work, const struct pd_vae_cost *cost);

/* The weights of the text encoder at PATH (a folder with model.safetensors
 * or its sharded index, or one file) as held, in GB: WEIGHT_BYTES per
 * element, those in a block format (fp8) as stored; the token table is
 * left out (only the prompt's rows are read), and what is never read (a
 * language model's lm_head, a vision tower). */
int pd_plan_encoder_gb(const char *path, double weight_bytes, double *gb);

/* A device or link preset: published peak figures. */
struct pd_plan_preset {
	const char *name;               /* as given to --device or --link */
	double a;                       /* device: peak TFLOP/s; link: GB/s each way */
	double b;                       /* device: memory GB; link: latency, microseconds (assumed) */
	double c;                       /* device: memory bandwidth, GB/s */
};

/* The presets, ended by an entry with a NULL name. */
extern const struct pd_plan_preset pd_plan_devices[];
extern const struct pd_plan_preset pd_plan_links[];

/* The preset NAME of the list P; NULL with a message naming FLAG and the
 * choices when there is none. */
const struct pd_plan_preset *pd_plan_preset_find(const struct pd_plan_preset *p, const char *name,
						 const char *flag);

/* MC: this machine as pdit plan models it by default (a product's rate
 * MATMUL in GFLOP/s, or when 0 timed here, the best of TIMINGS; what a
 * product spends per weight WEIGHT_S in seconds, or when negative timed
 * with the rate; the elementwise kernels' rate timed here, the best of
 * TIMINGS; DEVICES processes sharing its cores and memory, PER_NODE of them
 * a node; shared-memory links). 0, or -1 with a message. */
int pd_plan_machine_here(struct pd_plan_machine *mc, const struct pd_plan_work *w, int devices, int per_node,
			 int timings, double matmul, double weight_s);

/* MC's int8_speed where some of W's layers multiply in int8 (bf16
 * products): their type's product against a bf16 one at the model's widest
 * shape, timed here (left as it is where none are, or where it cannot be
 * timed). 0, or -1 with a message. */
int pd_plan_machine_int8(struct pd_plan_machine *mc, const struct pd_plan_work *w);

#endif /* PD_PLAN_H */
