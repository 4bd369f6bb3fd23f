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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "master/log.h"
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

/* Append a formatted line, or count it dropped. */
static void
alog_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
alog_line(const char *fmt, ...)
{
    va_list ap;
    int n;

    if (alog_len > ALOG_BUF - 4096)
        alog_flush();
    va_start(ap, fmt);
    n = vsnprintf(alog_buf + alog_len, ALOG_BUF - alog_len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= ALOG_BUF - alog_len) {
        wk->ctr->log_dropped++;
        return;
    }
    alog_len += (size_t)n;
    wk->ctr->log_lines++;
    if (alog_len >= ALOG_FLUSH_AT)
        alog_flush();
}

/* Copy a field for a quoted log value: quotes, backslashes and control
 * bytes escaped as \xHH, so a client cannot forge log lines. */
static void
alog_escape(char *out, size_t outlen, const char *p, size_t n)
{
    size_t o = 0;

    for (size_t i = 0; i < n && o + 5 < outlen; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') {
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", ch);
        } else {
            out[o++] = (char)ch;
        }
    }
    out[o] = '\0';
}

void
alog_begin(struct conn *c)
{
    struct alog_txn *t;
    struct http_req *r;
    int i;

    if (alog_fd < 0 || c->cn_req == NULL)
        return;
    t = &c->cn_req->log;
    r = &c->cn_req->r;
    event_base_gettimeofday_cached(wk->base, &t->start);
    t->method = http_method_name(r->method);
    alog_escape(t->target, sizeof(t->target), r->base + r->target, r->target_len);
    t->minor = r->minor;
    t->referer[0] = t->ua[0] = '\0';
    if ((i = http_field_find(r, "referer", 0)) >= 0)
        alog_escape(t->referer, sizeof(t->referer), r->base + r->fields[i].value,
                    r->fields[i].value_len);
    if ((i = http_field_find(r, "user-agent", 0)) >= 0)
        alog_escape(t->ua, sizeof(t->ua), r->base + r->fields[i].value,
                    r->fields[i].value_len);
    t->status = 0;
    t->ostatus = 0;
    t->bytes = 0;
    t->result = "NONE";
    t->active = 1;
}

void
alog_result(struct conn *c, const char *result, int ostatus)
{
    if (c->cn_req && c->cn_req->log.active) {
        c->cn_req->log.result = result;
        if (ostatus)
            c->cn_req->log.ostatus = ostatus;
    }
}

void
alog_bytes(struct conn *c, uint64_t n)
{
    if (c->cn_req && c->cn_req->log.active)
        c->cn_req->log.bytes += n;
}

void
alog_status(struct conn *c, int status)
{
    if (c->cn_req && c->cn_req->log.active)
        c->cn_req->log.status = status;
}

static void
alog_write(struct conn *c, const char *method, const char *target, int minor,
           int status, uint64_t bytes, const char *referer, const char *ua,
           const char *result, int ostatus, const struct timeval *start)
{
    static time_t last;
    static char ncsa[40], iso[32];
    struct timeval now;
    char peer[64], os[8];
    long long ms;

    event_base_gettimeofday_cached(wk->base, &now);
    if (now.tv_sec != last) {
        struct tm tm;
        gmtime_r(&now.tv_sec, &tm);
        strftime(ncsa, sizeof(ncsa), "%d/%b/%Y:%H:%M:%S +0000", &tm);
        strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%S", &tm);
        last = now.tv_sec;
    }
    ms = ((long long)now.tv_sec - start->tv_sec) * 1000
         + ((long long)now.tv_usec - start->tv_usec) / 1000;
    if (ms < 0)
        ms = 0;
    conn_peer_str(c, peer, sizeof(peer));
    if (ostatus)
        snprintf(os, sizeof(os), "%d", ostatus);
    else
        snprintf(os, sizeof(os), "-");

    switch (alog_fmt_id) {
    case ALOG_SQUID:
        alog_line("%lld.%03d %6lld %s %s/%03d %llu %s %s - %s/%s -\n",
                  (long long)now.tv_sec, (int)(now.tv_usec / 1000), ms, peer,
                  result, status, (unsigned long long)bytes, method, target,
                  ostatus ? "DIRECT" : "NONE", os);
        break;
    case ALOG_JSON:
        alog_line("{\"time\":\"%s.%03dZ\",\"client\":\"%s\",\"method\":\"%s\","
                  "\"url\":\"%s\",\"version\":\"HTTP/1.%d\",\"status\":%d,"
                  "\"bytes\":%llu,\"referer\":\"%s\",\"user_agent\":\"%s\","
                  "\"cache\":\"%s\",\"origin_status\":%s,\"ms\":%lld}\n",
                  iso, (int)(now.tv_usec / 1000), peer, method, target, minor,
                  status, (unsigned long long)bytes, referer, ua, result,
                  ostatus ? os : "null", ms);
        break;
    default:
        alog_line("%s - - [%s] \"%s %s HTTP/1.%d\" %d %llu \"%s\" \"%s\" %s %s %lld\n",
                  peer, ncsa, method, target, minor, status,
                  (unsigned long long)bytes, referer[0] ? referer : "-",
                  ua[0] ? ua : "-", result, os, ms);
        break;
    }
}

void
alog_end(struct conn *c)
{
    struct alog_txn *t;

    if (c->cn_req == NULL || !c->cn_req->log.active)
        return;
    t = &c->cn_req->log;
    t->active = 0;
    alog_write(c, t->method, t->target, t->minor, t->status, t->bytes,
               t->referer, t->ua, t->result, t->ostatus, &t->start);
}

void
alog_refused(struct conn *c, int status, uint64_t bytes)
{
    if (alog_fd < 0)
        return;
    if (c->cn_req && c->cn_req->log.active) {
        c->cn_req->log.status = status;
        c->cn_req->log.result = "ERR_INVALID_REQ";
        alog_end(c);
        return;
    }
    alog_write(c, "-", "-", 1, status, bytes, "", "", "ERR_INVALID_REQ", 0,
               &c->cn_head_start);
}
