/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Archive and restore jobs: the archive helper (archive-sandbox.c) cloned into namespaces of its
 * own, its timeout, and its result. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "archive-sandbox.h"
#include "json-util.h"
#include "log.h"
#include "runner-protocol.h"
#include "runner.h"
#include "sandbox.h"
#include "string-util.h"
#include "workspace-archive.h"

ArchiveJob *archive_job_free(ArchiveJob *j) {
        if (!j)
                return NULL;
        j->child_source = sd_event_source_disable_unref(j->child_source);
        /* One process, killed: the wait is short, and nothing is left unreaped. */
        if (pidref_is_set(&j->init))
                pidref_done_kill(&j->init);
        j->timer_source = sd_event_source_disable_unref(j->timer_source);
        safe_close(j->result_fd);
        free(j);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(ArchiveJob *, archive_job_free);

/* A failure of ours never reads as a damaged archive. */
static int restore_errno_not_damage(int error) {
        return runner_restore_error_is_damage(error) ? -EIO : error;
}

/* The errno a restore's failure is answered with (runner-protocol.h): the three that say "the
 * archive is damaged" only for what unpacking it found, never for a failure of ours that happens to
 * share the number (a clone refused with EPERM). A helper that died of a crash signal died of the
 * archive: only unpacking it runs code on hostile bytes. */
static int restore_errno(const ArchiveResult *res, bool have_result, const siginfo_t *si) {
        if (!have_result) {
                if (si->si_code != CLD_KILLED && si->si_code != CLD_DUMPED)
                        return -EIO;
                switch (si->si_status) {
                case SIGXFSZ:
                        return -RUNNER_RESTORE_TOO_LARGE;
                case SIGSEGV:
                case SIGBUS:
                case SIGABRT:
                case SIGILL:
                case SIGFPE:
                case SIGSYS:
                        return -RUNNER_RESTORE_CORRUPT;
                default:
                        return -EIO; /* SIGKILL: the session's OOM killer, or us */
                }
        }
        return streq(res->step, "restore") ? res->error : restore_errno_not_damage(res->error);
}

/* The helper's pidfd is readable: it exited, and is reaped through the pidfd, never by number. */
static int on_archive_child(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        ArchiveJob *j = userdata;
        Runner *r = j->runner;
        ArchiveResult res = { .error = -EIO };
        siginfo_t status = {};
        const siginfo_t *si = &status;
        bool have_result;
        int q;

        q = pidref_wait(&j->init, WEXITED | WNOHANG | __WALL, &status, NULL);
        if (q == 0)
                return 0; /* not yet */
        if (q < 0)
                status = (siginfo_t) { .si_code = CLD_KILLED, .si_status = SIGKILL };
        j->child_source = sd_event_source_disable_unref(j->child_source);
        pidref_done(&j->init);
        have_result = !j->timed_out && read(j->result_fd, &res, sizeof(res)) == (ssize_t) sizeof(res);
        res.step[sizeof(res.step) - 1] = 0;
        if (j->timed_out || (!have_result && si->si_code == CLD_KILLED && si->si_status == SIGXCPU))
                res = (ArchiveResult) { .error = -ETIME };
        else if (j->restore && (!have_result || res.error < 0))
                res.error = restore_errno(&res, have_result, si);
        else if (!have_result)
                res = (ArchiveResult) { .error = -EIO };

        if (res.error < 0) {
                if (res.step[0])
                        log_struct(LOG_WARNING, res.error, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "The archive helper of session %s failed at '%s': %m", r->session_id,
                                   res.step);
                /* A restore that failed half-way leaves nothing of the archive behind: the session
                 * either starts empty or not at all. */
                if (j->restore) {
                        q = workspace_clear(&r->workspace);
                        if (q < 0) {
                                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                           "Failed to clear the workspace of session %s after a failed "
                                           "restore: %m",
                                           r->session_id);
                                res.error = -EIO;
                        }
                }
                (void) runner_send_error(r, j->connection_generation, res.error, "%s failed: %s",
                                         j->restore ? "restore" : "archive", strerror(-res.error));
        } else {
                q = runner_send_reply(r, j->connection_generation, &runner_archive_reply,
                                      &(RunnerArchiveReply) { .bytes = res.bytes, .refused = res.refused },
                                      NULL, 0);
                /* No request follows to answer it for us: the job is answered here, either way. */
                if (q == -ENOMEM || q == -ERANGE)
                        (void) runner_send_error(r, j->connection_generation, -q, "failed to answer: %s",
                                                 strerror(-q));
                if (res.refused > 0)
                        log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Restore of session %s refused %i hostile archive entries.",
                                   r->session_id, res.refused);
        }
        r->archive_job = archive_job_free(r->archive_job);
        runner_resume_connection(r);
        return 0;
}

static int on_archive_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        ArchiveJob *j = userdata;

        j->timed_out = true;
        (void) pidref_kill(&j->init, SIGKILL);
        return 0;
}

/* Clones the helper into its namespaces, maps the sandbox user into its user namespace and lets
 * it go. */
static int archive_job_spawn(Runner *r, ArchiveJob *j, int data_fd, uint64_t max_bytes,
                             uint64_t timeout_sec) {
        _cleanup_close_pair_ int result_pipe[2] = { -EBADF, -EBADF }, go_pipe[2] = { -EBADF, -EBADF };
        int q;

        if (pipe2(result_pipe, O_CLOEXEC) < 0 || pipe2(go_pipe, O_CLOEXEC) < 0)
                return -errno;

        q = pidref_clone(ARCHIVE_SANDBOX_CLONE_FLAGS, &j->init);
        if (q < 0)
                return q;
        if (q == 0) {
                safe_close(result_pipe[0]);
                safe_close(go_pipe[1]);
                archive_sandbox_run(&(ArchiveSandbox) {
                        .workspace = strjoina(r->session_root, "/" SESSION_WORKSPACE_DIR),
                        .newroot = strjoina(r->session_root, "/" SESSION_NEWROOT_DIR),
                        .restore = j->restore,
                        .data_fd = data_fd,
                        .result_fd = result_pipe[1],
                        .go_fd = go_pipe[0],
                        .max_bytes = max_bytes,
                        .max_entries = ARCHIVE_ENTRIES_MAX,
                        .timeout_sec = timeout_sec,
                });
        }
        /* Our unreaped child: its number is its own while it lives, which /proc/<pid>/ needs. */
        q = sandbox_map_ids(j->init.pid, r->uid, r->gid);
        if (q < 0)
                return q; /* the helper sees its go pipe close and gives up; we kill it anyway */
        if (write(go_pipe[1], "1", 1) != 1)
                return -errno;
        j->result_fd = TAKE_FD(result_pipe[0]);
        return 0;
}

int runner_handle_archive(Runner *r, const RunnerArchiveRequest *p, int data_fd, bool restore) {
        _cleanup_(archive_job_freep) ArchiveJob *j = NULL;
        struct stat st;
        int q;

        if (data_fd < 0 || fstat(data_fd, &st) < 0 || r->archive_job)
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid archive request");

        j = calloc(1, sizeof(ArchiveJob));
        if (!j)
                return log_oom();
        *j = (ArchiveJob) { .runner = r,
                            .connection_generation = r->connection_generation,
                            .restore = restore,
                            .init = PIDREF_NULL,
                            .result_fd = -EBADF };
        q = archive_job_spawn(r, j, data_fd, p->max_bytes, p->timeout_sec);
        if (q < 0) {
                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to start the archive helper: %m");
                return runner_send_error(r, r->connection_generation, restore_errno_not_damage(q),
                                         "failed to start the archive helper");
        }
        q = sd_event_add_io(r->event, &j->child_source, j->init.fd, EPOLLIN, on_archive_child, j);
        if (q >= 0)
                q = sd_event_add_time_relative(r->event, &j->timer_source, CLOCK_MONOTONIC,
                                               p->timeout_sec * USEC_PER_SEC, USEC_PER_SEC,
                                               on_archive_timeout, j);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, restore_errno_not_damage(q),
                                         "failed to watch the archive job");
        r->archive_job = TAKE_PTR(j);
        return 0;
}
