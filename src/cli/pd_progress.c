/*
 * pd_progress.c - what a long run shows while it works: the phase, steps
 * with s/step and the time left, and a summary line at the end. On a
 * terminal one line is rewritten in place; otherwise (a log file, a pipe)
 * each event is a plain line. Fed by the engine's progress callback, so
 * `pdit serve` can send the same events elsewhere.
 */
#include "pdit_cli.h"
#include "pd_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* What a phase is doing, and what it did: "encoding 2 prompts", "encoded
 * 2 prompts in 1.2 s". */
static const char *const pd_phase_doing[] = {
	[PD_PHASE_ENCODE] = "encoding",
	[PD_PHASE_LOAD] = "loading",
	[PD_PHASE_DENOISE] = "denoising",
	[PD_PHASE_DECODE] = "decoding",
	[PD_PHASE_PICTURES] = "encoding",
};
static const char *const pd_phase_did[] = {
	[PD_PHASE_ENCODE] = "encoded",
	[PD_PHASE_LOAD] = "loaded",
	[PD_PHASE_DENOISE] = "denoised",
	[PD_PHASE_DECODE] = "decoded",
	[PD_PHASE_PICTURES] = "encoded",
};

/* "2 prompts", "the weights", "1 picture" */
static void pd_phase_what(const struct pd_progress *pg, char *buf, size_t len)
{
	if (pg->phase == PD_PHASE_LOAD)
		snprintf(buf, len, "the weights");
	else if (pg->phase == PD_PHASE_DECODE && pg->all > pg->total)
		/* rank 0's share: the others decode theirs */
		snprintf(buf, len, "%d of the %d %ss here", pg->total, pg->all, pg->videos ? "video" : "picture");
	else
		snprintf(buf, len, "%d %s%s%s", pg->total,
			 pg->phase == PD_PHASE_ENCODE ? "prompt" : pg->videos && pg->phase == PD_PHASE_DECODE ? "video" : "picture",
			 pg->total == 1 ? "" : "s", pg->phase == PD_PHASE_PICTURES ? " to latents" : "");
}

/* The display in use, for pd_cli_progress_clear (the error printers). */
static struct pd_cli_progress *pd_progress_now;

void pd_cli_progress_init(struct pd_cli_progress *p, int enabled)
{
	memset(p, 0, sizeof(*p));
	p->enabled = enabled;
	p->tty = isatty(2);
	p->t_start = pd_now();
	pd_progress_now = p;
}

void pd_cli_progress_clear(void)
{
	struct pd_cli_progress *p = pd_progress_now;

	if (p && p->open_line && p->tty) {
		fputs("\r\033[K", stderr);
		p->open_line = 0;
	}
}

void pd_cli_progress_end(struct pd_cli_progress *p)
{
	if (pd_progress_now == p)
		pd_progress_now = NULL;
}

/* The line being rewritten ends, so the next output starts on its own. */
static void pd_progress_break(struct pd_cli_progress *p)
{
	if (p->open_line) {
		fputc('\n', stderr);
		p->open_line = 0;
	}
}

/* One progress line: in place on a terminal (final ones end it). */
static void pd_progress_line(struct pd_cli_progress *p, int final, const char *fmt, ...)
{
	va_list ap;

	if (p->tty)
		fputs("\r\033[K", stderr);
	else
		pd_progress_break(p);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (final || !p->tty) {
		fputc('\n', stderr);
		p->open_line = 0;
	} else {
		p->open_line = 1;
	}
	fflush(stderr);
}

void pd_cli_progress_cb(void *ctx, const struct pd_progress *pg)
{
	struct pd_cli_progress *p = ctx;
	char what[64];

	if (pg->finished) {
		p->phase_s[pg->phase] += pg->elapsed;
		if (pg->phase == PD_PHASE_DENOISE)
			p->steps += pg->done;
	}
	if (!p->enabled)
		return;
	if (pg->phase == PD_PHASE_DENOISE && pg->done > 0) {
		double per = pg->elapsed / pg->done, left = per * (pg->total - pg->done);
		char bar[21];
		int fill = pg->total > 0 ? 20 * pg->done / pg->total : 0;

		if (pg->finished) {
			pd_progress_line(p, 1, "pdit: %d steps in %.1f s (%.2f s/step)", pg->done, pg->elapsed, per);
			return;
		}
		/* a plain log gets a line a step: only the bar is left out */
		memset(bar, '#', (size_t)fill);
		memset(bar + fill, '.', (size_t)(20 - fill));
		bar[20] = 0;
		if (p->tty)
			pd_progress_line(p, 0, "pdit: step %d/%d [%s] %.2f s/step, %.0f s, about %.0f s left", pg->done,
					 pg->total, bar, per, pg->elapsed, left);
		else
			pd_progress_line(p, 0, "pdit: step %d/%d  %.2f s/step, about %.0f s left", pg->done, pg->total,
					 per, left);
		return;
	}
	if (pg->phase == PD_PHASE_DENOISE)
		return;	/* its steps say it */
	pd_phase_what(pg, what, sizeof(what));
	if (pg->finished)
		pd_progress_line(p, 1, "pdit: %s %s in %.1f s", pd_phase_did[pg->phase], what, pg->elapsed);
	else if (pg->done == 0 && p->tty)	/* a log gets the end, with its time */
		pd_progress_line(p, 0, "pdit: %s %s", pd_phase_doing[pg->phase], what);
	else if (pg->done > 0 && p->tty)
		pd_progress_line(p, 0, "pdit: %s %s: %d done, %.0f s", pd_phase_doing[pg->phase], what, pg->done,
				 pg->elapsed);
}

void pd_cli_progress_log(void *ctx, int level, const char *line)
{
	struct pd_cli_progress *p = ctx;

	if (level == 0 && p->tty && p->open_line) {
		fputs("\r\033[K", stderr);
		p->open_line = 0;
	}
	pd_progress_break(p);
	fputs(line, stderr);
}

void pd_cli_progress_summary(struct pd_cli_progress *p, double peak_mb)
{
	char part[256];
	size_t k = 0;

	if (!p->enabled)
		return;
	pd_progress_break(p);
	part[0] = 0;
	if (p->phase_s[PD_PHASE_LOAD] > 0)
		k += (size_t)snprintf(part + k, sizeof(part) - k, "load %.1f s, ", p->phase_s[PD_PHASE_LOAD]);
	if (p->phase_s[PD_PHASE_ENCODE] > 0 && k < sizeof(part))
		k += (size_t)snprintf(part + k, sizeof(part) - k, "encode %.1f s, ", p->phase_s[PD_PHASE_ENCODE]);
	if (p->phase_s[PD_PHASE_PICTURES] > 0 && k < sizeof(part))
		k += (size_t)snprintf(part + k, sizeof(part) - k, "pictures in %.1f s, ", p->phase_s[PD_PHASE_PICTURES]);
	if (p->steps > 0 && k < sizeof(part))
		k += (size_t)snprintf(part + k, sizeof(part) - k, "%d steps %.1f s, ", p->steps,
				      p->phase_s[PD_PHASE_DENOISE]);
	if (p->phase_s[PD_PHASE_DECODE] > 0 && k < sizeof(part))
		k += (size_t)snprintf(part + k, sizeof(part) - k, "decode %.1f s, ", p->phase_s[PD_PHASE_DECODE]);
	if (k < sizeof(part))
		snprintf(part + k, sizeof(part) - k, "write %.1f s", p->write_s);
	fprintf(stderr, "pdit: done in %.1f s (%s), peak memory %.0f MB a process\n", pd_now() - p->t_start, part,
		peak_mb);
}
