/*
 * worker/pp.c: parsing the PROXY protocol header (see pp.h).
 *
 * Both versions are checked as far as the bytes go, so a connection that
 * does not start with a PROXY header is refused at its first bytes rather
 * than when a timer runs out: v1 must begin "PROXY " and stay printable
 * ASCII, v2 must match its 12-byte signature, version, command and family
 * byte by byte.  The one promise the caller relies on is PP_AGAIN's: all
 * bytes seen so far belong to the header (v1: no LF yet; v2: fewer than
 * 16 + length), so consuming them never eats what follows it.
 */
#include "config.h"

#include <arpa/inet.h>
#include <string.h>

#include "worker/pp.h"

static const uint8_t pp_v2_sig[12] = {
    0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a
};

static int
pp_bad(struct pp_result *res, const char *why)
{
    res->why = why;
    return PP_BAD;
}

/* A decimal port: 1 to 5 digits, at most 65535. */
static int
pp_v1_port(const char *s, uint16_t *out)
{
    unsigned long v = 0;
    size_t i;

    for (i = 0; s[i] != '\0'; i++) {
        if (s[i] < '0' || s[i] > '9' || i == 5)
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (i == 0 || v > 65535)
        return -1;
    *out = (uint16_t)v;
    return 0;
}

/* The v1 line between "PROXY " and CRLF, NUL-terminated in line. */
static int
pp_v1_fields(char *line, struct pp_result *res)
{
    char *f[6];
    int nf = 0, fam;
    uint16_t sport, dport;

    f[nf++] = line;
    for (char *q = line; *q != '\0'; q++) {
        if (*q != ' ')
            continue;
        *q = '\0';
        if (nf == 6)
            return pp_bad(res, "v1: too many fields");
        f[nf++] = q + 1;
    }
    if (strcmp(f[0], "UNKNOWN") == 0) {
        res->local = 1;         /* whatever follows is ignored (the spec) */
        return PP_DONE;
    }
    if (strcmp(f[0], "TCP4") == 0)
        fam = AF_INET;
    else if (strcmp(f[0], "TCP6") == 0)
        fam = AF_INET6;
    else
        return pp_bad(res, "v1: protocol is not TCP4, TCP6 or UNKNOWN");
    if (nf != 5)
        return pp_bad(res, "v1: expected source, destination and two ports");
    if (pp_v1_port(f[3], &sport) < 0 || pp_v1_port(f[4], &dport) < 0)
        return pp_bad(res, "v1: bad port");
    if (fam == AF_INET) {
        res->src.in.sin_family = res->dst.in.sin_family = AF_INET;
        if (inet_pton(AF_INET, f[1], &res->src.in.sin_addr) != 1
            || inet_pton(AF_INET, f[2], &res->dst.in.sin_addr) != 1)
            return pp_bad(res, "v1: bad IPv4 address");
        res->src.in.sin_port = htons(sport);
        res->dst.in.sin_port = htons(dport);
    } else {
        res->src.in6.sin6_family = res->dst.in6.sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, f[1], &res->src.in6.sin6_addr) != 1
            || inet_pton(AF_INET6, f[2], &res->dst.in6.sin6_addr) != 1)
            return pp_bad(res, "v1: bad IPv6 address");
        res->src.in6.sin6_port = htons(sport);
        res->dst.in6.sin6_port = htons(dport);
    }
    return PP_DONE;
}

static int
pp_v1(const uint8_t *p, size_t n, struct pp_result *res)
{
    static const char pre[] = "PROXY ";
    char line[PP_V1_MAX + 1];
    size_t i, lim = n < PP_V1_MAX ? n : PP_V1_MAX;

    res->version = 1;
    for (i = 0; i < lim; i++) {
        if (i < sizeof(pre) - 1) {
            if (p[i] != (uint8_t)pre[i])
                return pp_bad(res, "v1: does not start with \"PROXY \"");
            continue;
        }
        if (p[i] == '\n')
            break;
        if (p[i] == '\r' && (i + 1 == n || p[i + 1] == '\n'))
            continue;
        if (p[i] < 0x20 || p[i] > 0x7e)
            return pp_bad(res, "v1: a byte that is not printable ASCII");
    }
    if (i == lim)
        return n >= PP_V1_MAX ? pp_bad(res, "v1: line longer than 107 bytes")
                              : PP_AGAIN;
    /* p[i] is the LF; CR before it, and the fields between */
    if (i < sizeof(pre) || p[i - 1] != '\r')
        return pp_bad(res, "v1: line does not end in CRLF");
    memcpy(line, p + sizeof(pre) - 1, i - 1 - (sizeof(pre) - 1));
    line[i - 1 - (sizeof(pre) - 1)] = '\0';
    res->len = i + 1;
    return pp_v1_fields(line, res);
}

static int
pp_v2(const uint8_t *p, size_t n, struct pp_result *res)
{
    size_t i, len;
    unsigned cmd, fam, proto;

    res->version = 2;
    for (i = 0; i < n && i < sizeof(pp_v2_sig); i++)
        if (p[i] != pp_v2_sig[i])
            return pp_bad(res, "v2: bad signature");
    if (n > 12 && ((p[12] >> 4) != 2 || (p[12] & 0xf) > 1))
        return pp_bad(res, "v2: bad version or command");
    if (n > 13 && ((p[13] >> 4) > 3 || (p[13] & 0xf) > 2))
        return pp_bad(res, "v2: bad address family or protocol");
    if (n < PP_V2_FIXED)
        return PP_AGAIN;
    len = (size_t)p[14] << 8 | p[15];
    if (len > PP_V2_MAX_LEN)
        return pp_bad(res, "v2: header longer than Cistern takes");
    if (n < PP_V2_FIXED + len)
        return PP_AGAIN;
    res->len = PP_V2_FIXED + len;
    cmd = p[12] & 0xf;
    fam = p[13] >> 4;
    proto = p[13] & 0xf;
    p += PP_V2_FIXED;
    if (cmd == 0 || fam == 0 || fam == 3 || proto == 0) {
        /* LOCAL (the balancer's own health check), or no IP address to
         * take: the spec says use the real endpoints */
        res->local = 1;
        return PP_DONE;
    }
    if (proto != 1)
        return pp_bad(res, "v2: not TCP (UDP over a TCP connection)");
    if (fam == 1) {
        if (len < 12)
            return pp_bad(res, "v2: IPv4 addresses cut short");
        res->src.in.sin_family = res->dst.in.sin_family = AF_INET;
        memcpy(&res->src.in.sin_addr, p, 4);
        memcpy(&res->dst.in.sin_addr, p + 4, 4);
        memcpy(&res->src.in.sin_port, p + 8, 2);
        memcpy(&res->dst.in.sin_port, p + 10, 2);
    } else {
        if (len < 36)
            return pp_bad(res, "v2: IPv6 addresses cut short");
        res->src.in6.sin6_family = res->dst.in6.sin6_family = AF_INET6;
        memcpy(&res->src.in6.sin6_addr, p, 16);
        memcpy(&res->dst.in6.sin6_addr, p + 16, 16);
        memcpy(&res->src.in6.sin6_port, p + 32, 2);
        memcpy(&res->dst.in6.sin6_port, p + 34, 2);
    }
    return PP_DONE;     /* TLVs (the rest of len) skipped */
}

int
pp_parse(const uint8_t *p, size_t n, struct pp_result *res)
{
    memset(res, 0, sizeof(*res));
    if (n == 0)
        return PP_AGAIN;
    if (p[0] == 'P')
        return pp_v1(p, n, res);
    if (p[0] == pp_v2_sig[0])
        return pp_v2(p, n, res);
    return pp_bad(res, "no PROXY protocol header");
}
