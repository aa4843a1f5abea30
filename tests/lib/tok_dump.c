/*
 * tok_dump.c - prints both tokenizers' ids for prompts read from stdin,
 * one JSON string per line, for crosscheck_tokenizers.py:
 *
 *   tok_dump TOKENIZER_DIR TOKENIZER_2_DIR < prompts.jsonl
 *
 * Output per prompt: "clip id id ..." then "t5 id id ..." (sentencepiece ids,
 * without "</s>").
 */
#include "pd_tokenizer.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	struct pd_clip_tok clip;
	struct pd_t5_tok t5;
	char *line = NULL;
	size_t cap = 0;

	if (argc != 3 || pd_clip_tok_load(&clip, argv[1]) || pd_t5_tok_load(&t5, argv[2])) {
		fprintf(stderr, "usage: tok_dump TOKENIZER_DIR TOKENIZER_2_DIR < prompts.jsonl (%s)\n", pd_last_error());
		return 2;
	}
	while (getline(&line, &cap, stdin) > 0) {
		cJSON *j = cJSON_Parse(line);
		int32_t *ids = NULL;
		size_t n = 0;

		if (!cJSON_IsString(j)) {
			fprintf(stderr, "not a JSON string: %s", line);
			return 2;
		}
		if (pd_clip_tok_encode(&clip, j->valuestring, &ids, &n))
			return 2;
		printf("clip");
		for (size_t i = 0; i < n; i++)
			printf(" %d", ids[i]);
		free(ids);
		if (pd_t5_tok_encode(&t5, j->valuestring, &ids, &n))
			return 2;
		printf("\nt5");
		for (size_t i = 0; i < n; i++)
			printf(" %d", ids[i]);
		printf("\n");
		free(ids);
		cJSON_Delete(j);
	}
	free(line);
	pd_clip_tok_free(&clip);
	pd_t5_tok_free(&t5);
	return 0;
}
