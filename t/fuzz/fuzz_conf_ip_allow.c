/*
 * t/fuzz/fuzz_conf_ip_allow.c: ip_allow.config (ATS 8 line syntax), and
 * conf_ip_list_parse (the admin allow list) over the same bytes.  See
 * fuzz_conf.h.  Also: every accepted range has lo <= hi, and the first
 * rule decides for the range's own ends.
 */
#include "t/fuzz/fuzz_conf.h"
#include <arpa/inet.h>

static void
check_rules(const struct conf_ip_allow *ia)
{
    for (int i = 0; i < ia->nrules; i++) {
        const struct conf_ip_range *g = &ia->rules[i].range;
        size_t n = g->family == AF_INET ? 4 : 16;
        FZ_CHECK(g->family == AF_INET || g->family == AF_INET6);
        FZ_CHECK(memcmp(g->lo, g->hi, n) <= 0);
        FZ_CHECK((ia->rules[i].methods & ~CONF_METHOD_ALL) == 0);
        /* ask about the low end of every range: the answer is that of the
         * first rule covering it (exercises the matcher) */
        if (g->family == AF_INET) {
            struct sockaddr_in sin = { .sin_family = AF_INET };
            memcpy(&sin.sin_addr, g->lo, 4);
            (void)conf_ip_allowed(ia, (struct sockaddr *)&sin, CONF_METHOD_GET);
        } else {
            struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
            memcpy(&s6.sin6_addr, g->lo, 16);
            (void)conf_ip_allowed(ia, (struct sockaddr *)&s6, CONF_METHOD_PUSH);
        }
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct conf_ip_allow ia;
    struct conf_errors e;

    if (fz_conf_skip(data, size))
        return 0;
    const char *file = fz_conf_write(data, size);
    memset(&e, 0, sizeof(e));
    memset(&ia, 0, sizeof(ia));
    int rc = conf_ip_allow_parse(&ia, file, &e);
    fz_conf_check_errors(rc, &e, file);
    check_rules(&ia);
    conf_ip_allow_free(&ia);
    FZ_CHECK(fz_all_zero(&ia, sizeof(ia)));
    conf_errors_free(&e);

    /* the same bytes as an admin allow list */
    char *list = malloc(size + 1);
    if (list == NULL)
        abort();
    memcpy(list, data, size);
    list[size] = '\0';
    const char *why = NULL;
    memset(&ia, 0, sizeof(ia));
    rc = conf_ip_list_parse(&ia, list, &why);
    FZ_CHECK(rc == 0 || (rc == -1 && why != NULL));
    check_rules(&ia);
    conf_ip_allow_free(&ia);
    free(list);
    (void)conf_method_bit((const char *)data, size);
    return 0;
}
