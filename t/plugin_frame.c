/*
 * t/plugin_frame.c: frame.so, a test-only plugin for t/test_plugins.py
 * (the test compiles it): a plugin that tries to change the fields the
 * proxy frames messages and routes by, in every hook that may change a
 * head, and ignores what the API answers.  Each hook calls field_remove,
 * field_set and field_add for every name below (on the request in remap
 * and send_request, on the response in intercept, read_response and
 * send_response: accepted, they would leave two lines of each, "3" and
 * "chunked") and counts the calls the API accepted; the last
 * send_response reports the counts as one field:
 * "X-Frame: remap=N send_request=N intercept=N read_response=N
 * send_response=N prepare=N" (prepare: field_prepare's answers that were
 * not NULL, at load).  With @pparam=intercept it answers the request
 * itself ("hello", 5 bytes; with @pparam=status=N, with status N).  With @pparam=fill its send_response then
 * adds 1000-byte fields to the client's head ("X-Filler: fff...") until
 * field_add refuses one, at most 1000.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/plugin.h"

static const char *const names[] = {
    "Content-Length", "transfer-encoding", "Connection", "Keep-Alive", "Proxy-Connection",
    "TE", "Trailer", "Upgrade", "Host", "Content-Range",
};

#define NNAMES (sizeof(names) / sizeof(names[0]))

enum { K_REMAP, K_SEND_REQUEST, K_INTERCEPT, K_READ_RESPONSE, K_SEND_RESPONSE, K_COUNT };

struct frame {
    const struct cst_api *api;
    int                   intercept, fill, status;
    int                   prepared;
};

static void *
frame_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    struct frame *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->api = api;
    f->status = 200;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "intercept") == 0) {
            f->intercept = 1;
        } else if (strncmp(argv[i], "status=", 7) == 0) {
            f->status = atoi(argv[i] + 7);
        } else if (strcmp(argv[i], "fill") == 0) {
            f->fill = 1;
        } else {
            snprintf(err, errlen, "unknown argument \"%s\"", argv[i]);
            free(f);
            return NULL;
        }
    }
    for (size_t i = 0; i < NNAMES; i++) {
        struct cst_field *p = api->field_prepare(names[i], strlen(names[i]), "3", 1);
        if (p != NULL) {
            f->prepared++;
            api->field_free(p);
        }
    }
    return f;
}

static void
frame_destroy(void *inst)
{
    free(inst);
}

/* The edits accepted in hook k, kept in the slot (8 bits a hook). */
static void
frame_try(struct frame *f, struct cst_txn *t, int head, int k)
{
    const struct cst_api *api = f->api;
    void **slot = api->slot(t);
    uintptr_t n = 0;

    for (size_t i = 0; i < NNAMES; i++) {
        size_t l = strlen(names[i]);
        n += api->field_remove(t, head, names[i], l) == 0;
        n += api->field_set(t, head, names[i], l, "3", 1) == 0;
        n += api->field_add(t, head, names[i], l, "chunked", 7) == 0;
    }
    *slot = (void *)((uintptr_t)*slot | n << (8 * k));
}

static int
frame_remap(void *inst, struct cst_txn *t)
{
    frame_try(inst, t, CST_REQUEST, K_REMAP);
    return CST_CONTINUE;
}

static int
frame_send_request(void *inst, struct cst_txn *t)
{
    frame_try(inst, t, CST_REQUEST, K_SEND_REQUEST);
    return CST_CONTINUE;
}

static int
frame_read_response(void *inst, struct cst_txn *t)
{
    frame_try(inst, t, CST_RESPONSE, K_READ_RESPONSE);
    return CST_CONTINUE;
}

static ssize_t
frame_body(void *arg, uint64_t off, char *buf, size_t cap)
{
    (void)arg;
    memcpy(buf, "hello" + off, cap);
    return (ssize_t)cap;
}

static int
frame_intercept(void *inst, struct cst_txn *t)
{
    struct frame *f = inst;

    if (!f->intercept)
        return 0;
    frame_try(f, t, CST_RESPONSE, K_INTERCEPT);
    return f->api->intercept_answer(t, f->status, 5, frame_body, NULL, NULL) == 0;
}

/* Fields of 1000 bytes until one is refused. */
static void
frame_fill(struct frame *f, struct cst_txn *t)
{
    static char v[1000];

    memset(v, 'f', sizeof(v));
    for (int n = 0; n < 1000; n++)
        if (f->api->field_add(t, CST_RESPONSE, "X-Filler", 8, v, sizeof(v)) < 0)
            break;
}

static int
frame_send_response(void *inst, struct cst_txn *t)
{
    struct frame *f = inst;
    char out[160];
    uintptr_t n;
    int len;

    frame_try(f, t, CST_RESPONSE, K_SEND_RESPONSE);
    n = (uintptr_t)*f->api->slot(t);
    len = snprintf(out, sizeof(out), "remap=%u send_request=%u intercept=%u "
                   "read_response=%u send_response=%u prepare=%d",
                   (unsigned)(n & 255), (unsigned)(n >> 8 & 255), (unsigned)(n >> 16 & 255),
                   (unsigned)(n >> 24 & 255), (unsigned)(n >> 32 & 255), f->prepared);
    f->api->field_add(t, CST_RESPONSE, "X-Frame", 7, out, (size_t)len);
    if (f->fill)
        frame_fill(f, t);
    return CST_CONTINUE;
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "frame",
    .create = frame_create,
    .destroy = frame_destroy,
    .remap = frame_remap,
    .send_request = frame_send_request,
    .intercept = frame_intercept,
    .read_response = frame_read_response,
    .send_response = frame_send_response,
};
