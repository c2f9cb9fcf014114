/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The storage agent: bus service for object storage and archives; exits when idle. */
#pragma once

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "macro.h"

#define AGENT_IDLE_EXIT_USEC (30 * USEC_PER_SEC)

typedef struct Agent {
        sd_event *event;
        sd_bus *bus;
        sd_event_source *idle_source;
        unsigned n_jobs;
} Agent;

int agent_add_bus_objects(Agent *a);
/* Called on every call: pushes the idle exit further out. */
void agent_touch(Agent *a);
