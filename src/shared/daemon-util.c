/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon-util.h"
#include "log.h"
#include "macro.h"
#include "parse-util.h"
#include "signal-util.h"

int daemon_parse_argv_bus(int argc, char *argv[], const char *name, const char *summary, const char *how,
                          const BusInterface *ifaces) {
        int r;

        if (argc <= 1)
                return 0;

        if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
                printf("%s [--help|--version%s]\n\n"
                       "%s\n\n"
                       "Started %s; takes no arguments then. Configuration: /etc/scopebox/scopebox.conf.\n"
                       "%s"
                       "See man:%s(8) and scopeboxctl(1).\n",
                       name, ifaces ? "|--bus-introspect=INTERFACE|list" : "", summary, how,
                       ifaces ? "--bus-introspect prints the introspection XML of an interface it serves.\n"
                              : "",
                       name);
                return 1;
        }
        if (argc == 2 && ifaces) {
                r = bus_introspect_argument(argv[1], ifaces);
                if (r != 0)
                        return r;
        }
        if (argc == 2 && strcmp(argv[1], "--version") == 0) {
                printf("%s %s\n", name, PROJECT_VERSION);
                return 1;
        }

        fprintf(stderr, "%s: unexpected argument '%s'. It is started %s; try --help.\n", name, argv[1], how);
        return -EINVAL;
}

int daemon_parse_argv(int argc, char *argv[], const char *name, const char *summary, const char *how) {
        return daemon_parse_argv_bus(argc, argv, name, summary, how, NULL);
}

int daemon_setup_bus(int argc, char *argv[], const char *name, const char *summary, const char *how,
                     const BusInterface *iface) {
        const BusInterface ifaces[] = { *iface, {} };
        int r;

        r = daemon_parse_argv_bus(argc, argv, name, summary, how, ifaces);
        if (r == 0)
                log_setup(name);
        return r;
}

int daemon_event_new(sd_event **ret, ...) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        va_list ap;
        int r;

        r = sigprocmask_many(SIG_BLOCK, NULL, SIGCHLD, -1);
        if (r < 0)
                return r;
        r = sd_event_default(&e);
        if (r < 0)
                return r;

        va_start(ap, ret);
        for (int sig; r >= 0 && (sig = va_arg(ap, int)) >= 0;) {
                if (sig == SIGCHLD)
                        continue;
                /* sd_event_add_signal() wants it blocked, or it would still kill us. */
                r = sigprocmask_many(SIG_BLOCK, NULL, sig, -1);
                if (r >= 0)
                        r = sd_event_add_signal(e, NULL, sig, NULL, NULL);
        }
        va_end(ap);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(e);
        return 0;
}

int daemon_idle_exit_usec(uint64_t def, uint64_t *ret) {
        const char *e = getenv(DAEMON_IDLE_EXIT_ENV);
        uint64_t sec;

        *ret = def;
        if (!e)
                return 0;
        if (safe_atou64(e, &sec) < 0 || sec < 1 || sec > 86400)
                return -EINVAL;
        *ret = sec * USEC_PER_SEC;
        return 0;
}

int daemon_load_config(Config *c) {
        _cleanup_free_ char *error = NULL;
        int r;

        r = config_load(c, getenv("SCOPEBOX_CONFIG"), &error);
        if (r < 0)
                return log_error_errno(r, "Invalid configuration: %s", error ?: "out of memory");
        return 0;
}
