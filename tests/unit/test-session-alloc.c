/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Allocation failures fail an operation, never change its meaning (issue 30, finding 8): every
 * allocation of the session manager's own code on the release, discard and take-over paths fails
 * in turn (the allocators are wrapped at link time, tests/meson.build), and no discard ever becomes
 * a store, no session is left STARTING. The storage agent is a stand-in on a private bus, the
 * runner one on a socket pair; both run on the manager's event loop. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus-contract.h"
#include "json-util.h"
#include "macro.h"
#include "manager.h"
#include "runner-protocol.h"
#include "session.h"
#include "tests.h"

/* ---- the allocators, failing on request ---- */

static long alloc_countdown = -1; /* allocations to let through before one fails; -1: none fails */
static bool alloc_failed; /* the one this run was to fail, failed */
static bool in_stand_ins; /* the stand-ins allocate for themselves: never failed */

static bool alloc_fails(void) {
        if (in_stand_ins || alloc_countdown < 0)
                return false;
        if (alloc_countdown-- > 0)
                return false;
        alloc_failed = true;
        errno = ENOMEM;
        return true;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
json_object *__real_json_object_new_object(void);
json_object *__real_json_object_new_string(const char *s);
json_object *__real_json_object_new_int64(int64_t i);
json_object *__real_json_object_new_int(int32_t i);
json_object *__real_json_object_new_boolean(json_bool b);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_asprintf(char **ret, const char *format, ...);
int __wrap___asprintf_chk(char **ret, int flag, const char *format, ...);
json_object *__wrap_json_object_new_object(void);
json_object *__wrap_json_object_new_string(const char *s);
json_object *__wrap_json_object_new_int64(int64_t i);
json_object *__wrap_json_object_new_int(int32_t i);
json_object *__wrap_json_object_new_boolean(json_bool b);

void *__wrap_malloc(size_t n) {
        return alloc_fails() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size) {
        return alloc_fails() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n) {
        return alloc_fails() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s) {
        return alloc_fails() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n) {
        return alloc_fails() ? NULL : __real_strndup(s, n);
}

static int alloc_vasprintf(char **ret, const char *format, va_list ap) {
        if (alloc_fails()) {
                *ret = NULL;
                return -1;
        }
        return vasprintf(ret, format, ap);
}

int __wrap_asprintf(char **ret, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = alloc_vasprintf(ret, format, ap);
        va_end(ap);
        return r;
}

/* What asprintf() becomes with _FORTIFY_SOURCE. */
int __wrap___asprintf_chk(char **ret, int flag, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = alloc_vasprintf(ret, format, ap);
        va_end(ap);
        return r;
}

json_object *__wrap_json_object_new_object(void) {
        return alloc_fails() ? NULL : __real_json_object_new_object();
}

json_object *__wrap_json_object_new_string(const char *s) {
        return alloc_fails() ? NULL : __real_json_object_new_string(s);
}

json_object *__wrap_json_object_new_int64(int64_t i) {
        return alloc_fails() ? NULL : __real_json_object_new_int64(i);
}

json_object *__wrap_json_object_new_int(int32_t i) {
        return alloc_fails() ? NULL : __real_json_object_new_int(i);
}

json_object *__wrap_json_object_new_boolean(json_bool b) {
        return alloc_fails() ? NULL : __real_json_object_new_boolean(b);
}

/* ---- the stand-ins ---- */

#define STEM "conversation_1"
#define OPS_MAX 64

typedef struct World {
        Manager *manager;
        sd_bus *agent_bus; /* the agent's end of the private bus */
        sd_bus_slot *agent_vtable;
        char runner_socket[108];
        sd_event_source *runner_listen, *runner_conn;
        int runner_listen_fd, runner_fd;
        char storage_dir[64];

        bool hold_begin; /* BeginArchive is answered only by agent_answer_begin() */
        sd_bus_message *held_begin;
        bool fail_begin; /* BeginArchive answers StorageFailed */
        char agent_calls[OPS_MAX][32]; /* the agent's methods, in the order called */
        unsigned n_agent_calls;
        char runner_ops[OPS_MAX][32]; /* the runner's requests, in order */
        unsigned n_runner_ops;
} World;

static bool called(char (*list)[32], unsigned n, const char *what) {
        for (unsigned i = 0; i < n; i++)
                if (streq(list[i], what))
                        return true;
        return false;
}

static bool agent_called(World *w, const char *method) {
        return called(w->agent_calls, w->n_agent_calls, method);
}

static bool runner_asked(World *w, const char *op) {
        return called(w->runner_ops, w->n_runner_ops, op);
}

static void record(char (*list)[32], unsigned *n, const char *what) {
        ASSERT_TRUE(*n < OPS_MAX);
        snprintf(list[(*n)++], 32, "%s", what);
}

static int agent_reply_begin(sd_bus_message *m) {
        int fd = memfd_create("archive", MFD_CLOEXEC), r;

        ASSERT_TRUE(fd >= 0);
        r = sd_bus_reply_method_return(m, "sh", "token-1", fd);
        close(fd);
        return r;
}

static int agent_method(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        World *w = userdata;
        const char *member = sd_bus_message_get_member(m);

        record(w->agent_calls, &w->n_agent_calls, member);
        if (streq(member, "BeginArchive")) {
                if (w->fail_begin)
                        return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED, "storage down");
                if (w->hold_begin) {
                        w->held_begin = sd_bus_message_ref(m);
                        return 1;
                }
                return agent_reply_begin(m);
        }
        if (streq(member, "CommitArchive"))
                return sd_bus_reply_method_return(m, "t", (uint64_t) 3);
        return sd_bus_reply_method_return(m, NULL);
}

static const sd_bus_vtable agent_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("BeginArchive", "ss", "sh", agent_method, 0),
        SD_BUS_METHOD("CommitArchive", "st", "t", agent_method, 0),
        SD_BUS_METHOD("AbortArchive", "s", "", agent_method, 0),
        SD_BUS_METHOD("DeleteArchive", "ss", "", agent_method, 0),
        SD_BUS_VTABLE_END,
};

static void agent_answer_begin(World *w) {
        ASSERT_TRUE(w->held_begin);
        in_stand_ins = true;
        ASSERT_TRUE(agent_reply_begin(w->held_begin) >= 0);
        in_stand_ins = false;
        w->held_begin = sd_bus_message_unref(w->held_begin);
}

static void runner_reply(World *w, bool ok, int error, const char *key, int64_t value) {
        _cleanup_json_ json_object *o = json_object_new_object();

        ASSERT_TRUE(o);
        ASSERT_EQ(json_add(o, "ok", json_object_new_boolean(ok)), 0);
        if (!ok)
                ASSERT_EQ(json_add(o, "errno", json_object_new_int(error)), 0);
        if (key)
                ASSERT_EQ(json_add(o, key, json_object_new_int64(value)), 0);
        ASSERT_EQ(runner_message_send(w->runner_fd, o, NULL, 0), 0);
}

static int on_runner_request(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        World *w = userdata;

        in_stand_ins = true;
        for (;;) {
                _cleanup_json_ json_object *req = NULL;
                int fds[RUNNER_MESSAGE_FDS_MAX];
                size_t n_fds = 0;
                json_object *v;
                const char *op;
                int r;

                r = runner_message_recv(fd, &req, fds, &n_fds);
                if (r == -EAGAIN)
                        break;
                if (r < 0) {
                        w->runner_conn = sd_event_source_disable_unref(w->runner_conn);
                        break;
                }
                op = json_object_object_get_ex(req, "op", &v) ? json_object_get_string(v) : "?";
                record(w->runner_ops, &w->n_runner_ops, op);
                if (streq(op, "ping")) {
                        _cleanup_json_ json_object *o = json_object_new_object();
                        ASSERT_EQ(json_add(o, "ok", json_object_new_boolean(true)), 0);
                        ASSERT_EQ(json_add(o, "initialized", json_object_new_boolean(true)), 0);
                        ASSERT_EQ(runner_message_send(fd, o, NULL, 0), 0);
                } else if (streq(op, "archive")) {
                        ASSERT_EQ(n_fds, 1U);
                        ASSERT_EQ(write(fds[0], "tgz", 3), 3);
                        runner_reply(w, true, 0, "bytes", 3);
                } else if (streq(op, "reset-inputs"))
                        runner_reply(w, true, 0, NULL, 0);
                else
                        runner_reply(w, false, EOPNOTSUPP, NULL, 0);
                for (size_t i = 0; i < n_fds; i++)
                        close(fds[i]);
        }
        in_stand_ins = false;
        return 0;
}

static int on_runner_connect(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        World *w = userdata;

        w->runner_fd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        ASSERT_TRUE(w->runner_fd >= 0);
        ASSERT_TRUE(sd_event_add_io(w->manager->event, &w->runner_conn, w->runner_fd, EPOLLIN,
                                    on_runner_request, w) >= 0);
        return 0;
}

/* The manager's and the agent's ends of a private bus, both on the manager's loop. */
static void world_bus(World *w) {
        sd_bus *client = NULL;
        sd_id128_t id;
        int pair[2];

        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) >= 0);
        ASSERT_TRUE(sd_id128_randomize(&id) >= 0);
        ASSERT_TRUE(sd_bus_new(&w->agent_bus) >= 0);
        ASSERT_TRUE(sd_bus_set_fd(w->agent_bus, pair[1], pair[1]) >= 0);
        ASSERT_TRUE(sd_bus_set_server(w->agent_bus, 1, id) >= 0);
        ASSERT_TRUE(sd_bus_set_anonymous(w->agent_bus, 1) >= 0);
        ASSERT_TRUE(sd_bus_negotiate_fds(w->agent_bus, 1) >= 0);
        ASSERT_TRUE(sd_bus_add_object_vtable(w->agent_bus, &w->agent_vtable, STORAGE_AGENT_OBJECT_PATH,
                                             STORAGE_AGENT_INTERFACE, agent_vtable, w) >= 0);
        ASSERT_TRUE(sd_bus_start(w->agent_bus) >= 0);
        ASSERT_TRUE(sd_bus_attach_event(w->agent_bus, w->manager->event, 0) >= 0);

        ASSERT_TRUE(sd_bus_new(&client) >= 0);
        ASSERT_TRUE(sd_bus_set_fd(client, pair[0], pair[0]) >= 0);
        ASSERT_TRUE(sd_bus_set_anonymous(client, 1) >= 0);
        ASSERT_TRUE(sd_bus_negotiate_fds(client, 1) >= 0);
        ASSERT_TRUE(sd_bus_start(client) >= 0);
        ASSERT_TRUE(sd_bus_attach_event(client, w->manager->event, 0) >= 0);
        w->manager->bus = client;
}

static World *world_new(void) {
        World *w = calloc(1, sizeof(World));
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Manager *m;

        ASSERT_TRUE(w);
        w->runner_fd = -EBADF;
        m = w->manager = calloc(1, sizeof(Manager));
        ASSERT_TRUE(m);
        metrics_init(&m->metrics);
        m->config.max_concurrent_execs = 1;
        m->config.queue_timeout_sec = 10;
        m->config.archive_timeout_sec = 10;
        m->config.archive_retry_deadline_sec = 3600;
        m->config.max_archive_bytes = 1 << 20;
        m->config.idle_ttl_sec = 600;
        snprintf(w->storage_dir, sizeof(w->storage_dir), "/tmp/test-session-alloc-XXXXXX");
        ASSERT_TRUE(mkdtemp(w->storage_dir));
        m->config.local_storage_dir = strdup(w->storage_dir);
        ASSERT_TRUE(m->config.local_storage_dir);
        ASSERT_TRUE(sd_event_new(&m->event) >= 0);
        world_bus(w);

        snprintf(w->runner_socket, sizeof(w->runner_socket), "%s/runner.sock", w->storage_dir);
        strcpy(sa.sun_path, w->runner_socket);
        w->runner_listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ASSERT_TRUE(w->runner_listen_fd >= 0);
        ASSERT_EQ(bind(w->runner_listen_fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ASSERT_EQ(listen(w->runner_listen_fd, 4), 0);
        ASSERT_TRUE(sd_event_add_io(m->event, &w->runner_listen, w->runner_listen_fd, EPOLLIN,
                                    on_runner_connect, w) >= 0);
        return w;
}

static void world_free(World *w) {
        w->held_begin = sd_bus_message_unref(w->held_begin);
        manager_free(w->manager);
        sd_bus_slot_unref(w->agent_vtable);
        sd_bus_flush_close_unref(w->agent_bus);
        sd_event_source_disable_unref(w->runner_conn);
        sd_event_source_disable_unref(w->runner_listen);
        safe_close(w->runner_fd);
        safe_close(w->runner_listen_fd);
        (void) unlink(w->runner_socket);
        (void) rmdir(w->storage_dir);
        free(w);
}

/* Runs the loop until 'cond' holds; fails after a few seconds without it. */
#define RUN_UNTIL(w, cond)                                                                                  \
        do {                                                                                                \
                for (unsigned _i = 0; _i < 500 && !(cond); _i++)                                            \
                        ASSERT_TRUE(sd_event_run((w)->manager->event, 10 * USEC_PER_MSEC) >= 0);            \
                ASSERT_TRUE(cond);                                                                          \
        } while (0)

/* A session of the archive STEM in local storage, running: recovered, as after a restart, onto
 * the stand-in runner. */
static Session *world_session(World *w) {
        char id[SESSION_ID_LEN + 1];
        Session *s;

        ASSERT_TRUE(session_id_generate(id) >= 0);
        ASSERT_TRUE(session_new_with_id(w->manager, id, &s) >= 0);
        s->idle_ttl_usec = 600 * USEC_PER_SEC;
        s->archive_key = strdup(STEM);
        s->storage_json = strdup("{\"provider\":\"local\",\"prefix\":\"t/\"}");
        free(s->socket_path);
        s->socket_path = strdup(w->runner_socket);
        ASSERT_TRUE(s->archive_key && s->storage_json && s->socket_path);
        manager_add_session(w->manager, s);
        ASSERT_EQ(session_recover(s), 0);
        RUN_UNTIL(w, w->n_runner_ops == 1 && !s->queue_head && !s->in_flight && s->control_fd >= 0);
        ASSERT_EQ(s->state, SESSION_RUNNING);
        return s;
}

typedef struct Heard {
        unsigned calls;
        int error;
        ArchiveOutcome outcome;
        SessionState state;
} Heard;

static void on_heard(Session *s, int error, const char *message, void *userdata) {
        Heard *h = userdata;

        h->calls++;
        h->error = error;
        h->outcome = s->archive.outcome;
        h->state = s->state;
}

static void alloc_arm(long n) {
        alloc_failed = false;
        alloc_countdown = n;
}

/* Whether allocation 'n' of the run was made (and failed): then there is a next one to fail. */
static bool alloc_disarm(void) {
        alloc_countdown = -1;
        return alloc_failed;
}

/* Runs the scenario once for each allocation it makes, failing that one (allocation n of run n),
 * until a run makes no more; returns the number of runs. */
static unsigned each_allocation(bool (*scenario)(World *w, long n)) {
        unsigned runs = 0;
        bool more;

        do {
                World *w = world_new();

                more = scenario(w, runs++);
                world_free(w);
        } while (more);
        return runs;
}

/* A release of the session, its BeginArchive held by the agent until agent_answer_begin(). */
static void release_held(World *w, Session *s, Heard *released) {
        w->hold_begin = true;
        ASSERT_EQ(session_release_full(s, SESSION_END_RELEASED, &(ReleaseOptions) { .archive = true },
                                       on_heard, released),
                  0);
        RUN_UNTIL(w, w->held_begin);
}

static int discard(Session *s, Heard *discarded) {
        return session_release_full(s, SESSION_END_DISCARDED,
                                    &(ReleaseOptions) { .discard = true, .archive_key = STEM }, on_heard,
                                    discarded);
}

/* A release with discard: whatever fails, the archive is never stored, and the session is either
 * gone with "discarded" or, the release refused, running as before. */
static bool discard_running(World *w, long n) {
        Session *s = world_session(w);
        Heard heard = { .outcome = _ARCHIVE_OUTCOME_INVALID };
        bool more;
        int r;

        alloc_arm(n);
        r = discard(s, &heard);
        if (r >= 0)
                RUN_UNTIL(w, heard.calls == 1);
        more = alloc_disarm();

        ASSERT_TRUE(!runner_asked(w, "archive"));
        ASSERT_TRUE(!agent_called(w, "BeginArchive") && !agent_called(w, "CommitArchive"));
        if (r < 0) {
                ASSERT_EQ(r, -ENOMEM);
                ASSERT_EQ(s->state, SESSION_RUNNING);
                ASSERT_EQ(heard.calls, 0U);
        } else {
                ASSERT_EQ(heard.error, 0);
                ASSERT_EQ(heard.outcome, ARCHIVE_OUTCOME_DISCARDED);
        }
        return more;
}

/* A discard while the release's archive attempt is under way (BeginArchive not answered yet):
 * either the discard is taken and nothing is stored (the attempt dropped, the archive deleted),
 * or it fails and the release stores as it would have. */
static bool discard_during_attempt(World *w, long n) {
        Session *s = world_session(w);
        Heard released = { .outcome = _ARCHIVE_OUTCOME_INVALID }, discarded = released;
        bool more;
        int r;

        release_held(w, s, &released);
        alloc_arm(n);
        r = discard(s, &discarded);
        agent_answer_begin(w);
        RUN_UNTIL(w, released.calls == 1 && (r < 0 || discarded.calls == 1));
        more = alloc_disarm();

        /* (The session is gone by now either way: freed.) */
        ASSERT_TRUE(session_state_is_ending(released.state));
        if (r < 0) {
                ASSERT_EQ(r, -ENOMEM);
                ASSERT_TRUE(!agent_called(w, "DeleteArchive"));
        } else {
                ASSERT_TRUE(!agent_called(w, "CommitArchive"));
                ASSERT_TRUE(!runner_asked(w, "archive"));
                ASSERT_TRUE(agent_called(w, "AbortArchive"));
                ASSERT_TRUE(agent_called(w, "DeleteArchive"));
                ASSERT_EQ(discarded.outcome, ARCHIVE_OUTCOME_DISCARDED);
        }
        return more;
}

/* A create takes over a session whose archive is pending: it ends up running (the create
 * answered), or the take-over is refused and the session stays pending; never half started. */
static bool adopt_pending(World *w, long n) {
        Session *s = world_session(w);
        Heard released = { .outcome = _ARCHIVE_OUTCOME_INVALID }, started = released;
        bool more;
        int r;

        w->fail_begin = true;
        ASSERT_EQ(session_release_full(s, SESSION_END_RELEASED, &(ReleaseOptions) { .archive = true },
                                       on_heard, &released),
                  0);
        RUN_UNTIL(w, released.calls == 1);
        ASSERT_EQ(released.outcome, ARCHIVE_OUTCOME_PENDING);
        ASSERT_TRUE(session_find_pending_archive(w->manager, STEM, s->storage_json) == s);

        alloc_arm(n);
        r = session_adopt(s, 600 * USEC_PER_SEC, on_heard, &started);
        if (r >= 0)
                RUN_UNTIL(w, started.calls == 1);
        more = alloc_disarm();

        if (r < 0) {
                ASSERT_EQ(s->state, SESSION_ARCHIVE_PENDING);
                ASSERT_TRUE(session_archive_pending(s));
        } else {
                ASSERT_EQ(started.error, 0);
                ASSERT_EQ(s->state, SESSION_RUNNING);
                ASSERT_TRUE(!session_archive_pending(s));
        }
        ASSERT_TRUE(!agent_called(w, "DeleteArchive"));
        return more;
}

/* A create takes over a session while its attempt is under way, then its client discards it: the
 * attempt is dropped, nothing is stored, the archive is deleted (or the discard fails and the
 * session runs on). */
static bool discard_adopted_during_attempt(World *w, long n) {
        Session *s = world_session(w);
        Heard released = { .outcome = _ARCHIVE_OUTCOME_INVALID }, started = released, discarded = released;
        bool more;
        int r;

        release_held(w, s, &released);
        ASSERT_EQ(session_adopt(s, 600 * USEC_PER_SEC, on_heard, &started), 0);
        /* Whoever released it hears "pending" at once. */
        ASSERT_EQ(released.calls, 1U);
        ASSERT_EQ(released.outcome, ARCHIVE_OUTCOME_PENDING);
        RUN_UNTIL(w, started.calls == 1);
        ASSERT_EQ(s->state, SESSION_RUNNING);
        ASSERT_TRUE(s->archive.orphaned);

        alloc_arm(n);
        r = discard(s, &discarded);
        agent_answer_begin(w);
        RUN_UNTIL(w, r < 0 ? !s->archive.orphaned : discarded.calls == 1);
        more = alloc_disarm();

        ASSERT_TRUE(!agent_called(w, "CommitArchive"));
        ASSERT_TRUE(!runner_asked(w, "archive"));
        if (r < 0) {
                ASSERT_EQ(r, -ENOMEM);
                ASSERT_EQ(s->state, SESSION_RUNNING);
        } else {
                ASSERT_TRUE(agent_called(w, "DeleteArchive"));
                ASSERT_EQ(discarded.outcome, ARCHIVE_OUTCOME_DISCARDED);
        }
        return more;
}

static void test_discard(void) {
        unsigned runs = each_allocation(discard_running);

        printf("# discard: %u runs\n", runs);
        ASSERT_TRUE(runs > 3);
}

static void test_discard_during_attempt(void) {
        unsigned runs = each_allocation(discard_during_attempt);

        printf("# discard during an attempt: %u runs\n", runs);
        ASSERT_TRUE(runs > 3);
}

static void test_adopt(void) {
        unsigned runs = each_allocation(adopt_pending);

        printf("# take-over: %u runs\n", runs);
        ASSERT_TRUE(runs > 3);
}

static void test_discard_after_adopt_during_attempt(void) {
        unsigned runs = each_allocation(discard_adopted_during_attempt);

        printf("# discard of a take-over during an attempt: %u runs\n", runs);
        ASSERT_TRUE(runs > 3);
}

/* Session records go to the state directory: a private, empty one here, never the host's. */
static bool isolate_state_dir(void) {
        if (access(SCOPEBOX_STATE_DIR, F_OK) < 0)
                return true; /* none to protect: records fail to save, which is logged */
        if (unshare(CLONE_NEWNS) < 0)
                return false;
        ASSERT_EQ(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
        ASSERT_EQ(mount("tmpfs", SCOPEBOX_STATE_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700"), 0);
        ASSERT_EQ(mkdir(SESSION_STATE_DIR, 0700), 0);
        return true;
}

int main(void) {
        if (!isolate_state_dir()) {
                printf("# skipping: %s exists and this user can't hide it\n", SCOPEBOX_STATE_DIR);
                return 77;
        }
        RUN(test_discard);
        RUN(test_discard_during_attempt);
        RUN(test_adopt);
        RUN(test_discard_after_adopt_during_attempt);
        return 0;
}
