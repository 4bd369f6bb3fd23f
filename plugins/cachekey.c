/*
 * plugins/cachekey.c: cachekey.so, the common cache-key changes (named
 * after ATS's cachekey plugin's options):
 *
 *   --remove-all-params=true      the key has no query
 *   --exclude-params=a,b          the key's query without these
 *   --include-params=a,b          the key's query with only these
 *   --include-headers=X-A,X-B     the values of these request fields are
 *                                 appended to the key (" X-A:value", a
 *                                 space or '%' in it as %20 or %25; a
 *                                 field given twice: " X-A:one,two");
 *                                 a request whose key has no room for
 *                                 one is not cached (key_set, length 0)
 *
 * The origin is still asked with the whole URL: only the key changes.
 * The query keeps its order.  Nothing is allocated per request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cistern/plugin.h"

#define CK_KEY_MAX 4096

struct ck {
    const struct cst_api *api;
    int   remove_all;
    char *exclude, *include, *headers;   /* comma lists, or NULL */
};

static void
ck_destroy(void *inst)
{
    struct ck *k = inst;

    free(k->exclude);
    free(k->include);
    free(k->headers);
    free(k);
}

static void *
ck_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    struct ck *k = calloc(1, sizeof(*k));

    if (k == NULL)
        return NULL;
    k->api = api;
    if (!CST_API_HAS(api, key_peek)) {
        snprintf(err, errlen, "this Cistern's plugin API is older than cachekey.so's");
        free(k);
        return NULL;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--remove-all-params=true") == 0)
            k->remove_all = 1;
        else if (strcmp(a, "--remove-all-params=false") == 0)
            k->remove_all = 0;
        else if (strncmp(a, "--exclude-params=", 17) == 0 && a[17])
            k->exclude = strdup(a + 17);
        else if (strncmp(a, "--include-params=", 17) == 0 && a[17])
            k->include = strdup(a + 17);
        else if (strncmp(a, "--include-headers=", 18) == 0 && a[18])
            k->headers = strdup(a + 18);
        else {
            snprintf(err, errlen, "unknown argument \"%s\" (expected --remove-all-params=, "
                     "--exclude-params=, --include-params= or --include-headers=)", a);
            ck_destroy(k);
            return NULL;
        }
    }
    return k;
}

/* Is name (n bytes) in the comma list? */
static int
ck_listed(const char *list, const char *name, size_t n)
{
    const char *p = list;

    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && memcmp(p, name, n) == 0)
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* The query's '?' in key (n bytes), or NULL: in its URL only, before the
 * first space (a space is never in a URL; after it come the pristine Host
 * and the fields an instance before this one added, whose values may hold
 * a '?'). */
static const char *
ck_query(const char *key, size_t n)
{
    const char *q = memchr(key, '?', n);    /* a key without one: one search */

    return q && memchr(key, ' ', (size_t)(q - key)) == NULL ? q : NULL;
}

/* The key's query without the parameters this instance drops: key[0..n)
 * rewritten in place, its new length. */
static size_t
ck_params(const struct ck *k, char *key, size_t n, char *qm)
{
    char *w = qm, *p = qm + 1, *end = key + n, *sp = memchr(qm, ' ', n - (size_t)(qm - key));
    char tail[CK_KEY_MAX];
    size_t tl = 0;

    if (sp != NULL) {
        /* a part after the URL (pristine Host): kept */
        tl = (size_t)(end - sp);
        memcpy(tail, sp, tl);
        end = sp;
    }
    if (!k->remove_all) {
        while (p < end) {
            char *e = memchr(p, '&', (size_t)(end - p)), *eq;
            size_t pl;
            if (e == NULL)
                e = end;
            eq = memchr(p, '=', (size_t)(e - p));
            pl = (size_t)((eq ? eq : e) - p);
            int keep = (k->include == NULL || ck_listed(k->include, p, pl))
                       && !(k->exclude && ck_listed(k->exclude, p, pl));
            if (keep && e > p) {
                char sep = w == qm ? '?' : '&';
                *w++ = sep;
                memmove(w, p, (size_t)(e - p));
                w += e - p;
            }
            p = e + 1;
        }
    }
    memcpy(w, tail, tl);
    return (size_t)(w - key) + tl;
}

/* s[0..len) after key[0..*np) (CK_KEY_MAX bytes with its NUL); esc: its
 * spaces and '%'s as %20 and %25.  -1 when it does not fit. */
static int
ck_put(char *key, size_t *np, const char *s, size_t len, int esc)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = *np;

    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        int e = esc && (ch == ' ' || ch == '%');
        if (n + (e ? 3 : 1) > CK_KEY_MAX - 1)
            return -1;
        if (e) {
            key[n++] = '%';
            key[n++] = hex[ch >> 4];
            key[n++] = hex[ch & 15];
        } else {
            key[n++] = (char)ch;
        }
    }
    *np = n;
    return 0;
}

/* Line nth of field NAME, value v, after the key: " NAME:v" for the
 * first, ",v" for the next ones (the field's lines as one list).  Its
 * value's spaces are escaped, so a value cannot hold the next field's
 * " NAME:" (X-T "a X-U:b" is not X-T "a" and X-U "b").  -1: no room. */
static int
ck_field(char *key, size_t *np, const char *name, size_t nlen, int nth, const char *v,
         size_t vl)
{
    if (nth == 0) {
        if (ck_put(key, np, " ", 1, 0) < 0 || ck_put(key, np, name, nlen, 0) < 0
            || ck_put(key, np, ":", 1, 0) < 0)
            return -1;
    } else if (ck_put(key, np, ",", 1, 0) < 0) {
        return -1;
    }
    return ck_put(key, np, v, vl, 1);
}

/* The key cur (n bytes) changed, in a copy, and set. */
static __attribute__((noinline)) int
ck_rekey(struct ck *k, struct cst_txn *t, const char *cur, size_t n)
{
    const struct cst_api *api = k->api;
    char key[CK_KEY_MAX];
    size_t n0 = n;
    char *qm;

    if (n >= sizeof(key))
        return CST_CONTINUE;        /* too long to change */
    memcpy(key, cur, n);
    key[n] = '\0';
    qm = (char *)ck_query(key, n);
    if (qm != NULL && (k->remove_all || k->exclude || k->include))
        n = ck_params(k, key, n, qm);
    /* the fields' values */
    for (const char *h = k->headers; h && *h;) {
        const char *e = strchr(h, ','), *v;
        size_t hl = e ? (size_t)(e - h) : strlen(h), vl;
        for (int nth = 0; api->field_get(t, CST_REQUEST, h, hl, nth, &v, &vl); nth++)
            if (ck_field(key, &n, h, hl, nth, v, vl) < 0) {
                /* a key without the value would be another value's too:
                 * no key, the request is not cached */
                api->key_set(t, NULL, 0);
                return CST_CONTINUE;
            }
        h = e ? e + 1 : NULL;
    }
    /* a parameter taken out and a field put in may leave the length as
     * it was: the bytes tell */
    if (n > 0 && (n != n0 || memcmp(key, cur, n) != 0))
        api->key_set(t, key, n);
    return CST_CONTINUE;
}

static int
ck_remap(void *inst, struct cst_txn *t)
{
    struct ck *k = inst;
    size_t n;
    const char *cur = k->api->key_peek(t, &n);

    if (cur == NULL)
        return CST_CONTINUE;        /* not cacheable anyway */
    /* the key is "scheme://authority/path?query[ more]": a key without a
     * query and no field to add is looked at, not copied (nor is a frame
     * of two keys' room set up) */
    if (ck_query(cur, n) == NULL && k->headers == NULL)
        return CST_CONTINUE;
    return ck_rekey(k, t, cur, n);
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "cachekey",
    .create = ck_create,
    .destroy = ck_destroy,
    .remap = ck_remap,
};
