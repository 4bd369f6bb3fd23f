/*
 * worker/buf.c: buffers, the free-list pool and formatting (see buf.h).
 *
 * A leaf of worker/: nothing here calls into another file of the worker,
 * so everything above may use it and it can be tested on its own.
 */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <netinet/in.h>

#include "worker/buf.h"

/* ------------------------------------------------------------------ */
/* The pool */

void
pool_init(struct pool *p, size_t size)
{
    p->size = size < sizeof(void *) ? sizeof(void *) : size;
    p->max_idle = UINT_MAX;
    p->nidle = 0;
    p->free = NULL;
}

void
pool_drain(struct pool *p)
{
    while (p->free != NULL) {
        void *o = p->free;
        p->free = *(void **)o;
        free(o);
    }
    p->nidle = 0;
}

/* ------------------------------------------------------------------ */
/* Buffers: BUF_SIZE blocks recycled within the process, so steady-state
 * traffic never calls malloc. */

static struct pool buf_blocks = { BUF_SIZE, BUF_IDLE_MAX, 0, NULL };

int
buf_alloc(struct buf *b)
{
    if (b->data)
        return 0;
    b->data = pool_get(&buf_blocks);
    if (b->data == NULL)
        return -1;
    b->size = BUF_SIZE;
    b->start = b->end = 0;
    b->pooled = 1;
    return 0;
}

void
buf_release(struct buf *b)
{
    if (b->data == NULL)
        return;
    if (b->pooled)
        pool_put(&buf_blocks, b->data);
    else
        free(b->data);
    b->data = NULL;
    b->size = b->start = b->end = 0;
    b->pooled = 0;
}

int
buf_grow(struct buf *b, size_t need)
{
    if (b->start > 0 && b->size - b->end < need) {
        memmove(b->data, b->data + b->start, b->end - b->start);
        b->end -= b->start;
        b->start = 0;
    }
    if (b->size - b->end >= need)
        return 0;
    size_t nsize = b->size;
    while (nsize - b->end < need)
        nsize *= 2;
    char *n = malloc(nsize);
    if (n == NULL)
        return -1;
    size_t start = b->start, end = b->end;
    memcpy(n, b->data, end);
    buf_release(b);     /* resets the offsets: restore them */
    b->data = n;
    b->size = nsize;
    b->start = start;
    b->end = end;
    b->pooled = 0;
    return 0;
}

void
buf_pool_drain(void)
{
    pool_drain(&buf_blocks);
}

int
buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (int tries = 0; tries < 2; tries++) {
        va_start(ap, fmt);
        n = vsnprintf(b->data + b->end, b->size - b->end, fmt, ap);
        va_end(ap);
        if (n < 0)
            return -1;
        if ((size_t)n < b->size - b->end) {
            b->end += (size_t)n;
            return 0;
        }
        if (buf_grow(b, (size_t)n + 1) < 0)
            return -1;
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* Formatting */

/* "00" to "99": integers are written two digits at a time. */
static const char fmt_pairs[200] =
    "00010203040506070809" "10111213141516171819" "20212223242526272829"
    "30313233343536373839" "40414243444546474849" "50515253545556575859"
    "60616263646566676869" "70717273747576777879" "80818283848586878889"
    "90919293949596979899";

char *
fmt_u64(char *p, uint64_t v)
{
    char *end;

    /* the common small ones (statuses, lengths, ages, ports) first */
    if (v < 10) {
        *p = (char)('0' + v);
        return p + 1;
    }
    if (v < 100) {
        memcpy(p, fmt_pairs + v * 2, 2);
        return p + 2;
    }
    /* the number of digits by comparison, not by dividing */
    unsigned n = 3;
    for (uint64_t t = 1000; n < 20 && v >= t; t *= 10)
        n++;
    end = p + n;
    p = end;
    for (; v >= 100; v /= 100) {
        p -= 2;
        memcpy(p, fmt_pairs + v % 100 * 2, 2);
    }
    if (v >= 10)
        memcpy(p - 2, fmt_pairs + v * 2, 2);
    else
        p[-1] = (char)('0' + v);
    return end;
}

char *
fmt_i64(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return fmt_u64(p, (uint64_t)0 - (uint64_t)v);
    }
    return fmt_u64(p, (uint64_t)v);
}

char *
fmt_pad(char *p, int64_t v, int width, char pad)
{
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int n = 1 + (v < 0);

    for (uint64_t x = u; x >= 10; x /= 10)
        n++;
    if (v < 0 && pad == '0')
        *p++ = '-';
    for (; n < width; n++)
        *p++ = pad;
    if (v < 0 && pad != '0')
        *p++ = '-';
    return fmt_u64(p, u);
}

void
fmt_http_date(time_t t, char out[32])
{
    static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char mons[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    struct tm tm;

    gmtime_r(&t, &tm);
    snprintf(out, 32, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
             tm.tm_mday, mons[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
             tm.tm_min, tm.tm_sec);
}

void
fmt_peer(const struct sockaddr *sa, char *out, size_t len)
{
    /* IPv4 by hand: glibc's inet_ntop formats through sprintf, which cost
     * as much as the rest of a forwarded request head (callgrind), and
     * this runs for every X-Forwarded-For.  IPv6 is left to inet_ntop
     * (RFC 5952's zero-run rules are not worth a second copy). */
    if (sa->sa_family == AF_INET && len >= INET_ADDRSTRLEN) {
        const unsigned char *a =
            (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        char *p = out;
        for (int i = 0; i < 4; i++) {
            if (i)
                *p++ = '.';
            p = fmt_u64(p, a[i]);
        }
        *p = '\0';
        return;
    }
    if (len > 1)
        memcpy(out, "?", 2);
    if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
                  out, (socklen_t)len);
}

const char *
fmt_peer_text(const struct sockaddr *sa, size_t *len)
{
    static sa_family_t last_af;         /* 0: none yet */
    static uint8_t last_addr[16];
    static char last_str[64];
    static size_t last_len;
    sa_family_t af = sa->sa_family;
    int same;

    /* (constant sizes: the compares and copies are a load or two) */
    if (af == AF_INET) {
        const void *a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        same = af == last_af && memcmp(a, last_addr, 4) == 0;
        if (!same)
            memcpy(last_addr, a, 4);
    } else if (af == AF_INET6) {
        const void *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        same = af == last_af && memcmp(a, last_addr, 16) == 0;
        if (!same)
            memcpy(last_addr, a, 16);
    } else {
        static char other[64];
        fmt_peer(sa, other, sizeof(other));
        *len = strlen(other);
        return other;
    }
    if (!same) {
        fmt_peer(sa, last_str, sizeof(last_str));
        last_len = strlen(last_str);
        last_af = af;
    }
    *len = last_len;
    return last_str;
}

/* ------------------------------------------------------------------ */
/* Sockets */

int
sock_unsent(int fd)
{
    int n;

    return fd >= 0 && ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
}
