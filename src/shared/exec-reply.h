/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Decoding the session manager's Exec() and Run() replies (bus-contract.h): artifacts, the info
 * dictionary, the data memfd. The gateway and scopeboxctl read the contract with this one decoder. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "bus-client.h"
#include "bus-contract.h"
#include "config.h"

/* A refused call of the reply (bus-contract.h's ExecBlocked), collected. */
typedef struct ExecBlockedList {
        ExecBlocked *items;
        size_t n;
} ExecBlockedList;

/* The "info" dictionary of the manager's Exec() and Run() replies (bus-client.h says how the list
 * is used), and its "blocked_syscalls" (an a(ssu)) in 'blocked'. Strings point into the message. */
#define EXEC_INFO_FIELDS(F, T)                                                                       \
        F(T, "timed_out",        b, timed_out)                                                       \
        F(T, "stdout_truncated", b, stdout_truncated)                                                \
        F(T, "stderr_truncated", b, stderr_truncated)                                                \
        F(T, "files_skipped",    u, files_skipped)                                                   \
        F(T, "duration_usec",    t, duration_usec)                                                   \
        F(T, "signal",           i, signal)                                                          \
        /* the OOM killer struck in the session's scope during the exec */                           \
        F(T, "oom_killed",       b, oom_killed)                                                      \
        /* the scope's tasks limit refused a process or thread */                                    \
        F(T, "pids_limited",     b, pids_limited)                                                    \
        /* NULL from a manager that does not say; else bus_exit_reason_is_valid() */                 \
        F(T, "exit_reason",      s, exit_reason)                                                     \
        /* a stateful cell's "new", "running" or "ended"; NULL otherwise */                          \
        F(T, "kernel",           s, kernel)                                                          \
        /* What the exec's processes used; EXEC_USAGE_UNKNOWN where the manager did not say. */      \
        F(T, "cpu_usec",         t, cpu_usec)                                                        \
        F(T, "max_rss_bytes",    t, max_rss_bytes)                                                   \
        F(T, "written_bytes",    t, written_bytes)                                                   \
        F(T, "processes",        t, processes)
typedef struct ExecInfo {
        EXEC_INFO_FIELDS(BUS_DICT_MEMBER, ExecInfo)
        ExecBlockedList blocked;
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
