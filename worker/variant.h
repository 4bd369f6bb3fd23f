/*
 * worker/variant.h: the pure rules of the HTTP side of the cache - the
 * cache key, Vary (the secondary key), Accept-Encoding normalisation,
 * Range, ETag matching and reading a stored header block.
 *
 * Everything here reads bytes, numbers and parsed heads (struct http_req)
 * and writes into the caller's buffers: no connection, no store, no
 * configuration, no allocation.  worker/store.c applies these rules to a
 * request; t/unit/check_variant.c tests them one table row at a time.
 */
#ifndef CISTERN_VARIANT_H
#define CISTERN_VARIANT_H

#include <stddef.h>
#include <stdint.h>

#include "worker/http.h"

/* The cache key of a remapped URL: "scheme://host[:port]path", the host
 * lowercased, the scheme's default port (443 for https, else 80) dropped,
 * path and query as sent.  Returns its length (out NUL-terminated), or 0
 * when it does not fit in outlen. */
size_t store_key(char *out, size_t outlen, const char *scheme,
                 const char *host, int port, const char *path);

/* The value of field `name` (case-insensitive, NUL-terminated) in a stored
 * header block: lines "Name: v\r\n", the status line first, which is never
 * a field.  Returns the value (leading blanks skipped, *vlen its length up
 * to the line end), or NULL when absent. */
const char *store_hdr_get(const char *blk, size_t len, const char *name,
                          size_t *vlen);

/* Weak comparison of two entity-tags (RFC 9110 8.8.3.2): W/ prefixes are
 * ignored, the opaque tags (quotes included) must be equal.  1 or 0. */
int store_etag_weak_eq(const char *a, size_t al, const char *b, size_t bl);

/* Does If-None-Match `inm` (NUL-terminated list) match the stored ETag
 * etag[0..etl) (NULL when the object has none)?  `*` matches anything;
 * a malformed list matches nothing.  1 or 0. */
int store_inm_matches(const char *inm, const char *etag, size_t etl);

/* Accept-Encoding v[0..n) as ATS's proxy.config.http.normalize_ae mode:
 * 1 gives "gzip" or "", 2 gives "br" (preferred), "gzip" or "".  A coding
 * (x-gzip is gzip, RFC 9110 8.4.1.3) is accepted when listed with q > 0
 * anywhere, refused when listed only with q=0 (the parameter name in any
 * case), and otherwise accepted when `*` is listed with q > 0: `*` never
 * re-enables a coding refused by name (RFC 9110 12.5.3; ATS's own mode 2
 * gives "br" for `br;q=0, *`, we give "gzip").  Returns a static string. */
const char *store_norm_ae(const char *v, size_t n, int mode);

/* store_norm_ae over every Accept-Encoding line of r taken as one list
 * (RFC 9110 5.3): what to forward, and what a Vary key holds.  r may be
 * NULL (no field: ""). */
const char *store_norm_ae_req(const struct http_req *r, int mode);

/* The value of the varying request field name[0..nl) in r as forwarded:
 * every line of it joined by ",", without blanks next to a comma outside
 * a quoted string (RFC 9111 4.1), Accept-Language lowercased;
 * Accept-Encoding as store_norm_ae_req when ae_mode (normalize_ae) is
 * not 0.  r may be NULL (no field).
 * Writes into out; returns the length, -1 when it does not fit, or -2
 * when r has no such field (Accept-Encoding under ae_mode: "" then,
 * the value it is normalised to, as forwarded). */
int store_vary_value(const struct http_req *r, const char *name, size_t nl,
                     char *out, size_t outlen, int ae_mode);

/* The secondary key of a variant: key, \x01, the variant-set id, then
 * \x01name=value per name in the Vary list vary[0..vlen) (names
 * lowercased, values from store_vary_value; \x01name alone for a field
 * absent, which RFC 9111 4.1 keeps apart from an empty one): of r, the request as
 * forwarded, but Host's of host_r, the request presented to the cache
 * (RFC 9111 4.1; with pristine_host_hdr 0 the origin saw the remap
 * target's Host whatever the client sent).  A lookup passes the client's
 * request as both.  Returns its length, or 0 when it does not fit in
 * outlen. */
size_t store_variant_key(const char *key, size_t keylen, const char *vary,
                         size_t vlen, const char *id, size_t idlen,
                         const struct http_req *r, const struct http_req *host_r,
                         char *out, size_t outlen, int ae_mode);

/* Parse Range value v (NUL-terminated, "bytes=a-b", "bytes=a-" or
 * "bytes=-n": one range) against a body of len bytes.  Returns 1 with
 * [*from, *to] inclusive, 0 when it is not a single byte range we serve
 * (the whole object is the answer), -1 when unsatisfiable (416). */
int store_range(const char *v, uint64_t len, uint64_t *from, uint64_t *to);
/* Parse a Content-Range value "bytes a-b/n" (v[0..vl), RFC 9110 14.4)
 * with a complete length and a <= b < n.  Returns 1 with them, else 0
 * ("bytes * /n", "bytes a-b/ *", malformed). */
int store_content_range(const char *v, size_t vl, uint64_t *a, uint64_t *b, uint64_t *n);
/* A Range value v[0..vl) that is one range with a first byte: 1 for
 * "bytes=a-b" (a <= b) with them, 2 for "bytes=a-" with *a and *b
 * UINT64_MAX, else 0 (a suffix range, a list, malformed). */
int store_range_first(const char *v, size_t vl, uint64_t *a, uint64_t *b);

#endif /* CISTERN_VARIANT_H */
