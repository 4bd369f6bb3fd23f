/*
 * conf/parse.h: what every conf/ parser shares: the error list
 * ("file:line: message"), the line reader and tokeniser, paths and sizes
 * (conf/parse.c).  conf/conf.h includes it; conf_load() is in conf/conf.c.
 */
#ifndef CISTERN_CONF_PARSE_H
#define CISTERN_CONF_PARSE_H

#include <stdint.h>

#define CONF_MAX_ERRORS   256

/* ---------------------------------------------------------------------
 * Errors and warnings
 */
/* What a configuration directive became, for the migration report that
 * `cistern -t` prints at the end (what it understood, what matched
 * Cistern's own behaviour, what it ignored as ATS-internal tuning).
 * Errors and warnings are not notes: they stay in msgs[]. */
enum conf_note_kind {
    CONF_NOTE_USED = 0,               /* implemented: Cistern does what it asks */
    CONF_NOTE_MATCHES,                /* asks for what Cistern already does */
    CONF_NOTE_INTERNAL,               /* tunes ATS internals; ignored (why) */
    CONF_NOTE_UNKNOWN,                /* not known at all; ignored */
    CONF_NOTE_KINDS
};

struct conf_note {
    enum conf_note_kind kind;
    char    *text;                    /* "file:line: what" (malloc'd) */
};

struct conf_errors {
    int      n;                       /* errors recorded (may exceed stored) */
    int      nwarn;                   /* warnings recorded */
    int      nstored;                 /* entries in msgs[] */
    char    *msgs[CONF_MAX_ERRORS];   /* "file:line: message" (malloc'd) */
    int      is_warn[CONF_MAX_ERRORS];
    struct conf_note *notes;          /* conf_note(), in the order recorded */
    int      nnotes, notecap;
};

/* Record an error / warning.  file may be NULL (no "file:line: " prefix);
 * line 0 means "file: message". */
void conf_error(struct conf_errors *e, const char *file, int line,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void conf_warn(struct conf_errors *e, const char *file, int line,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Record a note for the migration report (never fails the load; a note
 * that cannot be stored for lack of memory is dropped). */
void conf_note(struct conf_errors *e, enum conf_note_kind kind,
               const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void conf_errors_free(struct conf_errors *e);

/* Resolve p against dir when relative; returns a malloc'd absolute path. */
char *conf_path(const char *dir, const char *p);

/* Parse a size with an optional K/M/G/T suffix (powers of 1024).
 * Returns 0 and sets *out, or -1. */
int conf_parse_size(const char *s, int64_t *out);

/* ---------------------------------------------------------------------
 * Lines and tokens (for the conf/ parsers, not meant for other modules)
 */

/* Called once per meaningful line: trimmed, never empty, never a comment
 * (a line whose first non-blank character is '#').  line may be modified
 * in place.  Return 0 to go on, -1 to stop reading. */
typedef int conf_line_fn(void *arg, char *line, int lineno);

/* Feed every meaningful line of file to fn.  Returns -1 (and records
 * "file: cannot open: reason") when the file cannot be read, else 0. */
int   conf_foreach_line(const char *file, struct conf_errors *e,
                        conf_line_fn *fn, void *arg);

/* Same, over a NUL-terminated text held in memory (built-in defaults).
 * The text is copied; it is not modified. */
int   conf_foreach_text_line(const char *text, conf_line_fn *fn, void *arg);

/* Strip leading and trailing whitespace in place; returns the new start. */
char *conf_trim(char *s);

/* Split the next whitespace-separated token off *cursor, NUL-terminating it
 * in place.  Returns NULL at the end of the string. */
char *conf_token(char **cursor);

/* The next label=value pair of *cur, ATS's cache.config / parent.config
 * syntax (a value may be "quoted"; unquoted in place).  Returns 1, 0 at
 * the end of the line (or a '#'), -1 when malformed (*why). */
int   conf_pair(char **cur, char **label, char **value, const char **why);

#endif /* CISTERN_CONF_PARSE_H */
