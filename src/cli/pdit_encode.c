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

#include <stdlib.h>
#include <string.h>

static const char pd_encode_usage[] =
	"usage: pdit encode (--model DIR | --text-encoder DIR --tokenizer DIR --text-encoder-2 DIR --tokenizer-2 DIR)\n"
	"                   (-p TEXT | --prompts FILE) [-n TEXT] --out FILE [options]\n"
	"\n"
	"Encodes prompts as FluxPipeline.encode_prompt does: CLIP's pooled output of 77\n"
	"padded ids and T5's last hidden state of --max-sequence-length padded ids. Writes\n"
	"clip.input_ids [B,77], clip.pooler_output [B,H], t5.input_ids [B,N],\n"
	"t5.last_hidden_state [B,N,D], and the same embeddings as prompt_embeds and\n"
	"pooled_prompt_embeds (with -n also negative_prompt_embeds and\n"
	"negative_pooled_prompt_embeds), the names pdit generate --embeds reads. Single\n"
	"files (--clip_l, --t5xxl) work in place of the encoder folders.";

static const char pd_encode_examples[] =
	"  pdit tiny tiny-model --full\n"
	"  pdit encode --model tiny-model -p \"a photo of a cat\" --out cat.safetensors\n"
	"  pdit generate --model tiny-model --embeds cat.safetensors -H 256 -W 256 -o cat.png\n"
	"  pdit encode --model FLUX.1-dev --prompts prompts.txt -n \"blurry\" --dtype bf16 --out embeds.safetensors\n";

struct pd_encode_args {
	const char *model, *text_encoder, *text_encoder_2, *clip_l, *t5xxl, *tokenizer, *tokenizer_2;
	const char *prompt, *negative, *prompts_file, *out, *dtype;
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
	const struct pd_arg opts[] = {
		{ "--model", 'm', PD_ARG_STRING, &a.model, "DIR", "diffusers FLUX folder (text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/)", NULL },
		{ "--text-encoder", 0, PD_ARG_STRING, &a.text_encoder, "DIR", "CLIP text encoder folder (overrides --model's)", NULL },
		{ "--clip_l", 0, PD_ARG_STRING, &a.clip_l, "FILE", "CLIP text encoder in one .safetensors file", NULL },
		{ "--text-encoder-2", 0, PD_ARG_STRING, &a.text_encoder_2, "DIR", "T5 encoder folder (overrides --model's)", NULL },
		{ "--t5xxl", 0, PD_ARG_STRING, &a.t5xxl, "FILE", "T5 encoder in one .safetensors file", NULL },
		{ "--tokenizer", 0, PD_ARG_STRING, &a.tokenizer, "DIR", "CLIP tokenizer folder", NULL },
		{ "--tokenizer-2", 0, PD_ARG_STRING, &a.tokenizer_2, "DIR", "T5 tokenizer folder", NULL },
		{ "--prompt", 'p', PD_ARG_STRING, &a.prompt, "TEXT", "the prompt", NULL },
		{ "--prompts", 0, PD_ARG_STRING, &a.prompts_file, "FILE", "one prompt a line", NULL },
		{ "--negative-prompt", 'n', PD_ARG_STRING, &a.negative, "TEXT", "also encode a negative prompt (for --true-cfg-scale)", NULL },
		{ "--max-sequence-length", 0, PD_ARG_INT, &a.max_seq, "N", "T5 tokens (default 512, 256 for models without guidance embedding)", NULL },
		{ "--out", 'o', PD_ARG_STRING, &a.out, "FILE", "safetensors file to write", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &a.dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--threads", 't', PD_ARG_INT, &a.threads, "N", "threads (default: all cores)", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &a.verbose, NULL, "more detail", NULL },
		{ 0 },
	};

	memset(&a, 0, sizeof(a));
	a.dtype = "f32";
	hr = pd_args_parse("encode", opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_encode_usage, opts, pd_encode_examples);
		return 0;
	}
	if (hr)
		return pd_cli_fail();
	if (a.verbose)
		pd_log_level = 2;
	if ((a.clip_l && a.text_encoder) || (a.t5xxl && a.text_encoder_2)) {
		pd_errorf("give each encoder once: --text-encoder or --clip_l, --text-encoder-2 or --t5xxl");
		goto out;
	}
	if (!a.out) {
		pd_errorf("encode needs --out FILE");
		goto out;
	}
	if (!a.prompt == !a.prompts_file) {
		pd_errorf("give one of -p/--prompt and --prompts FILE");
		goto out;
	}
	if (a.max_seq < 0 || a.max_seq > 512) {
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
	o.text_encoder = a.clip_l ? a.clip_l : a.text_encoder;
	o.text_encoder_2 = a.t5xxl ? a.t5xxl : a.text_encoder_2;
	o.tokenizer = a.tokenizer;
	o.tokenizer_2 = a.tokenizer_2;
	o.dtype = a.dtype;
	o.threads = a.threads;
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
