/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The project's bus names, error names and the org.freedesktop.LogControl1 implementation. */
#pragma once

#include <stdbool.h>

#include <systemd/sd-bus.h>

#define SESSION_MANAGER_BUS_NAME "io.scopebox.SessionManager1"
#define SESSION_MANAGER_OBJECT_PATH "/io/scopebox/SessionManager1"
#define SESSION_MANAGER_INTERFACE "io.scopebox.SessionManager1"

#define STORAGE_AGENT_BUS_NAME "io.scopebox.StorageAgent1"
/* The gateway serves no bus API; it owns this name only so that systemctl service-log-level
 * reaches its org.freedesktop.LogControl1 (BusName= in its unit). */
#define GATEWAY_BUS_NAME "io.scopebox.Gateway1"
#define STORAGE_AGENT_OBJECT_PATH "/io/scopebox/StorageAgent1"
#define STORAGE_AGENT_INTERFACE "io.scopebox.StorageAgent1"

#define BUS_ERROR_NO_SUCH_SESSION "io.scopebox.Error.NoSuchSession"
#define BUS_ERROR_LIMIT_EXCEEDED  "io.scopebox.Error.LimitExceeded"
#define BUS_ERROR_BUSY            "io.scopebox.Error.Busy"
#define BUS_ERROR_INVALID_PATH    "io.scopebox.Error.InvalidPath"
#define BUS_ERROR_TOO_LARGE       "io.scopebox.Error.TooLarge"
#define BUS_ERROR_NOT_FOUND       "io.scopebox.Error.NotFound"
#define BUS_ERROR_STORAGE_FAILED  "io.scopebox.Error.StorageFailed"
#define BUS_ERROR_RESTORE_FAILED  "io.scopebox.Error.RestoreFailed"
#define BUS_ERROR_BACKEND_FAILED  "io.scopebox.Error.BackendFailed"
/* The caller hung up (its "hangup" pipe lost its writer): the call was ended, not completed. */
#define BUS_ERROR_CANCELLED       "io.scopebox.Error.Cancelled"
/* CreateSession while the node drains (SetDraining): it takes no new sessions. */
#define BUS_ERROR_NOT_RUNNING       "io.scopebox.Error.NotRunning"
#define BUS_ERROR_DRAINING        "io.scopebox.Error.Draining"

/* Maps our error names to errnos and back; registered once per process. */
extern const sd_bus_error_map scopebox_bus_errors[];
int bus_errors_register(void);

/* Adds org.freedesktop.LogControl1 at /org/freedesktop/LogControl1 (log level and target). */
int bus_add_log_control(sd_bus *bus);

/* sd_bus_message_append() helper for an a{sv} entry, e.g. ("TasksMax", "t", 256). */
#define BUS_APPEND_PROPERTY(m, name, sig, ...)                                                  \
        sd_bus_message_append(m, "(sv)", name, sig, __VA_ARGS__)

/* The "exit_reason" values of Exec and Run (docs/dbus-api.md): exited, timeout, memory, tasks,
 * blocked_syscall, signal, cancelled. */
bool bus_exit_reason_is_valid(const char *s);
