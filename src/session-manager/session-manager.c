/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-session-manager: bus-activated owner of io.scopebox.SessionManager1. */
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <systemd/sd-daemon.h>

#include "daemon-util.h"
#include "host-check.h"
#include "log.h"
#include "manager.h"

int main(int argc, char *argv[]) {
        _cleanup_(manager_freep) Manager *m = NULL;
        sigset_t ss;
        int r;

        r = daemon_parse_argv(argc, argv, "scopebox-session-manager",
                              "The session manager of scopebox (io.scopebox.SessionManager1).",
                              "by the system bus (scopebox-session-manager.service)");
        if (r != 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

        log_setup("scopebox-session-manager");
        umask(0022);

        /* sd-event handles these; children get a clean mask before exec. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0) {
                log_error_errno(errno, "Failed to block signals: %m");
                return EXIT_FAILURE;
        }
        (void) signal(SIGPIPE, SIG_IGN);

        /* Weak kernel settings are logged, never fatal: the sandbox does not depend on them. */
        (void) host_check();

        r = manager_new(&m);
        if (r < 0)
                goto finish;
        r = manager_startup(m);
        if (r < 0)
                goto finish;
        r = manager_run(m);

finish:
        if (r < 0) {
                (void) sd_notifyf(false, "STATUS=Failed: %s\nERRNO=%i", strerror(-r), -r);
                return EXIT_FAILURE;
        }
        (void) sd_notify(false, "STOPPING=1\nSTATUS=Shutting down; runners keep their sessions.");
        return EXIT_SUCCESS;
}
