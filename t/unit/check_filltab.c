/*
 * t/unit/check_filltab.c: the shm/ layer's unit tests: the fill table
 * (shm/filltab.c) on its own, and the abort hook (shm/panic.c).
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
    suite_add_tcase(s, tc);
    tc = tcase_create("panic");
    tcase_add_test(tc, test_panic_own_reason);
    tcase_add_test(tc, test_panic_fault);
    tcase_add_test(tc, test_panic_sent_and_abort);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
