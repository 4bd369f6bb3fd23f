/*
 * worker/alog.c: the access log, one line per transaction.
 *
 * Formats (proxy.config.cistern.access_log_format):
 *   combined  NCSA combined, then the cache result (ATS/Squid codes), the
 *             origin's status and the time taken in ms:
 *             1.2.3.4 - - [30/Nov/2026:03:16:16 +0000] "GET /x HTTP/1.1"
 *             200 1234 "referer" "agent" TCP_HIT - 0
 *   squid     Squid's native format: time.ms elapsed client code/status
 *             bytes method URL - hierarchy/origin -
 *   json      one JSON object per line
 *
 * A transaction's record lives in its request context: opened when the
 * head is accepted (alog_begin), filled by whoever answers (status, bytes,
 * result, origin status), written when the answer is complete or the
 * connection dies (alog_end; idempotent).  Requests refused before they
 * were understood get a line of their own (alog_refused).
 *
 * The record keeps its own raw copy of the target, referer and user agent
 * (only the bytes that can reach the line) and they are escaped when the
 * line is written: by then a proxied or PUSHed transaction's head has left
 * the input buffer, which the next request or the body may overwrite.
 *
 * Lines are buffered per worker and written with one write() when 8 KiB
 * have gathered or once a second, so a slow disk costs at most one write
 * per second per worker.  When the buffer cannot take a line (the disk is
 * failing or stalled), the line is dropped and counted, never silently.
 * Each worker opens the file itself (O_APPEND: lines from several workers
 * never interleave) and reopens it on SIGUSR1.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm/log.h"
#include "worker/worker.h"

#define ALOG_BUF      65536
#define ALOG_FLUSH_AT 8192

enum alog_fmt { ALOG_COMBINED = 0, ALOG_SQUID, ALOG_JSON };

static int    alog_fd = -1;
static int    alog_fmt_id;
static char   alog_buf[ALOG_BUF];
static size_t alog_len;

/* logging.yaml's logs (alog_custom set): one descriptor and buffer each,
 * made at the first open and kept across reopens. */
struct alog_out {
    const struct conf_log_file *lf;
    int      fd;
    char    *buf;                     /* ALOG_BUF bytes */
    size_t   len;
};
static const struct conf_logging *alog_custom;   /* NULL: access.log */
unsigned               alog_need;                /* CONF_LOGN_* | ALOG_NEED_CUSTOM */
static struct alog_out alog_outs[CONF_LOG_MAX];
static int             alog_nouts;
static int             alog_on;                  /* some log is open */

int
alog_format_parse(const char *name)
{
    if (strcmp(name, "combined") == 0)
        return ALOG_COMBINED;
    if (strcmp(name, "squid") == 0)
        return ALOG_SQUID;
    if (strcmp(name, "json") == 0)
        return ALOG_JSON;
    return -1;
}

/* Open (or reopen) logging.yaml's files.  A file that cannot be opened
 * is logged and its lines are dropped (counted), as for access.log. */
static int
alog_open_custom(const struct conf_logging *lg)
{
    int rc = 0;

    alog_custom = lg;
    alog_need = lg->need | ALOG_NEED_CUSTOM;
    for (int i = 0; i < lg->nlogs; i++) {
        struct alog_out *o = &alog_outs[i];
        const struct conf_log_file *lf = &lg->logs[i];
        int fd;

        if (o->buf == NULL) {
            if ((o->buf = malloc(ALOG_BUF)) == NULL) {
                log_error("the log %s: out of memory", lf->path);
                rc = -1;
                continue;
            }
            o->fd = -1;
        }
        o->lf = lf;
        if (strcmp(lf->path, "stdout") == 0 || strcmp(lf->path, "stderr") == 0) {
            o->fd = strcmp(lf->path, "stdout") == 0 ? STDOUT_FILENO : STDERR_FILENO;
            continue;
        }
        /* A new file begins with its header line (ATS's header:), written
         * by the one worker that created it (O_EXCL), before any line:
         * the others only write lines on their next flush. */
        fd = open(lf->path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 && lf->header != NULL) {
            struct iovec iov[2] = {
                { (void *)lf->header, strlen(lf->header) }, { (void *)"\n", 1 },
            };
            if (writev(fd, iov, 2) < 0)
                log_error("the log %s: writing its header: %s", lf->path,
                          strerror(errno));
        }
        if (fd < 0 && errno == EEXIST)
            fd = open(lf->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            log_error("cannot open the log %s: %s", lf->path, strerror(errno));
            rc = -1;
            continue;
        }
        if (o->fd > STDERR_FILENO)
            close(o->fd);
        o->fd = fd;
    }
    alog_nouts = lg->nlogs;
    alog_on = 1;
    return rc;
}

int
alog_open(void)
{
    char path[4096];
    int fd;

    if (wk->conf->rec.logging_enabled < 2)
        return 0;
    if (wk->conf->logging.nlogs > 0)
        return alog_open_custom(&wk->conf->logging);
    alog_fmt_id = alog_format_parse(wk->conf->rec.access_log_format);
    if (alog_fmt_id < 0)
        alog_fmt_id = ALOG_COMBINED;
    snprintf(path, sizeof(path), "%s/access.log", wk->conf->rec.logfile_dir);
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        log_error("cannot open the access log %s: %s", path, strerror(errno));
        return -1;
    }
    if (alog_fd >= 0)
        close(alog_fd);
    alog_fd = fd;
    alog_on = 1;
    return 0;
}

static void
alog_flush_out(int fd, char *buf, size_t *len)
{
    size_t off = 0;

    while (fd >= 0 && off < *len) {
        ssize_t n = write(fd, buf + off, *len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;      /* keep the rest; new lines are dropped if it fills */
        }
        off += (size_t)n;
    }
    memmove(buf, buf + off, *len - off);
    *len -= off;
}

void
alog_flush(void)
{
    if (alog_len)
        alog_flush_out(alog_fd, alog_buf, &alog_len);
    for (int i = 0; i < alog_nouts; i++)
        if (alog_outs[i].len)
            alog_flush_out(alog_outs[i].fd, alog_outs[i].buf, &alog_outs[i].len);
}

void
alog_close(void)
{
    alog_flush();
    if (alog_fd >= 0)
        close(alog_fd);
    alog_fd = -1;
    for (int i = 0; i < alog_nouts; i++) {
        if (alog_outs[i].fd > STDERR_FILENO)
            close(alog_outs[i].fd);
        alog_outs[i].fd = -1;
    }
    alog_on = 0;
}

/* ------------------------------------------------------------------ */
/* Writing a line without printf.  Formatted with vsnprintf and escaped
 * byte by byte, the line cost 6.9k instructions on top of an 11.3k cache
 * hit (scripts/profile.sh hit vs hit-nolog); written with buf.h's fmt_*
 * writers and the escaper below it costs about 0.8k.
 *
 * A line is appended in place at the end of alog_buf, and the helpers
 * never check for room: alog_write() first makes sure ALOG_LINE_MAX bytes
 * are free.  The longest line (json) is under 2.5 KiB: the escaped target
 * (at most ALOG_TARGET_MAX + 3 bytes), referer and agent (ALOG_FIELD_MAX
 * + 3 each), the peer (under 64), our method and result names, six
 * numbers of at most 20 digits, 170 bytes of field names and the parent
 * (under 300). */
#define ALOG_LINE_MAX 4096

/* Bytes written as they are in a log field: printable ASCII but the quote
 * and the backslash.  The rest (control bytes, 0x7f and up) are written
 * \xHH, so a client can forge neither a line nor a field. */
static const uint8_t alog_plain[256] = {
    /* 0x00-0x1f: control bytes */
    [0x20] = 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,    /* '"' */
    [0x30] = 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    [0x40] = 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    [0x50] = 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,    /* '\\' */
    [0x60] = 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    [0x70] = 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,    /* DEL */
    /* 0x80-0xff: not ASCII */
};

/* A field for a quoted log value, escaped (alog_plain).  A byte is written
 * while fewer than max characters have been, so an overlong field ends
 * at most 3 characters past max (inside a \xHH).  Runs of plain bytes
 * are copied whole. */
static char *
alog_put_esc(char *p, const char *s, size_t n, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s, *end = u + n;
    char *const lim = p + max;

    while (u < end && p < lim) {
        if (alog_plain[*u]) {
            size_t room = (size_t)(lim - p), left = (size_t)(end - u);
            const unsigned char *stop = u + (left < room ? left : room);
            const unsigned char *q = u + 1;

            while (q < stop && alog_plain[*q])
                q++;
            p = fmt_mem(p, (const char *)u, (size_t)(q - u));
            u = q;
        } else {
            p[0] = '\\';
            p[1] = 'x';
            p[2] = hex[*u >> 4];
            p[3] = hex[*u & 0xf];
            p += 4;
            u++;
        }
    }
    return p;
}

/* The client's address (fmt_peer_text: the last one's text is kept). */
static char *
alog_put_peer(char *p, const struct req *rq)
{
    size_t n;
    const char *s = fmt_peer_text(rq->rq_peer, &n);

    return fmt_mem(p, s, n);
}

/* Keep the first bytes of a field that can reach the line. */
static uint16_t
alog_keep(char *dst, size_t size, const char *src, size_t n)
{
    if (n > size)
        n = size;
    memcpy(dst, src, n);
    return (uint16_t)n;
}

/* Append the value of header name (joined with ", " when repeated, as
 * ATS does) from fields over base into t's header area as capture i. */
static void
alog_capture(struct alog_txn *t, int i, const char *name, const char *base,
             const struct http_field *fields, int nfields)
{
    size_t nl = strlen(name);
    size_t room = sizeof(t->harea) - t->hused, n = 0;
    char *dst = t->harea + t->hused;

    t->hlen[i] = ALOG_HDR_NONE;
    for (int k = 0; k < nfields; k++) {
        const struct http_field *f = &fields[k];
        size_t vl = f->value_len;

        if (f->name_len != nl || strncasecmp(base + f->name, name, nl) != 0)
            continue;
        if (t->hlen[i] != ALOG_HDR_NONE && n + 2 <= room && n < ALOG_FIELD_MAX) {
            memcpy(dst + n, ", ", 2);
            n += 2;
        }
        if (vl > ALOG_FIELD_MAX - n)
            vl = n < ALOG_FIELD_MAX ? ALOG_FIELD_MAX - n : 0;
        if (vl > room - n)
            vl = room - n;
        memcpy(dst + n, base + f->value, vl);
        n += vl;
        t->hlen[i] = 0;
    }
    if (t->hlen[i] != ALOG_HDR_NONE) {
        t->hoff[i] = t->hused;
        t->hlen[i] = (uint16_t)n;
        t->hused += (uint16_t)n;
    }
}

static void
alog_begin_custom(struct req *rq, struct alog_txn *t, const struct http_req *r)
{
    const struct conf_logging *lg = alog_custom;

    t->head_len = r->head_len;
    t->rhead_len = t->ohead_len = t->oreq_len = 0;
    t->oreq_body = t->obody = 0;
    t->req_cl = r->content_length;
    t->intr = 0;
    t->tls = rq->rq_tls;
    t->oaddr[0] = t->laddr[0] = 0;
    t->murl_len = t->ohost_len = t->ctype_len = t->phrase_len = 0;
    t->uhost_len = alog_keep(t->uhost, sizeof(t->uhost), r->base + r->host,
                             r->host_len);
    t->hused = 0;
    for (int i = 0; i < lg->nhdrs; i++) {
        t->hlen[i] = ALOG_HDR_NONE;
        if (lg->hdr_kind[i] == CONF_LF_CQH)
            alog_capture(t, i, lg->hdrs[i], r->base, r->fields, r->nfields);
    }
}

void
alog_begin(struct req *rq)
{
    struct alog_txn *t;
    struct http_req *r;
    int i;

    if (!alog_on || rq == NULL)
        return;
    t = &rq->log;
    r = &rq->r;
    t->parent = NULL;
    event_base_gettimeofday_cached(wk->base, &t->start);
    t->method = http_method_name(r->method);
    t->target_len = alog_keep(t->target, sizeof(t->target), r->base + r->target,
                              r->target_len);
    t->minor = r->minor;
    t->h2 = rq->rq_h2;
    t->referer_len = t->ua_len = 0;
    /* The first Referer and User-Agent: known names, found by their ids */
    if ((i = http_field_find_id(r, HTTP_F_REFERER, 0)) >= 0)
        t->referer_len = alog_keep(t->referer, sizeof(t->referer),
                                   r->base + r->fields[i].value, r->fields[i].value_len);
    if ((i = http_field_find_id(r, HTTP_F_USER_AGENT, 0)) >= 0)
        t->ua_len = alog_keep(t->ua, sizeof(t->ua), r->base + r->fields[i].value,
                              r->fields[i].value_len);
    t->status = 0;
    t->ostatus = 0;
    t->bytes = 0;
    t->result = "NONE";
    t->active = 1;
    if (alog_custom)
        alog_begin_custom(rq, t, r);
}

void
alog_result(struct req *rq, const char *result, int ostatus)
{
    if (rq)
        rq->rq_result = result;     /* for the metrics (metrics.c) */
    if (rq && rq->log.active) {
        rq->log.result = result;
        if (ostatus)
            rq->log.ostatus = ostatus;
    }
}

void
alog_bytes(struct req *rq, uint64_t n)
{
    if (rq)
        rq->rq_sent += n;           /* for the metrics (metrics.c) */
    if (rq && rq->log.active)
        rq->log.bytes += n;
}

void
alog_status(struct req *rq, int status)
{
    if (rq && rq->log.active)
        rq->log.status = status;
}

/* Append t's line, or count it dropped (a failing disk has left less than
 * ALOG_LINE_MAX of the buffer free). */
/* The time's text changes once a second: made then, copied per line. */
static struct {
    time_t  sec;
    char    ncsa[40], iso[32], secs[24];
    size_t  ncsa_len, iso_len, secs_len;
} alog_clock;

static void
alog_clock_at(time_t sec)
{
    struct tm tm;

    if (sec == alog_clock.sec)
        return;
    gmtime_r(&sec, &tm);
    alog_clock.ncsa_len = strftime(alog_clock.ncsa, sizeof(alog_clock.ncsa),
                                   "%d/%b/%Y:%H:%M:%S +0000", &tm);
    alog_clock.iso_len = strftime(alog_clock.iso, sizeof(alog_clock.iso),
                                  "%Y-%m-%dT%H:%M:%S", &tm);
    alog_clock.secs_len = (size_t)(fmt_i64(alog_clock.secs, sec) - alog_clock.secs);
    alog_clock.sec = sec;
}

/* Squid's native format: time.ms elapsed client code/status bytes
 * method URL - hierarchy/origin - */
static char *
alog_line_squid(char *p, const struct req *rq, const struct alog_txn *t, int64_t ms,
                int msec)
{
    p = fmt_mem(p, alog_clock.secs, alog_clock.secs_len);
    *p++ = '.';
    p = fmt_pad(p, msec, 3, '0');
    *p++ = ' ';
    p = fmt_pad(p, ms, 6, ' ');
    *p++ = ' ';
    p = alog_put_peer(p, rq);
    *p++ = ' ';
    p = fmt_str(p, t->result);
    *p++ = '/';
    p = fmt_pad(p, t->status, 3, '0');
    *p++ = ' ';
    p = fmt_u64(p, t->bytes);
    *p++ = ' ';
    p = fmt_str(p, t->method);
    *p++ = ' ';
    p = alog_put_esc(p, t->target, t->target_len, ALOG_TARGET_MAX);
    if (t->ostatus && t->parent) {
        p = fmt_lit(p, " - PARENT_HIT/");
        p = fmt_str(p, t->parent);
    } else if (t->ostatus) {
        p = fmt_lit(p, " - DIRECT/");
        p = fmt_i64(p, t->ostatus);
    } else {
        p = fmt_lit(p, " - NONE/-");
    }
    p = fmt_lit(p, " -\n");
    return p;
}

/* The protocol version: "HTTP/1.1", "HTTP/2" (prefix: "HTTP/" or
 * "http/"). */
static char *
alog_put_ver(char *p, const struct alog_txn *t, const char *prefix)
{
    p = fmt_str(p, prefix);
    if (t->h2)
        return fmt_lit(p, "2");
    p = fmt_lit(p, "1.");
    return fmt_i64(p, t->minor);
}

static char *
alog_line_json(char *p, const struct req *rq, const struct alog_txn *t, int64_t ms,
               int msec)
{
    p = fmt_lit(p, "{\"time\":\"");
    p = fmt_mem(p, alog_clock.iso, alog_clock.iso_len);
    *p++ = '.';
    p = fmt_pad(p, msec, 3, '0');
    p = fmt_lit(p, "Z\",\"client\":\"");
    p = alog_put_peer(p, rq);
    p = fmt_lit(p, "\",\"method\":\"");
    p = fmt_str(p, t->method);
    p = fmt_lit(p, "\",\"url\":\"");
    p = alog_put_esc(p, t->target, t->target_len, ALOG_TARGET_MAX);
    p = fmt_lit(p, "\",\"version\":\"");
    p = alog_put_ver(p, t, "HTTP/");
    p = fmt_lit(p, "\",\"status\":");
    p = fmt_i64(p, t->status);
    p = fmt_lit(p, ",\"bytes\":");
    p = fmt_u64(p, t->bytes);
    p = fmt_lit(p, ",\"referer\":\"");
    p = alog_put_esc(p, t->referer, t->referer_len, ALOG_FIELD_MAX);
    p = fmt_lit(p, "\",\"user_agent\":\"");
    p = alog_put_esc(p, t->ua, t->ua_len, ALOG_FIELD_MAX);
    p = fmt_lit(p, "\",\"cache\":\"");
    p = fmt_str(p, t->result);
    p = fmt_lit(p, "\",\"origin_status\":");
    if (t->ostatus)
        p = fmt_i64(p, t->ostatus);
    else
        p = fmt_lit(p, "null");
    if (t->parent) {
        p = fmt_lit(p, ",\"parent\":\"");
        p = fmt_str(p, t->parent);
        *p++ = '"';
    }
    p = fmt_lit(p, ",\"ms\":");
    p = fmt_i64(p, ms);
    p = fmt_lit(p, "}\n");
    return p;
}

/* client - - [time] "method target HTTP/1.x" status bytes "referer"
 * "agent" result origin-status ms */
static char *
alog_line_ats(char *p, const struct req *rq, const struct alog_txn *t, int64_t ms)
{
    p = alog_put_peer(p, rq);
    p = fmt_lit(p, " - - [");
    p = fmt_mem(p, alog_clock.ncsa, alog_clock.ncsa_len);
    p = fmt_lit(p, "] \"");
    p = fmt_str(p, t->method);
    *p++ = ' ';
    p = alog_put_esc(p, t->target, t->target_len, ALOG_TARGET_MAX);
    p = fmt_lit(p, " ");
    p = alog_put_ver(p, t, "HTTP/");
    p = fmt_lit(p, "\" ");
    p = fmt_i64(p, t->status);
    *p++ = ' ';
    p = fmt_u64(p, t->bytes);
    p = fmt_lit(p, " \"");
    if (t->referer_len)
        p = alog_put_esc(p, t->referer, t->referer_len, ALOG_FIELD_MAX);
    else
        *p++ = '-';
    p = fmt_lit(p, "\" \"");
    if (t->ua_len)
        p = alog_put_esc(p, t->ua, t->ua_len, ALOG_FIELD_MAX);
    else
        *p++ = '-';
    p = fmt_lit(p, "\" ");
    p = fmt_str(p, t->result);
    *p++ = ' ';
    if (t->ostatus)
        p = fmt_i64(p, t->ostatus);
    else
        *p++ = '-';
    *p++ = ' ';
    p = fmt_i64(p, ms);
    if (t->parent) {
        p = fmt_lit(p, " parent=");
        p = fmt_str(p, t->parent);
    }
    *p++ = '\n';
    return p;
}

/* ------------------------------------------------------------------ */
/* logging.yaml's formats: the ops conf/logging.c compiled, walked per
 * line.  The buffer keeps twice the format's longest line free (checked
 * once per line), so no op checks for room. */

/* The request time's local-time texts (ATS writes cqtn, cqtd and cqtt in
 * local time), made when the second changes. */
static struct {
    time_t  sec;
    char    ncsa[40], date[16], tod[16];
    size_t  ncsa_len, date_len, tod_len;
} alog_lclock = { .sec = -1 };

static void
alog_lclock_at(time_t sec)
{
    struct tm tm;
    long off;
    char *p;

    if (sec == alog_lclock.sec)
        return;
    localtime_r(&sec, &tm);
    off = tm.tm_gmtoff / 60;
    alog_lclock.ncsa_len = strftime(alog_lclock.ncsa, sizeof(alog_lclock.ncsa),
                                    "%d/%b/%Y:%H:%M:%S ", &tm);
    p = alog_lclock.ncsa + alog_lclock.ncsa_len;
    *p++ = off < 0 ? '-' : '+';
    if (off < 0)
        off = -off;
    p = fmt_pad(p, off / 60, 2, '0');
    p = fmt_pad(p, off % 60, 2, '0');
    alog_lclock.ncsa_len = (size_t)(p - alog_lclock.ncsa);
    alog_lclock.date_len = strftime(alog_lclock.date, sizeof(alog_lclock.date),
                                    "%Y-%m-%d", &tm);
    alog_lclock.tod_len = strftime(alog_lclock.tod, sizeof(alog_lclock.tod),
                                   "%H:%M:%S", &tm);
    alog_lclock.sec = sec;
}

static char *
alog_put_hex(char *p, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    int n = 0;

    do {
        tmp[n++] = hex[v & 0xf];
        v >>= 4;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* An address kept as family byte + bytes; "0" when none (ATS). */
static char *
alog_put_addr(char *p, const uint8_t a[17])
{
    char b[INET6_ADDRSTRLEN];

    if (a[0] == 0 || inet_ntop(a[0] == 4 ? AF_INET : AF_INET6, a + 1, b, sizeof(b)) == NULL) {
        *p++ = '0';
        return p;
    }
    return fmt_str(p, b);
}

/* A string value, escaped; "-" when empty (ATS's marshal_mem). */
static char *
alog_put_str(char *p, const char *s, size_t n, size_t max)
{
    if (n == 0) {
        *p++ = '-';
        return p;
    }
    return alog_put_esc(p, s, n, max);
}

static uint16_t
alog_addr_of(uint8_t out[17], const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        out[0] = 4;
        memcpy(out + 1, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
    }
    if (sa->sa_family == AF_INET6) {
        out[0] = 6;
        memcpy(out + 1, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
    }
    out[0] = 0;
    return 0;
}

/* The URL after remap (the client's target when there was no remap). */
static char *
alog_put_url(char *p, const struct alog_txn *t)
{
    if (t->murl_len)
        return alog_put_esc(p, t->murl, t->murl_len, ALOG_TARGET_MAX);
    return alog_put_str(p, t->target, t->target_len, ALOG_TARGET_MAX);
}

/* The path (and query) of the URL after remap. */
static char *
alog_put_path(char *p, const struct alog_txn *t)
{
    const char *u = t->murl_len ? t->murl : t->target;
    size_t n = t->murl_len ? t->murl_len : t->target_len;
    const char *s = memmem(u, n, "://", 3);

    if (s != NULL) {
        const char *slash = memchr(s + 3, '/', n - (size_t)(s + 3 - u));
        if (slash == NULL)
            return alog_put_str(p, "/", 1, 1);
        n -= (size_t)(slash - u);
        u = slash;
    }
    return alog_put_str(p, u, n, ALOG_TARGET_MAX);
}

struct alog_now {
    int64_t ms;
};

static uint64_t
alog_cl(const struct alog_txn *t)
{
    return t->oreq_body ? t->oreq_body : t->req_cl > 0 ? (uint64_t)t->req_cl : 0;
}

/* The helpers of alog_put_op: each writes one field of several steps.
 * They are static and used once, so the compiler keeps them inside
 * alog_put_op's switch (no call per field). */

/* Seconds and milliseconds: "1700000000.123". */
static char *
alog_put_secms(char *p, int64_t sec, int64_t ms)
{
    p = fmt_i64(p, sec);
    *p++ = '.';
    return fmt_pad(p, ms, 3, '0');
}

/* cqtn, cqtd, cqtt: a text of the request time in local time (text and
 * *len are alog_lclock's, made for sec first). */
static char *
alog_put_ltime(char *p, time_t sec, const char *text, const size_t *len)
{
    alog_lclock_at(sec);
    return fmt_mem(p, text, *len);
}

/* chih: the client's address in hex, two digits a byte; "0" when none. */
static char *
alog_put_peer_hex(char *p, const struct req *rq)
{
    uint8_t a[17];

    alog_addr_of(a, rq->rq_peer);
    if (a[0] == 0) {
        *p++ = '0';
        return p;
    }
    for (int i = 0; i < (a[0] == 4 ? 4 : 16); i++) {
        p = alog_put_hex(p, (uint64_t)(a[1 + i] >> 4));
        p = alog_put_hex(p, (uint64_t)(a[1 + i] & 0xf));
    }
    return p;
}

/* chp: the client's port. */
static char *
alog_put_peer_port(char *p, const struct req *rq)
{
    uint8_t a[17];

    return fmt_i64(p, alog_addr_of(a, rq->rq_peer));
}

/* cquuc: the client's URL before remap, made absolute from its Host. */
static char *
alog_put_client_url(char *p, const struct alog_txn *t)
{
    if (t->target_len && t->target[0] == '/' && t->uhost_len) {
        p = t->tls ? fmt_lit(p, "https://") : fmt_lit(p, "http://");
        p = alog_put_esc(p, t->uhost, t->uhost_len, ALOG_FIELD_MAX);
    }
    return alog_put_str(p, t->target, t->target_len, ALOG_TARGET_MAX);
}

/* cquup: the path (and query) of the client's URL before remap. */
static char *
alog_put_client_path(char *p, const struct alog_txn *t)
{
    struct alog_txn u = { 0 };

    /* (only target and murl_len are read: a path of the target) */
    memcpy(u.target, t->target, t->target_len);
    u.target_len = t->target_len;
    return alog_put_path(p, &u);
}

/* cqtx: the request line, "GET /x HTTP/1.1" (the URL after remap). */
static char *
alog_put_reqline(char *p, const struct alog_txn *t)
{
    p = fmt_str(p, t->method);
    *p++ = ' ';
    p = alog_put_url(p, t);
    p = fmt_lit(p, " ");
    return alog_put_ver(p, t, "HTTP/");
}

/* phr: how the answer was had (ATS's hierarchy route). */
static char *
alog_put_hier(char *p, const struct alog_txn *t)
{
    if (t->ostatus && t->parent)
        return fmt_lit(p, "PARENT_HIT");
    return t->ostatus ? fmt_lit(p, "DIRECT") : fmt_lit(p, "NONE");
}

/* pfsc: how the fetch from the origin ended. */
static char *
alog_put_fetch_end(char *p, const struct alog_txn *t)
{
    /* an answer of ours for a failed fetch: 504 timed out, 502 failed */
    if (t->ostatus == 0 && t->status == 504 && t->oreq_len)
        return fmt_lit(p, "TIMEOUT");
    if (t->ostatus == 0 && t->status == 502 && t->oreq_len)
        return fmt_lit(p, "INTR");
    return fmt_lit(p, "FIN");
}

/* {Name}cqh, psh, ssh: a named header's value, escaped; "-" when absent. */
static char *
alog_put_hdr(char *p, const struct alog_txn *t, unsigned hdr)
{
    if (t->hlen[hdr] == ALOG_HDR_NONE) {
        *p++ = '-';
        return p;
    }
    return alog_put_esc(p, t->harea + t->hoff[hdr], t->hlen[hdr], ALOG_FIELD_MAX);
}

static char *
alog_put_op(char *p, const struct conf_log_op *op, const struct conf_log_format *f,
            const struct req *rq, const struct alog_txn *t, const struct alog_now *now)
{
    switch ((enum conf_lf)op->kind) {
    case CONF_LF_LIT:
        return fmt_mem(p, f->lit + op->off, op->len);
    case CONF_LF_CQTS:
        return fmt_i64(p, t->start.tv_sec);
    case CONF_LF_CQTH:
        return alog_put_hex(p, (uint64_t)t->start.tv_sec);
    case CONF_LF_CQTQ:
        return alog_put_secms(p, t->start.tv_sec, t->start.tv_usec / 1000);
    case CONF_LF_CQTN:
        return alog_put_ltime(p, t->start.tv_sec, alog_lclock.ncsa, &alog_lclock.ncsa_len);
    case CONF_LF_CQTD:
        return alog_put_ltime(p, t->start.tv_sec, alog_lclock.date, &alog_lclock.date_len);
    case CONF_LF_CQTT:
        return alog_put_ltime(p, t->start.tv_sec, alog_lclock.tod, &alog_lclock.tod_len);
    case CONF_LF_TTMS:
        return fmt_i64(p, now->ms);
    case CONF_LF_TTMSH:
        return alog_put_hex(p, (uint64_t)now->ms);
    case CONF_LF_TTMSF:
        return alog_put_secms(p, now->ms / 1000, now->ms % 1000);
    case CONF_LF_TTS:
        return fmt_i64(p, now->ms / 1000);
    case CONF_LF_CHI:
        return alog_put_peer(p, rq);
    case CONF_LF_CHIH:
        return alog_put_peer_hex(p, rq);
    case CONF_LF_CHP:
        return alog_put_peer_port(p, rq);
    case CONF_LF_CAUN:
        return fmt_lit(p, "-");
    case CONF_LF_CQHM:
        return fmt_str(p, t->method);
    case CONF_LF_CQPV:
        return alog_put_ver(p, t, "http/");
    case CONF_LF_CQU:
    case CONF_LF_CQUC:
    case CONF_LF_CLUC:
        return alog_put_url(p, t);
    case CONF_LF_CQUP:
        return alog_put_path(p, t);
    case CONF_LF_CQUS:
        return t->tls ? fmt_lit(p, "https") : fmt_lit(p, "http");
    case CONF_LF_CQUUC:
        return alog_put_client_url(p, t);
    case CONF_LF_CQUUP:
        return alog_put_client_path(p, t);
    case CONF_LF_CQUUH:
        return alog_put_str(p, t->uhost, t->uhost_len, ALOG_FIELD_MAX);
    case CONF_LF_CQTX:
        return alog_put_reqline(p, t);
    case CONF_LF_CQHL:
        return fmt_u64(p, t->head_len);
    case CONF_LF_CQCL:
        return fmt_u64(p, alog_cl(t));
    case CONF_LF_CQQL:
        return fmt_u64(p, t->head_len + alog_cl(t));
    case CONF_LF_CQSSL:
        return t->tls ? fmt_lit(p, "1") : fmt_lit(p, "0");
    case CONF_LF_CFSC:
        return t->intr ? fmt_lit(p, "INTR") : fmt_lit(p, "FIN");
    case CONF_LF_CRC:
        return fmt_str(p, t->result);
    case CONF_LF_PSSC:
        return fmt_pad(p, t->status, 3, '0');
    case CONF_LF_PSQL:
        return fmt_u64(p, t->bytes);
    case CONF_LF_PSCL:
        return fmt_u64(p, t->bytes > t->rhead_len ? t->bytes - t->rhead_len : 0);
    case CONF_LF_PSHL:
        return fmt_u64(p, t->rhead_len);
    case CONF_LF_PSCT:
        return alog_put_str(p, t->ctype, t->ctype_len, ALOG_CTYPE_MAX);
    case CONF_LF_PRRP:
        return alog_put_str(p, t->phrase, t->phrase_len, sizeof(t->phrase));
    case CONF_LF_PHR:
        return alog_put_hier(p, t);
    case CONF_LF_PHN:
        return fmt_str(p, alog_custom->hostname);
    case CONF_LF_SSSC:
        return fmt_pad(p, t->ostatus, 3, '0');
    case CONF_LF_SSCL:
        return fmt_u64(p, t->obody);
    case CONF_LF_SSHL:
        return fmt_u64(p, t->ohead_len);
    case CONF_LF_SSQL:
        return fmt_u64(p, t->ohead_len + t->obody);
    case CONF_LF_SHN:
        return alog_put_str(p, t->ohost, t->ohost_len, ALOG_FIELD_MAX);
    case CONF_LF_SHI:
        return alog_put_addr(p, t->oaddr);
    case CONF_LF_PQHL:
        return fmt_u64(p, t->oreq_len);
    case CONF_LF_PQCL:
        return fmt_u64(p, t->oreq_len ? t->oreq_body : 0);
    case CONF_LF_PQQL:
        return fmt_u64(p, t->oreq_len ? t->oreq_len + t->oreq_body : 0);
    case CONF_LF_PQSI:
        return alog_put_addr(p, t->laddr);
    case CONF_LF_PFSC:
        return alog_put_fetch_end(p, t);
    case CONF_LF_CQH:
    case CONF_LF_PSH:
    case CONF_LF_SSH:
        return alog_put_hdr(p, t, op->hdr);
    case CONF_LF_N:
        break;
    }
    return p;
}

static int
alog_ci_contains(const char *h, size_t hn, const char *n)
{
    size_t nn = strlen(n);

    for (size_t i = 0; i + nn <= hn; i++)
        if (strncasecmp(h + i, n, nn) == 0)
            return 1;
    return 0;
}

/* Does t match filter fl's condition?  The field is written as in a line
 * (into scratch) and compared as ATS's filters compare: strings by
 * operator, numbers and addresses by value (any of the list). */
static int
alog_filter_match(const struct conf_log_filter *fl, const struct req *rq,
                  const struct alog_txn *t, const struct alog_now *now)
{
    char scratch[ALOG_TARGET_MAX * 2];
    char *e = alog_put_op(scratch, &fl->field, NULL, rq, t, now);
    size_t n = (size_t)(e - scratch);

    *e = '\0';
    for (int i = 0; i < fl->nvals; i++) {
        if (fl->type == CONF_LFT_INT) {
            int64_t v = strtoll(scratch, NULL, 10), w = fl->nums[i];
            switch (fl->oper) {
            case CONF_LOG_LT:  if (v < w) return 1; break;
            case CONF_LOG_LTE: if (v <= w) return 1; break;
            case CONF_LOG_GT:  if (v > w) return 1; break;
            case CONF_LOG_GTE: if (v >= w) return 1; break;
            default:           if (v == w) return 1; break;
            }
        } else if (fl->type == CONF_LFT_IP) {
            uint8_t a[17] = { 0 };
            int len;
            if (fl->field.kind == CONF_LF_CHI)
                alog_addr_of(a, rq->rq_peer);
            else
                memcpy(a, fl->field.kind == CONF_LF_SHI ? t->oaddr : t->laddr, 17);
            len = a[0] == 4 ? 4 : 16;
            if (a[0] != 0 && a[0] == fl->ips[i][0][0]
                && memcmp(a + 1, fl->ips[i][0] + 1, (size_t)len) >= 0
                && memcmp(a + 1, fl->ips[i][1] + 1, (size_t)len) <= 0)
                return 1;
        } else {
            const char *v = fl->vals[i];
            switch (fl->oper) {
            case CONF_LOG_CASE_INSENSITIVE_MATCH:
                if (strlen(v) == n && strncasecmp(scratch, v, n) == 0) return 1;
                break;
            case CONF_LOG_CONTAIN:
                if (memmem(scratch, n, v, strlen(v)) != NULL) return 1;
                break;
            case CONF_LOG_CASE_INSENSITIVE_CONTAIN:
                if (alog_ci_contains(scratch, n, v)) return 1;
                break;
            default:
                if (strlen(v) == n && memcmp(scratch, v, n) == 0) return 1;
                break;
            }
        }
    }
    return 0;
}

static void
alog_write_custom(struct req *rq, const struct alog_txn *t, const struct alog_now *now)
{
    const struct conf_logging *lg = alog_custom;

    for (int i = 0; i < alog_nouts; i++) {
        struct alog_out *o = &alog_outs[i];
        const struct conf_log_file *lf = o->lf;
        const struct conf_log_format *f = &lg->formats[lf->fmt];
        int keep = 1;
        char *p;

        if (o->buf == NULL || o->fd < 0)
            continue;
        for (int k = 0; k < lf->nfilters && keep; k++) {
            const struct conf_log_filter *fl = &lg->filters[lf->filters[k]];
            int m = alog_filter_match(fl, rq, t, now);
            keep = fl->action == CONF_LOG_ACCEPT ? m : !m;
        }
        if (!keep)
            continue;
        if (ALOG_BUF - o->len < 2 * f->max_line) {
            alog_flush_out(o->fd, o->buf, &o->len);
            if (ALOG_BUF - o->len < 2 * f->max_line) {
                wk->ctr->log_dropped++;
                continue;
            }
        }
        p = o->buf + o->len;
        for (int k = 0; k < f->nops; k++)
            p = alog_put_op(p, &f->ops[k], f, rq, t, now);
        *p++ = '\n';
        o->len = (size_t)(p - o->buf);
        wk->ctr->log_lines++;
        if (o->len >= ALOG_FLUSH_AT)
            alog_flush_out(o->fd, o->buf, &o->len);
    }
}

/* ------------------------------------------------------------------ */
/* What the rest of the worker tells the record, for those formats */

void
alog_mapped_(struct req *rq, const struct conf_remap_result *res)
{
    struct alog_txn *t;
    char *p, *end;
    int def;

    if (rq == NULL || !rq->log.active)
        return;
    t = &rq->log;
    p = t->murl;
    end = t->murl + sizeof(t->murl);
    def = strcmp(res->scheme, "https") == 0 ? 443 : 80;
    /* scheme://host[:port]path, cut at the record's room (the scheme,
     * host and port fit: 8 + 3 + 255 + 6 < sizeof(t->murl)) */
    p = fmt_str(p, res->scheme);
    p = fmt_lit(p, "://");
    p = fmt_str(p, res->host);
    if (res->port != def) {
        *p++ = ':';
        p = fmt_i64(p, res->port);
    }
    size_t pl = res->pathlen < (size_t)(end - p) ? res->pathlen : (size_t)(end - p);
    p = fmt_mem(p, res->path, pl);
    t->murl_len = (uint16_t)(p - t->murl);
}

void
alog_head_(struct req *rq, const char *head, size_t len)
{
    struct alog_txn *t;
    const char *p, *end = head + len, *eol;
    const struct conf_logging *lg = alog_custom;

    if (lg == NULL || rq == NULL || !rq->log.active)
        return;
    t = &rq->log;
    t->rhead_len = (uint32_t)len;
    if (!(alog_need & CONF_LOGN_RESP))
        return;
    /* "HTTP/1.1 200 OK\r\n": the phrase after the status */
    eol = memchr(head, '\n', len);
    if (eol == NULL)
        return;
    p = memchr(head, ' ', (size_t)(eol - head));
    if (p != NULL && (p = memchr(p + 1, ' ', (size_t)(eol - p - 1))) != NULL) {
        size_t n = (size_t)(eol - p - 1);
        if (n && p[n] == '\r')
            n--;
        if (n > 0 && p[n] == '\r')
            n--;
        t->phrase_len = alog_keep(t->phrase, sizeof(t->phrase), p + 1, n);
        while (t->phrase_len && (t->phrase[t->phrase_len - 1] == '\r'))
            t->phrase_len--;
    }
    for (int i = 0; i < lg->nhdrs; i++)
        if (lg->hdr_kind[i] == CONF_LF_PSH)
            t->hlen[i] = ALOG_HDR_NONE;
    for (p = eol + 1; p < end; p = eol + 1) {
        const char *colon, *v;
        size_t nl, vl;

        eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL || eol - p <= 1)
            break;
        colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL)
            continue;
        nl = (size_t)(colon - p);
        v = colon + 1;
        while (v < eol && (*v == ' ' || *v == '\t'))
            v++;
        vl = (size_t)(eol - v);
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        if (nl == 12 && strncasecmp(p, "content-type", 12) == 0) {
            /* without its parameters, as ATS logs it */
            const char *semi = memchr(v, ';', vl);
            size_t cl = semi ? (size_t)(semi - v) : vl;
            while (cl && (v[cl - 1] == ' ' || v[cl - 1] == '\t'))
                cl--;
            t->ctype_len = alog_keep(t->ctype, sizeof(t->ctype), v, cl);
        }
        for (int i = 0; i < lg->nhdrs; i++) {
            size_t hl = strlen(lg->hdrs[i]);
            size_t room = sizeof(t->harea) - t->hused;
            if (lg->hdr_kind[i] != CONF_LF_PSH || hl != nl
                || strncasecmp(lg->hdrs[i], p, nl) != 0)
                continue;
            if (t->hlen[i] == ALOG_HDR_NONE) {
                if (vl > ALOG_FIELD_MAX)
                    vl = ALOG_FIELD_MAX;
                if (vl > room)
                    vl = room;
                t->hoff[i] = t->hused;
                memcpy(t->harea + t->hused, v, vl);
                t->hlen[i] = (uint16_t)vl;
                t->hused += (uint16_t)vl;
            } else if ((size_t)t->hoff[i] + t->hlen[i] == t->hused && room >= 2
                       && t->hlen[i] + 2 < ALOG_FIELD_MAX) {
                /* a repeated header, joined with ", " (when it is the
                 * last capture, which it is while one head is read) */
                size_t add = vl + 2;
                if (add > room)
                    add = room;
                if (t->hlen[i] + add > ALOG_FIELD_MAX)
                    add = ALOG_FIELD_MAX - t->hlen[i];
                memcpy(t->harea + t->hused, ", ", 2);
                memcpy(t->harea + t->hused + 2, v, add - 2);
                t->hlen[i] += (uint16_t)add;
                t->hused += (uint16_t)add;
            }
        }
    }
}

void
alog_origin_(struct req *rq, const struct upstream *up)
{
    struct alog_txn *t;
    const struct conf_logging *lg = alog_custom;

    if (!(alog_need & CONF_LOGN_ORIGIN) || rq == NULL || !rq->log.active)
        return;
    t = &rq->log;
    if (up->up_resp)
        t->ohead_len = up->up_resp->head_len;
    t->ohost_len = alog_keep(t->ohost, sizeof(t->ohost), up->up_host, strlen(up->up_host));
    if (up->up_addrlen)
        alog_addr_of(t->oaddr, (const struct sockaddr *)&up->up_addr);
    if ((alog_need & CONF_LOGN_LOCAL) && up->up_fd >= 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(up->up_fd, (struct sockaddr *)&ss, &sl) == 0)
            alog_addr_of(t->laddr, (const struct sockaddr *)&ss);
    }
    if ((alog_need & CONF_LOGN_SSH) && up->up_resp) {
        const struct http_req *r = up->up_resp;
        for (int i = 0; i < lg->nhdrs; i++)
            if (lg->hdr_kind[i] == CONF_LF_SSH)
                alog_capture(t, i, lg->hdrs[i], r->base, r->fields, r->nfields);
    }
}

void
alog_oreq_(struct req *rq, size_t head, size_t body)
{
    if (alog_custom && rq && rq->log.active) {
        if (head)
            rq->log.oreq_len = (uint32_t)head;
        rq->log.oreq_body += body;
    }
}

void
alog_obody_(struct req *rq, uint64_t n)
{
    if (alog_custom && rq && rq->log.active)
        rq->log.obody += n;
}

void
alog_intr(struct req *rq)
{
    if (rq && rq->log.active)
        rq->log.intr = 1;
}

static void
alog_write(struct req *rq, const struct alog_txn *t)
{
    struct timeval now;
    int64_t ms;
    int msec;
    char *p;

    if (alog_custom) {
        struct alog_now an;
        event_base_gettimeofday_cached(wk->base, &now);
        an.ms = ((int64_t)now.tv_sec - t->start.tv_sec) * 1000
                + ((int64_t)now.tv_usec - t->start.tv_usec) / 1000;
        if (an.ms < 0)
            an.ms = 0;
        alog_write_custom(rq, t, &an);
        return;
    }
    if (ALOG_BUF - alog_len < ALOG_LINE_MAX) {
        alog_flush();
        if (ALOG_BUF - alog_len < ALOG_LINE_MAX) {
            wk->ctr->log_dropped++;
            return;
        }
    }
    event_base_gettimeofday_cached(wk->base, &now);
    alog_clock_at(now.tv_sec);
    msec = (int)(now.tv_usec / 1000);
    ms = ((int64_t)now.tv_sec - t->start.tv_sec) * 1000
         + ((int64_t)now.tv_usec - t->start.tv_usec) / 1000;
    if (ms < 0)
        ms = 0;

    p = alog_buf + alog_len;
    switch (alog_fmt_id) {
    case ALOG_SQUID:
        p = alog_line_squid(p, rq, t, ms, msec);
        break;
    case ALOG_JSON:
        p = alog_line_json(p, rq, t, ms, msec);
        break;
    default:
        p = alog_line_ats(p, rq, t, ms);
        break;
    }
    alog_len = (size_t)(p - alog_buf);
    wk->ctr->log_lines++;
    if (alog_len >= ALOG_FLUSH_AT)
        alog_flush();
}

void
alog_end(struct req *rq)
{
    struct alog_txn *t;

    if (rq == NULL || !rq->log.active)
        return;
    t = &rq->log;
    t->active = 0;
    alog_write(rq, t);
}

void
alog_refused(struct req *rq, int status, uint64_t bytes)
{
    struct alog_txn t;

    if (!alog_on)
        return;
    if (rq && rq->log.active) {
        rq->log.status = status;
        rq->log.result = "ERR_INVALID_REQ";
        alog_end(rq);
        return;
    }
    /* Not understood: no method, no target, no fields. */
    t.start = rq->rq_start;
    t.method = "-";
    t.result = "ERR_INVALID_REQ";
    t.minor = 1;
    t.h2 = rq->rq_h2;
    t.status = status;
    t.ostatus = 0;
    t.bytes = bytes;
    t.parent = NULL;
    t.target[0] = '-';
    t.target_len = 1;
    t.referer_len = t.ua_len = 0;
    if (alog_custom) {
        memset(&t.head_len, 0, sizeof(t) - offsetof(struct alog_txn, head_len));
        t.req_cl = -1;
        t.tls = rq->rq_tls;
        for (int i = 0; i < ALOG_HDRS; i++)
            t.hlen[i] = ALOG_HDR_NONE;
    }
    alog_write(rq, &t);
}
