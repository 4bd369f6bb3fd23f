/*
 * worker/dns.h: an origin's name to all of its addresses (worker/dns.c).
 *
 * Types only plus a small API: the upstream embeds a struct dns_wait and a
 * struct dns_answer, so a lookup needs no allocation of its own.
 */
#ifndef CISTERN_WORKER_DNS_H
#define CISTERN_WORKER_DNS_H

#include <stdint.h>
#include <sys/socket.h>

struct worker;

/* The addresses kept per name: IPv4 ones first (ATS's default
 * proxy.config.hostdb.ip_resolve "ipv4;ipv6"), then IPv6 ones.  Sixteen is
 * more than any origin we know of publishes (libevent keeps 32 of each). */
#define DNS_ADDR_MAX 16

struct dns_addr {
    uint8_t family;                   /* AF_INET or AF_INET6 */
    uint8_t a[16];                    /* AF_INET: the first 4 bytes */
};

struct dns_answer {
    int             n;
    struct dns_addr addr[DNS_ADDR_MAX];
};

enum dns_rc {
    DNS_OK = 0,                       /* *ans holds at least one address */
    DNS_WAIT,                         /* wait->done will be called */
    DNS_FAIL,                         /* no address (cached negatively) */
};

struct dns_slot;
struct dns_wait;
typedef void (*dns_done_fn)(struct dns_wait *wait, enum dns_rc rc);

/* A lookup's waiter, embedded in its owner (the upstream). */
struct dns_wait {
    struct dns_wait   *next, *prev;
    struct dns_slot   *slot;          /* the lookup waited on, or NULL */
    struct dns_answer *ans;           /* where the answer goes */
    dns_done_fn        done;
    int                err;           /* DNS_FAIL: why (dns_strerror) */
};

/* dns_wait.err beyond libevent's DNS_ERR_* */
#define DNS_E_SLOTS    (-1)           /* every slot has a lookup in flight */
#define DNS_E_RESOLVER (-2)           /* evdns_base_new() failed */

/* Resolve host (a name, not a numeric address) into *wait->ans.  Returns
 * DNS_OK or DNS_FAIL when the answer is known now (cached, the hosts file,
 * or the resolver could not be started), else DNS_WAIT: wait->done(wait,
 * DNS_OK or DNS_FAIL) is called later from the event loop, never from
 * inside dns_lookup().  host must be shorter than 256 bytes. */
enum dns_rc dns_lookup(const char *host, struct dns_wait *wait);
/* Stop waiting (the lookup itself goes on and fills the cache); a no-op
 * when wait is not waiting. */
void dns_cancel(struct dns_wait *wait);
/* err as words. */
const char *dns_strerror(int err);
/* Free the resolver and forget every answer (worker exit). */
void dns_shutdown(struct worker *w);
/* a as a socket address with port: its length. */
socklen_t dns_sockaddr(const struct dns_addr *a, int port,
                       struct sockaddr_storage *ss);
/* The address ss holds (family and bytes), for comparing. */
void dns_addr_of(const struct sockaddr *sa, struct dns_addr *a);

#endif
