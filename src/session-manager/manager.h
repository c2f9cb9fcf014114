/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager: owns the sessions, the bus connection and the event loop. */
#pragma once

#include <stdbool.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "macro.h"

typedef struct Session Session;

/* Exit after this long without sessions or calls (bus activation starts us again). */
#define MANAGER_IDLE_EXIT_USEC (60 * USEC_PER_SEC)
#define MANAGER_SLICE "scopebox.slice"

typedef struct Manager {
        sd_event *event;
        sd_bus *bus;
        Config config;

        Session *sessions;     /* linked list */
        unsigned n_sessions;
        unsigned n_execs_running;
        void *job_waits;       /* systemd-client.c's list */

        sd_event_source *idle_exit_source;
        uint64_t exec_counter;
} Manager;

int manager_new(Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

int manager_startup(Manager *m);
int manager_run(Manager *m);

Session *manager_find_session(Manager *m, const char *id);
void manager_add_session(Manager *m, Session *s);
void manager_remove_session(Manager *m, Session *s);

/* Re-evaluate STATUS=, property changes and the idle exit timer. */
void manager_state_changed(Manager *m);

int manager_add_bus_objects(Manager *m);
const sd_bus_vtable *manager_get_vtable(void);
void manager_emit_properties_changed(Manager *m);
