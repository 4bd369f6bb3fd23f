/*
 * conf/yaml.h: a YAML document as a tree of nodes, for the ATS files that
 * are YAML (ip_allow.yaml now; records.yaml, logging.yaml, sni.yaml later).
 *
 * libyaml (YAML 1.1, Debian's libyaml-0-2) does the parsing; conf/yaml.c
 * turns its document into plain nodes that carry their line number, with
 * aliases expanded (so a consumer never sees a shared or cyclic node) and
 * every size bounded.  Scalars stay strings: what "yes", "0x10" or "~"
 * means is the consumer's business, since ATS reads them as its own types.
 */
#ifndef CISTERN_CONF_YAML_H
#define CISTERN_CONF_YAML_H

#include <stddef.h>

#include "conf/parse.h"

/* Limits.  ATS's YAML files are a few KiB; these only stop a hostile or
 * broken file (an alias "billion laughs", a self-referencing anchor) from
 * taking the master's memory or stack. */
#define CONF_YAML_MAX_BYTES  (4 << 20)   /* the file */
#define CONF_YAML_MAX_NODES  100000      /* after alias expansion */
#define CONF_YAML_MAX_DEPTH  64          /* nested sequences and mappings */

enum conf_yaml_kind {
    CONF_YAML_SCALAR = 1,
    CONF_YAML_SEQ,
    CONF_YAML_MAP,
};

struct conf_yaml {
    enum conf_yaml_kind kind;
    int      line;                    /* 1-based line the node starts on */
    int      plain;                   /* SCALAR written without quotes */
    char    *str;                     /* SCALAR: the value, NUL-terminated */
    size_t   len;                     /* SCALAR: its length (may hold NULs) */
    struct conf_yaml **kids;          /* SEQ: the items; MAP: key, value,
                                         key, value, ... */
    int      nkids;                   /* SEQ: items; MAP: twice the pairs */
};

/* Parse file (at most CONF_YAML_MAX_BYTES, one document) into *root.
 * Returns 0 with *root set (NULL for an empty document), or -1 after
 * recording "file:line: what" in e: libyaml's problem for a syntax error,
 * or a second document, a limit exceeded, or a duplicate mapping key (a
 * YAML error libyaml does not check; which of two values would win is
 * exactly what an operator cannot see).  The caller frees *root with
 * conf_yaml_free(). */
int  conf_yaml_load(const char *file, struct conf_errors *e,
                    struct conf_yaml **root);
/* The same over text held in memory; name is used in messages. */
int  conf_yaml_load_text(const char *text, size_t len, const char *name,
                         struct conf_errors *e, struct conf_yaml **root);
void conf_yaml_free(struct conf_yaml *n);

/* The value under scalar key `key` in mapping map, or NULL (also when map
 * is not a mapping). */
const struct conf_yaml *conf_yaml_get(const struct conf_yaml *map,
                                      const char *key);
/* 1 when n is YAML's null (a plain "", "~", "null", "Null" or "NULL", as
 * the core schema and ATS's yaml-cpp read them), not a string. */
int conf_yaml_is_null(const struct conf_yaml *n);
/* "scalar", "sequence" or "mapping", for messages. */
const char *conf_yaml_kind_name(enum conf_yaml_kind kind);

#endif /* CISTERN_CONF_YAML_H */
