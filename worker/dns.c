/*
 * worker/dns.c: an origin's name to all of its addresses, per worker,
 * never blocking the loop.
 *
 * A name is looked up in the hosts file (proxy.config.hostdb.host_file.path,
 * re-read when it changes), then in DNS: one A and one AAAA query through
 * libevent's evdns (evdns_base_resolve_ipv4/_ipv6, which report the
 * answer's TTL; evdns_getaddrinfo and getaddrinfo do not), to the servers of
 * proxy.config.dns.nameservers or of proxy.config.dns.resolv_conf.  Names
 * are queried as written: no search domains (ATS's default
 * search_default_domains 0).
 *
 * The answer goes into a slot of a small per-worker cache for its TTL,
 * bounded to [DNS_TTL_MIN, DNS_TTL_MAX]; a name that does not exist (or has
 * no address) for the TTL of its SOA, bounded to [DNS_TTL_MIN, DNS_NEG_MAX];
 * a resolver failure (timeout, SERVFAIL) for DNS_TTL_MIN, so a broken name
 * costs a worker at most one lookup a second.  Hosts-file answers are kept
 * DNS_HOSTS_TTL.
 *
 * Requests for a name being resolved wait on its slot (struct dns_wait,
 * embedded in the upstream): one lookup per name however many requests
 * want it.  The A and AAAA answers are awaited together, but once one of
 * them has addresses the other gets DNS_SKEW_MS more (as evdns_getaddrinfo
 * does), so a server that never answers AAAA costs half a second, not the
 * resolver's timeout.  A waiter that goes away (dns_cancel) leaves the
 * lookup running: its answer still fills the cache.
 *
 * Ownership: a slot with a lookup in flight (busy: evdns callbacks still
 * to come, whose argument is the slot) is never reused for another name.
 * If such a slot's answer expires while a cancelled query's callback is
 * still to come, the slot is orphaned (its name cleared) and freed by that
 * callback; the name takes a fresh slot.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <event2/dns.h>

#include "shm/log.h"
#include "worker/worker.h"

#define DNS_SLOTS     128   /* names per worker: origins are few */
#define DNS_TTL_MIN   1     /* TTL 0 answers: one lookup a second at most */
#define DNS_TTL_MAX   3600  /* a huge TTL still lets a move show within an hour */
#define DNS_NEG_MAX   30    /* a name that appears is seen within 30 s */
#define DNS_HOSTS_TTL 10    /* a hosts-file edit is seen within 10 s */
#define DNS_SKEW_MS   500

enum { DNS_A, DNS_AAAA };

struct dns_slot {
    char                  host[256];  /* "": free (or orphaned) */
    uint32_t              hash;
    time_t                expires;    /* the answer is good until */
    struct dns_answer     ans;
    int                   err;        /* DNS_ERR_* when ans.n == 0 */
    /* the lookup in progress */
    unsigned              pending:1;  /* not answered yet: waiters wait */
    int                   busy;       /* evdns callbacks still to come */
    struct evdns_request *rq[2];      /* [DNS_A], [DNS_AAAA] */
    int                   n[2];
    struct dns_addr       got[2][DNS_ADDR_MAX];
    int                   gerr[2];
    uint32_t              ttl, nttl;  /* of the answers, of the failures */
    struct event          skew;
    struct dns_wait      *waiters;
};

static struct dns_slot dns_slots[DNS_SLOTS];

/* The hosts file, parsed: names point into malloc'd strings of their own. */
struct hosts_ent {
    char           *name;
    struct dns_addr a;
};
static struct {
    struct hosts_ent *e;
    int               n, cap;
    time_t            checked;        /* last stat() */
    struct stat       st;             /* of the file as loaded */
    int               loaded;
} hosts;

static uint32_t
dns_hash(const char *s)
{
    uint32_t h = 2166136261u;

    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        h = (h ^ (c >= 'A' && c <= 'Z' ? c + 32 : c)) * 16777619u;
    }
    return h;
}

socklen_t
dns_sockaddr(const struct dns_addr *a, int port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (a->family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        memcpy(&s4->sin_addr, a->a, 4);
        return sizeof(*s4);
    }
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    memcpy(&s6->sin6_addr, a->a, 16);
    return sizeof(*s6);
}

void
dns_addr_of(const struct sockaddr *sa, struct dns_addr *a)
{
    memset(a, 0, sizeof(*a));
    a->family = (uint8_t)sa->sa_family;
    if (sa->sa_family == AF_INET)
        memcpy(a->a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    else if (sa->sa_family == AF_INET6)
        memcpy(a->a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

const char *
dns_strerror(int err)
{
    switch (err) {
    case DNS_E_SLOTS:
        return "too many names being resolved at once";
    case DNS_E_RESOLVER:
        return "the resolver could not be started";
    default:
        return evdns_err_to_string(err);
    }
}

/* ------------------------------------------------------------------ */
/* The hosts file */

static void
hosts_free(void)
{
    for (int i = 0; i < hosts.n; i++)
        free(hosts.e[i].name);
    free(hosts.e);
    memset(&hosts, 0, sizeof(hosts));
}

static void
hosts_add(const char *name, const struct dns_addr *a)
{
    if (hosts.n == hosts.cap) {
        int   cap = hosts.cap ? 2 * hosts.cap : 16;
        void *p = realloc(hosts.e, (size_t)cap * sizeof(*hosts.e));
        if (p == NULL)
            return;
        hosts.e = p;
        hosts.cap = cap;
    }
    if ((hosts.e[hosts.n].name = strdup(name)) == NULL)
        return;
    hosts.e[hosts.n++].a = *a;
}

/* Read path: "ADDRESS NAME [ALIAS...]" lines, '#' comments. */
static void
hosts_load(const char *path, const struct stat *st)
{
    char   *line = NULL, *save, *t;
    size_t  cap = 0;
    FILE   *f;

    hosts_free();
    hosts.loaded = 1;
    hosts.st = *st;
    if ((f = fopen(path, "re")) == NULL) {
        /* there but not opened (EMFILE...): a second later it differs
         * from this zeroed stat, so it is tried again */
        memset(&hosts.st, 0, sizeof(hosts.st));
        return;
    }
    while (getline(&line, &cap, f) > 0) {
        struct dns_addr a;

        if ((t = strchr(line, '#')) != NULL)
            *t = '\0';
        if ((t = strtok_r(line, " \t\r\n", &save)) == NULL)
            continue;
        memset(&a, 0, sizeof(a));
        if (inet_pton(AF_INET, t, a.a) == 1)
            a.family = AF_INET;
        else if (inet_pton(AF_INET6, t, a.a) == 1)
            a.family = AF_INET6;
        else
            continue;       /* (a scoped fe80::1%eth0 among them) */
        while ((t = strtok_r(NULL, " \t\r\n", &save)) != NULL)
            hosts_add(t, &a);
    }
    free(line);
    fclose(f);
}

/* host's addresses in the hosts file into *ans (IPv4 first): how many. */
static int
hosts_lookup(const char *host, struct dns_answer *ans, time_t now)
{
    const char *path = wk->conf->rec.hosts_file;
    struct stat st;

    if (path == NULL)
        return 0;
    if (!hosts.loaded || hosts.checked != now) {
        hosts.checked = now;
        memset(&st, 0, sizeof(st));
        if (stat(path, &st) < 0)
            memset(&st, 0, sizeof(st));
        if (!hosts.loaded || st.st_ino != hosts.st.st_ino
            || st.st_dev != hosts.st.st_dev || st.st_size != hosts.st.st_size
            || st.st_mtim.tv_sec != hosts.st.st_mtim.tv_sec
            || st.st_mtim.tv_nsec != hosts.st.st_mtim.tv_nsec)
            hosts_load(path, &st);
        hosts.checked = now;
    }
    ans->n = 0;
    for (int fam = 0; fam < 2; fam++) {
        for (int i = 0; i < hosts.n && ans->n < DNS_ADDR_MAX; i++) {
            const struct hosts_ent *e = &hosts.e[i];
            int dup = 0;

            if (e->a.family != (fam ? AF_INET6 : AF_INET)
                || strcasecmp(e->name, host) != 0)
                continue;
            for (int k = 0; k < ans->n; k++)
                dup |= memcmp(&ans->addr[k], &e->a, sizeof(e->a)) == 0;
            if (!dup)
                ans->addr[ans->n++] = e->a;
        }
    }
    return ans->n;
}

/* ------------------------------------------------------------------ */
/* The resolver */

/* The worker's evdns base, made on first use from the configuration. */
static struct evdns_base *
dns_base(void)
{
    struct worker *w = wk;
    const struct conf_records *rec = &w->conf->rec;
    struct sockaddr_storage ns[CONF_DNS_SERVERS_MAX];
    const char *why = NULL;
    int n, rc;

    if (w->dns != NULL)
        return w->dns;
    w->dns = evdns_base_new(w->base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (w->dns == NULL) {
        log_warn("cannot initialise the resolver");
        return NULL;
    }
    n = conf_dns_servers(rec->dns_nameservers ? rec->dns_nameservers : "NULL",
                         ns, CONF_DNS_SERVERS_MAX, &why);
    for (int i = 0; i < n; i++)
        evdns_base_nameserver_sockaddr_add(w->dns, (struct sockaddr *)&ns[i],
            ns[i].ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                       : sizeof(struct sockaddr_in6), 0);
    if (n <= 0) {
        /* (without nameservers evdns falls back to 127.0.0.1) */
        rc = evdns_base_resolv_conf_parse(w->dns,
                                          DNS_OPTION_NAMESERVERS | DNS_OPTION_MISC,
                                          rec->dns_resolv_conf);
        if (rc != 0)
            log_warn("%s: %s; origin names are sent to 127.0.0.1",
                     rec->dns_resolv_conf,
                     rc == 6 ? "no nameserver in it" : "cannot be read");
    }
    if (evdns_base_count_nameservers(w->dns) == 0) {
        /* no socket could be made (out of descriptors): evdns would queue
         * every query, with no timer, for good.  The lookup fails now
         * (kept DNS_TTL_MIN) and the next one makes the base again. */
        log_warn("cannot initialise the resolver: no nameserver could be added");
        evdns_base_free(w->dns, 0);
        w->dns = NULL;
    }
    return w->dns;
}

/* Give s's answer to wait. */
static enum dns_rc
dns_give(const struct dns_slot *s, struct dns_wait *wait)
{
    if (s->ans.n == 0) {
        wait->err = s->err;
        return DNS_FAIL;
    }
    wait->ans->n = s->ans.n;
    memcpy(wait->ans->addr, s->ans.addr, (size_t)s->ans.n * sizeof(s->ans.addr[0]));
    return DNS_OK;
}

static uint32_t
dns_clamp(uint32_t ttl, uint32_t lo, uint32_t hi)
{
    return ttl < lo ? lo : ttl > hi ? hi : ttl;
}

/* Both answers are in (or the skew is over): settle s, wake its waiters. */
static void
dns_finish(struct dns_slot *s)
{
    uint32_t ttl;

    if (event_initialized(&s->skew))
        event_del(&s->skew);
    s->pending = 0;
    s->ans.n = 0;
    for (int t = DNS_A; t <= DNS_AAAA; t++)
        for (int i = 0; i < s->n[t] && s->ans.n < DNS_ADDR_MAX; i++)
            s->ans.addr[s->ans.n++] = s->got[t][i];
    s->err = 0;
    if (s->ans.n > 0) {
        ttl = dns_clamp(s->ttl, DNS_TTL_MIN, DNS_TTL_MAX);
    } else {
        /* NXDOMAIN wins; else NODATA; else the first failure */
        int e0 = s->gerr[DNS_A], e1 = s->gerr[DNS_AAAA];
        s->err = e0 == DNS_ERR_NOTEXIST || e1 == DNS_ERR_NOTEXIST ? DNS_ERR_NOTEXIST
                 : e0 == DNS_ERR_NODATA || e1 == DNS_ERR_NODATA ? DNS_ERR_NODATA
                 : e0 ? e0 : e1 ? e1 : DNS_ERR_NODATA;
        if (s->err == DNS_ERR_NOTEXIST || s->err == DNS_ERR_NODATA)
            ttl = dns_clamp(s->nttl, DNS_TTL_MIN, DNS_NEG_MAX);
        else
            ttl = DNS_TTL_MIN;
    }
    s->expires = time(NULL) + (time_t)ttl;
    while (s->waiters != NULL) {
        struct dns_wait *w = s->waiters;

        s->waiters = w->next;
        if (s->waiters)
            s->waiters->prev = NULL;
        w->next = w->prev = NULL;
        w->slot = NULL;
        w->done(w, dns_give(s, w));
    }
}

static void
dns_on_answer(struct dns_slot *s, int t, int result, int count, int ttl,
              const void *addrs)
{
    s->busy--;
    s->rq[t] = NULL;
    if (!s->pending) {
        /* a query cancelled at the end of the skew */
        if (s->busy == 0 && s->host[0] == '\0')
            s->expires = 0;
        return;
    }
    if (result == DNS_ERR_NONE && count > 0 && addrs != NULL) {
        int len = t == DNS_A ? 4 : 16;

        for (int i = 0; i < count && s->n[t] < DNS_ADDR_MAX; i++) {
            struct dns_addr *a = &s->got[t][s->n[t]++];
            memset(a, 0, sizeof(*a));
            a->family = t == DNS_A ? AF_INET : AF_INET6;
            memcpy(a->a, (const char *)addrs + i * len, (size_t)len);
        }
        if ((uint32_t)ttl < s->ttl)
            s->ttl = (uint32_t)ttl;
    } else {
        s->gerr[t] = result != DNS_ERR_NONE ? result : DNS_ERR_NODATA;
        if ((uint32_t)ttl < s->nttl)
            s->nttl = (uint32_t)ttl;
    }
    if (s->busy == 0) {
        dns_finish(s);
    } else if (s->n[t] > 0) {
        struct timeval tv = { 0, DNS_SKEW_MS * 1000 };
        event_add(&s->skew, &tv);
    }
}

static void
dns_on_a(int result, char type, int count, int ttl, void *addrs, void *arg)
{
    (void)type;
    dns_on_answer(arg, DNS_A, result, count, ttl, addrs);
}

static void
dns_on_aaaa(int result, char type, int count, int ttl, void *addrs, void *arg)
{
    (void)type;
    dns_on_answer(arg, DNS_AAAA, result, count, ttl, addrs);
}

/* One family answered, the other is late: go with what there is. */
static void
dns_on_skew(evutil_socket_t fd, short what, void *arg)
{
    struct dns_slot *s = arg;

    (void)fd;
    (void)what;
    if (!s->pending)
        return;
    for (int t = DNS_A; t <= DNS_AAAA; t++)
        if (s->rq[t] != NULL)
            evdns_cancel_request(wk->dns, s->rq[t]);   /* its callback still comes */
    dns_finish(s);
}

/* Send s's queries; -1 when none could be sent (s settled as failed). */
static int
dns_start(struct dns_slot *s)
{
    struct evdns_base *base = dns_base();

    s->n[0] = s->n[1] = 0;
    s->gerr[0] = s->gerr[1] = 0;
    s->ttl = s->nttl = UINT32_MAX;
    s->waiters = NULL;
    if (base == NULL) {
        s->err = DNS_E_RESOLVER;
        s->ans.n = 0;
        s->expires = time(NULL) + DNS_TTL_MIN;
        return -1;
    }
    evtimer_assign(&s->skew, wk->base, dns_on_skew, s);
    s->pending = 1;
    s->busy = 2;        /* both counted before either is sent */
    s->rq[DNS_A] = evdns_base_resolve_ipv4(base, s->host, DNS_QUERY_NO_SEARCH,
                                           dns_on_a, s);
    if (s->rq[DNS_A] == NULL) {
        s->busy--;
        s->gerr[DNS_A] = DNS_ERR_UNKNOWN;
    }
    s->rq[DNS_AAAA] = evdns_base_resolve_ipv6(base, s->host, DNS_QUERY_NO_SEARCH,
                                              dns_on_aaaa, s);
    if (s->rq[DNS_AAAA] == NULL) {
        s->busy--;
        s->gerr[DNS_AAAA] = DNS_ERR_UNKNOWN;
    }
    if (s->busy == 0) {
        dns_finish(s);
        return -1;
    }
    return 0;
}

static struct dns_slot *
dns_find(const char *host, uint32_t h)
{
    for (int i = 0; i < DNS_SLOTS; i++)
        if (dns_slots[i].hash == h && dns_slots[i].host[0] != '\0'
            && strcasecmp(dns_slots[i].host, host) == 0)
            return &dns_slots[i];
    return NULL;
}

/* A slot for a new name: a free one, else the answer that expires first
 * (no lookup in flight in either case); NULL when every slot is busy. */
static struct dns_slot *
dns_alloc(void)
{
    struct dns_slot *v = NULL;

    for (int i = 0; i < DNS_SLOTS; i++) {
        struct dns_slot *s = &dns_slots[i];

        if (s->pending || s->busy > 0)
            continue;
        if (s->host[0] == '\0')
            return s;
        if (v == NULL || s->expires < v->expires)
            v = s;
    }
    return v;
}

static void
dns_enqueue(struct dns_slot *s, struct dns_wait *wait)
{
    wait->slot = s;
    wait->prev = NULL;
    wait->next = s->waiters;
    if (s->waiters)
        s->waiters->prev = wait;
    s->waiters = wait;
}

enum dns_rc
dns_lookup(const char *host, struct dns_wait *wait)
{
    time_t now = time(NULL);
    uint32_t h = dns_hash(host);
    struct dns_slot *s = dns_find(host, h);

    wait->slot = NULL;
    wait->err = 0;
    if (s != NULL && s->pending) {
        dns_enqueue(s, wait);
        return DNS_WAIT;
    }
    if (s != NULL && s->expires > now)
        return dns_give(s, wait);
    if (s != NULL && s->busy > 0) {
        s->host[0] = '\0';      /* orphaned: its last callback frees it */
        s = NULL;
    }
    if (s == NULL && (s = dns_alloc()) == NULL) {
        wait->err = DNS_E_SLOTS;
        return DNS_FAIL;
    }
    snprintf(s->host, sizeof(s->host), "%s", host);
    s->hash = h;
    if (hosts_lookup(host, &s->ans, now) > 0) {
        s->err = 0;
        s->expires = now + DNS_HOSTS_TTL;
        return dns_give(s, wait);
    }
    if (dns_start(s) < 0 || !s->pending)
        return dns_give(s, wait);
    dns_enqueue(s, wait);
    return DNS_WAIT;
}

void
dns_cancel(struct dns_wait *wait)
{
    struct dns_slot *s = wait->slot;

    if (s == NULL)
        return;
    if (wait->prev)
        wait->prev->next = wait->next;
    else
        s->waiters = wait->next;
    if (wait->next)
        wait->next->prev = wait->prev;
    wait->next = wait->prev = NULL;
    wait->slot = NULL;
}

void
dns_shutdown(struct worker *w)
{
    for (int i = 0; i < DNS_SLOTS; i++)
        if (event_initialized(&dns_slots[i].skew))
            event_del(&dns_slots[i].skew);
    memset(dns_slots, 0, sizeof(dns_slots));
    hosts_free();
    if (w->dns != NULL) {
        /* no callbacks: nothing waits any more, the slots are gone */
        evdns_base_free(w->dns, 0);
        w->dns = NULL;
    }
}
