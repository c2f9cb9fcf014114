/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Talking to io.scopebox.SessionManager1 (docs/dbus-api.md): method calls and reply decoding. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "macro.h"

/* How long the gateway waits for the session manager. Creation and release may wait for a slot in
 * the queue (SANDBOX_QUEUE_TIMEOUT_SECONDS, 150 s) and archive or restore a workspace
 * (SANDBOX_ARCHIVE_TIMEOUT_S, 120 s). An exec waits for its own timeout plus the queue. */
#define BUS_TIMEOUT_HEALTH_USEC   (15U * USEC_PER_SEC)
#define BUS_TIMEOUT_SESSION_USEC  (330U * USEC_PER_SEC)
#define BUS_TIMEOUT_EXEC_SLACK_USEC (180U * USEC_PER_SEC)

/* A new method call on the session manager's object. */
int session_manager_new_call(sd_bus *bus, const char *member, sd_bus_message **ret);

/* One entry of an a{sv} the gateway understands. */
typedef struct BusDictField {
        const char *name;
        char type;        /* 'b' bool, 'u' uint32_t, 'i' int32_t, 't' uint64_t, 's' const char * */
        size_t offset;
} BusDictField;

/* Reads an a{sv} into the struct at 'base'. Unknown keys are skipped (the manager may grow new ones);
 * a known key with another type fails with -EBADMSG. Strings stay owned by the message. */
int bus_message_read_dict(sd_bus_message *m, const BusDictField fields[], void *base);
