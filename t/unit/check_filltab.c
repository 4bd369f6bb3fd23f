/*
 * t/unit/check_filltab.c: the shm/ layer's unit tests: the fill table
 * (shm/filltab.c) on its own, the abort hook (shm/panic.c), and the
 * busiest-URL tables (shm/urltop.c: counting, the bound, merging a
 * retired slot, the readers' sums).
 *
 * The read-while-writer slots (publish, join, grow, end, reuse, a dead
 * filler) are tested here too.
 *
 * The table lives in shared memory in the daemon; here it sits in an
 * anonymous shared mapping so one test can also fork and contend for it.
 * The panic tests fork a child that installs the hook on a slot in a shared
 * mapping, dies, and leaves its text there for the parent to read.
 */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/filltab.h"
#include "shm/panic.h"
#include "shm/shm.h"

#define N 64

static struct filltab *ft;
static size_t ft_len;

static void
setup(void)
{
    ft_len = filltab_size(N);
    void *p = mmap(NULL, ft_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    ck_assert_int_eq(filltab_init(p, N), 0);
    ft = p;
}

static void
teardown(void)
{
    munmap(ft, ft_len);
}

static void
key(uint8_t h[16], unsigned n)
{
    memset(h, 0, 16);
    memcpy(h, &n, sizeof(n));
    h[15] = 0x5a;
}

static int
bit(const uint64_t w[4], int slot)
{
    return (int)((w[slot / 64] >> (slot % 64)) & 1);
}

START_TEST(test_init_rejects_bad_sizes)
{
    char buf[4096];
    ck_assert_int_lt(filltab_init(buf, 0), 0);
    ck_assert_int_lt(filltab_init(buf, 3), 0);
    ck_assert_int_eq(filltab_check(ft), 0);
}
END_TEST

START_TEST(test_claim_wait_release)
{
    uint8_t h[16];
    uint64_t wake[4];

    key(h, 1);
    ck_assert_int_eq(filltab_claim(ft, h, 3, 1000, 500), FT_CLAIMED);
    /* another slot, and another connection of the same slot, wait */
    ck_assert_int_eq(filltab_claim(ft, h, 5, 1001, 500), FT_WAIT);
    ck_assert_int_eq(filltab_claim(ft, h, 3, 1001, 500), FT_WAIT);
    ck_assert_int_eq(filltab_claim(ft, h, 200, 1001, 500), FT_WAIT);
    ck_assert(filltab_busy(ft, h, 5, 1002));
    /* only the owner can release; the waiters are returned */
    filltab_release(ft, h, 5, 1003, 0, wake);
    ck_assert(!bit(wake, 5) && filltab_busy(ft, h, 5, 1003));
    filltab_release(ft, h, 3, 1003, 0, wake);
    ck_assert(bit(wake, 5) && bit(wake, 3) && bit(wake, 200) && !bit(wake, 4));
    ck_assert(!filltab_busy(ft, h, 5, 1004));
    /* free again: the next miss claims */
    ck_assert_int_eq(filltab_claim(ft, h, 5, 1005, 500), FT_CLAIMED);
}
END_TEST

START_TEST(test_pass_then_expire)
{
    uint8_t h[16];
    uint64_t wake[4];

    key(h, 2);
    ck_assert_int_eq(filltab_claim(ft, h, 1, 1000, 500), FT_CLAIMED);
    ck_assert_int_eq(filltab_claim(ft, h, 2, 1000, 500), FT_WAIT);
    filltab_release(ft, h, 1, 1100, 10000, wake);      /* uncacheable */
    ck_assert(bit(wake, 2));
    ck_assert_int_eq(filltab_claim(ft, h, 2, 2000, 500), FT_PASS);
    ck_assert(!filltab_busy(ft, h, 2, 2000));
    /* the hit-for-miss period ends */
    ck_assert_int_eq(filltab_claim(ft, h, 2, 11101, 500), FT_CLAIMED);
}
END_TEST

START_TEST(test_claim_deadline)
{
    uint8_t h[16];

    key(h, 3);
    ck_assert_int_eq(filltab_claim(ft, h, 1, 1000, 500), FT_CLAIMED);
    ck_assert_int_eq(filltab_claim(ft, h, 2, 1200, 500), FT_WAIT);
    /* the filler never came back: after its deadline the next one claims,
     * keeping the waiters it had */
    ck_assert(!filltab_busy(ft, h, 2, 1500));
    ck_assert_int_eq(filltab_claim(ft, h, 4, 1600, 500), FT_CLAIMED);
    /* a filler still receiving renews its claim; another slot cannot */
    filltab_renew(ft, h, 2, 5000);
    ck_assert(!filltab_busy(ft, h, 2, 2100));
    filltab_renew(ft, h, 4, 3000);
    ck_assert(filltab_busy(ft, h, 2, 2900));
    ck_assert(!filltab_busy(ft, h, 2, 3000));
    uint64_t wake[4];
    filltab_release(ft, h, 4, 1700, 0, wake);
    ck_assert(bit(wake, 2));
}
END_TEST

START_TEST(test_unwait_and_slot_reset)
{
    uint8_t a[16], b[16];
    uint64_t wake[4];

    key(a, 10);
    key(b, 11);
    ck_assert_int_eq(filltab_claim(ft, a, 7, 1000, 5000), FT_CLAIMED);
    ck_assert_int_eq(filltab_claim(ft, a, 8, 1000, 5000), FT_WAIT);
    ck_assert_int_eq(filltab_claim(ft, a, 9, 1000, 5000), FT_WAIT);
    ck_assert_int_eq(filltab_claim(ft, b, 8, 1000, 5000), FT_CLAIMED);
    ck_assert_int_eq(filltab_claim(ft, b, 7, 1000, 5000), FT_WAIT);
    filltab_unwait(ft, a, 9);
    /* slot 7 dies: its claim on a goes, a's waiters are woken, and it is
     * forgotten as a waiter on b */
    filltab_slot_reset(ft, 7, wake);
    ck_assert(bit(wake, 8) && !bit(wake, 9) && !bit(wake, 7));
    ck_assert(!filltab_busy(ft, a, 8, 1001));
    filltab_release(ft, b, 8, 1002, 0, wake);
    ck_assert(!bit(wake, 7));
}
END_TEST

START_TEST(test_full_table)
{
    uint8_t h[16];
    int claimed = 0, full = 0;

    /* keys that all land on one probe run: the run is bounded */
    for (unsigned i = 0; i < 40; i++) {
        memset(h, 0, 16);
        h[15] = (uint8_t)(i + 1);           /* same low 8 bytes: same start */
        int rc = filltab_claim(ft, h, 1, 1000, 500);
        claimed += rc == FT_CLAIMED;
        full += rc == FT_FULL;
    }
    ck_assert_int_gt(claimed, 0);
    ck_assert_int_gt(full, 0);
    ck_assert_int_eq(claimed + full, 40);
    /* once expired, the entries are reusable */
    ck_assert_int_eq(filltab_claim(ft, h, 1, 2000, 500), FT_CLAIMED);
}
END_TEST

START_TEST(test_processes_contend)
{
    /* 8 processes race to claim the same key 2000 times each: at every
     * moment at most one holds the claim. */
    uint8_t h[16];
    int *holders = mmap(NULL, sizeof(int) * 2, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    key(h, 99);
    holders[0] = holders[1] = 0;
    for (int p = 0; p < 8; p++) {
        if (fork() == 0) {
            for (int i = 0; i < 2000; i++) {
                if (filltab_claim(ft, h, p, 1000 + i, 1000000) == FT_CLAIMED) {
                    int now = __atomic_add_fetch(&holders[0], 1, __ATOMIC_SEQ_CST);
                    if (now > 1)
                        __atomic_store_n(&holders[1], 1, __ATOMIC_SEQ_CST);
                    __atomic_sub_fetch(&holders[0], 1, __ATOMIC_SEQ_CST);
                    uint64_t wake[4];
                    filltab_release(ft, h, p, 1000 + i, 0, wake);
                } else {
                    filltab_unwait(ft, h, p);
                }
            }
            _exit(0);
        }
    }
    for (int p = 0; p < 8; p++) {
        int st;
        wait(&st);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ck_assert_int_eq(holders[1], 0);
    munmap(holders, sizeof(int) * 2);
}
END_TEST

/* ---- the abort hook ---- */

static struct shm_slot *
panic_slot_new(void)
{
    void *p = mmap(NULL, sizeof(struct shm_slot), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 0, sizeof(struct shm_slot));
    return p;
}

/* Wait for the child; it must have died of sig, or (a sanitizer's handler
 * ran after ours and reported) exited non-zero. */
static void
panic_reap(pid_t pid, int sig)
{
    int status;

    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        ck_assert_int_eq(WTERMSIG(status), sig);
    else
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0, "status %#x", status);
}

/* The waiters of a claim, for the filler that publishes its fill (they
 * came before the origin's head): the claim's waiters only, not the
 * filler, nothing once released, nothing for another key. */
START_TEST(test_waiters_of_claim)
{
    uint8_t h[16], h2[16];
    uint64_t wake[4];

    key(h, 11);
    key(h2, 12);
    ck_assert_int_eq(filltab_claim(ft, h, 2, 1000, 5000), FT_CLAIMED);
    filltab_waiters(ft, h, 1000, wake);
    ck_assert(!wake[0] && !wake[1] && !wake[2] && !wake[3]);
    ck_assert_int_eq(filltab_claim(ft, h, 5, 1001, 5000), FT_WAIT);
    ck_assert_int_eq(filltab_claim(ft, h, 70, 1001, 5000), FT_WAIT);
    filltab_waiters(ft, h, 1002, wake);
    ck_assert_int_eq(bit(wake, 5), 1);
    ck_assert_int_eq(bit(wake, 70), 1);
    ck_assert_int_eq(bit(wake, 2), 0);
    filltab_waiters(ft, h2, 1002, wake);
    ck_assert_int_eq(bit(wake, 5), 0);
    filltab_release(ft, h, 2, 1003, 0, wake);
    filltab_waiters(ft, h, 1003, wake);
    ck_assert_int_eq(bit(wake, 5), 0);
}
END_TEST

/* Read-while-writer slots: publish, join, grow, end; a joiner's copy of a
 * reused slot is refused (generation); a dead filler fails its fills. */
START_TEST(test_rww_publish_join_end)
{
    uint8_t h[16], h2[16];
    struct filltab_rww v, got;
    uint64_t wake[4];
    int idx;

    key(h, 7);
    key(h2, 8);
    memset(&v, 0, sizeof(v));
    v.total = 1000;
    v.hdr_off = 4096;
    v.hdr_len = 100;
    v.next = 1;
    v.ext_off[0] = 4196;
    ck_assert_int_eq(filltab_rww_join(ft, h, 3, 0, &got), -1);     /* nothing published */
    idx = filltab_rww_open(ft, h, 1, 0, &v);
    ck_assert_int_ge(idx, 0);
    ck_assert_int_eq(filltab_rww_joined(ft, idx), 0);
    ck_assert_int_eq(filltab_rww_join(ft, h2, 3, 0, &got), -1);    /* another key */
    ck_assert_int_eq(filltab_rww_join(ft, h, 3, 0, &got), idx);
    ck_assert_int_eq(got.state, RWW_OPEN);
    ck_assert_uint_eq(got.total, 1000);
    ck_assert_uint_eq(got.avail, 0);
    ck_assert_int_eq(filltab_rww_joined(ft, idx), 1);
    /* joiners leave: counted per slot; another generation's leave is void */
    ck_assert_int_eq(filltab_rww_join(ft, h, 3, 0, &got), idx);
    filltab_rww_leave(ft, idx, got.gen, 3);
    filltab_rww_leave(ft, idx, got.gen + 1, 3);
    ck_assert_int_eq(filltab_rww_joined(ft, idx), 1);
    filltab_rww_leave(ft, idx, got.gen, 3);
    ck_assert_int_eq(filltab_rww_joined(ft, idx), 0);
    ck_assert_int_eq(filltab_rww_join(ft, h, 3, 0, &got), idx);
    ck_assert_int_eq(filltab_rww_joined(ft, idx), 1);
    /* the filler grows it: the joiner's slot is woken, its copy follows */
    v.avail = 600;
    v.next = 2;
    v.ext_off[1] = 90000;
    v.ext_pos[1] = 500;
    v.state = RWW_OPEN;
    filltab_rww_update(ft, idx, &v, 0, wake);
    ck_assert_int_eq(bit(wake, 3), 1);
    ck_assert_int_eq(bit(wake, 1), 0);
    ck_assert_int_eq(filltab_rww_get(ft, idx, got.gen, &got), 0);
    ck_assert_uint_eq(got.avail, 600);
    ck_assert_uint_eq(got.next, 2);
    ck_assert_uint_eq(got.ext_pos[1], 500);
    /* done: no new joiner; the slot lingers for the joined ones */
    v.avail = 1000;
    v.state = RWW_DONE;
    filltab_rww_update(ft, idx, &v, 1000, wake);
    ck_assert_int_eq(bit(wake, 3), 1);
    ck_assert_int_eq(filltab_rww_join(ft, h, 4, 1000, &got), -1);
    ck_assert_int_eq(filltab_rww_get(ft, idx, got.gen, &got), 0);
    ck_assert_int_eq(got.state, RWW_DONE);
    ck_assert_int_eq(filltab_rww_peek(ft, idx, &v), -1);     /* not open any more */
    /* after the linger every slot is free again: a reused slot has a new
     * generation, so the old joiner's copy is refused */
    memset(&v, 0, sizeof(v));
    v.next = 1;
    for (int i = 0; i < FILLTAB_RWW; i++)
        ck_assert_int_ge(filltab_rww_open(ft, h2, 2, 1000 + FILLTAB_RWW_LINGER_MS, &v), 0);
    ck_assert_int_eq(filltab_rww_open(ft, h2, 2, 1000 + FILLTAB_RWW_LINGER_MS, &v), -1);
    ck_assert_int_eq(filltab_rww_get(ft, idx, got.gen, &got), -1);
}
END_TEST

START_TEST(test_rww_dead_filler)
{
    uint8_t h[16];
    struct filltab_rww v, got;
    uint64_t wake[4];
    int idx;

    key(h, 9);
    memset(&v, 0, sizeof(v));
    v.next = 1;
    v.total = 10;
    v.ext_pos[0] = 0;
    ck_assert_int_eq(filltab_rww_open(ft, h, 5, 0, &(struct filltab_rww){ .next = FILLTAB_RWW_EXT + 1 }), -1);
    idx = filltab_rww_open(ft, h, 5, 0, &v);
    ck_assert_int_ge(idx, 0);
    ck_assert_int_eq(filltab_rww_join(ft, h, 6, 0, &got), idx);
    filltab_slot_reset(ft, 5, wake);
    ck_assert_int_eq(bit(wake, 6), 1);
    ck_assert_int_eq(filltab_rww_get(ft, idx, got.gen, &got), 0);
    ck_assert_int_eq(got.state, RWW_FAILED);
    ck_assert_int_eq(filltab_rww_join(ft, h, 7, 0, &got), -1);
}
END_TEST

START_TEST(test_panic_own_reason)
{
    struct shm_slot *sl = panic_slot_new();
    char want[128];
    pid_t pid = fork();
    int line;

    ck_assert_int_ge(pid, 0);
    line = __LINE__ + 3;
    if (pid == 0) {
        ck_assert_int_eq(panic_install(sl), 0);
        cst_panic("reason %d", 42);
    }
    panic_reap(pid, SIGABRT);
    snprintf(want, sizeof(want), "check_filltab.c:%d: reason 42; signal 6 (SIGABRT)", line);
    ck_assert_msg(strstr(sl->panic, want) != NULL, "panic text: \"%s\"", sl->panic);
    munmap(sl, sizeof(*sl));
}
END_TEST

START_TEST(test_panic_fault)
{
    struct shm_slot *sl = panic_slot_new();
    char want[128];
    volatile char *page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pid_t pid;

    ck_assert_ptr_ne((void *)page, MAP_FAILED);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        ck_assert_int_eq(panic_install(sl), 0);
        page[8] = 1;            /* a real fault, not a sent signal */
        _exit(0);
    }
    panic_reap(pid, SIGSEGV);
    snprintf(want, sizeof(want), "signal 11 (SIGSEGV), fault address 0x%lx",
             (unsigned long)(uintptr_t)(page + 8));
    ck_assert_msg(strcmp(sl->panic, want) == 0, "panic text: \"%s\", want \"%s\"",
                  sl->panic, want);
    munmap((void *)page, 4096);
    munmap(sl, sizeof(*sl));
}
END_TEST

START_TEST(test_panic_sent_and_abort)
{
    struct shm_slot *sl = panic_slot_new();
    char want[128], b;
    int p[2];
    pid_t pid;

    /* kill -BUS from outside: the text names the sender */
    ck_assert_int_eq(pipe(p), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        ck_assert_int_eq(panic_install(sl), 0);
        ck_assert_int_eq(write(p[1], "r", 1), 1);
        for (;;)
            pause();
    }
    close(p[1]);
    ck_assert_int_eq(read(p[0], &b, 1), 1);
    close(p[0]);
    kill(pid, SIGBUS);
    panic_reap(pid, SIGBUS);
    snprintf(want, sizeof(want), "signal 7 (SIGBUS), sent by pid %d", (int)getpid());
    ck_assert_msg(strcmp(sl->panic, want) == 0, "panic text: \"%s\"", sl->panic);

    /* a plain abort() (what a failed assert ends in) */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        ck_assert_int_eq(panic_install(sl), 0);
        abort();
    }
    panic_reap(pid, SIGABRT);
    ck_assert_msg(strcmp(sl->panic, "signal 6 (SIGABRT), raised by itself (abort or assert)") == 0,
                  "panic text: \"%s\"", sl->panic);
    munmap(sl, sizeof(*sl));
}
END_TEST


/* ------------------------------------------------------------------ */
/* shm/urltop.c */

/* A key in set `set`, told apart by n. */
static uint64_t
ukey(unsigned set, unsigned n)
{
    return ((uint64_t)set << 40) | ((uint64_t)n + 1);
}

/* One request for k, a hit or a miss, as a worker counts it. */
static void
ucount(struct urltop *t, uint64_t k, int hit)
{
    int taken;
    struct urltop_ent *e = urltop_count(t, k, &taken);
    char label[32];

    snprintf(label, sizeof(label), "/k%llx", (unsigned long long)k);
    if (taken)
        urltop_take(e, k, "h.test", 6, label, strlen(label));
    e->hits += hit;
    e->misses += !hit;
}

static const struct urltop_ent *
ufind(const struct urltop *t, uint64_t k)
{
    for (int i = 0; i < URLTOP_K; i++)
        if (t->e[i].hash == k)
            return &t->e[i];
    return NULL;
}

START_TEST(test_urltop_counts_and_labels)
{
    static struct urltop t;
    const struct urltop_ent *e;

    memset(&t, 0, sizeof(t));
    for (int i = 0; i < 7; i++)
        ucount(&t, ukey(3, 1), i > 0);
    ucount(&t, ukey(9, 1), 0);
    e = ufind(&t, ukey(3, 1));
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->requests, 7);
    ck_assert_uint_eq(e->err, 0);
    ck_assert_uint_eq(e->hits, 6);
    ck_assert_uint_eq(e->misses, 1);
    ck_assert_uint_eq(e->ver % 2, 0);
    ck_assert_ptr_eq(e, &t.e[3 * URLTOP_WAYS]);     /* in its set */
    ck_assert_str_eq(e->url, "h.test/k30000000002");
    ck_assert_ptr_nonnull(ufind(&t, ukey(9, 1)));
    /* a label longer than the entry is cut, and ends */
    {
        char longp[300];
        int taken;
        memset(longp, 'x', sizeof(longp));
        struct urltop_ent *x = urltop_count(&t, ukey(5, 1), &taken);
        ck_assert_int_eq(taken, 1);
        urltop_take(x, ukey(5, 1), "h.test", 6, longp, sizeof(longp));
        ck_assert_uint_eq(strlen(x->url), sizeof(x->url) - 1);
    }
}
END_TEST

/* Space-saving's bound: a key with more than 1/URLTOP_WAYS of its set's
 * requests keeps its entry and its exact count; the tail shares one. */
START_TEST(test_urltop_bound)
{
    static struct urltop t;
    const struct urltop_ent *e;

    memset(&t, 0, sizeof(t));
    for (int r = 0; r < 50; r++)
        for (unsigned h = 0; h < 3; h++)
            ucount(&t, ukey(7, h), 1);
    for (unsigned n = 100; n < 140; n++)     /* 40 keys once each */
        ucount(&t, ukey(7, n), 0);
    for (unsigned h = 0; h < 3; h++) {
        e = ufind(&t, ukey(7, h));
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->requests, 50);
        ck_assert_uint_eq(e->err, 0);
        ck_assert_uint_eq(e->hits, 50);
    }
    e = ufind(&t, ukey(7, 139));                /* the last one-off holds the 4th */
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->requests, 40);
    ck_assert_uint_eq(e->err, 39);
    ck_assert_uint_eq(e->misses, 1);
    ck_assert_ptr_null(ufind(&t, ukey(7, 100)));
    /* other sets untouched */
    for (int i = 0; i < URLTOP_K; i++)
        if (i / URLTOP_WAYS != 7)
            ck_assert_uint_eq(t.e[i].hash, 0);
}
END_TEST

START_TEST(test_urltop_merge)
{
    static struct urltop to, from;

    memset(&to, 0, sizeof(to));
    memset(&from, 0, sizeof(from));
    for (unsigned h = 0; h < 4; h++)            /* set 2: 10, 20, 30, 40 */
        for (unsigned r = 0; r < 10 * (h + 1); r++)
            ucount(&to, ukey(2, h), 1);
    for (unsigned r = 0; r < 5; r++)
        ucount(&from, ukey(2, 3), 0);           /* 40 + 5 */
    for (unsigned r = 0; r < 25; r++)
        ucount(&from, ukey(2, 9), 1);           /* new, 25: pushes out the 10 */
    ucount(&from, ukey(2, 8), 1);               /* new, 1: dropped */
    ucount(&from, ukey(60, 1), 1);              /* another set */
    urltop_merge(&to, &from);
    ck_assert_ptr_null(ufind(&to, ukey(2, 0)));
    ck_assert_ptr_null(ufind(&to, ukey(2, 8)));
    ck_assert_uint_eq(ufind(&to, ukey(2, 1))->requests, 20);
    ck_assert_uint_eq(ufind(&to, ukey(2, 2))->requests, 30);
    const struct urltop_ent *e = ufind(&to, ukey(2, 3));
    ck_assert_uint_eq(e->requests, 45);
    ck_assert_uint_eq(e->hits, 40);
    ck_assert_uint_eq(e->misses, 5);
    ck_assert_str_eq(e->url, "h.test/k20000000004");
    ck_assert_uint_eq(ufind(&to, ukey(2, 9))->requests, 25);
    ck_assert_uint_eq(ufind(&to, ukey(60, 1))->requests, 1);
    ck_assert_uint_eq(e->ver % 2, 0);
}
END_TEST

/* The readers: sums over the header and the live slots; a retired slot
 * merged, its figures kept. */
START_TEST(test_urltop_readers)
{
    struct shm s;
    struct urltop_ent e, out[8];
    int n;

    memset(&s, 0, sizeof(s));
    ck_assert_int_eq(shm_create(&s, 3, 0), 0);
    s.slots[0].pid = 100;
    s.slots[1].pid = 101;
    for (int r = 0; r < 9; r++)
        ucount(&s.slots[0].urls, ukey(4, 1), r > 0);    /* 9: 8 hits, 1 miss */
    for (int r = 0; r < 3; r++)
        ucount(&s.slots[1].urls, ukey(4, 1), 1);        /* 3 more hits */
    for (int r = 0; r < 6; r++)
        ucount(&s.slots[1].urls, ukey(11, 2), 0);       /* 6 misses */
    ucount(&s.slots[2].urls, ukey(4, 1), 1);            /* a free slot: not read */
    ck_assert_int_eq(urltop_lookup(&s, ukey(4, 1), &e), 2);
    ck_assert_uint_eq(e.requests, 12);
    ck_assert_uint_eq(e.hits, 11);
    ck_assert_uint_eq(e.misses, 1);
    ck_assert_int_eq(urltop_lookup(&s, ukey(4, 77), &e), 0);
    ck_assert_uint_eq(e.requests, 0);
    n = urltop_collect(&s, 0, out, 8);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(out[0].hash, ukey(4, 1));
    ck_assert_uint_eq(out[0].requests, 12);
    ck_assert_uint_eq(out[1].hash, ukey(11, 2));
    n = urltop_collect(&s, 1, out, 1);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(out[0].hash, ukey(11, 2));
    ck_assert_uint_eq(out[0].misses, 6);
    /* slot 0's worker exits: its table moves to the header */
    shm_slot_retire(&s, 0);
    ck_assert_int_eq(urltop_lookup(&s, ukey(4, 1), &e), 2);
    ck_assert_uint_eq(e.requests, 12);
    ck_assert_ptr_null(ufind(&s.slots[0].urls, ukey(4, 1)));
    shm_destroy(&s);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("filltab");
    TCase *tc = tcase_create("filltab");
    SRunner *sr;
    int failed;

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_init_rejects_bad_sizes);
    tcase_add_test(tc, test_claim_wait_release);
    tcase_add_test(tc, test_pass_then_expire);
    tcase_add_test(tc, test_claim_deadline);
    tcase_add_test(tc, test_unwait_and_slot_reset);
    tcase_add_test(tc, test_full_table);
    tcase_add_test(tc, test_processes_contend);
    tcase_add_test(tc, test_waiters_of_claim);
    tcase_add_test(tc, test_rww_publish_join_end);
    tcase_add_test(tc, test_rww_dead_filler);
    suite_add_tcase(s, tc);
    tc = tcase_create("panic");
    tcase_add_test(tc, test_panic_own_reason);
    tcase_add_test(tc, test_panic_fault);
    tcase_add_test(tc, test_panic_sent_and_abort);
    suite_add_tcase(s, tc);
    tc = tcase_create("urltop");
    tcase_add_test(tc, test_urltop_counts_and_labels);
    tcase_add_test(tc, test_urltop_bound);
    tcase_add_test(tc, test_urltop_merge);
    tcase_add_test(tc, test_urltop_readers);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
