/*
 * cistern/plugin.h: the plugin API of Cistern (cistern-plugin(3)).
 *
 * A plugin is a shared object exporting one symbol, `cistern_plugin` (a
 * struct cst_plugin).  The master loads it (dlopen) when it loads a
 * configuration and calls create() once per use: per remap rule that
 * names it (`@plugin=NAME.so @pparam=ARG ...`) and per plugin.config line.
 * The workers inherit the instances over fork.  A reload creates new
 * instances; the old ones are destroyed once the old generation of
 * workers is gone.
 *
 * Rules for a plugin:
 *  - Every hook runs in a worker process, in its one thread, inside its
 *    event loop.  A hook must not block (no blocking I/O, no sleeping, no
 *    waiting on locks held elsewhere) and should be quick: every request
 *    of that worker waits for it.
 *  - A plugin may not start threads that call this API, nor keep a
 *    struct cst_txn past the hook call it was given to (the per-
 *    transaction slot is the place for its own data; txn_end frees it).
 *  - create() and destroy() run in the master (as the user it runs as);
 *    an instance's memory is then shared copy-on-write by the workers, so
 *    what a worker changes in it stays in that worker.
 *  - A plugin that crashes takes its worker down (the master respawns it
 *    and logs the plugin's name); it cannot take the master or another
 *    worker with it.
 *
 * All strings passed in are not NUL-terminated unless said; lengths go
 * with them.  Functions returning int return 0 (or a count) on success
 * and -1 when the call is not allowed in this hook or does not fit.
 */
#ifndef CISTERN_PLUGIN_H
#define CISTERN_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version: a plugin built against another one is refused at
 * load (`cistern -t` reports it). */
#define CST_PLUGIN_ABI 1

struct sockaddr;
struct cst_txn;                 /* one request: valid only during a hook call */
struct cst_icpt;                /* an intercept: valid until its done is called */
struct cst_timer;               /* a timer of cst_api.timer_add */
struct cst_field;               /* a field checked once (cst_api.field_prepare) */

/* Which head a field call works on. */
#define CST_REQUEST  0          /* the client's request (as sent to the origin) */
#define CST_RESPONSE 1          /* the response of this hook (read_response,
                                   send_response, intercept) */

/* What a hook returns. */
#define CST_CONTINUE 0
#define CST_DENY     1          /* answer now with cst_api.deny's status
                                   (read_request, remap) */
#define CST_AGAIN    (-2)       /* intercept, or a body producer: nothing
                                   yet; called again after
                                   cst_api.intercept_resume */

/* The hooks, as bits (cst_api.hooks_off). */
#define CST_HOOK_READ_REQUEST  0x01u
#define CST_HOOK_REMAP         0x02u
#define CST_HOOK_SEND_REQUEST  0x04u
#define CST_HOOK_INTERCEPT     0x08u
#define CST_HOOK_READ_RESPONSE 0x10u
#define CST_HOOK_SEND_RESPONSE 0x20u
#define CST_HOOK_TXN_END       0x40u

/* How cst_api.field_put puts a prepared field. */
#define CST_FIELD_SET 0         /* in place of every field of its name */
#define CST_FIELD_ADD 1         /* beside them */

/* Log levels of cst_api.log (the error log's). */
#define CST_LOG_DEBUG 0
#define CST_LOG_INFO  1
#define CST_LOG_WARN  3
#define CST_LOG_ERROR 4

/* A URL as the request is routed (after remap: the origin's). */
struct cst_url {
    const char *scheme;         /* "http" or "https", NUL-terminated */
    const char *host;           /* NUL-terminated */
    int         port;
    const char *path;           /* path and query, from '/' */
    size_t      pathlen;
};

/* An intercept's body producer: write up to cap bytes of the body at
 * offset off into buf and return how many (> 0), 0 at the end of the
 * body, -1 to cut the answer short, or CST_AGAIN when it has nothing yet
 * (it is called again after intercept_resume).  Called whenever the
 * worker can send more; it must return at once. */
typedef ssize_t (*cst_body_fn)(void *arg, uint64_t off, char *buf, size_t cap);

/* The functions a plugin calls, given to create(). */
struct cst_api {
    uint32_t abi;               /* CST_PLUGIN_ABI */
    uint32_t size;              /* sizeof(struct cst_api) */

    /* Header fields of head (CST_REQUEST, CST_RESPONSE).  field_get finds
     * the nth (0 first) field named name (any case) and returns 1 with
     * *val, *vlen, or 0.  field_add appends a field; field_remove removes
     * every field of that name; field_set is remove then add.  The
     * request may be changed in read_request, remap and send_request; the
     * response in read_response, send_response and intercept.  The
     * fields the daemon frames and routes by are its own, never changed
     * (-1): Content-Length, Transfer-Encoding, Connection, Keep-Alive,
     * Proxy-Connection, TE, Trailer, Upgrade, Content-Range and Host.  In
     * send_response the client's head grows to response_header_max_size,
     * no further. */
    int  (*field_get)(struct cst_txn *t, int head, const char *name, size_t nlen, int nth,
                      const char **val, size_t *vlen);
    int  (*field_add)(struct cst_txn *t, int head, const char *name, size_t nlen,
                      const char *val, size_t vlen);
    int  (*field_remove)(struct cst_txn *t, int head, const char *name, size_t nlen);
    int  (*field_set)(struct cst_txn *t, int head, const char *name, size_t nlen,
                      const char *val, size_t vlen);

    /* The request. */
    const char *(*method)(struct cst_txn *t);            /* "GET", ... */
    int  (*url_get)(struct cst_txn *t, struct cst_url *u);
    /* remap only: send the request elsewhere (the cache key follows
     * unless key_set said otherwise).  scheme "http" or "https". */
    int  (*url_set)(struct cst_txn *t, const char *scheme, const char *host, int port,
                    const char *path, size_t pathlen);
    /* remap only: the cache key (default: the routed URL); key_set with
     * len 0: no key, the request is not cached. */
    size_t (*key_get)(struct cst_txn *t, char *out, size_t cap);
    int  (*key_set)(struct cst_txn *t, const char *key, size_t len);
    /* read_request, remap: refuse with status (and a short text body),
     * then return CST_DENY. */
    void (*deny)(struct cst_txn *t, int status, const char *text);
    const struct sockaddr *(*client_addr)(struct cst_txn *t);
    /* This instance's per-transaction pointer (NULL at first). */
    void **(*slot)(struct cst_txn *t);

    /* The response. */
    int  (*status)(struct cst_txn *t);                   /* read_response, send_response */
    /* read_response: do not store this response / store it for secs
     * seconds whatever its own freshness says. */
    void (*uncacheable)(struct cst_txn *t);
    void (*ttl_set)(struct cst_txn *t, int secs);

    /* intercept: answer the request ourselves with status and a body of
     * length bytes (-1: unknown, ended by the close), made by produce
     * (done(arg) is called when it is over, done may be NULL).  Fields
     * added with field_add(CST_RESPONSE) go in the head.  The answer goes
     * through the cache like an origin's. */
    int  (*intercept_answer)(struct cst_txn *t, int status, int64_t length,
                             cst_body_fn produce, void *arg, void (*done)(void *arg));

    /* A line in the error log, "plugin NAME: ..." (t may be NULL). */
    void (*log)(struct cst_txn *t, int level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

    /* Members after this line came after the first API: check that size
     * covers them before calling one (an older daemon's table is shorter). */

    /* intercept: the handle of this request's intercept (made at the
     * first call; NULL outside intercept).  It stays valid, in and out of
     * hooks, until the intercept ends (the answer is sent, the
     * transaction gave up, or it failed): then done(arg) is called, if
     * not NULL, and so is intercept_answer's done.  An intercept hook
     * that returns CST_AGAIN must have taken a handle. */
    struct cst_icpt *(*intercept_handle)(struct cst_txn *t, void (*done)(void *arg),
                                         void *arg);
    /* Go on with an intercept that said CST_AGAIN: its intercept hook is
     * called again (with the request's transaction: it may answer, or
     * say CST_AGAIN again; anything else fails the answer: 502), or its
     * producer is.  The call is made from the event loop, never from
     * within intercept_resume; resuming twice is resuming once. */
    void (*intercept_resume)(struct cst_icpt *h);
    /* A one-shot timer in this worker's event loop: fn(arg) once after ms
     * milliseconds (from any hook, producer or timer; NULL in create or
     * when out of memory).  timer_cancel only before it has fired. */
    struct cst_timer *(*timer_add)(int ms, void (*fn)(void *arg), void *arg);
    void (*timer_cancel)(struct cst_timer *tm);

    /* Later still (check with CST_API_HAS): */

    /* create only: this instance is never called for these hooks
     * (CST_HOOK_ bits), though its plugin has them: an instance whose
     * arguments need no remap hook, say, costs its rule's requests no
     * remap call.  0, or -1 outside create. */
    int  (*hooks_off)(unsigned hooks);
    /* remap only: the cache key as it stands, without a copy (valid until
     * key_set or the hook's return; not NUL-terminated), *len its length;
     * NULL when there is none (the request is not cacheable). */
    const char *(*key_peek)(struct cst_txn *t, size_t *len);
    /* A field checked and formatted once, for a plugin that puts the same
     * field on many requests: made in create (NULL when name or value has
     * a byte a head cannot carry, for one of the daemon's own fields
     * (above), or out of memory), put with field_put
     * (how: CST_FIELD_SET or CST_FIELD_ADD; in the hooks where field_set
     * and field_add may be called, with their results), freed with
     * field_free in destroy (after which it must not be put: no check of
     * every use could tell a freed field from a live one for free). */
    struct cst_field *(*field_prepare)(const char *name, size_t nlen, const char *val,
                                       size_t vlen);
    int  (*field_put)(struct cst_txn *t, int head, const struct cst_field *f, int how);
    void (*field_free)(struct cst_field *f);
};

/* What a plugin exports as `cistern_plugin`.  Hooks left NULL cost
 * nothing.  create gets argv[0] = the plugin's path as written, then the
 * arguments (@pparam= values, or plugin.config's words); it returns the
 * instance, or NULL with a reason in err (the load fails with file:line). */
struct cst_plugin {
    uint32_t    abi;            /* CST_PLUGIN_ABI */
    const char *name;
    void *(*create)(const struct cst_api *api, int argc, char **argv, char *err,
                    size_t errlen);
    void  (*destroy)(void *inst);
    int   (*read_request)(void *inst, struct cst_txn *t);   /* global plugins */
    int   (*remap)(void *inst, struct cst_txn *t);
    int   (*send_request)(void *inst, struct cst_txn *t);
    int   (*read_response)(void *inst, struct cst_txn *t);
    int   (*send_response)(void *inst, struct cst_txn *t);
    /* Return 1 after intercept_answer to take the request, 0 to let it
     * go to the origin, CST_AGAIN to take it and answer later (after
     * intercept_handle; intercept_resume calls it again).  Called on a
     * cache miss. */
    int   (*intercept)(void *inst, struct cst_txn *t);
    void  (*txn_end)(void *inst, struct cst_txn *t);
};

/* Does the daemon's table have member (one added after the first API)? */
#define CST_API_HAS(api, member) \
    ((api)->size >= offsetof(struct cst_api, member) + sizeof((api)->member))

#define CST_PLUGIN_SYMBOL "cistern_plugin"
/* Put before the definition of cistern_plugin: it stays visible when the
 * plugin is built with -fvisibility=hidden. */
#define CST_PLUGIN_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_PLUGIN_H */
