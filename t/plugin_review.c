/*
 * t/plugin_review.c: rv.so, a test plugin for the plugin-plan review
 * (t/test_review.py, "Plugin plans review, 2026-12-02").  Its arguments:
 *
 *   off=HEX      create() calls hooks_off(HEX) (twice when off2=HEX too);
 *                their answers go in X-Rv-Create
 *   put-req      send_response puts a prepared field on CST_REQUEST
 *                (not allowed there): its answer in X-Rv-Put-Req
 *   set=NAME:V   send_response puts a prepared NAME: V (CST_FIELD_SET)
 *   tag=T        send_response adds X-Rv: T plus the hooks this instance
 *                was called for so far on the request (bits, per slot)
 *   deny=N[:T]   remap calls deny(N, T) (T absent: NULL) and returns
 *                CST_DENY; deny-late=N does the same and returns
 *                CST_CONTINUE (the request goes on); deny-bare returns
 *                CST_DENY without a deny call
 *   crash-end    txn_end dereferences NULL
 *   crash-send   send_response dereferences NULL
 *
 * Every instance's send_response adds X-Rv-Late: hooks_off's answer there
 * (outside create: -1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/plugin.h"

struct rv {
    const struct cst_api *api;
    char   tag[32], create_rc[32];
    int    put_req, crash_end, crash_send;
    int    deny, deny_rc;               /* deny's status (-1: no call), remap's answer */
    char   deny_text[32];
    int    deny_has_text;
    struct cst_field *put, *set;
};

static void
rv_destroy(void *inst)
{
    struct rv *r = inst;

    if (r->put)
        r->api->field_free(r->put);
    if (r->set)
        r->api->field_free(r->set);
    free(r);
}

static void *
rv_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    struct rv *r = calloc(1, sizeof(*r));
    size_t n = 0;

    if (r == NULL)
        return NULL;
    r->api = api;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "off=", 4) == 0 || strncmp(a, "off2=", 5) == 0) {
            int rc = api->hooks_off((unsigned)strtoul(strchr(a, '=') + 1, NULL, 16));
            n += (size_t)snprintf(r->create_rc + n, sizeof(r->create_rc) - n, "%s%d",
                                  n ? " " : "", rc);
        } else if (strcmp(a, "put-req") == 0) {
            r->put_req = 1;
            r->put = api->field_prepare("X-Rv-Req", 8, "1", 1);
        } else if (strncmp(a, "set=", 4) == 0 && strchr(a + 4, ':')) {
            const char *c = strchr(a + 4, ':');
            r->set = api->field_prepare(a + 4, (size_t)(c - a - 4), c + 1, strlen(c + 1));
        } else if (strncmp(a, "tag=", 4) == 0) {
            snprintf(r->tag, sizeof(r->tag), "%s", a + 4);
        } else if (strncmp(a, "deny=", 5) == 0 || strncmp(a, "deny-late=", 10) == 0) {
            const char *v = strchr(a, '=') + 1, *c = strchr(v, ':');
            r->deny = atoi(v);
            r->deny_rc = a[4] == '=' ? CST_DENY : CST_CONTINUE;
            if (c != NULL) {
                r->deny_has_text = 1;
                snprintf(r->deny_text, sizeof(r->deny_text), "%s", c + 1);
            }
        } else if (strcmp(a, "deny-bare") == 0) {
            r->deny = -1;
            r->deny_rc = CST_DENY;
        } else if (strcmp(a, "crash-end") == 0) {
            r->crash_end = 1;
        } else if (strcmp(a, "crash-send") == 0) {
            r->crash_send = 1;
        } else {
            snprintf(err, errlen, "unknown argument \"%s\"", a);
            rv_destroy(r);
            return NULL;
        }
    }
    return r;
}

/* This instance's hooks seen on the request, a bit each (in its slot). */
static void
rv_seen(struct rv *r, struct cst_txn *t, unsigned bit)
{
    void **s = r->api->slot(t);

    *s = (void *)((unsigned long)*s | bit);
}

static int
rv_read_request(void *inst, struct cst_txn *t)
{
    rv_seen(inst, t, CST_HOOK_READ_REQUEST);
    return CST_CONTINUE;
}

static int
rv_remap(void *inst, struct cst_txn *t)
{
    struct rv *r = inst;

    rv_seen(r, t, CST_HOOK_REMAP);
    if (r->deny == 0)
        return CST_CONTINUE;
    if (r->deny > 0)
        r->api->deny(t, r->deny, r->deny_has_text ? r->deny_text : NULL);
    return r->deny_rc;
}

static int
rv_read_response(void *inst, struct cst_txn *t)
{
    rv_seen(inst, t, CST_HOOK_READ_RESPONSE);
    return CST_CONTINUE;
}

static int
rv_send_response(void *inst, struct cst_txn *t)
{
    struct rv *r = inst;
    const struct cst_api *api = r->api;
    char v[64];
    int n;

    if (r->crash_send)
        *(volatile int *)(unsigned long)(r->crash_send - 1) = 1;
    rv_seen(r, t, CST_HOOK_SEND_RESPONSE);
    if (r->create_rc[0])
        api->field_add(t, CST_RESPONSE, "X-Rv-Create", 11, r->create_rc, strlen(r->create_rc));
    n = snprintf(v, sizeof(v), "%d", api->hooks_off(CST_HOOK_REMAP));
    api->field_add(t, CST_RESPONSE, "X-Rv-Late", 9, v, (size_t)n);
    if (r->put_req) {
        n = snprintf(v, sizeof(v), "%d", api->field_put(t, CST_REQUEST, r->put, CST_FIELD_SET));
        api->field_add(t, CST_RESPONSE, "X-Rv-Put-Req", 12, v, (size_t)n);
    }
    if (r->set)
        api->field_put(t, CST_RESPONSE, r->set, CST_FIELD_SET);
    if (r->tag[0]) {
        n = snprintf(v, sizeof(v), "%s %lx", r->tag, (unsigned long)*api->slot(t));
        api->field_add(t, CST_RESPONSE, "X-Rv", 4, v, (size_t)n);
    }
    return CST_CONTINUE;
}

static void
rv_txn_end(void *inst, struct cst_txn *t)
{
    struct rv *r = inst;

    (void)t;
    if (r->crash_end)
        *(volatile int *)(unsigned long)(r->crash_end - 1) = 1;
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "rv",
    .create = rv_create,
    .destroy = rv_destroy,
    .read_request = rv_read_request,
    .remap = rv_remap,
    .read_response = rv_read_response,
    .send_response = rv_send_response,
    .txn_end = rv_txn_end,
};
