/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager frees sessions from its GC queue, never inside a call chain that still uses
 * them, and reaps the runners of sessions that went before their runner did. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "macro.h"
#include "manager.h"
#include "session.h"
#include "tests.h"

/* No bus: every call to systemd fails at once, the "stop scope fails synchronously" case. */
static Manager *test_manager_new(void) {
        Manager *m = calloc(1, sizeof(Manager));

        ASSERT_TRUE(m);
        metrics_init(&m->metrics);
        m->config.max_concurrent_execs = 1;
        m->config.queue_timeout_sec = 10;
        ASSERT_TRUE(sd_event_new(&m->event) >= 0);
        return m;
}

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
        ASSERT_EQ(session_release(s, "run finished", NULL, NULL), 0);
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

        ASSERT_EQ(session_exec(s, code_fd, &(ExecParameters) { .timeout_ms = 1000 }, on_exec, &calls), 0);
        ASSERT_EQ(calls, 1);
        /* Gone for everyone at once, but not freed yet. */
        ASSERT_TRUE(!manager_find_session(m, id));
        ASSERT_EQ(m->n_sessions, 0);
        ASSERT_TRUE(m->session_gc_queue == s);
        ASSERT_TRUE(s->finalized);
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
        ASSERT_TRUE(s->finalized);
        c->calls++;
        /* Calls back into the session from its own end, and ends another one. */
        ASSERT_EQ(session_release(s, "again", NULL, NULL), 0);
        if (c->other) {
                ASSERT_EQ(session_release(TAKE_PTR(c->other), "from a callback", on_released, c), 0);
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

        ASSERT_EQ(session_release(s, "test", on_released, &c), 0);
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
        pid_t pid;

        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                if (linger)
                        pause();
                _exit(0);
        }
        s->runner_pid = pid;
        ASSERT_TRUE(sd_event_add_child(s->manager->event, &s->runner_child_source, pid, WEXITED, on_child, s) >= 0);
        return pid;
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
        return 0;
}
