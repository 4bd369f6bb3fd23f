/*
 * worker/linescan.h: the search of a head's text for the lines whose name
 * starts with a given letter (worker/plugin.c: a field a plugin sets or
 * removes in the client's head).  Static functions in a header so the
 * unit test (t/unit/check_http.c) runs each implementation against the
 * byte-by-byte one.
 */
#ifndef CISTERN_WORKER_LINESCAN_H
#define CISTERN_WORKER_LINESCAN_H

#include <stddef.h>
#include <stdint.h>

/* linescan(p, end, c): the first line start in (p, end) whose first
 * byte is c or c ^ 0x20 (a name's first letter, either case; for another byte, a candidate the
 * caller checks), i.e. the byte after a '\n' there, or NULL.
 *
 * On x86-64 it compares 16 (SSE2) or 32 (AVX2, picked at the first
 * call) bytes and their successors a step and takes the first match's
 * place from the compare's bit mask: ~95 instructions for a hit's 200-byte
 * head with AVX2 (the clone of a vector loop with a byte-by-byte finish
 * took 118, two memchr scans ~280).  The last step overlaps the one
 * before, its bits for bytes seen masked off.  Elsewhere, byte by byte. */
static char *
linescan_bytes(char *p, const char *end, unsigned char c)
{
    const unsigned char fc = c | 0x20;

    for (; p + 1 < end; p++)
        if (p[0] == '\n' && ((unsigned char)p[1] | 0x20) == fc)
            return p + 1;
    return NULL;
}

#if defined(__x86_64__) && defined(__GNUC__) && defined(__gnu_linux__)
#include <immintrin.h>

/* One step of w bytes at q: the bit mask of the '\n's followed by fc;
 * two a turn while the head has them. */
#define LINESCAN_STEP(w, load, eq, or, and, mask, set1, q, fc)                       \
    ((uint32_t)mask(and(eq(load((const void *)(q)), set1('\n')),                 \
                        eq(or(load((const void *)((q) + 1)), set1(0x20)), set1((char)(fc))))))

#define LINESCAN(w, step)                                                        \
    const unsigned char fc = c | 0x20;                                          \
    uint64_t m;                                                                 \
    char *q = p;                                                                \
    if (end - p < (w) + 1)                                                      \
        return linescan_bytes(p, end, c);                                   \
    for (; end - q >= 2 * (w) + 1; q += 2 * (w))                                \
        if ((m = step(q, fc) | (uint64_t)step(q + (w), fc) << (w)) != 0)       \
            return q + __builtin_ctzll(m) + 1;                                  \
    if (end - q >= (w) + 1) {                                                   \
        if ((m = step(q, fc)) != 0)                                             \
            return q + __builtin_ctzll(m) + 1;                                  \
        q += (w);                                                               \
    }                                                                           \
    if (q + 1 >= end)                                                           \
        return NULL;                                                            \
    /* the last bytes: the step ending at end - 1, without those seen */        \
    m = step(end - (w) - 1, fc) >> ((w) - (end - 1 - q));                         \
    return m ? q + __builtin_ctzll(m) + 1 : NULL

#define LINESCAN_STEP16(q, fc) LINESCAN_STEP(16, _mm_loadu_si128, _mm_cmpeq_epi8, _mm_or_si128, \
                                     _mm_and_si128, _mm_movemask_epi8, _mm_set1_epi8, q, fc)
#define LINESCAN_STEP32(q, fc) LINESCAN_STEP(32, _mm256_loadu_si256, _mm256_cmpeq_epi8,        \
                                     _mm256_or_si256, _mm256_and_si256,                 \
                                     _mm256_movemask_epi8, _mm256_set1_epi8, q, fc)

static char *
linescan_sse2(char *p, const char *end, unsigned char c)
{
    LINESCAN(16, LINESCAN_STEP16);
}

__attribute__((target("avx2"))) static char *
linescan_avx2(char *p, const char *end, unsigned char c)
{
    LINESCAN(32, LINESCAN_STEP32);
}

/* The scan, picked at its first call (not an ifunc: a resolver runs
 * before the sanitizers' runtime is up). */
typedef char *linescan_fn(char *p, const char *end, unsigned char c);
static char *linescan_first(char *p, const char *end, unsigned char c);
static linescan_fn *linescan = linescan_first;

static char *
linescan_first(char *p, const char *end, unsigned char c)
{
    __builtin_cpu_init();
    linescan = __builtin_cpu_supports("avx2") ? linescan_avx2 : linescan_sse2;
    return linescan(p, end, c);
}
#else
#define linescan linescan_bytes
#endif

#endif /* CISTERN_WORKER_LINESCAN_H */
