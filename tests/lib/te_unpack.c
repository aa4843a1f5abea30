/*
 * te_unpack.c - rebuilds a golden text encoder's model.safetensors from the
 * model.rows.safetensors kept in the repository (see tests/lib/te_pack.py): each
 * token table NAME comes back as [NAME.full_rows, D] with the kept rows
 * (NAME.rows, NAME.values) in place and zeros elsewhere; every other tensor
 * is copied as it is.
 *
 *   te_unpack IN.rows.safetensors OUT.safetensors
 */
#include "pd_safetensors.h"
#include "pd_st_writer.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	struct pd_st *st = NULL;
	struct pd_st_writer *w = NULL;
	float *tables[4] = { 0 };
	char names[4][256];
	int n_tables = 0, rc = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: te_unpack IN.rows.safetensors OUT.safetensors\n");
		return 2;
	}
	if (pd_st_open(&st, argv[1]) || !(w = pd_st_writer_new()) || pd_st_writer_meta(w, "format", "pt"))
		goto out;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i], *vals;
		size_t len = strlen(t->name);
		const char *full;
		char key[300];
		int64_t rows, shape[2];

		if (len > 7 && strcmp(t->name + len - 7, ".values") == 0)
			continue;
		if (!(len > 5 && strcmp(t->name + len - 5, ".rows") == 0)) {
			if (pd_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data))
				goto out;
			continue;
		}
		if (n_tables == 4 || len - 5 >= sizeof(names[0])) {
			pd_errorf("%s: too many or too long token tables", argv[1]);
			goto out;
		}
		snprintf(names[n_tables], sizeof(names[0]), "%.*s", (int)(len - 5), t->name);
		snprintf(key, sizeof(key), "%s.values", names[n_tables]);
		vals = pd_st_get(st, key);
		snprintf(key, sizeof(key), "%s.full_rows", names[n_tables]);
		full = pd_st_meta(st, key);
		rows = full ? strtoll(full, NULL, 10) : 0;
		if (t->dtype != PD_I64 || t->ndim != 1 || !vals || vals->ndim != 2 || vals->shape[0] != t->shape[0] ||
		    rows <= 0) {
			pd_errorf("%s: %s needs an int64 list, a [K, D] %s.values and a %s metadata entry", argv[1],
				  t->name, names[n_tables], key);
			goto out;
		}
		shape[0] = rows;
		shape[1] = vals->shape[1];
		tables[n_tables] = pd_calloc((size_t)(rows * shape[1]), sizeof(float), "token table");
		if (!tables[n_tables])
			goto out;
		for (int64_t k = 0; k < t->shape[0]; k++) {
			int64_t id;

			memcpy(&id, t->data + k * 8, 8);
			if (id < 0 || id >= rows) {
				pd_errorf("%s: row %lld outside %lld", argv[1], (long long)id, (long long)rows);
				goto out;
			}
			if (pd_st_read_f32(vals, (size_t)(k * shape[1]), (size_t)shape[1], tables[n_tables] + id * shape[1]))
				goto out;
		}
		if (pd_st_writer_add(w, names[n_tables], PD_F32, 2, shape, tables[n_tables]))
			goto out;
		n_tables++;
	}
	rc = pd_st_writer_save(w, argv[2]) ? 1 : 0;
out:
	if (rc)
		fprintf(stderr, "te_unpack: %s\n", pd_last_error());
	for (int i = 0; i < 4; i++)
		free(tables[i]);
	pd_st_writer_free(w);
	pd_st_close(st);
	return rc;
}
