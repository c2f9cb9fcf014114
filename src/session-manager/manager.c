/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager: owns the sessions, the bus connection and the event loop. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <systemd/sd-daemon.h>

#include "bus-util.h"
#include "fs-util.h"
#include "log.h"
#include "manager.h"
#include "runner-protocol.h"
#include "session.h"
#include "systemd-client.h"

int manager_new(Manager **ret) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_free_ char *config_error = NULL;
        int r;

        m = calloc(1, sizeof(Manager));
        if (!m)
                return -ENOMEM;

        r = config_load(&m->config, getenv("SCOPEBOX_CONFIG"), &config_error);
        if (r < 0)
                return log_error_errno(r, "Invalid configuration: %s", config_error ?: "out of memory");

        r = sd_event_default(&m->event);
        if (r < 0)
                return r;
        (void) sd_event_add_signal(m->event, NULL, SIGTERM, NULL, NULL);
        (void) sd_event_add_signal(m->event, NULL, SIGINT, NULL, NULL);
        (void) sd_event_set_watchdog(m->event, true);

        *ret = TAKE_PTR(m);
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        while (m->sessions)
                session_free(m->sessions);
        systemd_forget_job_waits(m, NULL);
        m->idle_exit_source = sd_event_source_disable_unref(m->idle_exit_source);
        sd_bus_flush_close_unref(m->bus);
        sd_event_unref(m->event);
        config_done(&m->config);
        free(m);
        return NULL;
}

Session *manager_find_session(Manager *m, const char *id) {
        for (Session *s = m->sessions; s; s = s->next)
                if (streq(s->id, id))
                        return s;
        return NULL;
}

void manager_add_session(Manager *m, Session *s) {
        s->next = m->sessions;
        m->sessions = s;
        m->n_sessions++;
        manager_state_changed(m);
}

void manager_remove_session(Manager *m, Session *s) {
        for (Session **p = &m->sessions; *p; p = &(*p)->next)
                if (*p == s) {
                        *p = s->next;
                        m->n_sessions--;
                        break;
                }
        s->next = NULL;
        manager_state_changed(m);
}

static int on_idle_exit(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        if (m->n_sessions > 0)
                return 0;
        log_info("No sessions for %llus, exiting.", (unsigned long long) (MANAGER_IDLE_EXIT_USEC / USEC_PER_SEC));
        return sd_event_exit(m->event, 0);
}

void manager_state_changed(Manager *m) {
        int r;

        (void) sd_notifyf(false, "STATUS=%u session%s, %u exec%s running", m->n_sessions,
                          m->n_sessions == 1 ? "" : "s", m->n_execs_running, m->n_execs_running == 1 ? "" : "s");
        manager_emit_properties_changed(m);

        if (m->n_sessions > 0) {
                if (m->idle_exit_source)
                        (void) sd_event_source_set_enabled(m->idle_exit_source, SD_EVENT_OFF);
                return;
        }
        if (m->idle_exit_source) {
                (void) sd_event_source_set_time_relative(m->idle_exit_source, MANAGER_IDLE_EXIT_USEC);
                (void) sd_event_source_set_enabled(m->idle_exit_source, SD_EVENT_ONESHOT);
                return;
        }
        r = sd_event_add_time_relative(m->event, &m->idle_exit_source, CLOCK_MONOTONIC, MANAGER_IDLE_EXIT_USEC,
                                       USEC_PER_SEC, on_idle_exit, m);
        if (r < 0)
                log_warning_errno(r, "Failed to arm the idle exit timer, ignoring: %m");
}

int manager_startup(Manager *m) {
        int r;

        r = mkdir_p(SCOPEBOX_SESSIONS_RUNTIME_DIR, 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", SCOPEBOX_SESSIONS_RUNTIME_DIR);

        r = bus_errors_register();
        if (r < 0)
                return log_error_errno(r, "Failed to register bus errors: %m");
        r = sd_bus_default_system(&m->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");
        r = sd_bus_attach_event(m->bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");

        r = manager_add_bus_objects(m);
        if (r < 0)
                return log_error_errno(r, "Failed to register bus objects: %m");
        r = bus_add_log_control(m->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to register LogControl1: %m");
        r = systemd_subscribe(m);
        if (r < 0)
                return log_error_errno(r, "Failed to subscribe to systemd's job signals: %m");

        /* Take the name last, so no call arrives before we can answer it. */
        r = sd_bus_request_name(m->bus, SESSION_MANAGER_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to acquire bus name %s: %m", SESSION_MANAGER_BUS_NAME);

        manager_state_changed(m);
        return 0;
}

int manager_run(Manager *m) {
        (void) sd_notify(false, "READY=1");
        log_info("scopebox session manager %s running.", PROJECT_VERSION);
        return sd_event_loop(m->event);
}
