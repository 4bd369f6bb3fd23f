/*
 * worker/admin.c: the stats endpoints, served by every worker.
 *
 *   /_stats    JSON in the layout of ATS's stats_over_http plugin:
 *              {"global": {"name": "value", ...}} (values as strings, as
 *              ATS writes them), ATS names where ATS has the counter
 *   /_metrics  Prometheus text format, with labels
 *
 * Both list, from one table (admin_collect, which `cistern ctl metric`
 * reads too): the process counters, the latency histograms by cache
 * result, the per-rule and per-origin-host series (issue 25) and the
 * parents' counters and states (the shared parent table).  /_metrics has
 * HELP and TYPE for every family (`promtool check metrics` is clean).
 *
 * Counters are summed over every worker slot in shm plus the totals the
 * master folded in from reaped slots, so they never go backwards across
 * reloads and restarts.  Access is decided by
 * proxy.config.cistern.admin.allow, not by ip_allow.config: reading
 * counters is not a method question.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shm/labeltab.h"
#include "shm/log.h"
#include "shm/parenttab.h"
#include "worker/worker.h"

/* One row per series, in family order (a family's rows together). */
static int
admin_add(struct admin_stats *as, const char *ats, const char *prom, const char *labels,
          const char *type, const char *help, uint64_t v)
{
    struct admin_stat *st;

    if (as->n == as->max) {
        int max = as->max ? as->max * 2 : 256;
        struct admin_stat *ns = realloc(as->st, sizeof(*ns) * (size_t)max);
        if (ns == NULL)
            return -1;
        as->st = ns;
        as->max = max;
    }
    st = &as->st[as->n++];
    memset(st, 0, sizeof(*st));
    snprintf(st->ats, sizeof(st->ats), "%s", ats);
    st->prom = prom;
    snprintf(st->labels, sizeof(st->labels), "%s", labels);
    st->type = type;
    st->help = help;
    st->suffix = "";
    st->div = 1;
    st->v = v;
    return 0;
}

/* A label value as the text format wants it (\\, \" and \n escaped). */
static void
admin_label(char *out, size_t len, const char *v)
{
    size_t o = 0;

    for (; *v && o + 3 < len; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n') {
            out[o++] = '\\';
            out[o++] = *v == '\n' ? 'n' : *v;
        } else {
            out[o++] = *v;
        }
    }
    out[o] = '\0';
}

/* The plain counters, with ATS's names where ATS has the counter. */
static int
admin_collect_flat(struct admin_stats *as, const struct shm_counters *tp,
                   const struct cache_stats *csp, int64_t objects)
{
    const struct shm_counters t = *tp;
    const struct cache_stats cs = *csp;
    const struct shm_hdr *h = wk->shm->hdr;
    int err = 0;
    uint64_t fill = cs.store_bytes ? cs.store_bytes_used * 1000000 / cs.store_bytes : 0;

#define S(a, p, l, ty, help, val) err |= admin_add(as, a, p, l, ty, help, (uint64_t)(val))
    S("proxy.process.http.incoming_requests", "cistern_requests_total", "", "counter", "Client requests received.", t.requests);
    S("proxy.process.http.total_incoming_connections", "cistern_connections_accepted_total", "", "counter", "Client connections accepted.", t.conns_accepted);
    S("proxy.process.http.current_client_connections", "cistern_connections_open", "", "gauge", "Client connections open now.", t.conns_open);
    S("proxy.process.http.1xx_responses", "cistern_responses_total", "{class=\"1xx\"}", "counter", "Responses sent to clients, by status class.", t.resp_1xx);
    S("proxy.process.http.2xx_responses", "cistern_responses_total", "{class=\"2xx\"}", "counter", "", t.resp_2xx);
    S("proxy.process.http.3xx_responses", "cistern_responses_total", "{class=\"3xx\"}", "counter", "", t.resp_3xx);
    S("proxy.process.http.4xx_responses", "cistern_responses_total", "{class=\"4xx\"}", "counter", "", t.resp_4xx);
    S("proxy.process.http.5xx_responses", "cistern_responses_total", "{class=\"5xx\"}", "counter", "", t.resp_5xx);
    S("proxy.process.cistern.bad_requests", "cistern_bad_requests_total", "", "counter", "Requests refused by the strict parser (4xx).", t.bad_requests);
    S("proxy.process.cistern.timeouts", "cistern_timeouts_total", "", "counter", "Client connections closed by a timeout.", t.timeouts);
    S("proxy.process.cistern.connections_refused", "cistern_connections_refused_total", "", "counter", "Connections refused over proxy.config.net.connections_throttle.", t.conns_refused);
    S("proxy.process.cistern.proxy_protocol_refused", "cistern_proxy_protocol_refused_total", "", "counter", "Connections closed for their PROXY protocol header.", t.pp_refused);
    S("proxy.process.cistern.client_bytes_in", "cistern_client_bytes_total", "{direction=\"in\"}", "counter", "Bytes read from and written to clients.", t.bytes_in);
    S("proxy.process.cistern.client_bytes_out", "cistern_client_bytes_total", "{direction=\"out\"}", "counter", "", t.bytes_out);
    S("proxy.process.http.outgoing_requests", "cistern_origin_requests_total", "", "counter", "Requests sent to origins and parents.", t.origin_requests);
    S("proxy.process.cistern.origin_errors", "cistern_origin_errors_total", "", "counter", "Origin transactions that failed.", t.origin_errors);
    S("proxy.process.http.total_server_connections", "cistern_origin_connections_total", "{kind=\"new\"}", "counter", "Origin connections used, new or reused from the pool.", t.origin_conns_opened);
    S("proxy.process.cistern.origin_connections_reused", "cistern_origin_connections_total", "{kind=\"reused\"}", "counter", "", t.origin_conns_reused);
    S("proxy.process.cache.hits", "cistern_cache_results_total", "{result=\"hit\"}", "counter", "Cache lookups, by result.", cs.c.hits);
    S("proxy.process.cache.misses", "cistern_cache_results_total", "{result=\"miss\"}", "counter", "", cs.c.misses);
    S("proxy.process.cache.bytes_served", "cistern_cache_bytes_served_total", "", "counter", "Bytes served from the cache.", cs.c.bytes_served);
    S("proxy.process.cache.fills", "cistern_cache_fills_total", "{result=\"ok\"}", "counter", "Cache fills, committed or failed.", cs.c.fills);
    S("proxy.process.cache.fill_failures", "cistern_cache_fills_total", "{result=\"failed\"}", "counter", "", cs.c.fill_failures);
    S("proxy.process.cache.evictions", "cistern_cache_evictions_total", "", "counter", "Index entries dropped: lapped, evicted or damaged.", cs.c.evictions);
    S("proxy.process.cache.corrupt", "cistern_cache_corrupt_total", "", "counter", "Records that failed validation.", cs.c.corrupt);
    S("proxy.process.cache.relocations", "cistern_cache_relocations_total", "", "counter", "Hot objects rewritten at the ring's head (S3-FIFO).", cs.c.relocations);
    S("proxy.process.cache.bytes_relocated", "cistern_cache_bytes_relocated_total", "", "counter", "Record bytes those rewrites wrote.", cs.c.bytes_relocated);
    S("proxy.process.cache.bytes_total", "cistern_store_bytes", "", "gauge", "Size of the content ring in bytes.", cs.store_bytes);
    S("proxy.process.cache.bytes_used", "cistern_store_bytes_used", "", "gauge", "Ring bytes holding live records (approximate).", cs.store_bytes_used);
    S("proxy.process.cistern.store_fill_ppm", "cistern_store_fill_ratio", "", "gauge", "Fraction of the ring holding live records.", fill);
    as->st[as->n - 1].div = 1000000;
    if (objects >= 0)
        S("proxy.process.cache.direntries.used", "cistern_cache_objects", "", "gauge", "Entries in the cache index (objects and Vary markers).", objects);
    S("proxy.process.cistern.reloads_ok", "cistern_reloads_total", "{result=\"ok\"}", "counter", "Configuration reloads, by result.", h->reloads_ok);
    S("proxy.process.cistern.reloads_failed", "cistern_reloads_total", "{result=\"failed\"}", "counter", "", h->reloads_failed);
    S("proxy.process.cistern.generation", "cistern_generation", "", "gauge", "The serving generation of workers.", h->generation);
    S("proxy.node.config.draining", "cistern_draining", "", "gauge", "1 while drained by `cistern ctl server drain`.", h->ctl_drain);
    S("proxy.process.log.event_log_access_ok", "cistern_access_log_lines_total", "{result=\"written\"}", "counter", "Access log lines, written or dropped.", t.log_lines);
    S("proxy.process.log.event_log_access_fail", "cistern_access_log_lines_total", "{result=\"dropped\"}", "counter", "", t.log_dropped);
    S("proxy.process.cistern.worker_restarts", "cistern_worker_restarts_total", "", "counter", "Workers that died and were respawned.", h->worker_restarts);
    S("proxy.process.ssl.total_success_handshake_count_in", "cistern_tls_handshakes_total", "{side=\"client\",result=\"ok\"}", "counter", "TLS handshakes, by side and result.", t.tls_handshakes);
    S("proxy.process.ssl.total_handshake_errors_in", "cistern_tls_handshakes_total", "{side=\"client\",result=\"failed\"}", "counter", "", t.tls_handshake_errors);
    S("proxy.process.ssl.total_success_handshake_count_out", "cistern_tls_handshakes_total", "{side=\"origin\",result=\"ok\"}", "counter", "", t.origin_tls_handshakes);
    S("proxy.process.ssl.total_handshake_errors_out", "cistern_tls_handshakes_total", "{side=\"origin\",result=\"failed\"}", "counter", "", t.origin_tls_errors);
    S("proxy.process.http.tunnels", "cistern_tunnels_total", "", "counter", "CONNECT and Upgrade tunnels begun.", t.tunnels_opened);
    S("proxy.process.tunnel.current_active_connections", "cistern_tunnels_active", "", "gauge", "Tunnels open now.", t.tunnels_active);
    S("proxy.process.cistern.tunnel_bytes_up", "cistern_tunnel_bytes_total", "{direction=\"up\"}", "counter", "Bytes relayed by tunnels, by direction.", t.tunnel_bytes_up);
    S("proxy.process.cistern.tunnel_bytes_down", "cistern_tunnel_bytes_total", "{direction=\"down\"}", "counter", "", t.tunnel_bytes_down);
    S("proxy.process.cistern.rww_joiners", "cistern_rww_joiners", "", "gauge", "Requests following a fill in progress now (read-while-writer), HTTP/1.1 and HTTP/2.", t.rww_joiners);
    S("proxy.process.ssl.ssl_session_cache_hit", "cistern_tls_resumptions_total", "", "counter", "Client TLS sessions resumed.", t.tls_resumed);
    S("proxy.process.cistern.purges.url", "cistern_purges_total", "{kind=\"url\"}", "counter", "Purges answered (PURGE, POST /_purge, cistern ctl), by kind.", t.purges[SHM_PURGE_URL]);
    S("proxy.process.cistern.purges.tag", "cistern_purges_total", "{kind=\"tag\"}", "counter", "", t.purges[SHM_PURGE_TAG]);
    S("proxy.process.cistern.purges.prefix", "cistern_purges_total", "{kind=\"prefix\"}", "counter", "", t.purges[SHM_PURGE_PREFIX]);
    S("proxy.process.cistern.purges.host", "cistern_purges_total", "{kind=\"host\"}", "counter", "", t.purges[SHM_PURGE_HOST]);
    S("proxy.process.cistern.purges.all", "cistern_purges_total", "{kind=\"all\"}", "counter", "", t.purges[SHM_PURGE_ALL]);
    S("proxy.process.cistern.purges_soft", "cistern_purges_soft_total", "", "counter", "Purges that marked objects stale instead of removing them.", t.purges_soft);
    S("proxy.process.cistern.purged_objects", "cistern_purged_objects_total", "", "counter", "Stored objects removed or marked stale by purges.", t.purged_objects);
#undef S
    return err;
}

/* The latency histograms: cumulative buckets, as Prometheus wants them. */
static int
admin_collect_hist(struct admin_stats *as, const struct shm_counters *t)
{
    static const char *const kinds[] = { "total", "ttfb", "origin" };
    static const char *const fams[] = { "cistern_request_duration_seconds",
                                        "cistern_request_ttfb_seconds",
                                        "cistern_origin_duration_seconds" };
    static const char *const helps[] = {
        "Request latency from the head's first byte to the end, by cache result.",
        "Time from the head's first byte to the answer's head being ready, by cache result.",
        "Time from the origin transaction's start to the origin's response head, by cache result." };
    static const char *const res[] = { "hit", "miss", "other" };
    char ats[160], lab[160];
    int err = 0;

    for (int k = 0; k < SHM_LAT_KINDS; k++)
        for (int r = 0; r < SHM_RES_N; r++) {
            uint64_t cum = 0;
            for (int b = 0; b < SHM_LAT_BUCKETS; b++) {
                cum += t->lat[k][r][b];
                if (b < SHM_LAT_BUCKETS - 1) {
                    uint64_t us = shm_lat_bounds_us[b];
                    snprintf(ats, sizeof(ats), "proxy.process.cistern.latency.%s.%s.le_%llu",
                             kinds[k], res[r], (unsigned long long)us);
                    snprintf(lab, sizeof(lab), "{result=\"%s\",le=\"%g\"}", res[r], (double)us / 1e6);
                } else {
                    snprintf(ats, sizeof(ats), "proxy.process.cistern.latency.%s.%s.le_inf",
                             kinds[k], res[r]);
                    snprintf(lab, sizeof(lab), "{result=\"%s\",le=\"+Inf\"}", res[r]);
                }
                err |= admin_add(as, ats, fams[k], lab, "histogram", helps[k], cum);
                if (err == 0)
                    as->st[as->n - 1].suffix = "_bucket";
            }
            snprintf(lab, sizeof(lab), "{result=\"%s\"}", res[r]);
            snprintf(ats, sizeof(ats), "proxy.process.cistern.latency.%s.%s.sum_us", kinds[k], res[r]);
            err |= admin_add(as, ats, fams[k], lab, "histogram", helps[k], t->lat_sum_us[k][r]);
            if (err == 0) {
                as->st[as->n - 1].suffix = "_sum";
                as->st[as->n - 1].div = 1000000;
            }
            snprintf(ats, sizeof(ats), "proxy.process.cistern.latency.%s.%s.count", kinds[k], res[r]);
            err |= admin_add(as, ats, fams[k], lab, "histogram", helps[k], cum);
            if (err == 0)
                as->st[as->n - 1].suffix = "_count";
        }
    return err;
}

/* Per remap rule and per origin host (shm/labeltab.h: the names). */
static int
admin_collect_labelled(struct admin_stats *as, const struct shm_counters *t)
{
    static const struct { const char *ats, *prom, *type, *help, *extra; int i; } rf[] = {
        { "requests", "cistern_rule_requests_total", "counter",
          "Requests by remap rule (@name= or file:line; at most 63 rules, the rest \"other\").", "", SHM_RULE_REQ },
        { "hits", "cistern_rule_cache_results_total", "counter",
          "Requests by remap rule and cache result.", ",result=\"hit\"", SHM_RULE_HIT },
        { "misses", "cistern_rule_cache_results_total", "counter", "", ",result=\"miss\"", SHM_RULE_MISS },
        { "bytes", "cistern_rule_bytes_total", "counter", "Answer bytes sent, by remap rule.", "", SHM_RULE_BYTES },
        { "errors", "cistern_rule_errors_total", "counter",
          "Answers that were 5xx or cut short, by remap rule.", "", SHM_RULE_ERR },
    };
    static const struct { const char *ats, *prom, *type, *help; int i; } of[] = {
        { "requests", "cistern_origin_host_requests_total", "counter",
          "Requests sent, by origin host (at most 31 hosts, the rest \"other\").", SHM_OH_REQ },
        { "errors", "cistern_origin_host_errors_total", "counter",
          "Failed origin transactions, by origin host.", SHM_OH_ERR },
        { "connect_us", "cistern_origin_connect_seconds", "summary",
          "Time to connect to an origin host (new connections).", SHM_OH_CONNECT_US },
        { "connects", "cistern_origin_connect_seconds", "summary", "", SHM_OH_CONNECTS },
    };
    const struct labeltab *lt = wk->shm->labeltab;
    int nr = labeltab_count(lt, LT_RULE), no = labeltab_count(lt, LT_OHOST), err = 0;
    char ats[360], lab[256], v[LT_NAME * 2];

    for (size_t f = 0; f < sizeof(rf) / sizeof(rf[0]); f++)
        for (int i = 0; i < nr; i++) {
            admin_label(v, sizeof(v), labeltab_name(lt, LT_RULE, i));
            snprintf(ats, sizeof(ats), "proxy.process.cistern.rule.%s.%s",
                     labeltab_name(lt, LT_RULE, i), rf[f].ats);
            snprintf(lab, sizeof(lab), "{rule=\"%s\"%s}", v, rf[f].extra);
            err |= admin_add(as, ats, rf[f].prom, lab, rf[f].type, rf[f].help, t->rule[i][rf[f].i]);
        }
    for (size_t f = 0; f < sizeof(of) / sizeof(of[0]); f++)
        for (int i = 0; i < no; i++) {
            admin_label(v, sizeof(v), labeltab_name(lt, LT_OHOST, i));
            snprintf(ats, sizeof(ats), "proxy.process.cistern.origin.%s.%s",
                     labeltab_name(lt, LT_OHOST, i), of[f].ats);
            snprintf(lab, sizeof(lab), "{host=\"%s\"}", v);
            err |= admin_add(as, ats, of[f].prom, lab, of[f].type, of[f].help, t->ohost[i][of[f].i]);
            if (err == 0 && of[f].i == SHM_OH_CONNECT_US) {
                as->st[as->n - 1].suffix = "_sum";
                as->st[as->n - 1].div = 1000000;
            } else if (err == 0 && of[f].i == SHM_OH_CONNECTS) {
                as->st[as->n - 1].suffix = "_count";
            }
        }
    return err;
}

/* The parents (shm/parenttab.h). */
static int
admin_collect_parents(struct admin_stats *as)
{
    static const char *const states[] = { "up", "down", "probing" };
    static const struct { const char *ats, *prom, *type, *help; } pf[] = {
        { "requests", "cistern_parent_requests_total", "counter", "Attempts sent to a parent proxy." },
        { "failures", "cistern_parent_failures_total", "counter", "Attempts to a parent proxy that failed." },
        { "marked_down", "cistern_parent_markdowns_total", "counter", "Times a parent proxy was marked down." },
        { "state", "cistern_parent_up", "gauge", "1 when the parent proxy is up (its state in the label)." },
    };
    struct parenttab *pt = wk->shm->parenttab;
    int n = parenttab_count(pt), err = 0, rt = wk->conf->rec.parent_retry_time;
    time_t now = time(NULL);
    struct parenttab_stat s;
    char ats[PT_NAME + 64], lab[256], v[LT_NAME * 2];

    for (size_t f = 0; f < sizeof(pf) / sizeof(pf[0]); f++)
        for (int i = 0; i < n; i++) {
            parenttab_get(pt, i, now, rt, &s);
            admin_label(v, sizeof(v), s.name);
            snprintf(ats, sizeof(ats), "proxy.process.cistern.parent.%s.%s", s.name, pf[f].ats);
            if (f == 3)
                snprintf(lab, sizeof(lab), "{parent=\"%s\",state=\"%s\"}", v, states[s.state]);
            else
                snprintf(lab, sizeof(lab), "{parent=\"%s\"}", v);
            err |= admin_add(as, ats, pf[f].prom, lab, pf[f].type, pf[f].help,
                             f == 0 ? s.requests : f == 1 ? s.failures
                             : f == 2 ? s.markdowns : (uint64_t)(s.state == PT_UP));
            if (err == 0 && f == 3)
                as->st[as->n - 1].text = states[s.state];
        }
    return err;
}

int
admin_collect(struct admin_stats *as)
{
    static struct shm_counters t;       /* 5 KiB: not on the stack */
    struct cache_stats cs;

    as->n = 0;
    shm_sum(wk->shm, &t);
    memset(&cs, 0, sizeof(cs));
    if (wk->cache_area_ok)
        cache_stats_sum(wk->shm->cache_area, &cs);
    if (admin_collect_flat(as, &t, &cs, wk->cache ? cache_objects(wk->cache) : -1)
        || admin_collect_hist(as, &t) || admin_collect_labelled(as, &t)
        || admin_collect_parents(as))
        return -1;
    return 0;
}

void
admin_stats_free(struct admin_stats *as)
{
    free(as->st);
    memset(as, 0, sizeof(*as));
}

/* A value as text: an integer (the ATS name's unit: sum_us, fill_ppm), or
 * for Prometheus v / div with six decimals (seconds, a ratio). */
int
admin_value(const struct admin_stat *st, char *out, size_t len, int prom)
{
    if (prom && st->div > 1)
        return snprintf(out, len, "%.6f", (double)st->v / (double)st->div);
    return snprintf(out, len, "%llu", (unsigned long long)st->v);
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
    static struct admin_stats as;
    struct http_req *r = &rq->r;
    const char *path = r->base + r->path;
    size_t plen = r->path_len, q;
    int json, err;
    char val[64];

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

    err = admin_collect(&as);
    out.start = out.end = 0;
    err |= buf_alloc(&out);
    if (err == 0 && json) {
        err |= buf_lit(&out, "{\"global\": {\n");
        for (int i = 0; i < as.n; i++) {
            if (as.st[i].text)
                snprintf(val, sizeof(val), "%s", as.st[i].text);
            else
                admin_value(&as.st[i], val, sizeof(val), 0);
            err |= buf_printf(&out, "  \"%s\": \"%s\",\n", as.st[i].ats, val);
        }
        err |= buf_lit(&out, "  \"proxy.process.cistern.last_reload_failure\": ");
        err |= admin_json_string(&out, wk->shm->hdr->last_reload_msg);
        err |= buf_printf(&out, ",\n  \"proxy.node.version.manager.short\": \"%s\"\n}}\n",
                          PACKAGE_VERSION);
    } else if (err == 0) {
        const char *last = "";
        for (int i = 0; i < as.n; i++) {
            const struct admin_stat *st = &as.st[i];
            if (strcmp(last, st->prom) != 0) {
                err |= buf_printf(&out, "# HELP %s %s\n# TYPE %s %s\n", st->prom, st->help,
                                  st->prom, st->type);
                last = st->prom;
            }
            admin_value(st, val, sizeof(val), 1);
            err |= buf_printf(&out, "%s%s%s %s\n", st->prom, st->suffix, st->labels, val);
        }
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
