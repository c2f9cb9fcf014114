/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A run of the dify API: a fresh ephemeral session, one exec in the restrictive profile, released.
 *
 * Runs are stateless, so each gets a session of its own (its own scope, uid and namespaces, as a
 * sidecar session), marked ephemeral: never recorded on disk nor counted against
 * SANDBOX_MAX_SESSIONS, and released as soon as its exec has answered. At most MAX_WORKERS runs
 * execute at once; the others wait here in order.
 *
 * The pool (SANDBOX_DIFY_POOL_SIZE): once runs come, a few such sessions are started in advance —
 * scope, runner, workspace, nothing else: no code has run in them, no sandbox exists yet, and the
 * run's network (slirp4netns) and proxy settings come with its exec, as for a fresh session. A run
 * takes one that is ready instead of starting its own, uses it once and releases it as always; a
 * replacement starts meanwhile. Pooled sessions expire RUN_POOL_IDLE_USEC after the last run, so
 * the pool empties without runs and the manager may exit; nothing refills it until the next run. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-event.h>

#include "list.h"
#include "log.h"
#include "macro.h"
#include "run.h"

/* A run's session outlives its exec by at most this (the runner's own backstop comes later). */
#define RUN_IDLE_SLACK_USEC (60 * USEC_PER_SEC)
#define RUN_CANCELLED_MESSAGE "cancelled: the caller hung up"
/* A pooled session nobody took goes after this; runs keep the pool filled. */
#define RUN_POOL_IDLE_USEC (60 * USEC_PER_SEC)
/* After a pooled start failed, runs start their own sessions for this long before the pool is
 * tried again: a broken start costs nothing but the runs' own attempts. */
#define RUN_POOL_BACKOFF_USEC (10 * USEC_PER_SEC)

struct Run {
        Manager *manager;
        LIST_FIELDS(Run, queue);   /* in manager->runs_queue while it waits for a worker */
        int code_fd;
        char *language;
        bool network;
        char *trace_id, *span_id, *user_id, *user_type;
        Session *session;          /* while the run uses it, for the journal */
        ExecCall *exec;            /* its exec, until that answers */
        bool cancelled;            /* its caller hung up */
        sd_event_source *release_source;
        RunCallback callback;
        void *userdata;
        bool running;
        bool pooled;               /* it took a session of the pool */
};

static Run *run_free(Run *r) {
        if (!r)
                return NULL;
        safe_close(r->code_fd);
        sd_event_source_disable_unref(r->release_source);
        free(r->language);
        free(r->trace_id);
        free(r->span_id);
        free(r->user_id);
        free(r->user_type);
        return mfree(r);
}
DEFINE_CLEANUP_FUNC(Run *, run_free);

static void run_log(Run *r, int level, int error, const char *what) {
        log_struct(level, error,
                   LOG_FIELDS(r->session ? LOG_SESSION_FIELD(r->session->id) : "SCOPEBOX_SESSION_ID=",
                              strjoina("SCOPEBOX_LANGUAGE=", r->language),
                              strjoina("SCOPEBOX_TRACE_ID=", strempty(r->trace_id)),
                              strjoina("SCOPEBOX_SPAN_ID=", strempty(r->span_id)),
                              strjoina("SCOPEBOX_USER_ID=", strempty(r->user_id)),
                              strjoina("SCOPEBOX_USER_TYPE=", strempty(r->user_type))),
                   "Run (%s) in %s session %s %s.", r->language, r->pooled ? "pooled" : "new",
                   r->session ? r->session->id : "-", what);
}

static void manager_runs_next(Manager *m);
static void run_pool_keep(Manager *m);
static void run_pool_fill(Manager *m);

/* The run is over; its worker slot goes to the next run, from an event of its own rather than
 * from inside the session's callback. */
static int on_release(sd_event_source *source, void *userdata) {
        Run *r = userdata;
        Manager *m = r->manager;

        run_free(r);
        manager_runs_next(m);
        return 0;
}

/* s: the run's session, when the run ends it (the exec answered, or could not be queued); NULL
 * when the session failed to start and goes by itself. The run keeps no pointer to it. */
static void run_finish(Run *r, Session *s, int error, const char *message, const ExecResult *result) {
        Manager *m = r->manager;
        RunCallback cb = TAKE_PTR(r->callback);
        int q;

        r->exec = NULL;
        if (r->cancelled) {
                error = -ECANCELED;
                message = RUN_CANCELLED_MESSAGE;
                result = NULL;
        }

        if (cb)
                cb(error, message, result, r->userdata);
        if (r->running) {
                r->running = false;
                m->n_runs_running--;
        }
        r->session = NULL;
        /* Safe inside the session's own callbacks: a session is only freed from the event loop. */
        if (s)
                (void) session_release(s, SESSION_END_RUN_FINISHED, NULL, NULL);
        /* The pool is kept and refilled once the run has answered, not while it executes: on a
         * small machine a scope starting next to the run's interpreter slowed the run down by
         * more than the pool saved. */
        run_pool_keep(m);
        q = sd_event_add_defer(m->event, &r->release_source, on_release, r);
        if (q < 0)
                (void) on_release(NULL, r);
}

static void on_exec_done(Session *s, int error, const char *message, const ExecResult *result,
                         void *userdata) {
        Run *r = userdata;
        char detail[128];

        r->exec = NULL;
        if (error == -ECANCELED || r->cancelled)
                snprintf(detail, sizeof(detail), "was cancelled: its caller hung up");
        else if (error < 0)
                snprintf(detail, sizeof(detail), "failed: %s", strna(message));
        else
                snprintf(detail, sizeof(detail), "finished with exit code %i%s after %llu ms",
                         result->exit_code, result->timed_out ? " (timed out)" : "",
                         (unsigned long long) (result->duration_usec / USEC_PER_MSEC));
        run_log(r, error < 0 && error != -ECANCELED ? LOG_WARNING : LOG_INFO,
                error == -ECANCELED ? 0 : error, detail);
        run_finish(r, s, error, message, error < 0 ? NULL : result);
}

static void on_session_started(Session *s, int error, const char *message, void *userdata) {
        Run *r = userdata;
        const Config *c = &r->manager->config;
        ExecParameters p = {
                .timeout_ms = c->dify_worker_timeout_sec * 1000,
                .output_limit = c->dify_max_output_bytes,
                .language = r->language,
                .no_processes = true,
                .network = r->network,
                .http_proxy = c->dify_http_proxy,
                .https_proxy = c->dify_https_proxy,
                .stream_fd = -EBADF,
                .stdin_fd = -EBADF,
        };
        int q;

        if (error < 0 || r->cancelled) {
                /* Never became an exec, but the run failed (or waited too long for a create slot,
                 * or its caller hung up meanwhile): count it, so that scopebox_execs_total covers
                 * every run. */
                metrics_count_exec(&r->manager->metrics, r->cancelled ? -ECANCELED : error, NULL);
                run_log(r, r->cancelled ? LOG_INFO : LOG_WARNING, r->cancelled ? 0 : error,
                        r->cancelled ? "was cancelled before it started: its caller hung up"
                                     : "could not start");
                /* A session that did start is ours to release. */
                run_finish(r, error < 0 ? NULL : s, error < 0 ? error : -ECANCELED,
                           message ?: "failed to start the sandbox", NULL);
                return;
        }
        q = session_exec(s, TAKE_FD(r->code_fd), &p, on_exec_done, r, &r->exec);
        if (q < 0)
                run_finish(r, s, q, "failed to start the run", NULL);
}

/* ---- the pool ---- */

static unsigned run_pool_size(const Manager *m) {
        return (unsigned) MIN(m->config.dify_pool_size, m->config.dify_max_workers);
}

static unsigned run_pool_count(const Manager *m) {
        unsigned n = 0;

        for (const Session *s = m->sessions; s; s = s->sessions_next)
                if (s->pooled && !session_state_is_ending(s->state))
                        n++;
        return n;
}

static uint64_t run_now(Manager *m) {
        uint64_t t = 0;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &t);
        return t;
}

static void on_pool_started(Session *s, int error, const char *message, void *userdata) {
        Manager *m = s->manager;

        if (error >= 0) {
                run_pool_fill(m);  /* with the create slot it held */
                return;
        }
        /* The session goes by itself. Released while it started (the manager stops): nothing wrong. */
        s->pooled = false;
        if (session_state_is_ending(s->state))
                return;
        /* Runs start their own for a while. */
        m->run_pool_failed_usec = run_now(m);
        log_struct(LOG_WARNING, error, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                   "Pooled run session %s could not start (%s); runs start their own for %llus.", s->id,
                   strna(message), (unsigned long long) (RUN_POOL_BACKOFF_USEC / USEC_PER_SEC));
}

/* Tops the pool up to its size, in the background. Failures only mean runs start their own. */
static void run_pool_fill(Manager *m) {
        unsigned want = run_pool_size(m);
        int st = sd_event_get_state(m->event);

        if (st == SD_EVENT_EXITING || st == SD_EVENT_FINISHED)
                return;  /* the manager stops: its sessions go, none start */
        if (m->run_pool_failed_usec > 0 && run_now(m) < m->run_pool_failed_usec + RUN_POOL_BACKOFF_USEC)
                return;
        for (unsigned n = run_pool_count(m); n < want; n++) {
                Session *s;
                int q;

                /* Only with a create slot free now: the pool never makes a create (or a run's own
                 * start) wait. It is topped up again when the next run takes from it. */
                if (m->pending_creates || m->n_creating >= m->config.max_concurrent_creates)
                        return;

                q = session_new(m, &s);
                if (q < 0) {
                        log_warning_errno(q, "Failed to allocate a pooled run session, ignoring: %m");
                        return;
                }
                s->ephemeral = s->pooled = true;
                s->idle_ttl_usec = RUN_POOL_IDLE_USEC;
                manager_add_session(m, s);
                q = manager_start_session(m, s, on_pool_started, NULL);
                if (q < 0) {
                        manager_remove_session(m, s);
                        session_free(s);
                        m->run_pool_failed_usec = run_now(m);
                        log_warning_errno(q, "Failed to start a pooled run session, ignoring: %m");
                        return;
                }
        }
}

/* A run came: the pool lives another RUN_POOL_IDLE_USEC, and is topped up. */
static void run_pool_keep(Manager *m) {
        LIST_FOREACH(sessions, s, m->sessions)
                if (s->pooled)
                        session_touch(s);
        run_pool_fill(m);
}

/* A pooled session that never ran anything, now the caller's: a ready one, else one still starting
 * (its start then answers the run); NULL when there is none. */
static Session *run_pool_take(Manager *m) {
        Session *starting = NULL;

        LIST_FOREACH(sessions, s, m->sessions) {
                if (!s->pooled || s->n_execs > 0)
                        continue;
                if (s->state == SESSION_RUNNING && !s->in_flight && s->n_queued == 0) {
                        s->pooled = false;
                        return s;
                }
                if (session_state_is_starting(s->state) && s->start_callback == on_pool_started && !starting)
                        starting = s;
        }
        if (starting)
                starting->pooled = false;
        return starting;
}

static int run_start(Run *r) {
        Manager *m = r->manager;
        Session *s;
        int q;

        /* The pool's next sandboxes are made for what the runs ask now (Dify's default: a network). */
        m->run_pool_network = r->network;
        s = run_pool_take(m);
        if (s) {
                s->idle_ttl_usec = m->config.dify_worker_timeout_sec * USEC_PER_SEC + RUN_IDLE_SLACK_USEC;
                r->session = s;
                r->pooled = true;
                r->running = true;
                m->n_runs_running++;
                if (session_state_is_starting(s->state)) {
                        /* Its start goes on for the run: a failure is the run's, as on its own session's. */
                        s->start_callback = on_session_started;
                        s->start_userdata = r;
                } else {
                        session_touch(s);
                        on_session_started(s, 0, NULL, r);
                }
                return 0;
        }

        q = session_new(m, &s);
        if (q < 0)
                return q;
        s->ephemeral = true;
        s->idle_ttl_usec = m->config.dify_worker_timeout_sec * USEC_PER_SEC + RUN_IDLE_SLACK_USEC;
        manager_add_session(m, s);
        r->session = s;
        r->running = true;
        m->n_runs_running++;

        q = manager_start_session(m, s, on_session_started, r);
        if (q < 0) {
                r->running = false;
                m->n_runs_running--;
                r->session = NULL;
                session_free(s); /* it leaves the manager's list itself */
                return q;
        }
        return 0;
}

static void manager_runs_next(Manager *m) {
        while (m->runs_queue && m->n_runs_running < m->config.dify_max_workers) {
                Run *r = m->runs_queue;
                int q;

                LIST_REMOVE(queue, m->runs_queue, r);
                m->n_runs_queued--;
                q = run_start(r);
                if (q < 0) {
                        metrics_count_exec(&m->metrics, q, NULL);
                        run_log(r, LOG_WARNING, q, "could not start");
                        run_finish(r, NULL, q, "failed to start the sandbox", NULL);
                }
        }
}

static int strdup_opt(const char *s, char **ret) {
        if (!s)
                return 0;
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

int manager_queue_run(Manager *m, int code_fd, const RunRequest *req, RunCallback cb, void *userdata,
                      Run **ret_run) {
        _cleanup_(run_freep) Run *r = NULL;

        r = calloc(1, sizeof(Run));
        if (!r) {
                safe_close(code_fd);
                return -ENOMEM;
        }
        *r = (Run) { .manager = m,
                     .code_fd = code_fd,
                     .network = req->network,
                     .callback = cb,
                     .userdata = userdata };
        if (m->n_runs_queued >= RUN_QUEUE_MAX) {
                metrics_count_exec(&m->metrics, -EBUSY, NULL);
                return -EBUSY;
        }
        r->language = strdup(req->language);
        if (!r->language || strdup_opt(req->trace_id, &r->trace_id) < 0 ||
            strdup_opt(req->span_id, &r->span_id) < 0 || strdup_opt(req->user_id, &r->user_id) < 0 ||
            strdup_opt(req->user_type, &r->user_type) < 0)
                return -ENOMEM;

        if (ret_run)
                *ret_run = r;
        LIST_APPEND(queue, m->runs_queue, TAKE_PTR(r));
        m->n_runs_queued++;
        m->metrics.runs++;
        manager_runs_next(m);
        manager_send_status(m);
        return 0;
}

void manager_runs_flush(Manager *m) {
        while (m->runs_queue) {
                Run *r = m->runs_queue;

                LIST_REMOVE(queue, m->runs_queue, r);
                m->n_runs_queued--;
                if (r->callback)
                        r->callback(-ESHUTDOWN, "the service is stopping", NULL, r->userdata);
                run_free(r);
        }
}

void manager_cancel_run(Run *r) {
        Manager *m = r->manager;

        if (!r->callback || r->cancelled)
                return; /* answered already, or on its way */
        r->cancelled = true;

        if (!r->running) {
                RunCallback cb = TAKE_PTR(r->callback);

                /* Still waiting for a worker: nothing of it exists yet. */
                LIST_REMOVE(queue, m->runs_queue, r);
                m->n_runs_queued--;
                metrics_count_exec(&m->metrics, -ECANCELED, NULL);
                run_log(r, LOG_INFO, 0, "was cancelled while it waited for a worker: its caller hung up");
                cb(-ECANCELED, RUN_CANCELLED_MESSAGE, NULL, r->userdata);
                run_free(r);
                manager_send_status(m);
                return;
        }
        if (r->exec) {
                /* Executing, or queued in its session: on_exec_done() finishes the run. */
                session_exec_abandon(r->exec);
                return;
        }
        /* Its session is starting: stopping it undoes the start, and on_session_started() hears of
         * it and finishes the run (once no process of the session is left to stop). */
        if (r->session)
                (void) session_release(r->session, SESSION_END_RUN_CANCELLED, NULL, NULL);
}
