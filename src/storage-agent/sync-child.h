/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fsync() in a forked child watched by sd-event: durable writes without blocking the agent's loop. */
#pragma once

#include <systemd/sd-event.h>

/* An fsync of a 200 MiB archive can take seconds; the agent has one loop and no threads, so the call
 * that waits for the disk runs in a child of its own, which only calls fsync() and _exit(). The fd is
 * shared with the child (same open file), so what it syncs is what the parent wrote. */
typedef struct SyncChild SyncChild;

/* error: 0 when fsync() succeeded, else its negative errno (-EIO when the child died otherwise). */
typedef void (*SyncChildCallback)(SyncChild *c, int error, void *userdata);

/* SIGCHLD must be blocked (sd_event_add_child_pidfd()). The child is held by its pidfd (pidref.h). */
int sync_child_start(sd_event *e, int fd, SyncChildCallback cb, void *userdata, SyncChild **ret);
/* Stops watching; a child still running finishes its fsync on its own (nothing to undo there). */
SyncChild *sync_child_free(SyncChild *c);
