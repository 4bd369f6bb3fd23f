/*
 * worker/plugin.c: the plugin hooks of a request and the API's functions
 * (issue 22; cistern/plugin.h is the contract, worker/plugin.h the calls
 * the steps make, DESIGN.md "Plugins" the picture).
 *
 * Heads are changed without allocating: a request's field changes are
 * kept in its struct cst_txn and applied when the origin's head is
 * written (proxy_put_head); a response's are kept in one static set (the
 * worker has one thread and a hook's changes are applied before it
 * returns): an origin's head is rewritten in place in the transaction's
 * input and parsed again, the client's head rewritten in its output.
 *
 * An intercept (a plugin answers the request itself) is given a local
 * socket pair: the transaction talks HTTP/1.1 to one end as to an origin
 * (so the answer is stored, revalidated and counted like an origin's),
 * and the plugin's head and body are written into the other end as the
 * socket takes them, the body made piece by piece by its producer.
 *
 * Before each call into a plugin, panic_plugin names it: a crash in it
 * leaves "..., in plugin NAME" in the worker's shm slot, which the master
 * logs when it reaps and respawns the worker.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/log.h"
#include "shm/panic.h"
#include "worker/linescan.h"
#include "worker/plugin.h"
#include "worker/req.h"
#include "worker/worker.h"

#define ICPT_MAGIC 0x49435054u          /* "ICPT" */


static struct plug_edits plug_redits;  /* the response hook's changes */
static char *plug_scratch;             /* a head being rewritten */
static size_t plug_scratch_size;

/* ------------------------------------------------------------------ */
/* Which instances run on a request: the global ones, then the rule's */

/* The plan of a request without plugins of its own or global ones. */
static const struct conf_plan plug_noplan;

_Static_assert(PLUG_MAX == CONF_PLAN_MAX, "a slot per instance of a plan");
_Static_assert(CST_HOOK_READ_REQUEST == CONF_PH_READ_REQUEST && CST_HOOK_REMAP == CONF_PH_REMAP
               && CST_HOOK_SEND_REQUEST == CONF_PH_SEND_REQUEST
               && CST_HOOK_INTERCEPT == CONF_PH_INTERCEPT
               && CST_HOOK_READ_RESPONSE == CONF_PH_READ_RESPONSE
               && CST_HOOK_SEND_RESPONSE == CONF_PH_SEND_RESPONSE
               && CST_HOOK_TXN_END == CONF_PH_TXN_END && CONF_PH_COUNT == 7,
               "hooks_off's bits are the plan's, each of them");

/* Each call of hook bit h (a constant) in t's plan, as pc. */
#define PLUG_EACH(t, h, pc)                                                            \
    for (const struct conf_pcall *pc = &(t)->plan->calls[(t)->plan->first[__builtin_ctz(h)]], \
         *pc##_end = &(t)->plan->calls[(t)->plan->first[__builtin_ctz(h) + 1]];       \
         pc < pc##_end; pc++)

#define PLUG_CALL(pc, t) \
    (panic_plugin = (pc)->name, (t)->cur = (pc)->k, (pc)->fn.hook((pc)->inst, (t)))
#define PLUG_DONE() (panic_plugin = NULL)

static struct cst_txn *
plug_begin(struct req *rq)
{
    struct cst_txn *t = &rq->rq_plug;

    if (!rq->rq_plugged) {
        const struct conf *cf = wk->conf;
        t->rq = rq;
        t->remapped = t->url_set = t->key_set = t->uncacheable = 0;
        t->ttl = 0;
        t->req.addlen = t->req.dellen = 0;
        t->res = NULL;
        t->resp = NULL;
        t->out = NULL;
        t->produce = NULL;
        t->icpt = NULL;
        t->slotset = 0;         /* api_slot clears a slot when first asked */
        t->plan = cf->gplan ? cf->gplan : &plug_noplan;
        rq->rq_plugged = 1;
    }
    return t;
}

/* ------------------------------------------------------------------ */
/* Field edits */

static int
plug_name_eq(const char *a, size_t al, const char *b, size_t bl)
{
    return al == bl && strncasecmp(a, b, al) == 0;
}

static int
plug_deleted(const struct plug_edits *ed, const char *name, size_t nlen)
{
    for (size_t i = 0; i < ed->dellen;) {
        size_t l = strlen(ed->del + i);
        if (plug_name_eq(ed->del + i, l, name, nlen))
            return 1;
        i += l + 1;
    }
    return 0;
}

/* The nth added line named name: 1 with *val, *vlen; else 0 and *nth
 * less the lines passed. */
static int
plug_added_get(const struct plug_edits *ed, const char *name, size_t nlen, int *nth,
               const char **val, size_t *vlen)
{
    const char *p = ed->add, *end = ed->add + ed->addlen;

    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p)), *c = memchr(p, ':', (size_t)(e - p));
        if (c && plug_name_eq(p, (size_t)(c - p), name, nlen) && (*nth)-- == 0) {
            *val = c + 2;
            *vlen = (size_t)(e - 1 - (c + 2));
            return 1;
        }
        p = e + 1;
    }
    return 0;
}

static inline __attribute__((always_inline)) int plug_name_reserved(const char *name,
                                                                     size_t nlen);
static inline __attribute__((always_inline)) int plug_field_ok(const char *name, size_t nlen,
                                                                const char *val, size_t vlen);

static int
plug_edit_add(struct plug_edits *ed, const char *name, size_t nlen, const char *val,
              size_t vlen)
{
    if ((size_t)ed->addlen + nlen + vlen + 4 > sizeof(ed->add)
        || !plug_field_ok(name, nlen, val, vlen))
        return -1;
    char *p = ed->add + ed->addlen;
    memcpy(p, name, nlen);
    p += nlen;
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, val, vlen);
    p += vlen;
    *p++ = '\r';
    *p++ = '\n';
    ed->addlen = (uint16_t)(p - ed->add);
    return 0;
}

static int
plug_edit_remove(struct plug_edits *ed, const char *name, size_t nlen)
{
    if (plug_name_reserved(name, nlen))
        return -1;
    /* the lines added before go too */
    char *p = ed->add, *end = ed->add + ed->addlen;
    while (p < end) {
        char *e = memchr(p, '\n', (size_t)(end - p)), *c = memchr(p, ':', (size_t)(e - p));
        if (c && plug_name_eq(p, (size_t)(c - p), name, nlen)) {
            size_t l = (size_t)(e + 1 - p);
            memmove(p, e + 1, (size_t)(end - e - 1));
            end -= l;
            ed->addlen = (uint16_t)(ed->addlen - l);
        } else {
            p = e + 1;
        }
    }
    if (plug_deleted(ed, name, nlen))
        return 0;
    if ((size_t)ed->dellen + nlen + 1 > sizeof(ed->del) || nlen == 0)
        return -1;
    memcpy(ed->del + ed->dellen, name, nlen);
    ed->del[ed->dellen + nlen] = '\0';
    ed->dellen = (uint16_t)(ed->dellen + nlen + 1);
    return 0;
}

/* The edits a field call on head works on in this hook, or NULL. */
static struct plug_edits *
plug_edits_for(struct cst_txn *t, int head, int write)
{
    if (head == CST_REQUEST)
        return !write || t->hook <= PLUG_H_SEND_REQUEST ? &t->req : NULL;
    if (t->hook == PLUG_H_READ_RESPONSE || t->hook == PLUG_H_INTERCEPT)
        return &plug_redits;
    return NULL;
}

/* Field `name` of a text head b (lines after the status line). */
static int
plug_text_get(const char *h, size_t len, const char *name, size_t nlen, int *nth,
              const char **val, size_t *vlen)
{
    const char *p = memchr(h, '\n', len), *end = h + len;

    while (p && ++p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p)), *c;
        if (e == NULL)
            break;
        c = memchr(p, ':', (size_t)(e - p));
        if (c && plug_name_eq(p, (size_t)(c - p), name, nlen) && (*nth)-- == 0) {
            const char *v = c + 1, *ve = e;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *val = v;
            *vlen = (size_t)(ve - v);
            return 1;
        }
        p = e;
    }
    return 0;
}

static int
api_field_get(struct cst_txn *t, int head, const char *name, size_t nlen, int nth,
              const char **val, size_t *vlen)
{
    const struct http_req *r = NULL;
    struct plug_edits *ed = plug_edits_for(t, head, 0);

    if (head == CST_REQUEST)
        r = &t->rq->r;
    else if (t->hook == PLUG_H_READ_RESPONSE)
        r = t->resp;
    if (r != NULL) {
        if (ed == NULL || !plug_deleted(ed, name, nlen))
            for (int i = 0; i < r->nfields; i++) {
                const struct http_field *f = &r->fields[i];
                if (plug_name_eq(r->base + f->name, f->name_len, name, nlen) && nth-- == 0) {
                    *val = r->base + f->value;
                    *vlen = f->value_len;
                    return 1;
                }
            }
    } else if (head == CST_RESPONSE && t->hook == PLUG_H_SEND_RESPONSE) {
        /* the client's head is edited in place: its text is the truth */
        return plug_text_get(t->out->data + t->mark, t->out->end - t->mark, name, nlen,
                             &nth, val, vlen);
    }
    return ed ? plug_added_get(ed, name, nlen, &nth, val, vlen) : 0;
}

/* A field name or value a plugin gives: one a head can carry.  Eight
 * bytes at a time, by the has-zero-byte trick ((x - 1..) & ~x has a
 * high bit set iff some byte of x is zero; with 0x21.. for "below
 * 0x21"), exact as a yes/no: a byte-table loop was ~7 instructions a
 * byte of every field a hook sets (headers.so's set-resp: 110 a hit). */
#define PLUG_ONES      0x0101010101010101ull
#define PLUG_HAS(x, c) ((((x) ^ ((c) * PLUG_ONES)) - PLUG_ONES) & ~((x) ^ ((c) * PLUG_ONES)))

static inline uint64_t
plug_bad_word(uint64_t x, int value)
{
    if (value)          /* not in a value: NUL, LF, CR */
        return PLUG_HAS(x, 0) | PLUG_HAS(x, '\n') | PLUG_HAS(x, '\r');
    /* not in a name: controls, space, ':', DEL and above.  Below 0x80,
     * x - 0x21.. sets a high bit where a byte is below 0x21 and
     * x + 0x01.. where it is 0x7f; a borrow or carry between bytes only
     * ever starts at a byte refused already (below 0x21; 0xff). */
    return (x - 0x21 * PLUG_ONES) | (x + PLUG_ONES) | x | PLUG_HAS(x, ':');
}

/* s[0..n) as words: s[i..i+8) in turn, then the last eight bytes (some
 * seen before, all of them in s); under eight bytes, one word of them
 * (some twice) and 'a' (a byte both checks accept).  A high bit set:
 * a byte the check refuses. */
static inline __attribute__((always_inline)) uint64_t
plug_bad(const char *s, size_t n, int value)
{
    uint64_t bad = 0, x = 0x6161616161616161ull;
    uint32_t lo, hi;

    if (n >= 8) {
        for (size_t i = 0; i + 8 <= n; i += 8) {
            memcpy(&x, s + i, 8);
            bad |= plug_bad_word(x, value);
        }
        memcpy(&x, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(&lo, s, 4);
        memcpy(&hi, s + n - 4, 4);
        x = lo | (uint64_t)hi << 32;
    } else if (n > 0) {
        x = (x & ~0xffffffull) | (unsigned char)s[0] | (uint64_t)(unsigned char)s[n / 2] << 8
            | (uint64_t)(unsigned char)s[n - 1] << 16;
    }
    return bad | plug_bad_word(x, value);
}

/* The fields the proxy writes from its own state, which no plugin may
 * set, add or remove: an edit would make the head lie about its message.
 * The framing (RFC 9112 6.1-6.3: a second Content-Length, a removed one
 * on a POST, a Transfer-Encoding the body does not have: the origin or
 * the client reads the next message from the body, or waits), the
 * connection's own (RFC 9110 7.6.1: Connection and the hop-by-hop fields
 * it may name), Content-Range (RFC 9110 14.4: where a stored part's
 * bytes go) and Host (RFC 9112 3.2: exactly one, the route's; url_set
 * changes the route).  The length picks the names to compare: most
 * fields cost one switch. */
static inline __attribute__((always_inline)) int
plug_name_reserved(const char *name, size_t nlen)
{
    switch (nlen) {
    case 2: return strncasecmp(name, "te", 2) == 0;
    case 4: return strncasecmp(name, "host", 4) == 0;
    case 7: return strncasecmp(name, "trailer", 7) == 0 || strncasecmp(name, "upgrade", 7) == 0;
    case 10:
        return strncasecmp(name, "connection", 10) == 0
               || strncasecmp(name, "keep-alive", 10) == 0;
    case 13: return strncasecmp(name, "content-range", 13) == 0;
    case 14: return strncasecmp(name, "content-length", 14) == 0;
    case 16: return strncasecmp(name, "proxy-connection", 16) == 0;
    case 17: return strncasecmp(name, "transfer-encoding", 17) == 0;
    default: return 0;
    }
}

static inline __attribute__((always_inline)) int
plug_field_ok(const char *name, size_t nlen, const char *val, size_t vlen)
{
    uint64_t bad = plug_bad(name, nlen, 0) | plug_bad(val, vlen, 1);

    return nlen > 0 && (bad & 0x8080808080808080ull) == 0 && !plug_name_reserved(name, nlen);
}

/* send_response: a remove scans the client's head for its name, ~100
 * instructions for a hit's.  What names a head may hold is kept as a
 * 64-bit Bloom filter (a bit per name, case folded): a name whose bit is
 * clear is not there, and its remove (a set's first half) costs no
 * scan.  A hit's head is its stored one (whole or fewer lines) and the
 * fields store_send_as writes; the stored head's filter is made once per
 * worker and kept by its cache_obj_head_id, in a small table a
 * collision only makes scan again. */
static inline __attribute__((always_inline)) uint64_t
plug_name_bit(const char *name, size_t nlen)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < nlen; i++)
        h = (h ^ ((unsigned char)name[i] | 0x20)) * 0x100000001b3ull;     /* FNV-1a */
    /* a multiplier that gives the fields store_send_as writes and the
     * common stored ones (Content-Type, Cache-Control, Date, ETag,
     * Last-Modified, Expires, Vary, Accept-Ranges, Content-Encoding,
     * Set-Cookie, Location) 23 bits of their own: none costs another a
     * scan, and a test tells each apart */
    return 1ull << ((h * 0x2aa3300b2b711343ull) >> 58);
}

/* send_response: room for need more bytes at the end of the client's
 * head, t->out[t->mark..end).  The head grows no larger than an origin's
 * may be (response_header_max_size): a hook adding fields until refused
 * would otherwise grow it as far as malloc goes.  buf_grow would move
 * unsent bytes to the front when start > 0, and the caller's mark with
 * them: with start taken as 0 it only ever reallocates, keeping every
 * offset. */
static __attribute__((noinline)) int
plug_out_grow(struct buf *b, size_t need)
{
    size_t start = b->start;
    int rc;

    b->start = 0;
    rc = buf_grow(b, need);
    b->start = start;
    return rc;
}

static inline __attribute__((always_inline)) int
plug_out_room(struct cst_txn *t, size_t need)
{
    struct buf *b = t->out;

    if (b->end - t->mark + need > wk->resp_limits.head_max)
        return -1;
    return b->size - b->end >= need ? 0 : plug_out_grow(b, need);
}

/* send_response: a line added to the client's head where it is (before
 * its blank line): no rebuilding. */
static inline __attribute__((always_inline)) int
plug_out_add(struct cst_txn *t, const char *name, size_t nlen, const char *val, size_t vlen)
{
    struct buf *b = t->out;
    size_t need = nlen + vlen + 4;

    if (!plug_field_ok(name, nlen, val, vlen) || b->end - t->mark < 4
        || plug_out_room(t, need) < 0)
        return -1;
    char *p = b->data + b->end - 2;         /* the blank line's CRLF */
    memcpy(p, name, nlen);
    p += nlen;
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, val, vlen);
    p += vlen;
    memcpy(p, "\r\n\r\n", 4);
    b->end += need;
    t->added |= plug_name_bit(name, nlen);
    return 0;
}

/* linescan: worker/linescan.h (vectorised; its own unit test). */

/* The names of the lines in text[0..len) after its first (a status line). */
static uint64_t
plug_text_names(const char *text, size_t len)
{
    const char *p = memchr(text, '\n', len), *end = text + len;
    uint64_t names = 0;

    while (p != NULL && ++p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p)), *c;
        if ((c = memchr(p, ':', (size_t)((e ? e : end) - p))) != NULL)
            names |= plug_name_bit(p, (size_t)(c - p));
        p = e;
    }
    return names;
}

#define PLUG_HEADS 256                  /* stored heads' filters a worker keeps */
static struct plug_head {
    uint64_t id;                        /* cache_obj_head_id; 0: none */
    uint64_t names;
} plug_heads[PLUG_HEADS];

/* The fields store_send_as writes after the stored head's lines that a
 * plugin may change (not Content-Length, Content-Range, Connection). */
static const char plug_own_text[] =
    "\nAge:\nCache-Status:\nX-Cistern-Worker:\nVia:\nServer:\n";

static __attribute__((noinline)) uint64_t
plug_out_names(const struct cst_txn *t)
{
    static uint64_t own;
    const struct cache_obj *o = t->hit;
    struct plug_head *h;
    uint64_t id;

    if (o == NULL)
        return ~0ull;                   /* not a hit's: any name */
    if (own == 0)
        own = plug_text_names(plug_own_text, sizeof(plug_own_text) - 1);
    id = cache_obj_head_id(o);
    h = &plug_heads[(id * 0x9e3779b97f4a7c15ull) >> (64 - 8)];
    if (h->id != id) {
        h->id = id;
        h->names = plug_text_names(o->iov[0].iov_base, o->hdr_len);
    }
    return h->names | own;
}

/* send_response: every line named name taken out of the client's head
 * where it is: a scan of its lines, a move only for a line removed. */
static __attribute__((noinline)) void
plug_out_cut(struct cst_txn *t, const char *name, size_t nlen)
{
    struct buf *b = t->out;
    char *p = b->data + t->mark, *end = b->data + b->end - 2;   /* to the blank line */
    char *q, *e;

    while ((q = linescan(p, end, (unsigned char)name[0])) != NULL) {
        p = q;
        if ((size_t)(end - q) <= nlen || q[nlen] != ':' || strncasecmp(q, name, nlen) != 0
            || (e = memchr(q, '\n', (size_t)(end - q))) == NULL)
            continue;
        size_t l = (size_t)(e + 1 - q);
        memmove(q, e + 1, (size_t)(b->data + b->end - e - 1));
        end -= l;
        b->end -= l;
        p = q - 1;      /* its '\n' starts the next line now */
    }
}

/* send_response: the remove of a name (its Bloom bit: bit) a plugin may
 * change (the caller's check); a scan only where the name may be. */
static inline __attribute__((always_inline)) void
plug_out_remove(struct cst_txn *t, const char *name, size_t nlen, uint64_t bit)
{
    if (t->names == 0)
        t->names = plug_out_names(t);
    if ((t->names | t->added) & bit)
        plug_out_cut(t, name, nlen);
}

/* send_response: a name a plugin may remove, and the remove. */
static int
plug_out_remove_name(struct cst_txn *t, const char *name, size_t nlen)
{
    if (nlen == 0 || plug_name_reserved(name, nlen))
        return -1;
    plug_out_remove(t, name, nlen, plug_name_bit(name, nlen));
    return 0;
}

static int
api_field_add(struct cst_txn *t, int head, const char *name, size_t nlen, const char *val,
              size_t vlen)
{
    struct plug_edits *ed;

    if (head == CST_RESPONSE && t->hook == PLUG_H_SEND_RESPONSE)
        return plug_out_add(t, name, nlen, val, vlen);
    ed = plug_edits_for(t, head, 1);
    return ed ? plug_edit_add(ed, name, nlen, val, vlen) : -1;
}

static int
api_field_remove(struct cst_txn *t, int head, const char *name, size_t nlen)
{
    struct plug_edits *ed;

    if (head == CST_RESPONSE && t->hook == PLUG_H_SEND_RESPONSE)
        return plug_out_remove_name(t, name, nlen);
    ed = plug_edits_for(t, head, 1);
    return ed ? plug_edit_remove(ed, name, nlen) : -1;
}

static int
api_field_set(struct cst_txn *t, int head, const char *name, size_t nlen, const char *val,
              size_t vlen)
{
    if (head == CST_RESPONSE && t->hook == PLUG_H_SEND_RESPONSE)
        return plug_out_remove_name(t, name, nlen) < 0 ? -1
               : plug_out_add(t, name, nlen, val, vlen);
    if (api_field_remove(t, head, name, nlen) < 0)
        return -1;
    return api_field_add(t, head, name, nlen, val, vlen);
}

/* A prepared field: checked when made, so putting it is a copy. */
#define FIELD_MAGIC 0x464c4450u         /* "FLDP" */
#define FIELD_MAX   4096                /* a prepared line's bytes */

struct cst_field {
    uint32_t magic;
    uint16_t nlen, llen;                /* the name's; the line's, CRLF included */
    uint64_t bit;                       /* the name's Bloom bit (plug_name_bit) */
    char     line[];                    /* "Name: value\r\n" */
};

static struct cst_field *
api_field_prepare(const char *name, size_t nlen, const char *val, size_t vlen)
{
    struct cst_field *f;
    size_t llen = nlen + vlen + 4;

    if (name == NULL || (val == NULL && vlen > 0) || nlen > FIELD_MAX || vlen > FIELD_MAX
        || llen > FIELD_MAX
        || !plug_field_ok(name, nlen, val ? val : "", vlen)
        || (f = malloc(sizeof(*f) + llen)) == NULL)
        return NULL;
    f->magic = FIELD_MAGIC;
    f->nlen = (uint16_t)nlen;
    f->llen = (uint16_t)llen;
    f->bit = plug_name_bit(name, nlen);
    memcpy(f->line, name, nlen);
    memcpy(f->line + nlen, ": ", 2);
    if (vlen > 0)
        memcpy(f->line + nlen + 2, val, vlen);
    memcpy(f->line + llen - 2, "\r\n", 2);
    return f;
}

static void
api_field_free(struct cst_field *f)
{
    if (f != NULL && f->magic == FIELD_MAGIC) {
        f->magic = 0;
        free(f);
    }
}

/* send_response: a prepared line into the client's head where it is. */
static inline __attribute__((always_inline)) int
plug_out_line(struct cst_txn *t, const struct cst_field *f)
{
    struct buf *b = t->out;

    if (b->end - t->mark < 4 || plug_out_room(t, f->llen) < 0)
        return -1;
    char *p = b->data + b->end - 2;         /* the blank line's CRLF */
    memcpy(p, f->line, f->llen);
    memcpy(p + f->llen, "\r\n", 2);
    b->end += f->llen;
    t->added |= f->bit;
    return 0;
}

/* field_put on the edits of a request or origin response (kept, applied
 * later): out of send_response's way. */
static __attribute__((noinline)) int
plug_edits_put(struct cst_txn *t, int head, const struct cst_field *f, int how)
{
    struct plug_edits *ed;

    if ((ed = plug_edits_for(t, head, 1)) == NULL
        || (how == CST_FIELD_SET && plug_edit_remove(ed, f->line, f->nlen) < 0)
        || (size_t)ed->addlen + f->llen > sizeof(ed->add))
        return -1;
    memcpy(ed->add + ed->addlen, f->line, f->llen);
    ed->addlen = (uint16_t)(ed->addlen + f->llen);
    return 0;
}

static int
api_field_put(struct cst_txn *t, int head, const struct cst_field *f, int how)
{
    if (f == NULL || f->magic != FIELD_MAGIC || (how != CST_FIELD_SET && how != CST_FIELD_ADD))
        return -1;
    if (head != CST_RESPONSE || t->hook != PLUG_H_SEND_RESPONSE)
        return plug_edits_put(t, head, f, how);
    /* its name was checked when it was prepared */
    if (how == CST_FIELD_SET)
        plug_out_remove(t, f->line, f->nlen, f->bit);
    return plug_out_line(t, f);
}

/* ------------------------------------------------------------------ */
/* The request */

static const char *
api_method(struct cst_txn *t)
{
    return http_method_name(t->rq->r.method);
}

static int
api_url_get(struct cst_txn *t, struct cst_url *u)
{
    const struct http_req *r = &t->rq->r;

    if (t->res != NULL) {
        u->scheme = t->res->scheme;
        u->host = t->res->host;
        u->port = t->res->port;
        u->path = t->res->path;
        u->pathlen = t->res->pathlen;
        return 0;
    }
    /* before remap (read_request): the request's own, host not
     * NUL-terminated there: only the path is given */
    u->scheme = r->https ? "https" : "http";
    u->host = "";
    u->port = r->port;
    u->path = r->base + r->path;
    u->pathlen = r->path_len;
    return 0;
}

static int
api_url_set(struct cst_txn *t, const char *scheme, const char *host, int port,
            const char *path, size_t pathlen)
{
    struct conf_remap_result *res = t->res;
    size_t hl = strlen(host);

    if (t->hook != PLUG_H_REMAP || res == NULL)
        return -1;
    if ((strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
        || hl == 0 || hl >= sizeof(res->host) || pathlen + 1 >= sizeof(res->path)
        || pathlen == 0 || path[0] != '/' || port <= 0 || port > 65535)
        return -1;
    snprintf(res->scheme, sizeof(res->scheme), "%s", scheme);
    memcpy(res->host, host, hl + 1);
    res->port = port;
    memmove(res->path, path, pathlen);
    res->path[pathlen] = '\0';
    res->pathlen = pathlen;
    t->url_set = 1;
    return 0;
}

static size_t
api_key_get(struct cst_txn *t, char *out, size_t cap)
{
    if (t->hook != PLUG_H_REMAP || t->key == NULL || *t->keylen + 1 > cap)
        return 0;
    memcpy(out, t->key, *t->keylen);
    out[*t->keylen] = '\0';
    return *t->keylen;
}

static const char *
api_key_peek(struct cst_txn *t, size_t *len)
{
    if (t->hook != PLUG_H_REMAP || t->key == NULL || *t->keylen == 0)
        return NULL;
    *len = *t->keylen;
    return t->key;
}

static int
api_key_set(struct cst_txn *t, const char *key, size_t len)
{
    if (t->hook != PLUG_H_REMAP || t->key == NULL || len + 1 > t->keycap
        || (key == NULL && len > 0))
        return -1;
    if (len > 0)
        memmove(t->key, key, len);
    t->key[len] = '\0';
    *t->keylen = len;
    t->key_set = 1;
    return 0;
}

static void
api_deny(struct cst_txn *t, int status, const char *text)
{
    if (status < 200 || status > 599)
        status = 403;
    t->deny_status = status;
    snprintf(t->deny_text, sizeof(t->deny_text), "%s", text ? text : http_status_text(status));
}

static const struct sockaddr *
api_client_addr(struct cst_txn *t)
{
    return t->rq->rq_peer;
}

static void **
api_slot(struct cst_txn *t)
{
    uint32_t bit = 1u << t->cur;

    if (!(t->slotset & bit)) {
        t->slotset |= bit;
        t->slot[t->cur] = NULL;
    }
    return &t->slot[t->cur];
}

static int
api_status(struct cst_txn *t)
{
    return t->hook == PLUG_H_READ_RESPONSE || t->hook == PLUG_H_SEND_RESPONSE ? t->status : 0;
}

static void
api_uncacheable(struct cst_txn *t)
{
    if (t->hook == PLUG_H_READ_RESPONSE)
        t->uncacheable = 1;
}

static void
api_ttl_set(struct cst_txn *t, int secs)
{
    if (t->hook == PLUG_H_READ_RESPONSE && secs > 0)
        t->ttl = secs;
}

static int
api_intercept_answer(struct cst_txn *t, int status, int64_t length, cst_body_fn produce,
                     void *arg, void (*done)(void *))
{
    if (t->hook != PLUG_H_INTERCEPT || status < 200 || status > 599 || produce == NULL)
        return -1;
    t->status = status;
    t->plen = length;
    t->produce = produce;
    t->parg = arg;
    t->pdone = done;
    return 0;
}

static void
api_log(struct cst_txn *t, int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    const char *name = panic_plugin ? (const char *)panic_plugin : "?";

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (level < LOG_LVL_DEBUG || level > LOG_LVL_CRIT)
        level = LOG_LVL_INFO;
    if (t != NULL)
        log_write((enum log_level)level, "conn %llu: plugin %s: %s",
                  (unsigned long long)t->rq->rq_id, name, line);
    else
        log_write((enum log_level)level, "plugin %s: %s", name, line);
}

static struct cst_icpt *api_intercept_handle(struct cst_txn *t, void (*done)(void *),
                                             void *arg);
static void api_intercept_resume(struct cst_icpt *ic);
static struct cst_timer *api_timer_add(int ms, void (*fn)(void *), void *arg);
static void api_timer_cancel(struct cst_timer *tm);

static int
api_hooks_off(unsigned hooks)
{
    return conf_plugin_hooks_off(hooks);
}

const struct cst_api plug_api = {
    .abi = CST_PLUGIN_ABI,
    .size = sizeof(struct cst_api),
    .field_get = api_field_get,
    .field_add = api_field_add,
    .field_remove = api_field_remove,
    .field_set = api_field_set,
    .method = api_method,
    .url_get = api_url_get,
    .url_set = api_url_set,
    .key_get = api_key_get,
    .key_set = api_key_set,
    .deny = api_deny,
    .client_addr = api_client_addr,
    .slot = api_slot,
    .status = api_status,
    .uncacheable = api_uncacheable,
    .ttl_set = api_ttl_set,
    .intercept_answer = api_intercept_answer,
    .log = api_log,
    .intercept_handle = api_intercept_handle,
    .intercept_resume = api_intercept_resume,
    .timer_add = api_timer_add,
    .timer_cancel = api_timer_cancel,
    .hooks_off = api_hooks_off,
    .key_peek = api_key_peek,
    .field_prepare = api_field_prepare,
    .field_put = api_field_put,
    .field_free = api_field_free,
};

/* ------------------------------------------------------------------ */
/* The hooks */

static __attribute__((cold)) int
plug_denied(struct req *rq, struct cst_txn *t)
{
    if (t->deny_status == 0) {
        t->deny_status = 403;   /* CST_DENY without a deny call */
        t->deny_text[0] = '\0';
    }
    rq->syn.status = t->deny_status;
    rq->syn.body = t->deny_text[0] ? t->deny_text : http_status_text(t->deny_status);
    rq->syn.result = "TCP_DENIED";
    return 1;
}

int
plug_read_request(struct req *rq)
{
    struct cst_txn *t = plug_begin(rq);
    int rc = CST_CONTINUE;

    if (!(t->plan->hooks & CONF_PH_READ_REQUEST))
        return 0;
    t->hook = PLUG_H_READ_REQUEST;
    t->deny_status = 0;         /* deny() sets deny_text with it */
    PLUG_EACH(t, CONF_PH_READ_REQUEST, pc) {
        rc = PLUG_CALL(pc, t);
        PLUG_DONE();
        if (rc != CST_CONTINUE)
            break;
    }
    return rc == CST_DENY ? plug_denied(rq, t) : 0;
}

enum plug_remap_rc
plug_remap(struct req *rq, const struct conf_remap_rule *rule, struct conf_remap_result *res,
           char *key, size_t *keylen, size_t keycap)
{
    struct cst_txn *t = plug_begin(rq);
    int rc = CST_CONTINUE;

    if (rule != NULL && rule->plan != NULL) {
        rq->rq_prule = rule;
        t->plan = rule->plan;
    }
    t->res = res;               /* url_get's, in the later hooks too */
    if (!(t->plan->hooks & CONF_PH_REMAP))
        return PLUG_OK;         /* no remap hook (a generator's rule) */
    if (t->remapped) {
        /* again after a WAIT: the remap hooks' own changes start over */
        t->req.addlen = t->mark_add;
        t->req.dellen = t->mark_del;
    } else {
        t->mark_add = t->req.addlen;
        t->mark_del = t->req.dellen;
        t->remapped = 1;
    }
    t->hook = PLUG_H_REMAP;
    t->key = key;
    t->keylen = keylen;
    t->keycap = keycap;
    t->url_set = t->key_set = 0;
    t->deny_status = 0;         /* deny() sets deny_text with it */
    PLUG_EACH(t, CONF_PH_REMAP, pc) {
        rc = PLUG_CALL(pc, t);
        PLUG_DONE();
        if (rc != CST_CONTINUE)
            break;
    }
    t->key = NULL;
    if (rc == CST_DENY)
        return plug_denied(rq, t) ? PLUG_DENY : PLUG_DENY;
    return t->url_set && !t->key_set ? PLUG_REKEY : PLUG_OK;
}

void
plug_send_request(struct req *rq)
{
    struct cst_txn *t = &rq->rq_plug;

    if (!(t->plan->hooks & CONF_PH_SEND_REQUEST))
        return;
    t->hook = PLUG_H_SEND_REQUEST;
    PLUG_EACH(t, CONF_PH_SEND_REQUEST, pc) {
        (void)PLUG_CALL(pc, t);
        PLUG_DONE();
    }
}

int
plug_req_removed(struct req *rq, int i)
{
    const struct http_req *r = &rq->r;
    const struct cst_txn *t = &rq->rq_plug;

    return t->req.dellen > 0
           && plug_deleted(&t->req, r->base + r->fields[i].name, r->fields[i].name_len);
}

/* The scratch, room for a head of len bytes rewritten (the added lines
 * and the blank line more); grown only for a head larger than any
 * before, kept for the worker's life: an origin's head may be as large as
 * response_header_max_size, and no request allocates once the largest has
 * come.  0, or -1. */
static int
plug_scratch_room(size_t len)
{
    size_t need = len + PLUG_ADD_MAX + 2;
    char *n;

    if (need <= plug_scratch_size)
        return 0;
    if ((n = realloc(plug_scratch, need)) == NULL)
        return -1;
    plug_scratch = n;
    plug_scratch_size = need;
    return 0;
}

/* Rewrite a head of len bytes: its status line, the fields the response
 * edits keep, the added lines, the blank line; into plug_scratch.
 * Returns its length, or 0 when it does not fit. */
static size_t
plug_head_text(const char *h, size_t len)
{
    const struct plug_edits *ed = &plug_redits;
    const char *p = memchr(h, '\n', len), *end = h + len;
    size_t n;

    if (p == NULL || plug_scratch_room(len) < 0)
        return 0;
    n = (size_t)(++p - h);
    memcpy(plug_scratch, h, n);
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p)), *c;
        size_t ll;
        if (e == NULL)
            break;
        ll = (size_t)(e + 1 - p);
        if (ll <= 2 && (p[0] == '\r' || p[0] == '\n'))
            break;      /* the blank line */
        c = memchr(p, ':', ll);
        if (c == NULL || !plug_deleted(ed, p, (size_t)(c - p))) {
            memcpy(plug_scratch + n, p, ll);
            n += ll;
        }
        p = e + 1;
    }
    memcpy(plug_scratch + n, ed->add, ed->addlen);
    n += ed->addlen;
    memcpy(plug_scratch + n, "\r\n", 2);
    return n + 2;
}

int
plug_read_response(struct req *rq, struct upstream *up)
{
    struct cst_txn *t = &rq->rq_plug;
    struct http_req *resp = up->up_resp;
    struct buf *in = &up->up_in;

    if (!(t->plan->hooks & CONF_PH_READ_RESPONSE))
        return 0;
    plug_redits.addlen = plug_redits.dellen = 0;
    t->hook = PLUG_H_READ_RESPONSE;
    t->resp = resp;
    t->status = resp->status;
    t->uncacheable = 0;
    t->ttl = 0;
    PLUG_EACH(t, CONF_PH_READ_RESPONSE, pc) {
        (void)PLUG_CALL(pc, t);
        PLUG_DONE();
    }
    t->resp = NULL;
    if (t->uncacheable) {
        up->up_store = 0;
        up->up_cdetail = "plugin";
    }
    if (t->ttl > 0)
        rq->rq_pol.ttl_in_cache = t->ttl;
    if (plug_redits.addlen == 0 && plug_redits.dellen == 0)
        return 0;
    /* the head, rewritten where it was, and parsed again */
    size_t oldlen = resp->start + resp->head_len;
    size_t nl = plug_head_text(in->data + in->start + resp->start, resp->head_len);
    size_t body = in->end - in->start - oldlen;
    if (nl == 0)
        return -1;
    if (nl <= oldlen) {
        in->start += oldlen - nl;
    } else if (in->start >= nl - oldlen) {
        in->start -= nl - oldlen;
    } else {
        if (buf_grow(in, nl - oldlen) < 0)
            return -1;
        memmove(in->data + in->start + nl, in->data + in->start + oldlen, body);
        in->end += nl - oldlen;
    }
    memcpy(in->data + in->start, plug_scratch, nl);
    http_req_reset(resp);
    if (http_head_scan(resp, in->data + in->start, in->end - in->start,
                       &wk->resp_limits) != HTTP_OK
        || http_resp_parse(resp, in->data + in->start + resp->start, up->up_method) != HTTP_OK)
        return -1;
    return 0;
}

int
plug_send_response(struct req *rq, struct buf *b, size_t mark, int status,
                   const struct cache_obj *hit)
{
    struct cst_txn *t = &rq->rq_plug;

    if (!(t->plan->hooks & CONF_PH_SEND_RESPONSE))
        return 0;
    /* the hooks' field calls edit b[mark..end) in place */
    t->hook = PLUG_H_SEND_RESPONSE;
    t->out = b;
    t->mark = mark;
    t->status = status;
    t->hit = hit;
    t->names = t->added = 0;
    PLUG_EACH(t, CONF_PH_SEND_RESPONSE, pc) {
        (void)PLUG_CALL(pc, t);
        PLUG_DONE();
    }
    t->out = NULL;
    return 0;
}

static __attribute__((noinline)) void
plug_txn_end_hooks(struct cst_txn *t)
{
    PLUG_EACH(t, CONF_PH_TXN_END, pc) {
        panic_plugin = pc->name;
        t->cur = pc->k;
        pc->fn.end(pc->inst, t);
        PLUG_DONE();
    }
}

void
plug_txn_end(struct req *rq)
{
    struct cst_txn *t = &rq->rq_plug;

    t->hook = PLUG_H_END;
    if (t->plan->hooks & CONF_PH_TXN_END)
        plug_txn_end_hooks(t);
    rq->rq_plugged = 0;
    rq->rq_prule = NULL;
}

/* ------------------------------------------------------------------ */
/* Intercepts */

enum icpt_state {
    ICPT_NEW = 0,       /* a handle taken in the hook, nothing set up yet */
    ICPT_HEAD,          /* taken, the hook said CST_AGAIN: no head yet */
    ICPT_BODY,          /* the head and body are being written */
    ICPT_PAUSED,        /* the producer said CST_AGAIN */
};

struct cst_icpt {
    uint32_t         magic;
    enum icpt_state  state;
    int              fd;              /* our end of the pair, -1: none yet */
    struct event     ev;
    unsigned         ev_write:1;      /* ev waits for EV_WRITE too */
    unsigned         resumed:1;       /* intercept_resume since the last call */
    struct req      *rq;              /* valid while fd's peer is open: the
                                         transaction closes it when it ends */
    const struct conf_plugin *pl;     /* the intercepting instance (its config
                                         outlives us: the worker's generation) */
    int              k;               /* its slot */
    cst_body_fn      produce;
    void            *arg;
    void           (*done)(void *);   /* intercept_answer's */
    void           (*hdone)(void *);  /* intercept_handle's */
    void            *harg;
    uint64_t         off;
    int64_t          len;
    int              eof;
    size_t           hs, he;          /* bytes of data still to write */
    struct cst_icpt *next;            /* the free list */
    char             data[BUF_SIZE];
};

static struct cst_icpt *plug_icpt_free;

static struct cst_icpt *
plug_icpt_get(struct req *rq)
{
    struct cst_icpt *ic = plug_icpt_free;

    if (ic != NULL)
        plug_icpt_free = ic->next;
    else if ((ic = malloc(sizeof(*ic))) == NULL)
        return NULL;
    ic->magic = ICPT_MAGIC;
    ic->state = ICPT_NEW;
    ic->fd = -1;
    ic->ev_write = ic->resumed = 0;
    ic->rq = rq;
    ic->pl = NULL;
    ic->produce = NULL;
    ic->done = ic->hdone = NULL;
    ic->off = 0;
    ic->eof = 0;
    ic->hs = ic->he = 0;
    return ic;
}

/* The intercept is over: the done functions, and the handle is free. */
static void
plug_icpt_put(struct cst_icpt *ic)
{
    const char *name = ic->pl ? ic->pl->name : "?";
    void (*done)(void *) = ic->done, (*hdone)(void *) = ic->hdone;

    ic->magic = 0;
    ic->next = plug_icpt_free;
    plug_icpt_free = ic;
    panic_plugin = name;
    if (done)
        done(ic->arg);
    if (hdone)
        hdone(ic->harg);
    panic_plugin = NULL;
}

static void
plug_icpt_end(struct cst_icpt *ic)
{
    char sink[4096];

    event_del(&ic->ev);
    while (read(ic->fd, sink, sizeof(sink)) > 0)
        ;
    close(ic->fd);
    plug_icpt_put(ic);
}

static void plug_icpt_on(evutil_socket_t fd, short what, void *arg);

/* Wait for the transaction's bytes (its going away), and for room to
 * write when write. */
static void
plug_icpt_arm(struct cst_icpt *ic, int write)
{
    if (ic->ev_write == (unsigned)(write != 0))
        return;
    event_del(&ic->ev);
    event_assign(&ic->ev, wk->base, ic->fd, EV_READ | EV_PERSIST | (write ? EV_WRITE : 0),
                 plug_icpt_on, ic);
    event_add(&ic->ev, NULL);
    ic->ev_write = write != 0;
}

/* The head, of the plugin's status and fields and our framing, into
 * ic->data (the hook just answered with t->produce).  0 or -1. */
static int
plug_icpt_head(struct cst_icpt *ic, struct cst_txn *t)
{
    char *p = ic->data;
    size_t len = (size_t)snprintf(p, sizeof(ic->data), "HTTP/1.1 %d %s\r\n", t->status,
                                  http_status_text(t->status));

    ic->arg = t->parg;
    ic->done = t->pdone;        /* called at the end, this failure included */
    if (len + plug_redits.addlen + 64 > sizeof(ic->data))
        return -1;
    memcpy(p + len, plug_redits.add, plug_redits.addlen);
    len += plug_redits.addlen;
    /* 204, 205 and 304 have no content whatever the plugin produces (RFC
     * 9110 15.3.5-15.3.6, 15.4.5): none is asked of it.  A 204 has no
     * Content-Length (8.6), a 205 says 0; a 304's is the
     * representation's, as the plugin gave it. */
    int none = t->status == 204 || t->status == 205 || t->status == 304;
    if (t->status == 205)
        len += (size_t)snprintf(p + len, sizeof(ic->data) - len, "Content-Length: 0\r\n");
    else if (t->plen >= 0 && t->status != 204)
        len += (size_t)snprintf(p + len, sizeof(ic->data) - len, "Content-Length: %lld\r\n",
                                (long long)t->plen);
    len += (size_t)snprintf(p + len, sizeof(ic->data) - len, "Connection: close\r\n\r\n");
    ic->produce = t->produce;
    ic->off = 0;
    ic->len = none ? 0 : t->plen;
    ic->eof = none || t->plen == 0 || ic->rq->r.method == HTTP_HEAD;
    ic->hs = 0;
    ic->he = len;
    ic->state = ICPT_BODY;
    return 0;
}

/* The intercept hook of a deferred intercept, called again: the request
 * is still there (the pair's other end is open).  0, or -1: it failed. */
static int
plug_icpt_rehook(struct cst_icpt *ic)
{
    struct cst_txn *t = &ic->rq->rq_plug;
    int rc;

    t->hook = PLUG_H_INTERCEPT;
    t->icpt = ic;
    t->produce = NULL;
    plug_redits.addlen = plug_redits.dellen = 0;
    ic->resumed = 0;
    panic_plugin = ic->pl->name;
    t->cur = ic->k;
    rc = ic->pl->p->intercept(ic->pl->inst, t);
    PLUG_DONE();
    if (rc == 1 && t->produce != NULL && plug_icpt_head(ic, t) == 0) {
        plug_icpt_arm(ic, 1);
        return 0;
    }
    if (rc == CST_AGAIN) {
        if (ic->resumed)
            event_active(&ic->ev, EV_WRITE, 0);
        return 0;
    }
    log_warn("conn %llu: plugin %s: its deferred intercept did not answer",
             (unsigned long long)ic->rq->rq_id, ic->pl->name);
    return -1;
}

/* Fill ic->data from the producer.  1: data to write; 0: wait (CST_AGAIN);
 * -1: the intercept is over (ended, or cut short). */
static int
plug_icpt_produce(struct cst_icpt *ic)
{
    size_t cap = sizeof(ic->data);
    ssize_t n = 0;

    if (ic->len >= 0 && (uint64_t)ic->len - ic->off < cap)
        cap = (size_t)((uint64_t)ic->len - ic->off);
    if (cap > 0) {
        ic->resumed = 0;
        panic_plugin = ic->pl->name;
        n = ic->produce(ic->arg, ic->off, ic->data, cap);
        panic_plugin = NULL;
    }
    if (n == CST_AGAIN) {
        if (ic->resumed) {
            event_active(&ic->ev, EV_WRITE, 0);     /* resumed at once */
        } else {
            ic->state = ICPT_PAUSED;
            plug_icpt_arm(ic, 0);
        }
        return 0;
    }
    if (n < 0 || (n == 0 && ic->len >= 0 && ic->off < (uint64_t)ic->len)) {
        log_warn("plugin %s: its body ended at %llu bytes", ic->pl->name,
                 (unsigned long long)ic->off);
        return -1;
    }
    if (n == 0) {
        ic->eof = 1;
        return 1;
    }
    if ((size_t)n > cap)
        n = (ssize_t)cap;
    ic->hs = 0;
    ic->he = (size_t)n;
    ic->off += (uint64_t)n;
    if (ic->len >= 0 && ic->off == (uint64_t)ic->len)
        ic->eof = 1;
    return 1;
}

static void
plug_icpt_on(evutil_socket_t fd, short what, void *arg)
{
    struct cst_icpt *ic = arg;
    char sink[4096];

    magic_check(ic->magic, ICPT_MAGIC);
    /* the request (and any body) the transaction sends: not ours to read;
     * its end: the transaction went away.  Before the hook is called
     * again, read even without EV_READ: the request is known to be there
     * only while this end is open. */
    if ((what & EV_READ) || ic->state == ICPT_HEAD) {
        ssize_t r;
        while ((r = read(fd, sink, sizeof(sink))) > 0)
            ;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            plug_icpt_end(ic);
            return;
        }
    }
    if (!(what & EV_WRITE))
        return;
    if (ic->state == ICPT_HEAD) {
        if (ic->resumed && plug_icpt_rehook(ic) < 0)
            plug_icpt_end(ic);
        return;
    }
    if (ic->state == ICPT_PAUSED) {
        if (!ic->resumed)
            return;
        ic->state = ICPT_BODY;
        plug_icpt_arm(ic, 1);
    }
    for (int round = 0; round < 8; round++) {
        if (ic->hs == ic->he) {
            if (ic->eof) {
                plug_icpt_end(ic);
                return;
            }
            int rc = plug_icpt_produce(ic);
            if (rc < 0) {
                plug_icpt_end(ic);
                return;
            }
            if (rc == 0 || ic->hs == ic->he)
                return;     /* waits for intercept_resume, or the end next round */
        }
        ssize_t w = send(fd, ic->data + ic->hs, ic->he - ic->hs, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            plug_icpt_end(ic);
            return;
        }
        ic->hs += (size_t)w;
    }
}

static struct cst_icpt *
api_intercept_handle(struct cst_txn *t, void (*done)(void *), void *arg)
{
    if (t->hook != PLUG_H_INTERCEPT)
        return NULL;
    if (t->icpt == NULL && (t->icpt = plug_icpt_get(t->rq)) == NULL)
        return NULL;
    if (done != NULL) {
        t->icpt->hdone = done;
        t->icpt->harg = arg;
    }
    return t->icpt;
}

static void
api_intercept_resume(struct cst_icpt *ic)
{
    if (ic == NULL || ic->magic != ICPT_MAGIC)
        return;
    ic->resumed = 1;
    /* not set up yet (in its first intercept hook): plug_intercept looks */
    if (ic->fd >= 0)
        event_active(&ic->ev, EV_WRITE, 0);
}

/* The intercept hooks in order; the one that takes the request (1 with
 * intercept_answer, CST_AGAIN with a handle): *kp, with t->icpt set; or
 * NULL. */
static const struct conf_plugin *
plug_intercept_hooks(struct cst_txn *t, int *kp, int *again)
{
    if (!(t->plan->hooks & CONF_PH_INTERCEPT))
        return NULL;
    t->hook = PLUG_H_INTERCEPT;
    PLUG_EACH(t, CONF_PH_INTERCEPT, pc) {
        plug_redits.addlen = plug_redits.dellen = 0;
        t->produce = NULL;
        t->icpt = NULL;
        int rc = PLUG_CALL(pc, t);
        PLUG_DONE();
        if ((rc == 1 && t->produce != NULL) || (rc == CST_AGAIN && t->icpt != NULL)) {
            *kp = pc->k;
            *again = rc == CST_AGAIN;
            return pc->pl;
        }
        if (t->icpt != NULL) {      /* a handle taken, the request not */
            t->icpt->pl = pc->pl;
            plug_icpt_put(t->icpt);
            t->icpt = NULL;
        }
    }
    return NULL;
}

int
plug_intercept(struct req *rq, struct upstream *up, origin_ready_fn ready,
               origin_attach_fn attach)
{
    struct cst_txn *t = &rq->rq_plug;
    int k = 0, again = 0, sv[2];
    const struct conf_plugin *by = plug_intercept_hooks(t, &k, &again);
    struct cst_icpt *ic;

    if (by == NULL)
        return 0;
    if ((ic = t->icpt) == NULL && (ic = plug_icpt_get(rq)) == NULL)
        return -1;
    t->icpt = NULL;
    ic->pl = by;
    ic->k = k;
    if (again)
        ic->state = ICPT_HEAD;
    if (!again && plug_icpt_head(ic, t) < 0) {
        log_warn("conn %llu: plugin %s: its answer's head is too large",
                 (unsigned long long)rq->rq_id, by->name);
        plug_icpt_put(ic);
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        log_warn("conn %llu: plugin %s: socketpair: %s", (unsigned long long)rq->rq_id,
                 by->name, strerror(errno));
        plug_icpt_put(ic);
        return -1;
    }
    ic->fd = sv[1];
    ic->ev_write = !again;
    event_assign(&ic->ev, wk->base, sv[1], EV_READ | EV_PERSIST | (again ? 0 : EV_WRITE),
                 plug_icpt_on, ic);
    event_add(&ic->ev, NULL);
    if (again && ic->resumed)
        event_active(&ic->ev, EV_WRITE, 0);
    up->up_fd = sv[0];
    up->up_ready = ready;
    up->up_attach = attach;
    return 1;
}

/* ------------------------------------------------------------------ */
/* Timers */

#define TIMER_MAGIC 0x504c544du         /* "PLTM" */

struct cst_timer {
    uint32_t          magic;
    struct event      ev;
    void            (*fn)(void *);
    void             *arg;
    const char       *name;           /* the plugin that set it */
    struct cst_timer *next;           /* the free list */
};

static struct cst_timer *plug_timer_free;

static void
plug_timer_on(evutil_socket_t fd, short what, void *arg)
{
    struct cst_timer *tm = arg;
    void (*fn)(void *) = tm->fn;
    void *farg = tm->arg;
    const char *prev = panic_plugin;

    (void)fd;
    (void)what;
    magic_check(tm->magic, TIMER_MAGIC);
    /* free before the call: fn may set another */
    tm->magic = 0;
    tm->next = plug_timer_free;
    plug_timer_free = tm;
    panic_plugin = tm->name;
    fn(farg);
    panic_plugin = prev;
}

static struct cst_timer *
api_timer_add(int ms, void (*fn)(void *), void *arg)
{
    struct cst_timer *tm = plug_timer_free;
    struct timeval tv;

    if (wk == NULL || fn == NULL || ms < 0)
        return NULL;
    if (tm != NULL)
        plug_timer_free = tm->next;
    else if ((tm = malloc(sizeof(*tm))) == NULL)
        return NULL;
    tm->magic = TIMER_MAGIC;
    tm->fn = fn;
    tm->arg = arg;
    tm->name = panic_plugin ? (const char *)panic_plugin : "?";
    evtimer_assign(&tm->ev, wk->base, plug_timer_on, tm);
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    evtimer_add(&tm->ev, &tv);
    return tm;
}

static void
api_timer_cancel(struct cst_timer *tm)
{
    if (tm == NULL || tm->magic != TIMER_MAGIC)
        return;
    evtimer_del(&tm->ev);
    tm->magic = 0;
    tm->next = plug_timer_free;
    plug_timer_free = tm;
}
