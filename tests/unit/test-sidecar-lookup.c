/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A dify run's sandbox is no sidecar session (issue 31, finding 2): every method of the manager's
 * bus API that names a session answers for a pooled sandbox, and for one serving a run, exactly
 * what it answers for an id nobody holds, and nothing reaches its runner. The manager's real
 * vtable is served on a socket pair; the runners are the far ends of socket pairs. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus-contract.h"
#include "fake-manager.h"
#include "macro.h"
#include "manager.h"
#include "session.h"
#include "tests.h"

typedef struct Fixture {
        Manager *manager;
        sd_bus *server, *client;
        Session *sidecar, *pooled, *serving;
        int sidecar_runner, pooled_runner, serving_runner; /* the runners' ends of the control sockets */
} Fixture;

/* A running session whose runner is the far end of a socket pair, returned in *ret_runner. */
static Session *running_session(Manager *m, bool ephemeral, bool pooled, int *ret_runner) {
        char id[SESSION_ID_LEN + 1];
        int pair[2];
        Session *s;

        ASSERT_TRUE(session_id_generate(id) >= 0);
        ASSERT_TRUE(session_new_with_id(m, id, &s) >= 0);
        s->ephemeral = ephemeral;
        s->pooled = pooled;
        manager_add_session(m, s);
        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) >= 0);
        s->control_fd = pair[0];
        s->state = SESSION_RUNNING;
        *ret_runner = pair[1];
        return s;
}

static void fixture_init(Fixture *f) {
        Manager *m = calloc(1, sizeof(Manager));

        ASSERT_TRUE(m);
        metrics_init(&m->metrics);
        m->config.max_concurrent_execs = 4;
        m->config.queue_timeout_sec = 10;
        m->config.max_code_bytes = 1 << 20;
        m->config.max_upload_bytes = 1 << 20;
        m->config.exec_timeout_cap_ms = 60000;
        ASSERT_TRUE(sd_event_new(&m->event) >= 0);
        *f = (Fixture) { .manager = m };
        f->sidecar = running_session(m, false, false, &f->sidecar_runner);
        f->pooled = running_session(m, true, true, &f->pooled_runner);
        f->serving = running_session(m, true, false, &f->serving_runner); /* taken by a run */
        fake_manager_connect(m->event, manager_get_vtable(), m, &f->server, &f->client);
}

static void fixture_done(Fixture *f) {
        sd_event *e = f->manager->event;

        manager_free(f->manager); /* answers what is still queued */
        for (unsigned i = 0; i < 10; i++)
                ASSERT_TRUE(sd_event_run(e, 0) >= 0);
        sd_bus_flush_close_unref(f->client);
        sd_bus_flush_close_unref(f->server);
        safe_close(f->sidecar_runner);
        safe_close(f->pooled_runner);
        safe_close(f->serving_runner);
}

static int sealed_memfd(const char *text) {
        int fd = memfd_create("payload", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        ASSERT_TRUE(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
        return fd;
}

static int on_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        *(sd_bus_message **) userdata = sd_bus_message_ref(reply);
        return 0;
}

/* Calls 'method' naming 'id' the way the gateway (or scopeboxctl) does; the reply. */
static sd_bus_message *call(Fixture *f, const char *method, const char *id) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        sd_bus_message *reply = NULL;
        _cleanup_close_ int fd = -EBADF;
        int pipe_fds[2] = { -EBADF, -EBADF };

        /* "StreamingExec": POST /exec with "stream", an Exec with the write end of a pipe. */
        ASSERT_TRUE(sd_bus_message_new_method_call(f->client, &m, NULL, SESSION_MANAGER_OBJECT_PATH,
                                                   SESSION_MANAGER_INTERFACE,
                                                   streq(method, "StreamingExec") ? "Exec" : method) >= 0);
        ASSERT_TRUE(sd_bus_message_append(m, "s", id) >= 0);
        if (streq(method, "ReleaseSession"))
                ASSERT_TRUE(sd_bus_message_append(m, "a{sv}", 0) >= 0);
        else if (streq(method, "Exec")) {
                fd = sealed_memfd("open('/workspace/requests.py', 'w').write('planted')\n");
                ASSERT_TRUE(sd_bus_message_append(m, "ha{sv}", fd, 0) >= 0);
        } else if (streq(method, "StreamingExec")) {
                ASSERT_TRUE(pipe2(pipe_fds, O_CLOEXEC) == 0);
                fd = sealed_memfd("print(1)\n");
                ASSERT_TRUE(sd_bus_message_append(m, "ha{sv}", fd, 1, "stream", "h", pipe_fds[1]) >= 0);
        } else if (streq(method, "WriteFile")) {
                fd = sealed_memfd("raise SystemExit('planted')\n");
                ASSERT_TRUE(sd_bus_message_append(m, "sh", "requests.py", fd) >= 0);
        } else if (streq(method, "ReadFile"))
                ASSERT_TRUE(sd_bus_message_append(m, "s", "requests.py") >= 0);

        ASSERT_TRUE(sd_bus_call_async(f->client, NULL, m, on_reply, &reply, 0) >= 0);
        for (unsigned i = 0; i < 200 && !reply; i++)
                ASSERT_TRUE(sd_event_run(f->manager->event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(reply);
        safe_close(pipe_fds[0]);
        safe_close(pipe_fds[1]);
        return reply;
}

/* Whatever a request to the runner would be, none came: the runner's end has nothing to read. */
static void assert_runner_untouched(int runner_fd) {
        char b;

        ASSERT_TRUE(recv(runner_fd, &b, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN);
}

static const char *const session_methods[] = {
        "WriteFile", "ReadFile", "ListFiles", "ResetInputs", "ResetKernel", "CancelExec", "Exec",
        "StreamingExec", "ReleaseSession", "GetSession",
};

static void test_run_sandboxes_answer_as_unknown_ids(void) {
        char unknown[SESSION_ID_LEN + 1];
        Fixture f;

        fixture_init(&f);
        ASSERT_TRUE(session_id_generate(unknown) >= 0);
        ASSERT_TRUE(!manager_find_session(f.manager, unknown));

        for (size_t i = 0; i < ELEMENTSOF(session_methods); i++) {
                const char *method = session_methods[i];
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *none = call(&f, method, unknown);
                const sd_bus_error *want = sd_bus_message_get_error(none);

                ASSERT_TRUE(want);
                ASSERT_STREQ(want->name, BUS_ERROR_NO_SUCH_SESSION);
                for (unsigned k = 0; k < 2; k++) {
                        Session *s = k == 0 ? f.pooled : f.serving;
                        _cleanup_(sd_bus_message_unrefp) sd_bus_message *r = call(&f, method, s->id);
                        const sd_bus_error *got = sd_bus_message_get_error(r);

                        /* The same name and the same words: nothing tells the ids apart. */
                        ASSERT_TRUE(got);
                        ASSERT_STREQ(got->name, want->name);
                        ASSERT_STREQ(got->message, want->message);
                }
        }
        /* Nothing reached their runners, and both are still there for their runs: a release of
         * their ids released nothing. */
        assert_runner_untouched(f.pooled_runner);
        assert_runner_untouched(f.serving_runner);
        ASSERT_TRUE(manager_find_session(f.manager, f.pooled->id) == f.pooled);
        ASSERT_TRUE(manager_find_session(f.manager, f.serving->id) == f.serving);
        ASSERT_EQ(f.pooled->state, SESSION_RUNNING);
        ASSERT_EQ(f.serving->state, SESSION_RUNNING);
        ASSERT_EQ(f.pooled->n_execs, 0);
        ASSERT_TRUE(f.pooled->pooled);
        fixture_done(&f);
}

/* The same calls on a sidecar session do reach it: what the test above checks can fail. */
static void test_sidecar_sessions_are_found(void) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *info = NULL, *cancel = NULL, *write = NULL;
        char b[4096];
        Fixture f;

        fixture_init(&f);
        info = call(&f, "GetSession", f.sidecar->id);
        ASSERT_TRUE(!sd_bus_message_is_method_error(info, NULL));
        cancel = call(&f, "CancelExec", f.sidecar->id);
        ASSERT_TRUE(sd_bus_message_is_method_error(cancel, BUS_ERROR_NOT_RUNNING));

        /* A write is queued to the runner (and answered once the manager goes). */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
                _cleanup_close_ int fd = sealed_memfd("x");

                ASSERT_TRUE(sd_bus_message_new_method_call(f.client, &m, NULL, SESSION_MANAGER_OBJECT_PATH,
                                                           SESSION_MANAGER_INTERFACE, "WriteFile") >= 0);
                ASSERT_TRUE(sd_bus_message_append(m, "ssh", f.sidecar->id, "requests.py", fd) >= 0);
                ASSERT_TRUE(sd_bus_call_async(f.client, NULL, m, on_reply, &write, 0) >= 0);
        }
        for (unsigned i = 0; i < 200 && recv(f.sidecar_runner, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK) < 0;
             i++)
                ASSERT_TRUE(sd_event_run(f.manager->event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(recv(f.sidecar_runner, b, sizeof(b), MSG_DONTWAIT) > 0);
        ASSERT_TRUE(!write); /* waits for the runner */
        fixture_done(&f);
}

/* The ids 'method' (ListSessions or ListRunSandboxes) lists, each with its "pooled" flag, as a
 * string "<id>:<0|1> ..." in the order given. */
static void list_ids(Fixture *f, const char *method, char *out, size_t size) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        size_t o = 0;
        int r;

        out[0] = 0;
        ASSERT_TRUE(sd_bus_message_new_method_call(f->client, &m, NULL, SESSION_MANAGER_OBJECT_PATH,
                                                   SESSION_MANAGER_INTERFACE, method) >= 0);
        ASSERT_TRUE(sd_bus_call_async(f->client, NULL, m, on_reply, &reply, 0) >= 0);
        for (unsigned i = 0; i < 200 && !reply; i++)
                ASSERT_TRUE(sd_event_run(f->manager->event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(reply && !sd_bus_message_is_method_error(reply, NULL));
        ASSERT_TRUE(sd_bus_message_enter_container(reply, 'a', "(sa{sv})") > 0);
        while ((r = sd_bus_message_enter_container(reply, 'r', "sa{sv}")) > 0) {
                const char *id, *key;
                int pooled = -1;

                ASSERT_TRUE(sd_bus_message_read(reply, "s", &id) > 0);
                ASSERT_TRUE(sd_bus_message_enter_container(reply, 'a', "{sv}") > 0);
                while (sd_bus_message_enter_container(reply, 'e', "sv") > 0) {
                        ASSERT_TRUE(sd_bus_message_read(reply, "s", &key) > 0);
                        if (streq(key, "pooled"))
                                ASSERT_TRUE(sd_bus_message_read(reply, "v", "b", &pooled) > 0);
                        else
                                ASSERT_TRUE(sd_bus_message_skip(reply, "v") >= 0);
                        ASSERT_TRUE(sd_bus_message_exit_container(reply) >= 0);
                }
                ASSERT_TRUE(sd_bus_message_exit_container(reply) >= 0);
                ASSERT_TRUE(sd_bus_message_exit_container(reply) >= 0);
                ASSERT_TRUE(pooled >= 0);
                o += (size_t) snprintf(out + o, size - o, "%s%s:%i", o ? " " : "", id, pooled);
                ASSERT_TRUE(o < size);
        }
        ASSERT_TRUE(r >= 0);
}

/* ListSessions names the sessions only; the run sandboxes (pooled, or serving a run) are the
 * operator's other list, ListRunSandboxes. */
static void test_lists_keep_sessions_and_run_sandboxes_apart(void) {
        char sessions[256], runs[256], want[256];
        Fixture f;

        fixture_init(&f);
        list_ids(&f, "ListSessions", sessions, sizeof(sessions));
        snprintf(want, sizeof(want), "%s:0", f.sidecar->id);
        ASSERT_STREQ(sessions, want);
        list_ids(&f, "ListRunSandboxes", runs, sizeof(runs));
        /* manager_add_session() puts the newest first. */
        snprintf(want, sizeof(want), "%s:0 %s:1", f.serving->id, f.pooled->id);
        ASSERT_STREQ(runs, want);
        fixture_done(&f);
}

int main(void) {
        RUN(test_run_sandboxes_answer_as_unknown_ids);
        RUN(test_lists_keep_sessions_and_run_sandboxes_apart);
        RUN(test_sidecar_sessions_are_found);
        return 0;
}
