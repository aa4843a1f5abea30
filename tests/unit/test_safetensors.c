/*
 * test_safetensors.c - the safetensors reader and writer.
 *
 * Round trip through the writer (every float dtype, metadata, shards), and
 * broken files: each must be refused with a message naming the file and the
 * problem, never crash (this binary also runs under ASan/UBSan). A last pass
 * flips random bytes of a valid header and truncates at random lengths: any
 * outcome is fine except a crash or a hang.
 */
#include "pd_safetensors.h"
#include "pd_st_writer.h"
#include "pd_test.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

/* Paths live in a ring of buffers so a few may be held at once. */
static char *tmp_path(const char *name)
{
	static char buf[8][512];
	static int next;
	char *b = buf[next++ % 8];

	snprintf(b, 512, "%s/%s", tmpdir, name);
	return b;
}

/* Writes an 8-byte length (LEN, or the header's own length when LEN < 0),
 * the header text and DATA_BYTES bytes of data. */
static void write_raw(const char *path, const char *header, long long len, size_t data_bytes)
{
	FILE *f = fopen(path, "wb");
	unsigned long long n = len < 0 ? strlen(header) : (unsigned long long)len;

	for (int i = 0; i < 8; i++)
		fputc((int)((n >> (8 * i)) & 0xff), f);
	fwrite(header, 1, strlen(header), f);
	for (size_t i = 0; i < data_bytes; i++)
		fputc((int)(i * 7 + 1), f);
	fclose(f);
}

/* Opening must fail and the message must mention WANT. */
static void expect_refused(const char *what, const char *path, const char *want)
{
	struct pd_st *st = NULL;
	int rc = pd_st_open(&st, path);

	PD_CHECK(rc != 0, "%s: broken file was accepted", what);
	if (rc == 0) {
		pd_st_close(st);
		return;
	}
	PD_CHECK(strstr(pd_last_error(), want) != NULL, "%s: message '%s' lacks '%s'", what, pd_last_error(), want);
	PD_CHECK(strstr(pd_last_error(), path) != NULL, "%s: message '%s' does not name the file", what,
		 pd_last_error());
}

static void test_broken(void)
{
	const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
	char *p;

	p = tmp_path("ok.safetensors");
	write_raw(p, ok, -1, 16);
	{
		struct pd_st *st;

		PD_CHECK(pd_st_open(&st, p) == 0, "valid file refused: %s", pd_last_error());
		if (st == NULL)
			return;
		pd_st_close(st);
	}
	p = tmp_path("empty.safetensors");
	write_raw(p, "", 0, 0);
	truncate(p, 5);
	expect_refused("shorter than the length field", p, "too short");

	p = tmp_path("trunc.safetensors");
	write_raw(p, ok, -1, 10);
	expect_refused("data truncated", p, "outside");

	p = tmp_path("hlen.safetensors");
	write_raw(p, ok, 1000000, 16);
	expect_refused("header longer than the file", p, "exceeds the file size");

	p = tmp_path("hhuge.safetensors");
	write_raw(p, ok, 0x7fffffffffffffffLL, 16);
	expect_refused("absurd header length", p, "exceeds the file size");

	p = tmp_path("json.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",", -1, 16);
	expect_refused("malformed JSON", p, "JSON");

	p = tmp_path("notobj.safetensors");
	write_raw(p, "[1,2,3]", -1, 0);
	expect_refused("header not an object", p, "JSON object");

	p = tmp_path("dtype.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F33\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", -1, 16);
	expect_refused("unknown dtype", p, "unknown dtype");

	p = tmp_path("shape.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", -1, 16);
	expect_refused("shape not matching bytes", p, "needs");

	p = tmp_path("negdim.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,2],\"data_offsets\":[0,16]}}", -1, 16);
	expect_refused("negative dimension", p, "invalid dimension");

	p = tmp_path("overflow.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,1099511627776],"
		     "\"data_offsets\":[0,16]}}", -1, 16);
	expect_refused("shape product overflow", p, "overflow");

	p = tmp_path("range.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", -1, 16);
	expect_refused("range past the end", p, "outside");

	p = tmp_path("backwards.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", -1, 16);
	expect_refused("end before begin", p, "end before");

	p = tmp_path("overlap.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
		     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", -1, 16);
	expect_refused("overlapping tensors", p, "overlap");

	p = tmp_path("dup.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		     "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", -1, 16);
	expect_refused("duplicate name", p, "twice");

	p = tmp_path("meta.safetensors");
	write_raw(p, "{\"__metadata__\":{\"k\":3},\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
		  -1, 16);
	expect_refused("non-string metadata", p, "__metadata__");

	p = tmp_path("offs.safetensors");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0.5,16]}}", -1, 16);
	expect_refused("fractional offset", p, "data_offsets");

	p = tmp_path("nodtype.safetensors");
	write_raw(p, "{\"a\":{\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 16);
	expect_refused("missing dtype", p, "dtype");

	p = tmp_path("missing.safetensors");
	unlink(p);
	expect_refused("missing file", p, "No such file");
}

/* Writes, reads back every dtype, metadata and a block read. */
static void test_roundtrip(void)
{
	float v[12];
	uint16_t bf[12], hf[12];
	int64_t shape[2] = { 3, 4 };
	struct pd_st_writer *w = pd_st_writer_new();
	struct pd_st *st;
	char *p = tmp_path("rt.safetensors");

	for (int i = 0; i < 12; i++) {
		v[i] = (float)(i - 5) * 0.37f;
		bf[i] = pd_f32_to_bf16(v[i]);
		hf[i] = pd_f32_to_f16(v[i]);
	}
	PD_CHECK(pd_st_writer_add(w, "f32", PD_F32, 2, shape, v) == 0, "add");
	PD_CHECK(pd_st_writer_add(w, "bf16", PD_BF16, 2, shape, bf) == 0, "add");
	PD_CHECK(pd_st_writer_add(w, "f16", PD_F16, 2, shape, hf) == 0, "add");
	PD_CHECK(pd_st_writer_meta(w, "key", "value \"quoted\"") == 0, "meta");
	PD_CHECK(pd_st_writer_save(w, p) == 0, "save: %s", pd_last_error());
	pd_st_writer_free(w);
	PD_CHECK(access(tmp_path("rt.safetensors.tmp"), F_OK) != 0, "temporary file left behind");
	PD_CHECK(pd_st_open(&st, p) == 0, "reopen: %s", pd_last_error());
	if (!st)
		return;
	{
		const char *m = pd_st_meta(st, "key");

		PD_CHECK(m && strcmp(m, "value \"quoted\"") == 0, "metadata round trip");
	}
	for (int k = 0; k < 3; k++) {
		const char *names[3] = { "f32", "bf16", "f16" };
		const struct pd_st_tensor *t = pd_st_get(st, names[k]);
		float got[12], blk[4];

		PD_CHECK(t && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4, "%s shape", names[k]);
		if (!t)
			continue;
		pd_poison(got, 12);
		PD_CHECK(pd_st_read_f32(t, 0, 12, got) == 0, "read %s", names[k]);
		for (int i = 0; i < 12; i++) {
			float want = k == 0 ? v[i] : k == 1 ? pd_bf16_to_f32(bf[i]) : pd_f16_to_f32(hf[i]);

			PD_CHECK(got[i] == want, "%s[%d] = %g, want %g", names[k], i, got[i], want);
		}
		/* the 2x2 block at rows 1..2, columns 1..2 */
		pd_poison(blk, 4);
		PD_CHECK(pd_st_read_block_f32(t, 1, 2, 1, 2, blk, 2) == 0, "block read");
		PD_CHECK(blk[0] == got[5] && blk[1] == got[6] && blk[2] == got[9] && blk[3] == got[10],
			 "%s block values", names[k]);
		PD_CHECK(pd_st_read_block_f32(t, 2, 2, 0, 1, blk, 1) != 0, "block past the end accepted");
	}
	{
		int64_t want[2] = { 3, 5 };

		PD_CHECK(pd_st_require(st, "f32", 2, want, NULL) != 0 && strstr(pd_last_error(), "[3, 4]"),
			 "shape mismatch message: %s", pd_last_error());
		PD_CHECK(pd_st_require(st, "nope", 2, want, NULL) != 0 && strstr(pd_last_error(), "missing"),
			 "missing tensor message: %s", pd_last_error());
	}
	pd_st_close(st);
}

/* An index over two shards; a shard named with a path is refused. */
static void test_shards(void)
{
	float a[2] = { 1, 2 }, b[3] = { 3, 4, 5 };
	int64_t sa = 2, sb = 3;
	struct pd_st_writer *w;
	struct pd_st *st;
	FILE *f;

	w = pd_st_writer_new();
	pd_st_writer_add(w, "a", PD_F32, 1, &sa, a);
	pd_st_writer_save(w, tmp_path("m-00001-of-00002.safetensors"));
	pd_st_writer_free(w);
	w = pd_st_writer_new();
	pd_st_writer_add(w, "b", PD_F32, 1, &sb, b);
	pd_st_writer_save(w, tmp_path("m-00002-of-00002.safetensors"));
	pd_st_writer_free(w);
	f = fopen(tmp_path("m.safetensors.index.json"), "w");
	fprintf(f, "{\"metadata\":{\"total_size\":20},\"weight_map\":{\"a\":\"m-00001-of-00002.safetensors\","
		   "\"b\":\"m-00002-of-00002.safetensors\"}}");
	fclose(f);
	PD_CHECK(pd_st_open_component(&st, tmpdir, "m") == 0, "sharded open: %s", pd_last_error());
	if (st) {
		const struct pd_st_tensor *t = pd_st_get(st, "b");
		float got[3];

		PD_CHECK(st->n_files == 2 && st->n_tensors == 2, "two shards, two tensors");
		PD_CHECK(t && pd_st_read_f32(t, 0, 3, got) == 0 && got[2] == 5, "tensor from the second shard");
		pd_st_close(st);
	}
	f = fopen(tmp_path("bad.safetensors.index.json"), "w");
	fprintf(f, "{\"weight_map\":{\"a\":\"../m-00001-of-00002.safetensors\"}}");
	fclose(f);
	expect_refused("shard outside the folder", tmp_path("bad.safetensors.index.json"), "shard file");
	f = fopen(tmp_path("lie.safetensors.index.json"), "w");
	fprintf(f, "{\"weight_map\":{\"b\":\"m-00001-of-00002.safetensors\"}}");
	fclose(f);
	expect_refused("index naming the wrong shard", tmp_path("lie.safetensors.index.json"), "not in shard");
	PD_CHECK(pd_st_open_component(&st, tmpdir, "absent") != 0 && strstr(pd_last_error(), "absent.safetensors"),
		 "missing component message: %s", pd_last_error());
}

/* Random corruption of a valid file: refusing is fine, crashing is not. */
static void test_mutations(unsigned seed)
{
	const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
			  "\"w\":{\"dtype\":\"BF16\",\"shape\":[4,3],\"data_offsets\":[0,24]},"
			  "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}";
	size_t hl = strlen(hdr), total = 8 + hl + 40;
	unsigned char *orig = malloc(total), *buf = malloc(total);
	char *p = tmp_path("mut.safetensors");
	int accepted = 0, refused = 0;

	/* told first: a crash names its draw */
	printf("mutations: seed %u (PDIT_TEST_SEED to repeat)\n", seed);
	fflush(stdout);
	srand(seed);
	for (int i = 0; i < 8; i++)
		orig[i] = (unsigned char)(((unsigned long long)hl >> (8 * i)) & 0xff);
	memcpy(orig + 8, hdr, hl);
	for (size_t i = 8 + hl; i < total; i++)
		orig[i] = (unsigned char)i;
	for (int it = 0; it < 2000; it++) {
		size_t len = total;
		FILE *f;
		struct pd_st *st;

		memcpy(buf, orig, total);
		for (int k = 0, n = 1 + rand() % 4; k < n; k++)
			buf[(size_t)rand() % (8 + hl)] = (unsigned char)rand();
		if (rand() % 4 == 0)
			len = (size_t)rand() % total;
		f = fopen(p, "wb");
		fwrite(buf, 1, len, f);
		fclose(f);
		if (pd_st_open(&st, p) == 0) {
			/* whatever was accepted must be readable within bounds */
			for (int t = 0; t < st->n_tensors; t++) {
				const struct pd_st_tensor *x = st->sorted[t];

				if (pd_dtype_is_float(x->dtype) && x->numel > 0 && x->numel < 1000) {
					float *tmp = malloc((size_t)x->numel * sizeof(float));

					pd_st_read_f32(x, 0, (size_t)x->numel, tmp);
					free(tmp);
				}
			}
			pd_st_close(st);
			accepted++;
		} else {
			PD_CHECK(strlen(pd_last_error()) > 0, "refusal without a message");
			refused++;
		}
	}
	printf("mutations: %d accepted, %d refused, no crash\n", accepted, refused);
	PD_CHECK(refused > 0, "no mutation was refused: the checks did nothing");
	free(orig);
	free(buf);
}

/* The messages' helpers: a prefix as long as the message buffer (a long
 * path) is cut, never written past it, and keeps ": "; pd_utf8_bad finds
 * the first byte of each kind of ill-formed UTF-8. */
static void test_messages(void)
{
	static char path[3000];
	struct {
		const char *s;
		long long want;
	} u[] = {
		{ "plain", -1 },          { "caf\xc3\xa9", -1 },          { "\xf0\x9f\xa6\x8a fox", -1 },
		{ "ab\xff", 2 },          { "a\xc0\xaf", 1 },             { "x\xed\xa0\x80", 1 },
		{ "\xf4\x90\x80\x80", 0 }, { "cut \xe2\x82", 4 },        { "\xe0\x80\xaf", 0 },
		{ "\xef\xbf\xbf end", -1 }, { "\x80", 0 },
	};

	memset(path, 'p', sizeof(path) - 1);
	pd_errorf("the message");
	PD_CHECK(pd_error_prefix("%s", path) == -1, "pd_error_prefix returns -1");
	PD_CHECK(strncmp(pd_last_error(), path, 100) == 0 && strlen(pd_last_error()) < sizeof(path) &&
			 strstr(pd_last_error(), ": ") != NULL,
		 "a long prefix: '%.40s...' (%zu bytes)", pd_last_error(), strlen(pd_last_error()));
	path[600] = 0;
	pd_errorf("the message");
	pd_error_prefix("--flag %s", path);
	PD_CHECK(strncmp(pd_last_error(), "--flag ppp", 10) == 0 && strstr(pd_last_error(), path) != NULL,
		 "a 600-byte prefix whole: '%.60s...'", pd_last_error());
	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		PD_CHECK(pd_utf8_bad(u[i].s, strlen(u[i].s)) == u[i].want, "pd_utf8_bad case %zu: %lld, want %lld", i,
			 (long long)pd_utf8_bad(u[i].s, strlen(u[i].s)), u[i].want);
}

/* The environment's switches: "0" and "" are off (PDIT_NO_AMX=0 once
 * turned AMX off); a number counts only whole and in range. */
static void test_env(void)
{
	static const struct {
		const char *v;          /* NULL: unset */
		int on;
		long num;               /* pd_env_long(.., 1, 100, 7) */
	} e[] = {
		{ NULL, 0, 7 }, { "", 0, 7 },    { "0", 0, 7 },    { "1", 1, 1 },    { "yes", 1, 7 },
		{ "100", 1, 100 }, { "101", 1, 7 }, { "-5", 1, 7 }, { "12x", 1, 7 }, { "99999999999999999999", 1, 7 },
	};

	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
		if (e[i].v)
			setenv("PDIT_TEST_SWITCH", e[i].v, 1);
		else
			unsetenv("PDIT_TEST_SWITCH");
		PD_CHECK(pd_env_on("PDIT_TEST_SWITCH") == e[i].on, "pd_env_on '%s': %d", e[i].v ? e[i].v : "(unset)",
			 pd_env_on("PDIT_TEST_SWITCH"));
		PD_CHECK(pd_env_long("PDIT_TEST_SWITCH", 1, 100, 7) == e[i].num, "pd_env_long '%s': %ld, want %ld",
			 e[i].v ? e[i].v : "(unset)", pd_env_long("PDIT_TEST_SWITCH", 1, 100, 7), e[i].num);
	}
	unsetenv("PDIT_TEST_SWITCH");
}

int main(void)
{
	const char *given = getenv("PDIT_TEST_SEED");
	unsigned seed = given ? (unsigned)strtoul(given, NULL, 10) : (unsigned)time(NULL);
	char cmd[300];

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/pdit-st-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_messages();
	test_env();
	test_broken();
	test_roundtrip();
	test_shards();
	test_mutations(seed);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return pd_test_report();
}
