/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager's counters for GetMetrics(): sessions, execs by outcome, kills by reason, the
 * exec duration histogram, archive bytes. Kept in memory; they start at zero with the manager. */
#pragma once

#include <errno.h>
#include <stdint.h>

typedef struct ExecResult ExecResult;

/* How an exec ended. */
typedef enum ExecOutcome {
        EXEC_OUTCOME_OK,        /* exit status 0 */
        EXEC_OUTCOME_ERROR,     /* another exit status */
        EXEC_OUTCOME_TIMEOUT,   /* killed at its timeout */
        EXEC_OUTCOME_KILLED,    /* killed by a signal (OOM killer, seccomp kill list, the code itself) */
        EXEC_OUTCOME_FAILED,    /* no result: the runner or the sandbox failed, the session went away */
        EXEC_OUTCOME_REJECTED,  /* never ran: the session or the exec slots stayed busy */
        EXEC_OUTCOME_CANCELLED, /* its caller hung up: dropped from its queue, or killed */
        _EXEC_OUTCOME_MAX,
        _EXEC_OUTCOME_INVALID = -EINVAL,
} ExecOutcome;

/* Why an exec was stopped; one per exec, the first that applies in this order. */
typedef enum KillReason {
        KILL_REASON_TIMEOUT,          /* its timeout */
        KILL_REASON_MEMORY,           /* SIGKILL while the OOM killer struck in the session's scope */
        KILL_REASON_BLOCKED_SYSCALL,  /* SIGSYS: a call of the seccomp kill list */
        KILL_REASON_TASKS,            /* a fork or thread refused at the tasks limit, and it failed */
        KILL_REASON_SIGNAL,           /* any other signal */
        _KILL_REASON_MAX,
        _KILL_REASON_INVALID = -EINVAL, /* not stopped */
} KillReason;

const char *exec_outcome_to_string(ExecOutcome o);
const char *kill_reason_to_string(KillReason r);

/* 'result' is NULL when the exec failed with 'error'. */
ExecOutcome exec_outcome_classify(int error, const ExecResult *result);
KillReason kill_reason_classify(const ExecResult *result);

/* Upper bounds (µs) of the exec duration histogram: 10 ms up to the default exec timeout cap. */
#define METRICS_EXEC_BUCKETS 15
extern const uint64_t metrics_exec_bucket_usec[METRICS_EXEC_BUCKETS];

typedef struct Metrics {
        uint64_t start_realtime_usec;

        uint64_t sessions_started;   /* sidecar sessions that became ready */
        uint64_t sessions_ended;     /* of them, gone again (any reason) */
        uint64_t sessions_reaped;    /* of them, ended by the idle TTL */
        uint64_t runs;               /* dify runs accepted */

        uint64_t execs[_EXEC_OUTCOME_MAX];
        uint64_t kills[_KILL_REASON_MAX];
        uint64_t exec_duration_buckets[METRICS_EXEC_BUCKETS]; /* per bucket, not cumulative */
        uint64_t exec_duration_count;  /* execs with a result (including those above the last bound) */
        uint64_t exec_duration_sum_usec;

        uint64_t archive_bytes_written;   /* committed workspace archives */
        uint64_t archive_bytes_restored;  /* archives unpacked into a new session */
        uint64_t archive_failures;        /* archive attempts that failed (each retry counts) */
        uint64_t archive_retries;         /* archive attempts after a failed one */
        /* archives that can never be stored (too large, storage refused) */
        uint64_t archives_skipped;
        uint64_t archives_abandoned;      /* archives given up: deadline, runner gone, superseded */
        uint64_t restore_failures;        /* creates whose archive could not be restored */
        uint64_t archives_quarantined;    /* of them, damaged archives moved aside (a quarantine key) */
} Metrics;

void metrics_init(Metrics *m);
/* Counts an exec's outcome, kill reason and (with a result) duration. */
void metrics_count_exec(Metrics *m, int error, const ExecResult *result);
/* Execs that took at most metrics_exec_bucket_usec[i]. */
uint64_t metrics_exec_cumulative(const Metrics *m, unsigned i);
