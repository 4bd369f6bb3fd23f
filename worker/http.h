/*
 * worker/http.h: the strict HTTP/1.x request front end.
 *
 * A request head is handled in two passes over the connection's input
 * buffer, both resumable across reads:
 *
 *  1. http_head_scan() finds the end of the head line by line, enforcing
 *     the size limits (414 for the request line, 431 for the section) and
 *     the RFC 9112 rules http-parser is lenient about: obs-fold, whitespace
 *     before the colon, bare CR, control bytes.  It never looks at a byte
 *     twice, so a head dripped one byte per read costs O(n).
 *  2. http_req_parse() runs http-parser over exactly the complete head,
 *     records every field as offsets into the buffer (the buffer may move
 *     when it grows), then applies the semantic checks: Host, Content-Length
 *     vs Transfer-Encoding, transfer codings, version, target form.
 *
 * The body, if any, is then fed through http_req_body(): a strict framing
 * decoder of our own (Content-Length, chunked, read-until-close) that stops
 * exactly at the end of the message: bytes after it belong to the next
 * pipelined request.  Not http-parser's: Debian builds it non-strict, and
 * it then takes any two bytes after chunk data for the CRLF, which lets a
 * client frame a body one way for us and another way for a stricter
 * origin (request smuggling).
 *
 * Each field name is classified once, by the scanner (enum http_fid, by a
 * perfect hash), and the parse marks the fields that are never forwarded
 * (hop-by-hop names and those the Connection lines list) in a bitmap, so
 * the proxy rewrites a head in one pass without comparing strings.
 * A body forwarded as it was framed goes through http_body_forward(),
 * which also says which trailer lines are not to go on.
 *
 * Nothing here allocates: a struct http_req lives in its request (struct
 * req, req.h) or, for an origin's response head, comes from the worker's
 * pool on its own.
 */
#ifndef CISTERN_HTTP_H
#define CISTERN_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <http_parser.h>

#define HTTP_MAX_FIELDS 128     /* fields per head; more is a 431 */

/* Return codes of the scanner and the body feeder (statuses are >= 100). */
#define HTTP_OK     0
#define HTTP_AGAIN  1

/* http-parser does not know PUSH: we parse it as POST and remember. */
#define HTTP_M_PUSH (HTTP_SOURCE + 100)

struct http_limits {
    size_t line_max;            /* request_line_max_size */
    size_t head_max;            /* request_header_max_size */
};

typedef void (*http_body_sink)(void *arg, const char *p, size_t n);

/* Field names Cistern acts on.  The scanner classifies every field name
 * once (struct http_field.id), so the code that rewrites and inspects
 * heads switches on a number instead of comparing each field against
 * each name it cares about.  HTTP_F_OTHER: any other name. */
enum http_fid {
    HTTP_F_OTHER = 0,
    HTTP_F_ACCEPT_ENCODING,
    HTTP_F_AGE,
    HTTP_F_AUTHORIZATION,
    HTTP_F_CACHE_CONTROL,
    HTTP_F_CACHE_STATUS,
    HTTP_F_CDN_CACHE_CONTROL,
    HTTP_F_CONNECTION,
    HTTP_F_CONTENT_ENCODING,
    HTTP_F_CONTENT_LENGTH,
    HTTP_F_CONTENT_LOCATION,
    HTTP_F_CONTENT_MD5,
    HTTP_F_CONTENT_RANGE,
    HTTP_F_DATE,
    HTTP_F_ETAG,
    HTTP_F_EXPECT,
    HTTP_F_EXPIRES,
    HTTP_F_HOST,
    HTTP_F_IF_MODIFIED_SINCE,
    HTTP_F_IF_NONE_MATCH,
    HTTP_F_IF_RANGE,
    HTTP_F_KEEP_ALIVE,
    HTTP_F_LAST_MODIFIED,
    HTTP_F_LOCATION,
    HTTP_F_PROXY_AUTHENTICATE,
    HTTP_F_PROXY_CONNECTION,
    HTTP_F_RANGE,
    HTTP_F_REFERER,
    HTTP_F_SURROGATE_CONTROL,
    HTTP_F_TE,
    HTTP_F_TRAILER,
    HTTP_F_TRANSFER_ENCODING,
    HTTP_F_UPGRADE,
    HTTP_F_USER_AGENT,
    HTTP_F_VARY,
    HTTP_F_VIA,
    HTTP_F_X_FORWARDED_FOR,
    HTTP_F_NKNOWN
};

struct http_field {
    uint32_t name, name_len;    /* offsets from the start of the head */
    uint32_t value, value_len;  /* value trimmed of OWS */
    uint32_t id;                /* enum http_fid of the name */
};

/* Connection-header tokens we act on. */
#define HTTP_CONN_CLOSE      0x1
#define HTTP_CONN_KEEPALIVE  0x2
#define HTTP_CONN_OTHER      0x4  /* names other hop-by-hop fields */
/* Connection options remembered (hashed) for the trailers, whose head
 * may be gone by then: a message naming more drops every trailer field */
#define HTTP_CONN_NAMES      8

struct http_req {
    /* scanner state (http_req_reset zeroes it) */
    uint32_t scan_pos;          /* next unexamined byte (a line start) */
    uint32_t start;             /* first byte of the request line */
    uint32_t nlines;            /* lines seen, request line included */
    uint32_t head_len;          /* set on HTTP_OK: start .. blank line end */
    http_parser parser;
    http_body_sink sink;        /* valid during http_req_body only */
    void    *sink_arg;
    const char *base;           /* head start (after leading blank lines) */
    int      method;            /* enum http_method, or HTTP_M_PUSH */
    uint16_t major, minor;
    uint32_t target, target_len;
    int      nfields;
    struct http_field fields[HTTP_MAX_FIELDS];
    /* 1 + index of the first field of each known name, 0 when absent
     * (kept by the scanner, cleared by http_req_reset) */
    uint8_t  fidx[HTTP_F_NKNOWN];
    /* Fields never forwarded (set by http_req_parse / http_resp_parse):
     * the hop-by-hop names of RFC 9110 7.6.1 and the fields the
     * Connection lines list (Content-Length excepted: see http.c), one
     * bit per field index. */
    uint64_t hop[HTTP_MAX_FIELDS / 64];
    int      f_host;            /* index of Host, -1 when absent */
    int64_t  content_length;    /* -1 when absent */
    int      chunked;
    unsigned conn_tokens;       /* HTTP_CONN_* */
    uint8_t  nconn_names;       /* options in conn_names, HTTP_CONN_NAMES
                                 * + 1 when there were more */
    uint64_t conn_names[HTTP_CONN_NAMES];  /* their http_name_hash */
    int      expect_continue;
    int      keep_alive;        /* by the RFC rules for this version */
    int      absolute;          /* absolute-form target */
    /* the authority and path used for remap, offsets into the head */
    int      https;
    uint32_t host, host_len;
    int      port;              /* explicit or the scheme's default */
    uint32_t path, path_len;    /* path and query ("/" for "*") */
    int      path_normal;       /* http_req_path() would not change it */
    int      has_body;
    int      body_done;         /* set by http_req_body at message end */
    /* responses (http_resp_parse) */
    int      status;
    uint32_t phrase, phrase_len;  /* reason phrase */
    int      until_close;       /* body delimited by the origin's close */
    int      skip_body;         /* HEAD, 1xx, 204, 304 */
    int      te_chunked_last;   /* Transfer-Encoding ends in chunked */
    /* body framing state (http_req_body) */
    int      bstate;            /* chunked decoder state */
    uint64_t bleft;             /* bytes left: of the body (CL) or chunk */
    uint32_t bcount;            /* digits / extension / trailer bytes */
    uint32_t tname;             /* trailer field name: its length */
    char     tbuf[20];          /* its first bytes, lowercased */
    uint8_t  bfwd;              /* in http_body_forward */
    uint8_t  bskip;             /* that call's bytes are not forwarded */
    uint8_t  tdrop;             /* in a trailer line not forwarded */
    const char *reason;         /* why a request was refused */
};

/* Prepare r for a new request (cheap: clears the scalar state only). */
void http_req_reset(struct http_req *r);

/* Scan buf[0..len) (the request starts at buf[0]) for the end of the head,
 * recording field offsets (relative to buf + r->start) as it goes.
 * Returns HTTP_OK (r->start: where the request line begins, after any
 * leading blank lines; r->head_len: its length up to and including the
 * blank line), HTTP_AGAIN (need more bytes), or 400 / 414 / 431 with
 * r->reason set. */
int http_head_scan(struct http_req *r, const char *buf, size_t len,
                   const struct http_limits *lim);

/* Parse and check the complete head at head[0..r->head_len) (that is,
 * buf + r->start).  PUSH is rewritten to POST in place for http-parser.
 * Returns HTTP_OK, or the status to answer with (400, 501, 505) and
 * r->reason.  After a refusal the connection must close. */
int http_req_parse(struct http_req *r, char *head);

/* Responses reuse struct http_req (scanner and field index): parse and
 * check a complete response head at head[0..r->head_len) received for a
 * request with method req_method.  Returns HTTP_OK, or 502 with r->reason
 * (invalid status line, CL with TE, differing lengths...). */
int http_resp_parse(struct http_req *r, char *head, int req_method);

/* Feed body bytes (requests and responses alike).  Consumes up to len bytes of this message's body and
 * sets *used; payload bytes are passed to sink (may be NULL) in pieces.
 * Returns HTTP_OK when the message is complete (r->body_done), HTTP_AGAIN
 * when more is needed, or 400 for a framing error (bad chunk size...). */
int http_req_body(struct http_req *r, const char *buf, size_t len,
                  size_t *used, http_body_sink sink, void *arg);
/* http_req_body for a caller that forwards the body as it was framed:
 * the trailer fields a recipient may not merge into the head (RFC 9110
 * 6.5.1, 6.5.2: framing, routing, hop-by-hop and those the head's
 * Connection names, credentials and cookies, request modifiers, response
 * controls, content format) are not to be forwarded (7.6.1 asks it of
 * the hop-by-hop ones).  Such a line is consumed by calls of its own,
 * which set *drop; the bytes of a call without it go on.  A trailer
 * line's start is consumed only once its name is whole (*used stops
 * before it: call again with more), so a name over 256 bytes is
 * refused (by http_req_body too). */
int http_body_forward(struct http_req *r, const char *buf, size_t len,
                      size_t *used, int *drop, http_body_sink sink, void *arg);
/* The peer closed: for a close-delimited body this completes the message
 * (HTTP_OK); otherwise the message is truncated (400). */
int http_body_eof(struct http_req *r);

/* The path remap matches, the cache keys and the origin is sent, from a
 * request's path and query p[0..n) (r->path, which http_req_parse
 * checked): RFC 3986 6.2.2 normalisation of the path (the query is kept
 * as sent).  Percent-encoded unreserved characters are decoded ("%7E",
 * "%2e"), the hex digits of the others uppercased ("%2f" -> "%2F": an
 * encoded slash stays encoded), dot segments removed (5.2.4: "/a/./b",
 * "/a/x/../b" and "/a/%2E%2E/a/b" are "/a/b"; ".." at the root is
 * dropped), and an empty path becomes "/" ("?q" -> "/?q", RFC 9112
 * 3.2.1).  Slashes are not merged.  Returns p itself when it is normal
 * already (*outlen = n), else buf holding the result (*outlen bytes, no
 * NUL), or NULL when n + 2 > bufsz.  What cannot be normalised safely
 * the parser refused with 400 before: a malformed or NUL
 * percent-encoding, a backslash, a fragment, bytes outside visible
 * ASCII, and dot segments glued to an encoded slash or a ';' parameter
 * ("..%2F", "..;x"). */
const char *http_path_normalize(const char *p, size_t n, char *buf, size_t bufsz,
                                size_t *outlen);
/* The same for a parsed request (r->path), skipping the work when the
 * parse found the path normal already (the common case). */
const char *http_req_path(const struct http_req *r, char *buf, size_t bufsz,
                          size_t *outlen);

/* Field helpers. */
/* Is field i named name (case-insensitive)?  Inline so the length of a
 * literal name is a constant and most fields fail on the length alone. */
static inline int
http_field_is(const struct http_req *r, int i, const char *name)
{
    const struct http_field *f = &r->fields[i];
    size_t n = strlen(name);

    return f->name_len == n && strncasecmp(r->base + f->name, name, n) == 0;
}
/* Index of the first field named name at or after index from, or -1.
 * A known name is found by its id (no string compares). */
int  http_field_find(const struct http_req *r, const char *name, int from);
/* The request's Cache-Control carries no-store (RFC 9111 5.2.1.5). */
int http_req_no_store(const struct http_req *r);

/* The same by id (not HTTP_F_OTHER): O(1) for the first one. */
static inline int
http_field_find_id(const struct http_req *r, enum http_fid id, int from)
{
    int i = (int)r->fidx[id] - 1;

    if (i < 0 || i >= from)
        return i;
    for (i = from; i < r->nfields; i++)
        if (r->fields[i].id == (uint32_t)id)
            return i;
    return -1;
}
/* The id of a field name p[0..n) (any case): HTTP_F_OTHER when unknown.
 * p holds no control bytes but HTAB (true of field names and values). */
enum http_fid http_field_id(const char *p, size_t n);
/* Is field i hop-by-hop (never forwarded)?  Valid after http_req_parse
 * or http_resp_parse. */
static inline int
http_field_hop(const struct http_req *r, int i)
{
    return (int)((r->hop[i >> 6] >> (i & 63)) & 1);
}
/* Max-Forwards of a TRACE or OPTIONS request (RFC 9110 7.6.2): its value,
 * or -1 when absent, not 1*DIGIT, or another method (then nothing is done
 * with it).  *idx: the field's index, or -1. */
int64_t http_max_forwards(const struct http_req *r, int *idx);
const char *http_method_name(int method);

/* The decimal value of p[0..n) (1*DIGIT), or -1: empty, another byte,
 * or past INT64_MAX. */
int64_t http_decimal(const char *p, size_t n);

/* Case-insensitive token list search: does the comma-separated list
 * p[0..n) contain token tok? */
int  http_list_has(const char *p, size_t n, const char *tok);

/* Reason phrase for a status code. */
const char *http_status_text(int status);

#endif /* CISTERN_HTTP_H */
