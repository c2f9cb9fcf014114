/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The bus contract between the gateway, scopeboxctl, the session manager and the storage agent
 * (docs/dbus-api.md), defined once: the names, the error names and their errnos, the limits both
 * sides check, the exec result's parts and the values its strings may take. The reply decoder
 * (exec-reply.h) and the client helpers (bus-client.h) are built on it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

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

/* Error names; each has the errno of bus_errors[] (bus-contract.c), which a caller gets back
 * (sd_bus_error_get_errno()); a daemon's -errno becomes one of them (bus_error_name_from_errno())
 * but for those "set by name only" (the table's entries after BackendFailed). */
#define BUS_ERROR_NO_SUCH_SESSION "io.scopebox.Error.NoSuchSession"
#define BUS_ERROR_LIMIT_EXCEEDED  "io.scopebox.Error.LimitExceeded"
#define BUS_ERROR_BUSY            "io.scopebox.Error.Busy"
#define BUS_ERROR_INVALID_PATH    "io.scopebox.Error.InvalidPath"
#define BUS_ERROR_TOO_LARGE       "io.scopebox.Error.TooLarge"
#define BUS_ERROR_NOT_FOUND       "io.scopebox.Error.NotFound"
#define BUS_ERROR_STORAGE_FAILED  "io.scopebox.Error.StorageFailed"
#define BUS_ERROR_RESTORE_FAILED  "io.scopebox.Error.RestoreFailed"
/* The storage block is not in effect (no provider, or a provider without its settings). */
#define BUS_ERROR_STORAGE_NOT_CONFIGURED "io.scopebox.Error.StorageNotConfigured"
/* The storage block's endpoint is refused by the endpoint policy (an address of this host, an
 * internal range the operator did not allow): no retry of the same block can succeed. */
#define BUS_ERROR_STORAGE_REFUSED "io.scopebox.Error.StorageRefused"
/* The storage agent cannot tell whether an endpoint's address is this host's own (the route
 * lookup failed): it refuses to connect, and a retry may succeed. */
#define BUS_ERROR_POLICY_UNAVAILABLE "io.scopebox.Error.PolicyUnavailable"
/* An archive staging token the storage agent does not know (it restarted in between): a new
 * attempt stages anew. */
#define BUS_ERROR_UNKNOWN_TOKEN   "io.scopebox.Error.UnknownToken"
/* The stored archive can never be restored as it is: a corrupt stream, a checksum mismatch after a
 * fresh download, over the size/entry/path limits, hostile entries. */
#define BUS_ERROR_ARCHIVE_DAMAGED "io.scopebox.Error.ArchiveDamaged"
#define BUS_ERROR_BACKEND_FAILED  "io.scopebox.Error.BackendFailed"
/* The caller hung up (its "hangup" pipe lost its writer): the call was ended, not completed. */
#define BUS_ERROR_CANCELLED       "io.scopebox.Error.Cancelled"
/* CancelExec with nothing running. */
#define BUS_ERROR_NOT_RUNNING     "io.scopebox.Error.NotRunning"
/* CreateSession while the node drains (SetDraining): it takes no new sessions. */
#define BUS_ERROR_DRAINING        "io.scopebox.Error.Draining"
/* A call that needs a session's processes while it is paused (PauseSession), or a second pause. */
#define BUS_ERROR_PAUSED          "io.scopebox.Error.Paused"

/* The messages of errors that clients see word for word (the gateway passes them on as its
 * "detail", docs/api.md), each written once. */
#define BUS_MESSAGE_NO_SUCH_SESSION      "session not found or not running"
#define BUS_MESSAGE_SESSION_BUSY         "session is busy"
#define BUS_MESSAGE_SESSION_PAUSED       "session is paused"
#define BUS_MESSAGE_INVALID_SESSION_ID   "invalid session_id"
#define BUS_MESSAGE_UNSUPPORTED_LANGUAGE "unsupported language"
#define BUS_MESSAGE_STORAGE_TOO_LARGE    "storage is too large"
#define BUS_MESSAGE_FILE_NOT_FOUND       "file not found"
#define BUS_MESSAGE_FILE_TOO_LARGE       "file too large"
#define BUS_MESSAGE_WORKSPACE_FULL       "workspace is full"
#define BUS_MESSAGE_START_FAILED         "failed to start the session"

/* Maps our error names to errnos; registered once per process (bus_errors_register()). */
extern const sd_bus_error_map scopebox_bus_errors[];
int bus_errors_register(void);
/* The error name a daemon answers for -errno 'error': ours from the same table, InvalidArgs for
 * EINVAL, BackendFailed for anything else. Those after BackendFailed in the table are only ever set
 * by name. */
const char *bus_error_name_from_errno(int error);

/* Limits both sides check. */
#define BUS_EXEC_TIMEOUT_DEFAULT_MS 120000U   /* Exec "timeout_ms" 0 or absent */
#define BUS_EXEC_TIMEOUT_MIN_MS     1000U
#define BUS_OUTPUT_LIMIT_MAX        (64ULL << 20)
/* The largest storage block (JSON text) a method takes. A body may be 56 MiB (300 MiB for
 * /storage/put), a bus message must stay well below the bus's own limit (32 MiB for dbus-daemon,
 * which disconnects the sender of a larger one). */
#define BUS_STORAGE_JSON_MAX        (64U * 1024U)
/* The largest client record (CreateSession "record") a session keeps. */
#define BUS_SESSION_RECORD_MAX      (64U * 1024U)
/* Sanity bound on the artifacts a reply may list, whatever the manager's configuration says. */
#define BUS_EXEC_FILES_MAX          1000U
/* Sanity bound on the refused calls a reply may list (the runner reports at most 16). */
#define BUS_EXEC_BLOCKED_MAX        64U

/* An artifact of an Exec reply: "a(stt) files", its bytes at 'offset' in the data memfd. */
typedef struct ExecFile {
        const char *path;       /* relative to /workspace/outputs */
        uint64_t offset;
        uint64_t size;
} ExecFile;

/* A system call the sandbox refused during the exec ("blocked_syscalls", a(ssu)). */
typedef struct ExecBlocked {
        const char *name;
        const char *verdict;    /* the errno the code got: "EPERM", "ENOSYS", "ENOTTY", "EAFNOSUPPORT" */
        uint32_t count;
} ExecBlocked;

/* The "exit_reason" values of Exec and Run: exited, timeout, memory, tasks, blocked_syscall,
 * signal, cancelled. */
bool bus_exit_reason_is_valid(const char *s);
/* The "kernel" values of a stateful session's Exec: new, running, ended. */
bool bus_kernel_state_is_valid(const char *s);
