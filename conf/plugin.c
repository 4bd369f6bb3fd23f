/*
 * conf/plugin.c: plugins in a configuration (issue 22).
 *
 * remap.config's `@plugin=NAME.so @pparam=ARG ...` (several per rule, in
 * order) and plugin.config's `NAME.so ARG ...` lines (global plugins, in
 * order) become struct conf_plugin entries.  conf_plugins_load() loads
 * each (dlopen, RTLD_NOW so a missing symbol fails here), checks that it
 * exports `cistern_plugin` built for this CST_PLUGIN_ABI, and calls its
 * create() with the arguments: any failure is an error with the file and
 * line of the rule, so `cistern -t` and a reload catch it and the running
 * configuration stays.  conf_free() destroys the instances and unloads
 * (the master frees a generation's config once its last worker is gone).
 *
 * A relative path is looked up in proxy.config.plugin.plugin_dir.  The
 * function table the plugins call (cistern/plugin.h's struct cst_api) is
 * the worker's (worker/plugin.c), handed down by conf_plugin_set_api():
 * nothing of the daemon's is exported to the plugin's symbol lookup.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cistern/plugin.h"
#include "conf/conf.h"

static const void *conf_api;
static struct conf_plugin *conf_creating;     /* in its create() */

void
conf_plugin_set_api(const void *api)
{
    conf_api = api;
}

static int
conf_plugin_arg(struct conf_plugin *pl, const char *arg)
{
    char **na = realloc(pl->argv, sizeof(*na) * (size_t)(pl->argc + 2));

    if (na == NULL)
        return -1;
    pl->argv = na;
    if ((na[pl->argc] = strdup(arg)) == NULL)
        return -1;
    na[++pl->argc] = NULL;
    return 0;
}

int
conf_plugin_opt(struct conf_plugin **v, int *n, const char *opt, int line,
                const char **why)
{
    if (strncasecmp(opt, "@plugin=", 8) == 0) {
        struct conf_plugin *nv = realloc(*v, sizeof(*nv) * (size_t)(*n + 1)), *pl;
        const char *slash;

        if (nv == NULL) {
            *why = "out of memory";
            return -1;
        }
        *v = nv;
        pl = &nv[(*n)++];
        memset(pl, 0, sizeof(*pl));
        pl->line = line;
        if (opt[8] == '\0') {
            *why = "@plugin= needs a file name";
            return -1;
        }
        slash = strrchr(opt + 8, '/');
        if ((pl->path = strdup(opt + 8)) == NULL
            || (pl->name = strdup(slash ? slash + 1 : opt + 8)) == NULL
            || conf_plugin_arg(pl, pl->path) < 0) {
            *why = "out of memory";
            return -1;
        }
        return 1;
    }
    if (strncasecmp(opt, "@pparam=", 8) == 0) {
        if (*n == 0) {
            *why = "@pparam= before any @plugin= (a parameter belongs to the "
                   "@plugin= before it)";
            return -1;
        }
        if (conf_plugin_arg(&(*v)[*n - 1], opt + 8) < 0) {
            *why = "out of memory";
            return -1;
        }
        return 1;
    }
    return 0;
}

void
conf_plugins_free(struct conf_plugin *v, int n)
{
    /* in reverse: a later plugin may lean on an earlier one */
    for (int i = n - 1; i >= 0; i--) {
        struct conf_plugin *pl = &v[i];

        if (pl->inst && pl->p && pl->p->destroy)
            pl->p->destroy(pl->inst);
        if (pl->handle)
            dlclose(pl->handle);
        for (int k = 0; k < pl->argc; k++)
            free(pl->argv[k]);
        free(pl->argv);
        free(pl->path);
        free(pl->name);
    }
    free(v);
}

/* The hooks a plugin has, CONF_PH_ bits. */
static unsigned
conf_plugin_hooks(const struct cst_plugin *p)
{
    return (p->read_request ? CONF_PH_READ_REQUEST : 0) | (p->remap ? CONF_PH_REMAP : 0)
           | (p->send_request ? CONF_PH_SEND_REQUEST : 0)
           | (p->intercept ? CONF_PH_INTERCEPT : 0)
           | (p->read_response ? CONF_PH_READ_RESPONSE : 0)
           | (p->send_response ? CONF_PH_SEND_RESPONSE : 0)
           | (p->txn_end ? CONF_PH_TXN_END : 0);
}

int
conf_plugin_hooks_off(unsigned hooks)
{
    if (conf_creating == NULL)
        return -1;
    conf_creating->hooks &= ~hooks;
    return 0;
}

/* Load and create one plugin; errors at file:line. */
static int
conf_plugin_load(struct conf_plugin *pl, const char *dir, const char *file,
                 struct conf_errors *e)
{
    char err[256], *path;
    const struct cst_plugin *p;

    path = pl->path[0] == '/' ? strdup(pl->path) : conf_path(dir, pl->path);
    if (path == NULL) {
        conf_error(e, file, pl->line, "out of memory");
        return -1;
    }
    pl->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (pl->handle == NULL) {
        const char *why = dlerror();
        conf_error(e, file, pl->line, "plugin %s: cannot load %s: %s", pl->path, path,
                   why ? why : "dlopen failed");
        free(path);
        return -1;
    }
    p = dlsym(pl->handle, CST_PLUGIN_SYMBOL);
    if (p == NULL) {
        conf_error(e, file, pl->line, "plugin %s: %s exports no " CST_PLUGIN_SYMBOL
                   " (not a Cistern plugin)", pl->path, path);
        free(path);
        return -1;
    }
    free(path);
    if (p->abi != CST_PLUGIN_ABI) {
        conf_error(e, file, pl->line, "plugin %s: built for plugin ABI %u, this Cistern "
                   "has ABI %d: rebuild it against this cistern/plugin.h", pl->path,
                   (unsigned)p->abi, CST_PLUGIN_ABI);
        return -1;
    }
    pl->p = p;
    pl->hooks = conf_plugin_hooks(p);   /* a plugin without create() has them too */
    if (p->create == NULL)
        return 0;
    err[0] = '\0';
    conf_creating = pl;
    pl->inst = p->create(conf_api, pl->argc, pl->argv, err, sizeof(err));
    conf_creating = NULL;
    if (pl->inst == NULL) {
        conf_error(e, file, pl->line, "plugin %s: %s", pl->path,
                   err[0] ? err : "its create() failed");
        pl->p = NULL;           /* nothing to destroy */
        return -1;
    }
    return 0;
}

/* One call of hook bit h to instance pl in slot k. */
static void
conf_pcall_set(struct conf_pcall *pc, unsigned h, const struct conf_plugin *pl, int k)
{
    const struct cst_plugin *p = pl->p;

    switch (h) {
    case CONF_PH_READ_REQUEST: pc->fn.hook = p->read_request; break;
    case CONF_PH_REMAP: pc->fn.hook = p->remap; break;
    case CONF_PH_SEND_REQUEST: pc->fn.hook = p->send_request; break;
    case CONF_PH_INTERCEPT: pc->fn.hook = p->intercept; break;
    case CONF_PH_READ_RESPONSE: pc->fn.hook = p->read_response; break;
    case CONF_PH_SEND_RESPONSE: pc->fn.hook = p->send_response; break;
    default: pc->fn.end = p->txn_end; break;
    }
    pc->inst = pl->inst;
    pc->name = pl->name;
    pc->pl = pl;
    pc->k = k;
}

/* The plan of the global instances g[0..ng) then the rule's r[0..nr) (at
 * most CONF_PLAN_MAX of them: conf_plans_check); NULL when out of memory. */
static struct conf_plan *
conf_plan_make(const struct conf_plugin *g, int ng, const struct conf_plugin *r, int nr)
{
    int n = ng + nr < CONF_PLAN_MAX ? ng + nr : CONF_PLAN_MAX, ncalls = 0, c = 0;
    const struct conf_plugin *pl[CONF_PLAN_MAX];
    struct conf_plan *pn;

    for (int k = 0; k < n; k++) {
        pl[k] = k < ng ? &g[k] : &r[k - ng];
        ncalls += __builtin_popcount(pl[k]->hooks);
    }
    if ((pn = calloc(1, sizeof(*pn) + sizeof(pn->calls[0]) * (size_t)ncalls)) == NULL)
        return NULL;
    pn->n = n;
    memcpy(pn->pl, pl, sizeof(pl[0]) * (size_t)n);
    for (int h = 0; h < CONF_PH_COUNT; h++) {
        pn->first[h] = (uint8_t)c;
        for (int k = 0; k < n; k++)
            if (pl[k]->hooks & (1u << h))
                conf_pcall_set(&pn->calls[c++], 1u << h, pl[k], k);
        if (c > pn->first[h])
            pn->hooks |= 1u << h;
    }
    pn->first[CONF_PH_COUNT] = (uint8_t)c;
    return pn;
}

/* More instances on a request than a plan holds is an error, not a
 * silent cut: the ones past CONF_PLAN_MAX (a rule's access check, say)
 * would never run.  0, or -1 with the errors recorded. */
static int
conf_plans_check(const struct conf *c, const char *pcfg, struct conf_errors *e)
{
    int rc = 0;

    if (c->nglobals > CONF_PLAN_MAX) {
        conf_error(e, pcfg, c->globals[CONF_PLAN_MAX].line, "%d global plugins: at most %d "
                   "run on a request", c->nglobals, CONF_PLAN_MAX);
        return -1;
    }
    for (int r = 0; r < c->remap.nrules; r++) {
        const struct conf_remap_rule *rule = &c->remap.rules[r];
        if (rule->nplugins > 0 && c->nglobals + rule->nplugins > CONF_PLAN_MAX) {
            conf_error(e, rule->file, rule->line, "%d plugins run on this rule's requests "
                       "(%d global, %d its own): at most %d", c->nglobals + rule->nplugins,
                       c->nglobals, rule->nplugins, CONF_PLAN_MAX);
            rc = -1;
        }
    }
    return rc;
}

/* The plans of c: the global one, each rule's with plugins.  0 or -1. */
static int
conf_plans_make(struct conf *c)
{
    if (c->nglobals > 0 && (c->gplan = conf_plan_make(c->globals, c->nglobals, NULL, 0)) == NULL)
        return -1;
    for (int r = 0; r < c->remap.nrules; r++) {
        struct conf_remap_rule *rule = &c->remap.rules[r];
        if (rule->nplugins > 0
            && (rule->plan = conf_plan_make(c->globals, c->nglobals, rule->plugins,
                                            rule->nplugins)) == NULL)
            return -1;
    }
    return 0;
}

/* plugin.config: "NAME.so ARG ..." per line. */
struct conf_pcfg {
    struct conf *c;
    const char  *file;
    struct conf_errors *e;
};

static int
conf_pcfg_line(void *arg, char *line, int lineno)
{
    struct conf_pcfg *pc = arg;
    struct conf *c = pc->c;
    char *p = line, *tok, opt[1024];
    const char *why = NULL;
    int rc;

    tok = conf_token(&p);
    if (tok == NULL || tok[0] == '#')
        return 0;
    snprintf(opt, sizeof(opt), "@plugin=%s", tok);
    rc = conf_plugin_opt(&c->globals, &c->nglobals, opt, lineno, &why);
    while (rc > 0 && (tok = conf_token(&p)) != NULL && tok[0] != '#')
        if (conf_plugin_arg(&c->globals[c->nglobals - 1], tok) < 0) {
            rc = -1;
            why = "out of memory";
        }
    if (rc < 0)
        conf_error(pc->e, pc->file, lineno, "%s", why);
    return 0;
}

int
conf_plugins_load(struct conf *c, struct conf_errors *e)
{
    const char *dir = c->rec.plugin_dir;
    int n0 = e->n, nload = 0;
    char *path = conf_path(c->confdir, "plugin.config");

    if (path == NULL) {
        conf_error(e, c->confdir, 0, "out of memory");
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) == 0 || errno != ENOENT) {
        struct conf_pcfg pc = { c, path, e };
        conf_foreach_line(path, e, conf_pcfg_line, &pc);
        if (c->nglobals == 0)
            conf_note(e, CONF_NOTE_MATCHES, path, 0, "empty: no global plugins");
    }
    for (int i = 0; i < c->nglobals && e->n == n0; i++) {
        if (conf_plugin_load(&c->globals[i], dir, path, e) == 0) {
            conf_note(e, CONF_NOTE_USED, path, c->globals[i].line, "global plugin %s",
                      c->globals[i].name);
            nload++;
        }
    }
    if (e->n == n0)
        (void)conf_plans_check(c, path, e);
    free(path);
    for (int r = 0; r < c->remap.nrules; r++) {
        struct conf_remap_rule *rule = &c->remap.rules[r];
        for (int i = 0; i < rule->nplugins; i++) {
            if (conf_plugin_load(&rule->plugins[i], dir, rule->file, e) < 0)
                break;      /* the rest of the rule would run without it */
            conf_note(e, CONF_NOTE_USED, rule->file, rule->line, "@plugin=%s",
                      rule->plugins[i].path);
            nload++;
        }
    }
    (void)nload;
    if (e->n == n0 && conf_plans_make(c) < 0)
        conf_error(e, c->confdir, 0, "out of memory");
    return e->n == n0 ? 0 : -1;
}
