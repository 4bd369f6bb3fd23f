/*
 * shm/shm.c: create, check and account the shared region (see shm.h).
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm/filltab.h"
#include "shm/labeltab.h"
#include "shm/parenttab.h"
#include "shm/shm.h"

/* Request latency buckets: 0.5 ms to 10 s, then +Inf. */
const uint64_t shm_lat_bounds_us[SHM_LAT_BUCKETS - 1] = {
    500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000,
};

unsigned
shm_lat_bucket(uint64_t us)
{
    unsigned i = 0;

    while (i < SHM_LAT_BUCKETS - 1 && us > shm_lat_bounds_us[i])
        i++;
    return i;
}

static size_t
shm_align(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

int
shm_create(struct shm *s, unsigned nslots, size_t cache_len)
{
    size_t hdr_len = shm_align(sizeof(struct shm_hdr));
    size_t slots_len = shm_align((size_t)nslots * sizeof(struct shm_slot));
    size_t ft_len = shm_align(filltab_size(SHM_FILLTAB_ENTRIES));
    size_t pt_len = shm_align(parenttab_size());
    size_t lt_len = shm_align(labeltab_size());
    size_t len = hdr_len + slots_len + ft_len + pt_len + lt_len + shm_align(cache_len);
    void *p;

    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
             -1, 0);
    if (p == MAP_FAILED)
        return -1;
    /* Anonymous mappings are zero-filled: every slot starts FREE. */
    s->hdr = p;
    s->slots = (struct shm_slot *)((char *)p + hdr_len);
    s->filltab = (struct filltab *)((char *)p + hdr_len + slots_len);
    s->parenttab = (struct parenttab *)((char *)p + hdr_len + slots_len + ft_len);
    s->labeltab = (struct labeltab *)((char *)p + hdr_len + slots_len + ft_len + pt_len);
    s->cache_area = cache_len ? (char *)p + hdr_len + slots_len + ft_len + pt_len + lt_len : NULL;
    s->len = len;
    if (filltab_init(s->filltab, SHM_FILLTAB_ENTRIES) < 0
        || parenttab_init(s->parenttab) < 0 || labeltab_init(s->labeltab) < 0) {
        munmap(p, len);
        errno = EINVAL;
        return -1;
    }
    s->hdr->nslots = nslots;
    s->hdr->total_len = len;
    s->hdr->cache_off = hdr_len + slots_len + ft_len + pt_len + lt_len;
    s->hdr->cache_len = cache_len;
    s->hdr->version = SHM_VERSION;
    s->hdr->magic = SHM_MAGIC;
    return 0;
}

void
shm_destroy(struct shm *s)
{
    if (s->hdr)
        munmap(s->hdr, s->len);
    memset(s, 0, sizeof(*s));
}

int
shm_check(const struct shm *s)
{
    if (s->hdr == NULL || s->hdr->magic != SHM_MAGIC
        || s->hdr->version != SHM_VERSION || s->hdr->total_len != s->len) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

static void
shm_add(struct shm_counters *to, const struct shm_counters *from)
{
    uint64_t *t = (uint64_t *)to;
    const volatile uint64_t *f = (const volatile uint64_t *)from;

    for (size_t i = 0; i < SHM_NCOUNTERS; i++)
        t[i] += f[i];
}

void
shm_sum(const struct shm *s, struct shm_counters *out)
{
    *out = s->hdr->retired;
    for (unsigned i = 0; i < s->hdr->nslots; i++)
        if (s->slots[i].pid != 0)
            shm_add(out, &s->slots[i].c);
}

void
shm_slot_retire(struct shm *s, unsigned i)
{
    struct shm_slot *sl = &s->slots[i];

    /* A gauge of a dead process means nothing: its connections are gone. */
    sl->c.conns_open = 0;
    sl->c.tunnels_active = 0;
    sl->c.rww_joiners = 0;
    shm_add(&s->hdr->retired, &sl->c);
    urltop_merge(&s->hdr->retired_urls, &sl->urls);
    memset(sl, 0, sizeof(*sl));
}

void
shm_panic(struct shm_slot *slot, const char *msg)
{
    size_t n = strlen(msg);

    if (n >= SHM_PANIC_LEN)
        n = SHM_PANIC_LEN - 1;
    memcpy(slot->panic, msg, n);
    slot->panic[n] = '\0';
}
