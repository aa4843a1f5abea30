/*
 * pd_engine_families.c - the model families as the commands see them
 * through pdit.h: their names, the text encoders' flags they take, and
 * their tiny random models.
 */
#include "pd_engine_tools.h"
#include "pd_families.h"
#include "pd_tiny.h"
#include "pd_util.h"
#include "pdit.h"

#include <stdio.h>
#include <string.h>

const char *const *pd_family_names(void)
{
	static const char *names[16];

	for (int i = 0; i < 15 && pd_family_at(i); i++)
		names[i] = pd_family_at(i)->name;
	return names;
}

const char *pd_family_title(const char *name)
{
	for (int i = 0; name && pd_family_at(i); i++)
		if (strcmp(pd_family_at(i)->name, name) == 0)
			return pd_family_at(i)->title;
	return "";
}

/* Appends "FAMILY's TEXT" to BUF (LEN bytes), comma-separated. */
static void pd_known_add(char *buf, size_t len, const char *family, const char *text)
{
	size_t k = strlen(buf);

	snprintf(buf + k, len - k, "%s%s's %s", k ? ", " : "", family, text);
}

void pd_encoders_known(struct pd_encoders_known *k)
{
	memset(k, 0, sizeof(*k));
	for (int f = 0; pd_family_at(f); f++) {
		const struct pd_dit_family *fam = pd_family_at(f);

		for (int i = 0; i < fam->n_encoders && i < PD_MAX_ENCODERS; i++) {
			const struct pd_encoder_spec *e = &fam->encoders[i];
			char tok[96];
			int j;

			if (i + 1 > k->slots)
				k->slots = i + 1;
			if (e->seq_len)
				snprintf(tok, sizeof(tok), "%s (%d tokens)", e->kind, e->seq_len);
			else
				snprintf(tok, sizeof(tok), "%s", e->kind);
			pd_known_add(k->slot[i], sizeof(k->slot[i]), fam->name, tok);
			snprintf(tok, sizeof(tok), "%s (%s)", e->kind, e->tokenizer ? e->tokenizer : "its files");
			pd_known_add(k->tokenizer[i], sizeof(k->tokenizer[i]), fam->name, tok);
			if (!e->file)
				continue;
			for (j = 0; j < k->n_files && strcmp(k->files[j].name, e->file); j++)
				;
			if (j == k->n_files) {
				if (k->n_files == (int)(sizeof(k->files) / sizeof(k->files[0])))
					continue;
				k->files[k->n_files++].name = e->file;
			}
			pd_known_add(k->files[j].help, sizeof(k->files[j].help), fam->name, e->kind);
		}
	}
}

/* FAMILY's tiny models, or NULL with a message. */
static const struct pd_family_tiny *pd_tiny_of(const char *family)
{
	const struct pd_dit_family *fam = pd_family_named(family);

	if (fam && !fam->tiny)
		pd_errorf("the %s family has no tiny models", fam->name);
	return fam ? fam->tiny : NULL;
}

int pd_tiny_model_defaults(const char *family, int real, struct pd_tiny_opts *o)
{
	const struct pd_family_tiny *t = pd_tiny_of(family);

	if (!t)
		return -1;
	t->defaults(o, real);
	return 0;
}

const struct pd_tiny_flag *pd_tiny_model_flags(const char *family)
{
	static const struct pd_tiny_flag none[] = { { NULL, 0, NULL } };
	const struct pd_family_tiny *t = pd_tiny_of(family);

	return t ? t->flags : none;
}

int pd_tiny_model(const char *family, const char *dir, const struct pd_tiny_opts *o)
{
	const struct pd_family_tiny *t = pd_tiny_of(family);

	return t ? t->write(dir, o) : -1;
}

void pd_tiny_model_summary(const char *family, const struct pd_tiny_opts *o, char *buf, size_t len)
{
	const struct pd_family_tiny *t = pd_tiny_of(family);

	buf[0] = 0;
	if (t)
		t->summary(o, buf, len);
}

void pd_weights_gguf_rules(const struct pd_st *st, struct pd_gguf_rules *r)
{
	memset(r, 0, sizeof(*r));
	for (int i = 0; pd_family_at(i) && !r->arch; i++) {
		const struct pd_dit_family *fam = pd_family_at(i);

		if (fam->names_are && fam->names_are(st)) {
			r->arch = fam->gguf_arch;
			r->keep_f32 = fam->gguf_f32;
			r->q_1 = fam->gguf_q_1;
		}
	}
}
