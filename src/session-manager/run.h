/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A run of the dify API: a fresh ephemeral session, one exec in the restrictive profile, released. */
#pragma once

#include <stdbool.h>

#include "manager.h"
#include "session.h"

/* Runs waiting for one of config.dify_max_workers slots, at most; more are refused (-EBUSY). */
#define RUN_QUEUE_MAX 1024U

typedef struct RunRequest {
        const char *language;    /* "python3" or "nodejs" */
        bool network;
        const char *trace_id;    /* for the journal: 32 hex digits, or NULL */
        const char *span_id;     /* 16 hex digits, or NULL */
        const char *user_id;
        const char *user_type;
} RunRequest;

/* result is NULL on error; it and its data fd are valid during the callback only. */
typedef void (*RunCallback)(int error, const char *message, const ExecResult *result, void *userdata);

typedef struct Run Run;

/* Queues a run of code_fd (taken over, also on failure). The callback runs exactly once, unless
 * this fails. *ret_run (optional) names the run for manager_cancel_run() until the callback has run;
 * it is set before the run may start (and so before a callback that comes at once). */
int manager_queue_run(Manager *m, int code_fd, const RunRequest *req, RunCallback cb, void *userdata,
                      Run **ret_run);

/* Its caller no longer wants the run; the callback gets -ECANCELED. Waiting for a worker: at once.
 * Starting: once its session's start is undone. Executing: once the runner has killed the exec as
 * its timeout would. Until then the run keeps its worker. Idempotent. */
void manager_cancel_run(Run *r);

/* Fails the runs that are still waiting (the manager is going away). */
void manager_runs_flush(Manager *m);
