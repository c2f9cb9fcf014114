/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session: its runner in a transient scope, the control connection, the request queue, the TTL. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "message-ids.h"
#include "net-filter.h"
#include "manager.h"
#include "runner-protocol.h"
#include "session.h"
#include "signal-util.h"
#include "bus-util.h"
#include "storage-config.h"
#include "string-table.h"
#include "string-util.h"
#include "systemd-client.h"
#include "time-util.h"

#define RUNNER_SOCKET_NAME "runner.sock"
#define RUNNER_ROOT_NAME "root"

typedef void (*RunnerReplyCallback)(Session *s, int error, const char *message, json_object *reply, int fd,
                                    void *userdata);

struct RunnerRequest {
        LIST_FIELDS(RunnerRequest, queue);  /* in session->queue_head until sent */
        Session *session;
        sd_event_source *queue_timer;  /* how long it may wait for the session or a slot */
        json_object *message;
        int fd;                 /* sent with the message, owned */
        int fd2;                /* sent after it (an exec's stream), owned, or -EBADF */
        uint64_t timeout_usec;
        bool is_exec;
        RunnerReplyCallback callback;
        void *userdata;
};

typedef struct ReleaseWaiter {
        LIST_FIELDS(struct ReleaseWaiter, waiters);
        SessionDoneCallback callback;
        void *userdata;
} ReleaseWaiter;

static const char *const session_state_table[_SESSION_STATE_MAX] = {
        [SESSION_STARTING] = "starting",
        [SESSION_RUNNING] = "running",
        [SESSION_STOPPING] = "stopping",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(session_state, SessionState)

static const char *const session_end_table[_SESSION_END_MAX] = {
        [SESSION_END_RELEASED] = "released",
        [SESSION_END_DISCARDED] = "discarded",
        [SESSION_END_IDLE] = "idle",
        [SESSION_END_HANGUP] = "hangup",
        [SESSION_END_RUN_FINISHED] = "run-finished",
        [SESSION_END_RUN_CANCELLED] = "run-cancelled",
        [SESSION_END_START_FAILED] = "start-failed",
        [SESSION_END_RUNNER_LOST] = "runner-lost",
        [SESSION_END_UNRESPONSIVE] = "unresponsive",
        [SESSION_END_STALE] = "stale",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(session_end, SessionEnd)

/* What versions before the words recorded: the phrases of the releases that archive (only those
 * are recorded), read from a manager that may have been upgraded meanwhile. */
static const char *const session_end_old_table[_SESSION_END_MAX] = {
        [SESSION_END_RELEASED] = "released by client",
        [SESSION_END_DISCARDED] = "discarded by client",
        [SESSION_END_IDLE] = "idle timeout",
        [SESSION_END_HANGUP] = "its creator hung up",
};

SessionEnd session_end_from_string(const char *s) {
        ssize_t i = string_table_lookup(session_end_table, _SESSION_END_MAX, s);
        return (SessionEnd) (i >= 0 ? i : string_table_lookup(session_end_old_table, _SESSION_END_MAX, s));
}

static RunnerRequest *runner_request_free(RunnerRequest *q) {
        if (!q)
                return NULL;
        q->queue_timer = sd_event_source_disable_unref(q->queue_timer);
        json_object_put(q->message);
        safe_close(q->fd);
        safe_close(q->fd2);
        free(q);
        return NULL;
}

static int session_alloc(Manager *m, const char *id, Session **ret) {
        Session *s;

        s = calloc(1, sizeof(Session));
        if (!s)
                return -ENOMEM;
        *s = (Session) {
                .manager = m, .control_fd = -EBADF, .state = SESSION_STARTING, .end = _SESSION_END_INVALID
        };
        strcpy(s->id, id);
        if (asprintf(&s->unit, "scopebox-runner-%s.scope", s->id) < 0 ||
            asprintf(&s->runtime_dir, SCOPEBOX_SESSIONS_RUNTIME_DIR "/%s", s->id) < 0 ||
            asprintf(&s->socket_path, "%s/" RUNNER_SOCKET_NAME, s->runtime_dir) < 0 ||
            asprintf(&s->session_root, "%s/" RUNNER_ROOT_NAME, s->runtime_dir) < 0) {
                session_free(s);
                return -ENOMEM;
        }
        s->created_realtime_usec = s->last_active_realtime_usec = (uint64_t) time(NULL) * USEC_PER_SEC;
        *ret = s;
        return 0;
}

int session_new(Manager *m, Session **ret) {
        char id[SESSION_ID_LEN + 1];
        uid_t uid;
        int r;

        /* Ids are random; a collision with a live session is retried, not trusted away. */
        do {
                r = session_id_generate_tagged(m->config.node_id, id);
                if (r < 0)
                        return r;
        } while (manager_find_session(m, id));
        r = manager_allocate_uid(m, &uid);
        if (r < 0)
                return r;
        r = session_alloc(m, id, ret);
        if (r < 0)
                return r;
        (*ret)->uid = uid;
        return 0;
}

int session_new_with_id(Manager *m, const char *id, Session **ret) {
        if (!session_id_is_valid(id))
                return -EINVAL;
        if (manager_find_session(m, id))
                return -EEXIST;
        return session_alloc(m, id, ret);
}

/* ---- persistent state ---- */

static char *session_state_path(const Session *s) {
        char *p;
        return asprintf(&p, SESSION_STATE_DIR "/%s.json", s->id) < 0 ? NULL : p;
}

static int session_save_state(Session *s) {
        _cleanup_json_ json_object *o = NULL;
        _cleanup_free_ char *path = NULL, *tmp = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *text;
        int r, jr = 0;

        /* A run's session lives for one exec; a restarted manager stops it as unrecorded. */
        if (s->ephemeral)
                return 0;

        o = json_object_new_object();
        path = session_state_path(s);
        if (!o || !path || asprintf(&tmp, "%s.tmp", path) < 0)
                return -ENOMEM;
        json_add_checked(o, "id", json_object_new_string(s->id), &jr);
        json_add_checked(o, "idle_ttl_usec", json_object_new_int64((int64_t) s->idle_ttl_usec), &jr);
        json_add_checked(o, "uid", json_object_new_int64((int64_t) s->uid), &jr);
        json_add_checked(o, "created_realtime_usec",
                         json_object_new_int64((int64_t) s->created_realtime_usec), &jr);
        json_add_checked(o, "last_active_realtime_usec",
                         json_object_new_int64((int64_t) s->last_active_realtime_usec), &jr);
        if (s->archive_key)
                json_add_checked(o, "archive_key", json_object_new_string(s->archive_key), &jr);
        if (s->storage_json)
                json_add_checked(o, "storage", json_object_new_string(s->storage_json), &jr);
        /* (The word of earlier versions for "kept".) */
        if (s->archive_kept)
                json_add_checked(o, "restore_failed", json_object_new_boolean(true), &jr);
        if (s->stateful)
                json_add_checked(o, "stateful", json_object_new_boolean(true), &jr);
        if (s->releasing) {
                json_add_checked(o, "releasing", json_object_new_boolean(true), &jr);
                json_add_checked(o, "release_realtime_usec",
                                 json_object_new_int64((int64_t) s->release_realtime_usec), &jr);
                json_add_checked(o, "archive_attempts", json_object_new_int64((int64_t) s->archive_attempts),
                                 &jr);
                json_add_checked(o, "archive_first_failure_realtime_usec",
                                 json_object_new_int64((int64_t) s->archive_first_failure_realtime_usec),
                                 &jr);
                if (s->archive_error)
                        json_add_checked(o, "archive_error", json_object_new_string(s->archive_error), &jr);
                if (s->end >= 0)
                        json_add_checked(o, "release_reason",
                                         json_object_new_string(session_end_to_string(s->end)), &jr);
        }
        text = jr < 0 ? NULL : json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        if (!text)
                return -ENOMEM; /* never a record with a member missing */

        /* The storage block may carry credentials: root only. */
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        r = write_all(fd, text, strlen(text));
        if (r < 0 || fsync(fd) < 0 || rename(tmp, path) < 0) {
                r = r < 0 ? r : -errno;
                (void) unlink(tmp);
                return r;
        }
        s->state_saved_realtime_usec = (uint64_t) time(NULL) * USEC_PER_SEC;
        return 0;
}

static void session_remove_state(Session *s) {
        _cleanup_free_ char *path = session_state_path(s);
        if (path && unlink(path) < 0 && errno != ENOENT)
                log_struct(LOG_WARNING, errno, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to remove '%s': %m", path);
}

static void session_queue_remove(Session *s, RunnerRequest *q) {
        LIST_REMOVE(queue, s->queue_head, q);
        s->n_queued--;
}

/* The requests still queued hear 'error' now. */
static void session_fail_queued(Session *s, int error, const char *message) {
        RunnerRequest *q;

        while ((q = s->queue_head)) {
                session_queue_remove(s, q);
                q->callback(s, error, message, NULL, -EBADF, q->userdata);
                runner_request_free(q);
        }
}

static void session_fail_requests(Session *s, int error, const char *message) {
        RunnerRequest *q;

        /* Until nothing is left: a callback may queue a request of ours (restore → reset-inputs). */
        do {
                session_fail_queued(s, error, message);
                if ((q = TAKE_PTR(s->in_flight))) {
                        s->request_timer = sd_event_source_disable_unref(s->request_timer);
                        q->callback(s, error, message, NULL, -EBADF, q->userdata);
                        if (q->is_exec)
                                manager_release_exec_slot(s->manager);
                        runner_request_free(q);
                }
        } while (s->queue_head);
}

static void session_release_create_slot(Session *s);
static void session_release_tell(Session *s);

static bool session_calls_pending(const Session *s) {
        return s->start_job || s->stop_job || s->restore_slot || s->archive_slot;
}

/* SIGKILL for the session's runner, through a pidfd, never by its number (systemd's PidRef
 * rule): the child source's own, or one opened while the runner is still our unreaped child
 * (runner_pid is cleared when it is reaped or handed off, so the number is still its own). */
static void session_kill_runner(Session *s) {
        _cleanup_close_ int fd = -EBADF;

        if (s->runner_child_source) {
                (void) sd_event_source_send_child_signal(s->runner_child_source, SIGKILL, NULL, 0);
                return;
        }
        if (s->runner_pid <= 0)
                return;
        fd = (int) syscall(SYS_pidfd_open, s->runner_pid, 0);
        if (fd >= 0)
                (void) syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
}

/* The runner is our child until it exits: a session that goes first leaves the reaping to the
 * manager. The runner is not killed (its scope is, or it outlives us on purpose). */
static void session_hand_off_runner(Session *s) {
        int r;

        if (!s->runner_child_source)
                return;
        s->runner_child_source = sd_event_source_disable_unref(s->runner_child_source);
        if (s->runner_pid <= 0 || !s->manager)
                return;
        r = manager_watch_child(s->manager, s->runner_pid);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to watch runner %i of session %s, it may stay a zombie: %m",
                           (int) s->runner_pid, s->id);
        s->runner_pid = 0;
}

/* The end of a finalized session, from the manager's GC: its files go, its waiters hear. */
static void session_release_remains(Session *s) {
        int r;

        session_fail_requests(s, -ENXIO, "session not found or not running");
        session_remove_state(s);
        if (s->releasing) {
                /* Its runner went (killed, out of memory, unresponsive) while the archive waited. */
                s->manager->metrics.archives_abandoned++;
                s->archive_outcome = ARCHIVE_OUTCOME_ABANDONED;
                log_struct(
                        LOG_ERR, 0,
                        LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-abandoned",
                                   SCOPEBOX_MESSAGE_ARCHIVE_ABANDONED),
                        "Gave up archiving session %s after %u attempts: the session ended first (its "
                        "runner is "
                        "gone); last error: %s. Its workspace is lost.",
                        s->id, s->archive_attempts, strna(s->archive_error));
        }

        /* The workspace lived in the runner's mount namespace and is gone with it; what is left
         * here is the socket and an empty mount point. */
        r = rm_rf(s->runtime_dir);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to remove '%s', ignoring: %m", s->runtime_dir);

        if (s->start_callback) {
                SessionDoneCallback cb = TAKE_PTR(s->start_callback);
                cb(s, -EHOSTDOWN, "the session's runner failed to start", s->start_userdata);
        }
        session_release_tell(s);

        if (s->counted)
                s->manager->metrics.sessions_ended++;
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-released",
                              SCOPEBOX_MESSAGE_SESSION_RELEASED,
                              strjoina("SCOPEBOX_SESSION_END=", session_end_to_string(s->end))),
                   "Session %s released.", s->id);
}

static void session_unlink_gc(Session *s) {
        /* Still queued, not taken from the queue by manager_gc(). */
        if (LIST_CONTAINS(gc_queue, s->manager->session_gc_queue, s))
                LIST_REMOVE(gc_queue, s->manager->session_gc_queue, s);
}

Session *session_free(Session *s) {
        if (!s)
                return NULL;
        /* Whatever the callbacks below try on the session finds it stopping; it can't be queued
         * for GC a second time. */
        s->state = SESSION_STOPPING;
        s->in_gc_queue = true;
        if (s->manager) {
                session_unlink_gc(s);
                manager_remove_session(s->manager, s);
                manager_forget_exec_waiter(s->manager, s);
        }
        if (s->finalized && s->manager)
                session_release_remains(s);
        /* A session that ends while starting gives its create slot back (not at shutdown: no
         * create starts then). */
        if (s->holds_create_slot && s->manager && sd_event_get_state(s->manager->event) != SD_EVENT_FINISHED)
                session_release_create_slot(s);
        /* (Again after the callbacks there: whatever they queued.) */
        session_fail_requests(s, -ENXIO, "session not found or not running");

        /* Pending calls are cancelled: their callbacks never see this session again. */
        s->start_job = systemd_job_free(s->start_job);
        s->stop_job = systemd_job_free(s->stop_job);
        s->restore_slot = sd_bus_slot_unref(s->restore_slot);
        s->archive_slot = sd_bus_slot_unref(s->archive_slot);
        s->archive_retry_timer = sd_event_source_disable_unref(s->archive_retry_timer);
        s->restore_wait_timer = sd_event_source_disable_unref(s->restore_wait_timer);
        s->release_answer_timer = sd_event_source_disable_unref(s->release_answer_timer);

        session_hand_off_runner(s);
        s->control_source = sd_event_source_disable_unref(s->control_source);
        s->control_fd = safe_close(s->control_fd);
        s->request_timer = sd_event_source_disable_unref(s->request_timer);
        s->idle_timer = sd_event_source_disable_unref(s->idle_timer);
        for (ReleaseWaiter *w; (w = s->release_waiters);) {
                LIST_REMOVE(waiters, s->release_waiters, w);
                free(w);
        }
        free(s->unit);
        free(s->runtime_dir);
        free(s->socket_path);
        free(s->session_root);
        free(s->archive_key);
        free(s->storage_json);
        free(s->archive_token);
        free(s->restore_damage);
        free(s->archive_error);
        free(s->discard_stem);
        free(s);
        return NULL;
}

void session_add_to_gc_queue(Session *s) {
        Manager *m = s->manager;
        int r;

        if (s->in_gc_queue)
                return;
        manager_remove_session(m, s);
        manager_forget_exec_waiter(m, s);
        LIST_PREPEND(gc_queue, m->session_gc_queue, s);
        s->in_gc_queue = true;
        r = manager_arm_gc(m);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to schedule freeing session %s, it waits for the next: %m", s->id);
}

/* ---- teardown ---- */

/* The scope is gone and no call is left: the session is over. It leaves every lookup now and is
 * freed from the event loop, never here, since callers up the stack may still hold it. */
static void session_finalize(Session *s) {
        /* Only once the scope's stop was asked for; each outstanding call comes back here when it
         * is done. */
        if (s->finalized || !s->stop_requested || session_calls_pending(s))
                return;

        s->finalized = true;
        s->state = SESSION_STOPPING;
        s->idle_timer = sd_event_source_disable_unref(s->idle_timer);
        s->request_timer = sd_event_source_disable_unref(s->request_timer);
        s->control_source = sd_event_source_disable_unref(s->control_source);
        s->control_fd = safe_close(s->control_fd);
        session_add_to_gc_queue(s);
}

static void on_stop_job_done(Manager *m, const char *result, int error, const sd_bus_error *bus_error,
                             void *userdata) {
        Session *s = userdata;

        s->stop_job = systemd_job_free(s->stop_job);
        if (error < 0 &&
            !(bus_error && sd_bus_error_has_name(bus_error, "org.freedesktop.systemd1.NoSuchUnit")))
                log_struct(LOG_WARNING, error, LOG_FIELDS(LOG_SESSION_FIELD(s->id)), "Failed to stop %s: %s",
                           s->unit, bus_error && bus_error->message ? bus_error->message : strerror(-error));
        else if (result && !streq(result, "done"))
                log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Stopping %s finished with result '%s'.", s->unit, result);
        session_finalize(s);
}

/* From now on the session takes no calls: clients see it as gone at once. */
static void session_begin_stopping(Session *s) {
        s->state = SESSION_STOPPING;
        s->idle_timer = sd_event_source_disable_unref(s->idle_timer);
        /* Still waiting for a create slot: it never starts. Still fetching its archive: not waited
         * for (a stalled storage endpoint must not keep a released session counted). */
        manager_cancel_pending_create(s->manager, s);
        s->restore_slot = sd_bus_slot_unref(s->restore_slot);
        session_fail_queued(s, -ENXIO, "session not found or not running");
}

/* Why the session stops, or 'fallback' when nobody said (a record of an earlier version without it). */
static SessionEnd session_end_or(const Session *s, SessionEnd fallback) {
        return s->end >= 0 ? s->end : fallback;
}

/* Stop the scope (killing the runner and everything of the session) and then finalize. */
static void session_stop_scope(Session *s, SessionEnd end) {
        int r;

        if (s->stop_requested) {
                /* A call that ended after the stop was asked for: maybe the last one. */
                session_finalize(s);
                return;
        }
        s->stop_requested = true;
        s->end = end;
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id),
                              strjoina("SCOPEBOX_SESSION_END=", session_end_to_string(end))),
                   "Releasing session %s (%s).", s->id, session_end_to_string(end));

        r = systemd_stop_unit(s->manager, s->unit, on_stop_job_done, s, &s->stop_job);
        if (r < 0) {
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)), "Failed to stop %s: %m",
                           s->unit);
                session_kill_runner(s);
                /* Finalized at once; the session itself stays until the event loop frees it. */
                session_finalize(s);
                return;
        }
        manager_state_changed(s->manager);
}

static void session_teardown(Session *s, SessionEnd end) {
        session_begin_stopping(s);
        session_stop_scope(s, end);
}

static int session_add_release_waiter(Session *s, SessionDoneCallback cb, void *userdata) {
        ReleaseWaiter *w;

        if (!cb)
                return 0;
        w = calloc(1, sizeof(ReleaseWaiter));
        if (!w)
                return -ENOMEM;
        *w = (ReleaseWaiter) { .callback = cb, .userdata = userdata };
        LIST_PREPEND(waiters, s->release_waiters, w);
        return 0;
}

int session_release(Session *s, SessionEnd end, SessionDoneCallback cb, void *userdata) {
        int r = session_add_release_waiter(s, cb, userdata);
        if (r < 0)
                return r;
        if (s->state == SESSION_STOPPING)
                return 0; /* already on its way out; the waiter hears when it is gone */
        session_teardown(s, end);
        return 0;
}

/* ---- control connection ---- */

static int session_dispatch_next(Session *s);

static void session_complete_in_flight(Session *s, int error, const char *message, json_object *reply,
                                       int fd) {
        RunnerRequest *q = TAKE_PTR(s->in_flight);

        s->request_timer = sd_event_source_disable_unref(s->request_timer);
        if (!q)
                return;
        q->callback(s, error, message, reply, fd, q->userdata);
        if (q->is_exec)
                manager_release_exec_slot(s->manager);
        runner_request_free(q);
}

static void session_runner_lost(Session *s, const char *why) {
        if (s->state != SESSION_STOPPING)
                log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=runner-lost",
                                                      SCOPEBOX_MESSAGE_RUNNER_LOST),
                           "Runner of session %s is gone (%s); cleaning up.", s->id, why);
        s->control_source = sd_event_source_disable_unref(s->control_source);
        s->control_fd = safe_close(s->control_fd);
        session_complete_in_flight(s, -ENXIO, "session not found or not running", NULL, -EBADF);
        session_teardown(s, SESSION_END_RUNNER_LOST);
}

static int on_control(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Session *s = userdata;

        for (;;) {
                _cleanup_json_ json_object *reply = NULL;
                int fds[RUNNER_MESSAGE_FDS_MAX];
                size_t n_fds = 0;
                json_object *ok;
                int r;

                r = runner_message_recv(fd, &reply, fds, &n_fds);
                if (r == -EAGAIN)
                        break;
                if (r == -ENOMEM && s->in_flight) {
                        /* The answer is lost, not the runner: the request fails, the session goes on. */
                        session_complete_in_flight(s, r, "out of memory", NULL, -EBADF);
                        continue;
                }
                if (r < 0) {
                        session_runner_lost(s,
                                            r == -ECONNRESET ? "control connection closed" : "bad message");
                        return 0;
                }
                if (!s->in_flight) {
                        for (size_t i = 0; i < n_fds; i++)
                                safe_close(fds[i]);
                        session_runner_lost(s, "unexpected message from runner");
                        return 0;
                }
                if (json_object_object_get_ex(reply, "ok", &ok) && json_object_get_boolean(ok))
                        session_complete_in_flight(s, 0, NULL, reply, n_fds > 0 ? fds[0] : -EBADF);
                else {
                        json_object *e = NULL, *en = NULL;
                        int error;

                        (void) json_object_object_get_ex(reply, "error", &e);
                        (void) json_object_object_get_ex(reply, "errno", &en);
                        error = en ? json_object_get_int(en) : EIO;
                        if (error <= 0 || error > 4095)
                                error = EIO;
                        session_complete_in_flight(s, -error, e ? json_object_get_string(e) : "runner error",
                                                   NULL, -EBADF);
                }
                for (size_t i = 0; i < n_fds; i++)
                        safe_close(fds[i]);
                if (s->control_fd < 0)
                        return 0;
        }

        if (revents & (EPOLLHUP | EPOLLERR)) {
                session_runner_lost(s, "control connection closed");
                return 0;
        }
        (void) session_dispatch_next(s);
        return 0;
}

static int on_request_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        log_struct(LOG_ERR, ETIMEDOUT, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                   "Runner of session %s did not answer in time; tearing the session down.", s->id);
        session_complete_in_flight(s, -ETIMEDOUT, "the session's runner did not answer", NULL, -EBADF);
        session_teardown(s, SESSION_END_UNRESPONSIVE);
        return 0;
}

static int session_dispatch_next(Session *s) {
        RunnerRequest *q;
        int r;

        if (s->in_flight || !s->queue_head || s->control_fd < 0)
                return 0;

        /* Execs also need one of the global slots; without one the session waits its turn. */
        if (s->queue_head->is_exec && !manager_take_exec_slot(s->manager, s))
                return 0;

        q = s->queue_head;
        session_queue_remove(s, q);

        {
                int fds[2] = { q->fd, q->fd2 };
                size_t n = q->fd < 0 ? 0 : q->fd2 < 0 ? 1 : 2;

                r = runner_message_send(s->control_fd, q->message, n > 0 ? fds : NULL, n);
        }
        if (r < 0) {
                q->callback(s, -ENXIO, "session not found or not running", NULL, -EBADF, q->userdata);
                if (q->is_exec)
                        manager_release_exec_slot(s->manager);
                runner_request_free(q);
                session_runner_lost(s, "failed to send a request");
                return r;
        }
        q->fd = safe_close(q->fd);
        q->fd2 = safe_close(q->fd2);
        q->queue_timer = sd_event_source_disable_unref(q->queue_timer);
        s->in_flight = q;
        r = sd_event_add_time_relative(s->manager->event, &s->request_timer, CLOCK_MONOTONIC,
                                       q->timeout_usec, USEC_PER_SEC, on_request_timeout, s);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to arm request timeout, ignoring: %m");
        return 0;
}

/* Takes a request that is still queued out of the queue. Returns whether it waited for a global
 * exec slot: a request at the head of an idle session does; anything else waits for its session. */
static bool session_unqueue(Session *s, RunnerRequest *q) {
        bool waiting_for_slot = q == s->queue_head && !s->in_flight && q->is_exec;

        session_queue_remove(s, q);
        if (waiting_for_slot)
                manager_forget_exec_waiter(s->manager, s);
        return waiting_for_slot;
}

static int on_queue_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        RunnerRequest *q = userdata;
        Session *s = q->session;
        bool waiting_for_slot;

        waiting_for_slot = session_unqueue(s, q);

        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                   "A request for session %s waited too long for %s.", s->id,
                   waiting_for_slot ? "an exec slot" : "the session");
        if (waiting_for_slot)
                q->callback(s, -EUSERS, "exec queue is full", NULL, -EBADF, q->userdata);
        else
                q->callback(s, -EBUSY, "session is busy", NULL, -EBADF, q->userdata);
        runner_request_free(q);
        /* The next request may be able to go now. */
        (void) session_dispatch_next(s);
        return 0;
}

void session_kick(Session *s) {
        (void) session_dispatch_next(s);
}

/* Takes ownership of message and fd, also on failure. Fails only when nothing was queued; then
 * the callback is not called. *ret_request (optional) is set before the request may be sent, so
 * also when it is answered at once (and freed before this returns). */
static int session_enqueue_full(Session *s, json_object *message, int fd, int fd2, uint64_t timeout_usec,
                                bool is_exec, bool front, RunnerReplyCallback cb, void *userdata,
                                RunnerRequest **ret_request) {
        RunnerRequest *q;

        if (s->n_queued >= SESSION_QUEUE_MAX) {
                json_object_put(message);
                safe_close(fd);
                safe_close(fd2);
                return -EBUSY;
        }
        q = calloc(1, sizeof(RunnerRequest));
        if (!q) {
                json_object_put(message);
                safe_close(fd);
                safe_close(fd2);
                return -ENOMEM;
        }
        *q = (RunnerRequest) { .session = s,
                               .message = message,
                               .fd = fd,
                               .fd2 = fd2,
                               .timeout_usec = timeout_usec,
                               .is_exec = is_exec,
                               .callback = cb,
                               .userdata = userdata };
        /* Client calls wait at most the queue timeout; our own control requests go first. */
        if (!front && sd_event_add_time_relative(s->manager->event, &q->queue_timer, CLOCK_MONOTONIC,
                                                 s->manager->config.queue_timeout_sec * USEC_PER_SEC,
                                                 USEC_PER_MSEC * 100, on_queue_timeout, q) < 0) {
                runner_request_free(q);
                return -ENOMEM;
        }
        if (front)
                LIST_PREPEND(queue, s->queue_head, q);
        else
                LIST_APPEND(queue, s->queue_head, q);
        s->n_queued++;
        if (ret_request)
                *ret_request = q;
        /* From here on the callback reports the outcome, also a failure to send. */
        (void) session_dispatch_next(s);
        return 0;
}

static int session_enqueue(Session *s, json_object *message, int fd, uint64_t timeout_usec, bool is_exec,
                           bool front, RunnerReplyCallback cb, void *userdata) {
        return session_enqueue_full(s, message, fd, -EBADF, timeout_usec, is_exec, front, cb, userdata,
                                    NULL);
}

/* One of our own control requests that is only its op ("ping", "reset-inputs"), ahead of the
 * client's. Fails only when nothing was queued. */
static int session_enqueue_op(Session *s, const char *op, RunnerReplyCallback cb) {
        json_object *msg;
        int r;

        r = runner_request_op(op, &msg);
        if (r < 0)
                return r;
        return session_enqueue(s, msg, -EBADF, SESSION_CONTROL_TIMEOUT_USEC, false, true, cb, NULL);
}

/* ---- idle TTL ---- */

static int on_idle(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        if (s->in_flight || s->queue_head) {
                /* Busy sessions are not idle: look again after a full TTL. */
                session_touch(s);
                return 0;
        }
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-idle",
                              SCOPEBOX_MESSAGE_SESSION_REAPED),
                   "Session %s was idle for %llus.", s->id,
                   (unsigned long long) (s->idle_ttl_usec / USEC_PER_SEC));
        if (s->counted)
                s->manager->metrics.sessions_reaped++;
        (void) session_release_full(s, SESSION_END_IDLE, &(ReleaseOptions) { .archive = true }, NULL, NULL);
        return 0;
}

static void session_arm_idle(Session *s, uint64_t usec) {
        int r;

        if (s->idle_timer) {
                (void) sd_event_source_set_time_relative(s->idle_timer, usec);
                (void) sd_event_source_set_enabled(s->idle_timer, SD_EVENT_ONESHOT);
                return;
        }
        r = sd_event_add_time_relative(s->manager->event, &s->idle_timer, CLOCK_BOOTTIME, usec, USEC_PER_SEC,
                                       on_idle, s);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to arm the idle timer: %m");
}

void session_touch(Session *s) {
        uint64_t now = (uint64_t) time(NULL) * USEC_PER_SEC;

        if (s->state != SESSION_RUNNING || s->idle_ttl_usec == 0)
                return;
        session_arm_idle(s, s->idle_ttl_usec);
        s->last_active_realtime_usec = now;
        /* What a restarted manager uses to continue the TTL; a few seconds of slack are fine. */
        if (now >= s->state_saved_realtime_usec + SESSION_STATE_SAVE_INTERVAL_USEC)
                (void) session_save_state(s);
}

/* ---- start ---- */

/* The create slot bounds how many scopes and runners start at once, the local work. It is not
 * held while the storage agent fetches an archive: a slow or silent endpoint chosen by one client
 * must not keep everyone else's creates waiting. */
static void session_release_create_slot(Session *s) {
        if (!s->holds_create_slot)
                return;
        s->holds_create_slot = false;
        manager_create_finished(s->manager);
}

static void session_start_done(Session *s, int error, const char *message) {
        SessionDoneCallback cb = TAKE_PTR(s->start_callback);
        bool stopping = s->state == SESSION_STOPPING;

        /* Released while its last step ran (that step's failure is the release's doing): not
         * started, and already on its way out. */
        if (stopping && error >= 0) {
                error = -ENXIO;
                message = "session not found or not running";
        }
        session_release_create_slot(s);
        if (error >= 0) {
                int r;

                s->state = SESSION_RUNNING;
                session_touch(s);
                r = session_save_state(s);
                if (r < 0)
                        log_struct(
                                LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                "Failed to record session %s; it won't survive a restart of the manager: %m",
                                s->id);
                if (!s->ephemeral && !s->counted) {
                        s->manager->metrics.sessions_started++;
                        s->counted = true;
                }
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-created",
                                      SCOPEBOX_MESSAGE_SESSION_CREATED),
                           "Session %s started in %s.", s->id, s->unit);
                manager_state_changed(s->manager);
        }
        if (cb)
                cb(s, error, message, s->start_userdata);
        if (error < 0 && !stopping)
                session_teardown(s, SESSION_END_START_FAILED);
}

static void session_restore_then_ready(Session *s);
static void session_reset_inputs_then_ready(Session *s);

/* What the runner can do beyond the basics, from its answer to init or ping. A runner started by an
 * earlier version of ours (recovered after an upgrade) may know less. */
static void session_learn_runner(Session *s, json_object *reply) {
        json_object *v;

        s->runner_cancels = json_object_object_get_ex(reply, "cancel", &v) && json_object_get_boolean(v);
}

static void on_init_reply(Session *s, int error, const char *message, json_object *reply, int fd,
                          void *userdata) {
        if (error >= 0)
                session_learn_runner(s, reply);
        if (error < 0) {
                log_struct(LOG_ERR, error, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Runner of session %s failed to initialize: %s", s->id, strempty(message));
                session_start_done(s, -EHOSTDOWN, "failed to initialize the workspace");
                return;
        }
        session_restore_then_ready(s);
}

static int session_connect(Session *s) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int r;

        if (strlen(s->socket_path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, s->socket_path);

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -errno;
        r = sd_event_add_io(s->manager->event, &s->control_source, fd, EPOLLIN, on_control, s);
        if (r < 0)
                return r;
        s->control_fd = TAKE_FD(fd);
        return 0;
}

static void on_scope_started(Manager *m, const char *result, int error, const sd_bus_error *bus_error,
                             void *userdata) {
        Session *s = userdata;
        json_object *init;
        int r;

        s->start_job = systemd_job_free(s->start_job);
        if (s->state == SESSION_STOPPING) {
                /* A start the stop cancelled never put the runner into the scope: the stop can't
                 * take it along. */
                if (!streq_ptr(result, "done"))
                        session_kill_runner(s);
                session_finalize(s);
                return;
        }
        if (error < 0 || !streq_ptr(result, "done")) {
                log_struct(
                        LOG_ERR, error, LOG_FIELDS(LOG_SESSION_FIELD(s->id)), "Failed to start %s: %s",
                        s->unit,
                        error < 0 ? (bus_error && bus_error->message ? bus_error->message : strerror(-error))
                                  : strempty(result));
                session_kill_runner(s);
                session_start_done(s, -EHOSTDOWN, "failed to start the session's scope");
                return;
        }

        r = session_connect(s);
        if (r < 0) {
                log_struct(LOG_ERR, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to connect to the runner of %s: %m", s->id);
                session_start_done(s, -EHOSTDOWN, "failed to reach the session's runner");
                return;
        }

        r = runner_request_init(
                &(RunnerInitRequest) {
                        .uid = s->uid,
                        .gid = s->uid,
                        .workspace_size = m->config.workspace_size,
                        .tmp_size = m->config.tmp_size,
                        .cpus_percent = m->config.cpu_quota_percent,
                        .preload_modules = m->config.preload ? strempty(m->config.preload_modules) : NULL,
                        .idle_backstop_sec = (s->idle_ttl_usec + SESSION_BACKSTOP_SLACK_USEC) / USEC_PER_SEC,
                },
                &init);
        if (r < 0) {
                session_start_done(s, r, "out of memory");
                return;
        }
        r = session_enqueue(s, init, -EBADF, SESSION_CONTROL_TIMEOUT_USEC, false, true, on_init_reply, NULL);
        if (r < 0)
                session_start_done(s, -EHOSTDOWN, "failed to initialize the workspace");
}

static int on_runner_exit(sd_event_source *source, const siginfo_t *si, void *userdata) {
        Session *s = userdata;

        /* This only reaps our child. Failures surface where they matter: a runner that dies
         * before its scope starts fails StartTransientUnit, one that dies later closes the
         * control connection. */
        s->runner_child_source = sd_event_source_disable_unref(s->runner_child_source);
        s->runner_pid = 0;
        if (s->state != SESSION_STOPPING)
                log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Runner of session %s exited (code=%i status=%i).", s->id, si->si_code,
                           si->si_status);
        return 0;
}

static int create_listen_socket(const char *path) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        (void) unlink(path);
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -errno;
        if (chmod(path, 0600) < 0)
                return -errno;
        if (listen(fd, 4) < 0)
                return -errno;
        return TAKE_FD(fd);
}

static int spawn_runner(Session *s, int listen_fd, pid_t *ret_pid) {
        char arg_id[64], arg_root[PATH_MAX + 32], arg_level[64];
        const char *target = getenv("SCOPEBOX_LOG_TARGET");
        /* A dify run's runner gets the network filter's programs (net-filter.h), to attach them to
         * its slirp4netns's cgroup; without them its execs with a network fail. */
        NetFilter *filter = s->ephemeral ? manager_net_filter(s->manager) : NULL;
        pid_t pid;

        snprintf(arg_id, sizeof(arg_id), "--session-id=%s", s->id);
        snprintf(arg_root, sizeof(arg_root), "--session-root=%s", s->session_root);
        snprintf(arg_level, sizeof(arg_level), "SCOPEBOX_LOG_LEVEL=%s",
                 log_level_to_string(log_get_max_level()));

        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* Child: a clean process image with the control socket on fd 3 (and a run's the
                 * filter's programs after it) and nothing else of ours — no environment beyond
                 * what logging needs, no other fds. */
                char *argv[] = { (char *) "scopebox-runner", arg_id, arg_root,
                                 filter ? (char *) "--network-filter" : NULL, NULL };
                int moved[_NET_FILTER_PROGRAM_MAX];
                char *envp[] = {
                        (char *) "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                        (char *) "LANG=C.UTF-8",
                        arg_level,
                        (char *) (target && streq(target, "console") ? "SCOPEBOX_LOG_TARGET=console"
                                                                     : "SCOPEBOX_LOG_TARGET=journal"),
                        NULL,
                };
                int null_fd;

                (void) reset_all_signal_dispositions();

                /* Above the fds they go to first, so that no dup2() overwrites one still to move. */
                for (size_t i = 0; filter && i < ELEMENTSOF(moved); i++)
                        if ((moved[i] = fcntl(filter->programs[i], F_DUPFD_CLOEXEC,
                                              NET_FILTER_RUNNER_FD + _NET_FILTER_PROGRAM_MAX)) < 0)
                                _exit(EXIT_FAILURE);
                if (listen_fd == 3) {
                        if (fcntl(3, F_SETFD, 0) < 0)
                                _exit(EXIT_FAILURE);
                } else if (dup2(listen_fd, 3) < 0)
                        _exit(EXIT_FAILURE);
                for (size_t i = 0; filter && i < ELEMENTSOF(moved); i++)
                        if (dup2(moved[i], NET_FILTER_RUNNER_FD + (int) i) < 0)
                                _exit(EXIT_FAILURE);
                null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (null_fd >= 0 && null_fd != STDIN_FILENO)
                        (void) dup2(null_fd, STDIN_FILENO);
                (void) syscall(SYS_close_range, filter ? NET_FILTER_RUNNER_FD + _NET_FILTER_PROGRAM_MAX : 4U,
                               ~0U, 0U);

                execve(RUNNER_PATH, argv, envp);
                dprintf(STDERR_FILENO, "<3>Failed to execute %s: %s\n", RUNNER_PATH, strerror(errno));
                _exit(EXIT_FAILURE);
        }
        *ret_pid = pid;
        return 0;
}

int session_start(Session *s, SessionDoneCallback cb, void *userdata) {
        Manager *m = s->manager;
        _cleanup_close_ int listen_fd = -EBADF;
        pid_t pid;
        int r;

        assert(s->state == SESSION_STARTING);

        (void) rm_rf(s->runtime_dir);
        if (mkdir(s->runtime_dir, 0700) < 0 || mkdir(s->session_root, 0700) < 0)
                return log_struct(LOG_ERR, errno, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                  "Failed to create '%s': %m", s->runtime_dir);

        listen_fd = create_listen_socket(s->socket_path);
        if (listen_fd < 0) {
                (void) rm_rf(s->runtime_dir);
                return log_struct(LOG_ERR, listen_fd, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                  "Failed to create the runner socket '%s': %m", s->socket_path);
        }

        r = spawn_runner(s, listen_fd, &pid);
        if (r < 0) {
                (void) rm_rf(s->runtime_dir);
                return log_struct(LOG_ERR, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                  "Failed to spawn the runner: %m");
        }
        s->runner_pid = pid;
        r = sd_event_add_child(m->event, &s->runner_child_source, pid, WEXITED, on_runner_exit, s);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to watch the runner, ignoring: %m");

        ScopeProperties props = {
                .description = strjoina("scopebox runner of session ", s->id),
                .slice = MANAGER_SLICE,
                .pid = pid,
                .memory_max = m->config.memory_limit,
                .tasks_max = m->config.pids_limit,
                .cpu_quota_percent = m->config.cpu_quota_percent,
        };
        /* A run's network: its runner moves slirp4netns into a cgroup below the scope, with the
         * manager's filter attached there (runner-network.c); the payload's cgroup has none. */
        props.delegate = s->ephemeral;
        r = systemd_start_scope(m, s->unit, &props, on_scope_started, s, &s->start_job);
        if (r < 0) {
                /* Reaped once it is gone, by the watch above or, after the session, the manager. */
                session_kill_runner(s);
                (void) rm_rf(s->runtime_dir);
                return log_struct(LOG_ERR, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                  "Failed to request %s: %m", s->unit);
        }
        s->start_callback = cb;
        s->start_userdata = userdata;
        return 0;
}

/* ---- exec ---- */

struct ExecCall {
        Session *session;
        RunnerRequest *request;   /* ours until on_exec_reply() */
        char exec_id[32];
        bool interrupted;         /* CancelExec(): ended, its caller gets the result */
        bool cancelled;
        bool released;            /* stopped because its session is released */
        ExecCallback callback;
        void *userdata;
};

#define EXEC_CANCELLED_MESSAGE "cancelled: the caller hung up"

/* The sandbox's report of refused system calls; strings stay owned by the reply. */
static int exec_reply_parse_blocked(json_object *reply, ExecBlocked **ret, size_t *ret_n) {
        _cleanup_free_ ExecBlocked *blocked = NULL;
        json_object *arr;
        size_t n = 0;

        if (json_object_object_get_ex(reply, "blocked_syscalls", &arr)) {
                if (!json_object_is_type(arr, json_type_array))
                        return -EBADMSG;
                n = json_object_array_length(arr);
                blocked = calloc(n + 1, sizeof(ExecBlocked));
                if (!blocked)
                        return -ENOMEM;
                for (size_t i = 0; i < n; i++) {
                        json_object *c = json_object_array_get_idx(arr, i), *name, *verdict, *count;

                        if (!json_object_object_get_ex(c, "name", &name) ||
                            !json_object_is_type(name, json_type_string) ||
                            !json_object_object_get_ex(c, "verdict", &verdict) ||
                            !json_object_is_type(verdict, json_type_string) ||
                            !json_object_object_get_ex(c, "count", &count) ||
                            !json_object_is_type(count, json_type_int))
                                return -EBADMSG;
                        blocked[i] = (ExecBlocked) {
                                .name = json_object_get_string(name),
                                .verdict = json_object_get_string(verdict),
                                .count = (uint32_t) MIN(MAX(json_object_get_int64(count), 0),
                                                        (int64_t) UINT32_MAX),
                        };
                }
        }
        *ret = TAKE_PTR(blocked);
        *ret_n = n;
        return 0;
}

/* The runner's "resources": each figure optional, none negative. */
static int exec_reply_parse_usage(json_object *reply, ExecResult *res) {
        struct {
                int64_t cpu_usec, max_rss_bytes, written_bytes, processes;
        } u = { -1, -1, -1, -1 };
        static const JsonField fields[] = {
                { "cpu_usec", JSON_FIELD_INT64, offsetof(typeof(u), cpu_usec), 0 },
                { "max_rss_bytes", JSON_FIELD_INT64, offsetof(typeof(u), max_rss_bytes), 0 },
                { "written_bytes", JSON_FIELD_INT64, offsetof(typeof(u), written_bytes), 0 },
                { "processes", JSON_FIELD_INT64, offsetof(typeof(u), processes), 0 },
                {},
        };
        JsonDispatchError jerr;
        json_object *o;

        if (!json_object_object_get_ex(reply, "resources", &o))
                return 0;
        if (!json_object_is_type(o, json_type_object) || json_dispatch(o, fields, &u, &jerr) < 0 ||
            (u.cpu_usec < 0) != (u.max_rss_bytes < 0))
                return -EBADMSG;
        res->has_usage = u.cpu_usec >= 0;
        res->cpu_usec = (uint64_t) MAX(u.cpu_usec, 0);
        res->max_rss_bytes = (uint64_t) MAX(u.max_rss_bytes, 0);
        res->has_written = u.written_bytes >= 0;
        res->written_bytes = (uint64_t) MAX(u.written_bytes, 0);
        res->has_processes = u.processes >= 0;
        res->processes = (uint64_t) MAX(u.processes, 0);
        return 0;
}

static int exec_reply_parse(json_object *reply, int data_fd, ExecResult *ret, ExecFile **ret_files) {
        struct {
                int64_t exit_code, signal, duration_usec, stdout_size, stderr_size, files_skipped;
                bool timed_out, stdout_truncated, stderr_truncated, oom_killed, pids_limited;
                const char *exit_reason, *kernel;
                json_object *files;
        } p = {};
        ExecResult usage = {};
        _cleanup_free_ ExecFile *files = NULL;
        _cleanup_free_ ExecBlocked *blocked = NULL;
        size_t n_blocked = 0;
        JsonDispatchError jerr;
        json_object *farr = NULL;
        struct stat st;
        size_t n;
        int r;

        static const JsonField scalar_fields[] = {
                { "exit_code", JSON_FIELD_INT64, offsetof(typeof(p), exit_code), JSON_MANDATORY },
                { "signal", JSON_FIELD_INT64, offsetof(typeof(p), signal), 0 },
                { "duration_usec", JSON_FIELD_INT64, offsetof(typeof(p), duration_usec), 0 },
                { "stdout_size", JSON_FIELD_INT64, offsetof(typeof(p), stdout_size), JSON_MANDATORY },
                { "stderr_size", JSON_FIELD_INT64, offsetof(typeof(p), stderr_size), JSON_MANDATORY },
                { "files_skipped", JSON_FIELD_INT64, offsetof(typeof(p), files_skipped), 0 },
                { "timed_out", JSON_FIELD_BOOL, offsetof(typeof(p), timed_out), 0 },
                { "stdout_truncated", JSON_FIELD_BOOL, offsetof(typeof(p), stdout_truncated), 0 },
                { "stderr_truncated", JSON_FIELD_BOOL, offsetof(typeof(p), stderr_truncated), 0 },
                { "oom_killed", JSON_FIELD_BOOL, offsetof(typeof(p), oom_killed), 0 },
                { "pids_limited", JSON_FIELD_BOOL, offsetof(typeof(p), pids_limited), 0 },
                { "exit_reason", JSON_FIELD_STRING, offsetof(typeof(p), exit_reason), 0 },
                { "kernel", JSON_FIELD_STRING, offsetof(typeof(p), kernel), 0 },
                {},
        };

        if (data_fd < 0 || fstat(data_fd, &st) < 0)
                return -EBADMSG;
        r = json_dispatch(reply, scalar_fields, &p, &jerr);
        if (r < 0 || p.stdout_size < 0 || p.stderr_size < 0 || p.files_skipped < 0 ||
            (uint64_t) p.stdout_size + (uint64_t) p.stderr_size > (uint64_t) st.st_size)
                return -EBADMSG;
        if (!json_object_object_get_ex(reply, "files", &farr) || !json_object_is_type(farr, json_type_array))
                return -EBADMSG;
        if (p.exit_reason && !bus_exit_reason_is_valid(p.exit_reason))
                return -EBADMSG;
        if (p.kernel && !bus_kernel_state_is_valid(p.kernel))
                return -EBADMSG;
        r = exec_reply_parse_usage(reply, &usage);
        if (r < 0)
                return r;

        n = json_object_array_length(farr);
        files = calloc(n + 1, sizeof(ExecFile));
        if (!files)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *f = json_object_array_get_idx(farr, i), *v;
                int64_t off, size;

                if (!json_object_object_get_ex(f, "path", &v) || !json_object_is_type(v, json_type_string))
                        return -EBADMSG;
                files[i].path = json_object_get_string(v);
                if (!json_object_object_get_ex(f, "offset", &v) || !json_object_is_type(v, json_type_int))
                        return -EBADMSG;
                off = json_object_get_int64(v);
                if (!json_object_object_get_ex(f, "size", &v) || !json_object_is_type(v, json_type_int))
                        return -EBADMSG;
                size = json_object_get_int64(v);
                if (off < 0 || size < 0 || (uint64_t) off + (uint64_t) size > (uint64_t) st.st_size)
                        return -EBADMSG;
                files[i].offset = (uint64_t) off;
                files[i].size = (uint64_t) size;
        }

        r = exec_reply_parse_blocked(reply, &blocked, &n_blocked);
        if (r < 0)
                return r;

        *ret = (ExecResult) {
                .exit_code = (int) p.exit_code,
                .signal = (int) p.signal,
                .timed_out = p.timed_out,
                .oom_killed = p.oom_killed,
                .pids_limited = p.pids_limited,
                .duration_usec = (uint64_t) MAX(p.duration_usec, 0),
                .stdout_size = (uint64_t) p.stdout_size,
                .stderr_size = (uint64_t) p.stderr_size,
                .stdout_truncated = p.stdout_truncated,
                .stderr_truncated = p.stderr_truncated,
                .files = files,
                .n_files = n,
                .files_skipped = (uint64_t) p.files_skipped,
                .blocked = TAKE_PTR(blocked),
                .n_blocked = n_blocked,
                .data_fd = data_fd,
                .exit_reason = p.exit_reason,
                .kernel = p.kernel,
                .has_usage = usage.has_usage,
                .has_written = usage.has_written,
                .has_processes = usage.has_processes,
                .cpu_usec = usage.cpu_usec,
                .max_rss_bytes = usage.max_rss_bytes,
                .written_bytes = usage.written_bytes,
                .processes = usage.processes,
        };
        *ret_files = TAKE_PTR(files);
        return 0;
}

static void on_exec_reply(Session *s, int error, const char *message, json_object *reply, int fd,
                          void *userdata) {
        ExecCall *c = userdata;
        _cleanup_free_ ExecFile *files = NULL;
        ExecResult result;
        int r;

        if (c->released) {
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), strjoina("SCOPEBOX_EXEC_ID=", c->exec_id)),
                           "Exec %s of session %s was stopped: its session is released.", c->exec_id, s->id);
                error = -ENXIO;
                message = "session not found or not running";
        } else if (c->cancelled) {
                /* Whatever came of it (killed, or done just before), its caller wants no result. */
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), strjoina("SCOPEBOX_EXEC_ID=", c->exec_id)),
                           "Exec %s of session %s was cancelled: its caller hung up.", c->exec_id, s->id);
                error = -ECANCELED;
                message = EXEC_CANCELLED_MESSAGE;
        }
        if (error < 0) {
                metrics_count_exec(&s->manager->metrics, error, NULL);
                c->callback(s, error, message, NULL, c->userdata);
                free(c);
                return;
        }
        r = exec_reply_parse(reply, fd, &result, &files);
        if (r < 0) {
                log_struct(LOG_ERR, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Malformed exec result from the runner of %s.", s->id);
                metrics_count_exec(&s->manager->metrics, -EHOSTDOWN, NULL);
                c->callback(s, -EHOSTDOWN, "malformed result from the runner", NULL, c->userdata);
                free(c);
                return;
        }
        metrics_count_exec(&s->manager->metrics, 0, &result);
        session_touch(s);
        c->callback(s, 0, NULL, &result, c->userdata);
        free(result.blocked);
        free(c);
}

int session_exec(Session *s, int code_fd, const ExecParameters *p, ExecCallback cb, void *userdata,
                 ExecCall **ret_call) {
        _cleanup_close_ int fd = code_fd, stream_fd = -EBADF;
        json_object *msg = NULL;
        ExecCall *c;
        char exec_id[32];
        Config *cfg = &s->manager->config;
        int r;

        if (s->state != SESSION_RUNNING)
                return -ENXIO;
        if (s->n_queued >= SESSION_QUEUE_MAX) {
                metrics_count_exec(&s->manager->metrics, -EBUSY, NULL);
                return -EBUSY;
        }

        /* Exec ids only correlate log entries; the counter makes them unique per manager run. */
        snprintf(exec_id, sizeof(exec_id), "%08x%08llx", (unsigned) getpid(),
                 (unsigned long long) ++s->manager->exec_counter);

        /* Never an exec without a member it should have (no_processes, say: the dify profile). */
        r = runner_request_exec(
                &(RunnerExecRequest) {
                        .exec_id = exec_id,
                        .timeout_ms = p->timeout_ms,
                        .output_limit = p->output_limit,
                        .max_artifact_bytes = cfg->max_artifact_bytes,
                        .max_files = cfg->max_files_per_exec,
                        .max_total_artifact_bytes = cfg->max_total_artifact_bytes,
                        .memory_limit = cfg->memory_limit,
                        .language = p->language,
                        .no_processes = p->no_processes,
                        /* SANDBOX_PRELOAD=0: a new interpreter, not a child of the template (decided
                         * per exec, so that switching it takes effect for the sessions that exist). */
                        .cold = !cfg->preload,
                        /* A stateful session's python cells run in its kernel (the sidecar profile). */
                        .stateful = s->stateful && (!p->language || streq(p->language, "python3")) &&
                                    !p->no_processes && !p->network,
                        .network = p->network,
                        .http_proxy = p->http_proxy,
                        .https_proxy = p->https_proxy,
                },
                &msg);
        c = r < 0 ? NULL : calloc(1, sizeof(ExecCall));
        if (!c) {
                json_object_put(msg);
                r = r < 0 ? r : -ENOMEM;
                metrics_count_exec(&s->manager->metrics, r, NULL);
                return r;
        }
        *c = (ExecCall) { .session = s, .callback = cb, .userdata = userdata };
        memcpy(c->exec_id, exec_id, sizeof(c->exec_id));

        if (p->stream_fd >= 0) {
                stream_fd = fcntl(p->stream_fd, F_DUPFD_CLOEXEC, 3);
                if (stream_fd < 0) {
                        r = -errno;
                        json_object_put(msg);
                        free(c);
                        metrics_count_exec(&s->manager->metrics, r, NULL);
                        return r;
                }
        }

        /* The caller learns of c before the request may be answered (and c freed). */
        if (ret_call)
                *ret_call = c;
        r = session_enqueue_full(s, msg, TAKE_FD(fd), TAKE_FD(stream_fd),
                                 p->timeout_ms * USEC_PER_MSEC + SESSION_EXEC_SLACK_USEC, true, false,
                                 on_exec_reply, c, &c->request);
        if (r < 0) {
                if (ret_call)
                        *ret_call = NULL;
                free(c);
                metrics_count_exec(&s->manager->metrics, r, NULL);
                return r;
        }
        /* The exec may have failed already and the session begun to stop (runner lost): it is
         * still allocated, freed only from the event loop, and touch() ignores a stopping one. */
        s->n_execs++;
        session_touch(s);
        return 0;
}

static int exec_call_send_cancel(Session *s, ExecCall *c) {
        _cleanup_json_ json_object *msg = NULL;
        int r;

        if (!s->runner_cancels || s->control_fd < 0)
                return -EOPNOTSUPP;
        r = runner_request_cancel(c->exec_id, &msg);
        if (r < 0)
                return r;
        return runner_message_send(s->control_fd, msg, NULL, 0);
}

static void exec_call_stop(ExecCall *c, bool released) {
        Session *s = c->session;
        RunnerRequest *q = c->request;
        int r;

        if (c->cancelled)
                return;
        c->cancelled = true;
        c->released = released;

        if (s->in_flight != q) {
                /* Still queued: out of the queue, answered now (on_exec_reply() frees c). */
                (void) session_unqueue(s, q);
                q->callback(s, released ? -ENXIO : -ECANCELED,
                            released ? "session not found or not running" : EXEC_CANCELLED_MESSAGE, NULL,
                            -EBADF, q->userdata);
                runner_request_free(q);
                /* What waited behind it may go now. */
                (void) session_dispatch_next(s);
                return;
        }

        /* Running: the runner ends it the way its timeout does and answers as usual; the answer
         * becomes -ECANCELED in on_exec_reply(). The request timer stays: a runner that does not
         * answer still ends the session. */
        if (!s->runner_cancels) {
                log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "The runner of session %s can't cancel exec %s; it runs to its end.", s->id,
                           c->exec_id);
                return;
        }
        if (c->interrupted)
                return; /* the runner is ending it already */
        r = exec_call_send_cancel(s, c);
        if (r < 0)
                /* A broken connection ends the exec anyway (on_control() sees it). */
                log_struct(
                        LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                        "Failed to ask the runner of session %s to cancel exec %s, it runs to its end: %m",
                        s->id, c->exec_id);
}

void session_exec_cancel(ExecCall *c) {
        exec_call_stop(c, false);
}

int session_exec_interrupt(Session *s) {
        ExecCall *c;
        int r;

        /* The running exec only: those queued behind it run as they would. */
        if (!s->in_flight || !s->in_flight->is_exec || s->in_flight->callback != on_exec_reply)
                return -ENOENT;
        c = s->in_flight->userdata;
        if (c->cancelled)
                return -ENOENT; /* its caller hung up: it is ending, with nobody to tell */
        if (c->interrupted)
                return 0;
        r = exec_call_send_cancel(s, c);
        if (r < 0)
                return log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                  "Failed to ask the runner of session %s to cancel exec %s: %m", s->id,
                                  c->exec_id);
        c->interrupted = true;
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), strjoina("SCOPEBOX_EXEC_ID=", c->exec_id)),
                   "Cancelling exec %s of session %s on request.", c->exec_id, s->id);
        return 0;
}

static void session_stop_running_exec(Session *s) {
        if (s->in_flight && s->in_flight->is_exec && s->in_flight->callback == on_exec_reply)
                exec_call_stop(s->in_flight->userdata, true);
}

bool session_exec_running(const Session *s) {
        return s->in_flight && s->in_flight->is_exec;
}

/* ---- archives: storage agent + runner ---- */

/* Calls that only stage or look something up; transfers get as long as the agent may take for
 * one (three attempts of S3_TOTAL_TIMEOUT_SEC each, plus hashing). */
#define STORAGE_CALL_SLACK_USEC (30 * USEC_PER_SEC)
#define STORAGE_TRANSFER_TIMEOUT_USEC (7 * 60 * USEC_PER_SEC)
/* An archive of the same stem in flight elsewhere: look again this often. */
#define ARCHIVE_WAIT_USEC (500 * USEC_PER_MSEC)

static const char *const archive_outcome_table[_ARCHIVE_OUTCOME_MAX] = {
        [ARCHIVE_OUTCOME_NONE] = "none",
        [ARCHIVE_OUTCOME_STORED] = "stored",
        [ARCHIVE_OUTCOME_PENDING] = "pending",
        [ARCHIVE_OUTCOME_SKIPPED] = "skipped",
        [ARCHIVE_OUTCOME_KEPT] = "kept",
        [ARCHIVE_OUTCOME_ABANDONED] = "abandoned",
        [ARCHIVE_OUTCOME_DISCARDED] = "discarded",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(archive_outcome, ArchiveOutcome)

/* Whether a storage block is effective (1) or not (0: then archives and restores are no-ops,
 * COMPAT.md). -ENOMEM: undecided, which is never taken for "not effective" (a release would
 * destroy the workspace unarchived, a discard keep the archive). */
static int storage_block_effective(Session *s, const char *json) {
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_json_ json_object *o = NULL;
        const char *why;
        int r;

        if (!json)
                return 0;
        r = json_parse(json, strlen(json), JSON_DEPTH_MAX, &o);
        if (r >= 0 && json_object_is_type(o, json_type_object))
                r = storage_config_parse(o, &c, &why);
        if (r == -ENOMEM)
                return r;
        return r >= 0 && json_object_is_type(o, json_type_object) &&
               storage_config_effective(&c, s->manager->config.local_storage_dir);
}

/* The session's storage block (the one remembered at create, or the release's) if it is
 * effective, else NULL. Undecided (out of memory), the block itself: for the calls that the agent,
 * which checks it anew, may as well refuse (a deletion, a quarantine). */
static const char *session_effective_storage(Session *s) {
        return storage_block_effective(s, s->storage_json) != 0 ? s->storage_json : NULL;
}

static const char *session_archive_stem(Session *s, const char *override) {
        if (override && archive_stem_is_valid(override))
                return override;
        if (s->archive_key && archive_stem_is_valid(s->archive_key))
                return s->archive_key;
        return s->id;
}

const char *session_archive_stem_of(Session *s) {
        return session_archive_stem(s, NULL);
}

bool session_archive_pending(const Session *s) {
        return s->releasing;
}

unsigned session_count_pending_archives(Manager *m) {
        unsigned n = 0;
        LIST_FOREACH(sessions, i, m->sessions)
                n += i->releasing;
        return n;
}

/* Between BeginArchive and the answer to CommitArchive (also of an attempt whose release a create
 * took over since): the stored object may change. */
static bool session_archive_in_flight(const Session *s) {
        return s->archive_orphaned || (s->releasing && (s->archive_slot || s->archive_token));
}

/* Whether the session's archive is (stem, storage_json). */
static bool session_archives_to(Session *s, const char *stem, const char *storage_json) {
        return streq(session_archive_stem(s, NULL), stem) && streq_ptr(s->storage_json, storage_json);
}

static bool session_same_archive(Session *a, Session *b) {
        return a != b && session_archives_to(a, session_archive_stem(b, NULL), b->storage_json);
}

Session *session_find_pending_archive(Manager *m, const char *stem, const char *storage_json) {
        Session *found = NULL;

        /* The newest release wins: its workspace is what the client saw last. Never one its client
         * discarded, nor one a newer release superseded. */
        LIST_FOREACH(sessions, i, m->sessions)
                if (i->releasing && !i->stop_requested && !i->discard_stem && !i->archive_superseded &&
                    session_archives_to(i, stem, storage_json) &&
                    (!found || i->release_realtime_usec >= found->release_realtime_usec))
                        found = i;
        return found;
}

/* The call is owned by *ret_slot, which its reply callback clears first thing; freeing the
 * session cancels it. */
static int storage_call(Session *s, sd_bus_slot **ret_slot, const char *method, sd_bus_message_handler_t cb,
                        uint64_t timeout_usec, const char *types, ...) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        va_list ap;
        int r;

        if (*ret_slot)
                return -EBUSY;  /* one at a time; the caller goes on without it */
        r = sd_bus_message_new_method_call(s->manager->bus, &m, STORAGE_AGENT_BUS_NAME,
                                           STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE, method);
        if (r >= 0) {
                va_start(ap, types);
                r = sd_bus_message_appendv(m, types, ap);
                va_end(ap);
        }
        if (r >= 0)
                r = sd_bus_call_async(s->manager->bus, ret_slot, m, cb, s, timeout_usec);
        return r;
}

/* Every answer from the storage agent ends the call the session waits for (sd-bus keeps the slot
 * alive until its callback returns). */
static void storage_reply_begin(sd_bus_slot **slot) {
        *slot = sd_bus_slot_unref(*slot);
}

/* For logs and messages only: no decision is taken on it. */
static const char *bus_reply_error(sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        return e && e->message ? e->message : e && e->name ? e->name : "malformed reply";
}

/* What an answer of the storage agent means, by its error name (bus-contract.h). */
typedef enum StorageAnswer {
        STORAGE_ANSWER_OK,
        /* InvalidArgs, StorageNotConfigured: the block is not usable by the contract's own rules
         * (invalid, or not effective where the agent runs): archives and restores are no-ops. */
        STORAGE_ANSWER_NOT_EFFECTIVE,
        STORAGE_ANSWER_REFUSED,            /* StorageRefused: our endpoint policy refuses it */
        STORAGE_ANSWER_POLICY_UNAVAILABLE, /* PolicyUnavailable: the agent can't tell; may pass later */
        STORAGE_ANSWER_DAMAGED,            /* ArchiveDamaged: the stored archive can't be restored */
        STORAGE_ANSWER_NOT_FOUND,          /* NotFound */
        /* Anything else (StorageFailed, UnknownToken, no reply, no agent): a retry may succeed. */
        STORAGE_ANSWER_FAILED,
} StorageAnswer;

static StorageAnswer storage_answer(sd_bus_message *reply) {
        static const struct {
                const char *name;
                StorageAnswer answer;
        } answers[] = {
                { SD_BUS_ERROR_INVALID_ARGS, STORAGE_ANSWER_NOT_EFFECTIVE },
                { BUS_ERROR_STORAGE_NOT_CONFIGURED, STORAGE_ANSWER_NOT_EFFECTIVE },
                { BUS_ERROR_STORAGE_REFUSED, STORAGE_ANSWER_REFUSED },
                { BUS_ERROR_POLICY_UNAVAILABLE, STORAGE_ANSWER_POLICY_UNAVAILABLE },
                { BUS_ERROR_ARCHIVE_DAMAGED, STORAGE_ANSWER_DAMAGED },
                { BUS_ERROR_NOT_FOUND, STORAGE_ANSWER_NOT_FOUND },
        };

        if (!sd_bus_message_is_method_error(reply, NULL))
                return STORAGE_ANSWER_OK;
        for (size_t i = 0; i < ELEMENTSOF(answers); i++)
                if (sd_bus_message_is_method_error(reply, answers[i].name))
                        return answers[i].answer;
        return STORAGE_ANSWER_FAILED;
}

/* The release waiters hear the outcome now; the session goes on without them. */
static void session_release_tell(Session *s) {
        s->release_answer_timer = sd_event_source_disable_unref(s->release_answer_timer);
        s->release_told = true;
        for (ReleaseWaiter *w; (w = s->release_waiters);) {
                LIST_REMOVE(waiters, s->release_waiters, w);
                w->callback(s, 0, NULL, w->userdata);
                free(w);
        }
}

static void session_archive_stop_retrying(Session *s) {
        s->archive_retry_timer = sd_event_source_disable_unref(s->archive_retry_timer);
        s->archive_token = mfree(s->archive_token);
}

static int on_discard_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;

        storage_reply_begin(&s->archive_slot);
        if (sd_bus_message_is_method_error(reply, NULL))
                log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to delete the archive of %s: %s", s->id, bus_reply_error(reply));
        session_stop_scope(s, session_end_or(s, SESSION_END_DISCARDED));
        return 0;
}

/* Delete the stored archive (the stem is taken), then stop. */
static void session_discard(Session *s, const char *storage, char *stem) {
        _cleanup_free_ char *owned = stem;

        s->releasing = false;
        s->archive_outcome = ARCHIVE_OUTCOME_DISCARDED;
        session_archive_stop_retrying(s);
        if (s->archive_orphaned) {
                /* The upload of the release a create took over may still store the archive: it is
                 * deleted after that (session_archive_orphan_ended()). */
                free(s->discard_stem);
                s->discard_stem = TAKE_PTR(owned);
                return;
        }
        if (!storage || storage_call(s, &s->archive_slot, "DeleteArchive", on_discard_reply,
                                     STORAGE_TRANSFER_TIMEOUT_USEC, "ss", storage, owned) < 0)
                session_stop_scope(s, session_end_or(s, SESSION_END_DISCARDED));
}

/* The archive is stored, or never will be: the session goes. */
static void session_archive_done(Session *s, ArchiveOutcome outcome) {
        if (s->discard_stem) {
                session_discard(s, session_effective_storage(s), TAKE_PTR(s->discard_stem));
                return;
        }
        s->releasing = false;
        s->archive_outcome = outcome;
        session_archive_stop_retrying(s);
        manager_state_changed(s->manager);
        session_stop_scope(s, session_end_or(s, SESSION_END_RELEASED));
}

static void session_archive_attempt(Session *s);

/* The attempt that was under way when a create took the session over (session_adopt()) has
 * ended: what waited for it goes on. */
static void session_archive_orphan_ended(Session *s) {
        s->archive_orphaned = false;
        if (s->discard_stem)
                session_archive_done(s, ARCHIVE_OUTCOME_DISCARDED);
        else if (s->releasing)
                session_archive_attempt(s);
        else if (s->stop_requested)
                session_finalize(s);
}

/* An attempt whose release a create took over, or whose client discarded it meanwhile, goes no
 * further: its staging ('token') is aborted. Returns whether it was dropped. */
static bool session_archive_attempt_dropped(Session *s, const char *token);

static int on_archive_retry(sd_event_source *source, uint64_t usec, void *userdata);

static int session_arm_archive_retry(Session *s, uint64_t usec) {
        if (s->archive_retry_timer) {
                int r = sd_event_source_set_time_relative(s->archive_retry_timer, usec);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s->archive_retry_timer, SD_EVENT_ONESHOT);
                return r;
        }
        return sd_event_add_time_relative(s->manager->event, &s->archive_retry_timer, CLOCK_BOOTTIME, usec,
                                          10 * USEC_PER_MSEC, on_archive_retry, s);
}

static uint64_t archive_retry_delay(unsigned failures) {
        uint64_t d = SESSION_ARCHIVE_RETRY_FIRST_USEC;
        for (unsigned i = 1; i < failures && d < SESSION_ARCHIVE_RETRY_MAX_USEC; i++)
                d *= 2;
        return MIN(d, SESSION_ARCHIVE_RETRY_MAX_USEC);
}

/* What a failed attempt means for the next one. */
typedef enum ArchiveFailure {
        /* Storage down or full, the endpoint refused or unjudged now, the agent gone: retried with
         * backoff until stored or SANDBOX_ARCHIVE_RETRY_DEADLINE_SECONDS passed. */
        ARCHIVE_FAILURE_RETRY,
        /* The workspace is larger than SANDBOX_MAX_ARCHIVE_BYTES: it can't shrink while pending, so
         * it is kept as it is (a create of its archive_key takes it over; the operator may raise
         * the limit and restart the manager), tried once more at the deadline, then given up. */
        ARCHIVE_FAILURE_TOO_LARGE,
        /* The storage block is not effective by the contract's own rules: nothing to archive to. */
        ARCHIVE_FAILURE_NO_STORAGE,
} ArchiveFailure;

/* An attempt failed. */
static void session_archive_failed(Session *s, ArchiveFailure kind, const char *why) {
        Config *c = &s->manager->config;
        uint64_t now = (uint64_t) time(NULL) * USEC_PER_SEC, deadline, delay;
        const char *stem = session_archive_stem(s, NULL);
        int r;

        s->archive_token = mfree(s->archive_token);
        if (s->discard_stem) {
                /* Its client discarded it meanwhile. */
                session_archive_done(s, ARCHIVE_OUTCOME_DISCARDED);
                return;
        }
        s->manager->metrics.archive_failures++;
        /* Out of memory, the reason of the attempt before stays. */
        char *error = strdup(why);
        if (error) {
                free(s->archive_error);
                s->archive_error = error;
        }
        if (s->archive_first_failure_realtime_usec == 0)
                s->archive_first_failure_realtime_usec = now;
        deadline = s->archive_first_failure_realtime_usec + c->archive_retry_deadline_sec * USEC_PER_SEC;

        if (kind == ARCHIVE_FAILURE_NO_STORAGE) {
                s->manager->metrics.archives_skipped++;
                log_struct(
                        LOG_WARNING, 0,
                        LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-skipped",
                                   strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                   SCOPEBOX_MESSAGE_ARCHIVE_FAILED),
                        "Archive of session %s can't be stored: %s. The stored archive '%s', if any, stays "
                        "as it was.",
                        s->id, why, stem);
                session_archive_done(s, ARCHIVE_OUTCOME_SKIPPED);
                return;
        }
        if (s->archive_superseded || s->control_fd < 0 || now >= deadline) {
                const char *reason = s->archive_superseded
                                             ? "a newer release of the same archive superseded it"
                                     : s->control_fd < 0 ? "the session's runner is gone"
                                                         : "SANDBOX_ARCHIVE_RETRY_DEADLINE_SECONDS passed";
                s->manager->metrics.archives_abandoned++;
                log_struct(
                        s->archive_superseded ? LOG_INFO : LOG_ERR, 0,
                        LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-abandoned",
                                   strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                   SCOPEBOX_MESSAGE_ARCHIVE_ABANDONED),
                        "Gave up archiving session %s after %u attempts (%s); last error: %s. Its workspace "
                        "is lost.",
                        s->id, s->archive_attempts, reason, why);
                session_archive_done(s, ARCHIVE_OUTCOME_ABANDONED);
                return;
        }

        delay = deadline - now;
        if (kind == ARCHIVE_FAILURE_RETRY)
                delay = MIN(archive_retry_delay(s->archive_attempts), delay);
        log_struct(
                LOG_WARNING, 0,
                LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-failed",
                           strjoina("SCOPEBOX_ARCHIVE_STEM=", stem), SCOPEBOX_MESSAGE_ARCHIVE_FAILED),
                "Failed to store the archive of session %s (attempt %u): %s. The workspace is kept%s; next "
                "attempt in %llus.",
                s->id, s->archive_attempts, why,
                kind == ARCHIVE_FAILURE_TOO_LARGE ? " until a create of its archive_key takes it over" : "",
                (unsigned long long) ((delay + USEC_PER_SEC - 1) / USEC_PER_SEC));
        s->archive_outcome = ARCHIVE_OUTCOME_PENDING;
        r = session_arm_archive_retry(s, delay);
        if (r < 0)
                /* Never a workspace given up for want of a timer: it stays pending and listed. */
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to schedule the next archive attempt of session %s; it stays pending "
                           "until scopeboxctl archives retry, a create of its archive_key or a restart: %m",
                           s->id);
        (void) session_save_state(s);
        manager_state_changed(s->manager);
        session_release_tell(s);
}

static void session_archive_failed_errno(Session *s, int error, const char *what) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s: %s", what, strerror(abs(error)));
        session_archive_failed(s, ARCHIVE_FAILURE_RETRY, buf);
}

static int on_commit_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        uint64_t size = 0;
        bool ok;

        storage_reply_begin(&s->archive_slot);
        s->archive_token = mfree(s->archive_token);
        ok = storage_answer(reply) == STORAGE_ANSWER_OK && sd_bus_message_read(reply, "t", &size) >= 0;
        if (s->archive_orphaned) {
                /* The upload of a release a create took over: stored or not, the workspace is the
                 * new session's, archived at its own release. */
                if (ok)
                        s->manager->metrics.archive_bytes_written += size;
                else
                        s->manager->metrics.archive_failures++;
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), ok ? "SCOPEBOX_EVENT=session-archived"
                                                                   : "SCOPEBOX_EVENT=archive-failed"),
                           "The upload of session %s's release, which a create took over, %s%s.", s->id,
                           ok ? "is stored" : "failed: ", ok ? "" : bus_reply_error(reply));
                session_archive_orphan_ended(s);
                return 0;
        }
        if (!ok) {
                /* The block was taken at BeginArchive: whatever fails now (an unknown token: the
                 * agent restarted in between; the endpoint refused or unreachable at the upload)
                 * keeps the workspace, and a new attempt stages anew. */
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, bus_reply_error(reply));
                return 0;
        }
        s->manager->metrics.archive_bytes_written += size;
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-archived"),
                   "Archived session %s (%llu bytes, attempt %u).", s->id, (unsigned long long) size,
                   s->archive_attempts);
        session_archive_done(s, ARCHIVE_OUTCOME_STORED);
        return 0;
}

/* Nobody waits for the answer: a staging the agent no longer knows is fine, and one it still has
 * expires by itself. */
static void storage_abort(Session *s, const char *token) {
        if (token)
                (void) sd_bus_call_method_async(s->manager->bus, NULL, STORAGE_AGENT_BUS_NAME,
                                                STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE,
                                                "AbortArchive", NULL, NULL, "s", token);
}

static bool session_archive_attempt_dropped(Session *s, const char *token) {
        if (!s->archive_orphaned && !s->discard_stem)
                return false;
        storage_abort(s, token);
        s->archive_token = mfree(s->archive_token);
        if (s->archive_orphaned)
                session_archive_orphan_ended(s);
        else
                session_archive_done(s, ARCHIVE_OUTCOME_DISCARDED);
        return true;
}

static void on_runner_archived(Session *s, int error, const char *message, json_object *reply, int fd,
                               void *userdata) {
        json_object *v;
        int64_t bytes;
        int r;

        if (session_archive_attempt_dropped(s, s->archive_token))
                return;
        if (error < 0) {
                storage_abort(s, s->archive_token);
                s->archive_token = mfree(s->archive_token);
                if (error == -EFBIG)
                        session_archive_failed(s, ARCHIVE_FAILURE_TOO_LARGE,
                                               "the workspace is larger than SANDBOX_MAX_ARCHIVE_BYTES");
                else
                        session_archive_failed(s, ARCHIVE_FAILURE_RETRY, strempty(message));
                return;
        }
        bytes = json_object_object_get_ex(reply, "bytes", &v) ? json_object_get_int64(v) : -1;
        if (bytes < 0) {
                storage_abort(s, s->archive_token);
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY,
                                       "the runner did not say how many bytes it wrote");
                return;
        }
        r = storage_call(s, &s->archive_slot, "CommitArchive", on_commit_reply,
                         STORAGE_TRANSFER_TIMEOUT_USEC, "st", s->archive_token, (uint64_t) bytes);
        if (r < 0) {
                storage_abort(s, s->archive_token);
                session_archive_failed_errno(s, r, "failed to call the storage agent");
        }
}

static int on_begin_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        Config *c = &s->manager->config;
        json_object *msg = NULL;
        const char *token;
        int fd, r;

        storage_reply_begin(&s->archive_slot);
        if (s->archive_orphaned || s->discard_stem) {
                token = NULL;
                if (!sd_bus_message_is_method_error(reply, NULL))
                        (void) sd_bus_message_read(reply, "sh", &token, &fd);
                (void) session_archive_attempt_dropped(s, token);
                return 0;
        }
        if (sd_bus_message_is_method_error(reply, NULL)) {
                /* Only a block that is not effective by the contract's rules has nothing to archive
                 * to. One our endpoint policy refuses, or can't judge now, is the client's storage
                 * all the same: the workspace is kept and retried, as for storage down. */
                session_archive_failed(s,
                                       storage_answer(reply) == STORAGE_ANSWER_NOT_EFFECTIVE
                                               ? ARCHIVE_FAILURE_NO_STORAGE
                                               : ARCHIVE_FAILURE_RETRY,
                                       bus_reply_error(reply));
                return 0;
        }
        if (sd_bus_message_read(reply, "sh", &token, &fd) < 0) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "malformed reply from the storage agent");
                return 0;
        }
        s->archive_token = strdup(token);
        fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        r = runner_request_archive(false, c->max_archive_bytes, c->archive_timeout_sec, &msg);
        if (!s->archive_token || fd < 0 || r < 0) {
                safe_close(fd);
                json_object_put(msg);
                storage_abort(s, token);
                session_archive_failed_errno(s, ENOMEM, "failed to stage the archive");
                return 0;
        }
        r = session_enqueue(s, msg, fd, c->archive_timeout_sec * USEC_PER_SEC + STORAGE_CALL_SLACK_USEC,
                            false, true, on_runner_archived, NULL);
        if (r < 0) {
                storage_abort(s, s->archive_token);
                session_archive_failed_errno(s, r, "failed to ask the runner for the archive");
        }
        return 0;
}

static void session_archive_attempt(Session *s) {
        const char *storage = s->storage_json;
        int r;

        r = storage_block_effective(s, storage);
        if (r < 0) {
                session_archive_failed_errno(s, r, "failed to check the storage block");
                return;
        }
        if (r == 0) {
                session_archive_done(s, ARCHIVE_OUTCOME_NONE);
                return;
        }
        /* An attempt of its own under way (a retry's ping that answered late), or the one of the
         * release a create took over: the next goes once that has ended. */
        if (s->archive_orphaned || s->archive_slot || s->archive_token)
                return;
        /* Superseded while it waited: its workspace is older than the newer release's. */
        if (s->archive_superseded) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "superseded");
                return;
        }
        if (s->control_fd < 0) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "the session's runner is gone");
                return;
        }
        /* Archives of one stem are stored one after the other, in the order of their releases. */
        LIST_FOREACH(sessions, i, s->manager->sessions)
                if (session_same_archive(s, i) && session_archive_in_flight(i)) {
                        r = session_arm_archive_retry(s, ARCHIVE_WAIT_USEC);
                        if (r >= 0)
                                return;
                        break;
                }
        s->archive_attempts++;
        if (s->archive_attempts > 1)
                s->manager->metrics.archive_retries++;
        r = storage_call(s, &s->archive_slot, "BeginArchive", on_begin_reply, STORAGE_CALL_SLACK_USEC, "ss",
                         storage, session_archive_stem(s, NULL));
        if (r < 0)
                session_archive_failed_errno(s, r, "failed to call the storage agent");
}

static void on_retry_ping(Session *s, int error, const char *message, json_object *reply, int fd,
                          void *userdata) {
        if (!s->releasing)
                return;
        if (error < 0) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "the session's runner is gone");
                return;
        }
        session_archive_attempt(s);
}

static int on_archive_retry(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        if (!s->releasing)
                return 0;
        /* The runner first: it is alive, and its idle backstop hears of us, however long storage
         * takes to come back. (Without the ping, the attempt finds out by itself.) */
        if (session_enqueue_op(s, "ping", on_retry_ping) < 0)
                session_archive_attempt(s);
        return 0;
}

void session_archive_retry_now(Session *s) {
        if (s->releasing && !session_archive_in_flight(s))
                (void) session_arm_archive_retry(s, 1);
}

/* A newer release of the same archive: older pending ones are superseded (their workspace is
 * older); one in flight finishes its attempt first, and the new one waits for it. */
static void session_supersede_older(Session *s) {
        LIST_FOREACH_SAFE(sessions, i, next, s->manager->sessions) {
                if (!i->releasing || !session_same_archive(s, i))
                        continue;
                i->archive_superseded = true;
                if (!session_archive_in_flight(i))
                        session_archive_failed(i, ARCHIVE_FAILURE_RETRY, "superseded");
        }
}

static int on_release_answer_due(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        if (s->releasing && !s->release_told) {
                log_struct(
                        LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                        "The archive of session %s is still being stored; its release is answered as "
                        "pending.",
                        s->id);
                session_release_tell(s);
        }
        return 0;
}

/* An exec that runs when its session is released is stopped as its timeout would stop it; its
 * caller hears that the session is gone. The archive request waits behind it. */
int session_release_full(Session *s, SessionEnd end, const ReleaseOptions *o, SessionDoneCallback cb,
                         void *userdata) {
        _cleanup_free_ char *storage_override = NULL, *discard_stem = NULL;
        bool starting, stopping = s->state == SESSION_STOPPING;
        int effective, r;

        /* Everything that can fail for want of memory first, with nothing changed yet: a discard
         * may have to wait for an attempt under way, which without the stem would end as a store;
         * a block that could not be judged would be taken for no storage. */
        if (o && o->discard && !(discard_stem = strdup(session_archive_stem(s, o->archive_key))))
                return -ENOMEM;
        if (!stopping && o && o->storage_json && !(storage_override = strdup(o->storage_json)))
                return -ENOMEM;
        effective = storage_block_effective(s, storage_override ?: s->storage_json);
        if (effective < 0)
                return effective;
        if (stopping) {
                /* Already on its way out: the waiter hears when it is gone, or now when its archive
                 * is pending (then after what this release does to it). */
                if (!s->release_told) {
                        r = session_add_release_waiter(s, cb, userdata);
                        if (r < 0)
                                return r;
                }
                /* A discard of one whose archive is pending drops the workspace and the stored
                 * archive now. */
                if (s->releasing && o && o->discard) {
                        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Session %s, whose archive was pending, is discarded by its client.",
                                   s->id);
                        if (!session_archive_in_flight(s))
                                session_discard(s, effective ? s->storage_json : NULL,
                                                TAKE_PTR(discard_stem));
                        else {
                                /* After the attempt that is under way, whatever its outcome. */
                                free(s->discard_stem);
                                s->discard_stem = TAKE_PTR(discard_stem);
                                s->archive_superseded = true;
                                s->archive_outcome = ARCHIVE_OUTCOME_DISCARDED;
                        }
                }
                if (s->release_told && cb)
                        cb(s, 0, NULL, userdata);
                return 0;
        }
        /* Not started yet, nobody has used its workspace: it holds at most part of what is being
         * restored, which must never be archived over the whole. (An adopted one is its own.) */
        starting = s->state == SESSION_STARTING && !s->adopted;
        r = session_add_release_waiter(s, cb, userdata);
        if (r < 0)
                return r;

        session_begin_stopping(s);
        s->end = end;
        /* The release's storage block is the one its archive goes to, also on every retry. */
        if (storage_override) {
                free(s->storage_json);
                s->storage_json = TAKE_PTR(storage_override);
        }

        if (effective && o && o->discard) {
                session_discard(s, s->storage_json, TAKE_PTR(discard_stem));
                return 0;
        }
        if (effective && (!o || o->archive) && !starting) {
                if (s->archive_kept) {
                        s->archive_outcome = ARCHIVE_OUTCOME_KEPT;
                        log_struct(
                                LOG_WARNING, 0,
                                LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-kept"),
                                "Not archiving session %s: its archive could not be restored, the stored "
                                "one is kept.",
                                s->id);
                        session_stop_scope(s, end);
                        return 0;
                }
                s->releasing = true;
                s->archive_outcome = ARCHIVE_OUTCOME_PENDING;
                s->release_realtime_usec = (uint64_t) time(NULL) * USEC_PER_SEC;
                session_supersede_older(s);
                session_stop_running_exec(s);
                /* A restarted manager goes on with it. */
                r = session_save_state(s);
                if (r < 0)
                        log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Failed to record the release of session %s, ignoring: %m", s->id);
                manager_state_changed(s->manager);
                /* The first attempt may take as long as the agent's transfers do (a server that
                 * stalls mid-upload): the client hears "pending" well before its call times out. */
                r = sd_event_add_time_relative(s->manager->event, &s->release_answer_timer, CLOCK_MONOTONIC,
                                               s->manager->config.archive_timeout_sec * USEC_PER_SEC +
                                                       STORAGE_CALL_SLACK_USEC,
                                               USEC_PER_SEC, on_release_answer_due, s);
                if (r < 0)
                        log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Failed to arm the release answer timer, ignoring: %m");
                session_archive_attempt(s);
                return 0;
        }
        session_stop_scope(s, end);
        return 0;
}

/* A member of the record: a string copied to *ret (-ENOMEM), a number at least 'min'. */
static int record_string(json_object *o, const char *key, char **ret) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return 0;
        free(*ret);
        *ret = strdup(json_object_get_string(v));
        return *ret ? 0 : -ENOMEM;
}

static void record_usec(json_object *o, const char *key, int64_t min, uint64_t *ret) {
        json_object *v;

        if (json_object_object_get_ex(o, key, &v))
                *ret = (uint64_t) MAX(json_object_get_int64(v), min);
}

/* Of a recorded session's state, a release that was in progress. */
static int session_load_release_state(Session *s, json_object *o) {
        json_object *v;
        uint64_t attempts = s->archive_attempts;
        int r;

        if (json_object_object_get_ex(o, "restore_failed", &v))
                s->archive_kept = s->restore_failed = json_object_get_boolean(v);
        if (!json_object_object_get_ex(o, "releasing", &v) || !json_object_get_boolean(v))
                return 0;
        s->releasing = true;
        s->archive_outcome = ARCHIVE_OUTCOME_PENDING;
        s->release_told = true; /* whoever asked heard from the earlier manager, or not at all */
        record_usec(o, "archive_attempts", 0, &attempts);
        s->archive_attempts = (unsigned) MIN(attempts, (uint64_t) UINT_MAX);
        record_usec(o, "release_realtime_usec", 0, &s->release_realtime_usec);
        record_usec(o, "archive_first_failure_realtime_usec", 0, &s->archive_first_failure_realtime_usec);
        r = record_string(o, "archive_error", &s->archive_error);
        if (r < 0)
                return r;
        /* A word we don't know (a newer version's) only loses the word: the release goes on. */
        if (json_object_object_get_ex(o, "release_reason", &v) && json_object_is_type(v, json_type_string)) {
                s->end = session_end_from_string(json_object_get_string(v));
                if (s->end < 0)
                        log_struct(LOG_DEBUG, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Session %s was released for a reason we don't know, ignoring it.",
                                   s->id);
        }
        return 0;
}

int session_load_state(Session *s, json_object *o) {
        json_object *v;
        int r;

        record_usec(o, "idle_ttl_usec", (int64_t) USEC_PER_SEC, &s->idle_ttl_usec);
        record_usec(o, "created_realtime_usec", 0, &s->created_realtime_usec);
        record_usec(o, "last_active_realtime_usec", 0, &s->last_active_realtime_usec);
        r = record_string(o, "archive_key", &s->archive_key);
        if (r < 0)
                return r;
        if (json_object_object_get_ex(o, "stateful", &v) && json_object_is_type(v, json_type_boolean))
                s->stateful = json_object_get_boolean(v);
        r = record_string(o, "storage", &s->storage_json);
        if (r < 0)
                return r;
        /* The runner keeps its ids; we only need to know them so the pool doesn't hand them out. */
        if (json_object_object_get_ex(o, "uid", &v) && json_object_is_type(v, json_type_int))
                s->uid = (uid_t) MIN(MAX(json_object_get_int64(v), 0), (int64_t) UINT32_MAX - 1);
        if (s->idle_ttl_usec == 0)
                s->idle_ttl_usec = s->manager->config.idle_ttl_sec * USEC_PER_SEC;
        s->state_saved_realtime_usec = s->last_active_realtime_usec;
        return session_load_release_state(s, o);
}


void session_resume_release(Session *s) {
        int r;

        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-resumed"),
                   "Session %s was being released by an earlier instance; archiving it (attempt %u).", s->id,
                   s->archive_attempts + 1);
        session_begin_stopping(s);
        r = session_arm_archive_retry(s, 1);
        if (r < 0)
                session_archive_attempt(s);
        manager_state_changed(s->manager);
}

/* ---- adoption: a create for an archive still pending takes its session over ---- */

int session_adopt(Session *s, uint64_t idle_ttl_usec, SessionDoneCallback cb, void *userdata) {
        bool under_way;

        if (!s->releasing || s->stop_requested || s->discard_stem || s->archive_superseded ||
            s->control_fd < 0 || s->start_callback)
                return -EBUSY;

        /* Its workspace is here, newer than anything stored: the create never waits for storage.
         * An attempt under way goes on by itself (an upload to its end, the runner's archive
         * aborted once written); the session's own next attempt waits for it. */
        under_way = session_archive_in_flight(s);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-adopted"),
                   "Session %s, whose archive was pending (%u attempts%s), is taken over by a new create "
                   "for the same archive: its workspace is newer than the stored one.",
                   s->id, s->archive_attempts, under_way ? ", one under way" : "");
        if (under_way && !s->archive_slot) {
                /* The runner is writing the archive: nothing of it will be committed. */
                storage_abort(s, s->archive_token);
                s->archive_token = mfree(s->archive_token);
        }
        /* Whoever released it hears "pending" now: the workspace is kept, and taken over. */
        if (!s->release_told) {
                s->archive_outcome = ARCHIVE_OUTCOME_PENDING;
                session_release_tell(s);
        }
        session_archive_stop_retrying(s);
        s->archive_orphaned = under_way;
        s->adopted = true;
        /* Its workspace is the newest there is, whatever its own create restored. */
        s->restore_failed = false;
        s->releasing = false;
        s->archive_superseded = false;
        s->release_told = false;
        s->release_answer_timer = sd_event_source_disable_unref(s->release_answer_timer);
        s->archive_outcome = ARCHIVE_OUTCOME_NONE;
        s->archive_attempts = 0;
        s->archive_first_failure_realtime_usec = s->release_realtime_usec = 0;
        s->archive_error = mfree(s->archive_error);
        s->end = _SESSION_END_INVALID;
        s->idle_ttl_usec = idle_ttl_usec;
        s->state = SESSION_STARTING;
        s->start_callback = cb;
        s->start_userdata = userdata;
        /* As after a restore: the client syncs its inputs anew. */
        session_reset_inputs_then_ready(s);
        return 0;
}

/* ---- restore at create ---- */

static void on_inputs_reset(Session *s, int error, const char *message, json_object *reply, int fd,
                            void *userdata) {
        if (error < 0)
                log_struct(LOG_WARNING, error, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to clear the inputs of session %s: %s", s->id, strempty(message));
        session_start_done(s, 0, NULL);
}

/* Inputs that can't be cleared are logged and the session starts, as when the runner fails to
 * (on_inputs_reset()): a session never stays STARTING for it. */
static void session_reset_inputs_then_ready(Session *s) {
        int r = session_enqueue_op(s, "reset-inputs", on_inputs_reset);
        if (r < 0)
                on_inputs_reset(s, r, "failed to ask the runner", NULL, -EBADF, NULL);
}

/* The create fails for now: the archive stays where it is, and the same create may succeed later. */
static void session_restore_fail_create(Session *s, const char *why) {
        _cleanup_free_ char *message = NULL;

        if (asprintf(&message,
                     "failed to restore the workspace from its archive: %s; the stored archive is kept, "
                     "retry later",
                     why) < 0)
                message = NULL;
        session_start_done(s, -ENOLINK, message ?: "failed to restore the workspace from its archive");
}

/* The stored archive could not be restored. The create fails (the archive stays as it is, a retry
 * once storage is back succeeds) or, if the operator chose so and nothing was unpacked yet, the
 * session starts empty and never archives over the stored one. */
static void session_restore_failed(Session *s, bool unpacked, const char *why) {
        const char *stem = session_archive_stem(s, NULL);
        bool start_empty = s->manager->config.start_empty_on_restore_failure && !unpacked;

        s->manager->metrics.restore_failures++;
        log_struct(LOG_ERR, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=restore-failed",
                              strjoina("SCOPEBOX_ARCHIVE_STEM=", stem), SCOPEBOX_MESSAGE_RESTORE_FAILED),
                   "Failed to restore session %s from archive '%s': %s. %s", s->id, stem, why,
                   start_empty ? "It starts empty and will not archive over the stored archive."
                               : "The create fails; the stored archive is kept.");
        if (start_empty) {
                s->archive_kept = s->restore_failed = true;
                session_reset_inputs_then_ready(s);
                return;
        }
        session_restore_fail_create(s, why);
}

/* ---- damaged archives: quarantined ---- */

/* The damaged archive stays where it was: the create fails, saying why it counts as damaged. */
static void session_restore_fail_quarantine(Session *s) {
        _cleanup_free_ char *why = NULL;

        if (!s->restore_damage || asprintf(&why, "the archive is damaged (%s) and could not be moved aside",
                                           s->restore_damage) < 0)
                why = NULL;
        session_restore_fail_create(s, why ?: "the archive is damaged and could not be moved aside");
}

static int on_quarantine_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        const char *stem = session_archive_stem(s, NULL), *key = NULL;
        StorageAnswer answer = storage_answer(reply);

        storage_reply_begin(&s->restore_slot);
        if (s->state == SESSION_STOPPING) {
                session_finalize(s);
                return 0;
        }
        if (answer == STORAGE_ANSWER_OK && sd_bus_message_read(reply, "s", &key) < 0)
                answer = STORAGE_ANSWER_FAILED;
        if (answer == STORAGE_ANSWER_OK) {
                s->manager->metrics.archives_quarantined++;
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-quarantined",
                                      strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                      strjoina("SCOPEBOX_QUARANTINE_KEY=", key),
                                      SCOPEBOX_MESSAGE_RESTORE_QUARANTINED),
                           "Moved the damaged archive '%s' aside to '%s'; session %s starts empty and "
                           "archives there as usual.",
                           stem, key, s->id);
        } else if (answer == STORAGE_ANSWER_NOT_FOUND)
                /* Moved or deleted meanwhile (another create of the same archive): nothing to obey. */
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-quarantined",
                                      strjoina("SCOPEBOX_ARCHIVE_STEM=", stem)),
                           "The damaged archive '%s' is gone already; session %s starts empty.", stem,
                           s->id);
        else {
                /* Not moved: it stays where it is, untouched, and the next create tries again.
                 * Never restored, never deleted. */
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=restore-failed",
                                      strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                      SCOPEBOX_MESSAGE_RESTORE_FAILED),
                           "Failed to move the damaged archive '%s' of session %s aside: %s. The create "
                           "fails.",
                           stem, s->id, bus_reply_error(reply));
                session_restore_fail_quarantine(s);
                return 0;
        }
        s->restore_failed = true;
        session_reset_inputs_then_ready(s);
        return 0;
}

/* The stored archive can never be restored as it is (ArchiveDamaged from the agent, or what the
 * runner's unpacking found: runner-protocol.h). It is moved aside to a quarantine key next to it,
 * never deleted, and the session starts empty ("restored": false); its releases archive to the key
 * as usual, so one bad archive never locks a conversation out. */
static void session_restore_damaged(Session *s, const char *why) {
        const char *stem = session_archive_stem(s, NULL), *storage = session_effective_storage(s);
        int r;

        s->manager->metrics.restore_failures++;
        log_struct(LOG_WARNING, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=restore-failed",
                              strjoina("SCOPEBOX_ARCHIVE_STEM=", stem), SCOPEBOX_MESSAGE_RESTORE_FAILED),
                   "Failed to restore session %s from archive '%s': %s. The archive is damaged; moving it "
                   "aside.",
                   s->id, stem, why);
        /* For the answer, should the move fail (without memory, an answer without the reason). */
        free(s->restore_damage);
        s->restore_damage = strdup(why);
        /* A release of the same archive under way may store a good one at the key any moment:
         * never move that aside. The next create finds whichever is there then. */
        LIST_FOREACH(sessions, i, s->manager->sessions)
                if (session_same_archive(s, i) && (i->releasing || session_archive_in_flight(i))) {
                        session_restore_fail_create(s, "the archive is damaged and is being replaced");
                        return;
                }
        /* Bounded like the restore itself: the gateway waits for the create no longer. */
        r = storage ? storage_call(s, &s->restore_slot, "QuarantineArchive", on_quarantine_reply,
                                   s->manager->config.archive_timeout_sec * USEC_PER_SEC +
                                           STORAGE_CALL_SLACK_USEC,
                                   "ss", storage, stem)
                    : -ENOMEDIUM;
        if (r < 0)
                session_restore_fail_quarantine(s);
}

/* The client's storage block may not be used now (our endpoint policy refuses it, or can't tell):
 * the create fails with that error, by name, rather than start empty over the client's archive. */
static void session_restore_refused(Session *s, bool refused, const char *why) {
        if (!refused)
                s->manager->metrics.restore_failures++;
        /* A client chooses its endpoint (info); the policy that can't decide is the host's. */
        log_struct(refused ? LOG_INFO : LOG_WARNING, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id),
                              refused ? "SCOPEBOX_EVENT=restore-refused" : "SCOPEBOX_EVENT=restore-failed",
                              strjoina("SCOPEBOX_ARCHIVE_STEM=", session_archive_stem(s, NULL)),
                              refused ? NULL : SCOPEBOX_MESSAGE_RESTORE_FAILED),
                   "Not creating session %s: the storage agent %s its storage block (%s).", s->id,
                   refused ? "refuses" : "can't judge", why);
        s->start_error_name = refused ? BUS_ERROR_STORAGE_REFUSED : BUS_ERROR_POLICY_UNAVAILABLE;
        session_start_done(s, refused ? -EADDRNOTAVAIL : -ENETDOWN, why);
}

static void on_runner_restored(Session *s, int error, const char *message, json_object *reply, int fd,
                               void *userdata) {
        json_object *v;

        if (s->state == SESSION_STOPPING)
                return;
        if (runner_restore_error_is_damage(error)) {
                session_restore_damaged(s, strempty(message));
                return;
        }
        if (error < 0) {
                session_restore_failed(s, true, strempty(message));
                return;
        }
        s->manager->metrics.archive_bytes_restored += s->restore_size;
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-restored"),
                   "Restored session %s from its archive (%lld bytes).", s->id,
                   json_object_object_get_ex(reply, "bytes", &v) ? (long long) json_object_get_int64(v)
                                                                 : 0LL);
        session_reset_inputs_then_ready(s);
}

static int on_open_archive_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        Config *c = &s->manager->config;
        json_object *msg = NULL;
        struct stat st;
        int found = 0, fd, r;

        storage_reply_begin(&s->restore_slot);
        if (s->state == SESSION_STOPPING) {
                session_finalize(s);
                return 0;
        }
        switch (storage_answer(reply)) {
        case STORAGE_ANSWER_OK:
                break;
        case STORAGE_ANSWER_NOT_EFFECTIVE:
                /* Not effective by the contract's own rules (invalid, or not configured where the
                 * agent runs): as without storage, nothing is restored, nothing will be archived. */
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-skipped"),
                           "Not restoring session %s, starting empty: %s", s->id, bus_reply_error(reply));
                session_reset_inputs_then_ready(s);
                return 0;
        case STORAGE_ANSWER_REFUSED:
        case STORAGE_ANSWER_POLICY_UNAVAILABLE:
                session_restore_refused(s, storage_answer(reply) == STORAGE_ANSWER_REFUSED,
                                        bus_reply_error(reply));
                return 0;
        case STORAGE_ANSWER_DAMAGED:
                session_restore_damaged(s, bus_reply_error(reply));
                return 0;
        default:
                session_restore_failed(s, false, bus_reply_error(reply));
                return 0;
        }
        if (sd_bus_message_read(reply, "bh", &found, &fd) < 0) {
                session_restore_failed(s, false, "malformed reply from the storage agent");
                return 0;
        }
        if (!found) {
                session_reset_inputs_then_ready(s);
                return 0;
        }
        fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        /* Expansion is bounded like the workspace itself. */
        r = runner_request_archive(true, c->workspace_size, c->archive_timeout_sec, &msg);
        if (fd < 0 || r < 0) {
                safe_close(fd);
                json_object_put(msg);
                session_restore_failed(s, false, "out of memory");
                return 0;
        }
        /* Counted as restored once the runner unpacked it. */
        s->restore_size = fstat(fd, &st) >= 0 && S_ISREG(st.st_mode) ? (uint64_t) st.st_size : 0;
        r = session_enqueue(s, msg, fd, c->archive_timeout_sec * USEC_PER_SEC + STORAGE_CALL_SLACK_USEC,
                            false, true, on_runner_restored, NULL);
        if (r < 0)
                session_restore_failed(s, false, "failed to ask the runner to unpack it");
        return 0;
}

const char *session_start_error_name(const Session *s, int error) {
        return s->start_error_name ?: bus_error_name_from_errno(error);
}

static int on_restore_wait(sd_event_source *source, uint64_t usec, void *userdata);

/* After the runner is up: restore the archive if there is one, then clear the inputs. */
static void session_restore_then_ready(Session *s) {
        const char *storage = s->storage_json, *stem = session_archive_stem(s, NULL);
        int r;

        r = s->archive_key ? storage_block_effective(s, storage) : 0;
        if (r < 0) {
                session_restore_failed(s, false, "out of memory");
                return;
        }
        if (r == 0) {
                session_start_done(s, 0, NULL);
                return;
        }
        /* The archive of a session released moments ago may not be stored yet: never restore what
         * it is about to replace. One being stored now is waited for; one that failed and waits for
         * its next attempt is the client's to take over (a new create adopts it). */
        LIST_FOREACH(sessions, i, s->manager->sessions) {
                uint64_t now = now_usec(CLOCK_MONOTONIC);

                if ((!i->releasing && !i->archive_orphaned) || !session_same_archive(s, i))
                        continue;
                /* Waited for as long as a restore may take: the create's answer comes in time. */
                if (s->restore_wait_until_usec == 0)
                        s->restore_wait_until_usec =
                                now + s->manager->config.archive_timeout_sec * USEC_PER_SEC;
                if (session_archive_in_flight(i) && now < s->restore_wait_until_usec) {
                        r = sd_event_add_time_relative(s->manager->event, &s->restore_wait_timer,
                                                       CLOCK_MONOTONIC, ARCHIVE_WAIT_USEC,
                                                       10 * USEC_PER_MSEC, on_restore_wait, s);
                        if (r >= 0) {
                                session_release_create_slot(s);
                                return;
                        }
                }
                session_restore_failed(s, true,
                                       "the previous workspace of this archive_key is still being archived");
                return;
        }
        /* Bounded like the create itself: the gateway waits for it no longer. */
        r = storage_call(s, &s->restore_slot, "OpenArchive", on_open_archive_reply,
                         s->manager->config.archive_timeout_sec * USEC_PER_SEC + STORAGE_CALL_SLACK_USEC,
                         "ss", storage, stem);
        if (r < 0) {
                session_restore_failed(s, false, "failed to call the storage agent");
                return;
        }
        session_release_create_slot(s);
}

static int on_restore_wait(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        s->restore_wait_timer = sd_event_source_disable_unref(s->restore_wait_timer);
        if (s->state == SESSION_STOPPING) {
                session_finalize(s);
                return 0;
        }
        session_restore_then_ready(s);
        return 0;
}

/* ---- workspace files ---- */

typedef struct FileCall {
        FileCallback callback;
        void *userdata;
} FileCall;

static void on_file_reply(Session *s, int error, const char *message, json_object *reply, int fd,
                          void *userdata) {
        FileCall *c = userdata;

        if (error >= 0)
                session_touch(s);
        c->callback(s, error, message, error >= 0 ? fd : -EBADF, c->userdata);
        free(c);
}

/* Takes over fd; 'built' is what building msg returned (it fails the call, after the checks). */
static int session_file_request(Session *s, int built, json_object *msg, int fd, FileCallback cb,
                                void *userdata) {
        FileCall *c = NULL;
        int r;

        if (s->state != SESSION_RUNNING || built < 0 || !(c = calloc(1, sizeof(FileCall)))) {
                json_object_put(msg);
                safe_close(fd);
                return s->state != SESSION_RUNNING ? -ENXIO : built < 0 ? built : -ENOMEM;
        }
        *c = (FileCall) { .callback = cb, .userdata = userdata };
        r = session_enqueue(s, msg, fd, SESSION_CONTROL_TIMEOUT_USEC, false, false, on_file_reply, c);
        if (r < 0)
                free(c);
        return r;
}

int session_write_file(Session *s, const char *relative, int data_fd, FileCallback cb, void *userdata) {
        json_object *msg = NULL;
        int r = runner_request_write(relative, &msg);
        return session_file_request(s, r, msg, data_fd, cb, userdata);
}

int session_read_file(Session *s, const char *relative, uint64_t max, FileCallback cb, void *userdata) {
        json_object *msg = NULL;
        int r = runner_request_read(relative, max, &msg);
        return session_file_request(s, r, msg, -EBADF, cb, userdata);
}

static int session_file_op(Session *s, const char *op, FileCallback cb, void *userdata) {
        json_object *msg = NULL;
        int r = runner_request_op(op, &msg);
        return session_file_request(s, r, msg, -EBADF, cb, userdata);
}

int session_list_files(Session *s, FileCallback cb, void *userdata) {
        return session_file_op(s, "list", cb, userdata);
}

int session_reset_inputs(Session *s, FileCallback cb, void *userdata) {
        return session_file_op(s, "reset-inputs", cb, userdata);
}

int session_reset_kernel(Session *s, FileCallback cb, void *userdata) {
        return session_file_op(s, "reset-kernel", cb, userdata);
}

/* ---- recovery after a restart of the manager ---- */

static void on_recover_ping_again(Session *s, int error, const char *message, json_object *reply, int fd,
                                  void *userdata);

static void session_recovered(Session *s, int error, json_object *reply, bool again) {
        json_object *v;
        uint64_t now, idle, remaining;

        /* Its answer lost for want of memory: asked once more before anything is given up. */
        if (error == -ENOMEM && !again && session_enqueue_op(s, "ping", on_recover_ping_again) >= 0)
                return;
        if (error < 0 || !json_object_object_get_ex(reply, "initialized", &v) ||
            !json_object_get_boolean(v)) {
                session_cleanup_stale(s, "runner did not answer after a restart");
                return;
        }
        session_learn_runner(s, reply);
        if (s->releasing) {
                session_resume_release(s);
                return;
        }
        now = (uint64_t) time(NULL) * USEC_PER_SEC;
        idle = now > s->last_active_realtime_usec ? now - s->last_active_realtime_usec : 0;
        remaining = idle < s->idle_ttl_usec ? s->idle_ttl_usec - idle : 1;
        session_arm_idle(s, remaining);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-recovered"),
                   "Recovered session %s; idle for %llus of %llus.", s->id,
                   (unsigned long long) (idle / USEC_PER_SEC),
                   (unsigned long long) (s->idle_ttl_usec / USEC_PER_SEC));
}

static void on_recover_ping(Session *s, int error, const char *message, json_object *reply, int fd,
                            void *userdata) {
        session_recovered(s, error, reply, false);
}

static void on_recover_ping_again(Session *s, int error, const char *message, json_object *reply, int fd,
                                  void *userdata) {
        session_recovered(s, error, reply, true);
}

int session_recover(Session *s) {
        json_object *ping;
        int r;

        /* Built first: a recovery that can't even ask fails with the session as it was. */
        r = runner_request_op("ping", &ping);
        if (r < 0)
                return r;
        s->state = s->releasing ? SESSION_STOPPING : SESSION_RUNNING;
        r = session_connect(s);
        if (r < 0) {
                json_object_put(ping);
                session_cleanup_stale(s, "runner unreachable after a restart");
                return 0;
        }
        return session_enqueue(s, ping, -EBADF, SESSION_CONTROL_TIMEOUT_USEC, false, true, on_recover_ping,
                               NULL);
}

void session_cleanup_stale(Session *s, const char *why) {
        log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-stale"),
                   "Cleaning up session %s: %s.", s->id, why);
        session_teardown(s, SESSION_END_STALE);
}
