/*
 * shm/panic.h: a dying process's last words, left in its shm slot.
 *
 * panic_install() (a worker calls it once, in worker_main) catches SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL and SIGABRT (so abort() and a failed assert() too)
 * and writes a short text into the slot's `panic` field, e.g.
 *     "signal 11 (SIGSEGV), fault address 0x0"
 *     "worker/conn.c:123: buffer list corrupt; signal 6 (SIGABRT)"
 * then lets the signal kill the process as before (the handler that was
 * there before, e.g. a sanitizer's, runs next).  The master logs the text
 * when it reaps the process (master_reap: "worker N (pid P, ...) killed by
 * signal 11: <text>").  The handler uses only async-signal-safe calls
 * (stores to memory, getpid, sigaction, raise).
 *
 * cst_panic(fmt, ...) is our own abort: it records "file:line: reason" in
 * the slot (before the signal, so vsnprintf is allowed) and calls abort().
 * Without panic_install() it still logs nothing and aborts.
 */
#ifndef CISTERN_SHM_PANIC_H
#define CISTERN_SHM_PANIC_H

struct shm_slot;

/* Catch the fatal signals of this process and write their text into
 * slot->panic.  Returns 0, or -1 with errno set (sigaltstack/sigaction). */
int panic_install(struct shm_slot *slot);

/* The name of the plugin whose code runs now, or NULL (worker/plugin.c
 * sets it around each call into a plugin): the text then ends with
 * ", in plugin NAME". */
extern const char *volatile panic_plugin;

/* Record "file:line: reason" and abort().  Use through cst_panic(). */
void panic_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define cst_panic(...) panic_at(__FILE__, __LINE__, __VA_ARGS__)

#endif /* CISTERN_SHM_PANIC_H */
