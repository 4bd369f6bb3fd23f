/*
 * t/fuzz/fuzz_conf_ip_allow_yaml.c: ip_allow.yaml, through conf/yaml.c
 * (libyaml, alias expansion, the limits) and the rule reader.  See
 * fuzz_conf.h.  Also: every accepted range has lo <= hi, every rule's
 * names are real strings, and the in and out decisions run for each
 * range's low end with a named and a standard method.
 */
#include "t/fuzz/fuzz_conf.h"
#include <arpa/inet.h>

static void
check_list(const struct conf_ip_allow *ia, const struct conf_ip_rule *rules,
           int n)
{
    for (int i = 0; i < n; i++) {
        const struct conf_ip_range *g = &rules[i].range;
        size_t len = g->family == AF_INET ? 4 : 16;
        struct sockaddr_storage ss;

        FZ_CHECK(g->family == AF_INET || g->family == AF_INET6);
        FZ_CHECK(memcmp(g->lo, g->hi, len) <= 0);
        FZ_CHECK((rules[i].methods & ~CONF_METHOD_ALL) == 0);
        for (int j = 0; j < rules[i].nnames; j++)
            FZ_CHECK(rules[i].names[j] != NULL && rules[i].names[j][0] != '\0');
        memset(&ss, 0, sizeof(ss));
        if (g->family == AF_INET) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            s4->sin_family = AF_INET;
            memcpy(&s4->sin_addr, g->lo, 4);
        } else {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            s6->sin6_family = AF_INET6;
            memcpy(&s6->sin6_addr, g->lo, 16);
        }
        (void)conf_ip_method_allowed(ia, (struct sockaddr *)&ss, "PROPFIND", 8);
        (void)conf_ip_out_decide(ia, (struct sockaddr *)&ss, "GET", 3);
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
    int rc = conf_ip_allow_yaml_parse(&ia, file, &e);
    fz_conf_check_errors(rc, &e, file);
    check_list(&ia, ia.rules, ia.nrules);
    check_list(&ia, ia.out, ia.nout);
    conf_ip_allow_free(&ia);
    FZ_CHECK(fz_all_zero(&ia, sizeof(ia)));
    conf_errors_free(&e);
    return 0;
}
