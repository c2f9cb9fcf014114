/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl: inspect and operate a scopebox installation (status, sessions, exec, gc, doctor). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "bus-util.h"
#include "ctl.h"
#include "parse-util.h"

typedef struct Verb {
        const char *name;
        int min_args, max_args;
        int (*run)(Ctl *c);
} Verb;

static const Verb verbs[] = {
        { "status",   0, 0, verb_status   },
        { "sessions", 0, 0, verb_sessions },
        { "runs",     0, 0, verb_runs     },
        { "inspect",  1, 1, verb_inspect  },
        { "exec",     2, 2, verb_exec     },
        { "kill",     1, 1, verb_kill     },
        { "gc",       0, 0, verb_gc       },
        { "doctor",   0, 0, verb_doctor   },
        { "packages", 1, 1024, verb_packages },
        { "archives", 1, 1, verb_archives },
        { "drain",    0, 0, verb_drain    },
        { "undrain",  0, 0, verb_undrain  },
};

static void help(void) {
        printf("scopeboxctl [OPTIONS...] COMMAND ...\n\n"
               "Inspect and operate scopebox, the code-execution sandbox service.\n\n"
               "Commands:\n"
               "  status              Daemons, sessions, limits and storage\n"
               "  sessions            List sessions: age, idle time, memory, tasks, exec\n"
               "  runs                List the dify run sandboxes (pooled, or serving a run)\n"
               "  inspect ID          Everything known about one session\n"
               "  exec ID FILE        Run FILE's Python code in the session ('-': stdin)\n"
               "  kill ID             End the session now, discarding its workspace and archive\n"
               "  gc                  Delete stored workspace archives older than --max-age\n"
               "  doctor              Check the host's prerequisites\n"
               "  packages install WHEEL|DIR...\n"
               "                      Add Python packages (local wheels) to every sandbox\n"
               "  archives list|retry List released sessions whose archive is not stored yet,\n"
               "                      or try storing them again now\n"
               "  drain               Take no new sessions; existing ones and dify runs go on\n"
               "  undrain             Take new sessions again\n\n"
               "Options:\n"
               "  -h --help           Show this help\n"
               "     --version        Show the version\n"
               "     --json           Print JSON (stable keys, see scopeboxctl(1))\n"
               "     --no-legend      Print no table headers and footers\n"
               "     --timeout=TIME   exec: timeout (ms, or with s, min; default 120s)\n"
               "     --stream         exec: copy the output as it is produced\n"
               "     --max-age=TIME   gc: delete archives older than this (s, or with min, h, d, w;\n"
               "                      default 7d)\n"
               "     --archive        kill: archive the workspace instead of discarding it\n\n"
               "Exit status: 0 success, 1 failure (doctor: a check failed), 2 usage error,\n"
               "4 no such session; exec exits with the code's exit status.\n");
}

enum {
        ARG_VERSION = 0x100,
        ARG_JSON,
        ARG_NO_LEGEND,
        ARG_TIMEOUT,
        ARG_MAX_AGE,
        ARG_ARCHIVE,
        ARG_STREAM,
};

/* Returns 1 to go on, 0 to exit successfully (help, version), -EINVAL on a usage error (reported). */
static int parse_argv(Ctl *c, int argc, char *argv[]) {
        static const struct option options[] = {
                { "help",      no_argument,       NULL, 'h'           },
                { "version",   no_argument,       NULL, ARG_VERSION   },
                { "json",      no_argument,       NULL, ARG_JSON      },
                { "no-legend", no_argument,       NULL, ARG_NO_LEGEND },
                { "timeout",   required_argument, NULL, ARG_TIMEOUT   },
                { "max-age",   required_argument, NULL, ARG_MAX_AGE   },
                { "archive",   no_argument,       NULL, ARG_ARCHIVE   },
                { "stream",    no_argument,       NULL, ARG_STREAM    },
                {}
        };
        uint64_t usec;
        int opt;

        /* '+' would stop at the verb; options may follow it, as with systemctl. */
        while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (opt) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("scopeboxctl %s\n", PROJECT_VERSION);
                        return 0;
                case ARG_JSON:
                        c->json = true;
                        break;
                case ARG_NO_LEGEND:
                        c->legend = false;
                        break;
                case ARG_TIMEOUT:
                        if (parse_time_span(optarg, USEC_PER_MSEC, &usec) < 0 || usec < USEC_PER_MSEC)
                                return ctl_error(EINVAL, "Invalid --timeout '%s': milliseconds, or a number "
                                                 "with ms, s, min, h.", optarg);
                        c->timeout_ms = usec / USEC_PER_MSEC;
                        break;
                case ARG_MAX_AGE:
                        if (parse_time_span(optarg, USEC_PER_SEC, &usec) < 0 || usec < USEC_PER_SEC)
                                return ctl_error(EINVAL, "Invalid --max-age '%s': seconds, or a number with "
                                                 "s, min, h, d, w.", optarg);
                        c->max_age_sec = (int64_t) (usec / USEC_PER_SEC);
                        break;
                case ARG_ARCHIVE:
                        c->archive = true;
                        break;
                case ARG_STREAM:
                        c->stream = true;
                        break;
                default:
                        return -EINVAL; /* getopt said what */
                }
        c->args = argv + optind;
        c->n_args = argc - optind;
        return 1;
}

static int dispatch(Ctl *c) {
        const char *name = c->n_args > 0 ? c->args[0] : "status";

        for (size_t i = 0; i < ELEMENTSOF(verbs); i++) {
                const Verb *v = verbs + i;

                if (!streq(v->name, name))
                        continue;
                if (c->n_args > 0) {
                        c->args++;
                        c->n_args--;
                }
                if (c->n_args < v->min_args || c->n_args > v->max_args) {
                        (void) ctl_error(EINVAL, "Too %s arguments for '%s' (see --help).",
                                         c->n_args < v->min_args ? "few" : "many", name);
                        return CTL_EXIT_USAGE;
                }
                return v->run(c);
        }
        (void) ctl_error(EINVAL, "Unknown command '%s' (see --help).", name);
        return CTL_EXIT_USAGE;
}

int main(int argc, char *argv[]) {
        Ctl c = { .legend = true, .max_age_sec = 7 * 86400 };
        int r;

        (void) signal(SIGPIPE, SIG_IGN);
        r = bus_errors_register();
        if (r < 0)
                return EXIT_FAILURE;

        r = parse_argv(&c, argc, argv);
        if (r <= 0)
                return r < 0 ? CTL_EXIT_USAGE : EXIT_SUCCESS;

        /* dispatch() answers usage errors with CTL_EXIT_USAGE; verbs return their exit status (exec:
         * the code's; doctor: 1 when a check failed) or a negative errno, already reported. */
        r = dispatch(&c);
        c.bus = sd_bus_flush_close_unref(c.bus);
        if (fflush(stdout) != 0 && r >= 0)
                r = EXIT_FAILURE;
        if (r == -ENXIO)
                return CTL_EXIT_NO_SUCH_SESSION;
        return r < 0 ? EXIT_FAILURE : r;
}
