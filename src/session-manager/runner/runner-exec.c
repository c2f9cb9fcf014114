/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Execs: a sandbox cloned for the code (its payload forked by the template or started cold), its network,
 * its timeout and cancellation, the draining of its output pipes, and the result: exit status, stdout and
 * stderr, the artifacts it left under outputs/ and the limits that struck. */
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

/* Values handed into the sandbox's environment (proxies): one printable line, bounded. */
#define EXEC_ENV_VALUE_MAX 1024

static void output_buffer_done(OutputBuffer *b) {
        b->source = sd_event_source_disable_unref(b->source);
        b->fd = safe_close(b->fd);
        free(b->data);
        *b = (OutputBuffer) { .fd = -EBADF };
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
        } else
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
static int exec_usage_to_json(const RunnerExec *e, const SandboxUsage *u, json_object *reply) {
        json_object *o = json_object_new_object();
        uint64_t cpu_usec, max_rss;
        int jr = 0;

        json_add_checked(reply, "resources", o, &jr);
        if (jr < 0)
                return jr;
        if (u && u->valid) {
                cpu_usec = u->cpu_usec;
                max_rss = u->max_rss_bytes;
        } else if (e->init_rusage_valid) {
                cpu_usec = timeval_load(&e->init_rusage.ru_utime) + timeval_load(&e->init_rusage.ru_stime);
                max_rss = (uint64_t) e->init_rusage.ru_maxrss * 1024U;
        } else
                return 0;
        /* Every figure or none: the reply is checked once, at its end. */
        json_add_checked(o, "cpu_usec", json_object_new_int64((int64_t) MIN(cpu_usec, (uint64_t) INT64_MAX)),
                         &jr);
        json_add_checked(o, "max_rss_bytes",
                         json_object_new_int64((int64_t) MIN(max_rss, (uint64_t) INT64_MAX)), &jr);
        if (u && u->written_valid)
                json_add_checked(
                        o, "written_bytes",
                        json_object_new_int64((int64_t) MIN(u->written_bytes, (uint64_t) INT64_MAX)), &jr);
        if (u && u->tasks_valid)
                json_add_checked(o, "processes",
                                 json_object_new_int64((int64_t) MIN(u->tasks, (uint64_t) INT64_MAX)), &jr);
        return jr;
}

static int runner_exec_watch(RunnerExec *e);

/* What a cell of a stateful session runs, its first time and in a new kernel alike: its code (kept
 * in e->code_fd) in the session's python profile, with nothing of an exec's own (no template, no
 * network, no filter or environment of its own: runner_handle_exec() refuses them for a cell). */
static SandboxExec runner_exec_cell(const RunnerExec *e) {
        return (SandboxExec) {
                .code_fd = e->code_fd,
                .timeout_ms = e->timeout_ms,
                .memory_limit = e->memory_limit,
                .language = SANDBOX_PYTHON3,
                .network_ready_fd = -EBADF,
                .netns_fd = -EBADF,
                .template_fd = -EBADF,
                .filter_fd = -EBADF,
                .seccomp = e->runner->seccomp,
        };
}

/* A cell whose kernel was found dead before it ran, or was ended because it ran between cells
 * ('loss'): a new kernel runs it (runner-kernel.c), in the same RunnerExec, its timeout still
 * running. */
static int runner_exec_retry_cell(RunnerExec *e, SandboxKernelLoss loss) {
        Runner *r = e->runner;
        SandboxExec se = runner_exec_cell(e);
        size_t out_limit = e->out.limit, err_limit = e->err.limit;
        SandboxProcess sp;
        int q;

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
        q = runner_kernel_cell(r, &se, &sp, &e->kernel_new);
        if (q < 0)
                return q;
        e->kernel_retried = true;
        e->exited = false;
        pidref_done(&e->init);
        e->init = sp.init;
        safe_close(e->status_fd);
        e->status_fd = sp.status_fd;
        output_buffer_done(&e->out);
        output_buffer_done(&e->err);
        e->out = (OutputBuffer) { .fd = sp.out_fd, .limit = out_limit };
        e->err = (OutputBuffer) { .fd = sp.err_fd, .limit = err_limit };
        return runner_exec_watch(e);
}

static int runner_exec_finish(RunnerExec *e) {
        Runner *r = e->runner;
        _cleanup_json_ json_object *reply = NULL, *files = NULL;
        _cleanup_free_ OutputEntry **changed = NULL;
        _cleanup_free_ bool *chosen = NULL;
        _cleanup_close_ int data_fd = -EBADF, outputs_fd = -EBADF;
        OutputSet after = {};
        bool scanned = false;
        SandboxStatus st = {};
        int32_t start = SANDBOX_START_COLD;
        const char *reason = "exited";
        _cleanup_free_ char *kernel_note = NULL;
        bool kernel_kept = false;
        size_t n_changed = 0, skipped = 0;
        uint64_t offset;
        int exit_code = 0, sig = 0, q, jr = 0;
        ssize_t k;

        /* What did PID 1 of the sandbox tell us? How the payload started, then how it ended. */
        if (read(e->status_fd, &start, sizeof(start)) == (ssize_t) sizeof(start))
                e->from_template = start == SANDBOX_START_TEMPLATE;
        k = read(e->status_fd, &st, sizeof(st));
        if (k == (ssize_t) sizeof(st) && st.kind == SANDBOX_STATUS_KERNEL_LOST) {
                /* The kernel had died while stopped (the OOM killer, say): nothing of the cell ran.
                 * It runs in a new one, once; its result says "new". */
                if (e->stateful && !e->kernel_retried && !e->timed_out && !e->cancelled) {
                        q = runner_exec_retry_cell(e, st.value == SANDBOX_KERNEL_LOSS_RAN
                                                              ? SANDBOX_KERNEL_LOSS_RAN
                                                              : SANDBOX_KERNEL_LOSS_DIED);
                        if (q >= 0)
                                return 0;
                        log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to start a new kernel: %m");
                }
                e->stream = exec_stream_free(e->stream);
                q = runner_send_error(r, e->connection_generation, ECHILD,
                                      "the session's kernel ended before the cell could run");
                goto done;
        }

        /* The stream ends before the result goes: its reader has every frame when the result comes. */
        e->stream = exec_stream_free(e->stream);
        e->stream_timer = sd_event_source_disable_unref(e->stream_timer);
        if (k == (ssize_t) sizeof(st) && st.kind == SANDBOX_STATUS_SETUP_FAILED) {
                st.step[sizeof(st.step) - 1] = 0;
                log_struct(LOG_ERR, st.value, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Sandbox setup failed at '%s': %m", st.step);
                q = runner_send_error(r, e->connection_generation, st.value,
                                      "sandbox setup failed at %s: %s", st.step, strerror(st.value));
                goto done;
        }

        if (e->timed_out)
                exit_code = 124;
        else if (k == (ssize_t) sizeof(st) && st.kind == SANDBOX_STATUS_EXITED) {
                if (WIFEXITED(st.value))
                        exit_code = WEXITSTATUS(st.value);
                else if (WIFSIGNALED(st.value)) {
                        sig = WTERMSIG(st.value);
                        exit_code = 128 + sig;
                }
        } else {
                /* PID 1 itself died without reporting (killed from outside the sandbox). */
                sig = e->init_info.si_code == CLD_KILLED || e->init_info.si_code == CLD_DUMPED
                              ? e->init_info.si_status
                              : SIGKILL;
                exit_code = 128 + sig;
        }

        reason = exec_exit_reason(
                e, exit_code, sig, k == (ssize_t) sizeof(st) ? st.seccomp.n_calls : 0,
                cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_OOM_KILL) > e->oom_kills_before,
                cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_PIDS_MAX) > e->pids_max_before);
        /* A stateful cell that ended its kernel says so once, on stderr and as "kernel". */
        kernel_kept = e->stateful && k == (ssize_t) sizeof(st) && st.kernel == SANDBOX_KERNEL_KEPT;
        if (e->stateful && !kernel_kept &&
            asprintf(&kernel_note,
                     "%s[sandbox] the kernel ended (%s); the next cell starts a fresh interpreter\n",
                     e->err.size > 0 && e->err.data[e->err.size - 1] != '\n' ? "\n" : "", reason) < 0) {
                q = -ENOMEM;
                goto fail;
        }

        /* Artifacts: files under outputs/ created or changed by this exec. Nothing of the sandbox
         * runs any more (a kernel is stopped), so the tree cannot change while we look at it. */
        outputs_fd = openat(r->workspace.fd, "outputs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (outputs_fd >= 0) {
                q = output_set_scan(outputs_fd, &after);
                if (q < 0)
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to scan outputs, ignoring: %m");
                scanned = q >= 0;
        }
        q = output_set_diff(&e->before, &after, &changed, &n_changed);
        if (q < 0)
                goto fail;
        chosen = calloc(n_changed + 1, sizeof(bool));
        if (!chosen) {
                q = -ENOMEM;
                goto fail;
        }
        skipped = artifacts_select(changed, n_changed, &e->limits, chosen);

        data_fd = memfd_new_empty("exec-result");
        if (data_fd < 0) {
                q = data_fd;
                goto fail;
        }
        q = write_all(data_fd, e->out.data ?: "", e->out.size);
        if (q >= 0)
                q = write_all(data_fd, e->err.data ?: "", e->err.size);
        if (q >= 0 && kernel_note)
                q = write_all(data_fd, kernel_note, strlen(kernel_note));
        if (q < 0)
                goto fail;
        offset = e->out.size + e->err.size + (kernel_note ? strlen(kernel_note) : 0);

        files = json_object_new_array();
        if (!files) {
                q = -ENOMEM;
                goto fail;
        }
        for (size_t i = 0; i < n_changed; i++) {
                _cleanup_close_ int fd = -EBADF;
                json_object *f;
                struct stat sst;

                if (!chosen[i])
                        continue;
                if (!utf8_is_valid_n(changed[i]->path, strlen(changed[i]->path))) {
                        skipped++; /* a name that can't be a JSON string */
                        continue;
                }
                fd = openat_beneath(outputs_fd, changed[i]->path, O_RDONLY | O_NONBLOCK, 0);
                if (fd < 0 || fstat(fd, &sst) < 0 || !S_ISREG(sst.st_mode) ||
                    (uint64_t) sst.st_size != changed[i]->size) {
                        log_struct(LOG_DEBUG, fd < 0 ? fd : 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Artifact '%s' vanished or changed, skipping: %m", changed[i]->path);
                        skipped++;
                        continue;
                }
                q = copy_into(data_fd, offset, fd, changed[i]->size);
                if (q < 0) {
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to read artifact '%s', skipping: %m", changed[i]->path);
                        skipped++;
                        continue;
                }
                f = json_object_new_object();
                if (!f) {
                        q = -ENOMEM;
                        goto fail;
                }
                json_add_checked(f, "path", json_object_new_string(changed[i]->path), &jr);
                json_add_checked(f, "offset", json_object_new_int64((int64_t) offset), &jr);
                json_add_checked(f, "size", json_object_new_int64((int64_t) changed[i]->size), &jr);
                if (jr < 0 || json_object_array_add(files, f) < 0) {
                        json_object_put(f);
                        q = -ENOMEM;
                        goto fail;
                }
                offset += changed[i]->size;
        }
        q = memfd_seal(data_fd);
        if (q < 0)
                goto fail;

        q = runner_reply_new(&reply);
        if (q < 0)
                goto fail;
        json_add_checked(reply, "exit_code", json_object_new_int(exit_code), &jr);
        json_add_checked(reply, "signal", json_object_new_int(sig), &jr);
        json_add_checked(reply, "timed_out", json_object_new_boolean(e->timed_out), &jr);
        if (e->cancelled)
                json_add_checked(reply, "cancelled", json_object_new_boolean(true), &jr);
        json_add_checked(reply, "duration_usec",
                         json_object_new_int64((int64_t) (now_usec(CLOCK_MONOTONIC) - e->started_usec)),
                         &jr);
        json_add_checked(reply, "stdout_size", json_object_new_int64((int64_t) e->out.size), &jr);
        json_add_checked(
                reply, "stderr_size",
                json_object_new_int64((int64_t) (e->err.size + (kernel_note ? strlen(kernel_note) : 0))),
                &jr);
        json_add_checked(reply, "stdout_truncated", json_object_new_boolean(e->out.total > e->out.size),
                         &jr);
        json_add_checked(reply, "stderr_truncated", json_object_new_boolean(e->err.total > e->err.size),
                         &jr);
        json_add_checked(reply, "files", TAKE_PTR(files), &jr);
        json_add_checked(reply, "files_skipped", json_object_new_int64((int64_t) skipped), &jr);
        /* Whether the scope's limits struck during the exec: the OOM killer (which spares the
         * runner), or a fork or thread refused at TasksMax. */
        json_add_checked(
                reply, "oom_killed",
                json_object_new_boolean(cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_OOM_KILL) >
                                        e->oom_kills_before),
                &jr);
        json_add_checked(
                reply, "pids_limited",
                json_object_new_boolean(cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_PIDS_MAX) >
                                        e->pids_max_before),
                &jr);
        json_add_checked(reply, "exit_reason", json_object_new_string(reason), &jr);
        if (e->stateful)
                json_add_checked(reply, "kernel",
                                 json_object_new_string(!kernel_kept    ? "ended"
                                                        : e->kernel_new ? "new"
                                                                        : "running"),
                                 &jr);
        q = jr < 0 ? jr : exec_usage_to_json(e, k == (ssize_t) sizeof(st) ? &st.usage : NULL, reply);
        if (q < 0)
                goto fail;
        if (k == (ssize_t) sizeof(st)) {
                q = seccomp_report_to_json(&st.seccomp, reply);
                if (q < 0)
                        goto fail;
                if (st.seccomp.n_calls > 0) {
                        _cleanup_free_ char *calls = seccomp_report_format(&st.seccomp);
                        log_struct(LOG_INFO, 0,
                                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                              strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                                   "Exec %s: the sandbox refused %s.", e->exec_id,
                                   calls ?: "some system calls");
                }
        }

        if (k == (ssize_t) sizeof(st) && st.template_error != 0)
                e->template_error = st.template_error;
        if (e->template_error != 0 && e->template_error != EOPNOTSUPP)
                log_struct(LOG_DEBUG, e->template_error,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                      strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                           "Exec %s started cold: the template did not answer (%m).", e->exec_id);
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id),
                              e->from_template ? "SCOPEBOX_EXEC_START=template" : "SCOPEBOX_EXEC_START=cold",
                              strjoina("SCOPEBOX_EXIT_REASON=", e->orphaned ? "orphaned" : reason)),
                   "Exec %s finished with exit code %i%s after %llu ms.", e->exec_id, exit_code,
                   e->timed_out ? " (timed out)" : e->cancelled ? " (cancelled)" :
                   e->orphaned ? " (orphaned)" : "",
                   (unsigned long long) ((now_usec(CLOCK_MONOTONIC) - e->started_usec) / 1000));
        if (e->timed_out || sig) {
                const char *killed = e->orphaned ? "orphaned" : reason;
                char signal_field[32];

                snprintf(signal_field, sizeof(signal_field), "SCOPEBOX_SIGNAL=%i", sig);
                log_struct(LOG_NOTICE, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id),
                                      strjoina("SCOPEBOX_EXEC_ID=", e->exec_id),
                                      strjoina("SCOPEBOX_EXIT_REASON=", killed), signal_field,
                                      SCOPEBOX_MESSAGE_EXEC_KILLED),
                           "Exec %s of session %s was killed (%s).", e->exec_id, r->session_id, killed);
        }

        q = runner_send(r, e->connection_generation, reply, &data_fd, 1);
        goto done;

fail:
        log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                   "Failed to collect the exec's results: %m");
        q = runner_send_error(r, e->connection_generation, q, "failed to collect results: %s", strerror(-q));
done:
        /* A kernel that did not survive its cell (or whose sandbox never started) is gone now,
         * before the next cell could be handed to it. */
        if (e->stateful && !kernel_kept)
                runner_kernel_stop(r);
        /* What the next exec compares with. */
        output_set_done(&r->outputs_snapshot);
        r->outputs_snapshot = after;
        r->outputs_snapshot_valid = scanned;
        r->exec = runner_exec_free(r->exec);
        runner_resume_connection(r);
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
        if (!e->exited || e->out.source || e->err.source)
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
}

void runner_exec_stream_progress(RunnerExec *e) {
        if (e->output_paused && exec_stream_pending(e->stream) <= STREAM_PENDING_MAX / 2)
                runner_exec_pause_output(e, false);
        runner_exec_maybe_finish(e);
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
                if (b->size < b->limit) {
                        size_t take = MIN((size_t) k, b->limit - b->size);
                        if (!b->data) {
                                b->data = malloc(b->limit);
                                if (!b->data)
                                        return log_oom();
                        }
                        memcpy(b->data + b->size, buf, take);
                        b->size += take;
                        (void) exec_stream_push(
                                e->stream, b == &e->out ? STREAM_FRAME_STDOUT : STREAM_FRAME_STDERR, take);
                }
                b->total += (uint64_t) k;
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

static int on_drain_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;
        /* Writers can't outlive PID 1, but never let a stuck pipe hold the session forever. */
        e->out.source = sd_event_source_disable_unref(e->out.source);
        e->err.source = sd_event_source_disable_unref(e->err.source);
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

/* PID 1 of a stateless sandbox ended: its pidfd polls readable. */
static int on_init_exit(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerExec *e = userdata;
        int q;

        q = runner_exec_reap_init(e, &e->init);
        if (q == 0)
                return 0;
        e->exited = true;
        e->child_source = sd_event_source_disable_unref(e->child_source);
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
        for (size_t i = 0; i < ELEMENTSOF(bufs); i++) {
                while (bufs[i]->source && ioctl(bufs[i]->fd, FIONREAD, &n) >= 0 && n > 0)
                        (void) on_output(bufs[i]->source, bufs[i]->fd, EPOLLIN, e);
                bufs[i]->source = sd_event_source_disable_unref(bufs[i]->source);
                bufs[i]->fd = safe_close(bufs[i]->fd);
        }
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

static int on_exec_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;

        e->timed_out = true;
        runner_exec_end(e);
        return 0;
}

/* The manager's caller hung up: the exec named goes the way a timed-out one does. No answer of its
 * own; the exec's answer follows once it is over. One that is over already (its answer crossed
 * this request) or another exec is left alone. */
void runner_handle_cancel(Runner *r, json_object *req) {
        RunnerExec *e = r->exec;
        json_object *v;

        if (!e || e->exited || e->cancelled || e->timed_out ||
            !json_object_object_get_ex(req, "exec_id", &v) || !json_object_is_type(v, json_type_string) ||
            !streq(json_object_get_string(v), e->exec_id))
                return;
        e->cancelled = true;
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                   "Cancelling exec %s of session %s.", e->exec_id, r->session_id);
        /* As at the timeout: PID 1 takes every process of its namespace along. */
        runner_exec_end(e);
}

int sandbox_pipes_open(SandboxPipes *p) {
        _cleanup_(sandbox_pipes_close) SandboxPipes n = SANDBOX_PIPES_NULL;

        if (pipe2(n.out, O_CLOEXEC) < 0 || pipe2(n.err, O_CLOEXEC) < 0 || pipe2(n.status, O_CLOEXEC) < 0)
                return -errno;
        *p = n;
        n = SANDBOX_PIPES_NULL;
        return 0;
}

void sandbox_pipes_close(SandboxPipes *p) {
        close_pairp(&p->out);
        close_pairp(&p->err);
        close_pairp(&p->status);
}

SandboxProcess sandbox_pipes_take(SandboxPipes *p, PidRef *init) {
        SandboxProcess sp = {
                .init = *init,
                .out_fd = TAKE_FD(p->out[0]),
                .err_fd = TAKE_FD(p->err[0]),
                .status_fd = TAKE_FD(p->status[0]),
        };

        *init = PIDREF_NULL;
        return sp;
}

/* Creates the pipes of a sandbox, fills in what every sandbox of the session shares and clones
 * PID 1 of a new one, which runs 'se'. 'parent_only_fd' (or -EBADF) is closed in the child. */
int runner_spawn_sandbox(Runner *r, SandboxExec *se, int parent_only_fd, SandboxProcess *ret) {
        _cleanup_(sandbox_pipes_close) SandboxPipes pipes = SANDBOX_PIPES_NULL;
        PidRef init = PIDREF_NULL;
        int q;

        q = sandbox_pipes_open(&pipes);
        if (q < 0)
                return q;

        se->session_root = r->session_root;
        se->stdout_fd = pipes.out[1];
        se->stderr_fd = pipes.err[1];
        se->status_fd = pipes.status[1];
        se->uid = r->uid;
        se->gid = r->gid;
        /* No file can be larger than both filesystems together: a backstop only, so that hitting
         * a quota gives ENOSPC from the filesystem, not EFBIG. */
        se->fsize_limit = r->workspace_size + r->tmp_size;
        se->cpus_percent = r->cpus_percent;

        /* fork()-like clone into new namespaces: the child starts as PID 1 of its namespace. With a
         * network, in the network namespace made for it (sandbox_run_init() joins it). */
        q = pidref_clone(SANDBOX_CLONE_FLAGS & ~(se->netns_fd >= 0 ? CLONE_NEWNET : 0UL), &init);
        if (q < 0)
                return q;
        if (q == 0) {
                safe_close(pipes.out[0]);
                safe_close(pipes.err[0]);
                safe_close(pipes.status[0]);
                safe_close(parent_only_fd);
                sandbox_run_init(se);
        }
        *ret = sandbox_pipes_take(&pipes, &init);
        return 0;
}

/* Watches the sandbox's pipes, and PID 1 (or, for a cell, its status pipe). */
static int runner_exec_watch(RunnerExec *e) {
        Runner *r = e->runner;
        int q;

        (void) fd_nonblock(e->out.fd, true);
        (void) fd_nonblock(e->err.fd, true);
        (void) fd_nonblock(e->status_fd, true);
        if (e->stateful)
                /* No events: the pipe's EPOLLHUP, which epoll always reports. */
                q = sd_event_add_io(r->event, &e->status_source, e->status_fd, 0, on_kernel_status, e);
        else
                /* Its pidfd polls readable once it ended; we reap it (sd-event's child sources
                 * reap behind their callback, by number). */
                q = sd_event_add_io(r->event, &e->child_source, e->init.fd, EPOLLIN, on_init_exit, e);
        if (q >= 0)
                q = sd_event_add_io(r->event, &e->out.source, e->out.fd, EPOLLIN, on_output, e);
        if (q >= 0)
                q = sd_event_add_io(r->event, &e->err.source, e->err.fd, EPOLLIN, on_output, e);
        return q;
}

int runner_handle_exec(Runner *r, json_object *req, int code_fd, int stream_fd) {
        struct {
                const char *exec_id, *language, *http_proxy, *https_proxy;
                int64_t timeout_ms, output_limit, max_file, max_files, max_total, memory_limit;
                bool no_processes, network, cold, stateful;
        } p = {};
        static const JsonField fields[] = {
                { "exec_id", JSON_FIELD_STRING, offsetof(typeof(p), exec_id), JSON_MANDATORY },
                { "language", JSON_FIELD_STRING, offsetof(typeof(p), language), 0 },
                { "no_processes", JSON_FIELD_BOOL, offsetof(typeof(p), no_processes), 0 },
                { "network", JSON_FIELD_BOOL, offsetof(typeof(p), network), 0 },
                { "cold", JSON_FIELD_BOOL, offsetof(typeof(p), cold), 0 },
                { "stateful", JSON_FIELD_BOOL, offsetof(typeof(p), stateful), 0 },
                { "http_proxy", JSON_FIELD_STRING, offsetof(typeof(p), http_proxy), 0 },
                { "https_proxy", JSON_FIELD_STRING, offsetof(typeof(p), https_proxy), 0 },
                { "memory_limit", JSON_FIELD_INT64, offsetof(typeof(p), memory_limit), 0 },
                { "timeout_ms", JSON_FIELD_INT64, offsetof(typeof(p), timeout_ms), JSON_MANDATORY },
                { "output_limit", JSON_FIELD_INT64, offsetof(typeof(p), output_limit), JSON_MANDATORY },
                { "max_artifact_bytes", JSON_FIELD_INT64, offsetof(typeof(p), max_file), JSON_MANDATORY },
                { "max_files", JSON_FIELD_INT64, offsetof(typeof(p), max_files), JSON_MANDATORY },
                { "max_total_artifact_bytes", JSON_FIELD_INT64, offsetof(typeof(p), max_total),
                  JSON_MANDATORY },
                {},
        };
        _cleanup_(runner_exec_freep) RunnerExec *e = NULL;
        _cleanup_close_pair_ int ready_pipe[2] = { -EBADF, -EBADF };
        _cleanup_close_ int outputs_fd = -EBADF, template_fd = -EBADF, exec_filter_fd = -EBADF;
        _cleanup_close_ int userns_fd = -EBADF, netns_fd = -EBADF;
        int net_procs_fd = -EBADF;
        SandboxExec se;
        SandboxProcess sp;
        _cleanup_(seccomp_releasep) scmp_filter_ctx filter = NULL;
        _cleanup_free_ char *http_proxy = NULL, *https_proxy = NULL;
        char *extra_env[3] = {};
        size_t n_env = 0;
        SandboxLanguage language = SANDBOX_PYTHON3;
        JsonDispatchError jerr;
        struct stat st;
        int q;

        if (!r->initialized)
                return runner_send_error(r, r->connection_generation, ENOTCONN, "session not initialized");
        if (r->exec)
                return runner_send_error(r, r->connection_generation, EBUSY, "an exec is already running");
        if (code_fd < 0 || fstat(code_fd, &st) < 0 || !S_ISREG(st.st_mode))
                return runner_send_error(r, r->connection_generation, EINVAL, "exec request without code");
        q = json_dispatch(req, fields, &p, &jerr);
        if (q < 0 || p.timeout_ms <= 0 || p.output_limit <= 0 || p.output_limit > (64 << 20) ||
            p.max_file < 0 || p.max_files < 0 || p.max_total < 0 ||
            strlen(p.exec_id) >= sizeof(e->exec_id) || p.memory_limit < 0 ||
            !string_is_printable_line(p.http_proxy, EXEC_ENV_VALUE_MAX) ||
            !string_is_printable_line(p.https_proxy, EXEC_ENV_VALUE_MAX))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid exec request");
        if (p.language && streq(p.language, "nodejs"))
                language = SANDBOX_NODEJS;
        else if (p.language && !streq(p.language, "python3"))
                return runner_send_error(r, r->connection_generation, EINVAL, "unsupported language");
        /* The kernel is the sidecar's python profile only. */
        if (p.stateful && (language != SANDBOX_PYTHON3 || p.no_processes || p.network))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid exec request");

        /* The session's filter, or one for this exec's profile. */
        if (p.no_processes || p.network) {
                q = seccomp_policy_build(
                        &(SeccompOptions) { .allow_inet = p.network, .no_processes = p.no_processes },
                        &filter);
                if (q < 0)
                        return runner_send_error(r, r->connection_generation, q,
                                                 "failed to build the seccomp filter");
        }
        if (p.network && !isempty(p.http_proxy)) {
                if (asprintf(&http_proxy, "HTTP_PROXY=%s", p.http_proxy) < 0)
                        return log_oom();
                extra_env[n_env++] = http_proxy;
        }
        if (p.network && !isempty(p.https_proxy)) {
                if (asprintf(&https_proxy, "HTTPS_PROXY=%s", p.https_proxy) < 0)
                        return log_oom();
                extra_env[n_env++] = https_proxy;
        }

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
                .memory_limit = (uint64_t) p.memory_limit,
                .out = { .fd = -EBADF, .limit = (size_t) p.output_limit },
                .err = { .fd = -EBADF, .limit = (size_t) p.output_limit },
                .timeout_ms = (uint64_t) p.timeout_ms,
                .limits = { (uint64_t) p.max_file, (uint64_t) p.max_files, (uint64_t) p.max_total },
                .started_usec = now_usec(CLOCK_MONOTONIC),
                .oom_kills_before = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_OOM_KILL),
                .pids_max_before = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_PIDS_MAX),
        };
        snprintf(e->exec_id, sizeof(e->exec_id), "%s", p.exec_id);
        if (stream_fd >= 0) {
                q = exec_stream_new(e, stream_fd, &e->stream);
                if (q < 0)
                        return runner_send_error(r, r->connection_generation, -q, "invalid output stream");
        }

        /* outputs/ before the exec: as the last exec left it, unless a file operation changed
         * it since (then walk it again). */
        if (r->outputs_snapshot_valid) {
                e->before = r->outputs_snapshot;
                r->outputs_snapshot = (OutputSet) {};
                r->outputs_snapshot_valid = false;
        } else {
                outputs_fd =
                        openat(r->workspace.fd, "outputs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (outputs_fd >= 0) {
                        q = output_set_scan(outputs_fd, &e->before);
                        if (q < 0)
                                return runner_send_error(r, r->connection_generation, q,
                                                         "failed to scan outputs");
                }
        }

        if (p.network && pipe2(ready_pipe, O_CLOEXEC) < 0)
                return runner_send_error(r, r->connection_generation, errno, "failed to create pipes");
        if (p.network) {
                /* Never a network without its filter. */
                q = runner_network_cgroup(r);
                if (q < 0) {
                        log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to set up the network filter, the exec fails: %m");
                        return runner_send_error(r, r->connection_generation, q,
                                                 "failed to set up the network filter: %s", strerror(-q));
                }
                net_procs_fd = q;
                q = runner_network_new(r, &userns_fd, &netns_fd);
                if (q < 0) {
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to create the exec's network namespace: %m");
                        return runner_send_error(r, r->connection_generation, q,
                                                 "failed to create the network namespace");
                }
        }

        e->stateful = p.stateful;
        if (p.stateful) {
                /* Kept for a retry in a new kernel. */
                e->code_fd = fcntl(code_fd, F_DUPFD_CLOEXEC, 3);
                if (e->code_fd < 0)
                        return runner_send_error(r, r->connection_generation, errno,
                                                 "failed to keep the code");
                se = runner_exec_cell(e);
        } else
                se = (SandboxExec) {
                        .code_fd = code_fd,
                        .timeout_ms = e->timeout_ms,
                        .memory_limit = (uint64_t) p.memory_limit,
                        .language = language,
                        .no_processes = p.no_processes,
                        .extra_env = extra_env,
                        .network_ready_fd = p.network ? ready_pipe[0] : -EBADF,
                        .netns_fd = netns_fd,
                        .template_fd = -EBADF,
                        .filter_fd = -EBADF,
                        .seccomp = filter ?: r->seccomp,
                };
        /* A python payload is forked by the template, if it is there; PID 1 starts it cold
         * otherwise. */
        if (language == SANDBOX_PYTHON3 && !p.cold && !p.stateful) {
                q = runner_template_connect(r);
                if (q >= 0 && filter) {
                        /* This exec's own filter (the dify profile, a network), as BPF. */
                        int k = runner_filter_bpf(filter, &exec_filter_fd);
                        if (k < 0) {
                                safe_close(q);
                                q = k;
                        }
                }
                if (q >= 0) {
                        template_fd = q;
                        se.template_fd = template_fd;
                        se.cgroup_fds = r->template_cgroup_fds;
                        se.n_cgroup_fds = r->n_template_cgroup_fds;
                        se.filter_fd = filter ? exec_filter_fd : r->template_filter_fd;
                        if (lstat(SCOPEBOX_SITE_PACKAGES_DIR, &se.site) < 0)
                                se.site = (struct stat) {};
                } else
                        e->template_error = -q;
        }
        if (p.stateful)
                q = runner_kernel_cell(r, &se, &sp, &e->kernel_new);
        else
                q = runner_spawn_sandbox(r, &se, ready_pipe[1], &sp);
        template_fd = safe_close(template_fd);
        exec_filter_fd = safe_close(exec_filter_fd);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, -q, "failed to create the sandbox: %s",
                                         strerror(-q));
        e->init = sp.init;
        e->out.fd = sp.out_fd;
        e->err.fd = sp.err_fd;
        e->status_fd = sp.status_fd;

        /* The network, for an exec that may have one: slirp4netns plugs a user-mode stack into
         * the sandbox's namespace (no route to the host's loopback) and tells PID 1 when it is
         * up; PID 1 starts the payload only then (runner-network.c). */
        if (p.network) {
                ready_pipe[0] = safe_close(ready_pipe[0]);
                q = runner_network_start(net_procs_fd, userns_fd, netns_fd, ready_pipe[1], &e->slirp,
                                         &e->slirp_exit_fd);
                ready_pipe[1] = safe_close(ready_pipe[1]);
                if (q < 0)
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to start slirp4netns, the exec fails: %m");
        }
        userns_fd = safe_close(userns_fd);
        netns_fd = safe_close(netns_fd);

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
