/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager's counters for GetMetrics(). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "macro.h"
#include "metrics.h"
#include "string-table.h"
#include "string-util.h"
#include "session.h"
#include "time-util.h"

static const char *const exec_outcome_table[_EXEC_OUTCOME_MAX] = {
        [EXEC_OUTCOME_OK] = "ok",
        [EXEC_OUTCOME_ERROR] = "error",
        [EXEC_OUTCOME_TIMEOUT] = "timeout",
        [EXEC_OUTCOME_KILLED] = "killed",
        [EXEC_OUTCOME_FAILED] = "failed",
        [EXEC_OUTCOME_REJECTED] = "rejected",
        [EXEC_OUTCOME_CANCELLED] = "cancelled",
};

static const char *const kill_reason_table[_KILL_REASON_MAX] = {
        [KILL_REASON_TIMEOUT] = "timeout",
        [KILL_REASON_MEMORY] = "memory",
        [KILL_REASON_BLOCKED_SYSCALL] = "blocked_syscall",
        [KILL_REASON_TASKS] = "tasks",
        [KILL_REASON_SIGNAL] = "signal",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(exec_outcome, ExecOutcome)
DEFINE_STRING_TABLE_LOOKUP_TO_STRING(kill_reason, KillReason)

const uint64_t metrics_exec_bucket_usec[METRICS_EXEC_BUCKETS] = {
        10 * USEC_PER_MSEC, 25 * USEC_PER_MSEC, 50 * USEC_PER_MSEC, 100 * USEC_PER_MSEC,
        250 * USEC_PER_MSEC, 500 * USEC_PER_MSEC, 1 * USEC_PER_SEC, 2500 * USEC_PER_MSEC,
        5 * USEC_PER_SEC, 10 * USEC_PER_SEC, 30 * USEC_PER_SEC, 60 * USEC_PER_SEC,
        120 * USEC_PER_SEC, 300 * USEC_PER_SEC, 600 * USEC_PER_SEC,
};

ExecOutcome exec_outcome_classify(int error, const ExecResult *result) {
        if (error == -ECANCELED)
                return EXEC_OUTCOME_CANCELLED;
        if (!result || error < 0)
                /* Waited too long for the session (EBUSY) or for a slot (EUSERS). */
                return error == -EBUSY || error == -EUSERS ? EXEC_OUTCOME_REJECTED : EXEC_OUTCOME_FAILED;
        if (result->exit_reason && streq(result->exit_reason, "cancelled"))
                return EXEC_OUTCOME_CANCELLED; /* CancelExec(): its caller got the result */
        if (result->timed_out)
                return EXEC_OUTCOME_TIMEOUT;
        if (result->signal != 0)
                return EXEC_OUTCOME_KILLED;
        return result->exit_code == 0 ? EXEC_OUTCOME_OK : EXEC_OUTCOME_ERROR;
}

KillReason kill_reason_classify(const ExecResult *result) {
        if (!result)
                return _KILL_REASON_INVALID;
        if (result->timed_out)
                return KILL_REASON_TIMEOUT;
        if (result->signal == SIGKILL && result->oom_killed)
                return KILL_REASON_MEMORY;
        if (result->signal == SIGSYS)
                return KILL_REASON_BLOCKED_SYSCALL;
        /* Refused forks don't kill: the code fails with EAGAIN, and counts here when it gave up. */
        if (result->pids_limited && (result->signal != 0 || result->exit_code != 0))
                return KILL_REASON_TASKS;
        if (result->signal != 0)
                return KILL_REASON_SIGNAL;
        return _KILL_REASON_INVALID;
}

void metrics_init(Metrics *m) {
        *m = (Metrics) { .start_realtime_usec = now_usec(CLOCK_REALTIME) };
}

void metrics_count_exec(Metrics *m, int error, const ExecResult *result) {
        KillReason reason;

        m->execs[exec_outcome_classify(error, result)]++;
        if (error < 0 || !result)
                return;

        reason = kill_reason_classify(result);
        if (reason >= 0)
                m->kills[reason]++;

        for (unsigned i = 0; i < METRICS_EXEC_BUCKETS; i++)
                if (result->duration_usec <= metrics_exec_bucket_usec[i]) {
                        m->exec_duration_buckets[i]++;
                        break;
                }
        m->exec_duration_count++;
        m->exec_duration_sum_usec += result->duration_usec;
}

uint64_t metrics_exec_cumulative(const Metrics *m, unsigned i) {
        uint64_t n = 0;

        for (unsigned j = 0; j <= i && j < METRICS_EXEC_BUCKETS; j++)
                n += m->exec_duration_buckets[j];
        return n;
}
