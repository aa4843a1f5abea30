/*
 * pdit_encode.c - pdit encode: prompts through the tokenizers and text
 * encoders into a safetensors file that pdit generate --embeds reads (and
 * the tests compare with transformers' outputs).
 */
#include "pd_args.h"
#include "pd_backend_cpu.h"
#include "pd_config.h"
#include "pd_flux_prompt.h"
#include "pd_prompts.h"
#include "pd_util.h"
#include "pdit_cli.h"
#include "pd_st_writer.h"

#include <cjson/cJSON.h>

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

/* The default length from the model folder's transformer (512 for dev-style
 * guidance-embedded models, 256 otherwise), or 512 without one. */
static int pd_encode_default_length(const struct pd_model_paths *mp)
{
	struct pd_config c;
	int g = 1;

	if (mp->transformer && pd_is_dir(mp->transformer) &&
	    pd_config_load_in(&c, mp->transformer, "config.json", "FLUX transformer") == 0) {
		if (pd_config_bool(&c, "guidance_embeds", 0, 0, &g))
			g = 1;
		pd_config_free(&c);
	}
	return pd_flux_prompt_default_length(g);
}

int pd_cmd_encode(int argc, char **argv)
{
	struct pd_encode_args a;
	struct pd_model_paths mp = { 0 };
	struct pd_model_flags f;
	struct pd_flux_prompt_encoder pe;
	struct pd_backend *be = NULL;
	struct pd_st_writer *w = NULL;
	enum pd_dtype dt;
	char **prompts = NULL;
	int n = 0, hr, rc = 1, loaded = 0, n_pos = 0;
	const char *pos[1];
	int64_t *cids = NULL, *tids = NULL, J, P;
	float *emb = NULL, *pool = NULL, *nemb = NULL, *npool = NULL;
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
	f = (struct pd_model_flags){ a.model, NULL, NULL, NULL, a.clip_l ? a.clip_l : a.text_encoder,
				     a.t5xxl ? a.t5xxl : a.text_encoder_2, a.tokenizer, a.tokenizer_2 };
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
	if (pd_dtype_compute(a.dtype, &dt) || pd_model_paths_resolve(&mp, &f, 1))
		goto out;
	if (a.max_seq == 0)
		a.max_seq = pd_encode_default_length(&mp);
	if (a.max_seq < 1 || a.max_seq > 512) {
		pd_errorf("--max-sequence-length must be between 1 and 512 (got %d)", a.max_seq);
		goto out;
	}
	if (a.prompt) {
		prompts = pd_calloc(1, sizeof(char *), "prompts");
		if (!prompts || !(prompts[0] = pd_strdup(a.prompt)))
			goto out;
		n = 1;
	} else if (pd_prompt_read_file(a.prompts_file, &prompts, &n)) {
		goto out;
	}
	if (pd_backend_cpu_new(&be, dt, a.threads) || pd_flux_prompt_encoder_load(&pe, &mp, be))
		goto out;
	loaded = 1;
	J = pd_t5_get_config(pe.t5)->d_model;
	P = pd_clip_get_config(pe.clip)->hidden;
	cids = pd_malloc((size_t)n * 77 * sizeof(int64_t), "ids");
	tids = pd_malloc((size_t)n * (size_t)a.max_seq * sizeof(int64_t), "ids");
	emb = pd_malloc((size_t)(n * a.max_seq * J) * sizeof(float), "embeddings");
	pool = pd_malloc((size_t)(n * P) * sizeof(float), "embeddings");
	nemb = a.negative ? pd_malloc((size_t)(n * a.max_seq * J) * sizeof(float), "embeddings") : NULL;
	npool = a.negative ? pd_malloc((size_t)(n * P) * sizeof(float), "embeddings") : NULL;
	if (!cids || !tids || !emb || !pool || (a.negative && (!nemb || !npool)))
		goto out;
	if (pe.clip_tok.max_len != 77) {
		pd_errorf("%s: model_max_length %d; FLUX's CLIP takes 77", mp.tokenizer, pe.clip_tok.max_len);
		goto out;
	}
	for (int b = 0; b < n; b++) {
		pd_log(1, "pdit: encoding prompt %d of %d\n", b + 1, n);
		if (pd_flux_prompt_encode(&pe, prompts[b], a.max_seq, emb + (int64_t)b * a.max_seq * J, pool + b * P,
				     cids + (int64_t)b * 77, tids + (int64_t)b * a.max_seq))
			goto out;
		if (a.negative && pd_flux_prompt_encode(&pe, a.negative, a.max_seq, nemb + (int64_t)b * a.max_seq * J,
						   npool + b * P, NULL, NULL))
			goto out;
	}
	w = pd_st_writer_new();
	{
		int64_t s_ci[2] = { n, 77 }, s_ti[2] = { n, a.max_seq }, s_e[3] = { n, a.max_seq, J }, s_p[2] = { n, P };
		cJSON *list = cJSON_CreateArray();
		char *meta;

		for (int b = 0; list && b < n; b++)
			cJSON_AddItemToArray(list, cJSON_CreateString(prompts[b]));
		meta = list ? cJSON_PrintUnformatted(list) : NULL;
		cJSON_Delete(list);
		if (!w || !meta || pd_st_writer_add(w, "clip.input_ids", PD_I64, 2, s_ci, cids) ||
		    pd_st_writer_add(w, "clip.pooler_output", PD_F32, 2, s_p, pool) ||
		    pd_st_writer_add(w, "t5.input_ids", PD_I64, 2, s_ti, tids) ||
		    pd_st_writer_add(w, "t5.last_hidden_state", PD_F32, 3, s_e, emb) ||
		    pd_st_writer_add(w, "prompt_embeds", PD_F32, 3, s_e, emb) ||
		    pd_st_writer_add(w, "pooled_prompt_embeds", PD_F32, 2, s_p, pool) ||
		    (a.negative && (pd_st_writer_add(w, "negative_prompt_embeds", PD_F32, 3, s_e, nemb) ||
				    pd_st_writer_add(w, "negative_pooled_prompt_embeds", PD_F32, 2, s_p, npool))) ||
		    pd_st_writer_meta(w, "prompts", meta) ||
		    (a.negative && pd_st_writer_meta(w, "negative_prompt", a.negative)) ||
		    pd_st_writer_save(w, a.out)) {
			free(meta);
			goto out;
		}
		free(meta);
	}
	pd_log(1, "pdit: wrote %s (%d prompt%s, %d T5 tokens of %lld, pooled %lld)\n", a.out, n, n > 1 ? "s" : "",
	       a.max_seq, (long long)J, (long long)P);
	rc = 0;
out:
	if (rc)
		pd_cli_fail();
	pd_st_writer_free(w);
	if (loaded)
		pd_flux_prompt_encoder_free(&pe);
	pd_backend_free(be);
	for (int i = 0; i < n; i++)
		free(prompts[i]);
	free(prompts);
	free(cids);
	free(tids);
	free(emb);
	free(pool);
	free(nemb);
	free(npool);
	pd_model_paths_free(&mp);
	return rc;
}
