/*
 * t/fuzz/fuzz.h: helpers shared by the libFuzzer targets.
 *
 * Each target is one file with LLVMFuzzerTestOneInput, built by
 * scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined) from the
 * sources it exercises, linked directly so they carry coverage.
 * FZ_CHECK is an invariant: a failure aborts, which libFuzzer reports as
 * a crash with the input saved.
 */
#ifndef CISTERN_FUZZ_H
#define CISTERN_FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#define FZ_CHECK(cond) do { \
        if (!(cond)) { \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort(); \
        } \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An exact-size heap copy, so ASan catches a read one byte past the end. */
static inline char *
fz_dup(const uint8_t *data, size_t size)
{
    char *p = malloc(size ? size : 1);
    if (p == NULL)
        abort();
    if (size)
        memcpy(p, data, size);
    return p;
}

/* Write data to a private temp file; returns its path (static buffer). */
static inline const char *
fz_tmpfile(const uint8_t *data, size_t size)
{
    static char path[64];
    static int fd = -1;

    if (fd < 0) {
        snprintf(path, sizeof(path), "/tmp/cistern-fuzz-%d.conf", (int)getpid());
        fd = 1;
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    return path;
}

#endif
