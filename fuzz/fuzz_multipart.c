/*
 * fuzz_multipart.c - the service's multipart/form-data reader (OpenAI's
 * images.edit) and the edit fields' parser after it. The input's first
 * line is the Content-Type (its boundary), the rest the body.
 */
#include "fuzz.h"
#include "pd_serve.h"
#include "pd_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	char ct[256], field[128], *json;
	size_t n = nl ? (size_t)(nl - data) : size;
	struct pd_serve_params p;

	if (n >= sizeof(ct))
		return 0;
	memcpy(ct, data, n);
	ct[n] = 0;
	json = pd_serve_multipart_json(ct, nl ? (const char *)nl + 1 : "", nl ? size - n - 1 : 0, field, sizeof(field));
	if (!json)
		return 0;
	if (!pd_serve_params_parse(&p, PD_API_OPENAI_EDIT, json, strlen(json), 1, field, sizeof(field)))
		pd_serve_params_free(&p);
	free(json);
	return 0;
}
