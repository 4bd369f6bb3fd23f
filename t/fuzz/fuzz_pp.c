/*
 * t/fuzz/fuzz_pp.c: the PROXY protocol parser (worker/pp.c).
 *
 * The input is what a peer sends first on a pp port.  pp_parse runs on
 * the whole input and on every prefix of it, as conn.c calls it while
 * bytes arrive.  Invariants: a header is at most PP_MAX bytes (v1 at most
 * PP_V1_MAX) and lies inside the input; a refusal has a reason; a source
 * address is IPv4 or IPv6; once a prefix is refused or accepted every
 * longer input gets the same answer with the same length (the decision
 * never depends on bytes behind the header), and before that every prefix
 * is PP_AGAIN (so consuming it never eats what follows).
 */
#include "config.h"
#include "worker/pp.h"
#include "t/fuzz/fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pp_result r, first;
    int decided = 0, rc0 = PP_AGAIN;
    size_t lim = size < PP_MAX + 16 ? size : PP_MAX + 16;

    memset(&first, 0, sizeof(first));
    for (size_t n = 0; n <= lim; n++) {
        uint8_t *copy = (uint8_t *)fz_dup(data, n);     /* ASan: exact size */
        int rc = pp_parse(copy, n, &r);
        free(copy);
        FZ_CHECK(rc == PP_AGAIN || rc == PP_DONE || rc == PP_BAD);
        if (rc == PP_BAD)
            FZ_CHECK(r.why != NULL);
        if (rc == PP_DONE) {
            FZ_CHECK(r.len > 0 && r.len <= n && r.len <= PP_MAX);
            FZ_CHECK(r.version == 1 || r.version == 2);
            if (r.version == 1)
                FZ_CHECK(r.len <= PP_V1_MAX);
            if (!r.local)
                FZ_CHECK(r.src.sa.sa_family == AF_INET || r.src.sa.sa_family == AF_INET6);
        }
        if (decided) {
            FZ_CHECK(rc == rc0);
            if (rc == PP_DONE)
                FZ_CHECK(r.len == first.len && r.local == first.local);
        } else if (rc != PP_AGAIN) {
            decided = 1;
            rc0 = rc;
            first = r;
            if (rc == PP_DONE)
                FZ_CHECK(r.len == n);   /* decided at its last byte */
        }
    }
    return 0;
}
