/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Execs: a sandbox cloned for the code (its payload forked by the template or started cold), its network,
 * its timeout and cancellation, the draining of its output pipes, and the result: exit status, stdout and
 * stderr, the artifacts it left under outputs/ and the limits that struck. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "cgroup-events.h"
#include "fs-util.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "message-ids.h"
#include "outputs.h"
#include "runner.h"
#include "sandbox.h"
#include "seccomp-policy.h"
#include "stream-frame.h"
#include "string-util.h"
#include "time-util.h"

#define OUTPUT_PIPE_CHUNK (64U * 1024U)
/* After PID 1 of an exec is gone, every writer of the pipes is gone too; this is a safety net. */
#define DRAIN_GRACE_USEC (2 * USEC_PER_SEC)
/* Frames a stream's reader may lag behind before the exec stops reading its output (the code then
 * waits on a full stdout, its timeout running); and how long an ended exec waits for the reader to
 * take the rest before its result goes without it. */
#define STREAM_PENDING_MAX 256U
#define STREAM_FLUSH_USEC (5 * USEC_PER_SEC)

static void output_buffer_done(OutputBuffer *b) {
        b->source = sd_event_source_disable_unref(b->source);
        b->fd = safe_close(b->fd);
        free(b->data);
        *b = (OutputBuffer) { .fd = -EBADF };
}

#define RESULT_PIPE_NULL                                                                             \
        (ResultPipe) {                                                                               \
                .fd = -EBADF, .lines = STREAM_LINES_INIT(STREAM_RESULT_RECORD_MAX, STREAM_RESULTS_MAX) \
        }

static void result_pipe_done(ResultPipe *p) {
        p->source = sd_event_source_disable_unref(p->source);
        p->fd = safe_close(p->fd);
        stream_lines_done(&p->lines);
        *p = RESULT_PIPE_NULL;
}

RunnerExec *runner_exec_free(RunnerExec *e) {
        if (!e)
                return NULL;
        /* The watch of PID 1's pidfd goes before the pidfd. */
        e->child_source = sd_event_source_disable_unref(e->child_source);
        if (e->stateful) {
                /* A cell nobody waits for any more: its kernel goes with it. The cell's own
                 * reference is only closed: the kernel's is the one that reaps. */
                if (!e->exited)
                        runner_kernel_stop(e->runner);
                pidref_done(&e->init);
        } else if (e->status_known)
                /* It reported and is on its way out (its namespaces going): reaped behind the
                 * answer. */
                runner_reap_later(e->runner, &e->init);
        else
                /* PID 1 takes its namespace with it; after SIGKILL the wait is short. Reaped
                 * already, it is not signalled. */
                pidref_done_kill(&e->init);
        /* slirp4netns sees its --exit-fd close and ends; its namespace is gone with the sandbox.
         * SIGKILL is immediate all the same, so the wait is short. */
        e->slirp_exit_fd = safe_close(e->slirp_exit_fd);
        pidref_done_kill(&e->slirp);
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        e->stream_timer = sd_event_source_disable_unref(e->stream_timer);
        e->stream = exec_stream_free(e->stream);
        e->status_source = sd_event_source_disable_unref(e->status_source);
        output_buffer_done(&e->out);
        output_buffer_done(&e->err);
        result_pipe_done(&e->results);
        safe_close(e->status_fd);
        safe_close(e->code_fd);
        output_set_done(&e->before);
        free(e);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(RunnerExec *, runner_exec_free);

static int copy_into(int dst_fd, uint64_t dst_off, int src_fd, uint64_t size) {
        loff_t out = (loff_t) dst_off;
        while (size > 0) {
                ssize_t k = copy_file_range(src_fd, NULL, dst_fd, &out, size, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP) {
                                /* Fall back to a plain copy through a buffer. */
                                char buf[64 * 1024];
                                ssize_t n = read(src_fd, buf, MIN(sizeof(buf), size));
                                if (n <= 0)
                                        return n < 0 ? -errno : -EIO;
                                if (pwrite(dst_fd, buf, (size_t) n, out) != n)
                                        return -EIO;
                                out += n;
                                size -= (uint64_t) n;
                                continue;
                        }
                        return -errno;
                }
                if (k == 0)
                        return -EIO; /* shrank under us */
                size -= (uint64_t) k;
        }
        return 0;
}

/* Why the exec ended, first match: the runner ended it (a cancel, the timeout), the scope's
 * limits struck (the OOM killer; the tasks limit refused a fork or thread) and the code failed,
 * the sandbox refused a call and the code failed (SIGSYS, or a refused call and a non-zero
 * exit), a signal, or its own exit. */
static const char *exec_exit_reason(const RunnerExec *e, int exit_code, int sig, uint32_t n_refused,
                                    bool oom, bool pids) {
        if (e->cancelled)
                return "cancelled";
        if (e->timed_out)
                return "timeout";
        if (oom && (sig == SIGKILL || exit_code != 0))
                return "memory";
        if (pids && (sig != 0 || exit_code != 0))
                return "tasks";
        if (sig == SIGSYS || (n_refused > 0 && exit_code != 0))
                return "blocked_syscall";
        if (sig != 0)
                return "signal";
        return "exited";
}

/* "resources": what PID 1 measured once every process of the sandbox was reaped, or, when it
 * was killed before it could report, its own rusage (which holds what it reaped in dying). */
static RunnerExecUsage exec_usage(const RunnerExec *e, const SandboxUsage *u) {
        RunnerExecUsage res = {};

        if (u && u->valid) {
                res.cpu_usec = u->cpu_usec;
                res.max_rss_bytes = u->max_rss_bytes;
        } else if (e->init_rusage_valid) {
                res.cpu_usec =
                        timeval_load(&e->init_rusage.ru_utime) + timeval_load(&e->init_rusage.ru_stime);
                res.max_rss_bytes = (uint64_t) e->init_rusage.ru_maxrss * 1024U;
        } else
                return res;
        res.has_cpu = res.has_rss = true;
        res.cpu_usec = MIN(res.cpu_usec, (uint64_t) INT64_MAX);
        res.max_rss_bytes = MIN(res.max_rss_bytes, (uint64_t) INT64_MAX);
        if (u && u->written_valid) {
                res.has_written = true;
                res.written_bytes = MIN(u->written_bytes, (uint64_t) INT64_MAX);
        }
        if (u && u->tasks_valid) {
                res.has_processes = true;
                res.processes = MIN(u->tasks, (uint64_t) INT64_MAX);
        }
        return res;
}

static int runner_exec_watch(RunnerExec *e);
static int runner_exec_retry_prepared(RunnerExec *e);
static int on_exec_timeout(sd_event_source *s, uint64_t usec, void *userdata);

/* The exec's sandbox from now on: its PID 1 and the read ends of its pipes, taken from 'sp'. */
static void runner_exec_attach(RunnerExec *e, const SandboxProcess *sp) {
        e->init = sp->init;
        e->out.fd = sp->out_fd;
        e->err.fd = sp->err_fd;
        e->status_fd = sp->status_fd;
}

/* The exec goes on in a new sandbox 'sp' (its PID 1 and pipes; a display cell's records pipe
 * 'results_fd'): what the old one produced is dropped. */
static int runner_exec_rewire(RunnerExec *e, SandboxProcess *sp, int results_fd) {
        size_t out_limit = e->out.limit, err_limit = e->err.limit;
        uint64_t deadline = e->started_usec + e->timeout_ms * USEC_PER_MSEC;
        int q;

        /* Its timeout still runs, from the exec's start (the end of the old sandbox stopped the
         * timer, or turned it into the drain's). */
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        q = sd_event_add_time(e->runner->event, &e->timer_source, CLOCK_MONOTONIC, deadline, USEC_PER_MSEC,
                              on_exec_timeout, e);
        if (q < 0)
                return q;
        e->exited = false;
        e->start_known = e->status_known = false;
        safe_close(e->status_fd);
        output_buffer_done(&e->out);
        output_buffer_done(&e->err);
        result_pipe_done(&e->results);
        e->out.limit = out_limit;
        e->err.limit = err_limit;
        runner_exec_attach(e, sp);
        e->results.fd = results_fd;
        return runner_exec_watch(e);
}

/* What a cell of a stateful session runs, its first time and in a new kernel alike (and an exec
 * whose prepared sandbox was lost): its code (kept in e->code_fd) in the session's python profile,
 * with nothing of an exec's own (no template, no network, no filter or environment of its own:
 * runner_handle_exec() refuses them for a cell). */
static SandboxExec runner_exec_cell(const RunnerExec *e) {
        return (SandboxExec) {
                .code_fd = e->code_fd,
                .timeout_ms = e->timeout_ms,
                .memory_limit = e->memory_limit,
                .language = SANDBOX_PYTHON3,
                .network_ready_fd = -EBADF,
                .netns_fd = -EBADF,
                .template_fd = -EBADF,
                .filter_fd = e->runner->filter_fds[SECCOMP_PROFILE_SIDECAR],
                .prepared_fd = -EBADF,
        };
}

/* A cell whose kernel was found dead before it ran, or was ended because it ran between cells
 * ('loss'): a new kernel runs it (runner-kernel.c), in the same RunnerExec, its timeout still
 * running. */
static int runner_exec_retry_cell(RunnerExec *e, SandboxKernelLoss loss) {
        Runner *r = e->runner;
        SandboxExec se = runner_exec_cell(e);
        SandboxProcess sp;
        int results_fd = -EBADF, q;

        if (loss == SANDBOX_KERNEL_LOSS_RAN)
                /* Something continued it while it was to be stopped: what it ran then had no
                 * timeout and raced our file operations. Not an error of ours; the session's. */
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                      strjoina("SCOPEBOX_EXEC_ID=", e->exec_id),
                                      "SCOPEBOX_EVENT=kernel-woken"),
                           "The kernel of session %s ran between cells and was ended; exec %s starts a new "
                           "one.",
                           r->session_id, e->exec_id);
        else
                log_struct(LOG_NOTICE, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                      strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                           "The kernel of session %s died between cells; exec %s starts a new one.",
                           r->session_id, e->exec_id);
        /* Its PID 1 exits once it answered; we don't wait for its end to be seen. */
        runner_kernel_stop(r);
        q = runner_kernel_cell(r, &se, e->display, &sp, &results_fd, &e->kernel_new);
        if (q < 0)
                return q;
        e->kernel_retried = true;
        pidref_done(&e->init);
        return runner_exec_rewire(e, &sp, results_fd);
}


/* How the exec ended, from what PID 1 of the sandbox reported (if it could). */
typedef struct ExecEnd {
        bool have_status;
        SandboxStatus st;
        int exit_code, sig;
        const char *reason;
        bool kernel_kept; /* a stateful cell whose kernel waits for the next one */
        char *kernel_note; /* a stateful cell that ended its kernel says so on stderr, once */
        bool oom, pids; /* the scope's limits struck during the exec */
} ExecEnd;

static void exec_end_done(ExecEnd *end) {
        end->kernel_note = mfree(end->kernel_note);
}

/* How the payload started, then how it ended. */
static void runner_exec_read_status(RunnerExec *e, ExecEnd *end) {
        int32_t start = SANDBOX_START_COLD;

        if (!e->start_known && read(e->status_fd, &start, sizeof(start)) == (ssize_t) sizeof(start))
                e->from_template = start == SANDBOX_START_TEMPLATE;
        if (e->status_known) {
                end->have_status = true;
                end->st = e->status;
        } else
                end->have_status =
                        read(e->status_fd, &end->st, sizeof(end->st)) == (ssize_t) sizeof(end->st);
}

static int runner_exec_decode_end(RunnerExec *e, ExecEnd *end) {
        Runner *r = e->runner;

        if (e->timed_out)
                end->exit_code = 124;
        else if (end->have_status && end->st.kind == SANDBOX_STATUS_EXITED) {
                if (WIFEXITED(end->st.value))
                        end->exit_code = WEXITSTATUS(end->st.value);
                else if (WIFSIGNALED(end->st.value)) {
                        end->sig = WTERMSIG(end->st.value);
                        end->exit_code = 128 + end->sig;
                }
        } else {
                /* PID 1 itself died without reporting (killed from outside the sandbox). */
                end->sig = e->init_info.si_code == CLD_KILLED || e->init_info.si_code == CLD_DUMPED
                                   ? e->init_info.si_status
                                   : SIGKILL;
                end->exit_code = 128 + end->sig;
        }
        /* Whether the scope's limits struck during the exec: the OOM killer (which spares the
         * runner), or a fork or thread refused at TasksMax. */
        end->oom = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_OOM_KILL) > e->oom_kills_before;
        end->pids = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_PIDS_MAX) > e->pids_max_before;
        end->reason = exec_exit_reason(e, end->exit_code, end->sig,
                                       end->have_status ? end->st.seccomp.n_calls : 0, end->oom, end->pids);
        end->kernel_kept = e->stateful && end->have_status && end->st.kernel == SANDBOX_KERNEL_KEPT;
        if (e->stateful && !end->kernel_kept &&
            asprintf(&end->kernel_note,
                     "%s[sandbox] the kernel ended (%s); the next cell starts a fresh interpreter\n",
                     e->err.size > 0 && e->err.data[e->err.size - 1] != '\n' ? "\n" : "", end->reason) < 0) {
                end->kernel_note = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* stdout, stderr (and the kernel's note) into the result's memfd; where the files' bytes start. */
static int exec_data_write(const RunnerExec *e, const ExecEnd *end, int data_fd, uint64_t *ret_offset) {
        size_t note = end->kernel_note ? strlen(end->kernel_note) : 0;
        int q;

        q = write_all(data_fd, e->out.data ?: "", e->out.size);
        if (q >= 0)
                q = write_all(data_fd, e->err.data ?: "", e->err.size);
        if (q >= 0 && note > 0)
                q = write_all(data_fd, end->kernel_note, note);
        if (q < 0)
                return q;
        *ret_offset = e->out.size + e->err.size + note;
        return 0;
}

/* Artifacts: files under outputs/ created or changed by this exec, within the exec's limits, copied
 * into the memfd after the output. Nothing of the sandbox runs any more (a kernel is stopped), so
 * the tree cannot change while we look at it. 'after' is what the next exec compares with. */
static int exec_artifacts_collect(RunnerExec *e, int data_fd, uint64_t offset, OutputSet *after,
                                  bool *ret_scanned, RunnerExecResult *res) {
        Runner *r = e->runner;
        _cleanup_close_ int outputs_fd = -EBADF;
        _cleanup_free_ OutputEntry **changed = NULL;
        _cleanup_free_ bool *chosen = NULL;
        size_t n_changed = 0;
        int q;

        outputs_fd = openat(r->workspace.fd, "outputs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (outputs_fd >= 0) {
                q = output_set_scan(outputs_fd, after);
                if (q < 0)
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to scan outputs, ignoring: %m");
                *ret_scanned = q >= 0;
        }
        q = output_set_diff(&e->before, after, &changed, &n_changed);
        if (q < 0)
                return q;
        chosen = calloc(n_changed + 1, sizeof(bool));
        res->files = calloc(n_changed + 1, sizeof(ExecFile));
        if (!chosen || !res->files)
                return -ENOMEM;
        res->files_skipped = artifacts_select(changed, n_changed, &e->limits, chosen);

        for (size_t i = 0; i < n_changed; i++) {
                _cleanup_close_ int fd = -EBADF;
                struct stat sst;

                if (!chosen[i])
                        continue;
                if (!utf8_is_valid_n(changed[i]->path, strlen(changed[i]->path))) {
                        res->files_skipped++; /* a name that can't be a JSON string */
                        continue;
                }
                fd = openat_beneath(outputs_fd, changed[i]->path, O_RDONLY | O_NONBLOCK, 0);
                if (fd < 0 || fstat(fd, &sst) < 0 || !S_ISREG(sst.st_mode) ||
                    (uint64_t) sst.st_size != changed[i]->size) {
                        log_struct(LOG_DEBUG, fd < 0 ? fd : 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Artifact '%s' vanished or changed, skipping: %m", changed[i]->path);
                        res->files_skipped++;
                        continue;
                }
                q = copy_into(data_fd, offset, fd, changed[i]->size);
                if (q < 0) {
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to read artifact '%s', skipping: %m", changed[i]->path);
                        res->files_skipped++;
                        continue;
                }
                /* The path stays the scan's ('after' outlives the reply). */
                res->files[res->n_files++] =
                        (ExecFile) { .path = changed[i]->path, .offset = offset, .size = changed[i]->size };
                offset += changed[i]->size;
        }
        return 0;
}

static void runner_exec_log_end(const RunnerExec *e, const ExecEnd *end) {
        const Runner *r = e->runner;

        if (end->have_status && end->st.seccomp.n_calls > 0) {
                _cleanup_free_ char *calls = seccomp_report_format(&end->st.seccomp);
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                      strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                           "Exec %s: the sandbox refused %s.", e->exec_id, calls ?: "some system calls");
        }
        if (e->template_error != 0 && e->template_error != EOPNOTSUPP)
                log_struct(LOG_DEBUG, e->template_error,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                      strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                           "Exec %s started cold: the template did not answer (%m).", e->exec_id);
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id),
                              e->from_template ? "SCOPEBOX_EXEC_START=template" : "SCOPEBOX_EXEC_START=cold",
                              strjoina("SCOPEBOX_EXIT_REASON=", e->orphaned ? "orphaned" : end->reason)),
                   "Exec %s finished with exit code %i%s after %llu ms.", e->exec_id, end->exit_code,
                   e->timed_out   ? " (timed out)"
                   : e->cancelled ? " (cancelled)"
                   : e->orphaned  ? " (orphaned)"
                                  : "",
                   (unsigned long long) ((now_usec(CLOCK_MONOTONIC) - e->started_usec) / 1000));
        if (e->timed_out || end->sig) {
                const char *killed = e->orphaned ? "orphaned" : end->reason;
                char signal_field[32];

                snprintf(signal_field, sizeof(signal_field), "SCOPEBOX_SIGNAL=%i", end->sig);
                log_struct(LOG_NOTICE, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                      strjoina("SCOPEBOX_EXEC_ID=", e->exec_id),
                                      strjoina("SCOPEBOX_EXIT_REASON=", killed), signal_field,
                                      SCOPEBOX_MESSAGE_EXEC_KILLED),
                           "Exec %s of session %s was killed (%s).", e->exec_id, r->session_id, killed);
        }
}

/* The result of an exec that ran: its reply (runner_exec_result) and the memfd with its bytes. */
static int runner_exec_send_result(RunnerExec *e, ExecEnd *end, OutputSet *after, bool *ret_scanned) {
        Runner *r = e->runner;
        _cleanup_close_ int data_fd = -EBADF;
        _cleanup_free_ ExecFile *files = NULL;
        SeccompReportCalls calls = {};
        uint64_t offset;
        int q;

        q = runner_exec_decode_end(e, end);
        if (q < 0)
                return q;
        data_fd = memfd_new_empty("exec-result");
        if (data_fd < 0)
                return data_fd;
        q = exec_data_write(e, end, data_fd, &offset);
        if (q < 0)
                return q;

        RunnerExecResult res = {
                .exit_code = end->exit_code,
                .signal = end->sig,
                .timed_out = e->timed_out,
                .cancelled = e->cancelled,
                .duration_usec = now_usec(CLOCK_MONOTONIC) - e->started_usec,
                .stdout_size = e->out.size,
                .stderr_size = e->err.size + (end->kernel_note ? strlen(end->kernel_note) : 0),
                .stdout_truncated = e->out.total > e->out.size,
                .stderr_truncated = e->err.total > e->err.size,
                .oom_killed = end->oom,
                .pids_limited = end->pids,
                .exit_reason = end->reason,
                .kernel = !e->stateful        ? NULL
                          : !end->kernel_kept ? "ended"
                          : e->kernel_new     ? "new"
                                              : "running",
                .resources = exec_usage(e, end->have_status ? &end->st.usage : NULL),
        };
        q = exec_artifacts_collect(e, data_fd, offset, after, ret_scanned, &res);
        files = res.files;
        if (q < 0)
                return q;
        q = memfd_seal(data_fd);
        if (q < 0)
                return q;
        if (end->have_status) {
                seccomp_report_calls(&end->st.seccomp, &calls);
                res.blocked = calls.items;
                res.n_blocked = calls.n;
                if (end->st.template_error != 0)
                        e->template_error = end->st.template_error;
        }
        runner_exec_log_end(e, end);
        return runner_send_reply(r, e->connection_generation, &runner_exec_result, &res, &data_fd, 1);
}

/* A cell whose kernel was gone before it could run (the OOM killer, say), or ran between cells:
 * it runs in a new one, once; its result says "new". 1 if it did. */
static int runner_exec_kernel_lost(RunnerExec *e, const ExecEnd *end) {
        Runner *r = e->runner;
        int q;

        if (e->stateful && !e->kernel_retried && !e->timed_out && !e->cancelled) {
                q = runner_exec_retry_cell(e, end->st.value == SANDBOX_KERNEL_LOSS_RAN
                                                      ? SANDBOX_KERNEL_LOSS_RAN
                                                      : SANDBOX_KERNEL_LOSS_DIED);
                if (q >= 0)
                        return 1;
                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to start a new kernel: %m");
        }
        e->stream = exec_stream_free(e->stream);
        return runner_send_error(r, e->connection_generation, ECHILD,
                                 "the session's kernel ended before the cell could run");
}

static int runner_exec_finish(RunnerExec *e) {
        Runner *r = e->runner;
        _cleanup_(exec_end_done) ExecEnd end = {};
        OutputSet after = {};
        bool scanned = false;
        int q;

        runner_exec_read_status(e, &end);
        if (end.have_status && end.st.kind == SANDBOX_STATUS_PREPARED_LOST && !e->timed_out &&
            !e->cancelled && !e->orphaned) {
                q = e->retry_if_lost ? runner_exec_retry_prepared(e) : -ECHILD;
                if (q >= 0)
                        return 0;
                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to start the exec anew: %m");
                e->stream = exec_stream_free(e->stream);
                q = runner_send_error(r, e->connection_generation, -q, "failed to create the sandbox: %s",
                                      strerror(-q));
        } else if (end.have_status && end.st.kind == SANDBOX_STATUS_KERNEL_LOST) {
                q = runner_exec_kernel_lost(e, &end);
                if (q > 0)
                        return 0;
        } else {
                /* The stream ends before the result goes: its reader has every frame when the result
                 * comes. */
                e->stream = exec_stream_free(e->stream);
                e->stream_timer = sd_event_source_disable_unref(e->stream_timer);
                if (end.have_status && end.st.kind == SANDBOX_STATUS_SETUP_FAILED) {
                        end.st.step[sizeof(end.st.step) - 1] = 0;
                        log_struct(LOG_ERR, end.st.value, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Sandbox setup failed at '%s': %m", end.st.step);
                        q = runner_send_error(r, e->connection_generation, end.st.value,
                                              "sandbox setup failed at %s: %s", end.st.step,
                                              strerror(end.st.value));
                } else {
                        q = runner_exec_send_result(e, &end, &after, &scanned);
                        if (q < 0 && q != -ENOTCONN) {
                                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                           "Failed to collect the exec's results: %m");
                                q = runner_send_error(r, e->connection_generation, q,
                                                      "failed to collect results: %s", strerror(-q));
                        }
                }
        }

        /* A kernel that did not survive its cell (or whose sandbox never started) is gone now,
         * before the next cell could be handed to it. */
        if (e->stateful && !end.kernel_kept)
                runner_kernel_stop(r);
        /* What the next exec compares with. */
        output_set_done(&r->outputs_snapshot);
        r->outputs_snapshot = after;
        r->outputs_snapshot_valid = scanned;
        r->exec = runner_exec_free(r->exec);
        runner_resume_connection(r);
        runner_prepare_soon(r);
        return q;
}

static int on_stream_flush_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;

        /* The reader does not take the rest: the result goes without it (it holds every byte). */
        e->stream = exec_stream_free(e->stream);
        runner_exec_stream_progress(e);
        return 0;
}

static void runner_exec_maybe_finish(RunnerExec *e) {
        if (e->draining || !e->exited || e->out.source || e->err.source || e->results.source)
                return;
        if (exec_stream_pending(e->stream) > 0) {
                if (!e->stream_timer &&
                    sd_event_add_time_relative(e->runner->event, &e->stream_timer, CLOCK_MONOTONIC,
                                               STREAM_FLUSH_USEC, USEC_PER_MSEC * 10,
                                               on_stream_flush_timeout, e) < 0)
                        e->stream = exec_stream_free(e->stream);
                else
                        return;
        }
        (void) runner_exec_finish(e);
}

/* Reading the output waits while the stream's reader lags, but only while the code runs: what is
 * left in the pipes after PID 1 is gone is read at once. */
static void runner_exec_pause_output(RunnerExec *e, bool pause) {
        if (e->output_paused == pause)
                return;
        e->output_paused = pause;
        if (e->out.source)
                (void) sd_event_source_set_enabled(e->out.source, pause ? SD_EVENT_OFF : SD_EVENT_ON);
        if (e->err.source)
                (void) sd_event_source_set_enabled(e->err.source, pause ? SD_EVENT_OFF : SD_EVENT_ON);
        if (e->results.source)
                (void) sd_event_source_set_enabled(e->results.source, pause ? SD_EVENT_OFF : SD_EVENT_ON);
}

void runner_exec_stream_progress(RunnerExec *e) {
        if (e->output_paused && exec_stream_pending(e->stream) <= STREAM_PENDING_MAX / 2)
                runner_exec_pause_output(e, false);
        runner_exec_maybe_finish(e);
}

/* 'n' more bytes of stdout or stderr: the first 'limit' are kept (and framed onto the stream),
 * the rest counted. */
static int output_buffer_keep(RunnerExec *e, OutputBuffer *b, const char *data, size_t n) {
        if (b->size < b->limit) {
                size_t take = MIN(n, b->limit - b->size);
                if (!b->data) {
                        b->data = malloc(b->limit);
                        if (!b->data)
                                return log_oom();
                }
                memcpy(b->data + b->size, data, take);
                b->size += take;
                (void) exec_stream_push(e->stream, b == &e->out ? STREAM_FRAME_STDOUT : STREAM_FRAME_STDERR,
                                        take);
        }
        b->total += (uint64_t) n;
        return 0;
}

static int on_output(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerExec *e = userdata;
        OutputBuffer *b = fd == e->out.fd ? &e->out : &e->err;
        char buf[OUTPUT_PIPE_CHUNK];

        for (unsigned i = 0; i < 16; i++) {
                ssize_t k = read(fd, buf, sizeof(buf));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        break;
                }
                if (k == 0)
                        break;
                /* Keep the first 'limit' bytes, count and discard the rest but keep draining so
                 * the writer never blocks on a full pipe. */
                if (output_buffer_keep(e, b, buf, (size_t) k) < 0)
                        return -ENOMEM;
                if (!e->exited && exec_stream_pending(e->stream) >= STREAM_PENDING_MAX) {
                        runner_exec_pause_output(e, true);
                        return 0;
                }
                if (i == 15)
                        return 0; /* let others run; we'll be called again */
        }
        /* EOF or error: this stream is done. */
        b->source = sd_event_source_disable_unref(b->source);
        b->fd = safe_close(b->fd);
        runner_exec_maybe_finish(e);
        return 0;
}

/* What a pipe holds now is read (stdout and stderr before a record: the kernel writes a record only
 * once they are read, and waits until the record is read before it goes on), unless the stream's
 * reader holds the reading back. Bounded: another process of the cell may keep the pipe full, and
 * the event loop serves every other request of the session meanwhile (what is left is read as it
 * comes, the order of that process's output with the records being its own affair). */
#define EXEC_CATCH_UP_ROUNDS 4

static void exec_pipe_catch_up(RunnerExec *e, sd_event_source **source, int fd,
                               sd_event_io_handler_t handler) {
        int n;

        for (unsigned i = 0; i < EXEC_CATCH_UP_ROUNDS && *source && !e->output_paused &&
                             ioctl(fd, FIONREAD, &n) >= 0 && n > 0;
             i++)
                (void) handler(*source, fd, EPOLLIN, e);
}

static int on_result_line(const uint8_t *line, size_t size, void *userdata) {
        RunnerExec *e = userdata;

        (void) exec_stream_push_copy(e->stream, STREAM_FRAME_RESULT, line, size);
        return 0;
}

/* Records left out are said on stderr, each kind once a cell (the bytes of stderr as any). */
static void results_note_drops(RunnerExec *e) {
        const StreamLines *l = &e->results.lines;
        const struct {
                unsigned count;
                const char *text;
        } drops[] = {
                { l->n_too_large, "[sandbox] a result record over " STRINGIFY(STREAM_RESULT_RECORD_MAX_MIB)
                                  " MiB was left out\n" },
                { l->n_over_total, "[sandbox] result records past " STRINGIFY(STREAM_RESULTS_MAX_MIB)
                                   " MiB in all were left out\n" },
                { l->n_unfinished, "[sandbox] an unfinished result record was left out\n" },
        };

        for (size_t i = 0; i < ELEMENTSOF(drops); i++) {
                if (drops[i].count == 0 || (e->results.noted & (1U << i)))
                        continue;
                e->results.noted |= 1U << i;
                if (e->err.size > 0 && e->err.data[e->err.size - 1] != '\n')
                        (void) output_buffer_keep(e, &e->err, "\n", 1);
                (void) output_buffer_keep(e, &e->err, drops[i].text, strlen(drops[i].text));
        }
}

/* A display cell's records pipe: whole lines within the bounds go onto the stream, in turn with
 * stdout and stderr. Read to its end even without a stream, so that the kernel never blocks. */
static int on_results(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerExec *e = userdata;
        char buf[OUTPUT_PIPE_CHUNK];

        exec_pipe_catch_up(e, &e->out.source, e->out.fd, on_output);
        exec_pipe_catch_up(e, &e->err.source, e->err.fd, on_output);
        if (e->output_paused)
                return 0;
        for (unsigned i = 0; i < 16; i++) {
                ssize_t k = read(fd, buf, sizeof(buf));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        break;
                }
                if (k == 0)
                        break;
                (void) stream_lines_feed(&e->results.lines, buf, (size_t) k, on_result_line, e);
                results_note_drops(e);
                if (!e->exited && exec_stream_pending(e->stream) >= STREAM_PENDING_MAX) {
                        runner_exec_pause_output(e, true);
                        return 0;
                }
                if (i == 15)
                        return 0;
        }
        stream_lines_end(&e->results.lines);
        results_note_drops(e);
        e->results.source = sd_event_source_disable_unref(e->results.source);
        e->results.fd = safe_close(e->results.fd);
        runner_exec_maybe_finish(e);
        return 0;
}

static int on_drain_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;
        /* Writers can't outlive PID 1, but never let a stuck pipe hold the session forever. */
        e->out.source = sd_event_source_disable_unref(e->out.source);
        e->err.source = sd_event_source_disable_unref(e->err.source);
        e->results.source = sd_event_source_disable_unref(e->results.source);
        runner_exec_maybe_finish(e);
        return 0;
}

int runner_exec_reap_init(RunnerExec *e, const PidRef *init) {
        struct rusage ru = {};
        siginfo_t si = {};
        int q;

        q = pidref_wait(init, WEXITED | WNOHANG | __WALL, &si, &ru);
        if (q > 0 && e) {
                e->init_info = si;
                e->init_rusage = ru;
                e->init_rusage_valid = true;
        }
        return q;
}

static int runner_exec_ended(RunnerExec *e);

/* PID 1 of a stateless sandbox ended: its pidfd polls readable. */
static int on_init_exit(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerExec *e = userdata;
        int q;

        q = runner_exec_reap_init(e, &e->init);
        if (q == 0)
                return 0;
        return runner_exec_ended(e);
}

/* A stateless sandbox's status pipe: how the payload started, then (once every process of the
 * sandbox is reaped and measured) how it ended. The exec is over then; PID 1 still tears its
 * namespaces down, which the answer does not wait for. */
static int on_status(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerExec *e = userdata;
        int32_t start;
        int n = 0;

        if (ioctl(fd, FIONREAD, &n) < 0 || (!(revents & EPOLLIN) && n == 0)) {
                /* Hung up without a report: PID 1's exit says how it ended. */
                e->status_source = sd_event_source_disable_unref(e->status_source);
                return 0;
        }
        if (!e->start_known && (size_t) n >= sizeof(start)) {
                if (read(fd, &start, sizeof(start)) != (ssize_t) sizeof(start))
                        return 0;
                e->start_known = true;
                e->from_template = start == SANDBOX_START_TEMPLATE;
                n -= (int) sizeof(start);
        }
        if (!e->start_known || (size_t) n < sizeof(e->status))
                return 0;
        if (read(fd, &e->status, sizeof(e->status)) != (ssize_t) sizeof(e->status))
                return 0;
        e->status_known = true;
        e->status_source = sd_event_source_disable_unref(e->status_source);
        return runner_exec_ended(e);
}

static int runner_exec_ended(RunnerExec *e) {
        int q;

        if (e->exited)
                return 0;
        e->exited = true;
        e->child_source = sd_event_source_disable_unref(e->child_source);
        e->status_source = sd_event_source_disable_unref(e->status_source);
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        runner_exec_pause_output(e, false);

        if (e->out.source || e->err.source) {
                q = sd_event_add_time_relative(e->runner->event, &e->timer_source, CLOCK_MONOTONIC,
                                               DRAIN_GRACE_USEC, 0, on_drain_timeout, e);
                if (q < 0)
                        return on_drain_timeout(NULL, 0, e);
                return 0;
        }
        runner_exec_maybe_finish(e);
        return 0;
}

/* A stateful cell is over when PID 1 closes its status pipe (it stays for the next cell): what
 * the stopped kernel and the killed processes wrote is in the pipes, no writer is left to wait
 * for. */
static int on_kernel_status(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerExec *e = userdata;
        OutputBuffer *bufs[] = { &e->out, &e->err };
        int n;

        e->status_source = sd_event_source_disable_unref(e->status_source);
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        /* Over: a lagging stream's reader no longer holds the reading back. */
        e->exited = true;
        runner_exec_pause_output(e, false);
        /* The handlers called below would finish (and free) the exec at the last pipe's end. */
        e->draining = true;
        for (size_t i = 0; i < ELEMENTSOF(bufs); i++) {
                while (bufs[i]->source && ioctl(bufs[i]->fd, FIONREAD, &n) >= 0 && n > 0)
                        (void) on_output(bufs[i]->source, bufs[i]->fd, EPOLLIN, e);
                bufs[i]->source = sd_event_source_disable_unref(bufs[i]->source);
                bufs[i]->fd = safe_close(bufs[i]->fd);
        }
        exec_pipe_catch_up(e, &e->results.source, e->results.fd, on_results);
        if (e->results.source) {
                /* Another process of the cell held it open; what it did not finish is left out. */
                stream_lines_end(&e->results.lines);
                results_note_drops(e);
                e->results.source = sd_event_source_disable_unref(e->results.source);
                e->results.fd = safe_close(e->results.fd);
        }
        e->draining = false;
        runner_exec_maybe_finish(e);
        return 0;
}

static int on_end_grace(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;

        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        /* Killing PID 1 of the sandbox makes the kernel kill every process in its namespace. */
        (void) pidref_kill(&e->init, SIGKILL);
        return 0;
}

/* The timeout or a cancel: PID 1 kills everything of its sandbox, reaps it and reports, so that
 * the result has the usage of what ran; if it does not within the grace, it is killed. */
static void runner_exec_end(RunnerExec *e) {
        int q;

        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        /* Through the pidfd: a PID 1 that is gone (a cell's, whose kernel ended a moment ago) is
         * signalled no more, whatever process has its number now. */
        if (pidref_kill(&e->init, SIGTERM) < 0) {
                (void) pidref_kill(&e->init, SIGKILL);
                return;
        }
        q = sd_event_add_time_relative(e->runner->event, &e->timer_source, CLOCK_MONOTONIC,
                                       2 * SANDBOX_END_GRACE_MS * USEC_PER_MSEC, USEC_PER_MSEC, on_end_grace,
                                       e);
        if (q < 0)
                (void) pidref_kill(&e->init, SIGKILL);
}

static int on_interrupt_grace(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;

        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(e->runner->session_id),
                              strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                   "Cell %s of session %s went on after its interrupt; its kernel ends.", e->exec_id,
                   e->runner->session_id);
        runner_exec_end(e);
        return 0;
}

/* A cell with the Exec option "interrupt": a KeyboardInterrupt first (PID 1 passes our SIGINT on
 * to the kernel), which the kernel survives; the cell is ended as any exec if it goes on past
 * the grace. Returns false when it can't be (another exec, or done already). */
static bool runner_exec_interrupt(RunnerExec *e) {
        int q;

        if (!e->stateful || !e->interrupt || e->interrupted)
                return false;
        e->interrupted = true;
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        if (pidref_kill(&e->init, SIGINT) < 0)
                return false;
        q = sd_event_add_time_relative(e->runner->event, &e->timer_source, CLOCK_MONOTONIC,
                                       RUNNER_INTERRUPT_GRACE_MS * USEC_PER_MSEC, USEC_PER_MSEC,
                                       on_interrupt_grace, e);
        return q >= 0;
}

static int on_exec_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;

        e->timed_out = true;
        if (!runner_exec_interrupt(e))
                runner_exec_end(e);
        return 0;
}

/* The manager's caller hung up: the exec named goes the way a timed-out one does. No answer of its
 * own; the exec's answer follows once it is over. One that is over already (its answer crossed
 * this request) or another exec is left alone. */
int runner_handle_cancel(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerCancelRequest *p = params;
        RunnerExec *e = r->exec;

        if (!e || e->exited || e->cancelled || e->timed_out || !streq(p->exec_id, e->exec_id))
                return 0;
        e->cancelled = true;
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                   "Cancelling exec %s of session %s.", e->exec_id, r->session_id);
        /* As at the timeout: PID 1 takes every process of its namespace along (a cell with
         * "interrupt" gets its KeyboardInterrupt first). */
        if (!runner_exec_interrupt(e))
                runner_exec_end(e);
        return 0;
}

/* Watches the sandbox's pipes, and PID 1 (or, for a cell, its status pipe). */
static int runner_exec_watch(RunnerExec *e) {
        Runner *r = e->runner;
        int q;

        (void) fd_nonblock(e->out.fd, true);
        (void) fd_nonblock(e->err.fd, true);
        (void) fd_nonblock(e->status_fd, true);
        if (e->results.fd >= 0) {
                (void) fd_nonblock(e->results.fd, true);
                q = sd_event_add_io(r->event, &e->results.source, e->results.fd, EPOLLIN, on_results, e);
                if (q < 0)
                        return q;
        }
        if (e->stateful)
                /* No events: the pipe's EPOLLHUP, which epoll always reports. */
                q = sd_event_add_io(r->event, &e->status_source, e->status_fd, 0, on_kernel_status, e);
        else {
                /* Its pidfd polls readable once it ended; we reap it (sd-event's child sources
                 * reap behind their callback, by number). Its report usually comes first. */
                q = sd_event_add_io(r->event, &e->child_source, e->init.fd, EPOLLIN, on_init_exit, e);
                if (q >= 0)
                        q = sd_event_add_io(r->event, &e->status_source, e->status_fd, EPOLLIN, on_status,
                                            e);
        }
        if (q >= 0)
                q = sd_event_add_io(r->event, &e->out.source, e->out.fd, EPOLLIN, on_output, e);
        if (q >= 0)
                q = sd_event_add_io(r->event, &e->err.source, e->err.fd, EPOLLIN, on_output, e);
        return q;
}

/* What an exec's start holds only until its sandbox runs: the profile's own filter and
 * environment, the network's namespaces and pipes, the template's connection. */
typedef struct ExecSetup {
        SandboxLanguage language;
        int filter_fd;                  /* borrowed: the BPF of this exec's profile */
        ProxyEnv proxy;                 /* with a network */
        int ready_pipe[2];              /* slirp4netns says the network is up */
        int net_procs_fd;               /* borrowed: the filtered cgroup slirp4netns joins */
        int userns_fd, netns_fd;
        int template_fd;
} ExecSetup;

#define EXEC_SETUP_NULL                                                                              \
        (ExecSetup) { .language = SANDBOX_PYTHON3, .ready_pipe = { -EBADF, -EBADF },                  \
                      .net_procs_fd = -EBADF, .userns_fd = -EBADF, .netns_fd = -EBADF,                \
                      .template_fd = -EBADF, .filter_fd = -EBADF }

static void exec_setup_done(ExecSetup *x) {
        close_pairp(&x->ready_pipe);
        safe_close(x->userns_fd);
        safe_close(x->netns_fd);
        safe_close(x->template_fd);
}

/* What the request asks of this runner's state and of its profile; an answer when it can't be. */
static int exec_request_check(Runner *r, const RunnerExecRequest *p, int code_fd, bool has_stream,
                              int stdin_fd, ExecSetup *x) {
        struct stat st;

        if (!r->initialized)
                return runner_send_error(r, r->connection_generation, ENOTCONN, "session not initialized");
        if (r->exec)
                return runner_send_error(r, r->connection_generation, EBUSY, "an exec is already running");
        if (code_fd < 0 || fstat(code_fd, &st) < 0 || !S_ISREG(st.st_mode))
                return runner_send_error(r, r->connection_generation, EINVAL, "exec request without code");
        if (p->language && streq(p->language, "nodejs"))
                x->language = SANDBOX_NODEJS;
        else if (p->language && streq(p->language, "command"))
                x->language = SANDBOX_COMMAND;
        else if (p->language && !streq(p->language, "python3"))
                return runner_send_error(r, r->connection_generation, EINVAL,
                                         BUS_MESSAGE_UNSUPPORTED_LANGUAGE);
        /* The kernel is the sidecar's python profile only. */
        if (p->stateful && (x->language != SANDBOX_PYTHON3 || p->no_processes || p->network))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid exec request");
        /* A stdin is a command's, the read end of a pipe. */
        if (p->stdin &&
            (x->language != SANDBOX_COMMAND || !has_stream || stdin_fd < 0 || fstat(stdin_fd, &st) < 0 ||
             !S_ISFIFO(st.st_mode) || (fcntl(stdin_fd, F_GETFL) & O_ACCMODE) != O_RDONLY))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid stdin");
        if (p->interrupt && !p->stateful)
                return runner_send_error(r, r->connection_generation, EINVAL,
                                         "interrupt needs a stateful cell");
        /* Records are a kernel's, and go nowhere but onto the stream. */
        if (p->display && (!p->stateful || !has_stream))
                return runner_send_error(r, r->connection_generation, EINVAL,
                                         "display needs a stateful cell and a stream");
        return 1;
}

/* The filter of this exec's profile (compiled once, by the manager); its proxies with a network. */
static int exec_setup_profile(Runner *r, const RunnerExecRequest *p, ExecSetup *x) {
        x->filter_fd = r->filter_fds[seccomp_profile_of(p->network, p->no_processes)];
        if (p->network)
                proxy_env_build(&x->proxy, p->http_proxy, p->https_proxy);
        return 1;
}

static int runner_exec_new(Runner *r, const RunnerExecRequest *p, int stream_fd, RunnerExec **ret) {
        _cleanup_(runner_exec_freep) RunnerExec *e = NULL;
        int q;

        e = calloc(1, sizeof(RunnerExec));
        if (!e)
                return log_oom();
        *e = (RunnerExec) {
                .runner = r,
                .connection_generation = r->connection_generation,
                .init = PIDREF_NULL,
                .slirp = PIDREF_NULL,
                .slirp_exit_fd = -EBADF,
                .status_fd = -EBADF,
                .code_fd = -EBADF,
                .memory_limit = p->memory_limit,
                .out = { .fd = -EBADF, .limit = (size_t) p->output_limit },
                .err = { .fd = -EBADF, .limit = (size_t) p->output_limit },
                .timeout_ms = p->timeout_ms,
                .limits = { p->max_artifact_bytes, p->max_files, p->max_total_artifact_bytes },
                .started_usec = now_usec(CLOCK_MONOTONIC),
                .oom_kills_before = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_OOM_KILL),
                .pids_max_before = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_PIDS_MAX),
                .stateful = p->stateful,
                .display = p->display,
                .interrupt = p->interrupt,
                .results = RESULT_PIPE_NULL,
        };
        static_assert(sizeof(e->exec_id) > RUNNER_EXEC_ID_MAX, "the exec id fits");
        snprintf(e->exec_id, sizeof(e->exec_id), "%s", p->exec_id);
        if (stream_fd >= 0) {
                q = exec_stream_new(e, stream_fd, &e->stream);
                if (q < 0)
                        return runner_send_error(r, r->connection_generation, -q, "invalid output stream");
        }
        *ret = TAKE_PTR(e);
        return 1;
}

/* outputs/ before the exec: as the last exec left it, unless a file operation changed it since
 * (then walk it again). */
static int runner_exec_snapshot_outputs(RunnerExec *e) {
        Runner *r = e->runner;
        _cleanup_close_ int outputs_fd = -EBADF;
        int q;

        if (r->outputs_snapshot_valid) {
                e->before = r->outputs_snapshot;
                r->outputs_snapshot = (OutputSet) {};
                r->outputs_snapshot_valid = false;
                return 1;
        }
        outputs_fd = openat(r->workspace.fd, "outputs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (outputs_fd >= 0) {
                q = output_set_scan(outputs_fd, &e->before);
                if (q < 0)
                        return runner_send_error(r, r->connection_generation, q, "failed to scan outputs");
        }
        return 1;
}

/* The network's filtered cgroup and namespaces, before the sandbox: never a network without its
 * filter. */
static int exec_setup_network(Runner *r, ExecSetup *x) {
        int q;

        if (pipe2(x->ready_pipe, O_CLOEXEC) < 0)
                return runner_send_error(r, r->connection_generation, errno, "failed to create pipes");
        q = runner_network_cgroup(r);
        if (q < 0) {
                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to set up the network filter, the exec fails: %m");
                return runner_send_error(r, r->connection_generation, q,
                                         "failed to set up the network filter: %s", strerror(-q));
        }
        x->net_procs_fd = q;
        q = runner_network_new(r, &x->userns_fd, &x->netns_fd);
        if (q < 0) {
                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to create the exec's network namespace: %m");
                return runner_send_error(r, r->connection_generation, q,
                                         "failed to create the network namespace");
        }
        return 1;
}

/* A python payload is forked by the template, if it is there; PID 1 starts it cold otherwise. */
static void exec_setup_template(Runner *r, RunnerExec *e, ExecSetup *x, SandboxExec *se) {
        int q;

        q = runner_template_connect(r);
        if (q < 0) {
                e->template_error = -q;
                return;
        }
        x->template_fd = q;
        se->template_fd = x->template_fd;
        se->cgroup_fds = r->template_cgroup_fds;
        se->n_cgroup_fds = r->n_scope_cgroup_fds;
        if (lstat(SCOPEBOX_SITE_PACKAGES_DIR, &se->site) < 0)
                se->site = (struct stat) {};
}

/* A prepared sandbox whose payload died before the code came: nothing of the exec ran; it starts
 * in a sandbox of its own, its timeout still running. */
static int runner_exec_retry_prepared(RunnerExec *e) {
        Runner *r = e->runner;
        _cleanup_(exec_setup_done) ExecSetup x = EXEC_SETUP_NULL;
        /* The profile a prepared sandbox serves is a cell's: the session's python. */
        SandboxExec se = runner_exec_cell(e);
        SandboxProcess sp;
        int q;

        log_struct(LOG_NOTICE, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                   "The prepared sandbox of session %s was lost before exec %s ran; it starts in a new one.",
                   r->session_id, e->exec_id);
        exec_setup_template(r, e, &x, &se);
        q = runner_spawn_sandbox(r, &se, -EBADF, &sp);
        if (q < 0)
                return q;
        e->child_source = sd_event_source_disable_unref(e->child_source);
        runner_reap_later(r, &e->init);
        return runner_exec_rewire(e, &sp, -EBADF);
}

/* PID 1 of the exec's sandbox (or the kernel's next cell), its pipes in 'e'. */
static int runner_exec_spawn(RunnerExec *e, const RunnerExecRequest *p, int code_fd, int stdin_fd,
                             ExecSetup *x) {
        Runner *r = e->runner;
        SandboxExec se;
        SandboxProcess sp;
        int q;

        if (p->stateful) {
                /* Kept for a retry in a new kernel. */
                e->code_fd = fcntl(code_fd, F_DUPFD_CLOEXEC, 3);
                if (e->code_fd < 0)
                        return runner_send_error(r, r->connection_generation, errno,
                                                 "failed to keep the code");
                se = runner_exec_cell(e);
                q = runner_kernel_cell(r, &se, p->display, &sp, &e->results.fd, &e->kernel_new);
        } else {
                se = (SandboxExec) {
                        .code_fd = code_fd,
                        .timeout_ms = e->timeout_ms,
                        .memory_limit = p->memory_limit,
                        .language = x->language,
                        .no_processes = p->no_processes,
                        .extra_env = x->proxy.env,
                        .network_ready_fd = p->network ? x->ready_pipe[0] : -EBADF,
                        .netns_fd = x->netns_fd,
                        .template_fd = -EBADF,
                        .filter_fd = x->filter_fd,
                        .prepared_fd = -EBADF,
                        .has_stdin = p->stdin,
                        .stdin_fd = p->stdin ? stdin_fd : -EBADF,
                };
                if (x->language == SANDBOX_PYTHON3 && !p->cold)
                        exec_setup_template(r, e, x, &se);
                q = runner_spawn_sandbox(r, &se, x->ready_pipe[1], &sp);
        }
        x->template_fd = safe_close(x->template_fd);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, -q, "failed to create the sandbox: %s",
                                         strerror(-q));
        runner_exec_attach(e, &sp);
        return 1;
}

/* The sandbox made for this exec's profile in advance, if there is one (runner-prepared.c), with its
 * network: 1 when the exec runs in it, 0 when it starts its own. */
static int runner_exec_take_prepared(RunnerExec *e, const RunnerExecRequest *p, int code_fd, ExecSetup *x) {
        Runner *r = e->runner;
        SandboxProcess sp;

        if (p->stateful ||
            runner_prepared_take(r, p, x->language, code_fd, &sp, &e->slirp, &e->slirp_exit_fd) <= 0)
                return 0;
        /* Lost before its release, a sandbox of the session's own profile is made anew; one of a
         * run's profile (its filter, its network) is not remade here: the run fails, having run
         * nothing. */
        e->retry_if_lost = !p->no_processes && !p->network;
        runner_exec_attach(e, &sp);
        /* Kept for a new sandbox, should this one turn out lost. */
        e->code_fd = fcntl(code_fd, F_DUPFD_CLOEXEC, 3);
        /* The next exec's, while this one runs. */
        runner_prepare_soon(r);
        return 1;
}

/* slirp4netns plugs a user-mode stack into the sandbox's namespace (no route to the host's
 * loopback) and tells PID 1 when it is up; PID 1 starts the payload only then
 * (runner-network.c). A failure shows as the exec's: its payload never starts. */
static void runner_exec_start_network(RunnerExec *e, ExecSetup *x) {
        int q;

        x->ready_pipe[0] = safe_close(x->ready_pipe[0]);
        q = runner_network_start(x->net_procs_fd, x->userns_fd, x->netns_fd, x->ready_pipe[1], &e->slirp,
                                 &e->slirp_exit_fd);
        x->ready_pipe[1] = safe_close(x->ready_pipe[1]);
        if (q < 0)
                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(e->runner->session_id)),
                           "Failed to start slirp4netns, the exec fails: %m");
}

/* Each step answers the request itself when it fails (returns ≤ 0 then); the exec, once
 * started, is answered by runner_exec_finish(). */
int runner_handle_exec(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerExecRequest *p = params;
        int code_fd = n_fds > 0 ? fds[0] : -EBADF, stream_fd = n_fds > 1 ? fds[1] : -EBADF,
            stdin_fd = p->stdin && n_fds > 2 ? fds[2] : -EBADF;
        _cleanup_(runner_exec_freep) RunnerExec *e = NULL;
        _cleanup_(exec_setup_done) ExecSetup x = EXEC_SETUP_NULL;
        bool taken = false;
        int q;

        q = exec_request_check(r, p, code_fd, stream_fd >= 0, stdin_fd, &x);
        if (q > 0)
                q = exec_setup_profile(r, p, &x);
        if (q > 0)
                q = runner_exec_new(r, p, stream_fd, &e);
        if (q > 0)
                q = runner_exec_snapshot_outputs(e);
        if (q > 0)
                taken = runner_exec_take_prepared(e, p, code_fd, &x);
        if (q > 0 && !taken && p->network)
                q = exec_setup_network(r, &x);
        if (q > 0 && !taken)
                q = runner_exec_spawn(e, p, code_fd, stdin_fd, &x);
        if (q <= 0)
                return q;
        if (p->network && !taken)
                runner_exec_start_network(e, &x);
        x.userns_fd = safe_close(x.userns_fd);
        x.netns_fd = safe_close(x.netns_fd);

        q = runner_exec_watch(e);
        if (q >= 0)
                q = sd_event_add_time_relative(r->event, &e->timer_source, CLOCK_MONOTONIC,
                                               e->timeout_ms * USEC_PER_MSEC, USEC_PER_MSEC, on_exec_timeout,
                                               e);
        if (q < 0) {
                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to watch the sandbox: %m");
                return runner_send_error(r, r->connection_generation, q, "failed to watch the sandbox");
        }

        log_struct(LOG_DEBUG, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                   "Exec %s started, PID 1 of its sandbox is %i.", e->exec_id, (int) e->init.pid);
        r->exec = TAKE_PTR(e);
        return 0;
}
