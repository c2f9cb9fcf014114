/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The kernel's limit event counters of the runner's own cgroup: how often the OOM killer struck and
 * how often a fork was refused at the tasks limit. An exec compares them before and after. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum CgroupEventKind {
        CGROUP_EVENT_OOM_KILL,  /* memory.events (v2) or memory.oom_control (v1): "oom_kill N" */
        CGROUP_EVENT_PIDS_MAX,  /* pids.events (v1 and v2): "max N" */
        _CGROUP_EVENT_MAX,
} CgroupEventKind;

typedef struct CgroupEvents {
        int fd[_CGROUP_EVENT_MAX];  /* -EBADF where the counter is not available */
} CgroupEvents;

#define CGROUP_EVENTS_NULL { .fd = { -EBADF, -EBADF } }

/* Opens the counters of the cgroup the calling process is in, as /proc/self/cgroup names it, below
 * 'root' (normally "/sys/fs/cgroup"): per controller the v1 hierarchy that has it, else the unified
 * one. Counters that can't be found stay unavailable; that is not an error. */
void cgroup_events_open(const char *root, CgroupEvents *ret);
void cgroup_events_close(CgroupEvents *e);
/* The current value of a counter; 0 when it is unavailable or unreadable. */
uint64_t cgroup_events_get(const CgroupEvents *e, CgroupEventKind kind);

/* For tests. The path of the cgroup holding 'controller' in the text of /proc/<pid>/cgroup, and the
 * directory of its hierarchy below the cgroup root ("memory" for v1, "" for the unified one).
 * -ENOENT when neither a v1 hierarchy nor the unified one is listed. */
int cgroup_path_for_controller(const char *proc_cgroup, const char *controller, char **ret_hierarchy,
                               char **ret_path);
/* The value of "key N" in a flat keyed file (memory.events, pids.events, memory.oom_control). */
int cgroup_keyed_value(const char *text, const char *key, uint64_t *ret);
