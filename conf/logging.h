/*
 * conf/logging.h: logging.yaml (ATS 9 syntax), compiled (conf/logging.c).
 *
 * A format string ("%<cqtq> %<ttms> %<chi> ...") is compiled once, when
 * the configuration loads, into a list of ops: a literal run, or one
 * field.  The worker (worker/alog.c) walks that list for each
 * transaction and writes straight into its log buffer: no parsing and no
 * allocation per request.  conf/logging.c holds the field table (the ATS
 * names Cistern knows, and what each one writes); worker/alog.c the code
 * that writes each field.
 */
#ifndef CISTERN_CONF_LOGGING_H
#define CISTERN_CONF_LOGGING_H

#include <stdint.h>
#include <stdio.h>

#include "conf/parse.h"

/* The fields.  Names are ATS's (doc/admin-guide/logging/formatting.en.rst;
 * 9.2's proxy/logging/Log.cc for cqtx and the 9.x aliases). */
enum conf_lf {
    CONF_LF_LIT = 0,                  /* a literal run of the format */
    /* times */
    CONF_LF_CQTS, CONF_LF_CQTH, CONF_LF_CQTQ, CONF_LF_CQTN, CONF_LF_CQTD,
    CONF_LF_CQTT, CONF_LF_TTMS, CONF_LF_TTMSH, CONF_LF_TTMSF, CONF_LF_TTS,
    /* the client and its request */
    CONF_LF_CHI, CONF_LF_CHIH, CONF_LF_CHP, CONF_LF_CAUN, CONF_LF_CQHM,
    CONF_LF_CQPV, CONF_LF_CQU, CONF_LF_CQUC, CONF_LF_CQUP, CONF_LF_CQUS,
    CONF_LF_CQUUC, CONF_LF_CQUUP, CONF_LF_CQUUH, CONF_LF_CQTX, CONF_LF_CQHL,
    CONF_LF_CQCL, CONF_LF_CQQL, CONF_LF_CQSSL, CONF_LF_CFSC, CONF_LF_CLUC,
    CONF_LF_CRC,
    /* our answer */
    CONF_LF_PSSC, CONF_LF_PSQL, CONF_LF_PSCL, CONF_LF_PSHL, CONF_LF_PSCT,
    CONF_LF_PRRP, CONF_LF_PHR, CONF_LF_PHN,
    /* the origin (or parent) */
    CONF_LF_SSSC, CONF_LF_SSCL, CONF_LF_SSHL, CONF_LF_SSQL, CONF_LF_SHN,
    CONF_LF_SHI, CONF_LF_PQHL, CONF_LF_PQCL, CONF_LF_PQQL, CONF_LF_PQSI,
    CONF_LF_PFSC,
    /* a named header: {Name}cqh, {Name}psh, {Name}ssh */
    CONF_LF_CQH, CONF_LF_PSH, CONF_LF_SSH,
    CONF_LF_N
};

/* How a field compares in a filter (ATS's LogFilterInt / IP / String). */
enum conf_lf_type { CONF_LFT_STR = 0, CONF_LFT_INT, CONF_LFT_IP };

/* What the worker must keep for the configured formats beyond what every
 * log line uses (worker/alog.c checks these bits on its hot path). */
#define CONF_LOGN_MAPPED   0x01       /* the URL after remap (cqu, cquc, ...) */
#define CONF_LOGN_RESP     0x02       /* our response head (psct, prrp, psh) */
#define CONF_LOGN_ORIGIN   0x04       /* the origin's name and address */
#define CONF_LOGN_LOCAL    0x08       /* our address toward it (pqsi) */
#define CONF_LOGN_CQH      0x10       /* named client request headers */
#define CONF_LOGN_SSH      0x20       /* named origin response headers */

struct conf_log_op {
    uint8_t  kind;                    /* enum conf_lf */
    uint8_t  hdr;                     /* CQH/PSH/SSH: index in hdrs[] */
    uint16_t len;                     /* LIT: bytes */
    uint32_t off;                     /* LIT: offset in the format's lit */
};

struct conf_log_format {
    char    *name;
    struct conf_log_op *ops;
    int      nops;
    char    *lit;                     /* the literal runs, back to back */
    size_t   max_line;                /* the longest line it can write */
    int      line;
};

/* The longest line a format may write (its fields at their longest):
 * worker/alog.c keeps twice this free in its buffer. */
#define CONF_LOG_LINE_MAX  16384
#define CONF_LOG_HDRS      16         /* distinct named headers, all formats */
#define CONF_LOG_FILTERS   8          /* filters on one log */
#define CONF_LOG_MAX       16         /* logs */

enum conf_log_action { CONF_LOG_REJECT = 0, CONF_LOG_ACCEPT };
enum conf_log_oper {
    CONF_LOG_MATCH = 0, CONF_LOG_CASE_INSENSITIVE_MATCH, CONF_LOG_CONTAIN,
    CONF_LOG_CASE_INSENSITIVE_CONTAIN, CONF_LOG_LT, CONF_LOG_LTE,
    CONF_LOG_GT, CONF_LOG_GTE,
};

struct conf_log_filter {
    char    *name;
    enum conf_log_action action;
    struct conf_log_op field;         /* what is compared (written as in a line) */
    enum conf_lf_type type;
    enum conf_log_oper oper;
    int      nvals;
    char   **vals;                    /* STR: the values */
    int64_t *nums;                    /* INT: the values */
    uint8_t (*ips)[2][17];            /* IP: [lo, hi], byte 0 the family
                                         (4 or 6), then the address */
    int      line;
};

struct conf_log_file {
    char    *path;                    /* absolute; or "stdout", "stderr" */
    int      fmt;                     /* index in formats */
    int      filters[CONF_LOG_FILTERS];
    int      nfilters;
    char    *header;                  /* first line of a new file, or NULL */
    int      line;
};

struct conf_logging {
    struct conf_log_format *formats;
    int      nformats;
    struct conf_log_filter *filters;
    int      nfilters;
    struct conf_log_file logs[CONF_LOG_MAX];
    int      nlogs;
    char    *hdrs[CONF_LOG_HDRS];     /* the named headers, as written */
    uint8_t  hdr_kind[CONF_LOG_HDRS]; /* CONF_LF_CQH, PSH or SSH */
    int      nhdrs;
    unsigned need;                    /* CONF_LOGN_* */
    char     hostname[256];           /* phn: gethostname() at load */
};

/* Read logging.yaml (file) into lg (zeroed by the caller); log file names
 * resolve against logdir (proxy.config.log.logfile_dir).  A missing file
 * is the caller's business.  Returns 0, or -1 after recording errors as
 * file:line; what is ignored (rolling_*, ...) and what differs from ATS
 * (mode: binary) is recorded as notes and warnings. */
int  conf_logging_parse(struct conf_logging *lg, const char *file,
                        const char *logdir, struct conf_errors *e);
/* Compile one format string; used by conf_logging_parse and the unit
 * tests.  0, or -1 with *why set (a static string) and *col the byte of
 * the format where the problem is. */
int  conf_logging_compile(struct conf_logging *lg, struct conf_log_format *f,
                          const char *spec, const char **why, size_t *col);
void conf_logging_free(struct conf_logging *lg);
/* The field's ATS name ("cqtq"), or "" */
const char *conf_logging_field_name(enum conf_lf kind);
/* Print the supported fields as a table (cistern.8 and README). */
void conf_logging_list_fields(FILE *out);

#endif /* CISTERN_CONF_LOGGING_H */
