/*
 * t/plugin_nocreate.c: nocreate.so, a test plugin that exports no create()
 * (t/test_review.py): its read_request refuses every request, so a
 * request that gets through shows the hook was never called.
 */
#include "cistern/plugin.h"

static int
nc_read_request(void *inst, struct cst_txn *t)
{
    (void)inst;
    (void)t;
    return CST_DENY;
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "nocreate",
    .read_request = nc_read_request,
};
