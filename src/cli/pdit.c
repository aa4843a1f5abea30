/*
 * pdit.c - the command line: generate, forward, tiny.
 *
 * The only place that exits: library calls return -1 with a message, which
 * is printed here as one line "pdit: <message>" before a nonzero exit.
 */
#include "pd_args.h"
#include "pd_engine_tools.h"
#include "pd_serve.h"
#include "pd_tiny.h"
#include "pd_util.h"
#include "pdit_cli.h"

#include <dirent.h>
#include <sys/stat.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pd_cli_fail(void)
{
	pd_cli_progress_clear();
	fprintf(stderr, "pdit: %s\n", pd_last_error());
	return 1;
}

void pd_cli_report(struct pd_comm *world)
{
	if (world->failed_rank != world->rank && world->failed_rank >= 0)
		return;
	pd_cli_progress_clear();
	if (world->rank == 0)
		fprintf(stderr, "pdit: %s\n", pd_last_error());
	else
		fprintf(stderr, "pdit: rank %d: %s\n", world->rank, pd_last_error());
}

int pd_cli_any_failed(struct pd_comm *world, int failed)
{
	int dead = 0;

	if (!pd_comm_agree(world, failed, &dead))
		return 0;
	if (dead)
		pd_cli_abort(world);
	pd_cli_report(world);
	return 1;
}

void pd_cli_abort(struct pd_comm *world)
{
	pd_cli_stopping();
	pd_cli_progress_clear();
	if (world->size > 1)
		fprintf(stderr, "pdit: rank %d: %s; stopping every process\n", world->rank, pd_last_error());
	else
		fprintf(stderr, "pdit: %s\n", pd_last_error());
	fflush(stderr);
	world->ops->abort(world, 1);
	exit(1);
}

/* ======================================================================= */
/* pdit forward                                                            */
/* ======================================================================= */

static const char pd_forward_usage[] =
	"usage: pdit forward --transformer DIR --inputs FILE --out FILE [--dump] [options]\n"
	"\n"
	"One transformer call (FLUX, Qwen-Image or Wan2.1), for tests and debugging.\n"
	"The inputs file holds the golden names: in.hidden_states, packed [B,L,C] with\n"
	"in.img_ids [L,3] and in.txt_ids [T,3] (FLUX's files) or latents [B,C,F,h,w]\n"
	"(Wan's), in.encoder_hidden_states [B,T,J] (with in.encoder_hidden_states_mask\n"
	"[B,T] for Qwen-Image's padded prompts), in.pooled_projections [B,P] (FLUX),\n"
	"in.timestep (what the transformer receives), in.guidance (models with guidance\n"
	"embeddings). The output holds out.sample in the input's shape; --dump adds\n"
	"every intermediate under the golden names (emb.temb,\n"
	"double.{i}.out.hidden_states, block.{i}.out.hidden_states, ...), so a mismatch\n"
	"names the first wrong layer.";

static const char pd_forward_examples[] =
	"  pdit forward --transformer tests/golden/flux-tiny/transformer-dev \\\n"
	"      --inputs tests/golden/flux-tiny/forward-dev-h64w48.safetensors --out out.safetensors --dump\n"
	"  pdit forward --transformer tests/golden/quant-tiny/flux/flux-tiny-dev-Q8_0.gguf \\\n"
	"      --config tests/golden/quant-tiny/flux/dequant-Q8_0/config.json \\\n"
	"      --inputs tests/golden/quant-tiny/flux/forward-Q8_0-h64w48.safetensors --out out.safetensors\n"
	"  pdit forward --transformer tests/golden/wan-tiny/model/transformer \\\n"
	"      --inputs tests/golden/wan-tiny/forward-n9-h32w48.safetensors --out out.safetensors --dump\n"
	"  pdit forward --transformer tests/golden/flux-tiny/transformer-dev \\\n"
	"      --lora tests/golden/edit-tiny/lora-dev-1344-kohya-0.safetensors:0.7 \\\n"
	"      --lora tests/golden/edit-tiny/lora-dev-1344-peft-1.safetensors:-0.4 \\\n"
	"      --inputs tests/golden/edit-tiny/lora-dev-1344.safetensors --out out.safetensors\n";

static int pd_cmd_forward(int argc, char **argv)
{
	struct pd_forward_options fo = { .dtype = "f32" };
	struct pd_arg_list loras = { 0 };
	int verbose = 0, n_pos, hr, rc;
	const struct pd_arg opts[] = {
		{ "--transformer", 0, PD_ARG_STRING, &fo.transformer, "DIR|FILE", "transformer folder, or one file (safetensors, fp8, GGUF)", NULL },
		{ "--config", 0, PD_ARG_STRING, &fo.config, "FILE", "the transformer's config.json, for a single file without one", NULL },
		{ "--inputs", 0, PD_ARG_STRING, &fo.inputs, "FILE", "safetensors with the in.* tensors", NULL },
		{ "--out", 'o', PD_ARG_STRING, &fo.out, "FILE", "safetensors to write (out.sample, and the dump)", NULL },
		{ "--dump", 0, PD_ARG_FLAG, &fo.dump, NULL, "also write every intermediate", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &fo.dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--threads", 't', PD_ARG_COUNT, &fo.threads, "N", "threads (default: all cores)", NULL },
		{ "--backend", 0, PD_ARG_STRING, &fo.backend, "cpu|cuda|auto", "what computes (default auto: CUDA where built and a GPU is present)", NULL },
		{ "--quant-products", 0, PD_ARG_STRING, &fo.quant_products, "int8|int8-256|bf16|auto", "how layers kept quantized multiply: int8 dot products (fp8 converted to int8 blocks; int8-256: Q8_0 layers a multiple of 256 wide requantized to one scale per 256 inputs) or decoded (default auto: int8 with --dtype bf16 on a CPU with AVX-512 VNNI or AVX-VNNI, decoded where the bf16 products take AMX tiles)", NULL },
		{ "--lora", 0, PD_ARG_LIST, &loras, "FILE[:SCALE]", "a LoRA adapter beside the layers, times SCALE (default 1); repeatable", NULL },
		{ "--lora-lenient", 0, PD_ARG_FLAG, &fo.lora_lenient, NULL, "skip an adapter's keys of no layer of the model (-v lists them) instead of refusing the file", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &verbose, NULL, "more detail", NULL },
		{ 0 },
	};
	const char *pos[1];

	hr = pd_args_parse("forward", opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_forward_usage, opts, pd_forward_examples);
		return 0;
	}
	if (hr)
		return pd_cli_fail();
	if (verbose)
		pd_log_level = 2;
	if (!fo.transformer || !fo.inputs || !fo.out) {
		pd_errorf("forward needs --transformer DIR, --inputs FILE and --out FILE");
		return pd_cli_fail();
	}
	for (int i = 0; i < loras.n; i++)
		pd_lora_spec_parse(loras.v[i], &fo.loras[i]);
	rc = pd_forward_file(&fo) ? pd_cli_fail() : 0;
	return rc;
}

/* ======================================================================= */
/* pdit tiny                                                               */
/* ======================================================================= */

static const char pd_tiny_usage[] =
	"usage: pdit tiny DIR [options]\n"
	"\n"
	"Writes a deterministic random model folder of a family (--family; the first\n"
	"listed by default) laid out as its published diffusers folder: model_index.json,\n"
	"transformer/, vae/, scheduler/ and, as the family has them (or with --full),\n"
	"its text encoders and tokenizers in their real formats; and\n"
	"DIR/embeds.safetensors (random prompt embeddings, with negatives) where the\n"
	"family takes them. pdit runs end to end with nothing to download. The pictures\n"
	"are noise: the weights are random. The sizes' defaults below are the first\n"
	"family's; another family's preset (and --NAME-width) sets its own, which the\n"
	"flags then change.";

static const char pd_tiny_examples[] =
	"  pdit tiny tiny-model --full          # FLUX.1-dev's layout: encoders, tokenizers, shards\n"
	"  pdit tiny tiny-model\n"
	"  pdit tiny tiny-6heads --heads 6 --head-dim 16 --layers 1 --single-layers 2\n"
	"  pdit tiny flux-width --flux-width      # FLUX.1's widths, 2 + 4 blocks, bf16 (about 2.5 GB)\n"
	"  pdit tiny wan-tiny --family wan && pdit generate --model wan-tiny -p \"a cat\" --frames 9 -H 64 -W 64 \\\n"
	"      --steps 4 -o clip.mp4\n"
	"  pdit tiny wan-width --family wan --wan-width   # Wan2.1-T2V-1.3B's widths, 2 blocks, bf16\n";

/* A folder with anything in it (or a file in its place). */
static int pd_tiny_occupied(const char *dir)
{
	DIR *d;
	struct dirent *ent;
	struct stat sb;
	int n = 0;

	if (lstat(dir, &sb))
		return 0;
	if (!pd_is_dir(dir) || !(d = opendir(dir)))
		return 1;
	while (!n && (ent = readdir(d)))
		n = strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..");
	closedir(d);
	return n;
}

/* Writes the model into a new folder beside DIR and puts it in DIR's place
 * whole: DIR holds the old model or the new one, never a mixture, and
 * nothing of a failed or interrupted write is left. An occupied DIR only
 * with FORCE. */
static int pd_tiny_replace(const char *path, const char *family, const struct pd_tiny_opts *o, int force)
{
	char *dir = pd_strdup(path), *tmp = NULL, *old = NULL, *slash;
	int rc = -1, occupied, moved = 0;
	mode_t mask;

	if (!dir)
		return -1;
	/* "build/tiny-model/" names the folder, not something inside it */
	for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
		dir[n - 1] = 0;
	occupied = pd_tiny_occupied(dir);
	tmp = pd_strfmt("%s.new-XXXXXX", dir);
	old = pd_strfmt("%s.old-XXXXXX", dir);
	if (!tmp || !old)
		goto out;
	if (occupied && !pd_is_dir(dir)) {
		pd_errorf("%s is a file, not a folder", dir);
		goto out;
	}
	if (occupied && !force) {
		pd_errorf("%s is not empty: give --force to replace it (the whole folder), or name a new folder", dir);
		goto out;
	}
	/* the folders above it, as before */
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		rc = pd_mkdirs(dir);
		*slash = '/';
		if (rc)
			goto out;
		rc = -1;
	}
	pd_cli_pending_tree(tmp);
	if (!mkdtemp(tmp)) {
		pd_errorf("cannot create a folder beside %s: %s", dir, strerror(errno));
		goto out;
	}
	/* mkdtemp's 0700 would stay the model's */
	mask = umask(0);
	umask(mask);
	chmod(tmp, 0777 & ~mask);
	if (pd_tiny_model(family, tmp, o) || pd_cli_interrupted())
		goto out;
	if (occupied) {
		/* the old folder steps aside first: rename cannot replace a full one */
		if (!mkdtemp(old) || rename(dir, old)) {
			pd_errorf("cannot move %s aside: %s", dir, strerror(errno));
			rmdir(old);
			goto out;
		}
		moved = 1;
	}
	if (rename(tmp, dir)) {
		pd_errorf("cannot rename %s to %s: %s", tmp, dir, strerror(errno));
		if (moved)
			rename(old, dir);
		goto out;
	}
	rc = moved ? pd_remove_tree(old) : 0;
out:
	if (rc && tmp && pd_is_dir(tmp))
		pd_remove_tree(tmp);
	pd_cli_pending_tree(NULL);
	free(dir);
	free(tmp);
	free(old);
	return rc;
}

/* Room for the families' own flags and their --NAME-width presets. */
#define PD_TINY_MAX_EXTRA 32

static int pd_cmd_tiny(int argc, char **argv)
{
	const char *const *families = pd_family_names();
	struct pd_tiny_opts o, d;
	const char *dtype = NULL, *vae_ch = NULL, *family = families[0], *pos[1];
	int real[16] = { 0 }, no_guidance = 0, force = 0, n_pos, hr, n = 0, n_extra = 0;
	char names[PD_TINY_MAX_EXTRA][48], helps[PD_TINY_MAX_EXTRA][200], fam_help[400], fam_meta[120], summary[200];
	struct pd_arg opts[64];
	const struct pd_arg common[] = {
		{ "--family", 0, PD_ARG_STRING, &family, fam_meta, fam_help, NULL },
		{ NULL, 0, PD_ARG_FLAG, real, NULL, NULL, NULL }, /* each family's --NAME-width goes here */
		{ NULL, 0, PD_ARG_INT, &d, NULL, NULL, NULL }, /* each family's own flags go here */
		{ "--full", 0, PD_ARG_FLAG, &d.full, NULL, "the published layout whole: text encoders, tokenizers, sharded weights with index files", NULL },
		{ "--seed", 's', PD_ARG_U64, &d.seed, "S", "seed of every tensor (default 1)", NULL },
		{ "--heads", 0, PD_ARG_COUNT, &d.heads, "N", "attention heads (default 4)", NULL },
		{ "--head-dim", 0, PD_ARG_COUNT, &d.head_dim, "N", "channels per head (default 16)", NULL },
		{ "--layers", 0, PD_ARG_INT, &d.layers, "N", "double-stream blocks (default 2)", NULL },
		{ "--single-layers", 0, PD_ARG_INT, &d.single_layers, "N", "single-stream blocks (default 2)", NULL },
		{ "--in-channels", 0, PD_ARG_COUNT, &d.in_channels, "N", "packed latent channels, 4 x VAE latent channels (default 64)", NULL },
		{ "--joint-dim", 0, PD_ARG_COUNT, &d.joint_dim, "N", "prompt embedding width (default 64)", NULL },
		{ "--pooled-dim", 0, PD_ARG_COUNT, &d.pooled_dim, "N", "pooled embedding width (default 32)", NULL },
		{ "--no-guidance", 0, PD_ARG_FLAG, &no_guidance, NULL, "schnell-style: no guidance embedder, unshifted scheduler", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &dtype, "f32|bf16|f16", "weights on disk (default f32; bf16 with a --NAME-width preset)", NULL },
		{ "--vae-channels", 0, PD_ARG_STRING, &vae_ch, "A,B,C,D", "VAE block_out_channels (default 16,32,32,32)", NULL },
		{ "--vae-layers", 0, PD_ARG_COUNT, &d.vae_layers, "N", "VAE layers_per_block (default 1)", NULL },
		{ "--vae-groups", 0, PD_ARG_COUNT, &d.vae_groups, "N", "VAE norm_num_groups (default 8)", NULL },
		{ "--batch", 0, PD_ARG_COUNT, &d.batch, "N", "prompts in embeds.safetensors (default 1)", NULL },
		{ "--txt-len", 0, PD_ARG_COUNT, &d.txt_len, "N", "text tokens in embeds.safetensors (default 16)", NULL },
		{ "--force", 'f', PD_ARG_FLAG, &force, NULL, "replace DIR when it is not empty (the whole folder)", NULL },
	};

	/* the families and their own flags, from the table of families */
	fam_help[0] = fam_meta[0] = 0;
	for (int f = 0; families[f]; f++) {
		snprintf(fam_help + strlen(fam_help), sizeof(fam_help) - strlen(fam_help), "%s%s: %s%s",
			 f ? "; " : "the model family: ", families[f], pd_family_title(families[f]), f ? "" : " (the default)");
		snprintf(fam_meta + strlen(fam_meta), sizeof(fam_meta) - strlen(fam_meta), "%s%s", f ? "|" : "", families[f]);
	}
	pd_tiny_defaults(&d);
	for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++) {
		if (common[i].long_name) {
			opts[n++] = common[i];
			continue;
		}
		for (int f = 0; families[f] && f < 16 && n_extra < PD_TINY_MAX_EXTRA; f++) {
			const struct pd_tiny_flag *x = pd_tiny_model_flags(families[f]);

			if (common[i].dest == real) {
				snprintf(names[n_extra], sizeof(names[n_extra]), "--%s-width", families[f]);
				snprintf(helps[n_extra], sizeof(helps[n_extra]), "with --family %s: its real widths with few "
					 "blocks, bf16", families[f]);
				opts[n++] = (struct pd_arg){ names[n_extra], 0, PD_ARG_FLAG, &real[f], NULL, helps[n_extra],
							     NULL };
				n_extra++;
				continue;
			}
			for (; x->name && n_extra < PD_TINY_MAX_EXTRA; x++, n_extra++) {
				snprintf(names[n_extra], sizeof(names[n_extra]), "--%s", x->name);
				opts[n++] = (struct pd_arg){ names[n_extra], 0, PD_ARG_COUNT, (char *)&d + x->offset, "N", x->help,
							     NULL };
			}
		}
	}
	memset(&opts[n], 0, sizeof(opts[n]));

	/* Options apply on top of the family's preset, so parse twice: once
	 * to learn the preset, once more onto it. */
	hr = pd_args_parse("tiny", opts, argc, argv, 2, pos, 1, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_tiny_usage, opts, pd_tiny_examples);
		return 0;
	}
	if (hr || pd_tiny_model_defaults(family, 0, &d))
		return pd_cli_fail();
	for (int f = 0; families[f]; f++)
		if (real[f] && strcmp(family, families[f]) != 0) {
			pd_errorf("--%s-width goes with --family %s", families[f], families[f]);
			return pd_cli_fail();
		}
	for (int f = 0; families[f]; f++)
		if (strcmp(family, families[f]) == 0)
			pd_tiny_model_defaults(family, real[f], &d);
	pd_args_parse("tiny", opts, argc, argv, 2, pos, 1, &n_pos);
	o = d;
	if (n_pos != 1) {
		pd_errorf("tiny needs the folder to write: pdit tiny DIR");
		return pd_cli_fail();
	}
	if (no_guidance)
		o.guidance = 0;
	int used = 0;

	if (vae_ch && (sscanf(vae_ch, "%d,%d,%d,%d%n", &o.vae_blocks[0], &o.vae_blocks[1], &o.vae_blocks[2],
			      &o.vae_blocks[3], &used) != 4 || vae_ch[used])) {
		pd_errorf("--vae-channels needs four numbers, like 16,32,32,32");
		return pd_cli_fail();
	}
	if (o.vae_layers < 0 || o.vae_layers > 8 || o.vae_groups < 1) {
		pd_errorf("--vae-layers must be 0..8 and --vae-groups at least 1");
		return pd_cli_fail();
	}
	if (dtype) {
		if (strcmp(dtype, "f32") == 0)
			o.dtype = PD_F32;
		else if (strcmp(dtype, "bf16") == 0)
			o.dtype = PD_BF16;
		else if (strcmp(dtype, "f16") == 0)
			o.dtype = PD_F16;
		else {
			pd_errorf("--dtype must be f32, bf16 or f16, not '%s'", dtype);
			return pd_cli_fail();
		}
	}
	if (o.heads < 1 || o.head_dim < 4 || o.head_dim % 2 || o.layers < 0 || o.single_layers < 0 ||
	    o.in_channels < 4 || o.in_channels % 4 || o.joint_dim < 1 || o.pooled_dim < 1 || o.batch < 1 ||
	    o.txt_len < 1) {
		pd_errorf("tiny: sizes must be positive (--head-dim even and >= 4, --in-channels a multiple of 4)");
		return pd_cli_fail();
	}
	if (pd_tiny_replace(pos[0], family, &o, force))
		return pd_cli_interrupted() ? pd_cli_stop_interrupted() : pd_cli_fail();
	pd_tiny_model_summary(family, &o, summary, sizeof(summary));
	pd_log(1, "pdit: wrote %s (%s)\n", pos[0], summary);
	return 0;
}

/* ======================================================================= */
/* main                                                                    */
/* ======================================================================= */

static void pd_usage(FILE *f)
{
	fprintf(f,
		"pdit %s - diffusion transformers (FLUX.1, Qwen-Image, Wan2.1) in one C program\n"
		"\n"
		"usage: [mpirun -np N] pdit COMMAND [options]     (pdit COMMAND --help for each)\n"
		"\n"
		"commands:\n"
		"  generate   prompt -> PNG or video, equal to the family's diffusers pipeline, on one\n"
		"             process or a mesh of them (data, CFG, tensor, Ulysses, ring, PipeFusion,\n"
		"             DistriFusion)\n"
		"  encode     prompts -> the text encoders' embeddings (a file generate --embeds reads)\n"
		"  check      run a mesh and one process on the same inputs and compare, block by block\n"
		"  bench      time steps: seconds, GFLOP/s against the matmul rate, bytes sent, memory\n"
		"  serve      keep the model loaded and answer HTTP (OpenAI images, A1111 txt2img) on any mesh\n"
		"  plan       rank the meshes for N devices by predicted time; bytes and memory per process\n"
		"  forward    one transformer call on golden-style inputs (tests, debugging)\n"
		"  tiny       write a small random model folder to try pdit with\n"
		"  inspect    what a weights file holds: GGUF or safetensors, metadata, every tensor\n"
		"  quantize   a weights file to GGUF (Q8_0 ... Q4_K), fp8, or plain f32/f16/bf16\n"
		"  --version  this version, and what it was built with (CUDA, MPI, NCCL, FFmpeg, serve)\n"
		"\n"
		"example:\n"
		"  pdit tiny tiny-model --full && pdit generate --model tiny-model \\\n"
		"      -p \"a photo of a cat\" -H 256 -W 256 --steps 4 -o out.png\n",
		PDIT_VERSION);
}

/* forward and tiny write one file: they run in one process. */
static int pd_single_process(struct pd_comm *world, const char *cmd)
{
	if (world->size == 1)
		return 0;
	if (world->rank == 0)
		fprintf(stderr, "pdit: %s runs in one process, not under mpirun\n", cmd);
	return 1;
}

int pd_cli_parse_only(int argc, char **argv)
{
	if (argc < 2)
		return pd_errorf("no command");
	if (strcmp(argv[1], "generate") == 0)
		return pd_cmd_generate_parse_only(argc, argv);
	if (strcmp(argv[1], "check") == 0)
		return pd_cmd_check_parse_only(argc, argv);
	if (strcmp(argv[1], "bench") == 0)
		return pd_cmd_bench_parse_only(argc, argv);
	if (strcmp(argv[1], "serve") == 0)
		return pd_cmd_serve_parse_only(argc, argv);
	return pd_errorf("unknown command '%s'", argv[1]);
}

int pd_dispatch(struct pd_comm *world, int argc, char **argv)
{
	if (argc < 2) {
		if (world->rank == 0)
			pd_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "generate") == 0)
		return pd_cmd_generate(world, argc, argv);
	if (strcmp(argv[1], "check") == 0)
		return pd_cmd_check(world, argc, argv);
	if (strcmp(argv[1], "bench") == 0)
		return pd_cmd_bench(world, argc, argv);
	if (strcmp(argv[1], "serve") == 0)
		return pd_cmd_serve(world, argc, argv);
	if (strcmp(argv[1], "forward") == 0)
		return pd_single_process(world, "forward") ? 1 : pd_cmd_forward(argc, argv);
	if (strcmp(argv[1], "tiny") == 0)
		return pd_single_process(world, "tiny") ? 1 : pd_cmd_tiny(argc, argv);
	if (strcmp(argv[1], "encode") == 0)
		return pd_single_process(world, "encode") ? 1 : pd_cmd_encode(world, argc, argv);
	if (strcmp(argv[1], "plan") == 0)
		return pd_single_process(world, "plan") ? 1 : pd_cmd_plan(argc, argv);
	if (strcmp(argv[1], "inspect") == 0)
		return pd_single_process(world, "inspect") ? 1 : pd_cmd_inspect(argc, argv);
	if (strcmp(argv[1], "quantize") == 0)
		return pd_single_process(world, "quantize") ? 1 : pd_cmd_quantize(argc, argv);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		if (world->rank == 0)
			pd_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
		if (world->rank == 0)
			printf("pdit %s\n%s\nserve: %s\n", PDIT_VERSION, pd_build_about(),
			       pd_serve_built() ? "HTTP (libmicrohttpd)" : "none (-DPDIT_SERVE=ON with libmicrohttpd)");
		return 0;
	}
	if (world->rank == 0)
		fprintf(stderr, "pdit: unknown command '%s' (try pdit --help)\n", argv[1]);
	return 2;
}
