/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The storage agent: bus service for object storage and archives; exits when idle. */
#pragma once

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "backend-local.h"
#include "config.h"
#include "macro.h"

#define AGENT_IDLE_EXIT_USEC (30 * USEC_PER_SEC)

/* An archive being written by a runner, published on commit. */
typedef struct StagedArchive {
        struct StagedArchive *next;
        struct Agent *agent;
        char token[33];
        char *full_key;
        LocalStaged local;
        sd_event_source *expiry;      /* abandoned stagings are removed */
} StagedArchive;

typedef struct Agent {
        sd_event *event;
        sd_bus *bus;
        Config config;
        sd_event_source *idle_source;
        unsigned n_jobs;
        StagedArchive *staged;
} Agent;

void agent_done(Agent *a);

int agent_add_bus_objects(Agent *a);
/* Called on every call: pushes the idle exit further out. */
void agent_touch(Agent *a);
