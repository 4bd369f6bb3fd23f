/*
 * t/unit/plugin_probe.c: probe.so (and probe99.so, built with
 * -DPROBE_ABI=99), a plugin for t/unit/check_plugin.c only.  create() and
 * destroy() write what they were given into probe_events, which the test
 * reads with dlsym: "create NAME ARG...;" and "destroy NAME;" (NAME is
 * argv[1]).  An argument "fail" makes create() fail with "asked to fail".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/plugin.h"

#ifndef PROBE_ABI
#define PROBE_ABI CST_PLUGIN_ABI
#endif

CST_PLUGIN_EXPORT char probe_events[4096];

static void
probe_put(const char *s)
{
    size_t l = strlen(probe_events);

    snprintf(probe_events + l, sizeof(probe_events) - l, "%s", s);
}

static void *
probe_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    char *name;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "fail") == 0) {
            snprintf(err, errlen, "asked to fail");
            return NULL;
        }
        /* "noremap": this instance is not called at remap (hooks_off) */
        if (strcmp(argv[i], "noremap") == 0 && api->hooks_off(CST_HOOK_REMAP) < 0) {
            snprintf(err, errlen, "hooks_off refused");
            return NULL;
        }
    }
    probe_put("create");
    for (int i = 1; i < argc; i++) {
        probe_put(" ");
        probe_put(argv[i]);
    }
    probe_put(";");
    name = strdup(argc > 1 ? argv[1] : "-");
    return name;
}

static void
probe_destroy(void *inst)
{
    probe_put("destroy ");
    probe_put(inst);
    probe_put(";");
    free(inst);
}

/* Hooks for the plans to list (never called here). */
static int
probe_remap(void *inst, struct cst_txn *t)
{
    (void)inst;
    (void)t;
    return CST_CONTINUE;
}

static void
probe_end(void *inst, struct cst_txn *t)
{
    (void)inst;
    (void)t;
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = PROBE_ABI,
    .name = "probe",
    .create = probe_create,
    .destroy = probe_destroy,
    .remap = probe_remap,
    .txn_end = probe_end,
};
