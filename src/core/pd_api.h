/*
 * pd_api.h - what libpdit.so exports, and the error and log calls a
 * program shares with every room of pdit.
 *
 * The shared library is built with hidden visibility: only the names the
 * installed headers (pdit.h and the four it includes) mark PD_API are
 * exported, so a program links against the interface pdit.h documents and
 * nothing else (pdit's internal helpers stay free to change; the static
 * libraries the command and the tests link are not affected).
 */
#ifndef PD_API_H
#define PD_API_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PD_API __attribute__((visibility("default")))
#else
#define PD_API
#endif

/* Records the message (printf format) and returns -1, so that a failing
 * function can end with `return pd_errorf(...)`. */
PD_API int pd_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Puts "PREFIX: " (printf format) before the recorded message, so that a
 * caller names the flag or file a callee's message belongs to; returns -1. */
PD_API int pd_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The last recorded message ("" when none). Thread-local. */
PD_API const char *pd_last_error(void);

/* Log levels: 0 quiet (errors only), 1 normal progress, 2 verbose (-v).
 * The level and where lines go belong to the calling thread, so that an
 * engine (or one request of a server) sets its own around its work and
 * puts the caller's back after it; a thread starts at level 1, on stderr. */
struct pd_log_sink {
	int level;                      /* lines of this level and below are kept */
	/* receives each kept line (NULL: stderr) */
	void (*write)(void *ctx, int level, const char *line);
	void *ctx;                      /* write's first argument */
};
/* this thread's sink's level (C++ spells _Thread_local its own way) */
#ifdef __cplusplus
extern PD_API thread_local int pd_log_level;
#else
extern PD_API _Thread_local int pd_log_level;
#endif
PD_API void pd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes S this thread's sink and returns the one it replaces. */
PD_API struct pd_log_sink pd_log_use(const struct pd_log_sink *s);

#ifdef __cplusplus
}
#endif

#endif /* PD_API_H */
