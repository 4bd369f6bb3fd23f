/*
 * worker/admin.c: the stats endpoints, served by every worker.
 *
 *   /_stats    JSON in the layout of ATS's stats_over_http plugin:
 *              {"global": {"name": "value", ...}} (values as strings, as
 *              ATS writes them), ATS names where ATS has the counter
 *   /_metrics  Prometheus text format, with labels
 *
 * Both end with the parents' counters and states (worker/parent.c, from
 * the shared parent table).
 *
 * Counters are summed over every worker slot in shm plus the totals the
 * master folded in from reaped slots, so they never go backwards across
 * reloads and restarts.  Access is decided by
 * proxy.config.cistern.admin.allow, not by ip_allow.config: reading
 * counters is not a method question.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "shm/log.h"
#include "worker/worker.h"

struct admin_stat {
    const char *ats;            /* JSON name */
    const char *prom;           /* Prometheus name */
    const char *labels;         /* Prometheus labels, or "" */
    const char *type;           /* counter / gauge */
    uint64_t    v;
};

/* Everything we report, in one table both formats walk. */
static int
admin_collect(struct admin_stat *st, int max)
{
    struct shm_counters t;
    struct cache_stats cs;
    const struct shm_hdr *h = wk->shm->hdr;
    int n = 0;

    shm_sum(wk->shm, &t);
    memset(&cs, 0, sizeof(cs));
    if (wk->cache_area_ok)
        cache_stats_sum(wk->shm->cache_area, &cs);

#define S(a, p, l, ty, val) \
    do { if (n < max) st[n++] = (struct admin_stat){ a, p, l, ty, (uint64_t)(val) }; } while (0)
    S("proxy.process.http.incoming_requests", "cistern_requests_total", "", "counter", t.requests);
    S("proxy.process.http.total_incoming_connections", "cistern_connections_accepted_total", "", "counter", t.conns_accepted);
    S("proxy.process.http.current_client_connections", "cistern_connections_open", "", "gauge", t.conns_open);
    S("proxy.process.http.1xx_responses", "cistern_responses_total", "{class=\"1xx\"}", "counter", t.resp_1xx);
    S("proxy.process.http.2xx_responses", "cistern_responses_total", "{class=\"2xx\"}", "counter", t.resp_2xx);
    S("proxy.process.http.3xx_responses", "cistern_responses_total", "{class=\"3xx\"}", "counter", t.resp_3xx);
    S("proxy.process.http.4xx_responses", "cistern_responses_total", "{class=\"4xx\"}", "counter", t.resp_4xx);
    S("proxy.process.http.5xx_responses", "cistern_responses_total", "{class=\"5xx\"}", "counter", t.resp_5xx);
    S("proxy.process.cistern.bad_requests", "cistern_bad_requests_total", "", "counter", t.bad_requests);
    S("proxy.process.cistern.timeouts", "cistern_timeouts_total", "", "counter", t.timeouts);
    S("proxy.process.cistern.connections_refused", "cistern_connections_refused_total", "", "counter", t.conns_refused);
    S("proxy.process.cistern.proxy_protocol_refused", "cistern_proxy_protocol_refused_total", "", "counter", t.pp_refused);
    S("proxy.process.cistern.client_bytes_in", "cistern_client_bytes_total", "{direction=\"in\"}", "counter", t.bytes_in);
    S("proxy.process.cistern.client_bytes_out", "cistern_client_bytes_total", "{direction=\"out\"}", "counter", t.bytes_out);
    S("proxy.process.http.outgoing_requests", "cistern_origin_requests_total", "", "counter", t.origin_requests);
    S("proxy.process.cistern.origin_errors", "cistern_origin_errors_total", "", "counter", t.origin_errors);
    S("proxy.process.http.total_server_connections", "cistern_origin_connections_total", "{kind=\"new\"}", "counter", t.origin_conns_opened);
    S("proxy.process.cistern.origin_connections_reused", "cistern_origin_connections_total", "{kind=\"reused\"}", "counter", t.origin_conns_reused);
    S("proxy.process.cache.hits", "cistern_cache_results_total", "{result=\"hit\"}", "counter", cs.c.hits);
    S("proxy.process.cache.misses", "cistern_cache_results_total", "{result=\"miss\"}", "counter", cs.c.misses);
    S("proxy.process.cache.bytes_served", "cistern_cache_bytes_served_total", "", "counter", cs.c.bytes_served);
    S("proxy.process.cache.fills", "cistern_cache_fills_total", "{result=\"ok\"}", "counter", cs.c.fills);
    S("proxy.process.cache.fill_failures", "cistern_cache_fills_total", "{result=\"failed\"}", "counter", cs.c.fill_failures);
    S("proxy.process.cache.evictions", "cistern_cache_evictions_total", "", "counter", cs.c.evictions);
    S("proxy.process.cache.corrupt", "cistern_cache_corrupt_total", "", "counter", cs.c.corrupt);
    S("proxy.process.cache.relocations", "cistern_cache_relocations_total", "", "counter", cs.c.relocations);
    S("proxy.process.cache.bytes_relocated", "cistern_cache_bytes_relocated_total", "", "counter", cs.c.bytes_relocated);
    S("proxy.process.cache.bytes_total", "cistern_store_bytes", "", "gauge", cs.store_bytes);
    S("proxy.process.cache.bytes_used", "cistern_store_bytes_used", "", "gauge", cs.store_bytes_used);
    S("proxy.process.cistern.reloads_ok", "cistern_reloads_total", "{result=\"ok\"}", "counter", h->reloads_ok);
    S("proxy.process.cistern.reloads_failed", "cistern_reloads_total", "{result=\"failed\"}", "counter", h->reloads_failed);
    S("proxy.process.cistern.generation", "cistern_generation", "", "gauge", h->generation);
    S("proxy.process.log.event_log_access_ok", "cistern_access_log_lines_total", "{result=\"written\"}", "counter", t.log_lines);
    S("proxy.process.log.event_log_access_fail", "cistern_access_log_lines_total", "{result=\"dropped\"}", "counter", t.log_dropped);
    S("proxy.process.cistern.worker_restarts", "cistern_worker_restarts_total", "", "counter", h->worker_restarts);
    S("proxy.process.ssl.total_success_handshake_count_in", "cistern_tls_handshakes_total", "{side=\"client\",result=\"ok\"}", "counter", t.tls_handshakes);
    S("proxy.process.ssl.total_handshake_errors_in", "cistern_tls_handshakes_total", "{side=\"client\",result=\"failed\"}", "counter", t.tls_handshake_errors);
    S("proxy.process.ssl.total_success_handshake_count_out", "cistern_tls_handshakes_total", "{side=\"origin\",result=\"ok\"}", "counter", t.origin_tls_handshakes);
    S("proxy.process.ssl.total_handshake_errors_out", "cistern_tls_handshakes_total", "{side=\"origin\",result=\"failed\"}", "counter", t.origin_tls_errors);
    S("proxy.process.http.tunnels", "cistern_tunnels_total", "", "counter", t.tunnels_opened);
    S("proxy.process.tunnel.current_active_connections", "cistern_tunnels_active", "", "gauge", t.tunnels_active);
    S("proxy.process.cistern.tunnel_bytes_up", "cistern_tunnel_bytes_total", "{direction=\"up\"}", "counter", t.tunnel_bytes_up);
    S("proxy.process.cistern.tunnel_bytes_down", "cistern_tunnel_bytes_total", "{direction=\"down\"}", "counter", t.tunnel_bytes_down);
    S("proxy.process.ssl.ssl_session_cache_hit", "cistern_tls_resumptions_total", "", "counter", t.tls_resumed);
#undef S
    return n;
}

static int
admin_json_string(struct buf *o, const char *s)
{
    int err = buf_lit(o, "\"");

    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            err |= buf_printf(o, "\\%c", ch);
        else if (ch < 0x20)
            err |= buf_printf(o, "\\u%04x", ch);
        else
            err |= buf_append(o, s, 1);
    }
    return err | buf_lit(o, "\"");
}

int
admin_handle(struct req *rq, struct req_synth *syn)
{
    /* kept between requests: SYNTH copies the body out after we return */
    static struct buf out;
    struct http_req *r = &rq->r;
    const char *path = r->base + r->path;
    size_t plen = r->path_len, q;
    struct admin_stat st[64];
    int json, n, err;

    for (q = 0; q < plen && path[q] != '?'; q++)
        ;
    if (q == 7 && memcmp(path, "/_stats", 7) == 0)
        json = 1;
    else if (q == 9 && memcmp(path, "/_metrics", 9) == 0)
        json = 0;
    else
        return 0;
    if (!conf_ip_allowed(&wk->conf->admin_allow, rq->rq_peer,
                         CONF_METHOD_ALL)) {
        syn->status = 403;
        syn->body = "the stats are not available to this address";
        return 1;
    }
    if (r->method != HTTP_GET && r->method != HTTP_HEAD) {
        syn->status = 405;
        syn->extra = "Allow: GET, HEAD\r\n";
        syn->body = "use GET";
        return 1;
    }

    n = admin_collect(st, (int)(sizeof(st) / sizeof(st[0])));
    out.start = out.end = 0;
    err = buf_alloc(&out);
    if (err == 0 && json) {
        err |= buf_lit(&out, "{\"global\": {\n");
        for (int i = 0; i < n; i++)
            err |= buf_printf(&out, "  \"%s\": \"%llu\",\n", st[i].ats,
                              (unsigned long long)st[i].v);
        err |= parent_stats(&out, 1);
        err |= buf_lit(&out, "  \"proxy.process.cistern.last_reload_failure\": ");
        err |= admin_json_string(&out, wk->shm->hdr->last_reload_msg);
        err |= buf_printf(&out, ",\n  \"proxy.node.version.manager.short\": \"%s\"\n}}\n",
                          PACKAGE_VERSION);
    } else if (err == 0) {
        const char *last = "";
        for (int i = 0; i < n; i++) {
            if (strcmp(last, st[i].prom) != 0) {
                err |= buf_printf(&out, "# TYPE %s %s\n", st[i].prom, st[i].type);
                last = st[i].prom;
            }
            err |= buf_printf(&out, "%s%s %llu\n", st[i].prom, st[i].labels,
                              (unsigned long long)st[i].v);
        }
        err |= parent_stats(&out, 0);
    }
    if (err) {
        syn->status = 500;
        syn->body = "out of memory";
        return 1;
    }
    syn->status = 200;
    syn->ctype = json ? "application/json" : "text/plain; version=0.0.4";
    syn->body = out.data + out.start;
    syn->blen = out.end - out.start;
    return 1;
}
