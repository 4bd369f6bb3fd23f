/*
 * t/fuzz/fuzz_conf_remap.c: remap.config, and remap lookups.
 *
 * 1. The input as a remap.config (see fuzz_conf.h); when it parses, look
 *    up a few fixed requests in it.
 * 2. The input as a request against a fixed config (map, regex_map with
 *    $N, redirect, reverse_map): host up to the first '\n', path after it
 *    (scheme and port from the host's length), plus the whole input as a
 *    Location URL for conf_remap_reverse.
 * Invariants: a match fills a NUL-terminated host and path whose length
 * is pathlen, inside the result buffers; reverse output is NUL-terminated
 * inside its buffer.
 */
#include "t/fuzz/fuzz_conf.h"

static struct conf_remap fixed;
static int fixed_ok;

static const char fixed_text[] =
    "map http://m.test/ http://127.0.0.1:8080/\n"
    "map http://m.test/api/ http://127.0.0.1:8081/v2\n"
    "map https://s.test:8443/a http://127.0.0.1:8082/b/\n"
    "regex_map http://(.*)\\.r\\.test/ http://$1.origin.test:81/\n"
    "regex_map http://([a-z]+)-([0-9]+)\\.x\\.test/ http://$2.$1.$9.$0/p\n"
    "reverse_map http://127.0.0.1:8080/ http://m.test/\n"
    "redirect http://old.test/ http://new.test/moved/\n"
    "redirect_temporary http://tmp.test/x http://new.test/y\n"
    "map http://[::1]:8080/ http://[::1]:9090/\n";

static void
check_find(const struct conf_remap *rm, const char *scheme, const char *host,
           size_t hostlen, int port, const char *path, size_t pathlen)
{
    static struct conf_remap_result res;
    const struct conf_remap_rule *r;

    r = conf_remap_find(rm, scheme, host, hostlen, port, path, pathlen, &res);
    if (r == NULL)
        return;
    FZ_CHECK(r == res.rule);
    FZ_CHECK(r->type != CONF_REMAP_REVERSE_MAP);
    FZ_CHECK(memchr(res.host, '\0', sizeof(res.host)) != NULL);
    FZ_CHECK(memchr(res.scheme, '\0', sizeof(res.scheme)) != NULL);
    FZ_CHECK(res.pathlen < sizeof(res.path) && res.path[res.pathlen] == '\0');
    FZ_CHECK(res.port >= 0 && res.port <= 65535);
}

static void
check_reverse(const struct conf_remap *rm, const char *url, size_t len)
{
    char out[512];
    memset(out, 'Z', sizeof(out));
    if (conf_remap_reverse(rm, url, len, out, sizeof(out)))
        FZ_CHECK(memchr(out, '\0', sizeof(out)) != NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct conf_errors e;

    if (!fixed_ok) {
        const char *f = fz_conf_write((const uint8_t *)fixed_text, sizeof(fixed_text) - 1);
        memset(&e, 0, sizeof(e));
        FZ_CHECK(conf_remap_parse(&fixed, f, fz_dir, &e) == 0);
        conf_errors_free(&e);
        fixed_ok = 1;
    }

    /* 2: lookups in the fixed config */
    char *copy = fz_dup(data, size);
    const char *nl = memchr(copy, '\n', size);
    size_t hostlen = nl ? (size_t)(nl - copy) : size;
    const char *path = nl ? nl + 1 : "/";
    size_t pathlen = nl ? size - hostlen - 1 : 1;
    check_find(&fixed, hostlen & 1 ? "https" : "http", copy, hostlen,
               hostlen & 2 ? 8443 : 80, path, pathlen);
    check_find(&fixed, "http", copy, hostlen, 80, path, pathlen);
    check_reverse(&fixed, copy, size);
    free(copy);

    /* 1: the input as a remap.config */
    if (fz_conf_skip(data, size))
        return 0;
    struct conf_remap rm;
    const char *file = fz_conf_write(data, size);
    memset(&e, 0, sizeof(e));
    memset(&rm, 0, sizeof(rm));
    int rc = conf_remap_parse(&rm, file, fz_dir, &e);
    fz_conf_check_errors(rc, &e, file);
    if (rc == 0) {
        for (int i = 0; i < rm.nrules; i++) {
            const struct conf_remap_rule *r = &rm.rules[i];
            FZ_CHECK(r->from.path && r->from.path[0] == '/');
            FZ_CHECK(r->to.path && r->to.path[0] == '/');
            FZ_CHECK(strlen(r->from.path) == r->from.pathlen);
            FZ_CHECK(r->type != CONF_REMAP_REGEX_MAP || r->re_ok);
            /* the rule's own from-URL finds a rule */
            if (r->type == CONF_REMAP_MAP)
                FZ_CHECK(conf_remap_find(&rm, r->from.scheme, r->from.host, r->from.hostlen,
                                         r->from.port, r->from.path, r->from.pathlen,
                                         &(struct conf_remap_result){ 0 }) != NULL
                         || r->to.pathlen + 1 > 8192 || r->to.hostlen >= 256);
        }
        check_find(&rm, "http", "m.test", 6, 80, "/a/b?c", 6);
        check_find(&rm, "https", "M.TEST", 6, 443, "/", 1);
        check_reverse(&rm, "http://127.0.0.1:8080/x", 24);
    }
    conf_remap_free(&rm);
    FZ_CHECK(fz_all_zero(&rm, sizeof(rm)));
    conf_errors_free(&e);
    return 0;
}
