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
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
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

int
alog_open(void)
{
    char path[4096];
    int fd;

    if (wk->conf->rec.logging_enabled < 2)
        return 0;
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
    return 0;
}

void
alog_flush(void)
{
    size_t off = 0;

    while (alog_fd >= 0 && off < alog_len) {
        ssize_t n = write(alog_fd, alog_buf + off, alog_len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;      /* keep the rest; new lines are dropped if it fills */
        }
        off += (size_t)n;
    }
    memmove(alog_buf, alog_buf + off, alog_len - off);
    alog_len -= off;
}

void
alog_close(void)
{
    alog_flush();
    if (alog_fd >= 0)
        close(alog_fd);
    alog_fd = -1;
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

void
alog_begin(struct req *rq)
{
    struct alog_txn *t;
    struct http_req *r;
    int ref = 0, ua = 0;

    if (alog_fd < 0 || rq == NULL)
        return;
    t = &rq->log;
    r = &rq->r;
    t->parent = NULL;
    event_base_gettimeofday_cached(wk->base, &t->start);
    t->method = http_method_name(r->method);
    t->target_len = alog_keep(t->target, sizeof(t->target), r->base + r->target,
                              r->target_len);
    t->minor = r->minor;
    t->referer_len = t->ua_len = 0;
    /* The first Referer and User-Agent, in one pass over the fields. */
    for (int i = 0; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];

        if (f->name_len == 7 && !ref
            && strncasecmp(r->base + f->name, "referer", 7) == 0) {
            t->referer_len = alog_keep(t->referer, sizeof(t->referer),
                                       r->base + f->value, f->value_len);
            ref = 1;
        } else if (f->name_len == 10 && !ua
                   && strncasecmp(r->base + f->name, "user-agent", 10) == 0) {
            t->ua_len = alog_keep(t->ua, sizeof(t->ua), r->base + f->value,
                                  f->value_len);
            ua = 1;
        }
    }
    t->status = 0;
    t->ostatus = 0;
    t->bytes = 0;
    t->result = "NONE";
    t->active = 1;
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
    p = fmt_lit(p, "\",\"version\":\"HTTP/1.");
    p = fmt_i64(p, t->minor);
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
    p = fmt_lit(p, " HTTP/1.");
    p = fmt_i64(p, t->minor);
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

static void
alog_write(struct req *rq, const struct alog_txn *t)
{
    struct timeval now;
    int64_t ms;
    int msec;
    char *p;

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

    if (alog_fd < 0)
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
    t.status = status;
    t.ostatus = 0;
    t.bytes = bytes;
    t.parent = NULL;
    t.target[0] = '-';
    t.target_len = 1;
    t.referer_len = t.ua_len = 0;
    alog_write(rq, &t);
}
