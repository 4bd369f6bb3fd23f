/*
 * shm/panic.c: the abort hook (see panic.h): the text a dying process
 * leaves in its shm slot for the master to log.
 *
 * The signal handler may run anywhere, with any lock held: it writes with
 * plain stores into the slot (no stdio, no malloc), then puts back the
 * handler it replaced and lets the signal take its course: a fault
 * (si_code > 0) re-executes the faulting instruction, a sent or raised
 * signal is raised again (it is blocked inside the handler, so it lands on
 * return).  It runs on its own stack, so a stack overflow is reported too.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/panic.h"
#include "shm/shm.h"

static const struct {
    int         sig;
    const char *name;
} panic_sigs[] = {
    { SIGSEGV, "SIGSEGV" },
    { SIGBUS, "SIGBUS" },
    { SIGFPE, "SIGFPE" },
    { SIGILL, "SIGILL" },
    { SIGABRT, "SIGABRT" },
};
#define PANIC_NSIGS (sizeof(panic_sigs) / sizeof(panic_sigs[0]))

static struct shm_slot *panic_slot;
const char *volatile panic_plugin;
static struct sigaction panic_old[PANIC_NSIGS];
static volatile sig_atomic_t panic_reason_set;  /* panic_at wrote a reason */
/* Big enough for a sanitizer's report too (its handler runs on it when
 * chained); bss, touched only when used. */
static char panic_stack[256 * 1024] __attribute__((aligned(16)));

/* Append s to buf[*n] (capacity cap, always NUL-terminated). */
static void
panic_put(char *buf, size_t *n, size_t cap, const char *s)
{
    while (*s && *n + 1 < cap)
        buf[(*n)++] = *s++;
    buf[*n] = '\0';
}

/* Append v in base 10 or 16 ("0x" first). */
static void
panic_put_num(char *buf, size_t *n, size_t cap, uintptr_t v, int hex)
{
    char d[2 + 2 * sizeof(v) + 1], *p = d + sizeof(d) - 1;
    unsigned base = hex ? 16 : 10;

    *p = '\0';
    do {
        *--p = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    if (hex) {
        *--p = 'x';
        *--p = '0';
    }
    panic_put(buf, n, cap, p);
}

static void
panic_on_signal(int sig, siginfo_t *si, void *uc)
{
    char text[SHM_PANIC_LEN];
    size_t n = 0, i;

    (void)uc;
    for (i = 0; i < PANIC_NSIGS && panic_sigs[i].sig != sig; i++)
        ;
    if (panic_slot != NULL) {
        if (panic_reason_set) {
            /* keep our own reason, tell the signal after it */
            for (n = 0; n < SHM_PANIC_LEN - 1 && panic_slot->panic[n]; n++)
                text[n] = panic_slot->panic[n];
            text[n] = '\0';
            panic_put(text, &n, sizeof(text), "; ");
        }
        panic_put(text, &n, sizeof(text), "signal ");
        panic_put_num(text, &n, sizeof(text), (uintptr_t)sig, 0);
        panic_put(text, &n, sizeof(text), " (");
        panic_put(text, &n, sizeof(text), i < PANIC_NSIGS ? panic_sigs[i].name : "?");
        panic_put(text, &n, sizeof(text), ")");
        if (si != NULL && si->si_code > 0 && sig != SIGABRT) {
            panic_put(text, &n, sizeof(text), ", fault address ");
            panic_put_num(text, &n, sizeof(text), (uintptr_t)si->si_addr, 1);
        } else if (si != NULL && si->si_code <= 0 && !panic_reason_set) {
            if (si->si_pid == getpid()) {
                panic_put(text, &n, sizeof(text), ", raised by itself (abort or assert)");
            } else {
                panic_put(text, &n, sizeof(text), ", sent by pid ");
                panic_put_num(text, &n, sizeof(text), (uintptr_t)si->si_pid, 0);
            }
        }
        if (panic_plugin != NULL) {
            /* a plugin's code was running (worker/plugin.c sets this
             * around every call into one) */
            panic_put(text, &n, sizeof(text), ", in plugin ");
            panic_put(text, &n, sizeof(text), (const char *)panic_plugin);
        }
        for (size_t k = 0; k <= n; k++)
            panic_slot->panic[k] = text[k];
    }
    /* The handler that was there before us (default, or a sanitizer's). */
    if (i < PANIC_NSIGS) {
        struct sigaction *old = &panic_old[i];
        if (old->sa_handler == SIG_IGN)
            old->sa_handler = SIG_DFL;
        sigaction(sig, old, NULL);
    } else {
        signal(sig, SIG_DFL);
    }
    if (si == NULL || si->si_code <= 0 || sig == SIGABRT)
        raise(sig);
}

int
panic_install(struct shm_slot *slot)
{
    stack_t ss = { .ss_sp = panic_stack, .ss_size = sizeof(panic_stack), .ss_flags = 0 };
    struct sigaction sa;

    panic_slot = slot;
    slot->panic[0] = '\0';
    if (sigaltstack(&ss, NULL) < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = panic_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigfillset(&sa.sa_mask);
    for (size_t i = 0; i < PANIC_NSIGS; i++)
        if (sigaction(panic_sigs[i].sig, &sa, &panic_old[i]) < 0)
            return -1;
    return 0;
}

void
panic_at(const char *file, int line, const char *fmt, ...)
{
    if (panic_slot != NULL && !panic_reason_set) {
        char text[SHM_PANIC_LEN];
        va_list ap;
        int n = snprintf(text, sizeof(text), "%s:%d: ", file, line);

        if (n < 0 || n >= (int)sizeof(text))
            n = 0;
        va_start(ap, fmt);
        vsnprintf(text + n, sizeof(text) - (size_t)n, fmt, ap);
        va_end(ap);
        shm_panic(panic_slot, text);
        panic_reason_set = 1;
    }
    abort();
}
