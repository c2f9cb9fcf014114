/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-runner: the per-session supervisor that lives in the session's transient scope.
 *
 * Started by the session manager with its control socket (already bound and listening) on fd 3.
 * It keeps the session's private filesystems in a mount namespace of its own and runs each exec
 * in fresh PID/mount/network/IPC/UTS namespaces (sandbox.c). It survives restarts of the
 * manager, which reconnects through the socket's path.
 *
 * This file: main(), the control connection and the dispatch of its requests, the idle backstop.
 * The requests themselves: init in runner-session.c, exec and cancel in runner-exec.c (with what
 * an exec from the template needs in runner-template.c), the file operations in runner-files.c, archive
 * and restore in runner-archive.c; runner.h holds what they share. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "cgroup-events.h"
#include "daemon-util.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "outputs.h"
#include "runner-protocol.h"
#include "runner.h"
#include "string-util.h"

#define RUNNER_LISTEN_FD 3

int runner_send(Runner *r, uint64_t generation, json_object *msg, const int *fds, size_t n_fds) {
        if (r->conn_fd < 0 || generation != r->connection_generation)
                return -ENOTCONN; /* The manager that asked is gone; a new one will ask again. */
        return runner_message_send(r->conn_fd, msg, fds, n_fds);
}

int runner_send_reply(Runner *r, uint64_t generation, const SchemaMessage *m, const void *data,
                      const int *fds, size_t n_fds) {
        _cleanup_json_ json_object *reply = NULL;
        int q;

        q = schema_build(m, data, &reply);
        if (q < 0)
                return q;
        return runner_send(r, generation, reply, fds, n_fds);
}

int runner_send_error(Runner *r, uint64_t generation, int error, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        int q;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);

        error = abs(error);
        if (error == 0 || error > 4095)
                error = EIO;
        q = runner_send_reply(r, generation, &runner_error_reply,
                              &(RunnerErrorReply) { .error_number = error, .error = msg }, NULL, 0);
        if (q == -ERANGE)
                /* A text that is no valid UTF-8 (a name it quotes): the error still goes, unnamed. */
                q = runner_send_reply(
                        r, generation, &runner_error_reply,
                        &(RunnerErrorReply) { .error_number = error, .error = strerror(error) }, NULL, 0);
        return q;
}

int runner_send_ok(Runner *r, uint64_t generation, const int *fds, size_t n_fds) {
        return runner_send_reply(r, generation, &runner_ok_reply, &(RunnerNoParameters) {}, fds, n_fds);
}

/* ---- backstop ---- */

/* The manager releases idle sessions; should it be gone for good, the runner ends its own
 * session after the same idle time plus a margin, so no scope outlives its TTL for long. */
static int on_backstop(sd_event_source *s, uint64_t usec, void *userdata) {
        Runner *r = userdata;

        if (r->exec || r->archive_job) {
                /* Busy is not idle: look again later. */
                runner_touch(r);
                return 0;
        }
        log_struct(LOG_WARNING, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), "SCOPEBOX_EVENT=runner-backstop"),
                   "No request for session %s in %llus; ending the session.", r->session_id,
                   (unsigned long long) (r->backstop_usec / USEC_PER_SEC));
        return sd_event_exit(r->event, 0);
}

void runner_touch(Runner *r) {
        if (r->backstop_usec == 0)
                return;
        if (!r->backstop_source) {
                if (sd_event_add_time_relative(r->event, &r->backstop_source, CLOCK_BOOTTIME,
                                               r->backstop_usec, USEC_PER_SEC, on_backstop, r) < 0)
                        log_warning("Failed to arm the idle backstop, ignoring.");
                return;
        }
        (void) sd_event_source_set_time_relative(r->backstop_source, r->backstop_usec);
        (void) sd_event_source_set_enabled(r->backstop_source, SD_EVENT_ONESHOT);
}

/* ---- control connection ---- */

/* The manager that asked for the exec or archive job running now is gone: its connection closed
 * (it died, or stopped), or a new instance took over. Nobody can receive the result any more, so
 * it is ended the way a cancel ends it — PID 1 of the sandbox, or the helper, killed: no process
 * of it is left — and the next manager finds the session idle, not busy until a timeout. */
static void runner_end_orphans(Runner *r) {
        RunnerExec *e = r->exec;
        ArchiveJob *j = r->archive_job;

        if (e && !e->exited && !e->orphaned && !e->cancelled) {
                e->orphaned = true;
                e->timer_source = sd_event_source_disable_unref(e->timer_source);
                log_struct(
                        LOG_NOTICE, 0,
                        LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                   strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                        "The manager went away during exec %s of session %s; ending it, nobody can receive "
                        "its result.",
                        e->exec_id, r->session_id);
                (void) pidref_kill(&e->init, SIGKILL);
        }
        if (j && pidref_is_set(&j->init) && !j->orphaned) {
                j->orphaned = true;
                log_struct(LOG_NOTICE, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "The manager went away during the %s of session %s; ending it.",
                           j->restore ? "restore" : "archive", r->session_id);
                (void) pidref_kill(&j->init, SIGKILL);
        }
}

/* Whether an exec or archive job of an earlier connection is still being ended. */
static bool runner_orphan_running(Runner *r) {
        return (r->exec && r->exec->connection_generation != r->connection_generation) ||
               (r->archive_job && r->archive_job->connection_generation != r->connection_generation);
}

/* Requests of a new manager wait (unread) while an orphan is ended, so that they find the session
 * idle; they are read once it is over. */
void runner_resume_connection(Runner *r) {
        if (r->conn_source && !runner_orphan_running(r))
                (void) sd_event_source_set_enabled(r->conn_source, SD_EVENT_ON);
}

static void runner_close_connection(Runner *r) {
        if (r->conn_fd >= 0)
                runner_end_orphans(r);
        r->conn_source = sd_event_source_disable_unref(r->conn_source);
        r->conn_fd = safe_close(r->conn_fd);
}

/* Answered while an exec or archive job runs, too. */
static int runner_handle_ping(Runner *r, const void *params, const int *fds, size_t n_fds) {
        return runner_send_reply(r, r->connection_generation, &runner_ping_reply,
                                 &(RunnerPingReply) { .initialized = r->initialized,
                                                      .busy = r->exec || r->archive_job,
                                                      .cancel = true },
                                 NULL, 0);
}

static int runner_dispatch_archive(Runner *r, const void *params, const int *fds, size_t n_fds) {
        /* Archived at its release: a stateful session's kernel ends first, so that nothing of the
         * session outlives its last exec while the archive is pending. */
        runner_kernel_stop(r);
        return runner_handle_archive(r, params, n_fds > 0 ? fds[0] : -EBADF, false);
}

static int runner_dispatch_restore(Runner *r, const void *params, const int *fds, size_t n_fds) {
        runner_kernel_stop(r);
        return runner_handle_archive(r, params, n_fds > 0 ? fds[0] : -EBADF, true);
}

typedef enum RequestFlags {
        REQUEST_INITIALIZED = 1 << 0, /* unknown before init */
        REQUEST_WHILE_BUSY = 1 << 1, /* taken while an exec or archive job runs */
        REQUEST_NO_ANSWER = 1 << 2, /* answered by the exec it names, if at all */
        REQUEST_CHANGES_FILES = 1 << 3, /* the next exec's outputs can't be told from the last one's */
} RequestFlags;

/* Every request the runner takes: its declaration (runner-protocol.c), what it needs, its handler
 * (given the parsed request and the fds that came with it). */
static const struct {
        const SchemaMessage *message;
        RequestFlags flags;
        int (*handle)(Runner *r, const void *params, const int *fds, size_t n_fds);
} runner_requests[] = {
        { &runner_init_request, 0, runner_handle_init },
        { &runner_exec_request, 0, runner_handle_exec },
        { &runner_cancel_request, REQUEST_WHILE_BUSY | REQUEST_NO_ANSWER, runner_handle_cancel },
        { &runner_ping_request, REQUEST_WHILE_BUSY, runner_handle_ping },
        { &runner_write_request, REQUEST_INITIALIZED | REQUEST_CHANGES_FILES, runner_handle_write },
        { &runner_read_request, REQUEST_INITIALIZED, runner_handle_read },
        { &runner_list_request, REQUEST_INITIALIZED, runner_handle_list },
        { &runner_reset_kernel_request, REQUEST_INITIALIZED, runner_handle_reset_kernel },
        { &runner_reset_inputs_request, REQUEST_INITIALIZED, runner_handle_reset_inputs },
        { &runner_archive_request, REQUEST_INITIALIZED, runner_dispatch_archive },
        { &runner_restore_request, REQUEST_INITIALIZED | REQUEST_CHANGES_FILES, runner_dispatch_restore },
        { &runner_fs_stat_request, REQUEST_INITIALIZED, runner_handle_fs_stat },
        { &runner_fs_list_request, REQUEST_INITIALIZED, runner_handle_fs_list },
        { &runner_fs_mkdir_request, REQUEST_INITIALIZED | REQUEST_CHANGES_FILES, runner_handle_fs_mkdir },
        { &runner_fs_move_request, REQUEST_INITIALIZED | REQUEST_CHANGES_FILES, runner_handle_fs_move },
        { &runner_fs_remove_request, REQUEST_INITIALIZED | REQUEST_CHANGES_FILES, runner_handle_fs_remove },
};

/* One request: parsed by its declaration, checked against the runner's state, handed on. */
static int runner_dispatch(Runner *r, json_object *req, const int *fds, size_t n_fds) {
        const SchemaMessage *m = runner_request_lookup(req);
        size_t i;
        int q;

        for (i = 0; m && i < ELEMENTSOF(runner_requests); i++)
                if (runner_requests[i].message == m)
                        break;
        if (!m || i >= ELEMENTSOF(runner_requests) ||
            ((runner_requests[i].flags & REQUEST_INITIALIZED) && !r->initialized))
                return runner_send_error(r, r->connection_generation, EOPNOTSUPP, "unknown operation");
        if ((r->exec || r->archive_job) && !(runner_requests[i].flags & REQUEST_WHILE_BUSY))
                /* One request at a time; the manager queues. */
                return runner_send_error(r, r->connection_generation, EBUSY,
                                         r->exec ? "an exec is running"
                                                 : "an archive is being made or restored");

        /* Room for the largest request: every declaration's struct is smaller. */
        union {
                RunnerInitRequest init;
                RunnerExecRequest exec;
                RunnerCancelRequest cancel;
                RunnerFileRequest file;
                RunnerArchiveRequest archive;
        } params;
        assert(m->size <= sizeof(params));
        q = schema_parse(m, req, &params, NULL);
        schema_done(m, &params); /* requests have no arrays: nothing to keep */
        if (q < 0) {
                if (runner_requests[i].flags & REQUEST_NO_ANSWER)
                        return 0;
                return runner_send_error(r, r->connection_generation, q == -ENOMEM ? ENOMEM : EINVAL,
                                         "invalid %s request", m->name);
        }
        if (runner_requests[i].flags & REQUEST_CHANGES_FILES) {
                output_set_done(&r->outputs_snapshot);
                r->outputs_snapshot_valid = false;
        }
        return runner_requests[i].handle(r, &params, fds, n_fds);
}

static int on_connection(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Runner *r = userdata;

        if (runner_orphan_running(r)) {
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                return 0;
        }

        for (;;) {
                _cleanup_json_ json_object *req = NULL;
                int fds[RUNNER_MESSAGE_FDS_MAX];
                size_t n_fds = 0;
                bool busy;
                int q;

                q = runner_message_recv(fd, &req, fds, &n_fds);
                if (q == -EAGAIN)
                        return 0;
                if (q < 0) {
                        if (q != -ECONNRESET)
                                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                           "Dropping the control connection: %m");
                        runner_close_connection(r);
                        return 0;
                }

                busy = r->exec || r->archive_job; /* only a ping or a cancel is taken then */
                q = runner_dispatch(r, req, fds, n_fds);
                for (size_t i = 0; i < n_fds; i++)
                        safe_close(fds[i]);
                runner_touch(r);
                if (q < 0 && r->conn_fd >= 0 && q != -ENOTCONN)
                        log_struct(LOG_DEBUG, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Request failed: %m");
                /* Every request is answered: one that failed before it could say so (out of memory)
                 * is answered with its error rather than left to the manager's timeout; one that
                 * started a job is answered by the job. */
                if (q == -ENOMEM && r->conn_fd >= 0 && (busy || !(r->exec || r->archive_job)))
                        (void) runner_send_error(r, r->connection_generation, ENOMEM, "out of memory");
                if (r->conn_fd < 0)
                        return 0;
        }
}

static int on_listen(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Runner *r = userdata;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int cfd, q;

        cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0)
                return 0;
        /* Only the session manager (root) may drive us. */
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != 0) {
                safe_close(cfd);
                return 0;
        }
        /* A new manager instance replaces the old connection. */
        runner_close_connection(r);
        r->conn_fd = cfd;
        r->connection_generation++;
        q = sd_event_add_io(r->event, &r->conn_source, cfd, EPOLLIN, on_connection, r);
        if (q < 0) {
                log_error_errno(q, "Failed to watch the control connection: %m");
                runner_close_connection(r);
        }
        return 0;
}

static int parse_argv(int argc, char *argv[], Runner *r) {
        static const struct option options[] = {
                { "session-id", required_argument, NULL, 's' },
                { "session-root", required_argument, NULL, 'r' },
                { "network-filter", no_argument, NULL, 'n' },
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        if (!session_id_is_valid(optarg))
                                return log_error_errno(EINVAL, "Invalid session id '%s'.", optarg);
                        strcpy(r->session_id, optarg);
                        break;
                case 'r':
                        free(r->session_root);
                        r->session_root = strdup(optarg);
                        if (!r->session_root)
                                return log_oom();
                        break;
                case 'n':
                        /* The manager's programs, on the fds after the control socket. */
                        for (int i = 0; i < _NET_FILTER_PROGRAM_MAX; i++) {
                                if (fcntl(NET_FILTER_RUNNER_FD + i, F_SETFD, FD_CLOEXEC) < 0)
                                        return log_error_errno(errno, "No network filter on fd %i: %m",
                                                               NET_FILTER_RUNNER_FD + i);
                                r->net_filter_fds[i] = NET_FILTER_RUNNER_FD + i;
                        }
                        break;
                default:
                        return -EINVAL;
                }
        if (!r->session_id[0] || !r->session_root)
                return log_error_errno(EINVAL, "--session-id= and --session-root= are required.");
        return 0;
}

static Runner *runner_free(Runner *r) {
        if (!r)
                return NULL;
        r->exec = runner_exec_free(r->exec);
        runner_prepared_drop(r);
        runner_kernel_stop(r);
        free(r->preload_modules);
        free(r->prepare_http_proxy);
        free(r->prepare_https_proxy);
        for (size_t i = 0; i < r->n_scope_cgroup_fds; i++)
                safe_close(r->scope_cgroup_fds[i]);
        safe_close(r->payload_cgroup_fd);
        safe_close(r->payload_procs_fd);
        for (size_t i = 0; i < ELEMENTSOF(r->filter_fds); i++)
                safe_close(r->filter_fds[i]);
        for (size_t i = 0; i < ELEMENTSOF(r->net_filter_fds); i++)
                safe_close(r->net_filter_fds[i]);
        safe_close(r->net_cgroup_procs_fd);
        r->archive_job = archive_job_free(r->archive_job);
        output_set_done(&r->outputs_snapshot);
        runner_close_connection(r);
        r->listen_source = sd_event_source_disable_unref(r->listen_source);
        r->backstop_source = sd_event_source_disable_unref(r->backstop_source);
        safe_close(r->listen_fd);
        safe_close(r->workspace.fd);
        safe_close(r->workspace.view_fd);
        cgroup_events_close(&r->cgroup_events);
        free(r->session_root);
        sd_event_unref(r->event);
        free(r);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Runner *, runner_free);

static int runner_new(Runner **ret) {
        Runner *r = calloc(1, sizeof(Runner));

        if (!r)
                return log_oom();
        *r = (Runner) { .listen_fd = RUNNER_LISTEN_FD, .conn_fd = -EBADF,
                        .workspace = { .fd = -EBADF, .view_fd = -EBADF },
                        .cgroup_events = CGROUP_EVENTS_NULL, .net_cgroup_procs_fd = -EBADF,
                        .payload_cgroup_fd = -EBADF, .payload_procs_fd = -EBADF };
        for (size_t i = 0; i < ELEMENTSOF(r->net_filter_fds); i++)
                r->net_filter_fds[i] = -EBADF;
        for (size_t i = 0; i < ELEMENTSOF(r->filter_fds); i++)
                r->filter_fds[i] = -EBADF;
        *ret = r;
        return 0;
}

/* The process as a runner must be (no groups, its own session, last in line for the OOM killer),
 * the event loop and the control socket watched. */
static int runner_startup(Runner *r) {
        int q, fd;

        /* Directories we create for the sandbox must be traversable by its user. */
        umask(0022);
        /* No supplementary groups: the archive helper inherits ours into its user namespace. */
        if (setgroups(0, NULL) < 0)
                return log_error_errno(errno, "Failed to drop supplementary groups: %m");

        /* Survive the manager: own session, never the manager's death signal. */
        (void) setsid();
        (void) prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
        /* When the scope runs out of memory, the sandbox goes first, never its supervisor. */
        fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                (void) write_all(fd, "-1000", 5);
                safe_close(fd);
        }

        q = daemon_event_new(&r->event, SIGTERM, SIGINT, SIGHUP, -1);
        if (q < 0)
                return log_error_errno(q, "Failed to set up the event loop: %m");
        (void) signal(SIGPIPE, SIG_IGN);

        if (fcntl(r->listen_fd, F_SETFD, FD_CLOEXEC) < 0)
                return log_error_errno(errno, "No control socket on fd %i: %m", r->listen_fd);
        (void) fd_nonblock(r->listen_fd, true);
        q = sd_event_add_io(r->event, &r->listen_source, r->listen_fd, EPOLLIN, on_listen, r);
        if (q < 0)
                return log_error_errno(q, "Failed to watch the control socket: %m");
        return 0;
}

static int runner_run(Runner *r) {
        int q = sd_event_loop(r->event);

        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                   "Runner of session %s exiting.", r->session_id);
        return q;
}

int main(int argc, char *argv[]) {
        _cleanup_(runner_freep) Runner *r = NULL;
        int q;

        log_setup("scopebox-runner");
        q = runner_new(&r);
        if (q >= 0)
                q = parse_argv(argc, argv, r);
        if (q >= 0)
                q = runner_startup(r);
        if (q >= 0)
                q = runner_run(r);
        return q < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
