/*
 * t/unit/check_filltab.c: the fill table (shm/filltab.c) on its own.
 *
 * The table lives in shared memory in the daemon; here it sits in an
 * anonymous shared mapping so one test can also fork and contend for it.
 */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/filltab.h"

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
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
