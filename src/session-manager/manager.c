/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager: owns the sessions, the bus connection and the event loop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <systemd/sd-daemon.h>

#include "bus-client.h"
#include "bus-util.h"
#include "daemon-util.h"
#include "fs-util.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "list.h"
#include "string-util.h"
#include "log.h"
#include "drain.h"
#include "manager.h"
#include "net-filter.h"
#include "run.h"
#include "runner-protocol.h"
#include "seccomp-policy.h"
#include "session.h"
#include "systemd-client.h"

typedef struct PendingCreate PendingCreate;
static void pending_create_unlink(Manager *m, PendingCreate *p);
static ChildWatch *child_watch_free(ChildWatch *w);

int manager_new(Manager **ret) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_free_ char *config_error = NULL;
        int r;

        m = calloc(1, sizeof(Manager));
        if (!m)
                return -ENOMEM;
        m->seccomp_filters_fd = -EBADF;
        metrics_init(&m->metrics);

        r = config_load(&m->config, getenv("SCOPEBOX_CONFIG"), &config_error);
        if (r < 0)
                return log_error_errno(r, "Invalid configuration: %s", config_error ?: "out of memory");
        /* What Dify sends until a run says otherwise. */
        m->run_pool_network = true;
        r = address_policy_parse(m->config.dify_network_allow, &m->dify_network_allow, &config_error);
        if (r < 0)
                return log_error_errno(
                        r, "Invalid configuration: SANDBOX_DIFY_NETWORK_ALLOW: '%s' is no address or prefix",
                        strna(config_error));

        if (daemon_idle_exit_usec(MANAGER_IDLE_EXIT_USEC, &m->idle_exit_usec) < 0)
                log_warning("Ignoring %s=%s: not a whole number of seconds from 1 to 86400.",
                            DAEMON_IDLE_EXIT_ENV, getenv(DAEMON_IDLE_EXIT_ENV));

        r = daemon_event_new(&m->event, SIGTERM, SIGINT, -1);
        if (r < 0)
                return r;
        (void) sd_event_set_watchdog(m->event, true);

        *ret = TAKE_PTR(m);
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        while (m->pending_creates) {
                PendingCreate *p = m->pending_creates;
                pending_create_unlink(m, p);
                free(p);
        }
        manager_runs_flush(m);
        /* Finalized sessions finish going; the others stay, and so do their runners and scopes,
         * for the next instance to recover. */
        manager_gc(m);
        while (m->sessions)
                session_free(m->sessions);
        manager_gc(m);
        m->gc_source = sd_event_source_disable_unref(m->gc_source);
        /* Runners still running keep running; whoever inherits them reaps them. */
        while (m->child_watches)
                child_watch_free(m->child_watches);
        free(m->exec_waiters);
        m->recover_retry_source = sd_event_source_disable_unref(m->recover_retry_source);
        m->idle_exit_source = sd_event_source_disable_unref(m->idle_exit_source);
        m->idle_exit = bus_idle_exit_free(m->idle_exit);
        /* No signal reaches a manager that is gone, whoever else holds the bus. */
        m->job_removed_slot = sd_bus_slot_unref(m->job_removed_slot);
        sd_bus_flush_close_unref(m->bus);
        sd_event_unref(m->event);
        m->route_watch_source = sd_event_source_disable_unref(m->route_watch_source);
        m->net_filter = net_filter_free(m->net_filter);
        safe_close(m->seccomp_filters_fd);
        address_policy_done(&m->dify_network_allow);
        config_done(&m->config);
        free(m);
        return NULL;
}

/* ---- exec slots ---- */

bool manager_take_exec_slot(Manager *m, Session *s) {
        if (m->n_execs_running < m->config.max_concurrent_execs) {
                m->n_execs_running++;
                manager_state_changed(m);
                return true;
        }
        for (size_t i = 0; i < m->n_exec_waiters; i++)
                if (m->exec_waiters[i] == s)
                        return false;
        Session **n = realloc(m->exec_waiters, sizeof(Session *) * (m->n_exec_waiters + 1));
        if (!n)
                return false; /* the request's queue timer still fires */
        m->exec_waiters = n;
        m->exec_waiters[m->n_exec_waiters++] = s;
        manager_send_status(m);
        return false;
}

void manager_forget_exec_waiter(Manager *m, Session *s) {
        for (size_t i = 0; i < m->n_exec_waiters; i++)
                if (m->exec_waiters[i] == s) {
                        memmove(m->exec_waiters + i, m->exec_waiters + i + 1,
                                sizeof(Session *) * (m->n_exec_waiters - i - 1));
                        m->n_exec_waiters--;
                        manager_send_status(m);
                        return;
                }
}

void manager_release_exec_slot(Manager *m) {
        if (m->n_execs_running > 0)
                m->n_execs_running--;
        manager_state_changed(m);
        /* Hand the slot to the longest waiting session. */
        while (m->n_exec_waiters > 0 && m->n_execs_running < m->config.max_concurrent_execs) {
                Session *s = m->exec_waiters[0];
                manager_forget_exec_waiter(m, s);
                session_kick(s);
        }
}

/* ---- create slots ---- */

struct PendingCreate {
        LIST_FIELDS(PendingCreate, creates);  /* in manager->pending_creates, in order */
        Manager *manager;
        Session *session;
        SessionDoneCallback callback;
        void *userdata;
        sd_event_source *timer;
};

static void pending_create_unlink(Manager *m, PendingCreate *p) {
        LIST_REMOVE(creates, m->pending_creates, p);
        p->timer = sd_event_source_disable_unref(p->timer);
}

static int on_create_queue_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        PendingCreate *p = userdata;
        Manager *m = p->manager;

        pending_create_unlink(m, p);
        log_info("A session create waited %llus for a slot; refusing it.",
                 (unsigned long long) m->config.queue_timeout_sec);
        p->callback(p->session, -EUSERS, "session create queue is full", p->userdata);
        session_add_to_gc_queue(p->session);
        free(p);
        return 0;
}

int manager_start_session(Manager *m, Session *s, SessionDoneCallback cb, void *userdata) {
        PendingCreate *p;
        int r;

        if (m->n_creating < m->config.max_concurrent_creates) {
                r = session_start(s, cb, userdata);
                if (r < 0)
                        return r;
                m->n_creating++;
                s->holds_create_slot = true;
                return 0;
        }

        p = calloc(1, sizeof(PendingCreate));
        if (!p)
                return -ENOMEM;
        *p = (PendingCreate) { .manager = m, .session = s, .callback = cb, .userdata = userdata };
        r = sd_event_add_time_relative(m->event, &p->timer, CLOCK_MONOTONIC,
                                       m->config.queue_timeout_sec * USEC_PER_SEC, USEC_PER_MSEC * 100,
                                       on_create_queue_timeout, p);
        if (r < 0) {
                free(p);
                return r;
        }
        LIST_APPEND(creates, m->pending_creates, p);
        return 0;
}

void manager_create_finished(Manager *m) {
        if (m->n_creating > 0)
                m->n_creating--;

        while (m->pending_creates && m->n_creating < m->config.max_concurrent_creates) {
                PendingCreate *p = m->pending_creates;
                int r;

                pending_create_unlink(m, p);
                r = session_start(p->session, p->callback, p->userdata);
                if (r < 0) {
                        p->callback(p->session, -EHOSTDOWN, BUS_MESSAGE_START_FAILED, p->userdata);
                        session_add_to_gc_queue(p->session);
                } else {
                        m->n_creating++;
                        p->session->holds_create_slot = true;
                }
                free(p);
        }
}

void manager_cancel_pending_create(Manager *m, Session *s) {
        LIST_FOREACH(creates, p, m->pending_creates)
                if (p->session == s) {
                        pending_create_unlink(m, p);
                        p->callback(s, -EHOSTDOWN, "the session was released before it started",
                                    p->userdata);
                        free(p);
                        return;
                }
}

unsigned manager_count_pending_creates(Manager *m) {
        unsigned n = 0;

        LIST_FOREACH(creates, p, m->pending_creates)
                n++;
        return n;
}

Session *manager_find_session(Manager *m, const char *id) {
        LIST_FOREACH(sessions, s, m->sessions)
                if (streq(s->id, id))
                        return s;
        return NULL;
}

void manager_add_session(Manager *m, Session *s) {
        LIST_PREPEND(sessions, m->sessions, s);
        m->n_sessions++;
        if (s->ephemeral)
                m->n_ephemeral++;
        manager_state_changed(m);
}

void manager_remove_session(Manager *m, Session *s) {
        /* Also for one that left already (queued for GC, then freed) or never came. */
        if (LIST_CONTAINS(sessions, m->sessions, s)) {
                LIST_REMOVE(sessions, m->sessions, s);
                m->n_sessions--;
                if (s->ephemeral)
                        m->n_ephemeral--;
        }
        manager_state_changed(m);
}

/* ---- garbage collection ---- */

void manager_gc(Manager *m) {
        Session *s;

        /* Sessions freed here may queue others (their callbacks run from here): drained until empty. */
        while ((s = m->session_gc_queue)) {
                LIST_REMOVE(gc_queue, m->session_gc_queue, s);
                session_free(s);
        }
}

static int on_gc(sd_event_source *source, void *userdata) {
        manager_gc(userdata);
        return 0;
}

int manager_arm_gc(Manager *m) {
        int r;

        /* Going: manager_free() drains the queue. */
        if (sd_event_get_state(m->event) == SD_EVENT_FINISHED)
                return 0;
        if (!m->gc_source) {
                r = sd_event_add_defer(m->event, &m->gc_source, on_gc, m);
                if (r < 0)
                        return r;
                /* After whatever else is pending in this iteration. */
                (void) sd_event_source_set_priority(m->gc_source, SD_EVENT_PRIORITY_IDLE);
                (void) sd_event_source_set_description(m->gc_source, "session-gc");
        }
        return sd_event_source_set_enabled(m->gc_source, SD_EVENT_ONESHOT);
}

/* ---- children of freed sessions ---- */

struct ChildWatch {
        LIST_FIELDS(ChildWatch, watches);  /* in manager->child_watches */
        Manager *manager;
        sd_event_source *source;
};

static ChildWatch *child_watch_free(ChildWatch *w) {
        if (!w)
                return NULL;
        LIST_REMOVE(watches, w->manager->child_watches, w);
        w->manager->n_child_watches--;
        /* Inside its own callback the source stays valid until sd-event has reaped the child. */
        w->source = sd_event_source_disable_unref(w->source);
        return mfree(w);
}

static int on_child_exit(sd_event_source *source, const siginfo_t *si, void *userdata) {
        ChildWatch *w = userdata;

        log_debug("Reaped runner %i of a session that is gone (code=%i status=%i).", (int) si->si_pid,
                  si->si_code, si->si_status);
        child_watch_free(w);
        return 0;
}

int manager_watch_child(Manager *m, PidRef *ref) {
        ChildWatch *w;
        int r;

        /* The manager is going: the runner stays, and whoever inherits it reaps it. */
        if (sd_event_get_state(m->event) == SD_EVENT_FINISHED) {
                pidref_done(ref);
                return 0;
        }
        w = calloc(1, sizeof(ChildWatch));
        if (!w) {
                pidref_done(ref);
                return -ENOMEM;
        }
        *w = (ChildWatch) { .manager = m };
        r = sd_event_add_child_pidfd(m->event, &w->source, ref->fd, WEXITED, on_child_exit, w);
        if (r < 0) {
                pidref_done(ref);
                free(w);
                return r;
        }
        /* The source closes the pidfd when it is freed, after sd-event reaped the child (this fails
         * only on sources that are no child sources). */
        (void) sd_event_source_set_child_pidfd_own(w->source, true);
        *ref = PIDREF_NULL;
        LIST_PREPEND(watches, m->child_watches, w);
        m->n_child_watches++;
        return 0;
}

/* How long without sessions before we exit (0 in a Manager that manager_new() did not make). */
static uint64_t manager_idle_exit_usec(const Manager *m) {
        return m->idle_exit_usec ?: MANAGER_IDLE_EXIT_USEC;
}

/* A session no call waits on: the next instance takes it over from its record (session_recover()),
 * or stops it as nobody's if it is a pooled one (never recorded). */
static bool session_at_rest(const Session *s) {
        return s->state == SESSION_RUNNING && (!s->ephemeral || s->pooled) && !s->start_callback &&
               !s->in_flight && !s->queue_head && !s->release_waiters && !s->start_job && !s->stop_job &&
               !s->restore_slot && !s->archive.slot;
}

/* Whether every call taken has been answered: no create, run or systemd job under way, and no
 * session that one waits on (a create answered meanwhile leaves its session running, recorded). */
static bool manager_calls_answered(void *userdata) {
        Manager *m = userdata;

        if (m->pending_creates || m->n_creating > 0 || m->n_runs_running > 0 || m->n_runs_queued > 0 ||
            m->job_waits || m->session_gc_queue)
                return false;
        LIST_FOREACH(sessions, s, m->sessions)
                if (!session_at_rest(s))
                        return false;
        return true;
}

/* The longest a call may take: what the gateway waits for a create or a dify run. */
static uint64_t manager_drain_max_usec(const Manager *m) {
        return MAX(bus_timeout_session_usec(&m->config), bus_timeout_run_usec(&m->config));
}

static int on_idle_exit(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        int r;

        if (m->n_sessions > 0 || m->idle_exit || m->recover_retry_source)
                return 0;
        if (!m->bus)
                return sd_event_exit(m->event, 0);
        log_info("No sessions for %llus, giving up %s and exiting once the calls queued for it are "
                 "answered.",
                 (unsigned long long) (manager_idle_exit_usec(m) / USEC_PER_SEC), SESSION_MANAGER_BUS_NAME);
        r = bus_idle_exit_start(m->event, m->bus, SESSION_MANAGER_BUS_NAME, manager_drain_max_usec(m),
                                manager_calls_answered, m, &m->idle_exit);
        if (r < 0) {
                log_warning_errno(r, "Failed to give up the bus name, exiting at once: %m");
                return sd_event_exit(m->event, 0);
        }
        return 0;
}

void manager_send_status(Manager *m) {
        unsigned sessions = m->n_sessions - m->n_ephemeral;

        (void) sd_notifyf(
                false,
                "STATUS=%u session%s, %u exec%s running, %zu waiting; %u dify run%s running, %u waiting",
                sessions, sessions == 1 ? "" : "s", m->n_execs_running, m->n_execs_running == 1 ? "" : "s",
                m->n_exec_waiters, m->n_runs_running, m->n_runs_running == 1 ? "" : "s", m->n_runs_queued);
}

void manager_state_changed(Manager *m) {
        int r;

        manager_send_status(m);
        if (m->hooks.state_changed)
                m->hooks.state_changed(m);

        if (m->n_sessions > 0 || sd_event_get_state(m->event) == SD_EVENT_FINISHED) {
                if (m->idle_exit_source)
                        (void) sd_event_source_set_enabled(m->idle_exit_source, SD_EVENT_OFF);
                return;
        }
        if (m->idle_exit)
                return; /* exiting already */
        if (m->idle_exit_source) {
                (void) sd_event_source_set_time_relative(m->idle_exit_source, manager_idle_exit_usec(m));
                (void) sd_event_source_set_enabled(m->idle_exit_source, SD_EVENT_ONESHOT);
                return;
        }
        r = sd_event_add_time_relative(m->event, &m->idle_exit_source, CLOCK_MONOTONIC,
                                       manager_idle_exit_usec(m), USEC_PER_SEC, on_idle_exit, m);
        if (r < 0)
                log_warning_errno(r, "Failed to arm the idle exit timer, ignoring: %m");
}

static bool manager_uid_in_use(Manager *m, uid_t uid) {
        LIST_FOREACH(sessions, s, m->sessions)
                if (s->uid == uid)
                        return true;
        return false;
}

int manager_allocate_uid(Manager *m, uid_t *ret) {
        for (uint32_t i = 0; i < MANAGER_UID_POOL_SIZE; i++) {
                uint32_t slot = (m->uid_cursor + i) % MANAGER_UID_POOL_SIZE;
                uid_t uid = (uid_t) (m->config.uid_base + slot);

                if (manager_uid_in_use(m, uid))
                        continue;
                m->uid_cursor = (slot + 1) % MANAGER_UID_POOL_SIZE;
                *ret = uid;
                return 0;
        }
        return -EUSERS;
}

/* Whether a record names the session its file is for: one that doesn't is no record of it. */
static bool record_is_of(json_object *o, const char *id) {
        json_object *v;

        return json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "id", &v) &&
               json_object_is_type(v, json_type_string) && streq(json_object_get_string(v), id);
}

/* 1: the session is recovered, or on its way; 0: it could not be, and is being cleaned up. */
static int on_recover_retry(sd_event_source *source, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        m->recover_retry_source = sd_event_source_disable_unref(m->recover_retry_source);
        (void) manager_recover_sessions(m);
        manager_state_changed(m);
        return 0;
}

/* While a retry is armed the manager does not exit when idle: a session it could not take over
 * is still a session. Should even the timer fail, the next start of the manager takes it over. */
static void manager_arm_recover_retry(Manager *m) {
        int r;

        if (m->recover_retry_source)
                return;
        r = sd_event_add_time_relative(m->event, &m->recover_retry_source, CLOCK_MONOTONIC,
                                       MANAGER_RECOVER_RETRY_USEC, 100 * USEC_PER_MSEC, on_recover_retry, m);
        if (r < 0)
                log_warning_errno(r, "Failed to arm the session take-over retry, ignoring: %m");
}

static int manager_recover_one(Manager *m, const char *id, int dir_fd, const char *name) {
        _cleanup_free_ char *text = NULL;
        _cleanup_json_ json_object *o = NULL;
        _cleanup_close_ int fd = -EBADF;
        Session *s;
        int r;

        r = session_new_with_id(m, id, &s);
        if (r < 0)
                return r;
        manager_add_session(m, s);

        /* From here on every way out ends the session one way or the other: one left STARTING
         * would never end, and would keep the manager from ever exiting when idle. */
        fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || read_full_fd(fd, 256 * 1024, &text, NULL) < 0 ||
            json_parse(text, strlen(text), JSON_DEPTH_MAX, &o) < 0) {
                session_cleanup_stale(s, "its record is unreadable");
                return 0;
        }
        if (!record_is_of(o, id)) {
                session_cleanup_stale(s, "its record is malformed");
                return 0;
        }
        /* A record that reads well but can't be loaded or acted on now (memory) is no stale
         * session: its workspace may wait for its archive. The object goes, the scope, runner and
         * record stay as they are, and the next pass takes it over. */
        r = session_load_state(s, o);
        if (r >= 0)
                r = session_recover(s);
        if (r < 0) {
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to take over session %s, trying again in %llus: %m", s->id,
                           (unsigned long long) (MANAGER_RECOVER_RETRY_USEC / USEC_PER_SEC));
                session_free(s);
                manager_arm_recover_retry(m);
                return 1;
        }
        /* session_recover() may have found it stale itself (its runner is gone). */
        return s->end != SESSION_END_STALE;
}

int manager_recover_sessions(Manager *m) {
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        unsigned n = 0, n_stale = 0;
        int r;

        /* Sessions recorded by an earlier instance: reattach to their runners. */
        d = opendir(SESSION_STATE_DIR);
        if (d) {
                FOREACH_DIRENT(de, d,
                               log_warning_errno(errno, "Failed to read '" SESSION_STATE_DIR
                                                        "', ignoring: %m")) {
                        char id[SESSION_ID_LEN + 1];

                        if (strlen(de->d_name) != SESSION_ID_LEN + 5 || !endswith(de->d_name, ".json"))
                                continue;
                        memcpy(id, de->d_name, SESSION_ID_LEN);
                        id[SESSION_ID_LEN] = 0;
                        if (!session_id_is_valid(id) || manager_find_session(m, id))
                                continue; /* (a retry's pass: this one was taken over) */
                        r = manager_recover_one(m, id, dirfd(d), de->d_name);
                        if (r < 0)
                                log_warning_errno(r, "Failed to recover session %s, ignoring: %m", id);
                        if (r == 0)
                                n_stale++;
                        n++;
                }
                closedir(TAKE_PTR(d));
        }

        /* Runner directories nobody recorded (e.g. a crash between start and record): their
         * scopes are stopped and the directories removed. */
        d = opendir(SCOPEBOX_SESSIONS_RUNTIME_DIR);
        if (d) {
                FOREACH_DIRENT(de, d,
                               log_warning_errno(errno, "Failed to read '" SCOPEBOX_SESSIONS_RUNTIME_DIR
                                                        "', ignoring: %m")) {
                        Session *s;

                        if (!session_id_is_valid(de->d_name) || manager_find_session(m, de->d_name))
                                continue;
                        /* Recorded, but its take-over failed for now: the retry's. */
                        if (faccessat(AT_FDCWD, strjoina(SESSION_STATE_DIR "/", de->d_name, ".json"), F_OK,
                                      AT_SYMLINK_NOFOLLOW) >= 0)
                                continue;
                        if (session_new_with_id(m, de->d_name, &s) < 0)
                                continue;
                        manager_add_session(m, s);
                        session_cleanup_stale(s, "no record of it");
                }
        }

        if (n > 0)
                log_info("Found %u session%s of an earlier instance, %u of them cleaned up as stale.", n,
                         n == 1 ? "" : "s", n_stale);
        return 0;
}

int manager_startup(Manager *m, int (*attach_bus)(Manager *m)) {
        int r;

        r = mkdir_p(SCOPEBOX_SESSIONS_RUNTIME_DIR, 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", SCOPEBOX_SESSIONS_RUNTIME_DIR);

        r = bus_errors_register();
        if (r < 0)
                return log_error_errno(r, "Failed to register bus errors: %m");
        r = sd_bus_default_system(&m->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");
        r = sd_bus_attach_event(m->bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");

        r = attach_bus(m);
        if (r < 0)
                return log_error_errno(r, "Failed to register bus objects: %m");
        r = bus_add_log_control(m->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to register LogControl1: %m");
        r = systemd_subscribe(m);
        if (r < 0)
                return log_error_errno(r, "Failed to subscribe to systemd's job signals: %m");
        /* Before the first run: the filter's DENY maps are complete before any run can use them. */
        r = manager_watch_host_routes(m);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the routes to this host: %m");

        /* Once for all sessions and runs: no runner compiles a filter. */
        r = seccomp_filter_set_new(&m->seccomp_filters_fd);
        if (r < 0)
                return log_error_errno(r, "Failed to compile the sandbox's seccomp filters: %m");

        r = mkdir_p(SESSION_STATE_DIR, 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", SESSION_STATE_DIR);
        r = manager_recover_sessions(m);
        if (r < 0)
                return log_error_errno(r, "Failed to recover sessions: %m");
        r = manager_load_draining(m);
        if (r < 0)
                return r;

        /* Take the name last, so no call arrives before we can answer it. */
        r = sd_bus_request_name(m->bus, SESSION_MANAGER_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to acquire bus name %s: %m", SESSION_MANAGER_BUS_NAME);

        manager_state_changed(m);
        return 0;
}

int manager_run(Manager *m) {
        int r;

        (void) sd_notify(false, "READY=1");
        log_info("scopebox session manager %s running.", PROJECT_VERSION);
        r = sd_event_loop(m->event);
        if (r >= 0 && bus_idle_exit_gave_up(m->idle_exit))
                log_warning("Calls queued before the idle exit were still unanswered after %llus; exiting "
                            "anyway.",
                            (unsigned long long) (manager_drain_max_usec(m) / USEC_PER_SEC));
        return r;
}
