/*
 * shm/parenttab.h: the parent table, the health of parent proxies shared
 * by every worker (issue 20; the selection is worker/parent.c).
 *
 * One entry per parent ("host:port"), found by name and kept while there
 * is room (reloads keep a parent's state and counters; a parent that
 * leaves the config keeps its entry).  With PT_MAX entries in use, a new
 * name takes the least recently used entry (a warning in the error log).  An
 * entry counts the failures in the current window (ATS's fail_threshold
 * within retry_time); at the threshold the parent is marked down for every
 * worker.  When retry_time has passed, the first request to look takes
 * the probe: the parent stays down for the others while that request
 * tries it; a success marks it up, a failure down again for retry_time.
 * A probe that never reports (its client gone, its worker killed) holds
 * the parent for one more retry_time, then the next request probes.
 *
 * Locking: one process-shared robust mutex for the state changes; the
 * counters are atomic adds; a lookup reads names without it, trusting a
 * match only when the entry's sequence number was even and unchanged
 * around the compare (a reclaimed entry's name is rewritten under the
 * lock between two increments).
 */
#ifndef CISTERN_PARENTTAB_H
#define CISTERN_PARENTTAB_H

#include <stddef.h>
#include <stdint.h>

#define PT_MAX      256
#define PT_NAME     272

struct parenttab;

enum pt_state { PT_UP = 0, PT_DOWN, PT_PROBING };

struct parenttab_stat {
    char     name[PT_NAME];
    uint64_t requests;                /* attempts sent to it */
    uint64_t failures;                /* attempts that failed */
    uint64_t markdowns;               /* times it was marked down */
    int      state;                   /* enum pt_state */
    int      forced;                  /* marked down by `cistern ctl host down` */
};

size_t parenttab_size(void);
int    parenttab_init(void *area);
int    parenttab_check(const struct parenttab *pt);

/* The entry of name, made when new (the least recently used one's when
 * the table is full). */
int  parenttab_find(struct parenttab *pt, const char *name);
/* The entry of name, or -1 (never made here). */
int  parenttab_lookup(struct parenttab *pt, const char *name);
/* `cistern ctl host down|up`: mark entry i down until marked up (probes
 * and successes do not bring it back), or up now, its failures forgotten. */
void parenttab_force(struct parenttab *pt, int i, int down, int64_t now);
/* May a request use entry i now?  PT_UP: yes; PT_PROBING: yes, and it is
 * the probe (the others see PT_DOWN until it reports); PT_DOWN: no. */
int  parenttab_usable(struct parenttab *pt, int i, int64_t now, int retry_time);
/* An attempt is about to go to entry i. */
void parenttab_request(struct parenttab *pt, int i);
/* The attempt succeeded (the parent answered): it is up. */
void parenttab_ok(struct parenttab *pt, int i);
/* The attempt failed.  Returns 1 when that marked the parent down. */
int  parenttab_fail(struct parenttab *pt, int i, int64_t now, int threshold,
                    int retry_time);
/* A rotating counter (round_robin=strict) and a latched index
 * (round_robin=latched), kept on a rule's first parent. */
uint64_t parenttab_next(struct parenttab *pt, int i);
int  parenttab_latched(struct parenttab *pt, int i);
void parenttab_set_latched(struct parenttab *pt, int i, int v);
/* Entries in use (0..n-1 valid for parenttab_get). */
int  parenttab_count(const struct parenttab *pt);
void parenttab_get(struct parenttab *pt, int i, int64_t now, int retry_time,
                   struct parenttab_stat *out);

#endif /* CISTERN_PARENTTAB_H */
