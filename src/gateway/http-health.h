/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Node health as the session manager's GetHealth() reports it: GET /healthz and the agent check. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

typedef struct Server Server;

/* How long a healthy answer is reused. Load balancers and wrk alike probe far more often than
 * health changes; each fresh answer costs two bus round trips (the manager asks systemd). An
 * unhealthy answer is never reused: a failure shows at once, a recovery within this. */
#define HEALTH_CACHE_USEC (1 * USEC_PER_SEC)

/* The last healthy answer: what /healthz and the agent check report within HEALTH_CACHE_USEC. */
typedef struct HealthSnapshot {
        uint64_t usec;                 /* CLOCK_MONOTONIC when composed; 0: none yet */
        uint32_t sessions;             /* counted against SANDBOX_MAX_SESSIONS */
        uint32_t capacity;             /* SANDBOX_MAX_SESSIONS; 0: unlimited */
        bool draining;
} HealthSnapshot;

/* Whether the snapshot is recent enough to answer from. */
bool server_health_fresh(Server *s);
/* Reads a GetHealth() reply (or error): 1 healthy (the snapshot and /healthz's cached body are
 * updated), 0 unhealthy with *ret_reason (static or owned by 'reply'), negative on a malformed
 * reply. */
int server_health_update(Server *s, sd_bus_message *reply, const char **ret_reason);
/* A new GetHealth() call (it starts the bus-activated manager, as /healthz always has). */
int server_health_new_call(Server *s, sd_bus_message **ret);

/* The agent check's line for a healthy snapshot: "drain\n" or "ready up <P>%\n", P the free share of
 * the capacity, floor(100 * (capacity - sessions) / capacity) clamped to 0..100 (100 when
 * unlimited). */
void health_agent_line(const HealthSnapshot *h, char buf[static 16]);
#define HEALTH_AGENT_LINE_DOWN "down\n"
