/*
 * plugins/headers.c: headers.so, set, add or remove fields per rule.
 *
 * Each @pparam= is an operation or a condition:
 *
 *   set-req:NAME:VALUE  add-req:NAME:VALUE  rm-req:NAME
 *       the request as the origin gets it (applied at remap)
 *   set-origin:NAME:VALUE  add-origin:NAME:VALUE  rm-origin:NAME
 *       the origin's response, before it is stored (read_response)
 *   set-resp:NAME:VALUE  add-resp:NAME:VALUE  rm-resp:NAME
 *       the response the client gets, hits included (send_response)
 *   if-status=N[,N...]   the operations after it apply only to a
 *                        response with one of these statuses
 *   if-field=NAME[=VALUE]  ... only when the request has field NAME
 *                        (with exactly that value)
 *   always               the operations after it apply unconditionally
 *
 * e.g. `@plugin=headers.so @pparam=set-resp:X-Served-By:edge1
 *       @pparam=if-status=404 @pparam=set-resp:Cache-Control:no-store`.
 * The fields the proxy frames messages and routes by (Content-Length,
 * Transfer-Encoding, Connection and the hop-by-hop fields, Host) are
 * refused at load: the API would refuse every change of them.
 * Nothing is allocated per request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cistern/plugin.h"

enum hop { H_SET, H_ADD, H_RM };
enum where { W_REQ, W_ORIGIN, W_RESP };

struct hcond {
    int      nstatus;
    int      status[8];
    char    *field, *fvalue;          /* NULL: no field condition */
    size_t   flen, fvlen;
};

struct hrule {
    enum hop   op;
    enum where where;
    char      *name, *value;
    size_t     nlen, vlen;
    int        cond;                  /* index into conds, -1: none */
    struct cst_field *f;              /* set and add: checked at load */
};

struct hdrs {
    const struct cst_api *api;
    struct hrule *rules;
    int           nrules;
    struct hcond *conds;
    int           nconds;
    int           has[3];             /* how many rules for W_REQ, W_ORIGIN, W_RESP */
    int           start[3];           /* where they start in rules (sorted by
                                         where, in order within each) */
};

static void
hdrs_destroy(void *inst)
{
    struct hdrs *h = inst;

    for (int i = 0; i < h->nrules; i++) {
        free(h->rules[i].name);
        free(h->rules[i].value);
        if (h->rules[i].f)
            h->api->field_free(h->rules[i].f);
    }
    for (int i = 0; i < h->nconds; i++) {
        free(h->conds[i].field);
        free(h->conds[i].fvalue);
    }
    free(h->rules);
    free(h->conds);
    free(h);
}

static int
hdrs_cond(struct hdrs *h, const char *a, char *err, size_t errlen)
{
    struct hcond c, *nc;

    memset(&c, 0, sizeof(c));
    if (strncmp(a, "if-status=", 10) == 0) {
        const char *p = a + 10;
        while (*p) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p || v < 100 || v > 999 || c.nstatus == 8 || (*e && *e != ',')) {
                snprintf(err, errlen, "\"%s\": expected up to 8 statuses, comma-separated", a);
                return -1;
            }
            c.status[c.nstatus++] = (int)v;
            p = *e ? e + 1 : e;
        }
    } else {
        const char *f = a + 9, *eq = strchr(f, '=');
        if (*f == '\0' || eq == f) {
            snprintf(err, errlen, "\"%s\": expected if-field=NAME[=VALUE]", a);
            return -1;
        }
        c.field = eq ? strndup(f, (size_t)(eq - f)) : strdup(f);
        c.fvalue = eq ? strdup(eq + 1) : NULL;
        if (c.field == NULL || (eq && c.fvalue == NULL)) {
            free(c.field);
            free(c.fvalue);
            return -1;
        }
        c.flen = strlen(c.field);
        c.fvlen = c.fvalue ? strlen(c.fvalue) : 0;
    }
    if ((nc = realloc(h->conds, sizeof(*nc) * (size_t)(h->nconds + 1))) == NULL)
        return -1;
    h->conds = nc;
    nc[h->nconds++] = c;
    return 0;
}

static void *
hdrs_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    struct hdrs *h = calloc(1, sizeof(*h));
    int cond = -1;

    if (h == NULL)
        return NULL;
    h->api = api;
    if (!CST_API_HAS(api, field_free)) {
        snprintf(err, errlen, "this Cistern's plugin API is older than headers.so's");
        free(h);
        return NULL;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *c1, *c2;
        static const struct { const char *p; enum hop op; enum where w; } ops[] = {
            { "set-req:", H_SET, W_REQ },       { "add-req:", H_ADD, W_REQ },
            { "rm-req:", H_RM, W_REQ },         { "set-origin:", H_SET, W_ORIGIN },
            { "add-origin:", H_ADD, W_ORIGIN }, { "rm-origin:", H_RM, W_ORIGIN },
            { "set-resp:", H_SET, W_RESP },     { "add-resp:", H_ADD, W_RESP },
            { "rm-resp:", H_RM, W_RESP },
        };
        size_t k, nops = sizeof(ops) / sizeof(ops[0]);

        if (strcmp(a, "always") == 0) {
            cond = -1;
            continue;
        }
        if (strncmp(a, "if-status=", 10) == 0 || strncmp(a, "if-field=", 9) == 0) {
            if (hdrs_cond(h, a, err, errlen) < 0)
                goto fail;
            cond = h->nconds - 1;
            continue;
        }
        for (k = 0; k < nops; k++)
            if (strncmp(a, ops[k].p, strlen(ops[k].p)) == 0)
                break;
        if (k == nops) {
            snprintf(err, errlen, "unknown argument \"%s\" (expected set-, add- or rm- "
                     "with req:, origin: or resp:, if-status=, if-field= or always)", a);
            goto fail;
        }
        c1 = a + strlen(ops[k].p);
        c2 = strchr(c1, ':');
        if (*c1 == '\0' || c2 == c1 || (ops[k].op != H_RM && c2 == NULL)
            || (ops[k].op == H_RM && c2 != NULL)) {
            snprintf(err, errlen, "\"%s\": expected %sNAME%s", a, ops[k].p,
                     ops[k].op == H_RM ? "" : ":VALUE");
            goto fail;
        }
        struct hrule *nr = realloc(h->rules, sizeof(*nr) * (size_t)(h->nrules + 1));
        if (nr == NULL)
            goto fail;
        h->rules = nr;
        nr += h->nrules++;
        nr->f = NULL;
        nr->op = ops[k].op;
        nr->where = ops[k].w;
        nr->cond = cond;
        nr->name = c2 ? strndup(c1, (size_t)(c2 - c1)) : strdup(c1);
        nr->value = c2 ? strdup(c2 + 1) : NULL;
        if (nr->name == NULL || (c2 && nr->value == NULL))
            goto fail;
        nr->nlen = strlen(nr->name);
        nr->vlen = nr->value ? strlen(nr->value) : 0;
        /* a name to remove is checked as one to set: the API refuses both */
        nr->f = api->field_prepare(nr->name, nr->nlen, nr->value, nr->vlen);
        if (nr->f == NULL) {
            snprintf(err, errlen, "\"%s\": a field name is a token (no space, "
                     "control byte or ':') and not one the proxy frames or routes by "
                     "(Content-Length, Transfer-Encoding, Connection, Keep-Alive, "
                     "Proxy-Connection, TE, Trailer, Upgrade, Content-Range, Host), a value "
                     "has no CR, LF or NUL", a);
            goto fail;
        }
        if (nr->op == H_RM) {
            api->field_free(nr->f);
            nr->f = NULL;
        }
        h->has[nr->where]++;
    }
    if (h->nrules == 0) {
        snprintf(err, errlen, "no operation given (e.g. @pparam=set-resp:X-A:1)");
        goto fail;
    }
    /* the rules sorted by where, in their order within each: a hook walks
     * its own run of them */
    struct hrule *sorted = malloc(sizeof(*sorted) * (size_t)h->nrules);
    if (sorted == NULL)
        goto fail;
    for (int w = 0, n = 0; w < 3; w++) {
        h->start[w] = n;
        for (int i = 0; i < h->nrules; i++)
            if (h->rules[i].where == (enum where)w)
                sorted[n++] = h->rules[i];
    }
    free(h->rules);
    h->rules = sorted;
    /* the hooks this instance's operations need, no call for the others */
    api->hooks_off((h->has[W_REQ] ? 0 : CST_HOOK_REMAP)
                   | (h->has[W_ORIGIN] ? 0 : CST_HOOK_READ_RESPONSE)
                   | (h->has[W_RESP] ? 0 : CST_HOOK_SEND_RESPONSE));
    return h;
fail:
    hdrs_destroy(h);
    return NULL;
}

/* Does condition ci (>= 0) hold?  *status: the response's, asked for
 * (from api->status) only when a condition needs it, -1 until then. */
static int
hdrs_cond_ok(struct hdrs *h, struct cst_txn *t, int ci, int *status)
{
    const struct hcond *c = &h->conds[ci];
    const char *v;
    size_t vl;

    if (c->nstatus > 0) {
        int ok = 0;
        if (*status < 0)
            *status = h->api->status(t);
        for (int i = 0; i < c->nstatus; i++)
            ok |= c->status[i] == *status;
        if (!ok)
            return 0;
    }
    if (c->field != NULL) {
        if (!h->api->field_get(t, CST_REQUEST, c->field, c->flen, 0, &v, &vl))
            return 0;
        if (c->fvalue && (vl != c->fvlen || memcmp(v, c->fvalue, vl) != 0))
            return 0;
    }
    return 1;
}

/* Inlined in each hook: no call more per hook. */
static inline __attribute__((always_inline)) int
hdrs_apply(struct hdrs *h, struct cst_txn *t, enum where w, int head)
{
    int status = -1;

    for (const struct hrule *r = h->rules + h->start[w], *end = r + h->has[w]; r < end; r++) {
        if (r->cond >= 0 && !hdrs_cond_ok(h, t, r->cond, &status))
            continue;
        switch (r->op) {
        case H_SET:
            h->api->field_put(t, head, r->f, CST_FIELD_SET);
            break;
        case H_ADD:
            h->api->field_put(t, head, r->f, CST_FIELD_ADD);
            break;
        case H_RM:
            h->api->field_remove(t, head, r->name, r->nlen);
            break;
        }
    }
    return CST_CONTINUE;
}

static int
hdrs_remap(void *inst, struct cst_txn *t)
{
    return hdrs_apply(inst, t, W_REQ, CST_REQUEST);
}

static int
hdrs_read_response(void *inst, struct cst_txn *t)
{
    return hdrs_apply(inst, t, W_ORIGIN, CST_RESPONSE);
}

static int
hdrs_send_response(void *inst, struct cst_txn *t)
{
    return hdrs_apply(inst, t, W_RESP, CST_RESPONSE);
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "headers",
    .create = hdrs_create,
    .destroy = hdrs_destroy,
    .remap = hdrs_remap,
    .read_response = hdrs_read_response,
    .send_response = hdrs_send_response,
};
