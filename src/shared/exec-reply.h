/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Decoding the session manager's Exec() and Run() replies (bus-contract.h): artifacts, the info
 * dictionary, the data memfd. The gateway and scopeboxctl read the contract with this one decoder. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "bus-contract.h"
#include "config.h"

/* A refused call of the reply (bus-contract.h's ExecBlocked), collected. */
typedef struct ExecBlockedList {
        ExecBlocked *items;
        size_t n;
} ExecBlockedList;

/* The "info" dictionary of the manager's Exec() and Run() replies. Strings point into the message. */
typedef struct ExecInfo {
        bool timed_out;
        bool stdout_truncated;
        bool stderr_truncated;
        uint32_t files_skipped;
        uint64_t duration_usec;
        int32_t signal;
        bool oom_killed;        /* the OOM killer struck in the session's scope during the exec */
        bool pids_limited;      /* the scope's tasks limit refused a process or thread */
        ExecBlockedList blocked;
        /* NULL from a manager that does not say; else bus_exit_reason_is_valid() */
        const char *exit_reason;
        const char *kernel;       /* a stateful cell's "new", "running" or "ended"; NULL otherwise */
        /* What the exec's processes used; EXEC_USAGE_UNKNOWN where the manager did not say. */
        uint64_t cpu_usec;
        uint64_t max_rss_bytes;
        uint64_t written_bytes;
        uint64_t processes;
} ExecInfo;

#define EXEC_USAGE_UNKNOWN UINT64_MAX

void exec_info_done(ExecInfo *info);
/* Reads the end both replies share: "a{sv} info, h data" (the fd stays owned by the message). */
int exec_reply_read_info(sd_bus_message *reply, ExecInfo *info, int *ret_fd);
/* Reads Exec()'s "a(stt) files" into a new array (paths point into the message); -EBADMSG past
 * BUS_EXEC_FILES_MAX. */
int exec_reply_read_files(sd_bus_message *reply, ExecFile **ret, size_t *ret_n);
/* The most an Exec() reply's data memfd may hold under 'config': both streams, the artifacts, and
 * room for the truncation notes. */
uint64_t exec_reply_data_max(const Config *config);
