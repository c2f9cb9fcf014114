/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's execs: the runner's exec request and result, cancel and interrupt. */
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
#include "session-private.h"

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

/* The runner's result (runner_exec_result, declared in runner-protocol.c), checked against the
 * memfd that holds its bytes. Strings and arrays stay owned by 'reply' and 'p'. */
static int exec_reply_parse(json_object *reply, int data_fd, RunnerExecResult *p, ExecResult *ret) {
        struct stat st;
        int r;

        if (data_fd < 0 || fstat(data_fd, &st) < 0)
                return -EBADMSG;
        r = schema_parse(&runner_exec_result, reply, p, NULL);
        if (r < 0)
                return r;
        /* Every size is at most INT64_MAX (the declaration): their sums can't wrap. */
        if (p->stdout_size + p->stderr_size > (uint64_t) st.st_size)
                return -EBADMSG;
        for (size_t i = 0; i < p->n_files; i++)
                if (p->files[i].offset + p->files[i].size > (uint64_t) st.st_size)
                        return -EBADMSG;
        if ((p->exit_reason && !bus_exit_reason_is_valid(p->exit_reason)) ||
            (p->kernel && !bus_kernel_state_is_valid(p->kernel)) ||
            p->resources.has_cpu != p->resources.has_rss)
                return -EBADMSG;

        *ret = (ExecResult) {
                .exit_code = p->exit_code,
                .signal = p->signal,
                .timed_out = p->timed_out,
                .oom_killed = p->oom_killed,
                .pids_limited = p->pids_limited,
                .duration_usec = p->duration_usec,
                .stdout_size = p->stdout_size,
                .stderr_size = p->stderr_size,
                .stdout_truncated = p->stdout_truncated,
                .stderr_truncated = p->stderr_truncated,
                .files = p->files,
                .n_files = p->n_files,
                .files_skipped = p->files_skipped,
                .blocked = p->blocked,
                .n_blocked = p->n_blocked,
                .data_fd = data_fd,
                .exit_reason = p->exit_reason,
                .kernel = p->kernel,
                .has_usage = p->resources.has_cpu,
                .has_written = p->resources.has_written,
                .has_processes = p->resources.has_processes,
                .cpu_usec = p->resources.cpu_usec,
                .max_rss_bytes = p->resources.max_rss_bytes,
                .written_bytes = p->resources.written_bytes,
                .processes = p->resources.processes,
        };
        return 0;
}

static void on_exec_reply(Session *s, int error, const char *message, json_object *reply, int fd,
                          void *userdata) {
        ExecCall *c = userdata;
        _cleanup_(runner_exec_result_done) RunnerExecResult parsed = {};
        ExecResult result;
        int r;

        if (c->released) {
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), strjoina("SCOPEBOX_EXEC_ID=", c->exec_id)),
                           "Exec %s of session %s was stopped: its session is released.", c->exec_id, s->id);
                error = -ENXIO;
                message = BUS_MESSAGE_NO_SUCH_SESSION;
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
        r = exec_reply_parse(reply, fd, &parsed, &result);
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
        free(c);
}

/* A stateful session's python cells run in its kernel (the sidecar profile). */
static bool session_exec_is_stateful(const Session *s, const ExecParameters *p) {
        return s->stateful && (!p->language || streq(p->language, "python3")) && !p->no_processes &&
               !p->network;
}

int session_exec(Session *s, int code_fd, const ExecParameters *p, ExecCallback cb, void *userdata,
                 ExecCall **ret_call) {
        _cleanup_close_ int fd = code_fd, stream_fd = -EBADF, stdin_fd = -EBADF;
        json_object *msg = NULL;
        ExecCall *c;
        char exec_id[32];
        Config *cfg = &s->manager->config;
        int r;

        if (s->state != SESSION_RUNNING)
                return -ENXIO;
        /* Records are a kernel's cell's, and go nowhere but onto a stream. */
        if (p->display && (!session_exec_is_stateful(s, p) || p->stream_fd < 0))
                return -EINVAL;
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
                        .stateful = session_exec_is_stateful(s, p),
                        .network = p->network,
                        .display = p->display,
                        .stdin = p->stdin_fd >= 0,
                        .interrupt = p->interrupt && session_exec_is_stateful(s, p),
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
                if (stream_fd >= 0 && p->stdin_fd >= 0)
                        stdin_fd = fcntl(p->stdin_fd, F_DUPFD_CLOEXEC, 3);
                if (stream_fd < 0 || (p->stdin_fd >= 0 && stdin_fd < 0)) {
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
        r = session_enqueue_full(s, msg, TAKE_FD(fd), TAKE_FD(stream_fd), TAKE_FD(stdin_fd),
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
                            released ? BUS_MESSAGE_NO_SUCH_SESSION : EXEC_CANCELLED_MESSAGE, NULL,
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

void session_exec_abandon(ExecCall *c) {
        exec_call_stop(c, false);
}

int session_exec_cancel_running(Session *s) {
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

void session_stop_running_exec(Session *s) {
        if (s->in_flight && s->in_flight->is_exec && s->in_flight->callback == on_exec_reply)
                exec_call_stop(s->in_flight->userdata, true);
}

bool session_exec_running(const Session *s) {
        return s->in_flight && s->in_flight->is_exec;
}
