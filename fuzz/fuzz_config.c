/*
 * fuzz_config.c - JSON configurations: the input is parsed once and read as
 * a FLUX transformer config, a VAE config, and (written to a folder) a
 * scheduler config, which is then set for a few step counts and lengths.
 */
#include "fuzz.h"
#include "pd_config.h"
#include "pd_flux.h"
#include "pd_scheduler.h"
#include "pd_vae.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = pd_fuzz_str(data, size);
	struct pd_config c;
	struct pd_flux_config fc;
	struct pd_vae_config vc;
	struct pd_scheduler s;

	memset(&c, 0, sizeof(c));
	if (pd_config_parse(&c, text, "config.json") == 0) {
		if (pd_flux_config_parse(&fc, &c) == 0)
			(void)pd_flux_blocks(&fc);
		pd_vae_config_parse(&vc, &c);
		pd_config_free(&c);
	}
	free(text);
	pd_fuzz_file(0, "scheduler_config.json", data, size);
	memset(&s, 0, sizeof(s));
	if (pd_scheduler_load(&s, pd_fuzz_dir()) == 0) {
		pd_scheduler_set(&s, 1, 256);
		pd_scheduler_set(&s, 28, 4096);
		pd_scheduler_set(&s, 1000, 1 << 20);
		pd_scheduler_free(&s);
	}
	return 0;
}
