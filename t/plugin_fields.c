/*
 * t/plugin_fields.c: fields.so, a test-only plugin for t/test_plugins.py
 * (the test compiles it): which fields the API refuses.  Its
 * send_response adds each field of the table below to the client's head
 * and reports what field_add returned, in order, as one field:
 * "X-Field-Results: 0 -1 ...".  The names and values put every refused
 * byte at the start, the middle and the end of strings of 1 to 17 bytes
 * (worker/plugin.c checks them eight bytes at a time, and under eight
 * bytes as one word).  The same table is prepared at load
 * (field_prepare: NULL for a refused one) and put over the added lines
 * (field_put, CST_FIELD_SET), its results in "X-Put-Results".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/plugin.h"

struct field_case {
    const char *name, *value;
    size_t      nlen, vlen;
};

#define F(n, v) { n, v, sizeof(n) - 1, sizeof(v) - 1 }

static const struct field_case cases[] = {
    F("A", "1"),                        /* 0: accepted */
    F("X-Served-By", "edge"),
    F("X-Abcdefg", ""),                 /* an empty value */
    F("X-Tab", "a\tb"),                 /* HTAB in a value */
    F("X-Long-Name-Of-17", "a value of twenty-four b"),
    F("", "1"),                         /* 5: refused: no name */
    F(":", "1"),
    F("X:", "1"),
    F("X Y", "1"),
    F("\x01XY", "1"),
    F("X-Abcdef\x7f", "1"),             /* 10 */
    F("X-Abc\xc3\xa9", "1"),
    F("X-Abcdefghijk\x1fm", "1"),
    F("X-V", "\r"),
    F("X-V", "a\nb"),
    F("X-V", "abcd\r"),                 /* 15 */
    F("X-V", "abcdefghijklmnop\0q"),
    F("X-V", "\0bcdefgh"),
    F("X-V", "a\rcdefg"),
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

struct fields {
    const struct cst_api *api;
    struct cst_field     *prep[NCASES];
};

static void *
fields_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    (void)argc;
    (void)argv;
    (void)err;
    (void)errlen;
    /* an instance of its own: a reload creates the new one before the old
     * one is destroyed, so one static struct would lose the new fields */
    struct fields *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->api = api;
    for (size_t i = 0; i < NCASES; i++)
        f->prep[i] = api->field_prepare(cases[i].name, cases[i].nlen, cases[i].value,
                                        cases[i].vlen);
    return f;
}

static void
fields_destroy(void *inst)
{
    struct fields *f = inst;

    for (size_t i = 0; i < NCASES; i++)
        if (f->prep[i])
            f->api->field_free(f->prep[i]);
    free(f);
}

static int
fields_send_response(void *inst, struct cst_txn *t)
{
    const struct fields *f = inst;
    const struct cst_api *api = f->api;
    char out[256], put[256];
    size_t n = 0, pn = 0;

    for (size_t i = 0; i < NCASES; i++) {
        const struct field_case *c = &cases[i];
        int rc = api->field_add(t, CST_RESPONSE, c->name, c->nlen, c->value, c->vlen);
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%d", i ? " " : "", rc);
    }
    for (size_t i = 0; i < NCASES; i++) {
        int rc = f->prep[i] ? api->field_put(t, CST_RESPONSE, f->prep[i], CST_FIELD_SET) : -1;
        pn += (size_t)snprintf(put + pn, sizeof(put) - pn, "%s%d", i ? " " : "", rc);
    }
    api->field_add(t, CST_RESPONSE, "X-Field-Results", 15, out, n);
    api->field_add(t, CST_RESPONSE, "X-Put-Results", 13, put, pn);
    return CST_CONTINUE;
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "fields",
    .create = fields_create,
    .destroy = fields_destroy,
    .send_response = fields_send_response,
};
