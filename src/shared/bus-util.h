/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* org.freedesktop.LogControl1, the idle exit of the bus-activated daemons and small sd-bus helpers;
 * the contract itself is bus-contract.h. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus-contract.h"
#include "macro.h"

/* Adds org.freedesktop.LogControl1 at /org/freedesktop/LogControl1 (log level and target). */
int bus_add_log_control(sd_bus *bus);

/* sd_bus_message_append() helper for an a{sv} entry, e.g. ("TasksMax", "t", 256). */
#define BUS_APPEND_PROPERTY(m, name, sig, ...)                                                  \
        sd_bus_message_append(m, "(sv)", name, sig, __VA_ARGS__)

/* The idle exit of a bus-activated daemon, the way systemd's own do it (bus_event_loop_with_idle()):
 * exiting while still owning the name would leave every call queued for us at that moment without an
 * answer. Instead the daemon tells systemd it is stopping (STOPPING=1: a call for the name from now
 * on starts the next instance once this one is gone, rather than finding this one "running"), gives
 * its well-known name back, and goes on serving until every call the bus routed to it before that has
 * been answered; only then does the event loop end.
 *
 * It ends once all of these hold: the bus daemon answered the ReleaseName (its answer comes after
 * every call it routed to us under the name, so those have all been read), no message waits to be
 * read, no call of ours waits for an answer (the bus's next reply deadline; every call we make has
 * one), and answered(userdata) says that the daemon owes no answer to a call it took (a session
 * being created, a transfer running). The daemon keeps serving meanwhile: a queued call is answered
 * in full, whatever it started. systemd's stop timeout is pushed out while that goes on
 * (EXTEND_TIMEOUT_USEC); after max_usec the loop ends anyway, and bus_idle_exit_gave_up() says so. */
typedef bool (*BusCallsAnswered)(void *userdata);
typedef struct BusIdleExit BusIdleExit;

/* How often systemd's stop timeout is pushed out, and by how much each time. */
#define BUS_IDLE_EXIT_EXTEND_INTERVAL_USEC (10U * USEC_PER_SEC)
#define BUS_IDLE_EXIT_EXTEND_USEC (30U * USEC_PER_SEC)

int bus_idle_exit_start(sd_event *e, sd_bus *bus, const char *name, uint64_t max_usec,
                        BusCallsAnswered answered, void *userdata, BusIdleExit **ret);
/* Whether the loop ended because max_usec passed with calls still unanswered. */
bool bus_idle_exit_gave_up(const BusIdleExit *x);
BusIdleExit *bus_idle_exit_free(BusIdleExit *x);
DEFINE_TRIVIAL_CLEANUP_FUNC(BusIdleExit *, bus_idle_exit_free);
