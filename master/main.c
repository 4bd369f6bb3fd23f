/*
 * master/main.c: the command line.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "master/master.h"
#include "worker/plugin.h"

static void
usage(FILE *out)
{
    fprintf(out,
"Usage: cistern [-c CONFDIR] [-f] [-t] [-s reload|stop|quit|reopen] [-V] [-h]\n"
"       cistern --list-keys\n"
"       cistern ctl [-c CONFDIR] [--json] VERB ...   (cistern ctl --help)\n"
"\n"
"Cistern, a caching HTTP reverse proxy with Apache Traffic Server's config.\n"
"\n"
"  -c CONFDIR  configuration directory (default " CST_SYSCONFDIR "):\n"
"              records.config, remap.config, ip_allow.yaml or\n"
"              ip_allow.config,\n"
"              storage.config, ssl_multicert.config\n"
"  -f          stay in the foreground (log to stderr as well)\n"
"  -t          check the configuration and exit: 0 when valid, 1 with every\n"
"              error printed as file:line: message; then a migration report:\n"
"              what each key and file became (understood, matches, ignored\n"
"              as ATS-internal, unknown) and how many errors refused it\n"
"  --list-keys every records.config key Cistern knows, by class, with its\n"
"              default or accepted values and meaning (Markdown tables)\n"
"  -s ACTION   signal the running master through its pid file:\n"
"              reload (check, then SIGHUP; waits for the result),\n"
"              stop (SIGTERM, fast), quit (SIGQUIT, graceful drain),\n"
"              reopen (SIGUSR1, reopen the error and access logs)\n"
"  -V, --version  print the version and exit\n"
"  -h, --help  this help\n"
"\n"
"Without -f, cistern detaches once its workers are ready; the exit status\n"
"says whether the start worked.  Exit status: 0 ok, 1 error (bad\n"
"configuration, failed start, no running master, reload refused or\n"
"failed), 2 bad command line.  See cistern(8).\n");
}

int
main(int argc, char **argv)
{
    const char *confdir = CST_SYSCONFDIR, *sig = NULL;
    int foreground = 0, check = 0, opt;

    /* what plugins call: given to each at create() (conf/plugin.c) */
    conf_plugin_set_api(&plug_api);

    if (argc >= 2 && strcmp(argv[1], "ctl") == 0)
        return ctl_main(argc - 1, argv + 1);
    /* the long spellings users try first */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--list-keys") == 0) {
            conf_records_list_keys(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("cistern %s\n", PACKAGE_VERSION);
            return 0;
        }
    }
    while ((opt = getopt(argc, argv, "c:fts:Vh")) != -1) {
        switch (opt) {
        case 'c': confdir = optarg; break;
        case 'f': foreground = 1; break;
        case 't': check = 1; break;
        case 's': sig = optarg; break;
        case 'V':
            printf("cistern %s\n", PACKAGE_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "cistern: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (check && sig) {
        fprintf(stderr, "cistern: -t and -s cannot be combined\n");
        return 2;
    }
    if (check)
        return master_check(confdir);
    if (sig)
        return master_send(confdir, sig);
    return master_run(confdir, foreground);
}
