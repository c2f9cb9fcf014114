/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-session-manager: bus-activated owner of io.scopebox.SessionManager1. */
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <systemd/sd-daemon.h>

#include "bus-contract.h"
#include "daemon-util.h"
#include "host-check.h"
#include "log.h"
#include "manager.h"

static void log_host_finding(const HostFinding *f, void *userdata) {
        char f_setting[96], f_value[96], f_recommended[128];

        if (f->verdict == HOST_UNKNOWN) {
                if (f->error == -ENOENT)
                        log_debug("Host setting %s does not exist on this kernel, skipping.", f->setting);
                else
                        log_warning_errno(f->error, "Failed to read host setting %s, not checking it: %m",
                                          f->setting);
                return;
        }
        if (f->verdict != HOST_WEAK)
                return;
        (void) snprintf(f_setting, sizeof(f_setting), "SCOPEBOX_SYSCTL=%s", f->setting);
        (void) snprintf(f_value, sizeof(f_value), "SCOPEBOX_VALUE=%s", f->value);
        (void) snprintf(f_recommended, sizeof(f_recommended), "SCOPEBOX_RECOMMENDED=%s", f->recommended);
        log_struct(LOG_WARNING, 0, LOG_FIELDS(f_setting, f_value, f_recommended),
                   "Host setting %s is %s, recommended %s: %s.", f->setting, f->value, f->recommended,
                   f->risk);
}

int main(int argc, char *argv[]) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int r;

        r = daemon_setup_bus(argc, argv, "scopebox-session-manager",
                             "The session manager of scopebox (io.scopebox.SessionManager1).",
                             "by the system bus (scopebox-session-manager.service)",
                             &(const BusInterface) { SESSION_MANAGER_OBJECT_PATH, SESSION_MANAGER_INTERFACE,
                                                     manager_get_vtable() });
        if (r != 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        umask(0022);

        /* SIGCHLD, SIGTERM and SIGINT are blocked for sd-event by manager_new() (daemon_event_new()). */
        (void) signal(SIGPIPE, SIG_IGN);

        /* Weak kernel settings are logged, never fatal: the sandbox does not depend on them. */
        if (host_check_run(log_host_finding, NULL) == 0)
                log_debug("Host prerequisites met.");

        r = manager_new(&m);
        if (r < 0)
                goto finish;
        r = manager_startup(m, manager_dbus_attach);
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
