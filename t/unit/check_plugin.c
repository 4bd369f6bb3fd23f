/*
 * t/unit/check_plugin.c: unit tests for conf/plugin.c (issue 22): the
 * remap options @plugin= / @pparam= (conf_plugin_opt and through
 * conf_remap_parse), plugin.config, and the loading conf_load() does
 * (dlopen, the ABI check, create() with its arguments, destroy() at
 * conf_free), with every error's file:line.
 *
 * Plugins are the build tree's: the shipped ones (plugins/) and
 * t/unit/probe.so, whose create() and destroy() write into its exported
 * probe_events (read here with dlsym), and probe99.so, the same built for
 * another ABI.  Each test writes its files in a fresh mkdtemp() directory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <dlfcn.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/plugin.h"
#include "conf/conf.h"

#define PLUGDIR CST_TEST_BUILDDIR "/plugins"
#define PROBE   CST_TEST_BUILDDIR "/t/unit/probe.so"
#define PROBE99 CST_TEST_BUILDDIR "/t/unit/probe99.so"

static char               tmpdir[64];
static struct conf_errors errs;
static void              *probe;      /* our own hold on probe.so */
static char              *events;     /* its probe_events */
/* The API table a daemon gives, with what create() calls: hooks_off is
 * conf/'s; a prepared field here is only something to free. */
struct cst_field {
    size_t len;
};

static struct cst_field *
t_field_prepare(const char *name, size_t nlen, const char *val, size_t vlen)
{
    struct cst_field *f = malloc(sizeof(*f));

    (void)name;
    (void)val;
    if (f != NULL)
        f->len = nlen + vlen;
    return f;
}

static void
t_field_free(struct cst_field *f)
{
    free(f);
}

static int
t_hooks_off(unsigned hooks)
{
    return conf_plugin_hooks_off(hooks);
}

static const struct cst_api api = {
    .abi = CST_PLUGIN_ABI,
    .size = sizeof(struct cst_api),
    .hooks_off = t_hooks_off,
    .field_prepare = t_field_prepare,
    .field_free = t_field_free,
};

static void
setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/check_plugin.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    memset(&errs, 0, sizeof(errs));
    conf_plugin_set_api(&api);
    probe = dlopen(PROBE, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(probe != NULL, "%s", dlerror());
    events = dlsym(probe, "probe_events");
    ck_assert_ptr_nonnull(events);
    events[0] = '\0';
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
teardown(void)
{
    conf_errors_free(&errs);
    dlclose(probe);
    nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *
put(const char *name, const char *text)
{
    static char path[512];
    FILE       *fp;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
    return path;
}

/* records.config with plugin_dir = the build's plugins/, and remap.config */
static struct conf *
load(const char *remap)
{
    put("records.config", "CONFIG proxy.config.http.server_ports STRING 0\n"
                          "CONFIG proxy.config.plugin.plugin_dir STRING " PLUGDIR "\n");
    put("remap.config", remap);
    return conf_load(tmpdir, &errs);
}

/* errs holds an error that starts with "tmpdir/<fmt...>" (prefix: the
 * rest is dlerror()'s, which is glibc's to word) or is exactly it. */
static void check_err(int prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
check_err(int prefix, const char *fmt, ...)
{
    char   *tail, *want;
    va_list ap;

    va_start(ap, fmt);
    ck_assert_int_ge(vasprintf(&tail, fmt, ap), 0);
    va_end(ap);
    ck_assert_int_ge(asprintf(&want, "%s/%s", tmpdir, tail), 0);
    free(tail);
    for (int i = 0; i < errs.nstored; i++) {
        const char *m = errs.msgs[i];
        if (!errs.is_warn[i]
            && (prefix ? strncmp(m, want, strlen(want)) == 0 : strcmp(m, want) == 0)) {
            free(want);
            return;
        }
    }
    for (int i = 0; i < errs.nstored; i++)
        fprintf(stderr, "  have: %s\n", errs.msgs[i]);
    ck_abort_msg("missing error: %s", want);
}

/* ---------------------------------------------------------------------
 * The options
 */
START_TEST(test_opt_forms)
{
    struct conf_plugin *v = NULL;
    const char *why = NULL;
    int n = 0;

    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@action=deny", 4, &why), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@plugin=a.so", 4, &why), 1);
    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@pparam=x", 4, &why), 1);
    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@PPARAM=--y=1", 4, &why), 1);
    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@pparam=", 4, &why), 1);
    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@Plugin=/opt/p/b.so", 5, &why), 1);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(v[0].path, "a.so");
    ck_assert_str_eq(v[0].name, "a.so");
    ck_assert_int_eq(v[0].line, 4);
    ck_assert_int_eq(v[0].argc, 4);
    ck_assert_str_eq(v[0].argv[0], "a.so");
    ck_assert_str_eq(v[0].argv[1], "x");
    ck_assert_str_eq(v[0].argv[2], "--y=1");
    ck_assert_str_eq(v[0].argv[3], "");
    ck_assert_ptr_null(v[0].argv[4]);
    ck_assert_str_eq(v[1].path, "/opt/p/b.so");
    ck_assert_str_eq(v[1].name, "b.so");
    ck_assert_int_eq(v[1].argc, 1);
    ck_assert_ptr_null(v[1].argv[1]);
    ck_assert_ptr_null(v[1].handle);         /* parsing loads nothing */
    ck_assert_ptr_null(v[1].inst);
    conf_plugins_free(v, n);
}
END_TEST

START_TEST(test_opt_errors)
{
    struct conf_plugin *v = NULL;
    const char *why = NULL;
    int n = 0;

    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@pparam=x", 1, &why), -1);
    ck_assert_str_eq(why, "@pparam= before any @plugin= (a parameter belongs to the "
                          "@plugin= before it)");
    why = NULL;
    ck_assert_int_eq(conf_plugin_opt(&v, &n, "@plugin=", 1, &why), -1);
    ck_assert_str_eq(why, "@plugin= needs a file name");
    conf_plugins_free(v, n);
}
END_TEST

START_TEST(test_remap_rules)
{
    struct conf_remap rm;
    const char *f = put("remap.config",
                        "map http://a/ http://o/ @plugin=one.so @pparam=1 @pparam=2 "
                        "@plugin=two.so @pparam=3\n"
                        "map http://b/ http://o/\n"
                        "map http://c/ http://o/ @plugin=three.so @action=allow "
                        "@src_ip=127.0.0.1 @pparam=after-a-filter\n");

    memset(&rm, 0, sizeof(rm));
    ck_assert_int_eq(conf_remap_parse(&rm, f, tmpdir, &errs), 0);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(rm.nrules, 3);
    ck_assert_int_eq(rm.rules[0].nplugins, 2);
    ck_assert_str_eq(rm.rules[0].plugins[0].name, "one.so");
    ck_assert_int_eq(rm.rules[0].plugins[0].argc, 3);
    ck_assert_str_eq(rm.rules[0].plugins[0].argv[2], "2");
    ck_assert_str_eq(rm.rules[0].plugins[1].name, "two.so");
    ck_assert_str_eq(rm.rules[0].plugins[1].argv[1], "3");
    ck_assert_int_eq(rm.rules[0].plugins[1].line, 1);
    ck_assert_int_eq(rm.rules[1].nplugins, 0);
    ck_assert_ptr_null(rm.rules[1].plugins);
    ck_assert_int_eq(rm.rules[2].nplugins, 1);
    ck_assert_int_eq(rm.rules[2].plugins[0].argc, 2);
    ck_assert_str_eq(rm.rules[2].plugins[0].argv[1], "after-a-filter");
    conf_remap_free(&rm);
}
END_TEST

START_TEST(test_remap_errors)
{
    struct conf_remap rm;
    const char *f = put("remap.config",
                        "map http://a/ http://o/ @pparam=x @plugin=one.so\n"
                        "redirect http://b/ http://o/ @plugin=one.so\n"
                        "map http://c/ http://o/ @plugin=\n"
                        "map http://d/ http://o/ @plugin=fine.so\n");

    memset(&rm, 0, sizeof(rm));
    ck_assert_int_eq(conf_remap_parse(&rm, f, tmpdir, &errs), -1);
    check_err(0, "remap.config:1: @pparam=x: @pparam= before any @plugin= (a parameter "
                 "belongs to the @plugin= before it)");
    check_err(0, "remap.config:2: redirect: @plugin= runs on map rules only (a redirect "
                 "rule never reaches the steps a plugin hooks)");
    check_err(1, "remap.config:3: ");
    ck_assert_int_eq(errs.n, 3);
    conf_remap_free(&rm);
}
END_TEST

/* ---------------------------------------------------------------------
 * Loading
 */
START_TEST(test_load_creates_in_order_and_destroys)
{
    struct conf *c;

    put("plugin.config", "# global plugins\n"
                         "\n"
                         PROBE " g1 a b   # a comment\n"
                         PROBE " g2\n");
    c = load("map http://a/ http://o/ @plugin=" PROBE " @pparam=r1a @pparam=x "
             "@plugin=" PROBE " @pparam=r1b\n"
             "map http://b/ http://o/ @plugin=headers.so @pparam=set-resp:X-A:1\n");
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_str_eq(events, "create g1 a b;create g2;create r1a x;create r1b;");
    ck_assert_int_eq(c->nglobals, 2);
    ck_assert_int_eq(c->globals[0].line, 3);
    ck_assert_int_eq(c->globals[1].line, 4);
    ck_assert_ptr_nonnull(c->globals[0].inst);
    ck_assert_ptr_nonnull(c->globals[0].p);
    ck_assert_str_eq(c->globals[0].p->name, "probe");
    /* a relative name is found in plugin_dir */
    ck_assert_ptr_nonnull(c->remap.rules[1].plugins[0].inst);
    ck_assert_str_eq(c->remap.rules[1].plugins[0].p->name, "headers");
    events[0] = '\0';
    conf_free(c);
    /* each list in reverse: the rules' first, then plugin.config's */
    ck_assert_str_eq(events, "destroy r1b;destroy r1a;destroy g2;destroy g1;");
}
END_TEST

/* The calls of hook bit h in plan pn: their slots, as "k k ..." */
static const char *
plan_slots(const struct conf_plan *pn, unsigned h)
{
    static char out[64];
    int ix = __builtin_ctz(h), l = 0;

    out[0] = '\0';
    for (int i = pn->first[ix]; i < pn->first[ix + 1]; i++)
        l += snprintf(out + l, sizeof(out) - (size_t)l, "%s%d", l ? " " : "", pn->calls[i].k);
    return out;
}

/* The plans: per hook, the instances that have it, in order (globals
 * first), less what create() turned off with hooks_off. */
START_TEST(test_plans_list_each_hook_calls)
{
    struct conf *c;

    put("plugin.config", PROBE " g1\n" PROBE " g2 noremap\n");
    c = load("map http://a/ http://o/ @plugin=" PROBE " @pparam=r1 @plugin=" PROBE
             " @pparam=r2 @pparam=noremap @plugin=" PROBE " @pparam=r3\n"
             "map http://b/ http://o/ @plugin=headers.so @pparam=set-resp:X-A:1\n"
             "map http://c/ http://o/\n");
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_ptr_nonnull(c->gplan);
    ck_assert_int_eq(c->gplan->n, 2);
    ck_assert_uint_eq(c->gplan->hooks, CONF_PH_REMAP | CONF_PH_TXN_END);
    ck_assert_str_eq(plan_slots(c->gplan, CONF_PH_REMAP), "0");
    ck_assert_str_eq(plan_slots(c->gplan, CONF_PH_TXN_END), "0 1");

    const struct conf_plan *pn = c->remap.rules[0].plan;
    ck_assert_ptr_nonnull(pn);
    ck_assert_int_eq(pn->n, 5);
    ck_assert_str_eq(plan_slots(pn, CONF_PH_REMAP), "0 2 4");
    ck_assert_str_eq(plan_slots(pn, CONF_PH_TXN_END), "0 1 2 3 4");
    ck_assert_str_eq(plan_slots(pn, CONF_PH_SEND_RESPONSE), "");
    ck_assert_str_eq(pn->calls[pn->first[1] + 1].name, "probe.so");
    ck_assert_str_eq((const char *)pn->calls[pn->first[1] + 1].inst, "r1");
    ck_assert_ptr_eq(pn->pl[3], &c->remap.rules[0].plugins[1]);

    /* headers.so with set-resp only: no remap or read_response call */
    pn = c->remap.rules[1].plan;
    ck_assert_ptr_nonnull(pn);
    ck_assert_uint_eq(pn->pl[2]->hooks, CONF_PH_SEND_RESPONSE);
    ck_assert_str_eq(plan_slots(pn, CONF_PH_SEND_RESPONSE), "2");
    ck_assert_str_eq(plan_slots(pn, CONF_PH_REMAP), "0");
    ck_assert_str_eq(plan_slots(pn, CONF_PH_READ_RESPONSE), "");
    ck_assert_ptr_null(c->remap.rules[2].plan);
    /* outside a create(), hooks_off changes nothing */
    ck_assert_int_eq(conf_plugin_hooks_off(CONF_PH_TXN_END), -1);
    conf_free(c);
}
END_TEST

START_TEST(test_load_errors)
{
    struct conf *c;

    c = load("map http://a/ http://o/\n"
             "map http://b/ http://o/ @plugin=nosuch.so\n"
             "map http://c/ http://o/ @plugin=headers.so @pparam=bogus\n"
             "map http://d/ http://o/ @plugin=" PROBE " @pparam=fail @plugin=" PROBE
             " @pparam=never\n"
             "map http://e/ http://o/ @plugin=" PROBE99 "\n"
             "map http://f/ http://o/ @plugin=/lib/x86_64-linux-gnu/libc.so.6\n"
             "map http://g/ http://o/ @plugin=" PROBE " @pparam=ok\n");
    ck_assert_ptr_null(c);
    check_err(1, "remap.config:2: plugin nosuch.so: cannot load " PLUGDIR "/nosuch.so: ");
    check_err(0, "remap.config:3: plugin headers.so: unknown argument \"bogus\" (expected "
                 "set-, add- or rm- with req:, origin: or resp:, if-status=, if-field= or "
                 "always)");
    check_err(0, "remap.config:4: plugin " PROBE ": asked to fail");
    check_err(0, "remap.config:5: plugin " PROBE99 ": built for plugin ABI 99, this "
                 "Cistern has ABI %d: rebuild it against this cistern/plugin.h",
              CST_PLUGIN_ABI);
    if (access("/lib/x86_64-linux-gnu/libc.so.6", R_OK) == 0) {
        check_err(0, "remap.config:6: plugin /lib/x86_64-linux-gnu/libc.so.6: "
                     "/lib/x86_64-linux-gnu/libc.so.6 exports no cistern_plugin (not a "
                     "Cistern plugin)");
        ck_assert_int_eq(errs.n, 5);
    }
    /* the failing rule's later plugin is not made; the good ones were,
     * and were destroyed when the load failed */
    ck_assert_ptr_null(strstr(events, "never"));
    ck_assert_str_eq(events, "create ok;destroy ok;");
}
END_TEST

START_TEST(test_plugin_config_errors)
{
    struct conf *c;

    put("plugin.config", "# one\n"
                         PROBE " fine\n"
                         "headers.so\n"
                         "  \n"
                         PROBE " fail\n");
    c = load("map http://a/ http://o/ @plugin=" PROBE " @pparam=rule\n");
    ck_assert_ptr_null(c);
    check_err(0, "plugin.config:3: plugin headers.so: no operation given (e.g. "
                 "@pparam=set-resp:X-A:1)");
    /* plugin.config stops at its first failure (line 5 is not tried); the
     * rules' plugins are still tried (their errors are reported too), and
     * everything made is destroyed with the failed configuration */
    ck_assert_int_eq(errs.n, 1);
    ck_assert_str_eq(events, "create fine;create rule;destroy rule;destroy fine;");
}
END_TEST

START_TEST(test_plugin_config_absent_or_empty)
{
    struct conf *c = load("map http://a/ http://o/\n");

    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->nglobals, 0);
    ck_assert_ptr_null(c->globals);
    conf_free(c);
    conf_errors_free(&errs);
    memset(&errs, 0, sizeof(errs));
    put("plugin.config", "# nothing yet\n\n");
    c = load("map http://a/ http://o/\n");
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(errs.n, 0);
    ck_assert_int_eq(c->nglobals, 0);
    conf_free(c);
    ck_assert_str_eq(events, "");
}
END_TEST

static Suite *
plugin_suite(void)
{
    Suite *s = suite_create("plugin");
    TCase *tc = tcase_create("conf");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);      /* conf_load under a sanitizer, a busy machine */
    tcase_add_test(tc, test_opt_forms);
    tcase_add_test(tc, test_opt_errors);
    tcase_add_test(tc, test_remap_rules);
    tcase_add_test(tc, test_remap_errors);
    tcase_add_test(tc, test_load_creates_in_order_and_destroys);
    tcase_add_test(tc, test_plans_list_each_hook_calls);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_plugin_config_errors);
    tcase_add_test(tc, test_plugin_config_absent_or_empty);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(plugin_suite());
    int      failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
