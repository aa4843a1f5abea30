/*
 * fuzz_serve_params.c - the service's request bodies, every route's
 * dialect (the JSON of /v1/images/generations, /sdapi/v1/txt2img and
 * img2img, /v1/jobs, /sdcpp/v1/vid_gen, and images.edit's after its
 * multipart form): what a client on the network sends. The input's first
 * byte picks the dialect (low bits) and strict mode (the top bit), the rest
 * is the body. A body taken must survive the way rank 0 hands it to the
 * other ranks: encoded, decoded and encoded again, the same text.
 */
#include "fuzz.h"
#include "pd_serve.h"

#define PD_FUZZ_APIS 6

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pd_serve_params p, q;
	char field[128], *a, *b;

	if (!size)
		return 0;
	if (pd_serve_params_parse(&p, (enum pd_serve_api)(data[0] % PD_FUZZ_APIS), (const char *)data + 1, size - 1,
				  data[0] >> 7, field, sizeof(field)))
		return 0;
	a = pd_serve_params_encode(&p);
	if (a && !pd_serve_params_decode(&q, a)) {
		b = pd_serve_params_encode(&q);
		if (b && strcmp(a, b) != 0) {
			fprintf(stderr, "fuzz_serve_params: a request changed on its way to the other ranks:\n%s\n%s\n",
				a, b);
			abort();
		}
		free(b);
		pd_serve_params_free(&q);
	} else if (a) {
		fprintf(stderr, "fuzz_serve_params: a request's own encoding was refused: %s\n", a);
		abort();
	}
	free(a);
	pd_serve_params_free(&p);
	return 0;
}
