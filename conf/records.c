/*
 * conf/records.c: records.config, "CONFIG name TYPE value" lines.
 *
 * Every key Cistern knows is one row of rec_table below: its name, its ATS
 * type, the setter that parses the value, the struct conf_records field it
 * writes (by offsetof), its default, and its bounds.  Adding a key means
 * adding a field to struct conf_records and one row here; defaults, parsing,
 * range checks and the type check all follow from the row.
 *
 * Defaults are written as the same strings an operator would put in the file
 * and go through the same setters, so a default can never bypass validation
 * (conf_records_defaults() asserts that they all parse).
 *
 * A setter either stores a complete new value or records an error and leaves
 * the field as it was; struct conf_records never holds a half-parsed value.
 * String fields are always malloc'd (or NULL before defaults are applied) and
 * owned by the struct; conf_records_free() releases them.
 *
 * Unknown keys only warn: ATS files carry hundreds of keys Cistern ignores,
 * and an operator should be able to reuse one.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* asprintf, vasprintf */
#endif
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pwd.h>

#include "conf/conf.h"

#ifndef CST_LOGDIR
#define CST_LOGDIR "/var/log/cistern"
#endif
#ifndef CST_RUNDIR
#define CST_RUNDIR "/run/cistern"
#endif

enum rec_type {
    REC_INT,
    REC_STRING,
    REC_FLOAT,
    REC_COUNTER,
};

static const char *const rec_type_names[] = {
    [REC_INT] = "INT",
    [REC_STRING] = "STRING",
    [REC_FLOAT] = "FLOAT",
    [REC_COUNTER] = "COUNTER",
};

struct rec_ctx;
struct rec_directive;

/* Store value into r (field at d->off); returns 0, or -1 after recording an
 * error through ctx. */
typedef int rec_setter(struct conf_records *r, const struct rec_directive *d,
                       const char *value, struct rec_ctx *ctx);

struct rec_directive {
    const char    *name;
    enum rec_type  type;
    rec_setter    *set;
    size_t         off;
    const char    *def;        /* default, in config-file syntax */
    int64_t        min, max;   /* for integers */
};

/* Where a value came from, for messages and relative paths.  file == NULL
 * while applying defaults. */
struct rec_ctx {
    const char         *file;
    int                 line;
    const char         *dir;
    struct conf_errors *e;
};

static rec_setter rec_set_int, rec_set_int64, rec_set_size, rec_set_string,
                  rec_set_path, rec_set_ports,
                  rec_set_log_level, rec_set_user, rec_set_policy,
                  rec_set_port_list;

#define REC_FIELD(f) offsetof(struct conf_records, f)
#define M16          (16 * 1024 * 1024)
#define ONE_DAY      86400

/* Bounds: timeouts are seconds, at most a day (anything longer is a typo for
 * milliseconds).  Header limits: ATS's floor of 1K / 256 bytes keeps normal
 * browsers working; 16M is far past anything legitimate.  Sizes accept
 * K/M/G/T like ATS. */
static const struct rec_directive rec_table[] = {
    { "proxy.config.http.server_ports", REC_STRING, rec_set_ports,
      0, "8080", 0, 0 },
    { "proxy.config.cistern.workers", REC_INT, rec_set_int,
      REC_FIELD(workers), "0", 0, 256 },
    { "proxy.config.url_remap.remap_required", REC_INT, rec_set_int,
      REC_FIELD(remap_required), "1", 0, 1 },
    { "proxy.config.url_remap.pristine_host_hdr", REC_INT, rec_set_int,
      REC_FIELD(pristine_host_hdr), "0", 0, 1 },
    { "proxy.config.http.push_method_enabled", REC_INT, rec_set_int,
      REC_FIELD(push_method_enabled), "0", 0, 1 },
    { "proxy.config.http.cache.required_headers", REC_INT, rec_set_int,
      REC_FIELD(required_headers), "1", 0, 2 },
    { "proxy.config.http.keep_alive_no_activity_timeout_in", REC_INT,
      rec_set_int, REC_FIELD(ka_no_activity_in), "120", 0, ONE_DAY },
    { "proxy.config.http.keep_alive_no_activity_timeout_out", REC_INT,
      rec_set_int, REC_FIELD(ka_no_activity_out), "120", 0, ONE_DAY },
    { "proxy.config.http.transaction_no_activity_timeout_in", REC_INT,
      rec_set_int, REC_FIELD(txn_no_activity_in), "30", 1, ONE_DAY },
    { "proxy.config.http.transaction_no_activity_timeout_out", REC_INT,
      rec_set_int, REC_FIELD(txn_no_activity_out), "30", 1, ONE_DAY },
    { "proxy.config.http.transaction_active_timeout_in", REC_INT,
      rec_set_int, REC_FIELD(txn_active_in), "0", 0, ONE_DAY },
    { "proxy.config.http.transaction_active_timeout_out", REC_INT,
      rec_set_int, REC_FIELD(txn_active_out), "0", 0, ONE_DAY },
    { "proxy.config.http.accept_no_activity_timeout", REC_INT,
      rec_set_int, REC_FIELD(accept_no_activity), "120", 1, ONE_DAY },
    { "proxy.config.http.connect_attempts_timeout", REC_INT, rec_set_int,
      REC_FIELD(connect_timeout), "30", 1, ONE_DAY },
    { "proxy.config.cistern.request_header_timeout", REC_INT, rec_set_int,
      REC_FIELD(request_header_timeout), "10", 1, ONE_DAY },
    { "proxy.config.http.request_header_max_size", REC_INT, rec_set_size,
      REC_FIELD(request_header_max_size), "131072", 1024, M16 },
    { "proxy.config.http.request_line_max_size", REC_INT, rec_set_size,
      REC_FIELD(request_line_max_size), "65535", 256, M16 },
    { "proxy.config.http.response_header_max_size", REC_INT, rec_set_size,
      REC_FIELD(response_header_max_size), "131072", 1024, M16 },
    { "proxy.config.stop.shutdown_timeout", REC_INT, rec_set_int,
      REC_FIELD(shutdown_timeout), "30", 0, ONE_DAY },
    { "proxy.config.http.per_server.connection.max_idle", REC_INT,
      rec_set_int, REC_FIELD(origin_max_idle), "64", 0, 65535 },
    { "proxy.config.net.connections_throttle", REC_INT, rec_set_int,
      REC_FIELD(connections_throttle), "30000", 1, 1000000 },
    /* ATS: 0 = no limit. */
    { "proxy.config.cache.max_doc_size", REC_INT, rec_set_int64,
      REC_FIELD(max_doc_size), "64M", 0, INT64_MAX },
    { "proxy.config.cistern.debug_headers", REC_INT, rec_set_int,
      REC_FIELD(debug_headers), "0", 0, 1 },
    { "proxy.config.cistern.admin.allow", REC_STRING, rec_set_string,
      REC_FIELD(admin_allow), "127.0.0.1 ::1", 0, 0 },
    { "proxy.config.http.connect_ports", REC_STRING, rec_set_port_list,
      REC_FIELD(connect_ports), "443", 0, 0 },
    { "proxy.config.admin.user_id", REC_STRING, rec_set_user,
      REC_FIELD(user_id), "nobody", 0, 0 },
    { "proxy.config.http.normalize_ae", REC_INT, rec_set_int,
      REC_FIELD(normalize_ae), "1", 0, 2 },
    { "proxy.config.http.cache.range.write", REC_INT, rec_set_int,
      REC_FIELD(range_write), "0", 0, 1 },
    { "proxy.config.cistern.cache.set_cookie", REC_INT, rec_set_int,
      REC_FIELD(cache_set_cookie), "0", 0, 1 },
    { "proxy.config.cistern.cdn_cache_control", REC_INT, rec_set_int,
      REC_FIELD(cdn_cache_control), "1", 0, 1 },
    { "proxy.config.cistern.cache.eviction", REC_STRING, rec_set_string,
      REC_FIELD(cache_eviction), "s3fifo", 0, 0 },
    { "proxy.config.cistern.collapse_timeout", REC_INT, rec_set_int,
      REC_FIELD(collapse_timeout), "10", 0, 300 },
    { "proxy.config.log.logging_enabled", REC_INT, rec_set_int,
      REC_FIELD(logging_enabled), "3", 0, 3 },
    { "proxy.config.cistern.access_log_format", REC_STRING, rec_set_string,
      REC_FIELD(access_log_format), "combined", 0, 0 },
    { "proxy.config.http.cache.heuristic_min_lifetime", REC_INT, rec_set_int,
      REC_FIELD(heuristic_min_lifetime), "3600", 0, 31536000 },
    { "proxy.config.http.cache.heuristic_max_lifetime", REC_INT, rec_set_int,
      REC_FIELD(heuristic_max_lifetime), "86400", 0, 31536000 },
    { "proxy.config.log.logfile_dir", REC_STRING, rec_set_path,
      REC_FIELD(logfile_dir), CST_LOGDIR, 0, 0 },
    { "proxy.config.cistern.run_dir", REC_STRING, rec_set_path,
      REC_FIELD(run_dir), CST_RUNDIR, 0, 0 },
    { "proxy.config.proxy_name", REC_STRING, rec_set_string,
      REC_FIELD(proxy_name), "cistern", 0, 0 },
    { "proxy.config.cistern.log_level", REC_STRING, rec_set_log_level,
      REC_FIELD(error_log_level), "info", 0, 0 },
    /* TLS (conf/ssl_multicert.c).  Paths stay as written: the certificate
     * paths resolve against the config directory when the certificates
     * are loaded; a STRING of NULL means unset, as in ATS.  The cipher
     * lists: Mozilla's "intermediate" profile for TLS 1.2 (ECDHE with
     * AES-GCM or ChaCha20 only) and OpenSSL's TLS 1.3 defaults. */
    { "proxy.config.ssl.server.multicert.filename", REC_STRING, rec_set_string,
      REC_FIELD(ssl_multicert), "ssl_multicert.config", 0, 0 },
    { "proxy.config.ssl.server.cert.path", REC_STRING, rec_set_string,
      REC_FIELD(ssl_cert_path), ".", 0, 0 },
    { "proxy.config.ssl.server.private_key.path", REC_STRING, rec_set_string,
      REC_FIELD(ssl_key_path), ".", 0, 0 },
    { "proxy.config.ssl.server.cipher_suite", REC_STRING, rec_set_string,
      REC_FIELD(ssl_cipher_suite), CONF_SSL_CIPHERS_DEFAULT, 0, 0 },
    { "proxy.config.ssl.server.TLSv1_3.cipher_suites", REC_STRING, rec_set_string,
      REC_FIELD(ssl_tls13_suites),
      "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256", 0, 0 },
    { "proxy.config.ssl.server.ticket_key.filename", REC_STRING, rec_set_string,
      REC_FIELD(ssl_ticket_key_file), "NULL", 0, 0 },
    { "proxy.config.ssl.TLSv1", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1), "0", 0, 1 },
    { "proxy.config.ssl.TLSv1_1", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1_1), "0", 0, 1 },
    { "proxy.config.ssl.TLSv1_2", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1_2), "1", 0, 1 },
    { "proxy.config.ssl.TLSv1_3", REC_INT, rec_set_int,
      REC_FIELD(ssl_tlsv1_3), "1", 0, 1 },
    { "proxy.config.ssl.client.verify.server.policy", REC_STRING, rec_set_policy,
      REC_FIELD(ssl_verify_policy), "ENFORCED", 0, 0 },
    { "proxy.config.ssl.client.CA.cert.filename", REC_STRING, rec_set_string,
      REC_FIELD(ssl_client_ca_file), "NULL", 0, 0 },
    { "proxy.config.ssl.client.CA.cert.path", REC_STRING, rec_set_string,
      REC_FIELD(ssl_client_ca_path), "NULL", 0, 0 },
};

#define REC_NKEYS (sizeof(rec_table) / sizeof(rec_table[0]))

static void
rec_fail(struct rec_ctx *ctx, const struct rec_directive *d, const char *fmt,
         ...) __attribute__((format(printf, 3, 4)));

static void
rec_fail(struct rec_ctx *ctx, const struct rec_directive *d, const char *fmt,
         ...)
{
    char   *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    conf_error(ctx->e, ctx->file, ctx->line, "%s: %s", d->name,
               msg != NULL ? msg : "invalid value");
    free(msg);
}

/* ---------------------------------------------------------------------
 * Setters
 */

/* Parse an integer (with K/M/G/T when sizes is set) and check the row's
 * bounds. */
static int
rec_parse_int(const struct rec_directive *d, const char *value, int sizes,
              struct rec_ctx *ctx, int64_t *out)
{
    int64_t v;
    char   *end;

    if (sizes && value[0] != '-') {
        if (conf_parse_size(value, &v) < 0) {
            rec_fail(ctx, d, "\"%s\" is not a size (bytes, or a number with "
                     "a K, M, G or T suffix)", value);
            return -1;
        }
    } else {
        errno = 0;
        v = strtoll(value, &end, 10);
        if (end == value || *end != '\0' || isspace((unsigned char)*value)) {
            rec_fail(ctx, d, "\"%s\" is not an integer", value);
            return -1;
        }
        if (errno == ERANGE) {
            rec_fail(ctx, d, "%s is out of range (%lld..%lld)", value,
                     (long long)d->min, (long long)d->max);
            return -1;
        }
    }
    if (v < d->min || v > d->max) {
        rec_fail(ctx, d, "%s is out of range (%lld..%lld)", value,
                 (long long)d->min, (long long)d->max);
        return -1;
    }
    *out = v;
    return 0;
}

static int
rec_set_int(struct conf_records *r, const struct rec_directive *d,
            const char *value, struct rec_ctx *ctx)
{
    int64_t v;

    if (rec_parse_int(d, value, 0, ctx, &v) < 0)
        return -1;
    *(int *)((char *)r + d->off) = (int)v;
    return 0;
}

static int
rec_set_size(struct conf_records *r, const struct rec_directive *d,
             const char *value, struct rec_ctx *ctx)
{
    int64_t v;

    if (rec_parse_int(d, value, 1, ctx, &v) < 0)
        return -1;
    *(int *)((char *)r + d->off) = (int)v;
    return 0;
}

static int
rec_set_int64(struct conf_records *r, const struct rec_directive *d,
              const char *value, struct rec_ctx *ctx)
{
    int64_t v;

    if (rec_parse_int(d, value, 1, ctx, &v) < 0)
        return -1;
    *(int64_t *)((char *)r + d->off) = v;
    return 0;
}

static int
rec_store_string(struct conf_records *r, const struct rec_directive *d,
                 char *s, struct rec_ctx *ctx)
{
    char **field = (char **)((char *)r + d->off);

    if (s == NULL) {
        rec_fail(ctx, d, "out of memory");
        return -1;
    }
    free(*field);
    *field = s;
    return 0;
}

static int
rec_set_string(struct conf_records *r, const struct rec_directive *d,
               const char *value, struct rec_ctx *ctx)
{
    return rec_store_string(r, d, strdup(value), ctx);
}

static int
rec_set_path(struct conf_records *r, const struct rec_directive *d,
             const char *value, struct rec_ctx *ctx)
{
    if (strchr(value, ' ') != NULL || strchr(value, '\t') != NULL) {
        rec_fail(ctx, d, "\"%s\": spaces in paths are not supported", value);
        return -1;
    }
    return rec_store_string(r, d, conf_path(ctx->dir, value), ctx);
}

static int
rec_set_log_level(struct conf_records *r, const struct rec_directive *d,
                  const char *value, struct rec_ctx *ctx)
{
    static const char *const levels[] = {
        "debug", "info", "notice", "warn", "error", "crit",
    };

    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
        if (strcasecmp(value, levels[i]) == 0)
            return rec_store_string(r, d, strdup(levels[i]), ctx);
    rec_fail(ctx, d, "unknown log level \"%s\" (expected debug, info, "
             "notice, warn, error or crit)", value);
    return -1;
}

/* proxy.config.ssl.client.verify.server.policy: ATS's three words. */
static int
rec_set_policy(struct conf_records *r, const struct rec_directive *d,
               const char *value, struct rec_ctx *ctx)
{
    static const char *const pol[] = { "ENFORCED", "PERMISSIVE", "DISABLED" };

    for (size_t i = 0; i < sizeof(pol) / sizeof(pol[0]); i++)
        if (strcasecmp(value, pol[i]) == 0)
            return rec_store_string(r, d, strdup(pol[i]), ctx);
    rec_fail(ctx, d, "unknown policy \"%s\" (expected ENFORCED, PERMISSIVE "
             "or DISABLED)", value);
    return -1;
}

int
conf_port_list_has(const char *list, int port)
{
    const char *p = list;
    int found = 0, any = 0;

    while (*p) {
        long lo, hi;
        char *e;

        if (*p == ' ' || *p == '\t' || *p == ',') {
            p++;
            continue;
        }
        any = 1;
        if (*p == '*') {
            found = 1;
            p++;
        } else {
            if (!isdigit((unsigned char)*p))
                return -1;
            lo = hi = strtol(p, &e, 10);
            if (*e == '-') {
                if (!isdigit((unsigned char)e[1]))
                    return -1;
                hi = strtol(e + 1, &e, 10);
            }
            if (lo < 0 || hi > 65535 || lo > hi)
                return -1;
            if (port >= lo && port <= hi)
                found = 1;
            p = e;
        }
        if (*p && *p != ' ' && *p != '\t' && *p != ',')
            return -1;
    }
    return any ? found : -1;
}

/* proxy.config.http.connect_ports: checked here, matched by
 * conf_port_list_has() for each CONNECT. */
static int
rec_set_port_list(struct conf_records *r, const struct rec_directive *d,
                  const char *value, struct rec_ctx *ctx)
{
    if (conf_port_list_has(value, -1) < 0) {
        rec_fail(ctx, d, "\"%s\": expected ports, ranges (443 8000-9000) or *",
                 value);
        return -1;
    }
    return rec_store_string(r, d, strdup(value), ctx);
}

/* proxy.config.admin.user_id: a user name, "#UID", or "#-1" (keep the
 * starting user).  The user must exist: a typo is a config error that
 * `cistern -t` reports, not a surprise at start.  The built-in default is
 * not looked up here (defaults must always parse); the master resolves the
 * user again when it starts. */
static int
rec_set_user(struct conf_records *r, const struct rec_directive *d,
             const char *value, struct rec_ctx *ctx)
{
    struct passwd *pw = NULL;
    char *end;
    long  v;

    if (strcmp(value, "#-1") == 0 || ctx->file == NULL)
        return rec_store_string(r, d, strdup(value), ctx);
    if (value[0] == '#') {
        errno = 0;
        v = strtol(value + 1, &end, 10);
        if (end != value + 1 && *end == '\0' && errno == 0 && v >= 0)
            pw = getpwuid((uid_t)v);
    } else if (strchr(value, ' ') == NULL) {
        pw = getpwnam(value);
    }
    if (pw == NULL) {
        rec_fail(ctx, d, "no such user \"%s\"", value);
        return -1;
    }
    return rec_store_string(r, d, strdup(value), ctx);
}

/* One server_ports entry: PORT[:opt]... with opt ssl, ipv4 or ipv6. */
static int
rec_parse_port(const struct rec_directive *d, char *entry,
               struct rec_ctx *ctx, struct conf_port *out)
{
    char *save = NULL, *num, *opt, *end;
    char  orig[64];
    long  v;
    int   v4 = 0;

    snprintf(orig, sizeof(orig), "%s", entry);
    memset(out, 0, sizeof(*out));
    num = strtok_r(entry, ":", &save);
    errno = 0;
    v = num != NULL ? strtol(num, &end, 10) : 0;
    if (num == NULL || entry[0] == ':' || !isdigit((unsigned char)num[0])
        || *end != '\0') {
        rec_fail(ctx, d, "\"%s\" is not a port (expected PORT, PORT:ssl, "
                 "PORT:ipv4 or PORT:ipv6)", orig);
        return -1;
    }
    if (errno == ERANGE || v > 65535) {
        rec_fail(ctx, d, "port %s is out of range (0..65535)", num);
        return -1;
    }
    out->port = (int)v;
    while ((opt = strtok_r(NULL, ":", &save)) != NULL) {
        if (strcasecmp(opt, "ssl") == 0) {
            out->ssl = 1;
        } else if (strcasecmp(opt, "ipv6") == 0) {
            out->ipv6 = 1;
        } else if (strcasecmp(opt, "ipv4") == 0) {
            v4 = 1;
        } else {
            rec_fail(ctx, d, "unknown port option \"%s\" in \"%s\"", opt,
                     orig);
            return -1;
        }
    }
    if (v4 && out->ipv6) {
        rec_fail(ctx, d, "\"%s\": ipv4 and ipv6 conflict", orig);
        return -1;
    }
    return 0;
}

static int
rec_set_ports(struct conf_records *r, const struct rec_directive *d,
              const char *value, struct rec_ctx *ctx)
{
    struct conf_port ports[CONF_MAX_PORTS];
    char *copy, *p, *entry;
    int   n = 0, rc = 0;

    copy = strdup(value);
    if (copy == NULL) {
        rec_fail(ctx, d, "out of memory");
        return -1;
    }
    /* ATS separates entries with spaces or commas. */
    for (p = copy; *p != '\0'; p++)
        if (*p == ',')
            *p = ' ';
    p = copy;
    while ((entry = conf_token(&p)) != NULL) {
        if (n == CONF_MAX_PORTS) {
            rec_fail(ctx, d, "too many ports (at most %d)", CONF_MAX_PORTS);
            rc = -1;
            break;
        }
        if (rec_parse_port(d, entry, ctx, &ports[n]) < 0) {
            rc = -1;
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (ports[n].port != 0 && ports[i].port == ports[n].port) {
                rec_fail(ctx, d, "port %d is listed twice", ports[n].port);
                rc = -1;
                break;
            }
        }
        n++;
    }
    free(copy);
    if (rc == 0 && n == 0) {
        rec_fail(ctx, d, "no ports to listen on");
        rc = -1;
    }
    if (rc < 0)
        return -1;
    memcpy(r->ports, ports, sizeof(ports[0]) * (size_t)n);
    r->nports = n;
    return 0;
}

/* ---------------------------------------------------------------------
 * The file
 */
static const struct rec_directive *
rec_find(const char *name)
{
    for (size_t i = 0; i < REC_NKEYS; i++)
        if (strcmp(rec_table[i].name, name) == 0)
            return &rec_table[i];
    return NULL;
}

void
conf_records_defaults(struct conf_records *r)
{
    struct conf_errors e;
    struct rec_ctx     ctx = { .file = NULL, .line = 0, .dir = NULL, .e = &e };

    memset(&e, 0, sizeof(e));
    memset(r, 0, sizeof(*r));
    for (size_t i = 0; i < REC_NKEYS; i++)
        rec_table[i].set(r, &rec_table[i], rec_table[i].def, &ctx);
    /* A default that does not parse is a bug in rec_table, or memory ran
     * out before the daemon even started. */
    assert(e.n == 0);
    conf_errors_free(&e);
}

struct rec_parse {
    struct conf_records *r;
    struct rec_ctx       ctx;
    int                  seen[REC_NKEYS];   /* line of last setting, or 0 */
};

static int
rec_line(void *arg, char *line, int lineno)
{
    struct rec_parse *ps = arg;
    struct rec_ctx   *ctx = &ps->ctx;
    const struct rec_directive *d;
    char *p = line, *kw, *name, *type, *value;
    int   t = -1;
    size_t idx;

    ctx->line = lineno;
    kw = conf_token(&p);
    /* ATS writes LOCAL for per-node settings; one node here, so same thing. */
    if (strcmp(kw, "CONFIG") != 0 && strcmp(kw, "LOCAL") != 0) {
        conf_error(ctx->e, ctx->file, lineno,
                   "unknown keyword \"%s\" (expected CONFIG)", kw);
        return 0;
    }
    name = conf_token(&p);
    if (name == NULL) {
        conf_error(ctx->e, ctx->file, lineno, "missing key name after %s",
                   kw);
        return 0;
    }
    type = conf_token(&p);
    if (type == NULL) {
        conf_error(ctx->e, ctx->file, lineno, "%s: missing type", name);
        return 0;
    }
    for (int i = 0; i < (int)(sizeof(rec_type_names) / sizeof(rec_type_names[0])); i++)
        if (strcmp(type, rec_type_names[i]) == 0)
            t = i;
    if (t < 0) {
        conf_error(ctx->e, ctx->file, lineno, "%s: unknown type \"%s\" "
                   "(expected INT, STRING, FLOAT or COUNTER)", name, type);
        return 0;
    }
    value = conf_trim(p);

    d = rec_find(name);
    if (d == NULL) {
        conf_warn(ctx->e, ctx->file, lineno, "unknown key \"%s\" ignored",
                  name);
        return 0;
    }
    if ((enum rec_type)t != d->type) {
        conf_error(ctx->e, ctx->file, lineno, "%s: type must be %s, not %s",
                   name, rec_type_names[d->type], type);
        return 0;
    }
    if (*value == '\0') {
        conf_error(ctx->e, ctx->file, lineno, "%s: missing value", name);
        return 0;
    }
    idx = (size_t)(d - rec_table);
    if (ps->seen[idx] != 0)
        conf_warn(ctx->e, ctx->file, lineno,
                  "%s: set again (line %d's value is replaced)", name,
                  ps->seen[idx]);
    if (d->set(ps->r, d, value, ctx) == 0)
        ps->seen[idx] = lineno;
    return 0;
}

int
conf_records_parse(struct conf_records *r, const char *file, const char *dir,
                   struct conf_errors *e)
{
    struct rec_parse ps;
    int              n0 = e->n;

    memset(&ps, 0, sizeof(ps));
    ps.r = r;
    ps.ctx.file = file;
    ps.ctx.dir = dir;
    ps.ctx.e = e;
    if (conf_foreach_line(file, e, rec_line, &ps) < 0)
        return -1;
    return e->n == n0 ? 0 : -1;
}

/* The setters that store a malloc'd string in the row's field. */
static int
rec_owns_string(const struct rec_directive *d)
{
    return d->set == rec_set_string || d->set == rec_set_path
           || d->set == rec_set_log_level || d->set == rec_set_user
           || d->set == rec_set_policy || d->set == rec_set_port_list;
}

void
conf_records_free(struct conf_records *r)
{
    for (size_t i = 0; i < REC_NKEYS; i++) {
        if (rec_owns_string(&rec_table[i])) {
            char **field = (char **)((char *)r + rec_table[i].off);

            free(*field);
            *field = NULL;
        }
    }
}
