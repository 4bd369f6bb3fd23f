/*
 * shm/labeltab.h: the names of the per-rule and per-origin-host metric
 * series (issue 25), shared by every process.
 *
 * Two fixed tables of names, one per kind: remap rules (SHM_RULES
 * entries) and origin hosts (SHM_OHOSTS).  A name's index is where its
 * counters sit in every slot's struct shm_counters (rule[] and ohost[]).
 * Entry 0 of each kind is "other": once a table is full, a new name counts
 * there.  Names are never removed or rewritten, so a series never changes
 * meaning and its counters never go backwards, across reloads too; the
 * price is that names from old configurations keep their entry (the bound
 * is on names seen since the start).
 *
 * Locking: a name is written, then the count that makes it visible is
 * published with a release store, so lookups read without a lock; adding
 * takes one process-shared robust mutex (once per name per process: a
 * worker resolves its rules at start, its origins on first use).
 */
#ifndef CISTERN_LABELTAB_H
#define CISTERN_LABELTAB_H

#include <stddef.h>

#define LT_NAME 80

enum lt_kind { LT_RULE = 0, LT_OHOST, LT_KINDS };

struct labeltab;

size_t labeltab_size(void);
int    labeltab_init(void *area);

/* The index of name (added when new), or 0 ("other") when the kind's
 * table is full or name is empty.  Names longer than LT_NAME - 1 bytes
 * are cut. */
int  labeltab_find(struct labeltab *lt, int kind, const char *name);
/* Entries in use, "other" included (indexes 0 .. n-1). */
int  labeltab_count(const struct labeltab *lt, int kind);
const char *labeltab_name(const struct labeltab *lt, int kind, int i);

#endif /* CISTERN_LABELTAB_H */
