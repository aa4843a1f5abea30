/*
 * pdit_encode.c - pdit encode: prompts through the tokenizers and text
 * encoders into a safetensors file that pdit generate --embeds reads (and
 * the tests compare with transformers' outputs).
 */
#include "pd_args.h"
#include "pd_prompts.h"
#include "pd_util.h"
#include "pdit.h"
#include "pdit_cli.h"
#include "pdit_flags.h"

#include <stdlib.h>
#include <string.h>

static const char pd_encode_usage[] =
	"usage: pdit encode (--model DIR | --text-encoder[-N] DIR|FILE --tokenizer[-N] DIR ...)\n"
	"                   (-p TEXT | --prompts FILE) [-n TEXT] --out FILE [options]\n"
	"\n"
	"Encodes prompts as the family's pipeline does (the folder's transformer says\n"
	"which; FLUX without one): FLUX as FluxPipeline.encode_prompt, CLIP's pooled\n"
	"output of 77 padded ids and T5's last hidden state of --max-sequence-length\n"
	"padded ids (clip.input_ids [B,77], clip.pooler_output [B,H], t5.input_ids\n"
	"[B,N], t5.last_hidden_state [B,N,D] are written too). Writes the embeddings as\n"
	"prompt_embeds and pooled_prompt_embeds (with -n also negative_prompt_embeds and\n"
	"negative_pooled_prompt_embeds), the names pdit generate --embeds reads. Single\n"
	"files (--clip_l, --t5xxl, ...) work in place of the encoder folders.";

static const char pd_encode_examples[] =
	"  pdit tiny tiny-model --full\n"
	"  pdit encode --model tiny-model -p \"a photo of a cat\" --out cat.safetensors\n"
	"  pdit generate --model tiny-model --embeds cat.safetensors -H 256 -W 256 -o cat.png\n"
	"  pdit encode --model FLUX.1-dev --prompts prompts.txt -n \"blurry\" --dtype bf16 --out embeds.safetensors\n";

struct pd_encode_args {
	const char *model;              /* --model DIR */
	struct pd_cli_encoders enc;     /* the text encoders and tokenizers */
	const char *prompt, *negative, *prompts_file, *out, *dtype;
	const char *backend;            /* --backend */
	int max_seq, threads, verbose;
};

int pd_cmd_encode(struct pd_comm *world, int argc, char **argv)
{
	struct pd_encode_args a;
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_result res = { 0 };
	struct pd_engine *e = NULL;
	char **prompts = NULL;
	int n = 0, hr, rc = 1, n_pos = 0;
	const char *pos[1];
	const struct pd_arg rest[] = {
		{ "--prompt", 'p', PD_ARG_STRING, &a.prompt, "TEXT", "the prompt", NULL },
		{ "--prompts", 0, PD_ARG_STRING, &a.prompts_file, "FILE", "one prompt a line", NULL },
		{ "--negative-prompt", 'n', PD_ARG_STRING, &a.negative, "TEXT", "also encode a negative prompt (for --true-cfg-scale)", NULL },
		{ "--max-sequence-length", 0, PD_ARG_COUNT, &a.max_seq, "N", "text tokens of the prompt (the family's default: FLUX 512, or 256 without guidance embedding; Wan 512; Qwen-Image up to 512, each prompt its own length)", NULL },
		{ "--out", 'o', PD_ARG_STRING, &a.out, "FILE", "safetensors file to write", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &a.dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--threads", 't', PD_ARG_COUNT, &a.threads, "N", "threads (default: all cores)", NULL },
		{ "--backend", 0, PD_ARG_STRING, &a.backend, "cpu|cuda|auto", "what computes (default auto: CUDA where built and a GPU is present)", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &a.verbose, NULL, "more detail", NULL },
	};
	struct pd_arg opts[48];
	int k = 0;

	memset(&a, 0, sizeof(a));
	a.dtype = "f32";
	a.max_seq = PD_DEFAULT;
	opts[k++] = (struct pd_arg){ "--model", 'm', PD_ARG_STRING, &a.model, "DIR",
				     "diffusers model folder (its text encoders and tokenizers)", NULL };
	k = pd_cli_encoder_flags(&a.enc, opts, k, 1);
	for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
		opts[k++] = rest[i];
	memset(&opts[k], 0, sizeof(opts[k]));
	hr = pd_args_parse("encode", opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_encode_usage, opts, pd_encode_examples);
		return 0;
	}
	if (hr)
		return pd_cli_fail();
	if (a.verbose)
		pd_log_level = 2;
	if (!a.out) {
		pd_errorf("encode needs --out FILE");
		goto out;
	}
	if (!a.prompt == !a.prompts_file) {
		pd_errorf("give one of -p/--prompt and --prompts FILE");
		goto out;
	}
	if (a.max_seq != PD_DEFAULT && a.max_seq > 512) {
		pd_errorf("--max-sequence-length must be between 1 and 512 (got %d)", a.max_seq);
		goto out;
	}
	if (pd_out_check(a.out))
		goto out;
	if (a.prompt) {
		prompts = pd_calloc(1, sizeof(char *), "prompts");
		if (!prompts || !(prompts[0] = pd_strdup(a.prompt)))
			goto out;
		n = 1;
	} else if (pd_prompt_read_file(a.prompts_file, &prompts, &n)) {
		goto out;
	}
	pd_engine_options_init(&o);
	o.model = a.model;
	if (pd_cli_encoder_options(&a.enc, &o))
		goto out;
	o.dtype = a.dtype;
	o.threads = a.threads;
	o.backend = a.backend;
	o.log_level = pd_log_level;
	o.encode_only = 1;
	pd_request_init(&rq);
	rq.prompts = (const char *const *)prompts;
	rq.n_prompts = n;
	rq.negative = a.negative;
	rq.max_seq = a.max_seq;
	rq.want_pictures = 0;
	rq.want_embeds = 1;
	if (pd_engine_open(&e, world, &o, NULL) || pd_engine_run(e, &rq, &res) ||
	    pd_result_save_embeds(&res, a.out, prompts, n, a.negative))
		goto out;
	pd_log(1, "pdit: wrote %s (%d prompt%s, %lld text tokens of %lld, pooled %lld)\n", a.out, n, n > 1 ? "s" : "",
	       (long long)res.txt_len, (long long)res.txt_width, (long long)res.pooled_width);
	rc = 0;
out:
	if (rc)
		pd_cli_fail();
	pd_result_free(&res);
	pd_engine_close(e);
	for (int i = 0; i < n; i++)
		free(prompts[i]);
	free(prompts);
	return rc;
}
