/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager frees sessions from its GC queue, never inside a call chain that still uses
 * them, and reaps the runners of sessions that went before their runner did; execs and runs whose
 * callers hung up are cancelled and answered exactly once. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "macro.h"
#include "json-util.h"
#include "manager.h"
#include "run.h"
#include "runner-protocol.h"
#include "session.h"
#include "manager-fixture.h"
#include "tests.h"

static Session *test_session_new(Manager *m) {
        char id[SESSION_ID_LEN + 1];
        Session *s;

        ASSERT_TRUE(session_id_generate(id) >= 0);
        ASSERT_TRUE(session_new_with_id(m, id, &s) >= 0);
        manager_add_session(m, s);
        return s;
}

static void drain(Manager *m) {
        for (int i = 0; i < 10 && m->session_gc_queue; i++)
                ASSERT_TRUE(sd_event_run(m->event, 0) >= 0);
        ASSERT_TRUE(!m->session_gc_queue);
}

static void on_exec(Session *s, int error, const char *message, const ExecResult *result, void *userdata) {
        int *calls = userdata;

        ASSERT_EQ(error, -ENXIO);
        ASSERT_TRUE(!result);
        (*calls)++;
        /* What a run does when its exec answers: release the session, from inside its callback. */
        ASSERT_EQ(session_release(s, SESSION_END_RUN_FINISHED, NULL, NULL), 0);
}

/* Issue 13, finding 8: exec → dispatch fails → runner lost → stop fails → finalize, and then
 * session_exec's own tail still uses the session. */
static void test_exec_double_failure(void) {
        Manager *m = test_manager_new();
        Session *s = test_session_new(m);
        char id[SESSION_ID_LEN + 1];
        int pair[2], code_fd, calls = 0;

        strcpy(id, s->id);
        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) >= 0);
        close(pair[1]);  /* the runner is gone: sending fails */
        s->control_fd = pair[0];
        s->state = SESSION_RUNNING;
        code_fd = memfd_create("code", MFD_CLOEXEC);
        ASSERT_TRUE(code_fd >= 0);

        ASSERT_EQ(session_exec(s, code_fd, &(ExecParameters) { .timeout_ms = 1000, .output_limit = 4096 },
                               on_exec, &calls, NULL),
                  0);
        ASSERT_EQ(calls, 1);
        /* Gone for everyone at once, but not freed yet. */
        ASSERT_TRUE(!manager_find_session(m, id));
        ASSERT_EQ(m->n_sessions, 0);
        ASSERT_TRUE(m->session_gc_queue == s);
        ASSERT_EQ(s->state, SESSION_GONE);
        ASSERT_EQ(m->n_execs_running, 0);

        drain(m);
        ASSERT_EQ(calls, 1);
        manager_free(m);
}

typedef struct ReleaseCtx {
        Manager *manager;
        Session *other;
        int calls;
} ReleaseCtx;

static void on_released(Session *s, int error, const char *message, void *userdata) {
        ReleaseCtx *c = userdata;

        ASSERT_EQ(error, 0);
        ASSERT_EQ(s->state, SESSION_GONE);
        c->calls++;
        /* Calls back into the session from its own end, and ends another one. */
        ASSERT_EQ(session_release(s, SESSION_END_RELEASED, NULL, NULL), 0);
        if (c->other) {
                ASSERT_EQ(session_release(TAKE_PTR(c->other), SESSION_END_RELEASED, on_released, c), 0);
                ASSERT_TRUE(c->manager->session_gc_queue);
        }
}

static void test_release_from_callback(void) {
        Manager *m = test_manager_new();
        ReleaseCtx c = { .manager = m };
        Session *s = test_session_new(m);

        c.other = test_session_new(m);
        s->state = c.other->state = SESSION_RUNNING;
        ASSERT_EQ(m->n_sessions, 2);

        ASSERT_EQ(session_release(s, SESSION_END_RELEASED, on_released, &c), 0);
        /* Waiters hear from the event loop, not from inside the call that released it. */
        ASSERT_EQ(c.calls, 0);
        ASSERT_EQ(m->n_sessions, 1);
        ASSERT_TRUE(m->session_gc_queue == s);

        drain(m);
        ASSERT_EQ(c.calls, 2);
        ASSERT_EQ(m->n_sessions, 0);
        manager_free(m);
}

static int on_child(sd_event_source *source, const siginfo_t *si, void *userdata) {
        abort();  /* the session goes before its child exits */
}

/* A stand-in for the runner: a child the session watches as session_start() does. */
static pid_t session_fork_runner(Session *s, bool linger) {
        PidRef watch = PIDREF_NULL;
        int r;

        r = pidref_clone(0, &s->runner);
        ASSERT_TRUE(r >= 0);
        if (r == 0) {
                if (linger)
                        pause();
                _exit(0);
        }
        ASSERT_EQ(pidref_dup(&s->runner, &watch), 0);
        ASSERT_TRUE(sd_event_add_child_pidfd(s->manager->event, &s->runner_child_source, watch.fd, WEXITED,
                                             on_child, s) >= 0);
        ASSERT_TRUE(sd_event_source_set_child_pidfd_own(s->runner_child_source, true) >= 0);
        return s->runner.pid;
}

/* Issue 13, finding 6: a session freed before its runner's exit was seen leaves the manager to reap it. */
static void test_reap_after_free(void) {
        Manager *m = test_manager_new();
        Session *s = test_session_new(m);
        siginfo_t si = {};
        pid_t pid = session_fork_runner(s, false);

        /* The child is a zombie now, or soon: a waitid(WNOWAIT) sees it without reaping. */
        ASSERT_TRUE(waitid(P_PID, (id_t) pid, &si, WEXITED | WNOWAIT) >= 0);

        session_free(s);
        ASSERT_EQ(m->n_child_watches, 1);
        for (int i = 0; i < 50 && m->n_child_watches > 0; i++)
                ASSERT_TRUE(sd_event_run(m->event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_EQ(m->n_child_watches, 0);
        /* Reaped: no such child any more. */
        ASSERT_TRUE(waitid(P_PID, (id_t) pid, &si, WEXITED | WNOHANG) < 0 && errno == ECHILD);
        manager_free(m);
}

/* A manager that goes leaves runners running: their watches go, the processes stay. */
static void test_shutdown_keeps_children(void) {
        Manager *m = test_manager_new();
        Session *s = test_session_new(m);
        siginfo_t si = {};
        pid_t pid = session_fork_runner(s, true);

        manager_free(m);
        ASSERT_EQ(kill(pid, 0), 0);
        ASSERT_EQ(kill(pid, SIGKILL), 0);
        ASSERT_TRUE(waitid(P_PID, (id_t) pid, &si, WEXITED) >= 0);
}

static void on_cancelled(Session *s, int error, const char *message, const ExecResult *result,
                         void *userdata) {
        int *calls = userdata;

        ASSERT_EQ(error, -ECANCELED);
        ASSERT_TRUE(!result);
        (*calls)++;
}

static void on_enxio(Session *s, int error, const char *message, const ExecResult *result, void *userdata) {
        int *calls = userdata;

        ASSERT_EQ(error, -ENXIO);
        (*calls)++;
}

/* The next message the manager sent to the "runner": its op and exec id. */
static int runner_recv(int fd, char ret_op[static 16], char ret_id[static 32]) {
        _cleanup_json_ json_object *msg = NULL;
        int fds[RUNNER_MESSAGE_FDS_MAX];
        size_t n_fds = 0;
        json_object *v;
        int r;

        r = runner_message_recv(fd, &msg, fds, &n_fds);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n_fds; i++)
                close(fds[i]);
        ASSERT_TRUE(json_object_object_get_ex(msg, "op", &v));
        snprintf(ret_op, 16, "%s", json_object_get_string(v));
        ret_id[0] = 0;
        if (json_object_object_get_ex(msg, "exec_id", &v))
                snprintf(ret_id, 32, "%s", json_object_get_string(v));
        return 0;
}

static int test_code_fd(void) {
        int fd = memfd_create("code", MFD_CLOEXEC);

        ASSERT_TRUE(fd >= 0);
        return fd;
}

/* Issue 14, item 5: a queued exec leaves the queue at once; a running one is asked of the runner and
 * answered (Cancelled, once) whenever it ends; an old runner is not asked. */
static void test_exec_cancel(void) {
        Manager *m = test_manager_new();
        Session *s = test_session_new(m);
        ExecCall *first = NULL, *second = NULL, *third = NULL;
        ExecParameters p = { .timeout_ms = 1000, .output_limit = 4096 };
        char op[16], id[32], running_id[32];
        int pair[2], calls1 = 0, calls2 = 0, calls3 = 0;

        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) >= 0);
        s->control_fd = pair[0];
        s->state = SESSION_RUNNING;
        s->runner_cancels = true;

        ASSERT_EQ(session_exec(s, test_code_fd(), &p, on_cancelled, &calls1, &first), 0);
        ASSERT_TRUE(first && s->in_flight && m->n_execs_running == 1);
        ASSERT_EQ(runner_recv(pair[1], op, running_id), 0);
        ASSERT_STREQ(op, "exec");
        ASSERT_EQ(session_exec(s, test_code_fd(), &p, on_cancelled, &calls2, &second), 0);
        ASSERT_EQ(session_exec(s, test_code_fd(), &p, on_enxio, &calls3, &third), 0);
        ASSERT_EQ(s->n_queued, 2);

        /* Queued: answered now, the one behind it keeps its place. */
        session_exec_abandon(second);
        ASSERT_EQ(calls2, 1);
        ASSERT_EQ(s->n_queued, 1);
        ASSERT_TRUE(s->queue_head);
        ASSERT_EQ(m->metrics.execs[EXEC_OUTCOME_CANCELLED], 1);
        ASSERT_EQ(runner_recv(pair[1], op, id), -EAGAIN);

        /* Running: the runner is told which exec to end; the answer waits for the runner's. */
        session_exec_abandon(first);
        ASSERT_EQ(calls1, 0);
        ASSERT_EQ(runner_recv(pair[1], op, id), 0);
        ASSERT_STREQ(op, "cancel");
        ASSERT_STREQ(id, running_id);
        /* Twice is once. */
        session_exec_abandon(first);
        ASSERT_EQ(runner_recv(pair[1], op, id), -EAGAIN);

        /* However the exec ends (here: its session goes), its answer is Cancelled, once; the other
         * queued one hears the session is gone. */
        ASSERT_EQ(session_release(s, SESSION_END_RELEASED, NULL, NULL), 0);
        ASSERT_EQ(calls3, 1);
        drain(m);
        ASSERT_EQ(calls1, 1);
        ASSERT_EQ(calls2, 1);
        ASSERT_EQ(m->metrics.execs[EXEC_OUTCOME_CANCELLED], 2);
        ASSERT_EQ(m->n_execs_running, 0);
        close(pair[1]);
        manager_free(m);
}

/* A runner that predates "cancel" (recovered after an upgrade) is not sent one: it would answer it
 * as if it were the exec's answer. The exec runs to its end, then is answered Cancelled. */
static void test_exec_cancel_old_runner(void) {
        Manager *m = test_manager_new();
        Session *s = test_session_new(m);
        ExecParameters p = { .timeout_ms = 1000, .output_limit = 4096 };
        ExecCall *c = NULL;
        char op[16], id[32];
        int pair[2], calls = 0, other = 0;

        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) >= 0);
        s->control_fd = pair[0];
        s->state = SESSION_RUNNING;

        ASSERT_EQ(session_exec(s, test_code_fd(), &p, on_cancelled, &calls, &c), 0);
        ASSERT_EQ(runner_recv(pair[1], op, id), 0);
        session_exec_abandon(c);
        ASSERT_EQ(runner_recv(pair[1], op, id), -EAGAIN);
        ASSERT_EQ(calls, 0);

        /* A queued exec of another caller is untouched by it. */
        ASSERT_EQ(session_exec(s, test_code_fd(), &p, on_enxio, &other, NULL), 0);
        ASSERT_EQ(session_release(s, SESSION_END_RELEASED, NULL, NULL), 0);
        drain(m);
        ASSERT_EQ(calls, 1);
        ASSERT_EQ(other, 1);
        close(pair[1]);
        manager_free(m);
}

static void on_run(int error, const char *message, const ExecResult *result, void *userdata) {
        int *calls = userdata;

        ASSERT_EQ(error, -ECANCELED);
        ASSERT_TRUE(!result);
        (*calls)++;
}

/* Runs: one waiting for a worker goes at once; one whose session is starting is answered once the
 * start is undone, and gives its worker back only then. */
static void test_run_cancel(void) {
        Manager *m = test_manager_new();
        RunRequest req = { .language = "python3" };
        Run *waiting = NULL, *starting = NULL;
        int calls1 = 0, calls2 = 0;

        m->config.dify_max_workers = 1;
        m->config.max_concurrent_creates = 0;  /* the first run's session waits for a create slot */

        ASSERT_EQ(manager_queue_run(m, test_code_fd(), &req, on_run, &calls1, &starting), 0);
        ASSERT_EQ(manager_queue_run(m, test_code_fd(), &req, on_run, &calls2, &waiting), 0);
        ASSERT_TRUE(starting && waiting);
        ASSERT_EQ(m->n_runs_running, 1);
        ASSERT_EQ(m->n_runs_queued, 1);

        manager_cancel_run(waiting);
        ASSERT_EQ(calls2, 1);
        ASSERT_EQ(m->n_runs_queued, 0);
        ASSERT_EQ(m->n_runs_running, 1);
        ASSERT_EQ(m->metrics.execs[EXEC_OUTCOME_CANCELLED], 1);

        manager_cancel_run(starting);
        ASSERT_EQ(calls1, 1);
        manager_cancel_run(starting); /* answered already: nothing happens */
        ASSERT_EQ(calls1, 1);
        ASSERT_EQ(m->n_runs_running, 0);
        ASSERT_EQ(m->metrics.execs[EXEC_OUTCOME_CANCELLED], 2);
        for (int i = 0; i < 10; i++)
                ASSERT_TRUE(sd_event_run(m->event, 0) >= 0);
        ASSERT_EQ(m->n_sessions, 0);
        manager_free(m);
}

/* One word for each way a session ends, both ways; the phrases of earlier records still read. */
static void test_session_end_words(void) {
        for (SessionEnd e = 0; e < _SESSION_END_MAX; e++) {
                const char *w = session_end_to_string(e);

                ASSERT_TRUE(w);
                ASSERT_TRUE(!strpbrk(w, " \t"));
                ASSERT_EQ(session_end_from_string(w), e);
        }
        ASSERT_STREQ(session_end_to_string(SESSION_END_IDLE), "idle");
        ASSERT_TRUE(!session_end_to_string(_SESSION_END_MAX));
        ASSERT_TRUE(!session_end_to_string(_SESSION_END_INVALID));

        ASSERT_EQ(session_end_from_string("released by client"), SESSION_END_RELEASED);
        ASSERT_EQ(session_end_from_string("discarded by client"), SESSION_END_DISCARDED);
        ASSERT_EQ(session_end_from_string("idle timeout"), SESSION_END_IDLE);
        ASSERT_EQ(session_end_from_string("its creator hung up"), SESSION_END_HANGUP);

        ASSERT_EQ(session_end_from_string("IDLE"), _SESSION_END_INVALID);
        ASSERT_EQ(session_end_from_string(""), _SESSION_END_INVALID);
        ASSERT_EQ(session_end_from_string("idle "), _SESSION_END_INVALID);
        ASSERT_EQ(session_end_from_string(NULL), _SESSION_END_INVALID);
}

/* A release recorded as 'record' goes on, ending as 'end'. */
static void check_release_record(Manager *m, const char *record, SessionEnd end) {
        _cleanup_json_ json_object *o = json_tokener_parse(record);
        Session *s = test_session_new(m);

        ASSERT_TRUE(o);
        ASSERT_EQ(s->end, _SESSION_END_INVALID);
        ASSERT_EQ(session_load_state(s, o), 0);
        ASSERT_EQ(s->state, SESSION_ARCHIVE_PENDING);
        ASSERT_EQ(s->end, end);
        session_free(s);
}

/* The old phrase reads as its word; one we don't know loses only the word. */
static void test_session_end_record(void) {
        Manager *m = test_manager_new();

        check_release_record(m, "{\"releasing\":true,\"release_reason\":\"idle timeout\"}",
                             SESSION_END_IDLE);
        check_release_record(m, "{\"releasing\":true,\"release_reason\":\"hangup\"}", SESSION_END_HANGUP);
        check_release_record(m, "{\"releasing\":true,\"release_reason\":\"evicted by a later version\"}",
                             _SESSION_END_INVALID);
        check_release_record(m, "{\"releasing\":true,\"release_reason\":7}", _SESSION_END_INVALID);
        check_release_record(m, "{\"releasing\":true}", _SESSION_END_INVALID);
        manager_free(m);
}

int main(void) {
        sigset_t ss;

        /* sd-event watches children only with SIGCHLD blocked, as the manager has it. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ASSERT_TRUE(sigprocmask(SIG_BLOCK, &ss, NULL) >= 0);

        RUN(test_exec_double_failure);
        RUN(test_release_from_callback);
        RUN(test_reap_after_free);
        RUN(test_shutdown_keeps_children);
        RUN(test_exec_cancel);
        RUN(test_exec_cancel_old_runner);
        RUN(test_run_cancel);
        RUN(test_session_end_words);
        RUN(test_session_end_record);
        return 0;
}
