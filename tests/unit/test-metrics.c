/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager's exec classification (outcome, kill reason) and duration histogram; the runner's
 * reading of its cgroup's limit event counters. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>

#include "cgroup-events.h"
#include "macro.h"
#include "metrics.h"
#include "session.h"
#include "tests.h"

#define RESULT(...) &(ExecResult) { __VA_ARGS__ }

static void test_outcome(void) {
        ASSERT_EQ(exec_outcome_classify(0, RESULT(.exit_code = 0)), EXEC_OUTCOME_OK);
        ASSERT_EQ(exec_outcome_classify(0, RESULT(.exit_code = 1)), EXEC_OUTCOME_ERROR);
        ASSERT_EQ(exec_outcome_classify(0, RESULT(.exit_code = 124, .timed_out = true)),
                  EXEC_OUTCOME_TIMEOUT);
        ASSERT_EQ(exec_outcome_classify(0, RESULT(.exit_code = 137, .signal = SIGKILL)),
                  EXEC_OUTCOME_KILLED);
        ASSERT_EQ(exec_outcome_classify(-EHOSTDOWN, NULL), EXEC_OUTCOME_FAILED);
        ASSERT_EQ(exec_outcome_classify(-ENXIO, NULL), EXEC_OUTCOME_FAILED);
        ASSERT_EQ(exec_outcome_classify(-EBUSY, NULL), EXEC_OUTCOME_REJECTED);
        ASSERT_EQ(exec_outcome_classify(-EUSERS, NULL), EXEC_OUTCOME_REJECTED);
        ASSERT_EQ(exec_outcome_classify(-ECANCELED, NULL), EXEC_OUTCOME_CANCELLED);
        ASSERT_STREQ(exec_outcome_to_string(EXEC_OUTCOME_CANCELLED), "cancelled");
        for (int i = 0; i < _EXEC_OUTCOME_MAX; i++)
                ASSERT_TRUE(exec_outcome_to_string((ExecOutcome) i));
        ASSERT_TRUE(!exec_outcome_to_string(_EXEC_OUTCOME_MAX));
}

static void test_kill_reason(void) {
        ASSERT_EQ(kill_reason_classify(RESULT(.exit_code = 0)), _KILL_REASON_INVALID);
        ASSERT_EQ(kill_reason_classify(RESULT(.exit_code = 1)), _KILL_REASON_INVALID);
        ASSERT_EQ(kill_reason_classify(NULL), _KILL_REASON_INVALID);
        ASSERT_EQ(kill_reason_classify(RESULT(.timed_out = true, .oom_killed = true)), KILL_REASON_TIMEOUT);
        ASSERT_EQ(kill_reason_classify(RESULT(.signal = SIGKILL, .oom_killed = true)), KILL_REASON_MEMORY);
        /* The OOM killer took another process (a child); the exec died otherwise. */
        ASSERT_EQ(kill_reason_classify(RESULT(.signal = SIGSEGV, .oom_killed = true)), KILL_REASON_SIGNAL);
        ASSERT_EQ(kill_reason_classify(RESULT(.signal = SIGKILL)), KILL_REASON_SIGNAL);
        ASSERT_EQ(kill_reason_classify(RESULT(.signal = SIGSYS, .pids_limited = true)),
                  KILL_REASON_BLOCKED_SYSCALL);
        ASSERT_EQ(kill_reason_classify(RESULT(.exit_code = 1, .pids_limited = true)), KILL_REASON_TASKS);
        /* Hit the limit, coped with it: not stopped. */
        ASSERT_EQ(kill_reason_classify(RESULT(.exit_code = 0, .pids_limited = true)), _KILL_REASON_INVALID);
        ASSERT_EQ(kill_reason_classify(RESULT(.signal = SIGTERM)), KILL_REASON_SIGNAL);
        for (int i = 0; i < _KILL_REASON_MAX; i++)
                ASSERT_TRUE(kill_reason_to_string((KillReason) i));
}

static void test_histogram(void) {
        Metrics m;

        metrics_init(&m);
        ASSERT_TRUE(m.start_realtime_usec > 0);
        for (unsigned i = 1; i < METRICS_EXEC_BUCKETS; i++)
                ASSERT_TRUE(metrics_exec_bucket_usec[i] > metrics_exec_bucket_usec[i - 1]);

        metrics_count_exec(&m, 0, RESULT(.duration_usec = 10000));            /* on the first bound */
        metrics_count_exec(&m, 0, RESULT(.duration_usec = 10001, .exit_code = 2));
        metrics_count_exec(&m, 0, RESULT(.duration_usec = 3600 * USEC_PER_SEC, .timed_out = true));
        metrics_count_exec(&m, -EUSERS, NULL);                                  /* no duration */

        ASSERT_EQ(m.exec_duration_count, 3);
        ASSERT_EQ(m.exec_duration_sum_usec, 20001 + 3600 * USEC_PER_SEC);
        ASSERT_EQ(metrics_exec_cumulative(&m, 0), 1);
        ASSERT_EQ(metrics_exec_cumulative(&m, 1), 2);
        /* Above the last bound: only in +Inf, which is the count. */
        ASSERT_EQ(metrics_exec_cumulative(&m, METRICS_EXEC_BUCKETS - 1), 2);
        ASSERT_EQ(m.execs[EXEC_OUTCOME_OK], 1);
        ASSERT_EQ(m.execs[EXEC_OUTCOME_ERROR], 1);
        ASSERT_EQ(m.execs[EXEC_OUTCOME_TIMEOUT], 1);
        ASSERT_EQ(m.execs[EXEC_OUTCOME_REJECTED], 1);
        ASSERT_EQ(m.kills[KILL_REASON_TIMEOUT], 1);
}

static void assert_path(const char *proc_cgroup, const char *controller, const char *hierarchy,
                        const char *path) {
        _cleanup_free_ char *h = NULL, *p = NULL;

        ASSERT_EQ(cgroup_path_for_controller(proc_cgroup, controller, &h, &p), 0);
        ASSERT_STREQ(h, hierarchy);
        ASSERT_STREQ(p, path);
}

static void test_cgroup_paths(void) {
        /* Hybrid: the v1 hierarchy with the controller wins over the unified one. */
        static const char hybrid[] =
                "12:pids:/scopebox.slice/scopebox-runner-x.scope\n"
                "11:cpu,cpuacct:/scopebox.slice\n"
                "4:memory:/scopebox.slice/scopebox-runner-x.scope\n"
                "1:name=systemd:/scopebox.slice/scopebox-runner-x.scope\n"
                "0::/scopebox.slice/scopebox-runner-x.scope\n";
        static const char unified[] = "0::/scopebox.slice/scopebox-runner-y.scope\n";
        _cleanup_free_ char *h = NULL, *p = NULL;

        assert_path(hybrid, "memory", "memory", "/scopebox.slice/scopebox-runner-x.scope");
        assert_path(hybrid, "pids", "pids", "/scopebox.slice/scopebox-runner-x.scope");
        assert_path(hybrid, "cpuacct", "cpu,cpuacct", "/scopebox.slice");
        assert_path(unified, "memory", "", "/scopebox.slice/scopebox-runner-y.scope");
        /* "cpu" is not "cpuset"; no unified line to fall back to. */
        ASSERT_EQ(cgroup_path_for_controller("3:cpuset:/a\n", "cpu", &h, &p), -ENOENT);
        ASSERT_EQ(cgroup_path_for_controller("", "memory", &h, &p), -ENOENT);
}

static void test_cgroup_keyed(void) {
        uint64_t v = 0;

        ASSERT_EQ(cgroup_keyed_value("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill", &v), 0);
        ASSERT_EQ(v, 3);
        ASSERT_EQ(
                cgroup_keyed_value("low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n", "max", &v),
                0);
        ASSERT_EQ(v, 7);
        ASSERT_EQ(cgroup_keyed_value("max 12", "max", &v), 0);
        ASSERT_EQ(v, 12);
        ASSERT_EQ(cgroup_keyed_value("oom_kill_disable 0\n", "oom_kill", &v), -ENOENT);
        ASSERT_EQ(cgroup_keyed_value("max x\n", "max", &v), -EBADMSG);
}

int main(void) {
        RUN(test_cgroup_paths);
        RUN(test_cgroup_keyed);
        RUN(test_outcome);
        RUN(test_kill_reason);
        RUN(test_histogram);
        return 0;
}
