/*
 * shm/labeltab.c: the metric label names (see labeltab.h).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "shm/labeltab.h"
#include "shm/shm.h"

#define LT_MAGIC 0x4c544231u        /* "LTB1" */

struct labeltab {
    uint32_t        magic;
    uint32_t        n[LT_KINDS];
    pthread_mutex_t lock;
    char            rule[SHM_RULES][LT_NAME];
    char            ohost[SHM_OHOSTS][LT_NAME];
};

static const int lt_max[LT_KINDS] = { SHM_RULES, SHM_OHOSTS };

size_t
labeltab_size(void)
{
    return sizeof(struct labeltab);
}

int
labeltab_init(void *area)
{
    struct labeltab *lt = area;
    pthread_mutexattr_t a;

    memset(lt, 0, sizeof(*lt));
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (pthread_mutex_init(&lt->lock, &a) != 0) {
        pthread_mutexattr_destroy(&a);
        return -1;
    }
    pthread_mutexattr_destroy(&a);
    snprintf(lt->rule[0], LT_NAME, "other");
    snprintf(lt->ohost[0], LT_NAME, "other");
    lt->n[LT_RULE] = lt->n[LT_OHOST] = 1;
    lt->magic = LT_MAGIC;
    return 0;
}

static char *
lt_entry(struct labeltab *lt, int kind, int i)
{
    return kind == LT_RULE ? lt->rule[i] : lt->ohost[i];
}

int
labeltab_count(const struct labeltab *lt, int kind)
{
    return (int)__atomic_load_n(&lt->n[kind], __ATOMIC_ACQUIRE);
}

const char *
labeltab_name(const struct labeltab *lt, int kind, int i)
{
    return kind == LT_RULE ? lt->rule[i] : lt->ohost[i];
}

static int
lt_scan(struct labeltab *lt, int kind, const char *name, int n)
{
    for (int i = 1; i < n; i++)
        if (strncmp(lt_entry(lt, kind, i), name, LT_NAME - 1) == 0)
            return i;
    return -1;
}

int
labeltab_find(struct labeltab *lt, int kind, const char *name)
{
    int i, n;

    if (lt == NULL || lt->magic != LT_MAGIC || name == NULL || name[0] == '\0'
        || kind < 0 || kind >= LT_KINDS)
        return 0;
    if ((i = lt_scan(lt, kind, name, labeltab_count(lt, kind))) > 0)
        return i;
    if (pthread_mutex_lock(&lt->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&lt->lock);
    n = (int)lt->n[kind];
    if ((i = lt_scan(lt, kind, name, n)) < 0) {
        if (n >= lt_max[kind]) {
            i = 0;
        } else {
            snprintf(lt_entry(lt, kind, n), LT_NAME, "%s", name);
            __atomic_store_n(&lt->n[kind], (uint32_t)n + 1, __ATOMIC_RELEASE);
            i = n;
        }
    }
    pthread_mutex_unlock(&lt->lock);
    return i;
}
