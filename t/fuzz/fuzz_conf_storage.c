/*
 * t/fuzz/fuzz_conf_storage.c: storage.config ("path size" lines) and
 * conf_parse_size.  See fuzz_conf.h.  Also: accepted spans have an
 * absolute path and a positive size.
 */
#include "t/fuzz/fuzz_conf.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct conf_storages st;
    struct conf_errors e;

    if (fz_conf_skip(data, size))
        return 0;
    const char *file = fz_conf_write(data, size);
    memset(&e, 0, sizeof(e));
    memset(&st, 0, sizeof(st));
    int rc = conf_storage_parse(&st, file, fz_dir, &e);
    fz_conf_check_errors(rc, &e, file);
    for (int i = 0; i < st.nspans; i++) {
        FZ_CHECK(st.spans[i].path != NULL && st.spans[i].path[0] == '/');
        if (rc == 0)
            FZ_CHECK(st.spans[i].size > 0);
    }
    conf_storage_free(&st);
    FZ_CHECK(fz_all_zero(&st, sizeof(st)));
    conf_errors_free(&e);

    char *s = malloc(size + 1);
    if (s == NULL)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    int64_t v = -7;
    rc = conf_parse_size(s, &v);
    FZ_CHECK(rc == -1 || (rc == 0 && v >= 0));
    free(s);
    return 0;
}
