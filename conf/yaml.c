/*
 * conf/yaml.c: YAML files as trees of nodes with line numbers (libyaml).
 *
 * Why a library: YAML is subtle (anchors and aliases, flow and block
 * styles, four quoting rules, folded and literal multi-line scalars,
 * comments anywhere), and an operator's file copied from ATS may use any
 * of it; a hand parser would misread some of it, and a misread access rule
 * is a security hole.  libyaml is the YAML 1.1 parser Debian ships (small,
 * no dependencies).
 *
 * libyaml's document loader gives a graph: an alias is a second reference
 * to the anchored node, and an anchor may even be referenced from inside
 * itself.  The conversion below copies it into a tree, so every node has
 * exactly one owner and conf_yaml_free() is a plain recursive free; the
 * node count (after expansion) and the depth are bounded, which stops both
 * an alias bomb and a cycle.
 *
 * libyaml's marks are 0-based; every line here is 1-based, as in the
 * other conf/ parsers' "file:line: message".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "conf/yaml.h"

struct yaml_conv {
    yaml_document_t    *doc;
    const char         *name;
    struct conf_errors *e;
    int                 nodes;        /* made so far */
    int                 failed;       /* an error was recorded */
};

const char *
conf_yaml_kind_name(enum conf_yaml_kind kind)
{
    switch (kind) {
    case CONF_YAML_SCALAR: return "scalar";
    case CONF_YAML_SEQ:    return "sequence";
    case CONF_YAML_MAP:    return "mapping";
    }
    return "node";
}

int
conf_yaml_is_null(const struct conf_yaml *n)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

    if (n->kind != CONF_YAML_SCALAR || !n->plain)
        return 0;
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
        if (strcmp(n->str, nulls[i]) == 0)
            return 1;
    return 0;
}

void
conf_yaml_free(struct conf_yaml *n)
{
    if (n == NULL)
        return;
    for (int i = 0; i < n->nkids; i++)
        conf_yaml_free(n->kids[i]);
    free(n->kids);
    free(n->str);
    free(n);
}

const struct conf_yaml *
conf_yaml_get(const struct conf_yaml *map, const char *key)
{
    if (map == NULL || map->kind != CONF_YAML_MAP)
        return NULL;
    for (int i = 0; i + 1 < map->nkids; i += 2) {
        const struct conf_yaml *k = map->kids[i];

        if (k->kind == CONF_YAML_SCALAR && strcmp(k->str, key) == 0)
            return map->kids[i + 1];
    }
    return NULL;
}

/* ---------------------------------------------------------------------
 * libyaml's document -> our tree
 */
static struct conf_yaml *yaml_conv_node(struct yaml_conv *cv, int index,
                                        int depth);

static int
yaml_key_cmp(const void *a, const void *b)
{
    const struct conf_yaml *x = *(struct conf_yaml *const *)a;
    const struct conf_yaml *y = *(struct conf_yaml *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int    c = memcmp(x->str, y->str, n);

    if (c != 0)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->line - y->line;
}

/* YAML forbids a key twice in one mapping; libyaml does not check, and a
 * consumer would silently take one of the two.  Sorting the scalar keys
 * finds duplicates in O(n log n) whatever the mapping's size. */
static void
yaml_check_duplicates(struct yaml_conv *cv, struct conf_yaml *map)
{
    struct conf_yaml **keys;
    int                n = 0;

    if (map->nkids < 4)
        return;
    keys = malloc(sizeof(*keys) * (size_t)(map->nkids / 2));
    if (keys == NULL) {
        conf_error(cv->e, cv->name, map->line, "out of memory");
        cv->failed = 1;
        return;
    }
    for (int i = 0; i < map->nkids; i += 2)
        if (map->kids[i]->kind == CONF_YAML_SCALAR)
            keys[n++] = map->kids[i];
    qsort(keys, (size_t)n, sizeof(*keys), yaml_key_cmp);
    for (int i = 1; i < n; i++) {
        if (keys[i]->len == keys[i - 1]->len
            && memcmp(keys[i]->str, keys[i - 1]->str, keys[i]->len) == 0) {
            conf_error(cv->e, cv->name, keys[i]->line,
                       "duplicate key \"%s\" (first on line %d)",
                       keys[i]->str, keys[i - 1]->line);
            cv->failed = 1;
        }
    }
    free(keys);
}

/* Convert the children of a sequence (items) or mapping (pairs). */
static int
yaml_conv_kids(struct yaml_conv *cv, yaml_node_t *yn, struct conf_yaml *n,
               int depth)
{
    size_t count;

    if (yn->type == YAML_SEQUENCE_NODE)
        count = (size_t)(yn->data.sequence.items.top
                         - yn->data.sequence.items.start);
    else
        count = 2 * (size_t)(yn->data.mapping.pairs.top
                             - yn->data.mapping.pairs.start);
    if (count > CONF_YAML_MAX_NODES) {
        conf_error(cv->e, cv->name, n->line, "more than %d nodes",
                   CONF_YAML_MAX_NODES);
        return -1;
    }
    if (count == 0)
        return 0;
    n->kids = calloc(count, sizeof(*n->kids));
    if (n->kids == NULL) {
        conf_error(cv->e, cv->name, n->line, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        int idx;

        if (yn->type == YAML_SEQUENCE_NODE)
            idx = yn->data.sequence.items.start[i];
        else if (i % 2 == 0)
            idx = yn->data.mapping.pairs.start[i / 2].key;
        else
            idx = yn->data.mapping.pairs.start[i / 2].value;
        n->kids[i] = yaml_conv_node(cv, idx, depth + 1);
        if (n->kids[i] == NULL)
            return -1;
        n->nkids++;
    }
    return 0;
}

static struct conf_yaml *
yaml_conv_node(struct yaml_conv *cv, int index, int depth)
{
    yaml_node_t      *yn = yaml_document_get_node(cv->doc, index);
    struct conf_yaml *n;

    if (yn == NULL) {
        conf_error(cv->e, cv->name, 0, "broken YAML document");
        return NULL;
    }
    if (depth > CONF_YAML_MAX_DEPTH) {
        /* also what an anchor referenced from inside itself becomes */
        conf_error(cv->e, cv->name, (int)yn->start_mark.line + 1,
                   "nested deeper than %d levels", CONF_YAML_MAX_DEPTH);
        return NULL;
    }
    if (++cv->nodes > CONF_YAML_MAX_NODES) {
        conf_error(cv->e, cv->name, (int)yn->start_mark.line + 1,
                   "more than %d nodes (after expanding aliases)",
                   CONF_YAML_MAX_NODES);
        return NULL;
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL) {
        conf_error(cv->e, cv->name, 0, "out of memory");
        return NULL;
    }
    n->line = (int)yn->start_mark.line + 1;
    switch (yn->type) {
    case YAML_SCALAR_NODE:
        n->kind = CONF_YAML_SCALAR;
        n->plain = yn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        n->len = yn->data.scalar.length;
        n->str = malloc(n->len + 1);
        if (n->str == NULL) {
            conf_error(cv->e, cv->name, n->line, "out of memory");
            goto fail;
        }
        memcpy(n->str, yn->data.scalar.value, n->len);
        n->str[n->len] = '\0';
        return n;
    case YAML_SEQUENCE_NODE:
    case YAML_MAPPING_NODE:
        n->kind = yn->type == YAML_SEQUENCE_NODE ? CONF_YAML_SEQ
                                                 : CONF_YAML_MAP;
        if (yaml_conv_kids(cv, yn, n, depth) < 0)
            goto fail;
        if (n->kind == CONF_YAML_MAP)
            yaml_check_duplicates(cv, n);
        return n;
    default:
        conf_error(cv->e, cv->name, n->line, "empty YAML node");
        goto fail;
    }
fail:
    conf_yaml_free(n);
    return NULL;
}

/* ---------------------------------------------------------------------
 * Loading
 */

/* libyaml's reader errors (bad UTF-8, control characters) carry a byte
 * offset, not a mark: count the lines up to it. */
static int
yaml_offset_line(const char *text, size_t len, size_t off)
{
    int line = 1;

    for (size_t i = 0; i < off && i < len; i++)
        if (text[i] == '\n')
            line++;
    return line;
}

static void
yaml_parse_error(yaml_parser_t *p, const char *text, size_t len,
                 const char *name, struct conf_errors *e)
{
    const char *problem = p->problem != NULL ? p->problem : "YAML error";
    int         line;

    if (p->error == YAML_MEMORY_ERROR) {
        conf_error(e, name, 0, "out of memory");
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        conf_error(e, name, yaml_offset_line(text, len, p->problem_offset),
                   "%s", problem);
        return;
    }
    line = (int)p->problem_mark.line + 1;
    if (p->context != NULL)
        conf_error(e, name, line, "%s (%s started on line %d)", problem,
                   p->context, (int)p->context_mark.line + 1);
    else
        conf_error(e, name, line, "%s", problem);
}

int
conf_yaml_load_text(const char *text, size_t len, const char *name,
                    struct conf_errors *e, struct conf_yaml **root)
{
    yaml_parser_t    parser;
    yaml_document_t  doc, extra;
    struct yaml_conv cv = { .doc = &doc, .name = name, .e = e };
    int              rc = -1;

    *root = NULL;
    if (len > CONF_YAML_MAX_BYTES) {
        conf_error(e, name, 0, "larger than %d bytes", CONF_YAML_MAX_BYTES);
        return -1;
    }
    if (!yaml_parser_initialize(&parser)) {
        conf_error(e, name, 0, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_parse_error(&parser, text, len, name, e);
        yaml_parser_delete(&parser);
        return -1;
    }
    if (yaml_document_get_root_node(&doc) == NULL) {
        rc = 0;                             /* empty: no document */
        goto out;
    }
    /* One document per file: a second one would be silently dropped. */
    if (!yaml_parser_load(&parser, &extra)) {
        yaml_parse_error(&parser, text, len, name, e);
        goto out;
    }
    if (yaml_document_get_root_node(&extra) != NULL) {
        conf_error(e, name, (int)extra.start_mark.line + 1,
                   "a second YAML document (only one is read)");
        yaml_document_delete(&extra);
        goto out;
    }
    yaml_document_delete(&extra);
    *root = yaml_conv_node(&cv, 1, 0);      /* node 1 is the root */
    if (*root == NULL || cv.failed) {
        conf_yaml_free(*root);
        *root = NULL;
        goto out;
    }
    rc = 0;
out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int
conf_yaml_load(const char *file, struct conf_errors *e,
               struct conf_yaml **root)
{
    FILE   *fp;
    char   *text = NULL, *nt;
    size_t  len = 0, cap = 0, n;
    int     rc = -1;

    *root = NULL;
    fp = fopen(file, "r");
    if (fp == NULL) {
        conf_error(e, file, 0, "cannot open: %s", strerror(errno));
        return -1;
    }
    /* Grow to the file's size (one byte past the limit is enough to know
     * it is too large); a few KiB in the usual case. */
    do {
        if (len == cap) {
            cap = cap == 0 ? 16384 : cap * 2;
            if (cap > CONF_YAML_MAX_BYTES + 1)
                cap = CONF_YAML_MAX_BYTES + 1;
            if ((nt = realloc(text, cap)) == NULL) {
                conf_error(e, file, 0, "out of memory");
                goto out;
            }
            text = nt;
        }
        n = fread(text + len, 1, cap - len, fp);
        len += n;
    } while (n > 0 && len <= CONF_YAML_MAX_BYTES);
    if (ferror(fp)) {
        conf_error(e, file, 0, "read error: %s", strerror(errno));
        goto out;
    }
    rc = conf_yaml_load_text(text != NULL ? text : "", len, file, e, root);
out:
    free(text);
    fclose(fp);
    return rc;
}
