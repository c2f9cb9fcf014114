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
#include "session-private.h"
#include "signal-util.h"
#include "bus-util.h"
#include "storage-config.h"
#include "string-table.h"
#include "string-util.h"
#include "systemd-client.h"
#include "time-util.h"

static const char *const session_state_table[_SESSION_STATE_MAX] = {
        [SESSION_CREATING] = "creating",
        [SESSION_RESTORING] = "restoring",
        [SESSION_RUNNING] = "running",
        [SESSION_ARCHIVING] = "archiving",
        [SESSION_ARCHIVE_PENDING] = "archive-pending",
        [SESSION_DISCARDING] = "discarding",
        [SESSION_STOPPING] = "stopping",
        [SESSION_GONE] = "gone",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(session_state, SessionState)

const char *session_state_to_word(SessionState s) {
        if (s < 0 || s >= _SESSION_STATE_MAX)
                return NULL;
        return session_state_is_starting(s) ? "starting" : s == SESSION_RUNNING ? "running" : "stopping";
}

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
        [SESSION_END_DEADLINE] = "deadline",
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

RunnerRequest *runner_request_free(RunnerRequest *q) {
        if (!q)
                return NULL;
        q->queue_timer = sd_event_source_disable_unref(q->queue_timer);
        json_object_put(q->message);
        safe_close(q->fd);
        safe_close(q->fd2);
        safe_close(q->fd3);
        free(q);
        return NULL;
}

static int session_alloc(Manager *m, const char *id, Session **ret) {
        Session *s;

        s = calloc(1, sizeof(Session));
        if (!s)
                return -ENOMEM;
        *s = (Session) {
                .manager = m, .runner = PIDREF_NULL, .control_fd = -EBADF, .state = SESSION_CREATING,
                .end = _SESSION_END_INVALID, .pause = SESSION_PAUSE_NULL,
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

int session_save_state(Session *s) {
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
        if (s->record)
                json_add_checked(o, "record", json_object_new_string(s->record), &jr);
        if (s->deadline_realtime_usec > 0)
                json_add_checked(o, "deadline_realtime_usec",
                                 json_object_new_int64((int64_t) s->deadline_realtime_usec), &jr);
        if (s->pause.paused)
                json_add_checked(o, "paused", json_object_new_boolean(true), &jr);
        if (session_archive_pending(s)) {
                json_add_checked(o, "releasing", json_object_new_boolean(true), &jr);
                json_add_checked(o, "release_realtime_usec",
                                 json_object_new_int64((int64_t) s->archive.release_realtime_usec), &jr);
                json_add_checked(o, "archive_attempts", json_object_new_int64((int64_t) s->archive.attempts),
                                 &jr);
                json_add_checked(o, "archive_first_failure_realtime_usec",
                                 json_object_new_int64((int64_t) s->archive.first_failure_realtime_usec),
                                 &jr);
                if (s->archive.error)
                        json_add_checked(o, "archive_error", json_object_new_string(s->archive.error), &jr);
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

/* The runner is our child until it exits: a session that goes first leaves the reaping to the
 * manager. The runner is not killed (its scope is, or it outlives us on purpose). */
static void session_hand_off_runner(Session *s) {
        pid_t pid;
        int r;

        if (!s->runner_child_source)
                return;
        s->runner_child_source = sd_event_source_disable_unref(s->runner_child_source);
        if (!pidref_is_set(&s->runner) || !s->manager)
                return;
        pid = s->runner.pid;
        r = manager_watch_child(s->manager, &s->runner); /* takes it */
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to watch runner %i of session %s, it may stay a zombie: %m", (int) pid,
                           s->id);
}

/* The end of a session that is gone, from the manager's GC: its files go, its waiters hear. */
static void session_release_remains(Session *s) {
        int r;

        session_fail_requests(s, -ENXIO, BUS_MESSAGE_NO_SUCH_SESSION);
        session_remove_state(s);
        if (s->archive.outcome == ARCHIVE_OUTCOME_PENDING) {
                /* Its runner went (killed, out of memory, unresponsive) while the archive waited. */
                s->manager->metrics.archives_abandoned++;
                s->archive.outcome = ARCHIVE_OUTCOME_ABANDONED;
                log_struct(
                        LOG_ERR, 0,
                        LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-abandoned",
                                   SCOPEBOX_MESSAGE_ARCHIVE_ABANDONED),
                        "Gave up archiving session %s after %u attempts: the session ended first (its "
                        "runner is "
                        "gone); last error: %s. Its workspace is lost.",
                        s->id, s->archive.attempts, strna(s->archive.error));
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
        bool gone;

        if (!s)
                return NULL;
        /* The destructor, not a transition: whatever the callbacks below try on the session finds
         * it gone; it can't be queued for GC a second time. */
        gone = s->state == SESSION_GONE;
        s->state = SESSION_GONE;
        s->in_gc_queue = true;
        if (s->manager) {
                session_unlink_gc(s);
                manager_remove_session(s->manager, s);
                manager_forget_exec_waiter(s->manager, s);
        }
        if (gone && s->manager)
                session_release_remains(s);
        /* A session that ends while starting gives its create slot back (not at shutdown: no
         * create starts then). */
        if (s->holds_create_slot && s->manager && sd_event_get_state(s->manager->event) != SD_EVENT_FINISHED)
                session_release_create_slot(s);
        /* (Again after the callbacks there: whatever they queued.) */
        session_fail_requests(s, -ENXIO, BUS_MESSAGE_NO_SUCH_SESSION);

        /* Pending calls are cancelled: their callbacks never see this session again. */
        s->start_job = systemd_job_free(s->start_job);
        s->stop_job = systemd_job_free(s->stop_job);
        s->restore_slot = sd_bus_slot_unref(s->restore_slot);
        s->restore_wait_timer = sd_event_source_disable_unref(s->restore_wait_timer);
        session_archive_clear(&s->archive);

        session_hand_off_runner(s);
        pidref_done(&s->runner);
        s->control_source = sd_event_source_disable_unref(s->control_source);
        s->control_fd = safe_close(s->control_fd);
        s->request_timer = sd_event_source_disable_unref(s->request_timer);
        s->idle_timer = sd_event_source_disable_unref(s->idle_timer);
        s->deadline_timer = sd_event_source_disable_unref(s->deadline_timer);
        session_pause_done(&s->pause);
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
        free(s->restore_damage);
        free(s->record);
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

/* ---- stages ---- */

#define TO(state) (1u << (state))

/* Which stages may follow which (docs/architecture.md draws it). */
static const unsigned session_transitions[_SESSION_STATE_MAX] = {
        /* Started, recovered (a record of a release in progress: its archive is pending), released. */
        [SESSION_CREATING] = TO(SESSION_RESTORING) | TO(SESSION_RUNNING) | TO(SESSION_ARCHIVE_PENDING) |
                             TO(SESSION_DISCARDING) | TO(SESSION_STOPPING),
        /* An adopted session's workspace is its own: archived even if released while it restores. */
        [SESSION_RESTORING] = TO(SESSION_RUNNING) | TO(SESSION_ARCHIVING) | TO(SESSION_DISCARDING) |
                              TO(SESSION_STOPPING),
        [SESSION_RUNNING] = TO(SESSION_ARCHIVING) | TO(SESSION_DISCARDING) | TO(SESSION_STOPPING),
        /* Adopted by a create of the same archive (RESTORING), discarded, stored or given up. */
        [SESSION_ARCHIVING] = TO(SESSION_ARCHIVE_PENDING) | TO(SESSION_RESTORING) | TO(SESSION_DISCARDING) |
                              TO(SESSION_STOPPING),
        [SESSION_ARCHIVE_PENDING] = TO(SESSION_ARCHIVING) | TO(SESSION_RESTORING) | TO(SESSION_DISCARDING) |
                                    TO(SESSION_STOPPING),
        [SESSION_DISCARDING] = TO(SESSION_STOPPING),
        [SESSION_STOPPING] = TO(SESSION_GONE),
        [SESSION_GONE] = 0,
};

bool session_state_transition_is_legal(SessionState from, SessionState to) {
        if (from < 0 || from >= _SESSION_STATE_MAX || to < 0 || to >= _SESSION_STATE_MAX)
                return false;
        return session_transitions[from] & TO(to);
}

static bool session_calls_pending(const Session *s) {
        return s->start_job || s->stop_job || s->restore_slot || s->archive.slot;
}

/* SIGKILL for the session's runner, through its pidfd, never by its number (systemd's PidRef
 * rule); nothing once it is reaped or handed off. */
static void session_kill_runner(Session *s) {
        (void) pidref_kill(&s->runner, SIGKILL);
}

/* Out of the live stages: the session takes no calls, clients see it as gone at once. Still
 * waiting for a create slot: it never starts. Still fetching its archive: not waited for (a stalled
 * storage endpoint must not keep a released session counted). */
static void session_stop_taking_calls(Session *s) {
        s->idle_timer = sd_event_source_disable_unref(s->idle_timer);
        s->deadline_timer = sd_event_source_disable_unref(s->deadline_timer);
        manager_cancel_pending_create(s->manager, s);
        s->restore_slot = sd_bus_slot_unref(s->restore_slot);
        session_pause_end(s);
        session_fail_queued(s, -ENXIO, BUS_MESSAGE_NO_SUCH_SESSION);
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

/* STOPPING: the scope stops (killing the runner and everything of the session); each call still
 * outstanding comes back to session_finalize() when it is done. */
static void session_enter_stopping(Session *s) {
        int r;

        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id),
                              strjoina("SCOPEBOX_SESSION_END=", session_end_to_string(s->end))),
                   "Releasing session %s (%s).", s->id, session_end_to_string(s->end));

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

/* GONE: the scope is gone and no call is left. The session leaves every lookup now and is freed
 * from the event loop, never here, since callers up the stack may still hold it. */
static void session_enter_gone(Session *s) {
        s->idle_timer = sd_event_source_disable_unref(s->idle_timer);
        s->deadline_timer = sd_event_source_disable_unref(s->deadline_timer);
        s->request_timer = sd_event_source_disable_unref(s->request_timer);
        s->control_source = sd_event_source_disable_unref(s->control_source);
        s->control_fd = safe_close(s->control_fd);
        session_add_to_gc_queue(s);
}

int session_enter(Session *s, SessionState state) {
        SessionState from = s->state;

        if (!session_state_transition_is_legal(from, state)) {
                log_struct(LOG_CRIT, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-illegal-transition"),
                           "Session %s can't go from %s to %s; it stays %s.", s->id,
                           strna(session_state_to_string(from)), strna(session_state_to_string(state)),
                           strna(session_state_to_string(from)));
                return -EINVAL;
        }
        s->state = state;
        if (!session_state_is_ending(from) && session_state_is_ending(state))
                session_stop_taking_calls(s);
        switch (state) {
        case SESSION_ARCHIVE_PENDING:
                if (from == SESSION_ARCHIVING)
                        session_archive_now_pending(s);
                break;
        case SESSION_STOPPING:
                session_enter_stopping(s);
                break;
        case SESSION_GONE:
                session_enter_gone(s);
                break;
        default:
                break;
        }
        return 0;
}

/* A call of a stopping session came back: once none is left, the session is gone. */
void session_finalize(Session *s) {
        if (s->state != SESSION_STOPPING || session_calls_pending(s))
                return;
        (void) session_enter(s, SESSION_GONE);
}

/* Why the session stops, or 'fallback' when nobody said (a record of an earlier version without it). */
SessionEnd session_end_or(const Session *s, SessionEnd fallback) {
        return s->end >= 0 ? s->end : fallback;
}

/* Stop the scope (killing the runner and everything of the session) and then finalize; from a
 * session stopping already, a call that ended: maybe the last one. */
void session_stop_scope(Session *s, SessionEnd end) {
        if (s->state == SESSION_STOPPING || s->state == SESSION_GONE) {
                session_finalize(s);
                return;
        }
        s->end = end;
        (void) session_enter(s, SESSION_STOPPING);
}

/* Stop now, whatever stage it is in: calls still queued (an archive's, a ping) fail first. */
void session_teardown(Session *s, SessionEnd end) {
        if (session_state_is_ending(s->state))
                session_stop_taking_calls(s);
        session_stop_scope(s, end);
}

int session_add_release_waiter(Session *s, SessionDoneCallback cb, void *userdata) {
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
        if (session_state_is_ending(s->state))
                return 0; /* already on its way out; the waiter hears when it is gone */
        session_teardown(s, end);
        return 0;
}

/* ---- control connection ---- */


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
        if (!session_state_is_ending(s->state))
                log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=runner-lost",
                                                      SCOPEBOX_MESSAGE_RUNNER_LOST),
                           "Runner of session %s is gone (%s); cleaning up.", s->id, why);
        s->control_source = sd_event_source_disable_unref(s->control_source);
        s->control_fd = safe_close(s->control_fd);
        session_complete_in_flight(s, -ENXIO, BUS_MESSAGE_NO_SUCH_SESSION, NULL, -EBADF);
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
                        RunnerErrorReply e;

                        if (schema_parse(&runner_error_reply, reply, &e, NULL) < 0)
                                e = (RunnerErrorReply) { .error_number = EIO };
                        session_complete_in_flight(s, -e.error_number, e.error ?: "runner error", NULL,
                                                   -EBADF);
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

int session_dispatch_next(Session *s) {
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
                int fds[3] = { q->fd, q->fd2, q->fd3 };
                size_t n = q->fd < 0 ? 0 : q->fd2 < 0 ? 1 : q->fd3 < 0 ? 2 : 3;

                r = runner_message_send(s->control_fd, q->message, n > 0 ? fds : NULL, n);
        }
        if (r < 0) {
                q->callback(s, -ENXIO, BUS_MESSAGE_NO_SUCH_SESSION, NULL, -EBADF, q->userdata);
                if (q->is_exec)
                        manager_release_exec_slot(s->manager);
                runner_request_free(q);
                session_runner_lost(s, "failed to send a request");
                return r;
        }
        q->fd = safe_close(q->fd);
        q->fd2 = safe_close(q->fd2);
        q->fd3 = safe_close(q->fd3);
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
bool session_unqueue(Session *s, RunnerRequest *q) {
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
                q->callback(s, -EBUSY, BUS_MESSAGE_SESSION_BUSY, NULL, -EBADF, q->userdata);
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
int session_enqueue_full(Session *s, json_object *message, int fd, int fd2, int fd3, uint64_t timeout_usec,
                                bool is_exec, bool front, RunnerReplyCallback cb, void *userdata,
                                RunnerRequest **ret_request) {
        RunnerRequest *q;

        if (s->n_queued >= SESSION_QUEUE_MAX) {
                json_object_put(message);
                safe_close(fd);
                safe_close(fd2);
                safe_close(fd3);
                return -EBUSY;
        }
        q = calloc(1, sizeof(RunnerRequest));
        if (!q) {
                json_object_put(message);
                safe_close(fd);
                safe_close(fd2);
                safe_close(fd3);
                return -ENOMEM;
        }
        *q = (RunnerRequest) { .session = s,
                               .message = message,
                               .fd = fd,
                               .fd2 = fd2,
                               .fd3 = fd3,
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

int session_enqueue(Session *s, json_object *message, int fd, uint64_t timeout_usec, bool is_exec,
                    bool front, RunnerReplyCallback cb, void *userdata) {
        return session_enqueue_full(s, message, fd, -EBADF, -EBADF, timeout_usec, is_exec, front, cb,
                                    userdata, NULL);
}

/* One of our own control requests that is only its op ("ping", "reset-inputs"), ahead of the
 * client's. Fails only when nothing was queued. */
int session_enqueue_op(Session *s, const SchemaMessage *op, RunnerReplyCallback cb) {
        json_object *msg;
        int r;

        r = runner_request_plain(op, &msg);
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

void session_arm_idle(Session *s, uint64_t usec) {
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
void session_release_create_slot(Session *s) {
        if (!s->holds_create_slot)
                return;
        s->holds_create_slot = false;
        manager_create_finished(s->manager);
}

void session_start_done(Session *s, int error, const char *message) {
        SessionDoneCallback cb = TAKE_PTR(s->start_callback);
        bool stopping = session_state_is_ending(s->state);

        /* Released while its last step ran (that step's failure is the release's doing): not
         * started, and already on its way out. */
        if (stopping && error >= 0) {
                error = -ENXIO;
                message = BUS_MESSAGE_NO_SUCH_SESSION;
        }
        session_release_create_slot(s);
        if (error >= 0) {
                int r;

                (void) session_enter(s, SESSION_RUNNING);
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


/* What the runner can do beyond the basics, from its answer to init or ping. A runner started by an
 * earlier version of ours (recovered after an upgrade) may know less. */
void session_learn_runner(Session *s, bool cancels) {
        s->runner_cancels = cancels;
}

static void on_init_reply(Session *s, int error, const char *message, json_object *reply, int fd,
                          void *userdata) {
        RunnerInitReply p;

        if (error >= 0 && schema_parse(&runner_init_reply, reply, &p, NULL) < 0)
                error = -EBADMSG, message = "malformed answer to init";
        if (error >= 0)
                session_learn_runner(s, p.cancel);
        if (error < 0) {
                log_struct(LOG_ERR, error, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Runner of session %s failed to initialize: %s", s->id, strempty(message));
                session_start_done(s, -EHOSTDOWN, "failed to initialize the workspace");
                return;
        }
        session_restore_then_ready(s);
}

int session_connect(Session *s) {
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
        int filters;
        int r;

        s->start_job = systemd_job_free(s->start_job);
        if (session_state_is_ending(s->state)) {
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
                        /* A sidecar session's execs, each in a sandbox made before it came (a
                         * stateful one's cells run in its kernel); a pooled dify run's sandbox in
                         * the profile of the last run (Dify asks for a network by default), its
                         * network included when runs may have one. A run's own session is made for
                         * a run already waiting. */
                        .prepare = m->config.preload && !s->stateful && (!s->ephemeral || s->pooled),
                        .prepare_no_processes = s->ephemeral,
                        .prepare_network =
                                s->ephemeral && m->config.dify_enable_network && m->run_pool_network,
                        .http_proxy = s->ephemeral ? m->config.dify_http_proxy : NULL,
                        .https_proxy = s->ephemeral ? m->config.dify_https_proxy : NULL,
                        .idle_backstop_sec = (s->idle_ttl_usec + SESSION_BACKSTOP_SLACK_USEC) / USEC_PER_SEC,
                },
                &init);
        if (r < 0) {
                session_start_done(s, r, "out of memory");
                return;
        }
        /* With the filters: the runner compiles none. */
        filters = fcntl(m->seccomp_filters_fd, F_DUPFD_CLOEXEC, 3);
        if (filters < 0) {
                json_object_put(init);
                session_start_done(s, -errno, "failed to pass the seccomp filters");
                return;
        }
        r = session_enqueue(s, init, filters, SESSION_CONTROL_TIMEOUT_USEC, false, true, on_init_reply,
                            NULL);
        if (r < 0)
                session_start_done(s, -EHOSTDOWN, "failed to initialize the workspace");
}

static int on_runner_exit(sd_event_source *source, const siginfo_t *si, void *userdata) {
        Session *s = userdata;

        /* This only reaps our child. Failures surface where they matter: a runner that dies
         * before its scope starts fails StartTransientUnit, one that dies later closes the
         * control connection. */
        s->runner_child_source = sd_event_source_disable_unref(s->runner_child_source);
        pidref_done(&s->runner);
        if (!session_state_is_ending(s->state))
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

/* The runner, held by its pidfd from the start (*ret). */
static int spawn_runner(Session *s, int listen_fd, PidRef *ret) {
        char arg_id[64], arg_root[PATH_MAX + 32], arg_level[64];
        const char *target = getenv("SCOPEBOX_LOG_TARGET");
        /* A dify run's runner gets the network filter's programs (net-filter.h), to attach them to
         * its slirp4netns's cgroup; without them its execs with a network fail. */
        NetFilter *filter = s->ephemeral ? manager_net_filter(s->manager) : NULL;
        int r;

        snprintf(arg_id, sizeof(arg_id), "--session-id=%s", s->id);
        snprintf(arg_root, sizeof(arg_root), "--session-root=%s", s->session_root);
        snprintf(arg_level, sizeof(arg_level), "SCOPEBOX_LOG_LEVEL=%s",
                 log_level_to_string(log_get_max_level()));

        r = pidref_clone(0, ret);
        if (r < 0)
                return r;
        if (r == 0) {
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
        return 0;
}

int session_start(Session *s, SessionDoneCallback cb, void *userdata) {
        Manager *m = s->manager;
        _cleanup_close_ int listen_fd = -EBADF;
        PidRef watch = PIDREF_NULL;
        int r;

        assert(s->state == SESSION_CREATING);

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

        r = spawn_runner(s, listen_fd, &s->runner);
        if (r < 0) {
                (void) rm_rf(s->runtime_dir);
                return log_struct(LOG_ERR, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                  "Failed to spawn the runner: %m");
        }
        /* Watched through a pidfd of its own, which the source owns (it closes it after sd-event
         * reaped the runner): the session's may go first. */
        r = pidref_dup(&s->runner, &watch);
        if (r >= 0)
                r = sd_event_add_child_pidfd(m->event, &s->runner_child_source, watch.fd, WEXITED,
                                             on_runner_exit, s);
        if (r >= 0)
                r = sd_event_source_set_child_pidfd_own(s->runner_child_source, true);
        if (r >= 0)
                watch.fd = -EBADF;
        else
                s->runner_child_source = sd_event_source_disable_unref(s->runner_child_source);
        pidref_done(&watch);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to watch the runner, ignoring: %m");

        ScopeProperties props = {
                .description = strjoina("scopebox runner of session ", s->id),
                .slice = MANAGER_SLICE,
                .pid = s->runner.pid, /* PIDs= by number: our child, not reaped before it answers */
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

static int session_file_op(Session *s, const SchemaMessage *op, FileCallback cb, void *userdata) {
        json_object *msg = NULL;
        int r = runner_request_plain(op, &msg);
        return session_file_request(s, r, msg, -EBADF, cb, userdata);
}

int session_list_files(Session *s, FileCallback cb, void *userdata) {
        return session_file_op(s, &runner_list_request, cb, userdata);
}

int session_reset_inputs(Session *s, FileCallback cb, void *userdata) {
        return session_file_op(s, &runner_reset_inputs_request, cb, userdata);
}

int session_reset_kernel(Session *s, FileCallback cb, void *userdata) {
        return session_file_op(s, &runner_reset_kernel_request, cb, userdata);
}
