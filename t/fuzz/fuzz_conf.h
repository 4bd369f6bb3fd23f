/*
 * t/fuzz/fuzz_conf.h: shared body of the conf/ parser targets.
 *
 * The input is written to a private temp file and parsed by the per-file
 * parser (conf_records_parse and friends take a path, as conf_load does).
 * Relative paths resolve against a private empty directory.  Inputs that
 * name device or proc files are skipped: `.include /dev/zero` is an
 * operator shooting their own foot, not a parser bug, and would only
 * make the fuzzer run out of memory.
 * Invariants: the return value agrees with the error count (-1 iff at
 * least one error), every message starts with the file name and is
 * "file:line: message" or "file: message", and *_free leaves the struct
 * zeroed (the next parse must start from a clean struct).
 */
#ifndef CISTERN_FUZZ_CONF_H
#define CISTERN_FUZZ_CONF_H

#include "config.h"
#include <sys/stat.h>
#include "conf/conf.h"
#include "t/fuzz/fuzz.h"

static char fz_dir[64];
static char fz_file[96];

static void
fz_conf_cleanup(void)
{
    unlink(fz_file);
    rmdir(fz_dir);
}

static int
fz_conf_skip(const uint8_t *data, size_t size)
{
    static const char *const bad[] = { "dev", "proc", "sys", "run", "fd" };
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
        if (memmem(data, size, bad[b], strlen(bad[b])) != NULL)
            return 1;
    return 0;
}

/* Write the input; returns the file path.  */
static const char *
fz_conf_write(const uint8_t *data, size_t size)
{
    if (fz_dir[0] == '\0') {
        snprintf(fz_dir, sizeof(fz_dir), "/tmp/cistern-fuzz-%d", (int)getpid());
        mkdir(fz_dir, 0700);
        snprintf(fz_file, sizeof(fz_file), "%s/input.config", fz_dir);
        atexit(fz_conf_cleanup);
    }
    FILE *f = fopen(fz_file, "wb");
    if (f == NULL)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    return fz_file;
}

static void
fz_conf_check_errors(int rc, const struct conf_errors *e, const char *file)
{
    size_t fl = strlen(file);

    FZ_CHECK(rc == 0 || rc == -1);
    FZ_CHECK((rc == -1) == (e->n > 0));
    FZ_CHECK(e->nstored <= CONF_MAX_ERRORS && e->nstored <= e->n + e->nwarn);
    for (int i = 0; i < e->nstored; i++) {
        const char *m = e->msgs[i];
        FZ_CHECK(m != NULL);
        /* this file's name, or an included file's: "NAME:LINE: msg" or
         * "NAME: msg" */
        FZ_CHECK(strstr(m, ": ") != NULL);
        if (strncmp(m, file, fl) == 0)
            FZ_CHECK(m[fl] == ':' && (m[fl + 1] == ' ' || (m[fl + 1] >= '1' && m[fl + 1] <= '9')));
    }
}

static inline int
fz_all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

#endif
