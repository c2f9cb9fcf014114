/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Asynchronous calls to systemd's manager API: transient scopes, stopping units, job tracking. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>

#include "macro.h"

typedef struct Manager Manager;
typedef struct SystemdJob SystemdJob;

/* Called once the job finished: result is systemd's job result ("done", "failed", "canceled",
 * ...) or NULL with error < 0 when the request itself failed. */
typedef void (*JobCallback)(Manager *m, const char *result, int error, const sd_bus_error *bus_error,
                            void *userdata);

typedef struct ScopeProperties {
        const char *description;
        const char *slice;
        pid_t pid;
        uint64_t memory_max;
        uint64_t tasks_max;
        uint64_t cpu_quota_percent;
        uint64_t runtime_max_usec; /* 0 = none */
        bool delegate;              /* Delegate=yes: the runner makes cgroups below the scope */
} ScopeProperties;

int systemd_subscribe(Manager *m);
/* Start a transient scope or stop a unit, and wait for the job. The caller owns the job it gets:
 * the callback runs once, when the job is over (it may free the job), unless the job is freed
 * first, which cancels the call or the wait. */
int systemd_start_scope(Manager *m, const char *unit, const ScopeProperties *p, JobCallback cb,
                        void *userdata, SystemdJob **ret);
int systemd_stop_unit(Manager *m, const char *unit, JobCallback cb, void *userdata, SystemdJob **ret);
SystemdJob *systemd_job_free(SystemdJob *j);
DEFINE_TRIVIAL_CLEANUP_FUNC(SystemdJob *, systemd_job_free);
/* Read systemd's Version property (async); the callback gets NULL on failure. */
typedef void (*VersionCallback)(Manager *m, const char *version, void *userdata);
int systemd_get_version(Manager *m, VersionCallback cb, void *userdata, sd_bus_slot **ret_slot);
