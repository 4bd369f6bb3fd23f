/*
 * t/fuzz/fuzz_conf_records.c: records.config (CONFIG name TYPE value).
 * See fuzz_conf.h.  Also: accepted values stay inside the ranges the
 * rest of the daemon relies on.
 */
#include "t/fuzz/fuzz_conf.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct conf_records r;
    struct conf_errors e;

    if (fz_conf_skip(data, size))
        return 0;
    const char *file = fz_conf_write(data, size);
    memset(&e, 0, sizeof(e));
    conf_records_defaults(&r);
    int rc = conf_records_parse(&r, file, fz_dir, &e);
    fz_conf_check_errors(rc, &e, file);
    if (rc == 0) {
        FZ_CHECK(r.nports >= 0 && r.nports <= CONF_MAX_PORTS);
        for (int i = 0; i < r.nports; i++)
            FZ_CHECK(r.ports[i].port >= 0 && r.ports[i].port <= 65535);
        FZ_CHECK(r.workers >= 0);
        FZ_CHECK(r.request_header_max_size >= 1024 && r.request_line_max_size >= 256);
        FZ_CHECK(r.response_header_max_size >= 1024);
        FZ_CHECK(r.connections_throttle >= 1);
        FZ_CHECK(r.max_doc_size >= 0);
        FZ_CHECK(r.heuristic_min_lifetime >= 0 && r.heuristic_max_lifetime >= 0);
        FZ_CHECK(r.logfile_dir == NULL || r.logfile_dir[0] == '/');
        FZ_CHECK(r.run_dir == NULL || r.run_dir[0] == '/');
    }
    conf_records_free(&r);
    FZ_CHECK(r.logfile_dir == NULL && r.run_dir == NULL && r.proxy_name == NULL);
    conf_errors_free(&e);
    return 0;
}
