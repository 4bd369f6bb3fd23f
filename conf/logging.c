/*
 * conf/logging.c: logging.yaml, ATS 9's custom logs (read with conf/yaml.c).
 *
 *   logging:
 *     formats:  - name: squid
 *                 format: '%<cqtq> %<ttms> %<chi> %<crc>/%<pssc> ...'
 *     filters:  - name: nopurge
 *                 action: reject          (accept | reject)
 *                 condition: cqhm MATCH PURGE
 *     logs:     - filename: squid         (+ ".log" unless it has a dot)
 *                 format: squid
 *                 mode: ascii             (ascii | binary, see below)
 *                 filters: [nopurge]
 *
 * What is read, and what differs from ATS:
 *   - Every field name Debian 12's stock logging.yaml uses is known, and
 *     the common others (the table below, `cistern --list-log-fields`).
 *     A field ATS has but Cistern does not record, and a name nobody has,
 *     are both file:line errors: a log pipeline must not be fed a column
 *     of made-up values.
 *   - mode: binary.  ATS's binary format is read by nothing but
 *     traffic_logcat, and Debian's stock file asks for it on its one log.
 *     The log is written as ASCII to NAME.log (what traffic_logcat would
 *     have printed), with a warning: loading the stock file must work, and
 *     a file named .blog that traffic_logcat cannot read would help no one.
 *   - mode: ascii_pipe, summary formats (interval, %<COUNT(*)>), slices
 *     (%<cqup[0:8]>), fallbacks (??), escape: json, and the filter action
 *     wipe_field_value are errors: not supported yet.
 *   - rolling_* keys are ATS's own log rolling; Cistern's logs are rolled
 *     by logrotate (scripts/cistern.logrotate, `cistern -s reopen`): noted
 *     as ATS-internal, ignored.
 *   - When the file defines logs, they are the transaction logs (as in
 *     ATS: the built-in access.log is not written then); with no logs
 *     (or no file) access.log is written as before.
 *
 * Everything is checked here, at load; worker/alog.c trusts the result.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conf/conf.h"
#include "conf/yaml.h"

/* The most a field can write (the worker's records cut the raw values:
 * worker/req.h ALOG_TARGET_MAX, ALOG_FIELD_MAX; escaped, a value ends at
 * most 3 bytes past its cut). */
#define LF_URL   1100                 /* a URL, escaped */
#define LF_STR   300                  /* a header, a name */
#define LF_NUM   24
#define LF_IP    48

struct lf_row {
    const char        *name;
    enum conf_lf       kind;
    enum conf_lf_type  type;
    unsigned           need;
    size_t             max;
    const char        *desc;
};

static const struct lf_row lf_rows[] = {
    /* times */
    { "cqts",  CONF_LF_CQTS,  CONF_LFT_INT, 0, LF_NUM, "request time, seconds since the epoch" },
    { "cqth",  CONF_LF_CQTH,  CONF_LFT_INT, 0, LF_NUM, "cqts in hexadecimal" },
    { "cqtq",  CONF_LF_CQTQ,  CONF_LFT_STR, 0, LF_NUM, "request time, seconds.milliseconds (Squid)" },
    { "cqtn",  CONF_LF_CQTN,  CONF_LFT_STR, 0, 40,     "request time, 02/Jan/2006:15:04:05 -0700 (local time)" },
    { "cqtd",  CONF_LF_CQTD,  CONF_LFT_STR, 0, 16,     "request date, YYYY-MM-DD (local time)" },
    { "cqtt",  CONF_LF_CQTT,  CONF_LFT_STR, 0, 16,     "request time of day, hh:mm:ss (local time)" },
    { "ttms",  CONF_LF_TTMS,  CONF_LFT_INT, 0, LF_NUM, "transaction time, ms (head received to answer sent)" },
    { "ttmsh", CONF_LF_TTMSH, CONF_LFT_INT, 0, LF_NUM, "ttms in hexadecimal" },
    { "ttmsf", CONF_LF_TTMSF, CONF_LFT_STR, 0, LF_NUM, "ttms in seconds, 3 decimals" },
    { "tts",   CONF_LF_TTS,   CONF_LFT_INT, 0, LF_NUM, "ttms in whole seconds" },
    /* the client */
    { "chi",   CONF_LF_CHI,   CONF_LFT_IP,  0, LF_IP,  "client address (the PROXY header's when one was taken)" },
    { "chih",  CONF_LF_CHIH,  CONF_LFT_STR, 0, LF_IP,  "chi in hexadecimal" },
    { "chp",   CONF_LF_CHP,   CONF_LFT_INT, 0, LF_NUM, "client port" },
    { "caun",  CONF_LF_CAUN,  CONF_LFT_STR, 0, 1,      "authenticated user: always - (as in ATS 9)" },
    { "cqhm",  CONF_LF_CQHM,  CONF_LFT_STR, 0, 16,     "request method" },
    { "cqpv",  CONF_LF_CQPV,  CONF_LFT_STR, 0, 16,     "request protocol: http/1.0, http/1.1" },
    { "cqu",   CONF_LF_CQU,   CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL, "request URL after remap (absolute)" },
    { "pqu",   CONF_LF_CQU,   CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL, "= cqu (ATS 10 name)" },
    { "cquc",  CONF_LF_CQUC,  CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL, "cqu, canonical (Cistern: = cqu)" },
    { "pquc",  CONF_LF_CQUC,  CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL, "= cquc (ATS 10 name)" },
    { "cqup",  CONF_LF_CQUP,  CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL, "path and query after remap" },
    { "pqup",  CONF_LF_CQUP,  CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL, "= cqup (ATS 10 name)" },
    { "cqus",  CONF_LF_CQUS,  CONF_LFT_STR, 0, 8,      "the client's scheme: http or https" },
    { "pqus",  CONF_LF_CQUS,  CONF_LFT_STR, 0, 8,      "= cqus (ATS 10 name)" },
    { "cquuc", CONF_LF_CQUUC, CONF_LFT_STR, 0, LF_URL, "request URL before remap (absolute)" },
    { "cquup", CONF_LF_CQUUP, CONF_LFT_STR, 0, LF_URL, "request path and query before remap" },
    { "cquuh", CONF_LF_CQUUH, CONF_LFT_STR, 0, LF_STR, "request host before remap" },
    { "cqtx",  CONF_LF_CQTX,  CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL + 32, "method, cqu and version: GET http://o/x HTTP/1.1" },
    { "cqhl",  CONF_LF_CQHL,  CONF_LFT_INT, 0, LF_NUM, "request head bytes" },
    { "cqcl",  CONF_LF_CQCL,  CONF_LFT_INT, 0, LF_NUM, "request body bytes (its Content-Length; 0 without)" },
    { "cqql",  CONF_LF_CQQL,  CONF_LFT_INT, 0, LF_NUM, "cqhl + cqcl" },
    { "cqssl", CONF_LF_CQSSL, CONF_LFT_INT, 0, 1,      "1 over TLS, else 0" },
    { "cfsc",  CONF_LF_CFSC,  CONF_LFT_STR, 0, 8,      "FIN, or INTR when the client left before the answer ended" },
    { "cluc",  CONF_LF_CLUC,  CONF_LFT_STR, CONF_LOGN_MAPPED, LF_URL, "cache key URL (= cqu)" },
    { "crc",   CONF_LF_CRC,   CONF_LFT_STR, 0, 32,     "cache result: TCP_HIT, TCP_MISS, TCP_REFRESH_HIT, ..." },
    /* our answer */
    { "pssc",  CONF_LF_PSSC,  CONF_LFT_INT, 0, LF_NUM, "status sent to the client (000: none)" },
    { "psql",  CONF_LF_PSQL,  CONF_LFT_INT, 0, LF_NUM, "bytes sent to the client, head and body" },
    { "pscl",  CONF_LF_PSCL,  CONF_LFT_INT, 0, LF_NUM, "body bytes sent to the client" },
    { "pshl",  CONF_LF_PSHL,  CONF_LFT_INT, 0, LF_NUM, "head bytes sent to the client" },
    { "psct",  CONF_LF_PSCT,  CONF_LFT_STR, CONF_LOGN_RESP, LF_STR, "Content-Type sent, without parameters (- none)" },
    { "prrp",  CONF_LF_PRRP,  CONF_LFT_STR, CONF_LOGN_RESP, LF_STR, "reason phrase sent" },
    { "phr",   CONF_LF_PHR,   CONF_LFT_STR, 0, 24,     "hierarchy route: DIRECT, PARENT_HIT, NONE (not fetched)" },
    { "phn",   CONF_LF_PHN,   CONF_LFT_STR, 0, 256,    "this machine's host name" },
    /* the origin */
    { "sssc",  CONF_LF_SSSC,  CONF_LFT_INT, 0, LF_NUM, "origin status (000: not fetched)" },
    { "sscl",  CONF_LF_SSCL,  CONF_LFT_INT, 0, LF_NUM, "origin body bytes relayed (0: not fetched)" },
    { "sshl",  CONF_LF_SSHL,  CONF_LFT_INT, CONF_LOGN_ORIGIN, LF_NUM, "origin response head bytes" },
    { "ssql",  CONF_LF_SSQL,  CONF_LFT_INT, CONF_LOGN_ORIGIN, LF_NUM, "sshl + sscl" },
    { "shn",   CONF_LF_SHN,   CONF_LFT_STR, CONF_LOGN_ORIGIN, LF_STR, "origin (or parent) host name; - not fetched" },
    { "shi",   CONF_LF_SHI,   CONF_LFT_IP,  CONF_LOGN_ORIGIN, LF_IP, "origin address; 0 not fetched" },
    { "pqhl",  CONF_LF_PQHL,  CONF_LFT_INT, CONF_LOGN_ORIGIN, LF_NUM, "request head bytes sent to the origin" },
    { "pqcl",  CONF_LF_PQCL,  CONF_LFT_INT, CONF_LOGN_ORIGIN, LF_NUM, "request body bytes sent to the origin" },
    { "pqql",  CONF_LF_PQQL,  CONF_LFT_INT, CONF_LOGN_ORIGIN, LF_NUM, "pqhl + pqcl" },
    { "pqsi",  CONF_LF_PQSI,  CONF_LFT_IP,  CONF_LOGN_ORIGIN | CONF_LOGN_LOCAL, LF_IP, "our address toward the origin; 0 not fetched" },
    { "pfsc",  CONF_LF_PFSC,  CONF_LFT_STR, 0, 8,      "FIN, INTR (origin failed), TIMEOUT (origin timed out)" },
    /* headers */
    { "cqh",   CONF_LF_CQH,   CONF_LFT_STR, CONF_LOGN_CQH, LF_STR, "{Name}cqh: a client request header (- absent)" },
    { "psh",   CONF_LF_PSH,   CONF_LFT_STR, CONF_LOGN_RESP, LF_STR, "{Name}psh: a header of our response (- absent)" },
    { "ssh",   CONF_LF_SSH,   CONF_LFT_STR, CONF_LOGN_ORIGIN | CONF_LOGN_SSH, LF_STR, "{Name}ssh: an origin response header (- absent)" },
};
#define LF_NROWS (sizeof(lf_rows) / sizeof(lf_rows[0]))

/* ATS fields Cistern does not record: named in the error, so an operator
 * sees it is known but not supported (rather than misspelt). */
static const char *const lf_ats_other[] = {
    "hii", "hiih", "rchi", "rchp", "rchh", "chiv", "piid", "pitag", "cqhv",
    "sqpv", "cssn", "cscert", "pscert", "puuid", "psfid", "cqtr", "cqssr",
    "cqssrt", "cqint", "cqmpt", "cqssv", "cqssc", "cqssu", "cqssg", "cqssa",
    "cthbr", "cthbt", "cthb", "cqqtl", "crid", "cruuid", "crec", "ctec",
    "cqah", "psah", "pqah", "ssah", "cssah", "psch", "prscs", "psqtl",
    "crsc", "chm", "ckh", "cwr", "cwtr", "crra", "cwra", "cccs", "pqsp",
    "nhi", "nhp", "phi", "php", "pqssl", "pqssr", "sshv", "mstsms", "stms",
    "stmsh", "stmsf", "sts", "sstc", "surc", "ssrc", "sca", "csssc",
    "csscl", "csshl", "cssql", "csshv", "crat", "fsiz", "ccid", "ctid",
    "ctpw", "ctpd", "ppv", "pps", "ppd", "ppa", "pptc", "pptv", "pptg",
    "vbn", "vs", "ms", "msdms", "pqh", "cssh", "ecqh", "epqh", "epsh",
    "essh", "ecssh",
};

const char *
conf_logging_field_name(enum conf_lf kind)
{
    for (size_t i = 0; i < LF_NROWS; i++)
        if (lf_rows[i].kind == kind)
            return lf_rows[i].name;
    return "";
}

void
conf_logging_list_fields(FILE *out)
{
    fprintf(out, "| Field | What Cistern writes |\n|---|---|\n");
    for (size_t i = 0; i < LF_NROWS; i++)
        fprintf(out, "| `%s` | %s |\n", lf_rows[i].name, lf_rows[i].desc);
}

static const struct lf_row *
lf_find(const char *name, size_t n)
{
    for (size_t i = 0; i < LF_NROWS; i++)
        if (strlen(lf_rows[i].name) == n && memcmp(lf_rows[i].name, name, n) == 0)
            return &lf_rows[i];
    return NULL;
}

static int
lf_is_ats(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(lf_ats_other) / sizeof(lf_ats_other[0]); i++)
        if (strlen(lf_ats_other[i]) == n && memcmp(lf_ats_other[i], name, n) == 0)
            return 1;
    return 0;
}

/* A header name: an RFC 9110 token. */
static int
lf_token(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
            return 0;
    return 1;
}

/* The index of header (kind, name) in lg->hdrs, added when new; -1 full. */
static int
lf_hdr(struct conf_logging *lg, enum conf_lf kind, const char *name, size_t n)
{
    for (int i = 0; i < lg->nhdrs; i++)
        if (lg->hdr_kind[i] == kind && strlen(lg->hdrs[i]) == n
            && strncasecmp(lg->hdrs[i], name, n) == 0)
            return i;
    if (lg->nhdrs == CONF_LOG_HDRS)
        return -1;
    if ((lg->hdrs[lg->nhdrs] = strndup(name, n)) == NULL)
        return -1;
    lg->hdr_kind[lg->nhdrs] = (uint8_t)kind;
    return lg->nhdrs++;
}

/* One field's text (between "%<" and ">", or a filter's first word) into
 * *op.  0, or -1 with *why. */
static int
lf_field(struct conf_logging *lg, const char *s, size_t n, struct conf_log_op *op,
         const struct lf_row **rowp, const char **why)
{
    const char *name = s;
    const char *hname = NULL;
    size_t hlen = 0;
    const struct lf_row *row;

    if (memmem(s, n, "??", 2) != NULL) {
        *why = "fallbacks (?\?) are not supported";
        return -1;
    }
    if (memchr(s, '[', n) != NULL) {
        *why = "slices ([start:end]) are not supported";
        return -1;
    }
    if (memchr(s, '(', n) != NULL) {
        *why = "aggregate fields (summary logs) are not supported";
        return -1;
    }
    if (n > 0 && s[0] == '{') {
        const char *close = memchr(s, '}', n);
        if (close == NULL) {
            *why = "a header field without its closing }";
            return -1;
        }
        hname = s + 1;
        hlen = (size_t)(close - hname);
        name = close + 1;
        n -= (size_t)(name - s);
        if (!lf_token(hname, hlen)) {
            *why = "not a header name between { and }";
            return -1;
        }
    }
    row = lf_find(name, n);
    if (row == NULL) {
        *why = lf_is_ats(name, n) ? "an ATS log field Cistern does not record"
                                  : "unknown log field";
        return -1;
    }
    memset(op, 0, sizeof(*op));
    op->kind = (uint8_t)row->kind;
    if (row->kind == CONF_LF_CQH || row->kind == CONF_LF_PSH || row->kind == CONF_LF_SSH) {
        int h;
        if (hname == NULL) {
            *why = "a header field needs the header's name: %<{Name}cqh>";
            return -1;
        }
        if ((h = lf_hdr(lg, row->kind, hname, hlen)) < 0) {
            *why = "too many different header fields (at most 16)";
            return -1;
        }
        op->hdr = (uint8_t)h;
    } else if (hname != NULL) {
        *why = "only cqh, psh and ssh take a {header name}";
        return -1;
    }
    lg->need |= row->need;
    *rowp = row;
    return 0;
}

static int
lf_push(struct conf_log_format *f, int *cap, const struct conf_log_op *op)
{
    if (f->nops == *cap) {
        int ncap = *cap ? *cap * 2 : 16;
        struct conf_log_op *n = realloc(f->ops, (size_t)ncap * sizeof(*n));
        if (n == NULL)
            return -1;
        f->ops = n;
        *cap = ncap;
    }
    f->ops[f->nops++] = *op;
    return 0;
}

int
conf_logging_compile(struct conf_logging *lg, struct conf_log_format *f,
                     const char *spec, const char **why, size_t *col)
{
    size_t n = strlen(spec), lit = 0;
    int cap = 0;
    const char *p = spec, *end = spec + n;

    if (n > 65535) {
        *why = "the format is longer than 64 KiB";
        *col = 0;
        return -1;
    }
    if ((f->lit = malloc(n + 1)) == NULL) {
        *why = "out of memory";
        *col = 0;
        return -1;
    }
    f->max_line = 1;                  /* the newline */
    while (p < end) {
        struct conf_log_op op;
        const struct lf_row *row;
        const char *q = p;

        /* a literal run: up to the next "%<" */
        while (q < end && !(q[0] == '%' && q + 1 < end && q[1] == '<'))
            q++;
        if (q > p) {
            /* control bytes in the literal would forge lines */
            for (const char *c = p; c < q; c++) {
                if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                    *why = "a control character (a newline?) in the format";
                    *col = (size_t)(c - spec);
                    return -1;
                }
            }
            memset(&op, 0, sizeof(op));
            op.kind = CONF_LF_LIT;
            op.off = (uint32_t)lit;
            op.len = (uint16_t)(q - p);
            memcpy(f->lit + lit, p, (size_t)(q - p));
            lit += (size_t)(q - p);
            f->max_line += (size_t)(q - p);
            if (lf_push(f, &cap, &op) < 0)
                goto oom;
            p = q;
            continue;
        }
        /* a field: "%<" ... ">" */
        q = memchr(p + 2, '>', (size_t)(end - p - 2));
        if (q == NULL) {
            *why = "%< without its closing >";
            *col = (size_t)(p - spec);
            return -1;
        }
        if (lf_field(lg, p + 2, (size_t)(q - p - 2), &op, &row, why) < 0) {
            *col = (size_t)(p - spec);
            return -1;
        }
        f->max_line += row->max;
        if (lf_push(f, &cap, &op) < 0)
            goto oom;
        p = q + 1;
    }
    f->lit[lit] = '\0';
    return 0;
oom:
    *why = "out of memory";
    *col = 0;
    return -1;
}

/* ---------------------------------------------------------------------
 * The YAML file
 */
struct lg_parse {
    struct conf_logging *lg;
    const char          *file;
    const char          *logdir;
    struct conf_errors  *e;
};

static const char *
lg_scalar(struct lg_parse *ps, const struct conf_yaml *v, const char *what)
{
    if (v == NULL)
        return NULL;
    if (v->kind != CONF_YAML_SCALAR) {
        conf_error(ps->e, ps->file, v->line, "%s: expected a scalar, not a %s",
                   what, conf_yaml_kind_name(v->kind));
        return NULL;
    }
    return v->str;
}

/* Every key of map is in keys (NULL-terminated), else an error per key. */
static int
lg_keys(struct lg_parse *ps, const struct conf_yaml *map, const char *what,
        const char *const *keys)
{
    int bad = 0;

    for (int i = 0; i + 1 < map->nkids; i += 2) {
        const struct conf_yaml *k = map->kids[i];
        int ok = 0;

        for (int j = 0; keys[j] && k->kind == CONF_YAML_SCALAR; j++)
            if (strcmp(k->str, keys[j]) == 0)
                ok = 1;
        if (!ok) {
            conf_error(ps->e, ps->file, k->line, "%s: unknown key%s%s%s", what,
                       k->kind == CONF_YAML_SCALAR ? " \"" : "",
                       k->kind == CONF_YAML_SCALAR ? k->str : "",
                       k->kind == CONF_YAML_SCALAR ? "\"" : "");
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

static void
lg_format(struct lg_parse *ps, const struct conf_yaml *node)
{
    static const char *const keys[] = { "name", "format", "interval", "escape", NULL };
    struct conf_logging *lg = ps->lg;
    struct conf_log_format *f, *nf;
    const char *name, *spec, *why, *esc;
    size_t col;

    if (node->kind != CONF_YAML_MAP) {
        conf_error(ps->e, ps->file, node->line, "formats: each item is a "
                   "mapping with name and format, not a %s",
                   conf_yaml_kind_name(node->kind));
        return;
    }
    if (lg_keys(ps, node, "format", keys) < 0)
        return;
    name = lg_scalar(ps, conf_yaml_get(node, "name"), "name");
    spec = lg_scalar(ps, conf_yaml_get(node, "format"), "format");
    if (name == NULL || spec == NULL) {
        conf_error(ps->e, ps->file, node->line, "a format needs a name and a format");
        return;
    }
    for (int i = 0; i < lg->nformats; i++)
        if (strcmp(lg->formats[i].name, name) == 0) {
            conf_error(ps->e, ps->file, node->line, "format \"%s\" is defined twice "
                       "(first at line %d)", name, lg->formats[i].line);
            return;
        }
    if (conf_yaml_get(node, "interval") != NULL) {
        conf_error(ps->e, ps->file, conf_yaml_get(node, "interval")->line,
                   "format \"%s\": interval (a summary log) is not supported",
                   name);
        return;
    }
    esc = lg_scalar(ps, conf_yaml_get(node, "escape"), "escape");
    if (esc != NULL && strcmp(esc, "none") != 0) {
        conf_error(ps->e, ps->file, conf_yaml_get(node, "escape")->line,
                   "format \"%s\": escape: %s is not supported (Cistern writes "
                   "control bytes, quotes and backslashes as \\xHH)", name, esc);
        return;
    }
    nf = realloc(lg->formats, (size_t)(lg->nformats + 1) * sizeof(*nf));
    if (nf == NULL) {
        conf_error(ps->e, ps->file, node->line, "out of memory");
        return;
    }
    lg->formats = nf;
    f = &lg->formats[lg->nformats];
    memset(f, 0, sizeof(*f));
    f->line = node->line;
    if ((f->name = strdup(name)) == NULL
        || conf_logging_compile(lg, f, spec, &why, &col) < 0) {
        int line = conf_yaml_get(node, "format")->line;

        conf_error(ps->e, ps->file, line, "format \"%s\": %s at \"%.40s\"",
                   name, f->name ? why : "out of memory", spec + (f->name ? col : 0));
        free(f->name);
        free(f->ops);
        free(f->lit);
        return;
    }
    if (f->max_line > CONF_LOG_LINE_MAX) {
        conf_error(ps->e, ps->file, f->line, "format \"%s\": a line could be "
                   "%zu bytes, more than %d", name, f->max_line, CONF_LOG_LINE_MAX);
        free(f->name);
        free(f->ops);
        free(f->lit);
        return;
    }
    lg->nformats++;
}

static int
lf_ip(const char *s, size_t n, uint8_t out[17])
{
    char b[64];

    if (n == 0 || n >= sizeof(b))
        return -1;
    memcpy(b, s, n);
    b[n] = '\0';
    memset(out, 0, 17);
    if (inet_pton(AF_INET, b, out + 1) == 1) {
        out[0] = 4;
        return 0;
    }
    if (inet_pton(AF_INET6, b, out + 1) == 1) {
        out[0] = 6;
        return 0;
    }
    return -1;
}

/* A filter's action: accept or reject; -1 (reported) for anything else. */
static int
lf_action(struct lg_parse *ps, const struct conf_yaml *node, const char *name,
          const char *action, struct conf_log_filter *fl)
{
    if (strcasecmp(action, "accept") == 0) {
        fl->action = CONF_LOG_ACCEPT;
    } else if (strcasecmp(action, "reject") == 0) {
        fl->action = CONF_LOG_REJECT;
    } else if (strcasecmp(action, "wipe_field_value") == 0) {
        conf_error(ps->e, ps->file, conf_yaml_get(node, "action")->line,
                   "filter \"%s\": wipe_field_value is not supported", name);
        return -1;
    } else {
        conf_error(ps->e, ps->file, conf_yaml_get(node, "action")->line,
                   "filter \"%s\": action \"%s\" is not accept, reject or "
                   "wipe_field_value", name, action);
        return -1;
    }
    return 0;
}

/* The field and operator of a condition "<field> <operator> <value>[,...]"
 * into fl (field, type, oper) and *rowp; returns the values (after the
 * blanks), or NULL after reporting an error at line. */
static const char *
lf_cond(struct lg_parse *ps, struct conf_log_filter *fl, const char *name,
        const char *cond, int line, const struct lf_row **rowp)
{
    static const char *const opers[] = {
        "MATCH", "CASE_INSENSITIVE_MATCH", "CONTAIN", "CASE_INSENSITIVE_CONTAIN",
        "LT", "LTE", "GT", "GTE",
    };
    const struct lf_row *row;
    const char *why, *p = cond, *w;

    while (*p == ' ' || *p == '\t')
        p++;
    w = p;
    while (*p && *p != ' ' && *p != '\t')
        p++;
    if (lf_field(ps->lg, w, (size_t)(p - w), &fl->field, &row, &why) < 0) {
        conf_error(ps->e, ps->file, line, "filter \"%s\": %s: \"%.*s\"", name,
                   why, (int)(p - w), w);
        return NULL;
    }
    *rowp = row;
    fl->type = row->type;
    while (*p == ' ' || *p == '\t')
        p++;
    w = p;
    while (*p && *p != ' ' && *p != '\t')
        p++;
    fl->oper = (enum conf_log_oper)-1;
    for (size_t i = 0; i < sizeof(opers) / sizeof(opers[0]); i++)
        if (strlen(opers[i]) == (size_t)(p - w) && strncasecmp(opers[i], w, (size_t)(p - w)) == 0)
            fl->oper = (enum conf_log_oper)i;
    if ((int)fl->oper < 0) {
        conf_error(ps->e, ps->file, line, "filter \"%s\": \"%.*s\" is not MATCH, "
                   "CASE_INSENSITIVE_MATCH, CONTAIN, CASE_INSENSITIVE_CONTAIN, "
                   "LT, LTE, GT or GTE", name, (int)(p - w), w);
        return NULL;
    }
    if (fl->oper >= CONF_LOG_LT && fl->type != CONF_LFT_INT) {
        conf_error(ps->e, ps->file, line, "filter \"%s\": %s compares numbers; "
                   "%s is not one", name, opers[fl->oper], row->name);
        return NULL;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0') {
        conf_error(ps->e, ps->file, line, "filter \"%s\": no value to compare", name);
        return NULL;
    }
    return p;
}

/* One value t (trimmed) of a filter's list, appended to fl as its type
 * reads it; an empty one is skipped.  0, -1 after reporting an error at
 * line, -2 when out of memory (for the caller to report). */
static int
lf_value(struct lg_parse *ps, struct conf_log_filter *fl, const char *name,
         const struct lf_row *row, const char *t, int line)
{
    int k = fl->nvals;

    if (*t == '\0')
        return 0;
    if (fl->type == CONF_LFT_INT) {
        char *endp;
        int64_t *nn = realloc(fl->nums, (size_t)(k + 1) * sizeof(*nn));
        if (nn == NULL)
            return -2;
        fl->nums = nn;
        errno = 0;
        nn[k] = strtoll(t, &endp, 10);
        if (errno || *endp) {
            conf_error(ps->e, ps->file, line, "filter \"%s\": \"%s\" is not "
                       "a number (%s is)", name, t, row->name);
            return -1;
        }
    } else if (fl->type == CONF_LFT_IP) {
        uint8_t (*ni)[2][17] = realloc(fl->ips, (size_t)(k + 1) * sizeof(*ni));
        const char *dash = strchr(t, '-');
        if (ni == NULL)
            return -2;
        fl->ips = ni;
        if (lf_ip(t, dash ? (size_t)(dash - t) : strlen(t), ni[k][0]) < 0
            || lf_ip(dash ? dash + 1 : t, strlen(dash ? dash + 1 : t), ni[k][1]) < 0
            || ni[k][0][0] != ni[k][1][0]) {
            conf_error(ps->e, ps->file, line, "filter \"%s\": \"%s\" is not an "
                       "address or a range ADDR-ADDR", name, t);
            return -1;
        }
    } else {
        char **nv = realloc(fl->vals, (size_t)(k + 1) * sizeof(*nv));
        if (nv == NULL)
            return -2;
        fl->vals = nv;
        if ((nv[k] = strdup(t)) == NULL)
            return -2;
    }
    fl->nvals++;
    return 0;
}

static void
lg_filter(struct lg_parse *ps, const struct conf_yaml *node)
{
    static const char *const keys[] = { "name", "action", "condition", NULL };
    struct conf_logging *lg = ps->lg;
    struct conf_log_filter *fl, *nf;
    const struct lf_row *row = NULL;
    const char *name, *action, *cond, *vals;
    char *dup = NULL, *save = NULL, *tok;
    int line;

    if (node->kind != CONF_YAML_MAP) {
        conf_error(ps->e, ps->file, node->line, "filters: each item is a "
                   "mapping with name, action and condition, not a %s",
                   conf_yaml_kind_name(node->kind));
        return;
    }
    if (lg_keys(ps, node, "filter", keys) < 0)
        return;
    name = lg_scalar(ps, conf_yaml_get(node, "name"), "name");
    action = lg_scalar(ps, conf_yaml_get(node, "action"), "action");
    cond = lg_scalar(ps, conf_yaml_get(node, "condition"), "condition");
    if (name == NULL || action == NULL || cond == NULL) {
        conf_error(ps->e, ps->file, node->line, "a filter needs a name, an "
                   "action and a condition");
        return;
    }
    line = conf_yaml_get(node, "condition")->line;
    nf = realloc(lg->filters, (size_t)(lg->nfilters + 1) * sizeof(*nf));
    if (nf == NULL) {
        conf_error(ps->e, ps->file, node->line, "out of memory");
        return;
    }
    lg->filters = nf;
    fl = &lg->filters[lg->nfilters];
    memset(fl, 0, sizeof(*fl));
    fl->line = node->line;
    if (lf_action(ps, node, name, action, fl) < 0
        || (vals = lf_cond(ps, fl, name, cond, line, &row)) == NULL)
        return;
    if ((dup = strdup(vals)) == NULL || (fl->name = strdup(name)) == NULL)
        goto oom;
    for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int rc = lf_value(ps, fl, name, row, conf_trim(tok), line);

        if (rc == -2)
            goto oom;
        if (rc < 0)
            goto fail;
    }
    free(dup);
    dup = NULL;
    if (fl->nvals == 0) {
        conf_error(ps->e, ps->file, line, "filter \"%s\": no value to compare", name);
        goto fail;
    }
    for (int i = 0; i < lg->nfilters; i++)
        if (strcmp(lg->filters[i].name, name) == 0) {
            conf_error(ps->e, ps->file, node->line, "filter \"%s\" is defined "
                       "twice (first at line %d)", name, lg->filters[i].line);
            goto fail;
        }
    lg->nfilters++;
    return;
oom:
    conf_error(ps->e, ps->file, node->line, "out of memory");
fail:
    free(dup);
    /* what was built is released with the struct: count it, then drop */
    lg->nfilters++;
}

/* A log's mode: ascii, or binary (*binary set; written as ASCII); -1
 * (reported) for ascii_pipe or anything else. */
static int
lg_log_mode(struct lg_parse *ps, const struct conf_yaml *node, const char *fname,
            const char *mode, int *binary)
{
    if (mode == NULL)
        return 0;
    /* ATS's test: "bin..." or "b" is binary */
    if (strncasecmp(mode, "bin", 3) == 0 || strcmp(mode, "b") == 0) {
        *binary = 1;
    } else if (strcasecmp(mode, "ascii_pipe") == 0) {
        conf_error(ps->e, ps->file, conf_yaml_get(node, "mode")->line,
                   "log \"%s\": mode: ascii_pipe is not supported; use "
                   "mode: ascii", fname);
        return -1;
    } else if (strcasecmp(mode, "ascii") != 0) {
        conf_error(ps->e, ps->file, conf_yaml_get(node, "mode")->line,
                   "log \"%s\": mode \"%s\" is not ascii, binary or "
                   "ascii_pipe", fname, mode);
        return -1;
    }
    return 0;
}

/* The path a log's filename names, as ATS makes it: stdout and stderr as
 * they are; a final dot dropped, ".log" added when the base name has no
 * dot, and a relative name (a subdirectory is allowed, as in ATS) put
 * under logfile_dir.  NULL when out of memory. */
static char *
lg_log_path(struct lg_parse *ps, const char *fname)
{
    const char *base = strrchr(fname, '/') ? strrchr(fname, '/') + 1 : fname;
    size_t n = strlen(fname);
    int dot = strchr(base, '.') != NULL;
    char *rel, *path;

    if (strcmp(fname, "stdout") == 0 || strcmp(fname, "stderr") == 0)
        return strdup(fname);
    if ((rel = malloc(n + 5)) == NULL)
        return NULL;
    memcpy(rel, fname, n + 1);
    if (n > 0 && rel[n - 1] == '.')         /* ATS drops a final dot */
        rel[--n] = '\0';
    if (!dot)
        memcpy(rel + n, ".log", 5);
    path = fname[0] == '/' ? strdup(rel) : conf_path(ps->logdir, rel);
    free(rel);
    return path;
}

/* A log's filters: (a name or a list of names) of filters defined above,
 * into lf->filters; what is wrong is reported and left out. */
static void
lg_log_filters(struct lg_parse *ps, struct conf_log_file *lf,
               const struct conf_yaml *fv, const char *fname)
{
    const struct conf_logging *lg = ps->lg;
    const struct conf_yaml *const *items = (const struct conf_yaml *const *)&fv;
    int n = 1, accepts = 0;

    if (fv->kind == CONF_YAML_SEQ) {
        items = (const struct conf_yaml *const *)fv->kids;
        n = fv->nkids;
    }
    for (int i = 0; i < n; i++) {
        const char *fn = lg_scalar(ps, items[i], "filters");
        int found = -1;

        if (fn == NULL)
            continue;
        for (int j = 0; j < lg->nfilters; j++)
            if (lg->filters[j].name && strcmp(lg->filters[j].name, fn) == 0)
                found = j;
        if (found < 0) {
            conf_error(ps->e, ps->file, items[i]->line, "log \"%s\": filter "
                       "\"%s\" is not defined (or has errors)", fname, fn);
            continue;
        }
        if (lf->nfilters == CONF_LOG_FILTERS) {
            conf_error(ps->e, ps->file, items[i]->line, "log \"%s\": more "
                       "than %d filters", fname, CONF_LOG_FILTERS);
            break;
        }
        accepts += lg->filters[found].action == CONF_LOG_ACCEPT;
        lf->filters[lf->nfilters++] = found;
    }
    if (accepts > 1)
        conf_warn(ps->e, ps->file, fv->line, "log \"%s\": %d accept filters: "
                  "a line is written only when all of them match (as in "
                  "ATS); one accept filter with a list of values is "
                  "probably what is meant", fname, accepts);
}

/* A note for each of ATS's rolling and file options of a log: read, not
 * used. */
static void
lg_log_ignored(struct lg_parse *ps, const struct conf_yaml *node)
{
    for (int i = 0; i + 1 < node->nkids; i += 2) {
        const struct conf_yaml *k = node->kids[i];
        if (strncmp(k->str, "rolling_", 8) == 0 || strcmp(k->str, "binary_log_version") == 0
            || strcmp(k->str, "pipe_buffer_size") == 0)
            conf_note(ps->e, CONF_NOTE_INTERNAL, ps->file, k->line, "%s: ATS's "
                      "own log rolling and file options; Cistern's logs are "
                      "rolled by logrotate (`cistern -s reopen`)", k->str);
    }
}

static void
lg_log(struct lg_parse *ps, const struct conf_yaml *node)
{
    static const char *const keys[] = {
        "filename", "format", "mode", "header", "filters", "rolling_enabled",
        "rolling_interval_sec", "rolling_offset_hr", "rolling_size_mb",
        "rolling_min_count", "rolling_max_count", "rolling_allow_empty",
        "binary_log_version", "pipe_buffer_size", NULL,
    };
    struct conf_logging *lg = ps->lg;
    struct conf_log_file *lf;
    const struct conf_yaml *fv;
    const char *fname, *fmt, *mode, *hdr;
    int binary = 0;

    if (node->kind != CONF_YAML_MAP) {
        conf_error(ps->e, ps->file, node->line, "logs: each item is a mapping "
                   "with filename and format, not a %s",
                   conf_yaml_kind_name(node->kind));
        return;
    }
    if (lg_keys(ps, node, "log", keys) < 0)
        return;
    fname = lg_scalar(ps, conf_yaml_get(node, "filename"), "filename");
    fmt = lg_scalar(ps, conf_yaml_get(node, "format"), "format");
    mode = lg_scalar(ps, conf_yaml_get(node, "mode"), "mode");
    hdr = lg_scalar(ps, conf_yaml_get(node, "header"), "header");
    if (fname == NULL || fmt == NULL || *fname == '\0') {
        conf_error(ps->e, ps->file, node->line, "a log needs a filename and a format");
        return;
    }
    if (lg->nlogs == CONF_LOG_MAX) {
        conf_error(ps->e, ps->file, node->line, "more than %d logs", CONF_LOG_MAX);
        return;
    }
    lf = &lg->logs[lg->nlogs];
    memset(lf, 0, sizeof(*lf));
    lf->line = node->line;
    lf->fmt = -1;
    for (int i = 0; i < lg->nformats; i++)
        if (strcmp(lg->formats[i].name, fmt) == 0)
            lf->fmt = i;
    if (lf->fmt < 0) {
        conf_error(ps->e, ps->file, conf_yaml_get(node, "format")->line,
                   "log \"%s\": format \"%s\" is not defined (or has errors)",
                   fname, fmt);
        return;
    }
    if (lg_log_mode(ps, node, fname, mode, &binary) < 0)
        return;
    lf->path = lg_log_path(ps, fname);
    if (lf->path == NULL || (hdr != NULL && (lf->header = strdup(hdr)) == NULL)) {
        conf_error(ps->e, ps->file, node->line, "out of memory");
        free(lf->path);
        lf->path = NULL;
        return;
    }
    if (binary)
        conf_warn(ps->e, ps->file, conf_yaml_get(node, "mode")->line,
                  "log \"%s\": mode: binary (ATS's format for traffic_logcat) is "
                  "written as ASCII to %s", fname, lf->path);
    fv = conf_yaml_get(node, "filters");
    if (fv != NULL)
        lg_log_filters(ps, lf, fv, fname);
    lg_log_ignored(ps, node);
    for (int i = 0; i < lg->nlogs; i++)
        if (strcmp(lg->logs[i].path, lf->path) == 0) {
            conf_error(ps->e, ps->file, node->line, "log \"%s\": %s is written "
                       "by the log at line %d already", fname, lf->path,
                       lg->logs[i].line);
            free(lf->path);
            free(lf->header);
            lf->path = lf->header = NULL;
            return;
        }
    conf_note(ps->e, CONF_NOTE_USED, ps->file, node->line, "log %s, format %s%s",
              lf->path, fmt, binary ? " (ASCII, not ATS binary)" : "");
    lg->nlogs++;
}

typedef void lg_item_fn(struct lg_parse *ps, const struct conf_yaml *node);

static void
lg_list(struct lg_parse *ps, const struct conf_yaml *v, const char *key, lg_item_fn *fn)
{
    if (v == NULL)
        return;
    if (v->kind == CONF_YAML_SCALAR && (v->len == 0 || strcmp(v->str, "~") == 0
                                        || strcmp(v->str, "null") == 0))
        return;
    if (v->kind != CONF_YAML_SEQ) {
        conf_error(ps->e, ps->file, v->line, "%s: expected a sequence, not a %s",
                   key, conf_yaml_kind_name(v->kind));
        return;
    }
    for (int i = 0; i < v->nkids; i++)
        fn(ps, v->kids[i]);
}

int
conf_logging_parse(struct conf_logging *lg, const char *file, const char *logdir,
                   struct conf_errors *e)
{
    static const char *const keys[] = { "formats", "filters", "logs", NULL };
    struct lg_parse ps = { .lg = lg, .file = file, .logdir = logdir, .e = e };
    struct conf_yaml *root;
    const struct conf_yaml *top;
    int n0 = e->n;

    if (gethostname(lg->hostname, sizeof(lg->hostname) - 1) < 0)
        snprintf(lg->hostname, sizeof(lg->hostname), "-");
    if (conf_yaml_load(file, e, &root) < 0)
        return -1;
    if (root == NULL) {
        conf_note(e, CONF_NOTE_MATCHES, file, 0, "empty: no custom logs "
                  "(access.log is written)");
        return 0;
    }
    if (root->kind != CONF_YAML_MAP || (top = conf_yaml_get(root, "logging")) == NULL
        || root->nkids != 2) {
        conf_error(e, file, root->line, "the top level is a mapping with one "
                   "key, logging");
        conf_yaml_free(root);
        return -1;
    }
    if (top->kind == CONF_YAML_MAP && lg_keys(&ps, top, "logging", keys) == 0) {
        lg_list(&ps, conf_yaml_get(top, "formats"), "formats", lg_format);
        lg_list(&ps, conf_yaml_get(top, "filters"), "filters", lg_filter);
        lg_list(&ps, conf_yaml_get(top, "logs"), "logs", lg_log);
    } else if (top->kind != CONF_YAML_MAP && !(top->kind == CONF_YAML_SCALAR && top->len == 0)) {
        conf_error(e, file, top->line, "logging: expected a mapping, not a %s",
                   conf_yaml_kind_name(top->kind));
    }
    if (e->n == n0 && lg->nlogs == 0)
        conf_note(e, CONF_NOTE_MATCHES, file, 0, "no logs: access.log is "
                  "written (proxy.config.cistern.access_log_format)");
    else if (e->n == n0)
        conf_note(e, CONF_NOTE_USED, file, 0, "%d log%s replace access.log "
                  "(as in ATS, only the logs named here are written)",
                  lg->nlogs, lg->nlogs == 1 ? "" : "s");
    conf_yaml_free(root);
    return e->n == n0 ? 0 : -1;
}

void
conf_logging_free(struct conf_logging *lg)
{
    for (int i = 0; i < lg->nformats; i++) {
        free(lg->formats[i].name);
        free(lg->formats[i].ops);
        free(lg->formats[i].lit);
    }
    free(lg->formats);
    for (int i = 0; i < lg->nfilters; i++) {
        struct conf_log_filter *f = &lg->filters[i];
        for (int j = 0; j < f->nvals && f->vals; j++)
            free(f->vals[j]);
        free(f->vals);
        free(f->nums);
        free(f->ips);
        free(f->name);
    }
    free(lg->filters);
    for (int i = 0; i < lg->nlogs; i++) {
        free(lg->logs[i].path);
        free(lg->logs[i].header);
    }
    for (int i = 0; i < lg->nhdrs; i++)
        free(lg->hdrs[i]);
    memset(lg, 0, sizeof(*lg));
}
