/*
 * worker/plugin.h: plugins at a request's steps (issue 22; the API is
 * cistern/plugin.h, the loading conf/plugin.c).
 *
 * A request whose rule names plugins, or any request when plugin.config
 * has some, is "plugged" (rq_plugged): its struct cst_txn (below, inside
 * the request: nothing is allocated per request) keeps the plugins'
 * per-transaction slots and the changes they asked of the request head.
 * Every call from the steps into this file is behind a test of
 * rq_plugged, or of the rule's nplugins and the config's nglobals: a
 * request without plugins pays those tests and nothing else.  A plugged
 * request runs its plan (conf/conf.h's struct conf_plan): for each hook,
 * the list of the instances to call, made when the config was loaded.
 */
#ifndef CISTERN_WORKER_PLUGIN_H
#define CISTERN_WORKER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "cistern/plugin.h"

#define PLUG_MAX      16        /* instances on one request (global + rule):
                                   CONF_PLAN_MAX */
#define PLUG_ADD_MAX  2048      /* bytes of fields a request's plugins add */
#define PLUG_DEL_MAX  512       /* bytes of the names they remove */

/* Field changes: lines "Name: value\r\n" to add, names (each NUL-ended)
 * whose fields go. */
struct plug_edits {
    uint16_t addlen, dellen;
    char     add[PLUG_ADD_MAX];
    char     del[PLUG_DEL_MAX];
};

struct req;
struct upstream;
struct buf;
struct cache_obj;
struct http_req;
struct conf_remap_result;
struct conf_remap_rule;
struct conf_plugin;
struct conf_plan;

enum plug_hook {
    PLUG_H_READ_REQUEST = 1, PLUG_H_REMAP, PLUG_H_SEND_REQUEST, PLUG_H_INTERCEPT,
    PLUG_H_READ_RESPONSE, PLUG_H_SEND_RESPONSE, PLUG_H_END,
};

struct cst_txn {
    struct req      *rq;
    int              hook;            /* enum plug_hook running now */
    int              cur;             /* the instance called (slot index) */
    unsigned         remapped:1;      /* the remap hooks ran (a WAIT
                                         comes back to ROUTE) */
    unsigned         url_set:1, key_set:1, uncacheable:1;
    const struct conf_plan *plan;     /* the instances and their calls:
                                         the config's global plan, then at
                                         remap the rule's */
    uint32_t         slotset;         /* slot[k] is set (else NULL) */
    int              ttl;             /* > 0: ttl_set's */
    uint16_t         mark_add, mark_del;  /* request edits before remap */
    /* remap */
    struct conf_remap_result *res;
    char            *key;
    size_t          *keylen, keycap;
    /* read_response: the parse; send_response: the head text */
    struct http_req *resp;
    struct buf      *out;
    size_t           mark;
    int              status;
    const struct cache_obj *hit;      /* send_response: the hit whose head
                                         out holds, or NULL */
    uint64_t         names;           /* the names out may hold (a Bloom
                                         filter); 0: not known yet */
    uint64_t         added;           /* and those the hooks added */
    /* deny, intercept */
    int              deny_status;
    cst_body_fn      produce;
    void            *parg;
    void           (*pdone)(void *);
    int64_t          plen;
    struct cst_icpt *icpt;            /* intercept_handle's, in intercept */
    /* (the fields above are a plugged request's every hook's: those
     * below only some requests') */
    char             deny_text[128];  /* deny()'s, set with deny_status */
    void            *slot[PLUG_MAX];  /* cleared when first asked for */
    struct plug_edits req;            /* the request's, kept to FETCH */
};

/* The function table (conf_plugin_set_api gets it). */
extern const struct cst_api plug_api;

/* RECV: the global plugins' read_request.  1: denied (rq->syn says how). */
int  plug_read_request(struct req *rq);
/* ROUTE, a mapped request: the remap hooks (global, then the rule's). */
enum plug_remap_rc { PLUG_OK = 0, PLUG_DENY, PLUG_REKEY };
enum plug_remap_rc plug_remap(struct req *rq, const struct conf_remap_rule *rule,
                              struct conf_remap_result *res, char *key, size_t *keylen,
                              size_t keycap);
/* FETCH: the send_request hooks; then whether field i of the client's
 * head is removed, and the lines added (appended by proxy_put_head). */
void plug_send_request(struct req *rq);
int  plug_req_removed(struct req *rq, int i);
/* FETCH: an intercepting plugin answers instead of the origin: 1 taken
 * (up has a connection to it, as if to an origin), 0 not, -1 failed.
 * ready and attach are the caller's origin_get() callbacks (proxy.c's),
 * kept in up as origin_get() would: passed in, so plugin.c calls nothing
 * in proxy.c (no cycle in worker/'s call graph). */
int  plug_intercept(struct req *rq, struct upstream *up,
                    void (*ready)(struct upstream *up, int err),
                    void (*attach)(struct upstream *up));
/* The origin's response head (parsed in up->up_resp): the read_response
 * hooks; a changed head is rewritten in up_in and parsed again.  0 or -1. */
int  plug_read_response(struct req *rq, struct upstream *up);
/* The client's head, b[mark..end): the send_response hooks.  0 or -1.
 * hit: the object whose stored head (whole, or fewer of its lines) b
 * holds with store_send_as's own fields, or NULL: a remove then looks
 * only where the name can be. */
int  plug_send_response(struct req *rq, struct buf *b, size_t mark, int status,
                        const struct cache_obj *hit);
/* DONE: the txn_end hooks; the request is no longer plugged. */
void plug_txn_end(struct req *rq);

#endif /* CISTERN_WORKER_PLUGIN_H */
